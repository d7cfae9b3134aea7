"""Stack policy for the run watchdog's account: it holds no more than
`roles/datastore.user` conditioned to its own database (its DEDUP_WATCH_DATABASE: its
cursors and the re-run queue) and `roles/datastore.viewer` conditioned to the databases of
run records it reads (its DEDUP_DATABASE, the proxy's, each runtime's).

The watchdog (policies/kit_resources.py) reads the run records and writes only its cursors
and the re-run requests' status, in a database of its own: job code can write the dedup
database, and would blind the watchdog or have it deliver runs. A watchdog without
DEDUP_WATCH_DATABASE (before it had a database of its own) keeps both in DEDUP_DATABASE and
may hold the user role there. As a function of the kit, the other policies apply to it as
well (its own service account: policies/accounts.py; dedicated accounts, internal ingress,
DEDUP_ALLOWED_CALLERS, invoker on its service only); who writes each database is
dedup-database-writers'.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from policies.facts import stack_facts
from policies.gcp import type_module
from policies.grants import (
    DATASTORE_USER,
    DATASTORE_VIEWER,
    RUN_INVOKER,
    SECRET_ACCESSOR,
    condition_database,
    single_database_problem,
)
from policies.kit_resources import (
    QUEUE_ENV,
    RecordsDatabase,
    delivers_runs,
    environment,
    has_own_database,
    label,
    own_database,
    records_database,
    runtime_email,
    same_secret,
    secret_of,
)
from policies.model import Finding, Resource
from policies.reach import grant_secret
from policies.team_services import service_not_known
from policies.values import as_list, as_mapping, get, is_unknown, known_str

TASKS_ENQUEUER: Final = "roles/cloudtasks.enqueuer"
TASKS_VIEWER: Final = "roles/cloudtasks.viewer"  # GetTask: an existing task is read back
TASK_KEY_ENV: Final = "DEDUP_WATCH_TASK_KEY"  # the secret env var of its task key
SA_USER: Final = "roles/iam.serviceAccountUser"


# --- dedup-watchdog-least-privilege -----------------------------------------------------

ALLOWED_TEXT: Final = (
    f"{DATASTORE_USER} on its own database (DEDUP_WATCH_DATABASE), {DATASTORE_VIEWER} on "
    "the dedup, the proxy's, each runtime's and each team service's database, each "
    "conditioned to that one database; when it delivers runs, run.invoker on the kit's "
    f"services and the declared team Cloud Run services, {TASKS_ENQUEUER} on the queue its "
    "DEDUP_WATCH_QUEUE names and "
    f"{SA_USER} on its own account"
)


def _own_queue_grant(watchdog: Resource, grant: Resource, role: str, email: str) -> bool:
    """The two grants its deliveries through Cloud Tasks need, on the narrowest resource:
    enqueuer on the one queue its DEDUP_WATCH_QUEUE names, and serviceAccountUser (actAs,
    to have its tasks carry its own OIDC token) on its own account, nobody else's."""
    if role == SECRET_ACCESSOR and (on := grant_secret(grant)) is not None:
        keys = [secret_of(str(get(e, "secret")), known_str(get(e, "projectId")) or
                          known_str(get(watchdog.props, "project")))
                for e in as_list(get(watchdog.props, "serviceConfig",
                                     "secretEnvironmentVariables")) or []
                if get(e, "key") == TASK_KEY_ENV and known_str(get(e, "secret"))]
        return any(same_secret(on, key) for key in keys)
    if role in (TASKS_ENQUEUER, TASKS_VIEWER) and grant.type.startswith(
            "gcp:cloudtasks/queueIam"):
        queue = get(as_mapping(environment(watchdog)) or {}, QUEUE_ENV)
        named = (f"projects/{get(grant.props, 'project')}/locations/"
                 f"{get(grant.props, 'location')}/queues/{get(grant.props, 'name')}")
        return isinstance(queue, str) and named == queue
    if role == SA_USER and grant.type.startswith("gcp:serviceaccount/iAM"):
        account = get(grant.props, "serviceAccountId")
        return isinstance(account, str) and account.rsplit("/", 1)[-1].lower() == email.lower()
    return False


def _viewer_problem(
    named: Any, others: Sequence[RecordsDatabase | None], records: RecordsDatabase | None
) -> str | None:
    """Why the watchdog's roles/datastore.viewer, conditioned to database `named`, reads
    neither its DEDUP_DATABASE's records nor those of a proxy or a runtime (`others`, their
    databases, None while not known); None if it does, or is not known yet."""
    if records is not None and isinstance(named, str) and records.named_by(named):
        return None  # the dedup function's records
    if not others:
        return (
            f"{DATASTORE_VIEWER} is granted but the stack has no proxy, runtime or team "
            "service, whose records it reads: remove it"
        )
    if not isinstance(named, str) or any(d is None or d.named_by(named) for d in others):
        return None
    return (
        f"{DATASTORE_VIEWER} names database {named!r}, which is no proxy's, runtime's or "
        f"team service's database ({', '.join(str(d) for d in others)}): remove it, or set "
        "its condition to the database of the records it reads"
    )


def _user_problem(named: Any, own: RecordsDatabase | None) -> str | None:
    """Why the watchdog's roles/datastore.user, conditioned to database `named`, is not on
    its own database (when it names one); None if it is, or is not known yet."""
    if own is None or not isinstance(named, str) or own.named_by(named):
        return None
    return (
        f"{DATASTORE_USER} names database {named!r}, not its own database {str(own)!r} "
        "(DEDUP_WATCH_DATABASE), the only one it writes (its cursors, the re-run queue): "
        f"set its condition to its own database, and read the run records with "
        f"{DATASTORE_VIEWER}; job code writing where the watchdog writes could blind it or "
        "have it deliver runs"
    )


def least_privilege(resources: Sequence[Resource]) -> list[Finding]:
    """The watchdog's account holds roles/datastore.user on its own database (its cursors
    and re-run queue live there: DEDUP_WATCH_DATABASE; without one, DEDUP_DATABASE) and
    roles/datastore.viewer on the databases of run records it reads (its DEDUP_DATABASE,
    the proxy's, each runtime's), each conditioned to one database, and nothing else; a
    watchdog that delivers runs also roles/run.invoker on Cloud Run services (one service each:
    iam-no-project-level-invoker covers the rest). Which databases the roles name:
    dedup-database-writers and dedup-proxy-own-database."""
    findings: list[Finding] = []
    facts = stack_facts(resources)
    # The other databases of run records it reads: the proxies', the runtimes' and the
    # team services'.
    others = [records_database(p) for p in facts.proxy_functions] + [
        r.database for r in facts.runtimes] + [s.database for s in facts.team_services]
    for watchdog in facts.watchdog_functions:
        email = runtime_email(watchdog)
        if email is None:
            continue  # not known yet: the grants cannot be attributed to the watchdog
        prefix = f"the watchdog's account {email} ({label(watchdog)})"
        delivers = delivers_runs(watchdog)
        own, records = own_database(watchdog), records_database(watchdog)
        for resource, role, grant in facts.roles_held(email):
            if (delivers or is_unknown(environment(watchdog))) and role == RUN_INVOKER and (
                    facts.called_service(resource) or service_not_known(resource)):
                continue  # its tasks carry its token to the kit's functions, team services
            if delivers and _own_queue_grant(watchdog, resource, role, email):
                continue
            if role not in (DATASTORE_USER, DATASTORE_VIEWER):
                findings.append(
                    Finding(
                        f"{prefix}: {role} is not a role the watchdog needs: remove it "
                        f"(allowed: only {ALLOWED_TEXT})",
                        resource.urn,
                    )
                )
                continue
            if type_module(resource.type) in ("folder", "organizations"):
                findings.append(
                    Finding(
                        f"{prefix}: {role} is granted at folder or organization level, "
                        "across every project: grant it in the database's project, "
                        "conditioned to that database",
                        resource.urn,
                    )
                )
                continue
            viewer = role == DATASTORE_VIEWER
            database = "a database of run records" if viewer else (
                "its own database" if has_own_database(watchdog) else "the dedup database")
            problem = single_database_problem(role, grant.condition, database)
            named = condition_database(grant.condition)
            if problem is None and viewer:
                besides = [d for d in others
                           if d is None or records is None or not d.same_as(records)]
                problem = _viewer_problem(named, besides, records)
            elif problem is None:
                problem = _user_problem(named, own)
            if problem is not None:
                findings.append(Finding(f"{prefix}: {problem}", resource.urn))
    return findings

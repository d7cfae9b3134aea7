"""Stack policies for the run watchdog: it runs as its own service account, and that account
holds no more than `roles/datastore.user` conditioned to its own database (its
DEDUP_WATCH_DATABASE: its cursors and the re-run queue) and `roles/datastore.viewer`
conditioned to the databases of run records it reads (its DEDUP_DATABASE, the proxy's).

The watchdog is the `gcp:cloudfunctionsv2/function:Function` with the entry point
`watch_scheduled_runs`, or with a DEDUP_WATCH_* setting in its environment (its job list
travels in its source archive, function/dedup/tables.py). It reads the run records and
writes only its cursors and the re-run requests' status, in a database of its own: job code
can write the dedup database, and would blind the watchdog or have it deliver runs. A
watchdog without DEDUP_WATCH_DATABASE (before it had a database of its own) keeps both in
DEDUP_DATABASE and may hold the user role there. As a function of the kit, the other
policies apply to it as well (dedicated accounts, internal ingress, DEDUP_ALLOWED_CALLERS,
invoker on its service only); who writes each database is dedup-database-writers'.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from policies.function import RecordsDatabase, database_id, records_database
from policies.gcp import (
    FUNCTION_V2,
    WATCH_SETTINGS_PREFIX,
    WATCHDOG_ENTRY_POINT,
    type_module,
)
from policies.iam import (
    DATASTORE_USER,
    DATASTORE_VIEWER,
    condition_database,
    single_database_problem,
)
from policies.model import Finding, Resource
from policies.proxy import (
    RUN_INVOKER,
    _label,
    _runtime_email,
    functions_own_their_accounts,
    proxy_functions,
    roles_held,
)
from policies.values import MISSING, as_mapping, get, known_str

# Set when the watchdog delivers runs (function/dedup/watchdog/delivery.py): to the dedup function,
# and to the proxy (its proxied jobs', function/dedup/watchdog/settings.py).
TARGET_URL_ENV = "DEDUP_WATCH_TARGET_URL"
PROXY_URL_ENV = "DEDUP_WATCH_PROXY_URL"
# Its deliveries' Cloud Tasks queue and the account whose OIDC token the tasks carry
# (function/dedup/watchdog/cloud_tasks.py).
QUEUE_ENV = "DEDUP_WATCH_QUEUE"
# Its own database: its cursors and the re-run queue (function/dedup/watchdog/settings.py).
WATCH_DATABASE_ENV = "DEDUP_WATCH_DATABASE"
TASKS_ENQUEUER: Final = "roles/cloudtasks.enqueuer"
SA_USER: Final = "roles/iam.serviceAccountUser"


def _env(function: Resource) -> Any:
    return get(function.props, "serviceConfig", "environmentVariables")


def is_watchdog_function(resource: Resource) -> bool:
    if resource.type != FUNCTION_V2:
        return False
    if get(resource.props, "buildConfig", "entryPoint") == WATCHDOG_ENTRY_POINT:
        return True
    env = as_mapping(_env(resource))
    return env is not None and any(str(k).startswith(WATCH_SETTINGS_PREFIX) for k in env)


def watchdog_functions(resources: Sequence[Resource]) -> list[Resource]:
    return [r for r in resources if is_watchdog_function(r)]


def has_own_database(watchdog: Resource) -> bool:
    """It names a database of its own (DEDUP_WATCH_DATABASE), known or not yet."""
    env = as_mapping(_env(watchdog))
    value = get(env, WATCH_DATABASE_ENV) if env is not None else MISSING
    return value is not MISSING and value != ""


def own_database(watchdog: Resource) -> RecordsDatabase | None:
    """Its DEDUP_WATCH_DATABASE (in its DEDUP_PROJECT); None if unset or not known yet."""
    env = as_mapping(_env(watchdog))
    if env is None or not has_own_database(watchdog):
        return None
    name = known_str(database_id(get(env, WATCH_DATABASE_ENV)))
    records = records_database(watchdog)
    if name is None or records is None:
        return None
    return RecordsDatabase(records.project, name)


def delivers_runs(watchdog: Resource) -> bool:
    """A watchdog that delivers runs itself (catch-up, operator re-runs): infra gives it
    DEDUP_WATCH_TARGET_URL (the dedup function's) or DEDUP_WATCH_PROXY_URL (the proxy's)."""
    env = as_mapping(_env(watchdog))
    return env is not None and (TARGET_URL_ENV in env or PROXY_URL_ENV in env)


def delivering_accounts(resources: Sequence[Resource]) -> set[str]:
    """The runtime accounts of the watchdogs that deliver runs: allowed callers of the
    functions they deliver to (dedup-allowed-callers), with run.invoker on those services."""
    found = {_runtime_email(w) for w in watchdog_functions(resources) if delivers_runs(w)}
    return {email for email in found if email is not None}


# --- dedup-watchdog-own-service-account -------------------------------------------------


def own_service_account(resources: Sequence[Resource]) -> list[Finding]:
    return functions_own_their_accounts(
        watchdog_functions(resources), resources, what="watchdog",
        why="which holds only roles/datastore.user on the dedup database (and "
        "roles/datastore.viewer on the proxy's)",
        invoker_hint="use the stack's invoker account, which holds only roles/run.invoker on "
        "the kit's services",
    )


# --- dedup-watchdog-least-privilege -----------------------------------------------------

ALLOWED_TEXT: Final = (
    f"{DATASTORE_USER} on its own database (DEDUP_WATCH_DATABASE), {DATASTORE_VIEWER} on "
    "the dedup and the proxy's database, each conditioned to that one database; when it "
    "delivers runs, run.invoker on the "
    f"kit's services, {TASKS_ENQUEUER} on the queue its DEDUP_WATCH_QUEUE names and "
    f"{SA_USER} on its own account"
)


def _own_queue_grant(watchdog: Resource, grant: Resource, role: str, email: str) -> bool:
    """The two grants its deliveries through Cloud Tasks need, on the narrowest resource:
    enqueuer on the one queue its DEDUP_WATCH_QUEUE names, and serviceAccountUser (actAs,
    to have its tasks carry its own OIDC token) on its own account, nobody else's."""
    if role == TASKS_ENQUEUER and grant.type.startswith("gcp:cloudtasks/queueIam"):
        queue = get(as_mapping(_env(watchdog)) or {}, QUEUE_ENV)
        named = (f"projects/{get(grant.props, 'project')}/locations/"
                 f"{get(grant.props, 'location')}/queues/{get(grant.props, 'name')}")
        return isinstance(queue, str) and named == queue
    if role == SA_USER and grant.type.startswith("gcp:serviceaccount/iAM"):
        account = get(grant.props, "serviceAccountId")
        return isinstance(account, str) and account.rsplit("/", 1)[-1].lower() == email.lower()
    return False


def _viewer_problem(
    named: Any, proxies: Sequence[Resource], records: RecordsDatabase | None
) -> str | None:
    """Why the watchdog's roles/datastore.viewer, conditioned to database `named`, reads
    neither its DEDUP_DATABASE's records nor a proxy's; None if it does, or is not known
    yet."""
    if records is not None and isinstance(named, str) and records.named_by(named):
        return None  # the dedup function's records
    if not proxies:
        return (
            f"{DATASTORE_VIEWER} is granted but the stack has no proxy, whose records it "
            "reads: remove it"
        )
    databases = [records_database(p) for p in proxies]
    if not isinstance(named, str) or any(d is None or d.named_by(named) for d in databases):
        return None
    return (
        f"{DATASTORE_VIEWER} names database {named!r}, which is no proxy's database "
        f"({', '.join(str(d) for d in databases)}): remove it, or set its condition to the "
        "proxy's database"
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
    the proxy's), each conditioned to one database, and nothing else; a watchdog that
    delivers runs also roles/run.invoker on Cloud Run services (one service each:
    iam-no-project-level-invoker covers the rest). Which databases the roles name:
    dedup-database-writers and dedup-proxy-own-database."""
    findings: list[Finding] = []
    proxies = proxy_functions(resources)
    for watchdog in watchdog_functions(resources):
        email = _runtime_email(watchdog)
        if email is None:
            continue  # not known yet: the grants cannot be attributed to the watchdog
        prefix = f"the watchdog's account {email} ({_label(watchdog)})"
        delivers = delivers_runs(watchdog)
        own, records = own_database(watchdog), records_database(watchdog)
        for resource, role, grant in roles_held(resources, email):
            if delivers and role == RUN_INVOKER and resource.type.startswith(
                "gcp:cloudrunv2/serviceIam"
            ):
                continue  # its tasks carry its token to the kit's functions
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
                problem = _viewer_problem(named, proxies, records)
            elif problem is None:
                problem = _user_problem(named, own)
            if problem is not None:
                findings.append(Finding(f"{prefix}: {problem}", resource.urn))
    return findings

"""Stack policies that keep job code to its own: the account of a function that runs the
team's job code (each runtime's function, labelled `kit-runtime: <name>`, and the stack's
default function) holds nothing that reaches another runtime's run records or the kit's
own resources, and is advised against roles granted project-wide.

Job code runs as its function's account and gets that account's tokens from the metadata
server: whatever the account may do, any job of that runtime may do. Runtime A's code must
not make a run of runtime B (or of the default function, a proxy, the watchdog) execute
twice or never, nor act as the kit. Each grant is judged by what its role allows
(policies/permissions.py; custom roles by their declared permissions), and by what it
reaches (policies/reach.py: the resource it names, or every resource of the project,
folder or organization it is granted on):

- dedup-runtime-own-database-only: Firestore entities (read, write, export, import, bulk
  delete, clone) and databases (delete, update) of no database of the kit but its own
  (its DEDUP_DATABASE): IAM conditions name databases, not collections, so one database
  per runtime is the isolation boundary; a grant on the project without a one-database
  condition reaches every database.
- dedup-runtime-no-kit-resources: nothing of the kit's machinery: the proxy's token secret
  (reading it forges the proxy's tokens; writing it breaks them), the watchdog's
  deliveries queue (a task there is a delivery; deleting or purging one skips a run),
  acting as or minting tokens of any account of the kit (the jobs' invoker's are what the
  functions accept), invoking, deleting or redeploying any function of the kit, writing
  the kit's buckets (the functions' source archives: every runtime's code at its next
  build), running, pausing, deleting or rewriting the kit's Scheduler jobs (Cloud
  Scheduler grants roles on the project only).

A role the pack does not know (a predefined role missing from policies/permissions.py, a
custom role the stack does not declare) is refused for these accounts wherever it reaches
the kit: granted on one of the kit's resources, or on the project, a folder or the
organization holding them (there it reaches every one of them, and nothing it might allow
can be ruled out). Conditioned to one Firestore database, it reaches that database only:
dedup-runtime-own-database-only refuses it on another's. Basic roles are
dedup-accounts-no-basic-roles' (one violation per grant); which secrets an account of the
kit may read or change is dedup-secret-readers-declared's. Not judged while a runtime's
account, a grant's member, project or condition, or a custom role's permissions (or,
while some custom role's name is unknown, which role it is) are not known yet.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from policies.facts import Runtime, StackFacts, stack_facts
from policies.gcp import (
    CLOUD_RUN_V1_SERVICE,
    CLOUD_RUN_V2_SERVICE,
    STORAGE_BUCKET,
    TASKS_QUEUE,
)
from policies.grants import (
    PRIMITIVE_ROLES,
    Grant,
    condition_database,
    is_hierarchy_level,
    role_not_known_yet,
    role_permissions,
)
from policies.job_tables import BUCKET_OBJECT
from policies.kit_resources import QUEUE_ENV, Secret, environment, token_secrets
from policies.model import Finding, Resource
from policies.permissions import (
    CLOUD_TASKS,
    FUNCTION_CHANGES,
    FUNCTIONS_INVOKE,
    IMPERSONATE,
    RECORDS_ACCESS,
    RUN_INVOKE,
    SCHEDULER_JOBS,
    SECRET_ACCESS,
    SECRET_ADMIN,
    STORAGE_WRITE,
)
from policies.reach import (
    bucket_name,
    bucket_of,
    database_reach,
    granted_on,
    project_wide,
    queue_of,
    reaches_secret,
    service_account_of,
    service_of,
)
from policies.values import as_mapping, get, is_unknown, known_str

SHOWN: Final = 3
"""How many reached resources a message names (then: "and N more")."""
INVOKE_OR_GRANT: Final = frozenset(
    {RUN_INVOKE, FUNCTIONS_INVOKE, "run.services.setIamPolicy",
     "cloudfunctions.functions.setIamPolicy"}
)
"""Calling a function of the kit, or granting who may."""


def _names(found: Sequence[str]) -> str:
    shown = ", ".join(repr(name) for name in found[:SHOWN])
    more = len(found) - SHOWN
    return f"{shown} and {more} more" if more > 0 else shown


# --- dedup-runtime-own-database-only ------------------------------------------------------


def own_database_only(resources: Sequence[Resource]) -> list[Finding]:
    """A function running job code reads, writes or deletes no database of the kit but its
    own; a role the pack does not know, conditioned to another one, neither."""
    facts = stack_facts(resources)
    declared = facts.custom_roles
    findings: list[Finding] = []
    for runtime in facts.runtimes:
        own = runtime.database
        if runtime.account is None or own is None:
            continue  # not known yet: whose grants, or which database is its own
        others = [d for d in facts.kit_databases if not d.database.same_as(own)]
        for resource, role, grant in facts.roles_held(runtime.account):
            if role in PRIMITIVE_ROLES:
                continue  # dedup-accounts-no-basic-roles reports those: one per grant
            permissions = role_permissions(role, declared)
            if permissions is None:
                # Unknown: judged here only when conditioned to one database (it reaches
                # that one); unconditioned on the project it reaches every resource of the
                # kit there, which dedup-runtime-no-kit-resources refuses.
                if role_not_known_yet(role, declared) or not isinstance(
                        condition_database(grant.condition), str):
                    continue
                allows = "the pack does not know what that role allows: policies/permissions.py"
            else:
                allows = ", ".join(sorted(permissions & RECORDS_ACCESS))
                if not allows:
                    continue
            reached = [
                (str(d.database), how) for d in others
                if (how := database_reach(resource, grant.condition, d.database))
            ]
            if not reached:
                continue
            names = _names([name for name, _ in reached])
            findings.append(Finding(
                f"the account of {runtime}, {runtime.account}, holds {role} "
                f"({allows}) on {granted_on(resource)}, which reaches the kit's "
                f"database(s) {names} ({reached[0][1]}), not only its own {str(own)!r}: its "
                "job code could read, rewrite or delete the run records of another function "
                "(a rewritten or deleted record makes a run execute twice or never): remove "
                "the grant; a runtime's roles/datastore.user carries the condition "
                f'resource.name == "{own.resource_name()}"',
                resource.urn,
            ))
    return findings


# --- dedup-runtime-no-kit-resources -------------------------------------------------------


Harm = tuple[frozenset[str], str]
"""Permissions on a kind of the kit's resources, and what job code could do with them."""


@dataclass(frozen=True)
class KitResources:
    """One kind of the kit's own resources no runtime account may reach."""

    what: str
    """What one is, for messages: "the proxy's token secret"."""
    plural: str
    """What several are: "the proxy's token secrets"."""
    harms: tuple[Harm, ...]
    """What a runtime's account may not hold on them, and what job code could do with it."""
    reached: Callable[[Resource, Grant], list[str]]
    """The names of these resources a grant on a resource reaches ([] for none)."""
    permissions: frozenset[str] = field(init=False)
    """Every permission of `harms`."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "permissions", frozenset().union(*(p for p, _ in self.harms)))

    def harm(self, risky: frozenset[str]) -> str:
        """What job code could do with the `risky` permissions."""
        return "; ".join(text for permissions, text in self.harms if permissions & risky)

    def named(self, reached: Sequence[str]) -> str:
        """`reached` for messages: "the proxy's token secret 'x'", "functions of the kit
        'a', 'b'"."""
        return f"{self.plural if len(reached) > 1 else self.what} {_names(reached)}"

    def counted(self, reached: Sequence[str]) -> str:
        """`reached` counted: "the proxy's token secret", "3 functions of the kit"."""
        return f"{len(reached):,} {self.plural}" if len(reached) > 1 else self.what


def _on_project(resource: Resource, found: Sequence[tuple[str, str | None]]) -> list[str]:
    """The names among (name, project) that a grant on the project, a folder or the
    organization reaches."""
    return [name for name, project in found if project_wide(resource, project)]


def _email_project(email: str) -> str | None:
    """P of `name@P.iam.gserviceaccount.com` (None for other accounts)."""
    domain = email.rpartition("@")[2]
    return domain.removesuffix(".iam.gserviceaccount.com") if domain.endswith(
        ".iam.gserviceaccount.com") else None


def _token_secrets(facts: StackFacts) -> KitResources:
    secrets: list[Secret] = [s for p in facts.proxy_functions for s in token_secrets(p)]
    return KitResources(
        "the proxy's token secret", "the proxy's token secrets",
        ((SECRET_ADMIN | {SECRET_ACCESS},
          "whoever reads it computes any future run's token and pre-claims the run; whoever "
          "adds, disables or destroys its versions breaks the proxy's tokens"),),
        lambda resource, grant: [s[1] for s in secrets if reaches_secret(resource, grant, s)],
    )


def _queues(facts: StackFacts) -> KitResources:
    named = {
        queue for w in facts.watchdog_functions
        if (queue := known_str(get(as_mapping(environment(w)) or {}, QUEUE_ENV)))
    }
    for declared in facts.of_type(TASKS_QUEUE):
        project, location, name = (known_str(get(declared.props, key))
                                   for key in ("project", "location", "name"))
        if project and location and name:
            named.add(f"projects/{project}/locations/{location}/queues/{name}")
    queues = [(q, q.split("/")[1] if q.startswith("projects/") else None) for q in sorted(named)]

    def reached(resource: Resource, grant: Grant) -> list[str]:
        if is_hierarchy_level(resource.type):
            return _on_project(resource, queues)
        on = queue_of(resource)
        return [on] if on in named else []

    return KitResources(
        "the watchdog's deliveries queue", "the watchdogs' deliveries queues",
        ((CLOUD_TASKS,
          "a task there is a delivery to a function of the kit, and deleting, running, "
          "pausing or purging them makes a run execute twice or never"),), reached,
    )


def _accounts(facts: StackFacts) -> KitResources:
    accounts = [(email, _email_project(email)) for email in sorted(facts.kit_identities)]
    kit = facts.kit_identities

    def reached(resource: Resource, grant: Grant) -> list[str]:
        if is_hierarchy_level(resource.type):
            return _on_project(resource, accounts)
        on = service_account_of(resource)
        return [on] if on in kit else []

    return KitResources(
        "an account of the kit", "accounts of the kit",
        ((IMPERSONATE,
          "job code could act as it or mint its tokens: the jobs' invoker's tokens are what "
          "the kit's functions accept (forged deliveries), another function's carry that "
          "function's roles"),), reached,
    )


def _functions(facts: StackFacts) -> KitResources:
    services = [
        (name, known_str(get(r.props, "project")))
        for r in (*facts.kit_functions, *facts.of_type(CLOUD_RUN_V2_SERVICE),
                  *facts.of_type(CLOUD_RUN_V1_SERVICE))
        if (name := known_str(get(r.props, "name")))
    ]
    names = {name.rsplit("/", 1)[-1] for name, _ in services}

    def reached(resource: Resource, grant: Grant) -> list[str]:
        if is_hierarchy_level(resource.type):
            return _on_project(resource, services)
        on = service_of(resource)
        return [on] if on in names else []

    return KitResources(
        "a function of the kit", "functions of the kit",
        ((INVOKE_OR_GRANT,
          "job code could call it with its own token and, were it an allowed caller, start "
          "any run; invoking the kit's functions is the jobs' invoker account's alone"),
         (FUNCTION_CHANGES,
          "job code could delete it, or redeploy it with another image, account or "
          "settings: every run of its jobs then fails, or runs code that is not the "
          "runtime's")),
        reached,
    )


def _buckets(facts: StackFacts) -> KitResources:
    found: dict[str, str | None] = {}
    for function in facts.kit_functions:
        name = known_str(get(function.props, "buildConfig", "source", "storageSource", "bucket"))
        if name:
            found.setdefault(bucket_name(name), known_str(get(function.props, "project")))
    for resource in (*facts.of_type(STORAGE_BUCKET), *facts.of_type(BUCKET_OBJECT)):
        name = known_str(get(resource.props, "bucket" if resource.type == BUCKET_OBJECT
                             else "name"))
        if name:
            found[bucket_name(name)] = known_str(get(resource.props, "project")) or found.get(
                bucket_name(name))
    buckets = sorted(found.items())

    def reached(resource: Resource, grant: Grant) -> list[str]:
        if is_hierarchy_level(resource.type):
            return _on_project(resource, buckets)
        on = bucket_of(resource)
        return [on] if on in found else []

    return KitResources(
        "a bucket of the kit", "buckets of the kit",
        ((STORAGE_WRITE,
          "it holds the functions' source archives: job code replacing one runs as every "
          "runtime's account at the next build"),), reached,
    )


def _scheduler_jobs(facts: StackFacts) -> KitResources:
    jobs = [
        (name, known_str(get(job.props, "project")))
        for job in facts.scheduler_jobs if (name := known_str(get(job.props, "name")))
    ]

    def reached(resource: Resource, grant: Grant) -> list[str]:
        # Cloud Scheduler has no IAM on a job: its roles are granted on the project only.
        return _on_project(resource, jobs) if is_hierarchy_level(resource.type) else []

    return KitResources(
        "a Scheduler job of the kit", "Scheduler jobs of the kit",
        ((SCHEDULER_JOBS,
          "job code could run another runtime's job out of schedule (a run nobody "
          "scheduled), pause or disable it (its runs never come), delete it, or rewrite its "
          "schedule, target or token; Cloud Scheduler grants roles on the project only, so "
          "this reaches every job of the project"),), reached,
    )


def kit_resources(facts: StackFacts) -> tuple[KitResources, ...]:
    """The kit's own resources by kind, indexed once per stack
    (`facts.derived(kit_resources)`)."""
    return (_token_secrets(facts), _queues(facts), _accounts(facts), _functions(facts),
            _buckets(facts), _scheduler_jobs(facts))


def _reach_findings(
    runtime: Runtime, resource: Resource, role: str, allows: frozenset[str] | None,
    grant: Grant, kinds: Sequence[KitResources],
) -> list[Finding]:
    """What a known role (or an unknown one on a resource, not project-wide) reaches."""
    findings: list[Finding] = []
    who = f"the account of {runtime}, {runtime.account},"
    for kind in kinds:
        risky = kind.permissions & allows if allows is not None else frozenset()
        if allows is not None and not risky:
            continue
        reached = kind.reached(resource, grant)
        if not reached:
            continue
        if allows is None:
            findings.append(Finding(
                f"{who} holds {role} on {kind.named(reached)} (granted on "
                f"{granted_on(resource)}), and the pack does not know what that role allows "
                "(policies/permissions.py): a runtime needs no role on the kit's own "
                "resources: remove the grant",
                resource.urn,
            ))
            continue
        findings.append(Finding(
            f"{who} holds {role} ({', '.join(sorted(risky))}) on {kind.named(reached)} "
            f"(granted on {granted_on(resource)}): {kind.harm(risky)}: remove the grant",
            resource.urn,
        ))
    return findings


def _unknown_role_on_hierarchy(
    facts: StackFacts, runtime: Runtime, resource: Resource, role: str, grant: Grant,
    kinds: Sequence[KitResources],
) -> list[Finding]:
    """A role the pack does not know, granted on a project, folder or organization that
    holds resources of the kit: it reaches all of them, and nothing it might allow can be
    ruled out. Not judged while its condition is unknown; conditioned to one Firestore
    database, it reaches that database only (dedup-runtime-own-database-only's)."""
    named = condition_database(grant.condition)
    if is_unknown(named) or isinstance(named, str):
        return []
    scope = [
        kind.counted(reached) for kind in kinds if (reached := kind.reached(resource, grant))
    ]
    databases = sum(
        1 for d in facts.kit_databases if database_reach(resource, grant.condition, d.database)
    )
    if databases:
        scope.insert(0, f"{databases:,} Firestore database{'s' if databases > 1 else ''} of "
                        "the kit")
    if not scope:
        return []  # another project's: none of the kit's resources is there
    return [Finding(
        f"the account of {runtime}, {runtime.account}, holds {role} on "
        f"{granted_on(resource)}, and the pack does not know what that role allows "
        "(policies/permissions.py): granted there, it reaches every resource of the kit in "
        f"it ({', '.join(scope)}), so nothing its job code might do with them can be ruled "
        "out (rewrite another runtime's records, run or pause its Scheduler jobs, delete a "
        "function): remove the grant; grant a role the pack knows on the one resource the "
        "job needs (a runtime's grants: bucket, dataset, topic or secret), or add the role "
        "to policies/permissions.py with its documented permissions",
        resource.urn,
    )]


def reaches_no_kit_resource(resources: Sequence[Resource]) -> list[Finding]:
    """No function running job code holds, on the kit's own resources or their project,
    what its job code could turn against the kit: the token secret, the deliveries queue,
    the kit's accounts, its functions, its buckets, its Scheduler jobs; nor a role the
    pack does not know on any of them or on their project, folder or organization."""
    facts = stack_facts(resources)
    declared = facts.custom_roles
    kinds = facts.derived(kit_resources)
    findings: list[Finding] = []
    for runtime in facts.runtimes:
        if runtime.account is None:
            continue
        for resource, role, grant in facts.roles_held(runtime.account):
            if role in PRIMITIVE_ROLES:
                continue  # dedup-accounts-no-basic-roles reports those: one per grant
            allows = role_permissions(role, declared)
            if allows is None and role_not_known_yet(role, declared):
                continue  # a custom role of this update: judged once its permissions are
            if allows is None and is_hierarchy_level(resource.type):
                findings += _unknown_role_on_hierarchy(
                    facts, runtime, resource, role, grant, kinds)
                continue
            findings += _reach_findings(runtime, resource, role, allows, grant, kinds)
    return findings


# --- dedup-runtime-no-project-grants (advisory) -------------------------------------------


def no_project_grants(resources: Sequence[Resource]) -> list[Finding]:
    """Advisory: a role granted to a function running job code on its project, a folder or
    the organization, but for a Firestore role conditioned to one database (Firestore roles
    are granted on the project; the condition makes it one database)."""
    facts = stack_facts(resources)
    findings: list[Finding] = []
    for runtime in facts.runtimes:
        if runtime.account is None:
            continue
        for resource, role, grant in facts.roles_held(runtime.account):
            if not is_hierarchy_level(resource.type):
                continue
            named = condition_database(grant.condition)
            if is_unknown(named) or isinstance(named, str):
                # Not known yet; or conditioned to one database (Firestore roles are
                # granted on the project: its own is how the kit grants them, another of
                # the kit's is dedup-runtime-own-database-only's).
                continue
            findings.append(Finding(
                f"the account of {runtime}, {runtime.account}, holds {role} on "
                f"{granted_on(resource)}: a role granted project-wide reaches every resource "
                "of the project, present and future (other runtimes' and the kit's among "
                "them): grant it on the resource instead (a runtime's grants: bucket, "
                "dataset, topic or secret)",
                resource.urn,
            ))
    return findings

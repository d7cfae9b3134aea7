"""The stack's facts, derived once per stack and read by every stack policy.

Like a graph that all checks query, `StackFacts` answers what the policies ask about the
whole stack: which functions are the kit's (dedup function, proxy, watchdog, the ones that
run the team's job code: the default function and each runtime's), which accounts are the
kit's (the ones its workloads run as, the ones its Scheduler jobs send OIDC tokens of, the
watchdogs' that deliver runs, the ones it declares or builds with), who runs as or sends
tokens of an account, what each resource grants and to whom, the stack's custom roles,
the jobs targeting each function, the proxy's targets and accounts, the kit's Firestore
databases and who must write each, each runtime's account, database and secrets.

Each fact is computed on first use (a policy pays only for what it reads) and then kept:
`stack_facts(resources)` hands every policy run over the same resources (the offline
check's, `policies.evaluate`) the same `StackFacts`, so no policy rescans the stack for
what another derived already (under `pulumi preview`, pulumi_policy hands each policy
resources of its own: there each policy derives what it reads). What one resource is (its
account, its settings) is read by policies/kit_resources.py, what it grants by
policies/grants.py.

The arrows: helpers (values, gcp, model, permissions, deployers, job_tables, grants,
kit_resources, reach) <- facts <- the policy modules <- registry; no policy module imports
another.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Final, TypeVar

from policies.gcp import (
    FIRESTORE_DATABASE,
    FUNCTION_V2,
    SCHEDULER_JOB,
    SERVICE_ACCOUNT,
    service_account_email,
)
from policies.grants import CustomRoles, Grant, custom_roles, grants_or_problem
from policies.job_tables import BUCKET_OBJECT
from policies.kit_resources import (
    WATCH_DATABASE_ENV,
    RecordsDatabase,
    Secret,
    Target,
    account_email,
    build_account,
    component_prefix,
    declared_database,
    declared_secrets,
    delivers_runs,
    function_urls,
    has_own_database,
    in_proxy_component,
    is_dedup_function,
    is_proxy_function,
    is_watchdog_function,
    job_uri,
    label,
    named_databases,
    oidc_email,
    records_database,
    runtime_email,
    runtime_name,
    targets,
    targets_by_host,
    task_account,
)
from policies.model import Resource
from policies.team_services import (
    TeamService,
    declared_team_services,
    granted_service,
    service_called_by,
    team_database_writers,
)
from policies.urls import NormalUrl, Origin, normal_url
from policies.values import as_mapping, get, is_unknown, known_str

T = TypeVar("T")

PROTECTED: Final = "DELETE_PROTECTION_ENABLED"
"""A Firestore database's deleteProtectionState that makes a stack production-like."""

RoleHeld = tuple[Resource, str, Grant]
"""(grant-bearing resource, known role, the grant)."""


@dataclass(frozen=True)
class KitDatabase:
    database: RecordsDatabase
    writers: frozenset[str] | None
    """E-mails of the accounts that must write it; None if one is not known yet."""
    named_by: tuple[str, ...]
    """Labels of the functions (and settings) naming it, for messages."""


@dataclass(frozen=True)
class Runtime:
    """A function that runs the team's job code: a runtime's (labelled kit-runtime), or
    the stack's default function (`name` None)."""

    name: str | None
    function: Resource
    account: str | None
    """The e-mail of the account it runs as; None while not known."""
    database: RecordsDatabase | None
    """Its records database (its DEDUP_DATABASE); None while not known."""
    secrets: tuple[Secret, ...] | None
    """The secrets it declares (secret env vars and volumes); None while not known."""

    def __str__(self) -> str:
        if self.name:
            return f"runtime {self.name!r}"
        return f"the default function {label(self.function)}"


@dataclass(frozen=True)
class ProxyAccount:
    email: str | None
    account_urns: frozenset[str]
    """The Account resources declared in the proxy's component (meant to hold its grants)."""


class StackFacts:
    """What the policies know about one stack (`resources`, in the engine's order)."""

    def __init__(self, resources: Sequence[Resource]) -> None:
        self.resources: tuple[Resource, ...] = tuple(resources)
        self._memo: dict[Any, Any] = {}

    def same_stack(self, resources: Sequence[Resource]) -> bool:
        """`resources` are the very resource objects these facts were derived from."""
        return len(resources) == len(self.resources) and all(
            map(operator.is_, resources, self.resources)
        )

    def derived(self, derive: Callable[[StackFacts], T]) -> T:
        """`derive(self)`, computed once per stack: a policy module's own fact."""
        key = ("derived", derive)
        if key not in self._memo:
            self._memo[key] = derive(self)
        return self._memo[key]  # type: ignore[no-any-return]

    def per_resource(self, derive: Callable[[Resource], T], resource: Resource) -> T:
        """`derive(resource)` for a resource of this stack, computed once per stack."""
        key = (derive, id(resource))  # the resource is held by self.resources: ids stay
        if key not in self._memo:
            self._memo[key] = derive(resource)
        return self._memo[key]  # type: ignore[no-any-return]

    # --- the resources by type -----------------------------------------------------------

    @cached_property
    def _by_type(self) -> dict[str, tuple[Resource, ...]]:
        found: dict[str, list[Resource]] = defaultdict(list)
        for resource in self.resources:
            found[resource.type].append(resource)
        return {resource_type: tuple(listed) for resource_type, listed in found.items()}

    def of_type(self, resource_type: str) -> tuple[Resource, ...]:
        """The stack's resources of `resource_type`, in stack order."""
        return self._by_type.get(resource_type, ())

    @cached_property
    def _positions(self) -> dict[int, int]:
        return {id(r): index for index, r in enumerate(self.resources)}

    def in_stack_order(self, resources: Sequence[Resource]) -> list[Resource]:
        return sorted(resources, key=lambda r: self._positions[id(r)])

    # --- the kit's functions -------------------------------------------------------------

    @cached_property
    def dedup_functions(self) -> tuple[Resource, ...]:
        """The dedup functions (the proxy among them: same protocol, same settings)."""
        return tuple(r for r in self.of_type(FUNCTION_V2) if is_dedup_function(r))

    @cached_property
    def proxy_functions(self) -> tuple[Resource, ...]:
        # Only source objects tell a proxy by its job table: hand it those alone.
        objects = self.of_type(BUCKET_OBJECT)
        return tuple(r for r in self.of_type(FUNCTION_V2) if is_proxy_function(r, objects))

    @cached_property
    def watchdog_functions(self) -> tuple[Resource, ...]:
        return tuple(r for r in self.of_type(FUNCTION_V2) if is_watchdog_function(r))

    @cached_property
    def _proxy_ids(self) -> frozenset[int]:
        return frozenset(id(p) for p in self.proxy_functions)

    def is_proxy(self, function: Resource) -> bool:
        return id(function) in self._proxy_ids

    @cached_property
    def job_code_functions(self) -> tuple[Resource, ...]:
        """The dedup functions that run the team's job code: neither a proxy nor a watchdog."""
        return tuple(
            f for f in self.dedup_functions
            if not self.is_proxy(f) and not is_watchdog_function(f)
        )

    @cached_property
    def kit_functions(self) -> tuple[Resource, ...]:
        """The dedup functions, then the watchdogs that are not one."""
        dedup = self.dedup_functions
        return (*dedup, *(w for w in self.watchdog_functions if w not in dedup))

    @cached_property
    def _kit_function_ids(self) -> frozenset[int]:
        return frozenset(id(f) for f in self.kit_functions)

    def is_kit_function(self, resource: Resource) -> bool:
        """A function of the kit (a dedup function, proxy, watchdog or runtime)."""
        return id(resource) in self._kit_function_ids

    @cached_property
    def kit_function_account_unknown(self) -> bool:
        """Some function of the kit runs as an account not known yet (it may be any)."""
        return any(
            is_unknown(get(f.props, "serviceConfig", "serviceAccountEmail"))
            for f in self.kit_functions
        )

    @cached_property
    def runtimes(self) -> tuple[Runtime, ...]:
        """Every function that runs job code (each runtime's and the default function),
        with its account, records database and declared secrets."""
        return tuple(
            Runtime(runtime_name(f), f, runtime_email(f), records_database(f),
                    declared_secrets(f))
            for f in self.job_code_functions
        )

    @cached_property
    def _runtimes_by_account(self) -> dict[str, list[Runtime]]:
        found: dict[str, list[Runtime]] = defaultdict(list)
        for runtime in self.runtimes:
            if runtime.account is not None:
                found[runtime.account].append(runtime)
        return found

    def runtimes_running_as(self, email: str) -> Sequence[Runtime]:
        """The functions running job code as `email` (one, unless they share it)."""
        return self._runtimes_by_account.get(email, [])

    # --- the Scheduler jobs --------------------------------------------------------------

    @cached_property
    def scheduler_jobs(self) -> tuple[Resource, ...]:
        return self.of_type(SCHEDULER_JOB)

    @cached_property
    def _targeted(self) -> dict[int, list[Resource]]:
        """Each Scheduler job (by id) -> the dedup functions it may target, in stack order
        (kit_resources.job_targets, with the functions indexed by normalised origin once:
        a job's URI is looked up by its origin, then matched by path)."""
        functions = self.dedup_functions
        by_origin: dict[Origin, list[tuple[Resource, NormalUrl]]] = defaultdict(list)
        unaddressed: list[Resource] = []  # no URL known yet: matched by the URI's host
        for function in functions:
            urls = function_urls(function)
            for url in urls:
                by_origin[url.origin].append((function, url))
            if not urls:
                unaddressed.append(function)
        order = {id(f): index for index, f in enumerate(functions)}
        found: dict[int, list[Resource]] = {}
        for job in self.scheduler_jobs:
            uri = job_uri(job)
            text = known_str(uri)
            if is_unknown(uri):
                found[id(job)] = list(functions)
                continue
            if text is None:
                found[id(job)] = []
                continue
            target = normal_url(text)
            if target is None:  # no plain http(s) URL: it may be any (fail closed)
                found[id(job)] = list(functions)
                continue
            hits = {id(f): f for f, url in by_origin.get(target.origin, ())
                    if target.within(url)}
            if targets_by_host(text):
                hits.update((id(f), f) for f in unaddressed)
            found[id(job)] = sorted(hits.values(), key=lambda f: order[id(f)])
        return found

    def functions_targeted(self, job: Resource) -> Sequence[Resource]:
        """The dedup functions `job` may target (while its URL is unknown: possibly more)."""
        return self._targeted.get(id(job), [])

    @cached_property
    def _jobs_by_function(self) -> dict[int, list[Resource]]:
        found: dict[int, list[Resource]] = defaultdict(list)
        for job in self.scheduler_jobs:  # in stack order
            for function in self._targeted[id(job)]:
                found[id(function)].append(job)
        return found

    def jobs_targeting(self, function: Resource) -> Sequence[Resource]:
        """The Scheduler jobs that target dedup function `function`, in stack order."""
        return self._jobs_by_function.get(id(function), [])

    @cached_property
    def _oidc(self) -> tuple[frozenset[str], bool]:
        emails: set[str] = set()
        unknown = False
        for job in self.scheduler_jobs:
            email = oidc_email(job)
            if is_unknown(email):
                unknown = True
            elif known_str(email):
                emails.add(service_account_email(email))
        return frozenset(emails), unknown

    @property
    def oidc_emails(self) -> frozenset[str]:
        """The e-mails of the accounts the stack's Scheduler jobs send OIDC tokens of."""
        return self._oidc[0]

    @property
    def oidc_unknown(self) -> bool:
        """Some job's OIDC account is not known yet (it may be any account)."""
        return self._oidc[1]

    # --- the team services (issue 39) ----------------------------------------------------

    @cached_property
    def _team_services(self) -> tuple[tuple[TeamService, tuple[Resource, ...]], ...]:
        return declared_team_services(self.resources, self.scheduler_jobs)

    @property
    def team_services(self) -> tuple[TeamService, ...]:
        """The team services the stack declares (policies/team_services.py)."""
        return tuple(service for service, _ in self._team_services)

    def called_service(self, grant_on: Resource) -> Resource | TeamService | None:
        """The service the kit calls that a service IAM resource grants on (a function of
        the kit, a declared team Cloud Run service: team_services.granted_service)."""
        return granted_service(grant_on, self.kit_functions, self.team_services)

    @cached_property
    def team_service_jobs(self) -> tuple[tuple[Resource, TeamService], ...]:
        """(job, the declared team service it calls), in stack order, for each job aimed
        at one: by its dependencies (the kit's), or by its URI."""
        aimed = {id(job): service for service, jobs in self._team_services for job in jobs}
        found = []
        for job in self.scheduler_jobs:
            service = aimed.get(id(job)) or service_called_by(job, self.team_services)
            if service is not None:
                found.append((job, service))
        return tuple(found)

    @cached_property
    def invoker_emails(self) -> frozenset[str]:
        """The accounts the Scheduler jobs aimed at a function of the kit or a declared
        team service send OIDC tokens of."""
        jobs = [*(j for j in self.scheduler_jobs if self.functions_targeted(j)),
                *(j for j, _ in self.team_service_jobs)]
        return frozenset(service_account_email(e) for j in jobs
                         if (e := known_str(oidc_email(j))))

    # --- accounts ------------------------------------------------------------------------

    @cached_property
    def _runs_as(self) -> dict[str, list[Resource]]:
        found: dict[str, list[Resource]] = defaultdict(list)
        for resource in self.resources:
            email = runtime_email(resource)
            if email:
                found[email].append(resource)
        return found

    def running_as(self, email: str) -> Sequence[Resource]:
        """The workloads (functions, services, jobs, workflows, triggers) that run as `email`."""
        return self._runs_as.get(email, [])

    @cached_property
    def _jobs_sending(self) -> dict[str, list[Resource]]:
        found: dict[str, list[Resource]] = defaultdict(list)
        for job in self.scheduler_jobs:
            email = known_str(oidc_email(job))
            if email:
                found[service_account_email(email)].append(job)
        return found

    def jobs_sending_tokens_of(self, email: str) -> Sequence[Resource]:
        """The Scheduler jobs that send OIDC tokens of `email`."""
        return self._jobs_sending.get(email, [])

    @cached_property
    def kit_accounts(self) -> frozenset[str]:
        """Known e-mails of the accounts workloads run as and jobs send tokens of."""
        return frozenset(self._runs_as) | self.oidc_emails

    @cached_property
    def kit_identities(self) -> frozenset[str]:
        """Every known account of the kit: the ones workloads run as and jobs send tokens
        of (kit_accounts), the ones the stack declares, the ones its functions build
        with, the ones its watchdogs' tasks send tokens of."""
        declared = {account_email(a) for a in self.of_type(SERVICE_ACCOUNT)}
        builders = {build_account(f) for f in self.kit_functions}
        tasks = {known_str(task_account(w)) for w in self.watchdog_functions}
        return self.kit_accounts | frozenset(e for e in declared | builders | tasks if e)

    @cached_property
    def delivering_accounts(self) -> frozenset[str]:
        """The runtime accounts of the watchdogs that deliver runs: allowed callers of the
        functions they deliver to (dedup-allowed-callers), with run.invoker on those
        services."""
        found = {runtime_email(w) for w in self.watchdog_functions if delivers_runs(w)}
        return frozenset(email for email in found if email is not None)

    # --- grants --------------------------------------------------------------------------

    @cached_property
    def custom_roles(self) -> CustomRoles:
        return custom_roles(self.resources)

    @cached_property
    def granting(self) -> Sequence[tuple[Resource, Sequence[Grant]]]:
        """(resource, its grants) for every resource that grants something, in stack order.
        An unreadable grant counts as none: iam-no-public-members reports it."""
        found = []
        for resource in self.resources:
            grants, _ = grants_or_problem(resource.type, resource.props)
            if grants:
                found.append((resource, grants))
        return found

    @cached_property
    def _grants_by_id(self) -> dict[int, Sequence[Grant]]:
        return {id(resource): grants for resource, grants in self.granting}

    def grants_of(self, resource: Resource) -> Sequence[Grant]:
        return self._grants_by_id.get(id(resource), [])

    @cached_property
    def _held(self) -> dict[str, list[RoleHeld]]:
        found: dict[str, list[RoleHeld]] = defaultdict(list)
        for resource, grants in self.granting:
            for grant in grants:
                role = known_str(grant.role)
                if role is None:
                    continue
                emails = {
                    service_account_email(text)
                    for member in grant.members or []
                    if (text := known_str(member)) and text.startswith("serviceAccount:")
                }
                for email in emails:
                    found[email].append((resource, role, grant))
        return found

    def roles_held(self, email: str) -> Sequence[RoleHeld]:
        """Every known role granted to service account `email`, IAM or ACL-style."""
        return self._held.get(email, [])

    # --- the proxy -----------------------------------------------------------------------

    def proxy_targets(self, proxy: Resource) -> list[Target] | None:
        """The proxy's targets; None if they are not known (or not readable)."""
        return self.per_resource(self._read_targets, proxy)

    def _read_targets(self, proxy: Resource) -> list[Target] | None:
        return targets(proxy, self.of_type(BUCKET_OBJECT))

    def component_accounts(self, proxy: Resource) -> list[Resource]:
        """The service accounts declared in the same DedupProxy component as `proxy`."""
        prefix = component_prefix(proxy)
        if prefix is None or not in_proxy_component(proxy):
            return []
        return [
            r for r in self.of_type(SERVICE_ACCOUNT)
            if in_proxy_component(r) and component_prefix(r) == prefix
        ]

    def component_account_email(self, function: Resource) -> str | None:
        """The proxy's account e-mail from its component's Account while its output is
        unknown (a first preview). Only when the function's own setting is unknown, not
        unset."""
        if not is_unknown(get(function.props, "serviceConfig", "serviceAccountEmail")):
            return None
        emails = {account_email(a) for a in self.component_accounts(function)}
        emails.discard(None)
        return emails.pop() if len(emails) == 1 else None

    def proxy_account(self, proxy: Resource) -> ProxyAccount:
        email = runtime_email(proxy) or self.component_account_email(proxy)
        urns = frozenset(a.urn for a in self.component_accounts(proxy))
        return ProxyAccount(email, urns)

    def own_account_emails(self, proxy: Resource) -> frozenset[str]:
        """The known e-mails of the proxy's accounts: the one it runs as and the ones
        declared in its component (meant to hold its grants)."""
        emails = {account_email(a) for a in self.component_accounts(proxy)}
        emails.add(self.proxy_account(proxy).email)
        return frozenset(e for e in emails if e is not None)

    # --- the kit's Firestore databases ---------------------------------------------------

    @cached_property
    def kit_databases(self) -> tuple[KitDatabase, ...]:
        """The databases of the kit (the ones a function of the kit names in a
        DEDUP_*DATABASE setting, the ones the stack declares) and who must write each:
        the accounts of the functions naming it (a watchdog with a database of its own
        writes only that one)."""
        found: dict[tuple[str | None, str], KitDatabase] = {}
        unsure = False  # some function's database settings are unknown: it may name any
        for function in self.kit_functions:
            env = get(function.props, "serviceConfig", "environmentVariables")
            unsure = unsure or is_unknown(env) or any(
                is_unknown(v) for k, v in (as_mapping(env) or {}).items()
                if str(k).startswith("DEDUP_") and str(k).endswith(("DATABASE", "PROJECT"))
            )
            if self.is_proxy(function):
                accounts: frozenset[str] | None = self.own_account_emails(function) or None
            else:
                email = runtime_email(function)
                accounts = frozenset({email}) if email else None
            # A watchdog with a database of its own writes only that one: it reads the others.
            reads_only = is_watchdog_function(function) and has_own_database(function)
            for key, database in named_databases(function):
                writes = frozenset() if reads_only and key != WATCH_DATABASE_ENV else accounts
                _add_database(found, database, writes, f"{label(function)} ({key})")
        named = [d.database for d in found.values()]
        for declared in self.of_type(FIRESTORE_DATABASE):
            # No function names it: nobody must write it (unless an unknown setting of
            # some function names it).
            if (one := declared_database(declared)) is not None:
                _add_database(found, one, frozenset(), "", merge=False)
        # A team service's own database: written by the one account its component grants
        # roles/datastore.user conditioned to it (infra/team_service.py).
        for database, writers, named_by in team_database_writers(
                self.team_services, self.of_type(FIRESTORE_DATABASE), named):
            _add_database(found, database, writers, named_by)
        if unsure:  # a function whose settings are unknown may write any of them
            return tuple(KitDatabase(d.database, None, d.named_by) for d in found.values())
        return tuple(found.values())

    # --- alerting ------------------------------------------------------------------------

    @cached_property
    def production_like(self) -> bool:
        """A Firestore database of the stack has delete protection on."""
        return any(
            known_str(get(r.props, "deleteProtectionState")) == PROTECTED
            for r in self.of_type(FIRESTORE_DATABASE)
        )


def _add_database(
    found: dict[tuple[str | None, str], KitDatabase], database: RecordsDatabase,
    writers: frozenset[str] | None, named_by: str, *, merge: bool = True,
) -> None:
    """Add `database` to `found` (keyed by project and ID, in the order first found), or
    merge its writers and labels into the same database found already (a project not
    known yet matches any: RecordsDatabase.same_as)."""
    same = found.get((database.project, database.database))
    if same is None:
        same = next((d for d in found.values() if d.database.same_as(database)), None)
    if same is None:
        found[(database.project, database.database)] = KitDatabase(
            database, writers, (named_by,) if named_by else ())
        return
    if not merge:
        return
    key = (same.database.project, same.database.database)
    writes = None if same.writers is None or writers is None else same.writers | writers
    labels = (*same.named_by, named_by) if named_by else same.named_by
    found[key] = KitDatabase(same.database, writes, labels)


class _LastStack:
    """The facts of the stack the policies judged last: each policy of one check is run
    over the same resources, which then share one StackFacts."""

    facts: StackFacts | None = None


def stack_facts(resources: Sequence[Resource]) -> StackFacts:
    """The facts of `resources`, derived once for the same resource objects."""
    last = _LastStack.facts
    if last is not None and last.same_stack(resources):
        return last
    _LastStack.facts = StackFacts(resources)
    return _LastStack.facts

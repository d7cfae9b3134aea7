"""The team services a stack declares (issue 39, "Bring your own service"): existing Cloud
Run or App Engine services the kit's jobs call, which run the protocol library themselves.

The kit does not deploy a team service; for each one it declares (infra/): a records
database of its own (with the TTL policy), roles/datastore.user for the service's runtime
account conditioned to that database, and, for a Cloud Run service, roles/run.invoker on
that one service for the jobs' invoker (and the watchdog's account when it delivers runs).
The jobs aimed at it are Scheduler jobs: an HTTP target to the service's URL plus the
job's path with an OIDC token of the invoker whose audience is that URL (Cloud Run), or an
App Engine HTTP target routed to the service.

Per-resource readers and the `TeamService` record; facts.py derives the stack's services
once (`StackFacts.team_services`). A shared helper: it imports no policy module.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from infra.source import WATCH_JOBS_TABLE
from policies.gcp import (
    FIRESTORE_DATABASE,
    SCHEDULER_JOB,
    TEAM_SERVICE_COMPONENT,
    service_account_email,
)
from policies.grants import DATASTORE_USER, RUN_INVOKER, Grant, condition_database, grants
from policies.job_tables import BUCKET_OBJECT, job_table
from policies.kit_resources import RecordsDatabase, declared_database, job_uri, oidc_email
from policies.model import Resource
from policies.reach import CLOUD_RUN_V1_IAM, RUN_SERVICE_IAM, SERVICE_IAM_NAME
from policies.urls import NormalUrl, normal_url
from policies.values import MISSING, get, is_unknown, known_str


@dataclass(frozen=True)
class CloudRunService:
    """A Cloud Run service by its full name's parts (a Cloud Run function 2nd gen is one)."""

    project: str | None
    """None: not known yet (then any project matches); so for the others."""
    location: str | None
    service: str | None

    def same_as(self, other: CloudRunService) -> bool:
        return all(mine is None or theirs is None or mine == theirs
                   for mine, theirs in ((self.service, other.service),
                                        (self.project, other.project),
                                        (self.location, other.location)))

    def __str__(self) -> str:
        return (f"projects/{self.project or '?'}/locations/{self.location or '?'}/services/"
                f"{self.service or '?'}")


@dataclass(frozen=True)
class TeamService:
    """One team service the stack declares, as far as its resources tell."""

    name: str
    """Its component's name (`service-<services[].name>`)."""
    component: str
    """Its component's URN."""
    cloud_run: CloudRunService | None
    """The Cloud Run service (None: an App Engine service)."""
    app_engine: str | None
    """The App Engine service ID (None: a Cloud Run service)."""
    url: NormalUrl | None
    """Its base URL, the one OIDC audience of the jobs aimed at it (a Cloud Run service's
    run.app URL); None for an App Engine service, or while not known (or not one)."""
    accounts: tuple[str, ...]
    """The e-mails its component grants roles/datastore.user (its runtime account: one,
    as the kit declares it; each one is judged as the service's account)."""
    database: RecordsDatabase | None
    """The records database its component's one Firestore Database declares; None while
    not known (or if the component declares several)."""
    writer: str | None
    """The one account that must write that database: the one member of the component's
    one roles/datastore.user grant, conditioned to it; None otherwise (then any writer
    is refused by dedup-database-writers)."""

    def __str__(self) -> str:
        kind = (f"Cloud Run service {self.cloud_run.service!r}" if self.cloud_run
                else f"App Engine service {self.app_engine!r}")
        return f"team service {self.name!r} ({kind})"


APP_ENGINE_TARGET: Final = "appEngineHttpTarget"
DEFAULT_APP_ENGINE_SERVICE: Final = "default"
"""AppEngineRouting.service unset: the app's default service."""


def app_engine_service_of(job: Resource) -> str | None:
    """The App Engine service a Scheduler job's App Engine HTTP target is routed to (unset:
    `default`); None for other targets, or while not known."""
    if job.type != SCHEDULER_JOB:
        return None
    target = get(job.props, APP_ENGINE_TARGET)
    if not isinstance(target, Mapping):
        return None
    service = get(target, "appEngineRouting", "service")
    return DEFAULT_APP_ENGINE_SERVICE if service is MISSING or service == "" else known_str(
        service)


def team_service_component(resource: Resource) -> str | None:
    """The URN of the team service component `resource` is declared in (its parent's,
    whose type is the kit's TeamService); None for any other resource."""
    parent = resource.parent
    if parent is None:
        return None
    parts = parent.split("::")
    if len(parts) < 4 or parts[2].rsplit("$", 1)[-1] != TEAM_SERVICE_COMPONENT:
        return None
    return parent


def cloud_run_service_of(resource: Resource) -> CloudRunService | None:
    """The Cloud Run service or function a Cloud Run or function IAM resource grants on
    (its parts None while not known: then it may be any; an unset project or location is
    the provider's, the stack's own); None for other resources."""
    key = next((k for p, k in SERVICE_IAM_NAME.items() if resource.type.startswith(p)), None)
    if key is None:
        return None
    raw = get(resource.props, key)
    if known_str(raw) is None:
        return CloudRunService(None, None, None) if is_unknown(raw) else None
    return _named_service(resource, raw)


def _named_service(resource: Resource, name: Any) -> CloudRunService:
    """A service by `name` (its ID, or `projects/P/locations/L/services/S`, or
    .../functions/F) and, for an ID, the resource's project and location."""
    text = known_str(name)
    if text is not None and text.startswith("projects/"):
        parts = text.split("/")
        return CloudRunService(parts[1], parts[3] if len(parts) > 5 else None, parts[-1])
    return CloudRunService(known_str(get(resource.props, "project")),
                           known_str(get(resource.props, "location")), text)


def declared_team_services(
    resources: Sequence[Resource], jobs: Sequence[Resource]
) -> tuple[tuple[TeamService, tuple[Resource, ...]], ...]:
    """Each team service of the stack (one per TeamService component, as far as its
    children tell: its records database, the accounts its roles/datastore.user grant
    names, the Cloud Run service the invoker's run.invoker grant is on) with the
    Scheduler jobs aimed at it (`jobs` that depend on a child of its component: the kit's
    job waits for the service's records database, grant and invoker binding). Its URL is
    the OIDC audience of those jobs (the kit sets it to `services[].url`); its App Engine
    service, their App Engine routing."""
    children: dict[str, list[Resource]] = {}
    for resource in resources:
        component = team_service_component(resource)
        if component is not None:
            children.setdefault(component, []).append(resource)
    if not children:
        return ()
    owner = {child.urn: component for component, listed in children.items()
             for child in listed}
    aimed: dict[str, list[Resource]] = {component: [] for component in children}
    for job in jobs:  # each job once, each of its dependencies looked up
        for component in {owner[urn] for urn in job.dependencies if urn in owner}:
            aimed[component].append(job)
    return tuple((_team_service(component, listed, tuple(aimed[component])),
                  tuple(aimed[component])) for component, listed in children.items())


def _team_service(
    component: str, children: list[Resource], jobs: Sequence[Resource]
) -> TeamService:
    name = component.rsplit("::", 1)[-1]
    declared = [c for c in children if c.type == FIRESTORE_DATABASE]
    database = declared_database(declared[0]) if len(declared) == 1 else None
    claims = [grant for child in children for grant in grants(child.type, child.props)
              if known_str(grant.role) == DATASTORE_USER]
    accounts = sorted({service_account_email(text) for grant in claims
                       for member in grant.members or []
                       if (text := known_str(member)) and text.startswith("serviceAccount:")})
    senders = {service_account_email(e) for j in jobs if (e := known_str(oidc_email(j)))}
    cloud_run = next((run for child in children
                      if (run := _invoker_grant_service(child, senders)) is not None), None)
    audiences = {known_str(get(j.props, "httpTarget", "oidcToken", "audience")) for j in jobs}
    urls = {normal_url(a) for a in audiences if a}
    app_engine = {app_engine_service_of(j) for j in jobs} - {None}
    return TeamService(
        name, component, cloud_run,
        app_engine.pop() if len(app_engine) == 1 else None,
        urls.pop() if len(urls) == 1 else None, tuple(accounts), database,
        _the_writer(claims, database))


def _the_writer(claims: Sequence[Grant], database: RecordsDatabase | None) -> str | None:
    """The account of the component's one roles/datastore.user grant, if it has one
    member and its condition names the component's database."""
    if database is None or len(claims) != 1 or len(members := claims[0].members or []) != 1:
        return None
    named = condition_database(claims[0].condition)
    text = known_str(members[0])
    if not (isinstance(named, str) and database.named_by(named) and text
            and text.startswith("serviceAccount:")):
        return None
    return service_account_email(text)


def _invoker_grant_service(child: Resource, senders: set[str]) -> CloudRunService | None:
    """The Cloud Run service a component's child grants roles/run.invoker on to the
    account its jobs send tokens of (to any account while no job's is known; a grant whose
    role or members are not known yet may be that one); None for any other child."""
    if not child.type.startswith(RUN_SERVICE_IAM):
        return None
    for grant in grants(child.type, child.props):
        role = known_str(grant.role)
        listed = [known_str(m) for m in grant.members] if grant.members is not None else None
        if listed is None or None in listed:
            members: set[str] | None = None  # not known yet: may be the invoker
        else:
            members = {service_account_email(text) for text in listed
                       if text and text.startswith("serviceAccount:")}
        if role not in (None, RUN_INVOKER):
            continue
        if role is None or members is None or members & senders or (members and not senders):
            return cloud_run_service_of(child)
    return None


def service_called_by(job: Resource, services: Sequence[TeamService]) -> TeamService | None:
    """The declared team Cloud Run service `job`'s known URI lies under, if any."""
    target = normal_url(known_str(job_uri(job)) or "")
    return next((s for s in services if target is not None and s.cloud_run is not None
                 and s.url is not None and target.within(s.url)), None)


def granted_service(
    grant_on: Resource, kit_functions: Sequence[Resource], services: Sequence[TeamService]
) -> Resource | TeamService | None:
    """The service the kit calls that a service IAM resource grants on: a function of the
    kit (by its Cloud Run v2 or function IAM: the same name, project and location), or a
    declared team Cloud Run service (Cloud Run v2 IAM); None for anything else (a v1
    gcp.cloudrun IAM resource too: the kit grants through Cloud Run v2)."""
    run = cloud_run_service_of(grant_on)
    if run is None or run.service is None or grant_on.type.startswith(CLOUD_RUN_V1_IAM):
        return None
    function = next((f for f in kit_functions if (named := function_service(f)).service
                     and run.same_as(named)), None)
    if function is not None:
        return function
    return next((s for s in services if s.cloud_run is not None
                 and s.cloud_run.same_as(run)), None)


def function_service(function: Resource) -> CloudRunService:
    """A function of the kit as the Cloud Run service it is (its name, project, location:
    a part not known yet, or unset, matches any)."""
    return _named_service(function, get(function.props, "name"))


def watch_table_urls(watchdog: Resource, resources: Sequence[Resource]) -> dict[str, str] | None:
    """Job ID -> the URL the watchdog delivers that job's runs to, from its job table
    (infra/watch_table.py: a team service's job carries its `url`, the service's URL plus
    the job's path); None while the table cannot be read here."""
    objects = [r for r in resources if r.type == BUCKET_OBJECT]
    table = job_table(watchdog, objects, WATCH_JOBS_TABLE)
    if table is MISSING:
        return {}
    if is_unknown(table) or not isinstance(table, list):
        return None
    return {str(entry.get("name")): entry["url"] for entry in table
            if isinstance(entry, Mapping) and isinstance(entry.get("url"), str)}


def service_not_known(grant_on: Resource) -> bool:
    """A Cloud Run or function IAM resource whose service is not known yet (it may be any,
    a service the kit calls among them: judged once known)."""
    return any(grant_on.type.startswith(prefix) and is_unknown(get(grant_on.props, key))
               for prefix, key in SERVICE_IAM_NAME.items())


def team_database_writers(
    services: Sequence[TeamService], databases: Sequence[Resource],
    kit_named: Sequence[RecordsDatabase],
) -> Iterator[tuple[RecordsDatabase, frozenset[str], str]]:
    """(database, its writer, who names it) for each team service whose component declares
    its records database and grants its one writer (TeamService.writer): never one the
    kit's functions name (`kit_named`: the dedup, proxy, runtime and watchdog databases),
    nor one a Firestore Database outside the component declares too. Anyone can declare
    a resource under a TeamService component: what it claims is believed only that far."""
    for service in services:
        own = service.database
        if service.writer is None or own is None or any(own.same_as(d) for d in kit_named):
            continue
        if any(team_service_component(r) != service.component
               and (other := declared_database(r)) is not None and other.same_as(own)
               for r in databases):
            continue
        yield own, frozenset({service.writer}), str(service)

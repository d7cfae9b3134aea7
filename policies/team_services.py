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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from policies.gcp import FIRESTORE_DATABASE, SCHEDULER_JOB, service_account_email
from policies.grants import DATASTORE_USER, RUN_INVOKER, grants
from policies.kit_resources import RecordsDatabase, component_prefix, database_id
from policies.model import Resource
from policies.reach import SERVICE_IAM_NAME
from policies.urls import NormalUrl, normal_url
from policies.values import MISSING, get, known_str

TEAM_SERVICE_COMPONENT: Final = "scheduler-dedup:index:TeamService"
"""The kit's component declaring what one team service needs (infra/)."""
RUN_SERVICE_IAM: Final = "gcp:cloudrunv2/serviceIam"


@dataclass(frozen=True)
class CloudRunService:
    """A Cloud Run service by its full name's parts (a Cloud Run function 2nd gen is one)."""

    project: str | None
    """None: not known yet (then any project matches)."""
    location: str | None
    service: str

    def same_as(self, other: CloudRunService) -> bool:
        return self.service == other.service and all(
            mine is None or theirs is None or mine == theirs
            for mine, theirs in ((self.project, other.project),
                                 (self.location, other.location)))

    def __str__(self) -> str:
        return (f"projects/{self.project or '?'}/locations/{self.location or '?'}/services/"
                f"{self.service}")


@dataclass(frozen=True)
class TeamService:
    """One team service the stack declares, as far as its resources tell."""

    name: str
    """The stack's name for it (`services[].name`)."""
    cloud_run: CloudRunService | None
    """The Cloud Run service (None: an App Engine service)."""
    app_engine: str | None
    """The App Engine service ID (None: a Cloud Run service)."""
    url: NormalUrl | None
    """Its base URL (a Cloud Run service's run.app URL: its jobs' audience); None if not
    known (or none, for an App Engine service the watchdog does not deliver to)."""
    account: str | None
    """The e-mail of its runtime account; None while not known."""
    database: RecordsDatabase | None
    """Its records database; None while not known."""

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


def in_team_service_component(resource: Resource) -> bool:
    """Declared inside a team service's component (its URN's type chain names it)."""
    parts = resource.urn.split("::")
    return len(parts) >= 4 and f"{TEAM_SERVICE_COMPONENT}$" in parts[2]


def cloud_run_service_of(resource: Resource) -> CloudRunService | None:
    """The Cloud Run service a gcp.cloudrunv2 service IAM resource grants on; None for
    other resources, or while its name is not known."""
    if not resource.type.startswith(RUN_SERVICE_IAM):
        return None
    name = known_str(get(resource.props, SERVICE_IAM_NAME[RUN_SERVICE_IAM]))
    if name is None:
        return None
    if name.startswith("projects/") and "/services/" in name:
        parts = name.split("/")  # projects/P/locations/L/services/S
        return CloudRunService(parts[1], parts[3] if len(parts) > 5 else None, parts[-1])
    return CloudRunService(known_str(get(resource.props, "project")),
                           known_str(get(resource.props, "location")), name)


def _member_accounts(resource: Resource, role: str) -> set[str]:
    return {
        service_account_email(text)
        for grant in grants(resource.type, resource.props) if grant.role == role
        for member in grant.members or []
        if (text := known_str(member)) and text.startswith("serviceAccount:")
    }


def declared_team_services(resources: Iterable[Resource]) -> tuple[TeamService, ...]:
    """The team services of the stack, one per team service component, as far as its
    children tell: its records database (the Firestore Database declared there), its
    account (the member of its roles/datastore.user grant), its Cloud Run service (the
    service its run.invoker grant is on), its URL (the jobs declared there)."""
    children: dict[str, list[Resource]] = {}
    for resource in resources:
        if in_team_service_component(resource):
            prefix = component_prefix(resource)
            if prefix is not None:
                children.setdefault(prefix, []).append(resource)
    return tuple(_team_service(prefix, listed) for prefix, listed in children.items())


def _team_service(prefix: str, children: list[Resource]) -> TeamService:
    name = prefix.rsplit("::", 1)[-1]
    database = account = cloud_run = url = app_engine = None
    for child in children:
        if child.type == FIRESTORE_DATABASE:
            named = known_str(get(child.props, "name"))
            if named is not None:
                database = RecordsDatabase(known_str(get(child.props, "project")),
                                           str(database_id(named)))
        accounts = _member_accounts(child, DATASTORE_USER)
        if len(accounts) == 1:
            account = accounts.pop()
        if (run := cloud_run_service_of(child)) is not None and _member_accounts(
                child, RUN_INVOKER):
            cloud_run = run
        if child.type == SCHEDULER_JOB:
            audience = known_str(get(child.props, "httpTarget", "oidcToken", "audience"))
            url = normal_url(audience) if audience else url
            app_engine = app_engine_service_of(child) or app_engine
    return TeamService(name, cloud_run, app_engine, url, account, database)

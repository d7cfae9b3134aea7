"""Pass/fail fixtures for issue 39 ("Bring your own service"), in the pattern of cases.py:
Scheduler jobs with an App Engine HTTP target, and jobs aimed at a team's own Cloud Run
service, with the grants the kit makes for it (the invoker's run.invoker on that service,
the team account's records grant conditioned to its own database).
test_policy_cases.py runs them with the others.
"""

from __future__ import annotations

import copy
from typing import Any

from infra.source import WATCH_JOBS_TABLE
from policies import gcp
from policies.gcp import TEAM_SERVICE_COMPONENT
from policies.job_tables import BUCKET_OBJECT
from policies.model import Resource
from tests.policies.cases import (
    JOB,
    WATCHDOG_SOURCE_OBJECT,
    Case,
    delivering_watchdog,
    one,
    stack_case,
)
from tests.policies.fixtures import (
    BUILD_SA,
    DELETE,
    FOLDER_IAM_MEMBER,
    INVOKER_SA,
    PROJECT,
    PROJECT_IAM_MEMBER,
    REGION,
    RUN_SERVICE_IAM_BINDING,
    RUN_SERVICE_IAM_MEMBER,
    RUNTIME_SA,
    STACK,
    WATCHDOG_SA,
    U,
    database_condition,
    database_props,
    field_props,
    job_props,
    kit_stack,
    patch,
    replace_named,
    res,
    table_asset,
)

APP_SERVICE = "inventory"
APP_ROUTE = "/tasks/export"
TEAM_RUN = "exports-api"  # the team's Cloud Run service
TEAM_URL = "https://exports-api-4k2xq7wbqa-ew.a.run.app"
TEAM_SA = f"exports-api@{PROJECT}.iam.gserviceaccount.com"
TEAM_DATABASE = "scheduler-dedup-exports-api"
APP_SA = f"storefront@{PROJECT}.iam.gserviceaccount.com"
APP_DATABASE = "scheduler-dedup-storefront"
OTHER_RUN = "billing-api"  # a Cloud Run service the stack does not declare
OTHER_URL = "https://billing-api-4k2xq7wbqa-ew.a.run.app"
ROOT = "scheduler-dedup:index:SchedulerDedup"
CLOUD_RUN_V1_IAM_MEMBER = "gcp:cloudrun/iamMember:IamMember"
BILLING_CALLER = f"billing-caller@{PROJECT}.iam.gserviceaccount.com"  # a team's own caller

CASES: dict[str, list[Case]] = {}


def app_engine_job_props(name: str = "inventory-export") -> dict[str, Any]:
    """A kit job aimed at a team's App Engine service: no OIDC token (the target has no
    such field), POST to a relative URI with the X-Dedup-* headers."""
    props = patch(job_props(name), "httpTarget", DELETE)
    props["attemptDeadline"] = "3600s"
    props["appEngineHttpTarget"] = {
        "httpMethod": "POST",
        "relativeUri": APP_ROUTE,
        "appEngineRouting": {"service": APP_SERVICE, "version": "v3"},
        "body": "e30=",
        "headers": {
            "Content-Type": "application/json",
            "X-Dedup-Project": PROJECT,
            "X-Dedup-Location": REGION,
        },
    }
    return props


def _app(path: str, value: Any) -> dict[str, Any]:
    return patch(app_engine_job_props(), path, value)


# An App Engine target carries no token: neither OIDC policy fails it.
CASES["scheduler-job-oidc-auth"] = [one("app-engine-job-no-oidc", JOB,
                                        app_engine_job_props(), False)]
CASES["scheduler-job-oidc-audience"] = [one("app-engine-job-no-audience", JOB,
                                            app_engine_job_props(), False)]
CASES["scheduler-job-attempt-deadline"] = [
    one("app-engine-deadline-1h", JOB, app_engine_job_props(), False),
    one("app-engine-deadline-24h", JOB, _app("attemptDeadline", "86400s"), False),
    one("app-engine-deadline-default", JOB, _app("attemptDeadline", DELETE), False),
    one("app-engine-deadline-over-24h", JOB, _app("attemptDeadline", "86401s"), True),
    one("app-engine-deadline-14s", JOB, _app("attemptDeadline", "14s"), True),
]
CASES["scheduler-job-app-engine-target"] = [
    one("app-engine-kit-job", JOB, app_engine_job_props(), False),
    one("app-engine-method-default", JOB, _app("appEngineHttpTarget.httpMethod", DELETE), False),
    one("app-engine-uri-unknown", JOB, _app("appEngineHttpTarget.relativeUri", U), False),
    one("app-engine-target-unknown", JOB, _app("appEngineHttpTarget", U), False),
    one("app-engine-http-job", JOB, job_props(), False),
    one("app-engine-uri-not-rooted", JOB,
        _app("appEngineHttpTarget.relativeUri", "tasks/export"), True),
    one("app-engine-uri-with-space", JOB,
        _app("appEngineHttpTarget.relativeUri", "/tasks/ export"), True),
    one("app-engine-get", JOB, _app("appEngineHttpTarget.httpMethod", "GET"), True),
]


# --- a stack with a team's Cloud Run service and a team's App Engine service -------------


def _component_urn(name: str) -> str:
    return f"urn:pulumi:{STACK}::scheduler-dedup::{ROOT}${TEAM_SERVICE_COMPONENT}::{name}"


def team_child(component: str, resource_type: str, name: str,
               props: dict[str, Any]) -> Resource:
    """A resource declared in a TeamService component (infra/team_service.py)."""
    return Resource(
        resource_type, name,
        f"urn:pulumi:{STACK}::scheduler-dedup::{ROOT}${TEAM_SERVICE_COMPONENT}$"
        f"{resource_type}::{name}",
        copy.deepcopy(props), parent=_component_urn(component))


def run_service(name: str) -> str:
    return f"projects/{PROJECT}/locations/{REGION}/services/{name}"


def invoker_on(name: str, service: str, who: str = INVOKER_SA,
               role: str = "roles/run.invoker",
               resource_type: str = RUN_SERVICE_IAM_MEMBER) -> Resource:
    props: dict[str, Any] = {"project": PROJECT, "location": REGION, "name": service,
                             "role": role}
    if resource_type == RUN_SERVICE_IAM_BINDING:
        props["members"] = [f"serviceAccount:{who}"]
    else:
        props["member"] = f"serviceAccount:{who}"
    if resource_type == CLOUD_RUN_V1_IAM_MEMBER:
        props["service"] = props.pop("name")
    return res(resource_type, name, props)


def datastore_grant(name: str, who: str, condition: Any,
                    role: str = "roles/datastore.user",
                    resource_type: str = PROJECT_IAM_MEMBER) -> dict[str, Any]:
    props: dict[str, Any] = {"project": PROJECT, "role": role, "member": f"serviceAccount:{who}"}
    if resource_type == FOLDER_IAM_MEMBER:
        props = {"folder": "folders/1234", "role": role, "member": f"serviceAccount:{who}"}
    if condition is not None:
        props["condition"] = condition
    return props


def team_service(component: str, database: str, account: str,
                 cloud_run: str | None) -> list[Resource]:
    """A TeamService component's children: its records database with the TTL field, its
    account's claim grant conditioned to it, the invoker's grant on its Cloud Run service."""
    children = [
        team_child(component, gcp.FIRESTORE_DATABASE, f"{component}-database",
                   database_props(False, database)),
        team_child(component, gcp.FIRESTORE_FIELD, f"{component}-ttl-field",
                   field_props(database)),
        team_child(component, PROJECT_IAM_MEMBER, f"{component}-datastore-user",
                   datastore_grant("", account, database_condition(database))),
    ]
    if cloud_run is not None:
        grant = invoker_on(f"{component}-invoker", run_service(cloud_run))
        children.append(team_child(component, grant.type, grant.name, dict(grant.props)))
    return children


def _aimed(job: Resource, component: str) -> Resource:
    """`job` waiting for the team service's resources, as the kit declares it."""
    ready = (f"{component}-ttl-field", f"{component}-datastore-user", f"{component}-invoker")
    urns = tuple(team_child(component, t, n, {}).urn for t, n in zip(
        (gcp.FIRESTORE_FIELD, PROJECT_IAM_MEMBER, RUN_SERVICE_IAM_MEMBER), ready, strict=True))
    return Resource(job.type, job.name, job.urn, job.props, job.parent, urns)


def team_job_props(uri: str = f"{TEAM_URL}/tasks/export",
                   audience: str = TEAM_URL) -> dict[str, Any]:
    props = job_props("partner-export")
    props["httpTarget"]["uri"] = uri
    props["httpTarget"]["oidcToken"]["audience"] = audience
    return props


def service_stack(*, job: dict[str, Any] | None = None, app_job: dict[str, Any] | None = None,
                  extra: tuple[Resource, ...] = ()) -> list[Resource]:
    """kit_stack plus a team Cloud Run service (exports-api) and a team App Engine service
    (storefront), each with its component and one job aimed at it."""
    return [
        *kit_stack(),
        *team_service("service-exports-api", TEAM_DATABASE, TEAM_SA, TEAM_RUN),
        *team_service("service-storefront", APP_DATABASE, APP_SA, None),
        _aimed(res(JOB, "job-partner-export", job or team_job_props()), "service-exports-api"),
        _aimed(res(JOB, "job-sitemap-rebuild", app_job or _app("appEngineHttpTarget."
                                                              "appEngineRouting.service",
                                                              "default")),
               "service-storefront"),
        *extra,
    ]


ROUTE_SERVICE = "appEngineHttpTarget.appEngineRouting.service"

CASES["dedup-invoker-reach"] = [
    stack_case("reach-kit", kit_stack(), False),
    stack_case("reach-declared-team-service", service_stack(), False),
    stack_case("reach-undeclared-cloud-run-service",
               service_stack(extra=(invoker_on("invoker-on-billing", run_service(OTHER_RUN)),)),
               True),
    stack_case("reach-undeclared-service-by-binding",
               service_stack(extra=(invoker_on("invoker-on-billing", OTHER_RUN,
                                               resource_type=RUN_SERVICE_IAM_BINDING),)),
               True),
    stack_case("reach-project-level-invoker",
               service_stack(extra=(res(PROJECT_IAM_MEMBER, "invoker-on-project",
                                        datastore_grant("", INVOKER_SA, None,
                                                        role="roles/run.invoker")),)),
               True),
    stack_case("reach-v1-cloudrun-iam-on-team-service",
               service_stack(extra=(invoker_on("invoker-v1", TEAM_RUN,
                                               resource_type=CLOUD_RUN_V1_IAM_MEMBER),)),
               True),
    stack_case("reach-admin-on-team-service",
               service_stack(extra=(invoker_on("invoker-admin", run_service(TEAM_RUN),
                                               role="roles/run.admin"),)),
               True),
    stack_case("reach-a-team-account-on-its-own-service",
               [*service_stack(), res(JOB, "job-billing", patch(team_job_props(
                   uri=f"{OTHER_URL}/tasks/bill", audience=OTHER_URL),
                   "httpTarget.oidcToken.serviceAccountEmail", BILLING_CALLER)),
                invoker_on("billing-caller-invoker", run_service(OTHER_RUN), who=BILLING_CALLER)],
               False),
    stack_case("reach-other-role-elsewhere",
               service_stack(extra=(res(PROJECT_IAM_MEMBER, "invoker-logs",
                                        datastore_grant("", INVOKER_SA, None,
                                                        role="roles/logging.logWriter")),)),
               False),
]

CASES["dedup-service-job-target"] = [
    stack_case("job-target-kit", kit_stack(), False),
    stack_case("job-target-team-service", service_stack(), False),
    stack_case("job-target-audience-unknown", service_stack(job=team_job_props(audience=U)),
               False),
    stack_case("job-target-audience-is-the-uri",
               service_stack(job=team_job_props(audience=f"{TEAM_URL}/tasks/export")), True),
    stack_case("job-target-uri-elsewhere",
               service_stack(job=team_job_props(uri=f"{OTHER_URL}/tasks/export")), True),
    stack_case("job-target-invoker-to-undeclared-url",
               [*kit_stack(), res(JOB, "job-stray", team_job_props(
                   uri=f"{OTHER_URL}/tasks/export", audience=OTHER_URL))], True),
    stack_case("job-target-own-account-to-team-url",
               [*kit_stack(), res(JOB, "job-team-own", patch(team_job_props(
                   uri=f"{OTHER_URL}/tasks/export", audience=OTHER_URL),
                   "httpTarget.oidcToken.serviceAccountEmail",
                   BILLING_CALLER))], False),
]

CASES["dedup-service-account-own-database"] = [
    stack_case("team-account-own-database", service_stack(), False),
    stack_case("team-account-condition-unknown",
               replace_named(service_stack(), "service-exports-api-datastore-user",
                             "condition", U), False),
    stack_case("team-account-unconditioned",
               replace_named(service_stack(), "service-exports-api-datastore-user",
                             "condition", DELETE), True),
    stack_case("team-account-another-database",
               replace_named(service_stack(), "service-exports-api-datastore-user",
                             "condition", database_condition("scheduler-dedup")), True),
    stack_case("team-account-viewer-on-project",
               service_stack(extra=(res(PROJECT_IAM_MEMBER, "team-viewer", datastore_grant(
                   "", TEAM_SA, None, role="roles/datastore.viewer")),)), True),
    stack_case("team-account-folder-level",
               service_stack(extra=(res(FOLDER_IAM_MEMBER, "team-folder", datastore_grant(
                   "", APP_SA, None, resource_type=FOLDER_IAM_MEMBER)),)), True),
]

CASES["dedup-service-account-not-kit"] = [
    stack_case("team-account-own", service_stack(), False),
    *(stack_case(f"team-account-is-{what}",
                 replace_named(service_stack(), "service-exports-api-datastore-user",
                               "member", f"serviceAccount:{who}"), True)
      for what, who in (("invoker", INVOKER_SA), ("runtime", RUNTIME_SA),
                        ("build", BUILD_SA))),
]


# The jobs aimed at team services send the X-Dedup-* headers like every job of the kit.
CASES["dedup-job-headers"] = [
    stack_case("headers-team-services", service_stack(), False),
    stack_case("headers-app-engine-job-without-project",
               service_stack(app_job=_app("appEngineHttpTarget.headers",
                                          {"X-Dedup-Location": REGION})), True),
    stack_case("headers-app-engine-job-default-service",
               service_stack(app_job=_app("appEngineHttpTarget.headers", {})), True),
    stack_case("headers-team-cloud-run-job-without-location",
               service_stack(job=patch(team_job_props(), "httpTarget.headers",
                                       {"X-Dedup-Project": PROJECT})), True),
]

# Existing policies judge the team services' resources correctly.
CASES["dedup-database-writers"] = [
    stack_case("writers-team-services", service_stack(), False),
    stack_case("writers-team-database-by-another",
               service_stack(extra=(res(PROJECT_IAM_MEMBER, "other-on-team-db", datastore_grant(
                   "", f"someone@{PROJECT}.iam.gserviceaccount.com",
                   database_condition(TEAM_DATABASE))),)), True),
]


def watchdog_service_stack(*extra: Resource) -> list[Resource]:
    """service_stack with the watchdog delivering runs through its queue, reading the team
    services' databases and holding run.invoker on the team's Cloud Run service."""
    kit = {r.name for r in kit_stack()}
    return [
        *delivering_watchdog(), *(r for r in service_stack() if r.name not in kit),
        res(PROJECT_IAM_MEMBER, "watchdog-reads-team", datastore_grant(
            "", WATCHDOG_SA, database_condition(TEAM_DATABASE), role="roles/datastore.viewer")),
        invoker_on("watchdog-invokes-team", run_service(TEAM_RUN), who=WATCHDOG_SA),
        *extra,
    ]


CASES["dedup-watchdog-least-privilege"] = [
    stack_case("watchdog-team-services", watchdog_service_stack(), False),
    stack_case("watchdog-invoker-on-undeclared-service",
               watchdog_service_stack(invoker_on("watchdog-invokes-billing",
                                                 run_service(OTHER_RUN), who=WATCHDOG_SA)),
               True),
]


def delivering_to(url: str | None, job_id: str = "partner-export",
                  stack: list[Resource] | None = None) -> list[Resource]:
    """watchdog_service_stack whose watchdog's job table has it deliver job `job_id`'s runs
    to `url` (infra/watch_table.py; None: the entry carries no url)."""
    entry: dict[str, Any] = {"name": job_id, "schedule": "0 3 * * *", "timeZone": "Etc/UTC",
                             "reruns": True, "headers": {}}
    if url is not None:
        entry["url"] = url
    return [
        *replace_named(stack or watchdog_service_stack(), "watchdog-function",
                       "buildConfig.source.storageSource.object", WATCHDOG_SOURCE_OBJECT),
        res(BUCKET_OBJECT, "watchdog-source", {
            "bucket": "src-bucket", "name": WATCHDOG_SOURCE_OBJECT,
            "source": table_asset(WATCH_JOBS_TABLE, [entry]), "contentType": "application/zip"}),
    ]


CASES["dedup-service-job-target"] += [
    stack_case("job-target-watchdog-delivers-to-the-service",
               delivering_to(f"{TEAM_URL}/tasks/export"), False),
    stack_case("job-target-watchdog-delivers-app-engine",
               delivering_to(f"https://{PROJECT}.ew.r.appspot.com/tasks/sitemap",
                             "inventory-export"),
               False),
    stack_case("job-target-watchdog-delivers-elsewhere",
               delivering_to(f"{OTHER_URL}/tasks/export"), True),
    stack_case("job-target-watchdog-delivers-an-undeclared-job",
               delivering_to(f"{TEAM_URL}/tasks/export", "nightly-export"), True),
]

# The deliveries queue's overrides leave a team service's delivery URL as it is.
CASES["dedup-deliveries-queue-target"] = [
    stack_case("queue-team-service-url-kept", delivering_to(f"{TEAM_URL}/tasks/export"), False),
    stack_case("queue-team-service-url-overridden",
               replace_named(delivering_to(f"{TEAM_URL}/tasks/export"), "watchdog-deliveries",
                             "httpTarget", {"uriOverride": {
                                 "uriOverrideEnforceMode": "ALWAYS",
                                 "pathOverride": {"path": "/"}}}), True),
]

CASES["dedup-service-account-not-kit"] += [
    stack_case("team-account-is-the-watchdog",
               replace_named(watchdog_service_stack(), "service-storefront-datastore-user",
                             "member", f"serviceAccount:{WATCHDOG_SA}"), True),
    stack_case("team-account-watchdog-stack", watchdog_service_stack(), False),
]

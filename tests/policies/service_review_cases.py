"""Pass/fail fixtures for the review of issue 39's pack ("Bring your own service"): what a
TeamService component claims is believed only as far as the pack can tell it is the kit's
(its one database and writer, the invoker's grant), the jobs aimed at a team's Cloud Run
service go to that service's run.app URL, the watchdog delivers an App Engine service's
runs to one https origin that is no Cloud Run host, a team service never runs as a default
account, and the invoker only invokes the services the kit calls. Each fail fixture was
accepted before the fix. test_policy_cases.py runs them with the others.
"""

from __future__ import annotations

from infra.source import WATCH_JOBS_TABLE
from policies import gcp
from policies.model import Resource
from tests.policies.cases import Case, stack_case
from tests.policies.fixtures import (
    APPSPOT_SA,
    COMPUTE_SA,
    DATABASE,
    FUNCTION_URL,
    INVOKER_SA,
    PROJECT,
    PROJECT_IAM_BINDING,
    PROJECT_IAM_MEMBER,
    REGION,
    RUN_SERVICE_IAM_MEMBER,
    database_condition,
    database_props,
    patch,
    replace_named,
    res,
    table_asset,
)
from tests.policies.service_cases import (
    OTHER_RUN,
    OTHER_URL,
    TEAM_DATABASE,
    TEAM_RUN,
    TEAM_SA,
    TEAM_URL,
    datastore_grant,
    delivering_to,
    invoker_on,
    run_service,
    service_stack,
    team_child,
    team_job_props,
    watchdog_service_stack,
)

CASES: dict[str, list[Case]] = {}
EVIL = f"evil@{PROJECT}.iam.gserviceaccount.com"
KIT_FUNCTION = "scheduler-dedup"  # the kit's dedup function (fixtures.kit_stack)
APP_URL = f"https://{PROJECT}.ew.r.appspot.com"  # the project's App Engine app

def _team_grant_also_to(account: str) -> list[Resource]:
    """The service stack whose team account's claim grant names `account` beside it."""
    return [*(r for r in service_stack() if r.name != "service-exports-api-datastore-user"),
            team_child("service-exports-api", PROJECT_IAM_BINDING,
                       "service-exports-api-datastore-user", {
                           "project": PROJECT, "role": "roles/datastore.user",
                           "members": [f"serviceAccount:{TEAM_SA}", f"serviceAccount:{account}"],
                           "condition": database_condition(TEAM_DATABASE)})]


def _stack(*extra: Resource) -> list[Resource]:
    return service_stack(extra=tuple(extra))

# 1. A TeamService component's writer is believed for its own database only.
CASES["dedup-database-writers"] = [
    stack_case("writers-team-service-own-database", service_stack(), False),
    stack_case("writers-fake-team-component-on-the-dedup-database", _stack(
        team_child("service-evil", PROJECT_IAM_MEMBER, "service-evil-datastore-user",
                   datastore_grant("", EVIL, database_condition(DATABASE)))), True),
    stack_case("writers-fake-team-component-declaring-the-dedup-database", _stack(
        team_child("service-evil", gcp.FIRESTORE_DATABASE, "service-evil-database",
                   database_props(False, DATABASE)),
        team_child("service-evil", PROJECT_IAM_MEMBER, "service-evil-datastore-user",
                   datastore_grant("", EVIL, database_condition(DATABASE)))), True),
    stack_case("writers-fake-team-component-second-writer-on-a-team-database", _stack(
        team_child("service-evil", PROJECT_IAM_MEMBER, "service-evil-datastore-user",
                   datastore_grant("", EVIL, database_condition(TEAM_DATABASE)))), True),
    stack_case("writers-team-grant-with-two-members",
               _team_grant_also_to(EVIL), True),
]

# 2. The jobs aimed at a team's Cloud Run service go to that service's run.app URL.
CASES["dedup-service-job-target"] = [
    stack_case("job-target-the-services-run-app-url", service_stack(), False),
    stack_case("job-target-deterministic-run-app-url", service_stack(job=team_job_props(
        uri=f"https://{TEAM_RUN}-123456789012.{REGION}.run.app/tasks/export",
        audience=f"https://{TEAM_RUN}-123456789012.{REGION}.run.app")), False),
    stack_case("job-target-another-services-run-app-url", service_stack(job=team_job_props(
        uri=f"{OTHER_URL}/tasks/export", audience=OTHER_URL)), True),
    stack_case("job-target-a-host-of-its-own", service_stack(job=team_job_props(
        uri="https://exports.attacker.example/tasks/export",
        audience="https://exports.attacker.example")), True),
    stack_case("job-target-run-app-url-of-another-region", service_stack(job=team_job_props(
        uri=f"https://{TEAM_RUN}-123456789012.us-central1.run.app/tasks/export",
        audience=f"https://{TEAM_RUN}-123456789012.us-central1.run.app")), True),
    stack_case("job-target-component-without-invoker-grant",
               [r for r in service_stack() if r.name != "service-exports-api-invoker"], True),
]

# 3. The watchdog delivers an App Engine service's runs to one origin: an appspot.com URL
# of the job's project's app (infra/shared_facts.py), no Cloud Run host.
_APP_JOB = "inventory-export"  # its id in the table; aimed at the App Engine service

def _app_deliveries(*urls: str) -> list[Resource]:
    """The watchdog's table delivering the App Engine service's job(s) to `urls`."""
    stack = delivering_to(urls[0], _APP_JOB)
    if len(urls) > 1:  # a second job aimed at the same App Engine service
        second = next(r for r in stack if r.name == "job-sitemap-rebuild")
        stack.append(Resource(second.type, "job-sitemap-second", f"{second.urn}-second",
                              patch(second.props, "name", "sitemap-second"), second.parent,
                              second.dependencies))
        entries = [{"name": name, "schedule": "0 3 * * *", "timeZone": "Etc/UTC",
                    "reruns": True, "headers": {}, "url": url}
                   for name, url in ((_APP_JOB, urls[0]), ("sitemap-second", urls[1]))]
        stack = replace_named(stack, "watchdog-source", "source",
                              table_asset(WATCH_JOBS_TABLE, entries))
    return stack

CASES["dedup-service-job-target"] += [
    stack_case("job-target-watchdog-app-engine-the-projects-app",
               _app_deliveries(f"{APP_URL}/tasks/sitemap"), False),
    stack_case("job-target-watchdog-app-engine-service-url",
               _app_deliveries(f"https://storefront-dot-{PROJECT}.ew.r.appspot.com/tasks/x"),
               False),
    stack_case("job-target-watchdog-app-engine-to-a-host-of-its-own",
               _app_deliveries("https://storefront.attacker.example/tasks/sitemap"), True),
    stack_case("job-target-watchdog-app-engine-another-projects-app",
               _app_deliveries("https://other-project.ew.r.appspot.com/tasks/sitemap"), True),
    stack_case("job-target-watchdog-app-engine-with-a-port",
               _app_deliveries(f"{APP_URL}:8443/tasks/sitemap"), True),
    stack_case("job-target-watchdog-app-engine-to-a-kit-function",
               _app_deliveries(f"{FUNCTION_URL}/"), True),
    stack_case("job-target-watchdog-app-engine-to-a-run-app-host",
               _app_deliveries(f"{TEAM_URL}/tasks/sitemap"), True),
    stack_case("job-target-watchdog-app-engine-over-http",
               _app_deliveries(f"http://{PROJECT}.ew.r.appspot.com/tasks/sitemap"), True),
    stack_case("job-target-watchdog-app-engine-one-origin",
               _app_deliveries(f"{APP_URL}/tasks/sitemap", f"{APP_URL}/tasks/other"), False),
    stack_case("job-target-watchdog-app-engine-two-origins",
               _app_deliveries(f"{APP_URL}/tasks/sitemap",
                               f"https://storefront-dot-{PROJECT}.ew.r.appspot.com/tasks/x"),
               True),
]

# 4. A team service never runs as a default account.
CASES["dedup-service-account-not-kit"] = [
    *(stack_case(f"team-account-is-the-{what}-default",
                 replace_named(service_stack(), "service-exports-api-datastore-user",
                               "member", f"serviceAccount:{who}"), True)
      for what, who in (("compute", COMPUTE_SA), ("app-engine", APPSPOT_SA))),
]

# 5, 6. The invoker holds invoke only, and only on the services the kit calls (compared by
# project and location too).
CASES["dedup-invoker-reach"] = [
    stack_case("reach-invoker-on-the-kit-function", _stack(
        invoker_on("invoker-on-kit", run_service(KIT_FUNCTION))), False),
    stack_case("reach-kit-function-name-in-another-project", _stack(invoker_on(
        "invoker-elsewhere", f"projects/other-project/locations/{REGION}/services/"
        f"{KIT_FUNCTION}")), True),
    stack_case("reach-kit-function-name-in-another-region", _stack(invoker_on(
        "invoker-elsewhere", f"projects/{PROJECT}/locations/us-central1/services/"
        f"{KIT_FUNCTION}")), True),
    stack_case("reach-admin-on-the-kit-function", _stack(invoker_on(
        "invoker-admin", run_service(KIT_FUNCTION), role="roles/run.admin")), True),
    stack_case("reach-developer-on-team-service", _stack(invoker_on(
        "invoker-developer", run_service(TEAM_RUN), role="roles/run.developer")), True),
    stack_case("reach-services-invoker-on-team-service", _stack(invoker_on(
        "invoker-services-invoker", run_service(TEAM_RUN),
        role="roles/run.servicesInvoker")), False),
]

# 7. The component's Cloud Run service is its invoker grant's; a grant with several
# members is judged.
CASES["dedup-invoker-reach"] += [
    stack_case("reach-second-component-grant-on-another-service", _stack(team_child(
        "service-exports-api", RUN_SERVICE_IAM_MEMBER, "service-exports-api-zz-invoker",
        dict(invoker_on("x", run_service(OTHER_RUN)).props))), True),
    stack_case("reach-component-grant-to-someone-else-last", _stack(team_child(
        "service-exports-api", RUN_SERVICE_IAM_MEMBER, "service-exports-api-zz-viewer",
        dict(invoker_on("x", run_service(OTHER_RUN), who=EVIL,
                        role="roles/run.viewer").props))), False),
]
CASES["dedup-service-account-not-kit"] += [
    stack_case("team-account-grant-with-the-invoker-too",
               _team_grant_also_to(INVOKER_SA), True),
]
CASES["dedup-service-account-own-database"] = [
    stack_case("team-account-second-member-reaches-every-database",
               [*_team_grant_also_to(EVIL),
                res(PROJECT_IAM_MEMBER, "evil-everywhere", datastore_grant(
                    "", EVIL, None, role="roles/datastore.viewer"))], True),
]

# The watchdog stack still passes with all of the above.
CASES["dedup-service-account-not-kit"] += [
    stack_case("team-account-watchdog-stack-reviewed", watchdog_service_stack(), False),
]

"""Jobs aimed at a team's own service (`services`, `jobs[].service`): the config's rules
with their errors, what the program declares around a Cloud Run and an App Engine service
(the retail example's `exports-api` and `storefront`), the watchdog's table and grants,
Google's API contracts, and what `make plan` says the kit cannot see."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from infra.config import StackConfig, load_config
from infra.contracts import check_resource, check_resources
from infra.scheduled_job import HEADER_PROJECT, HEADER_SCHEDULE
from infra.source import WATCH_JOBS_TABLE
from operator_tools.offline import DeclaredResource
from operator_tools.own_services import checklist
from operator_tools.plan import render
from tests.infra.helpers import DATABASE, FIELD, JOB, PROJECT_IAM, RUN_IAM, StackUnderTest
from tests.infra.team_service_config import (
    EXPORTS_ACCOUNT,
    EXPORTS_URL,
    INVOKER,
    JOBS,
    PROJECT,
    STOREFRONT_ACCOUNT,
    WATCHDOG,
    Config,
    job,
    problems,
    retail_config,
    service,
)


@pytest.fixture(scope="module")
def retail(stack_runs: dict[str, StackUnderTest]) -> StackUnderTest:
    return stack_runs["retail"]


def job_resource(stack: StackUnderTest, name: str) -> DeclaredResource:
    return stack.run.by_name(f"job-{name}-job")


# --------------------------------------------------------------------------- config


def test_the_retail_example_aims_two_jobs_at_team_services() -> None:
    cfg = load_config(retail_config())
    export, sitemap = (next(j for j in cfg.jobs if j.name == n)
                       for n in ("partner-export", "sitemap-rebuild"))
    assert (export.service, export.service_path, export.job_logic) == (
        "exports-api", "/tasks/export", "")
    assert cfg.records_database_of(export) == "retail-exports-api"
    assert cfg.records_database_of(sitemap) == "retail-storefront"
    # Neither is a kit function's job: no job table of the kit's routes them.
    assert all("retail-partner-export" not in cfg.job_routes(r)
               for r in (None, *(r.name for r in cfg.runtimes)))
    assert cfg.watchdog_delivers_to(service="exports-api")  # partner-export catches up
    assert not cfg.watchdog_delivers_to(service="storefront")


@pytest.mark.parametrize(("change", "key", "says"), [
    (lambda raw: service(raw, "exports-api").update(appEngine={"service": "default"}),
     "services[0].cloudRun", "gives both cloudRun and appEngine"),
    (lambda raw: service(raw, "exports-api").pop("cloudRun"),
     "services[0].cloudRun", "gives neither cloudRun nor appEngine"),
    (lambda raw: service(raw, "exports-api").pop("url"),
     "services[0].url", "gcloud run services describe exports-api"),
    (lambda raw: service(raw, "exports-api").update(url="https://exports.acme.example"),
     "services[0].url", "is not a run.app URL"),
    (lambda raw: service(raw, "exports-api").update(url=f"{EXPORTS_URL}/tasks"),
     "services[0].url", "is not an https URL without a path"),
    (lambda raw: service(raw, "storefront").update(name="sync"),
     "services[1].name", "is also a runtime's name"),
    (lambda raw: service(raw, "storefront").update(name="proxy"),
     "services[1].name", "kit's own accounts"),
    (lambda raw: service(raw, "storefront").update(serviceAccount=INVOKER),
     "services[1].serviceAccount", "is the jobs' invoker account, one of the kit's own"),
    (lambda raw: job(raw, "partner-export").update(service="export-api"),
     "jobs[3].service", "did you mean 'exports-api'?"),
    (lambda raw: job(raw, "partner-export").update(path="tasks/export"),
     "jobs[3].path", "give the route beginning with '/'"),
    (lambda raw: job(raw, "partner-export").update(runtime="export"),
     "jobs[3].runtime", "remove runtime (the service's handler is the job)"),
    (lambda raw: job(raw, "partner-export").update(jobLogic="example_jobs.example:run"),
     "jobs[3].jobLogic", "remove jobLogic"),
    (lambda raw: job(raw, "weekly-report").update(path="/x"),
     "jobs[2].path", "remove path, or set service"),
    (lambda raw: job(raw, "partner-export").update(attemptDeadlineSeconds=3600),
     "jobs[3].attemptDeadlineSeconds", "lower attemptDeadlineSeconds to <= 1800"),
    (lambda raw: job(raw, "inventory-sync").update(attemptDeadlineSeconds=3600),
     "jobs[0].attemptDeadlineSeconds", "only a job aimed at an App Engine service"),
    (lambda raw: job(raw, "sitemap-rebuild").update(attemptDeadlineSeconds=86401),
     "jobs[4].attemptDeadlineSeconds", "86401 is out of range"),
    (lambda raw: (service(raw, "storefront").pop("url"),
                  job(raw, "sitemap-rebuild").update(catchUp=True)),
     "jobs[4].catchUp", "set the service's url to the app's https URL"),
    (lambda raw: (service(raw, "storefront").pop("url"),
                  raw.update({"scheduler-dedup:watchdog": {"reruns": True}})),
     "services[1].url", "or set watchdog.reruns false"),
    (lambda raw: raw[JOBS].remove(job(raw, "sitemap-rebuild")),
     "services[1].name", "no job calls service 'storefront'"),
])
def test_each_mistake_is_one_problem_with_its_fix(
    change: Callable[[Config], None], key: str, says: str
) -> None:
    found = problems(change)
    assert key in found, found
    assert says in found[key]


def test_an_app_engine_job_may_wait_24_hours() -> None:
    raw = retail_config()
    job(raw, "sitemap-rebuild")["attemptDeadlineSeconds"] = 86400
    assert load_config(raw).jobs[4].attempt_deadline_seconds == 86400


# --------------------------------------------------------------------------- declared


def test_a_cloud_run_service_gets_a_database_a_conditioned_claim_and_the_invoker(
    retail: StackUnderTest,
) -> None:
    database = retail.run.by_name("service-exports-api-database")
    assert (database.type, database.props["name"]) == (DATABASE, "retail-exports-api")
    ttl = retail.run.by_name("service-exports-api-ttl-field")
    assert (ttl.type, ttl.props["database"], ttl.props["field"]) == (
        FIELD, "retail-exports-api", "expire_at")
    assert "ttlConfig" in ttl.props
    claim = retail.run.by_name("service-exports-api-datastore-user")
    assert (claim.type, claim.props["role"], claim.props["member"]) == (
        PROJECT_IAM, "roles/datastore.user", f"serviceAccount:{EXPORTS_ACCOUNT}")
    assert claim.props["condition"]["expression"] == (
        f'resource.name == "projects/{PROJECT}/databases/retail-exports-api"')
    # The service's account holds nothing else of the stack.
    assert retail.grants_to(EXPORTS_ACCOUNT) == [claim]
    invoker = retail.run.by_name("service-exports-api-invoker")
    assert (invoker.type, invoker.props["role"], invoker.props["member"]) == (
        RUN_IAM, "roles/run.invoker", f"serviceAccount:{INVOKER}")
    assert invoker.props["name"] == (
        f"projects/{PROJECT}/locations/us-west1/services/exports-api")


def test_an_app_engine_service_gets_its_database_and_claim_and_no_invoker_grant(
    retail: StackUnderTest,
) -> None:
    claim = retail.run.by_name("service-storefront-datastore-user")
    assert claim.props["member"] == f"serviceAccount:{STOREFRONT_ACCOUNT}"
    assert claim.props["condition"]["expression"].endswith('/databases/retail-storefront"')
    declared = {r.name for r in retail.run.resources if r.name.startswith("service-storefront")}
    assert declared == {"service-storefront", "service-storefront-database",
                        "service-storefront-ttl-field", "service-storefront-schedule-time-field",
                        "service-storefront-datastore-user"}
    assert not any("storefront" in r.name for r in retail.all(RUN_IAM))


def test_the_cloud_run_job_posts_to_its_path_with_a_token_for_the_service_url(
    retail: StackUnderTest,
) -> None:
    props = job_resource(retail, "partner-export").props
    target = props["httpTarget"]
    assert (target["uri"], target["httpMethod"]) == (f"{EXPORTS_URL}/tasks/export", "POST")
    assert target["oidcToken"] == {"serviceAccountEmail": INVOKER, "audience": EXPORTS_URL}
    assert "appEngineHttpTarget" not in props
    assert target["headers"][HEADER_PROJECT] == PROJECT
    assert target["headers"][HEADER_SCHEDULE] == "0 4 * * *"
    assert json.loads(base64.b64decode(target["body"])) == {"partner": "wholesale"}


def test_the_app_engine_job_is_an_app_engine_target_without_a_token(
    retail: StackUnderTest,
) -> None:
    props = job_resource(retail, "sitemap-rebuild").props
    assert "httpTarget" not in props
    target = props["appEngineHttpTarget"]
    assert target["relativeUri"] == "/tasks/sitemap"
    assert target["appEngineRouting"] == {"service": "default"}
    assert target["httpMethod"] == "POST"
    assert "oidcToken" not in target and "oidcToken" not in json.dumps(props)
    assert props["attemptDeadline"] == "7200s"
    # The same X-Dedup-* headers as every job of the kit.
    plain = job_resource(retail, "partner-export").props["httpTarget"]["headers"]
    assert {k for k in target["headers"] if k.startswith("X-Dedup-")} == {
        k for k in plain if k.startswith("X-Dedup-")}


def test_the_watchdog_reads_both_databases_and_delivers_the_cloud_run_jobs_runs(
    retail: StackUnderTest,
) -> None:
    assert retail.watchdog is not None
    table = {e["name"]: e for e in retail.job_table(retail.watchdog, WATCH_JOBS_TABLE)}
    export, sitemap = table["retail-partner-export"], table["retail-sitemap-rebuild"]
    assert export["database"] == "retail-exports-api"
    assert export["url"] == f"{EXPORTS_URL}/tasks/export"
    assert export["catchUp"] and export["reruns"]
    assert export["headers"][HEADER_SCHEDULE] == "0 4 * * *"
    # The App Engine job is judged, not delivered (no catchUp, no re-runs in retail).
    assert sitemap["database"] == "retail-storefront"
    assert "url" not in sitemap and "reruns" not in sitemap
    reads = {g.props["condition"]["expression"] for g in retail.grants_to(WATCHDOG)
             if g.props["role"] == "roles/datastore.viewer"}
    assert {f'resource.name == "projects/{PROJECT}/databases/retail-{s}"'
            for s in ("exports-api", "storefront")} <= reads
    delivers = [g for g in retail.grants_to(WATCHDOG) if g.type == RUN_IAM]
    assert f"projects/{PROJECT}/locations/us-west1/services/exports-api" in {
        g.props["name"] for g in delivers}


def test_the_watchdog_delivers_an_app_engine_jobs_runs_by_its_url_without_a_grant(
    retail: StackUnderTest, tmp_path: Any,
) -> None:
    from operator_tools.offline import run_offline

    raw = retail_config()
    job(raw, "sitemap-rebuild").update(catchUp=True, catchUpWithinSeconds=40_000)
    run = run_offline(raw, stack="retail", build_dir=tmp_path)
    stack = StackUnderTest("retail", raw, load_config(raw), run)
    assert stack.watchdog is not None
    table = {e["name"]: e for e in stack.job_table(stack.watchdog, WATCH_JOBS_TABLE)}
    assert table["retail-sitemap-rebuild"]["url"] == (
        "https://acme-retail-prod.uw.r.appspot.com/tasks/sitemap")
    assert not any("storefront" in g.name for g in stack.all(RUN_IAM))


def test_the_monitoring_counts_the_cloud_run_services_log_lines(retail: StackUnderTest) -> None:
    deliveries = retail.run.by_name("monitoring-metric-deliveries").props["filter"]
    services = deliveries.split("resource.labels.service_name=(", 1)[1].split(")", 1)[0]
    assert '"exports-api"' in services.split(" OR ")
    assert "storefront" not in deliveries and '"default"' not in services  # App Engine


def test_the_outputs_name_each_services_database(retail: StackUnderTest) -> None:
    assert retail.run.outputs["teamServiceDatabases"] == {
        "exports-api": "retail-exports-api", "storefront": "retail-storefront"}


# --------------------------------------------------------------------------- contracts


def test_the_declarations_parse_as_googles_requests(retail: StackUnderTest) -> None:
    ours = [r for r in retail.run.resources if r.name.startswith(
        ("service-", "job-partner-export", "job-sitemap-rebuild", "watchdog-delivers-to-service",
         "watchdog-reads-service"))]
    assert len(ours) >= 12
    assert check_resources(ours) == []


def test_a_wrong_app_engine_target_is_refused_by_googles_type(retail: StackUnderTest) -> None:
    props = copy.deepcopy(dict(job_resource(retail, "sitemap-rebuild").props))
    props["appEngineHttpTarget"]["appEngineRouting"]["zone"] = "us-west1-a"
    found = check_resource(DeclaredResource(JOB, "job-under-test", "urn", props))
    assert [f.property for f in found] == ["appEngineHttpTarget.appEngineRouting.zone"]
    longer = dict(props, attemptDeadline="86401s")
    longer["appEngineHttpTarget"] = job_resource(retail, "sitemap-rebuild").props[
        "appEngineHttpTarget"]
    found = check_resource(DeclaredResource(JOB, "job-under-test", "urn", longer))
    assert [f.property for f in found] == ["attemptDeadline"]
    assert "24 h" in found[0].rule.text


# --------------------------------------------------------------------------- make plan


def test_the_plan_lists_what_the_kit_cannot_see_with_the_values(retail: StackUnderTest) -> None:
    text = render(retail.run, config=retail.config)
    unseen = text.split("What the kit cannot see", 1)[1]
    exports, storefront = unseen.split("service storefront")
    assert "POST /tasks/export" in exports
    assert "roles/run.invoker" in exports and f"{INVOKER}, {WATCHDOG}" in exports
    assert "ingress" in exports and f"it runs as {EXPORTS_ACCOUNT}" in exports
    assert "DEDUP_DATABASE=retail-exports-api" in exports
    assert "DEDUP_PROJECT=acme-retail-prod" in exports and "DEDUP_LOCATION=us-west1" in exports
    assert f"DEDUP_ALLOWED_CALLERS={INVOKER},{WATCHDOG}" in exports
    assert "allows unauthenticated invocations" in exports
    assert "DEDUP_VERIFY_TOKEN_AUDIENCE=https://exports-api-4k2xq7wbqa-uw.a.run.app " in exports
    assert "DEDUP_VERIFY_TOKEN_AUDIENCE" not in storefront  # App Engine: Scheduler sends no token
    assert "carry no token" in storefront and "DEDUP_DATABASE=retail-storefront" in storefront
    assert "DEDUP_ALLOWED_CALLERS=" not in storefront  # Scheduler sends it no token
    assert "appengine:default/tasks/sitemap" in text


def test_a_stack_without_services_has_no_checklist(stack_runs: dict[str, StackUnderTest]) -> None:
    cfg: StackConfig = stack_runs["prod"].config
    assert checklist(cfg) == []
    assert "cannot see" not in render(stack_runs["prod"].run, config=cfg)


def test_the_watchdogs_task_to_a_services_path_carries_a_token_for_the_service() -> None:
    """Cloud Run checks a token's audience against the service's run.app URL: a delivery to
    a team service's path is a task for url + path with the service's origin as audience;
    the kit's own functions' URLs (no path) keep the URL itself."""
    from datetime import UTC, datetime

    from dedup.watchdog.cloud_tasks import TaskQueue, task_of
    from dedup.watchdog.delivery import RunDelivery, audience_of

    queue = TaskQueue(f"projects/{PROJECT}/locations/us-west1/queues/retail-deliveries",
                      WATCHDOG, "k" * 64)
    delivery = RunDelivery(f"{EXPORTS_URL}/tasks/export", "retail-partner-export",
                           datetime(2026, 12, 6, 12, tzinfo=UTC), {}, run_id="r1")
    request = task_of(queue, delivery)["httpRequest"]
    assert request["url"] == f"{EXPORTS_URL}/tasks/export"
    assert request["oidcToken"] == {"serviceAccountEmail": WATCHDOG, "audience": EXPORTS_URL}
    for kit_url in ("https://retail-export-bcgeiaeaaa-uw.a.run.app", "http://127.0.0.1:8080/"):
        assert audience_of(kit_url) == kit_url

"""The run watchdog and the Monitoring component, under Pulumi's mocks for dev and prod:
the watchdog's function, identity, grant and job; the log-based metrics, alert policies
(the absence one included), notification channels and the dashboard."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from dedup.settings import Settings
from dedup.watchdog.reruns import RERUNS_SUFFIX
from infra.config import ConfigError, load_config
from infra.contracts import check_resources
from infra.monitoring import (
    ABSENT_PERIODS,
    INSTANCE_COUNT_METRIC,
    STORE_UNAVAILABLE_THRESHOLD,
    absence_seconds,
    incident_window_seconds,
)
from infra.scheduler_rules import retry_window_seconds, schedule_period_seconds
from infra.source import JOB_ROUTES_TABLE, PROXY_ROUTES_TABLE, WATCH_JOBS_TABLE
from operator_tools.offline import load_stack_config, run_offline
from policies import offline_check
from tests.infra.helpers import (
    ACCOUNT,
    ALERT_POLICY,
    CHANNEL,
    DASHBOARD,
    FUNCTION,
    JOB,
    METRIC,
    PROJECT_IAM,
    SLEEP,
    StackUnderTest,
)
from tests.stacks import FIXTURE_STACKS_DIR

USER_METRIC = "logging.googleapis.com/user/"
METRIC_SUFFIXES = (
    "deliveries",
    "job-duration",
    "completed-unrecorded",
    "claim-lost",
    "watchdog-problems",
    "watchdog-incidents",
    "watchdog-summaries",
)


def metrics(stack: StackUnderTest) -> dict[str, Any]:
    prefix = f"{stack.config.name_prefix}-"
    return {m.props["name"].removeprefix(prefix): m for m in stack.all(METRIC)}


def policies(stack: StackUnderTest) -> dict[str, Any]:
    return {p.name.removeprefix("monitoring-alert-"): p for p in stack.all(ALERT_POLICY)}


# --- the watchdog ---------------------------------------------------------------------


def test_watchdog_function_identity_and_settings(stack: StackUnderTest) -> None:
    cfg = stack.config
    watchdog = stack.watchdog
    assert watchdog is not None
    props = watchdog.props
    assert props["name"] == f"{cfg.name_prefix}-watchdog"
    assert props["buildConfig"]["entryPoint"] == "watch_scheduled_runs"
    # Same source tree, bucket and build account as the dedup function; its own object
    # (the tree plus its own job table).
    source = props["buildConfig"]["source"]["storageSource"]
    dedup_source = stack.function.props["buildConfig"]["source"]["storageSource"]
    assert source["bucket"] == dedup_source["bucket"]
    assert source["object"] != dedup_source["object"]
    assert props["buildConfig"]["serviceAccount"] == (
        stack.function.props["buildConfig"]["serviceAccount"]
    )
    service = props["serviceConfig"]
    assert service["ingressSettings"] == "ALLOW_INTERNAL_ONLY"
    # No warm instance, one tick at a time, whatever the stack's scaling.
    assert (service["minInstanceCount"], service["maxInstanceCount"]) == (0, 1)
    assert service["maxInstanceRequestConcurrency"] == 1
    assert service["timeoutSeconds"] == cfg.function.timeout_seconds
    assert service["serviceAccountEmail"] == stack.account_email("watchdog")
    env = service["environmentVariables"]
    dedup_env = stack.function.props["serviceConfig"]["environmentVariables"]
    for key, value in dedup_env.items():
        # (The dedup function also serves the watchdog, where it delivers runs to it.)
        if key not in ("DEDUP_JOB", "DEDUP_ALLOWED_CALLERS"):
            assert env[key] == value, key
    assert env["DEDUP_ALLOWED_CALLERS"] == stack.account_email("invoker")
    assert Settings.from_env(env).allowed_callers == frozenset({stack.account_email("invoker")})
    # Unset: 2 days, or half the retention: dev keeps records a day, so 12 hours.
    lookback = {"dev": "43200", "prod": "172800", "retail": "172800"}[stack.name]
    assert env["DEDUP_WATCH_LOOKBACK_SECONDS"] == str(cfg.watchdog.lookback_seconds) == lookback
    assert env["DEDUP_WATCH_GRACE_SECONDS"] == str(cfg.watchdog.grace_seconds) == "300"
    # A backfill's rate (dedup/watchdog/backfills.py): 20 runs a tick, one at a time, by default.
    assert (env["DEDUP_WATCH_BACKFILL_RUNS_PER_TICK"], env["DEDUP_WATCH_BACKFILL_IN_FLIGHT"]) == (
        "20", "1")
    # Its archive carries its own job table only: no other function's routes.
    assert stack.job_table(watchdog, JOB_ROUTES_TABLE) is None
    assert stack.job_table(watchdog, PROXY_ROUTES_TABLE) is None


def test_watch_jobs_are_the_stacks_deployed_jobs(stack: StackUnderTest) -> None:
    """Every job of the stack (the proxied ones too), by deployed ID, with its cron, time
    zone, deadline, retry window (infra/scheduler_rules.py) and paused flag."""
    cfg = stack.config
    assert stack.watchdog is not None
    watched = stack.job_table(stack.watchdog, WATCH_JOBS_TABLE)
    assert [w["name"] for w in watched] == sorted(cfg.job_id(j) for j in cfg.jobs)
    assert stack.watchdog_job_id not in {w["name"] for w in watched}
    deployed = {j.props["name"]: j.props for j in stack.config_jobs()}
    for job in cfg.jobs:
        entry = next(w for w in watched if w["name"] == cfg.job_id(job))
        judged = {
            "name": cfg.job_id(job),
            "schedule": job.schedule,
            "timeZone": job.time_zone,
            "attemptDeadlineSeconds": job.attempt_deadline_seconds,
            "retryWindowSeconds": retry_window_seconds(job.attempt_deadline_seconds, job.retry),
            "paused": job.paused,
            "dstRepeated": job.dst_repeated,
            "dstSkipped": job.dst_skipped,
            "forcedRuns": job.forced_runs,
            "failureThreshold": cfg.alert_thresholds(job)[0],
            "recoveryThreshold": cfg.alert_thresholds(job)[1],
        }
        if job.proxy is not None:  # its records are in the proxy's own database
            judged["database"] = cfg.dedup.proxy_database_name
            judged["proxied"] = True
        if job.runtime is not None:  # in its runtime's own database, delivered there
            judged["database"] = cfg.records_database_of(job)
            judged["runtime"] = job.runtime
        if job.service is not None:  # in its team service's own database
            judged["database"] = cfg.records_database_of(job)
        assert {k: v for k, v in entry.items() if k in judged} == judged
        # A delivering watchdog's extra keys are checked in tests/infra/test_catch_up.py
        # (a team service's job's `url`: tests/infra/test_team_services.py).
        delivers = cfg.watchdog_delivers_to(proxied=job.proxy is not None, runtime=job.runtime,
                                            service=job.service)
        extra = {"catchUp", "catchUpWithinSeconds", "headers", "body", "reruns",
                 *(["url"] if job.service is not None else [])}
        assert set(entry) - set(judged) <= (extra if delivers else set())
        props = deployed[entry["name"]]
        assert (props["schedule"], props["timeZone"]) == (entry["schedule"], entry["timeZone"])
        assert props["attemptDeadline"] == f"{entry['attemptDeadlineSeconds']}s"
        assert props["paused"] is entry["paused"]
    if cfg.proxied_jobs:
        assert {cfg.job_id(j) for j in cfg.proxied_jobs} <= {w["name"] for w in watched}


def test_rerun_requests_expire_with_the_runs(stack: StackUnderTest) -> None:
    """`make rerun`'s requests (function/dedup/watchdog/reruns.py's collection) carry expire_at, and
    the watchdog's component declares the TTL policy on it, in the watchdog's own database."""
    field = stack.run.by_name("watchdog-reruns-ttl-field")
    cfg = stack.config
    assert field.props["database"] == cfg.dedup.watch_database_name
    assert field.props["collection"] == cfg.dedup.collection + RERUNS_SUFFIX
    assert field.props["field"] == "expire_at"
    assert "ttlConfig" in field.props and field.props["indexConfig"] == {}


def test_the_watchdog_writes_only_a_database_of_its_own(stack: StackUnderTest) -> None:
    """Issue 25 (2, 9): its cursors and the re-run queue are in `<databaseName>-watchdog`,
    declared like the proxy's database, which only the watchdog's account writes (the
    dedup function's account, running job code, holds nothing there; operators run `make
    rerun` with their own credentials); it names it in DEDUP_WATCH_DATABASE, and reads the
    run records with datastore.viewer only."""
    cfg = stack.config
    own = cfg.dedup.watch_database_name
    assert own == f"{cfg.dedup.database_name}-watchdog"
    database = stack.run.by_name("watchdog-database")
    dedup = stack.run.by_name("dedup-database")
    assert database.props["name"] == own
    for key in ("locationId", "type", "deleteProtectionState", "pointInTimeRecoveryEnablement",
                "appEngineIntegrationMode"):
        assert database.props.get(key) == dedup.props.get(key), key
    condition = f'resource.name == "projects/{cfg.project}/databases/{own}"'
    on_it = [g for g in stack.all(PROJECT_IAM)
             if g.props.get("condition", {}).get("expression") == condition]
    assert [(g.props["role"], g.props["member"]) for g in on_it] == [
        ("roles/datastore.user", f"serviceAccount:{stack.account_email('watchdog')}")]
    runtime = stack.grants_to(stack.account_email("runtime"))
    assert all(own not in str(g.props.get("condition")) for g in runtime)
    assert stack.watchdog is not None
    env = stack.watchdog.props["serviceConfig"]["environmentVariables"]
    assert env["DEDUP_WATCH_DATABASE"] == own and env["DEDUP_DATABASE"] == cfg.dedup.database_name
    dependencies = set(stack.watchdog.dependencies)
    for name in ("watchdog-database", "watchdog-datastore-user", "watchdog-reruns-ttl-field"):
        assert stack.run.by_name(name).urn in dependencies, name


def test_watchdog_account_holds_only_the_database_roles(stack: StackUnderTest) -> None:
    """datastore.user on its own database (its cursors, re-run requests) and
    datastore.viewer on the dedup database and, with a proxy, the proxy's own database,
    and each runtime's own: it reads, never writes, the run records."""
    email = stack.account_email("watchdog")
    assert email == f"{stack.config.name_prefix}-watchdog@{stack.config.project}" \
        ".iam.gserviceaccount.com"
    d = stack.config.dedup
    expected = {
        "watchdog-datastore-user": ("roles/datastore.user", d.watch_database_name),
        "watchdog-reads-dedup-database": ("roles/datastore.viewer", d.database_name),
    }
    if stack.proxy is not None:
        expected["watchdog-reads-proxy-database"] = (
            "roles/datastore.viewer", d.proxy_database_name)
    for runtime in stack.config.runtimes:
        expected[f"watchdog-reads-runtime-{runtime.name}-database"] = (
            "roles/datastore.viewer", stack.config.runtime_database(runtime))
    for team in stack.config.services:
        expected[f"watchdog-reads-service-{team.name}-database"] = (
            "roles/datastore.viewer", stack.config.service_database(team))
    # Besides run.invoker on the services it delivers runs to (tests/infra/test_catch_up.py)
    # and its queue's grants and task key (tests/infra/test_watchdog_deliveries.py).
    grants = {g.name: g for g in stack.grants_to(email)
              if not g.name.startswith("watchdog-delivers-to-")
              and g.name not in ("watchdog-enqueues-deliveries", "watchdog-acts-as-itself",
                                 "watchdog-reads-deliveries", "watchdog-task-key-reader")}
    assert {
        name: (g.props["role"], g.props["condition"]["expression"])
        for name, g in grants.items()
    } == {
        name: (role, f'resource.name == "projects/{stack.config.project}/databases/{db}"')
        for name, (role, db) in expected.items()
    }
    # Nothing else runs as it, and no job sends its tokens.
    runners = [f for f in stack.all(FUNCTION)
               if f.props["serviceConfig"]["serviceAccountEmail"] == email]
    assert [f.name for f in runners] == ["watchdog-function"]
    assert all(j.props["httpTarget"]["oidcToken"]["serviceAccountEmail"] != email
               for j in stack.all(JOB) if "httpTarget" in j.props)  # App Engine: no token


def test_watchdog_job_calls_the_watchdog_with_oidc(stack: StackUnderTest) -> None:
    cfg = stack.config
    (job,) = [j for j in stack.all(JOB) if j.props["name"] == stack.watchdog_job_id]
    props = job.props
    assert props["schedule"] == cfg.watchdog.schedule == "*/10 * * * *"
    assert props["timeZone"] == cfg.watchdog.time_zone == "Etc/UTC"
    target = props["httpTarget"]
    assert target["uri"] == stack.watchdog_uri
    assert target["oidcToken"] == {
        "serviceAccountEmail": stack.account_email("invoker"),
        "audience": stack.watchdog_uri,
    }
    assert stack.watchdog_uri != stack.service_uri
    assert "body" not in target or target["body"] is None
    # It waits for the invoker's grant on the watchdog's service.
    binding = stack.run.by_name("watchdog-invoker")
    assert binding.props["name"].endswith(f"/services/{cfg.name_prefix}-watchdog")
    assert binding.props["member"] == f"serviceAccount:{stack.account_email('invoker')}"
    assert binding.urn in job.dependencies


def test_watchdog_waits_for_its_grant(stack: StackUnderTest) -> None:
    assert stack.watchdog is not None
    deps = set(stack.watchdog.dependencies)
    wait = stack.run.by_name("watchdog-iam-propagation")
    assert wait.type == SLEEP
    assert wait.urn in deps
    assert stack.run.by_name("watchdog-datastore-user").urn in deps
    assert set(wait.dependencies) >= {
        stack.run.by_name("watchdog-sa").urn,
        stack.run.by_name("watchdog-datastore-user").urn,
    }


# --- metrics ----------------------------------------------------------------------------


def test_log_based_metrics(stack: StackUnderTest) -> None:
    found = metrics(stack)
    assert sorted(found) == sorted(METRIC_SUFFIXES)
    services = {stack.config.name_prefix} | (
        {f"{stack.config.name_prefix}-proxy"} if stack.proxy is not None else set()
    ) | {stack.config.runtime_function_name(r) for r in stack.config.runtimes}
    for suffix, metric in found.items():
        props = metric.props
        assert props["project"] == stack.config.project
        assert props["filter"].startswith('resource.type="cloud_run_revision"')
        assert props["metricDescriptor"]["metricKind"] == "DELTA"
        labels = {label["key"] for label in props["metricDescriptor"].get("labels", [])}
        assert labels == set(props.get("labelExtractors", {})), suffix
        if suffix.startswith("watchdog"):
            assert f'"{stack.config.name_prefix}-watchdog"' in props["filter"]
            assert 'jsonPayload.component="watchdog"' in props["filter"]
        else:
            for service in services:
                assert f'"{service}"' in props["filter"], (suffix, service)
            assert "jsonPayload.outcome:*" in props["filter"]
    deliveries = found["deliveries"].props
    assert deliveries["labelExtractors"] == {
        "job": "EXTRACT(jsonPayload.job)", "outcome": "EXTRACT(jsonPayload.outcome)"
    }
    assert deliveries["metricDescriptor"]["valueType"] == "INT64"
    duration = found["job-duration"].props
    assert duration["metricDescriptor"]["valueType"] == "DISTRIBUTION"
    assert duration["metricDescriptor"]["unit"] == "ms"
    assert duration["valueExtractor"] == "EXTRACT(jsonPayload.latency_ms)"
    assert duration["bucketOptions"]["exponentialBuckets"]["numFiniteBuckets"] > 0
    assert 'jsonPayload.outcome="completed_unrecorded"' in found["completed-unrecorded"].props[
        "filter"]
    assert 'jsonPayload.outcome="claim_lost"' in found["claim-lost"].props["filter"]
    problems = found["watchdog-problems"].props
    assert problems["labelExtractors"] == {
        "job": "EXTRACT(jsonPayload.job)", "kind": "EXTRACT(jsonPayload.kind)"
    }
    assert 'jsonPayload.message=~"^watchdog summary"' in found["watchdog-summaries"].props[
        "filter"]
    incidents = found["watchdog-incidents"].props
    assert incidents["labelExtractors"] == {
        "job": "EXTRACT(jsonPayload.job)", "kind": "EXTRACT(jsonPayload.incident_kind)",
        "event": "EXTRACT(jsonPayload.event)",
    }
    # Transition lines carry no `kind`: the problem metric never counts them.
    assert "jsonPayload.kind" not in incidents["filter"]


# --- alert policies and channels ----------------------------------------------------------


def test_notification_channels_follow_alert_emails(stack: StackUnderTest) -> None:
    channels = stack.all(CHANNEL)
    emails = [c.props["labels"]["email_address"] for c in channels]
    assert emails == list(stack.config.alerts.emails)
    assert all(c.props["type"] == "email" for c in channels)
    expected = {"dev": [], "prod": ["oncall@acme.example"],
                "retail": ["oncall@acme-retail.example"]}[stack.name]
    assert emails == expected


def test_alert_policies(stack: StackUnderTest) -> None:
    found = policies(stack)
    assert sorted(found) == ["incident-opened", "incident-resolved", "store-unavailable",
                             "watchdog-absent", "watchdog-problem"]
    channel_ids = [c.outputs.get("id", f"{c.name}-id") for c in stack.all(CHANNEL)]
    prefix = stack.config.name_prefix
    for policy in found.values():
        props = policy.props
        assert props["notificationChannels"] == channel_ids
        assert prefix in props["displayName"]
        assert props["documentation"]["content"]
        assert props["alertStrategy"]["autoClose"] == "1800s"
        (condition,) = props["conditions"]
        metric_filter = next(
            v["filter"] for k, v in condition.items() if k.startswith("condition")
        )
        metric_type = metric_filter.split('"')[1]
        assert metric_type.startswith(f"{USER_METRIC}{prefix}-")
        declared = {m.props["name"] for m in stack.all(METRIC)}
        assert metric_type.removeprefix(USER_METRIC) in declared
        # The policy waits for its metric to exist.
        metric = next(m for m in stack.all(METRIC)
                      if m.props["name"] == metric_type.removeprefix(USER_METRIC))
        assert metric.urn in policy.dependencies

    problem = found["watchdog-problem"].props["conditions"][0]["conditionThreshold"]
    assert problem["comparison"] == "COMPARISON_GT"
    assert problem["thresholdValue"] == 0
    assert problem["evaluationMissingData"] == "EVALUATION_MISSING_DATA_INACTIVE"
    assert problem["aggregations"][0]["groupByFields"] == ["metric.label.job",
                                                           "metric.label.kind"]
    # Runs page through incidents; the problem policy is left with malformed documents.
    assert 'metric.label.kind="malformed"' in problem["filter"]
    store = found["store-unavailable"].props["conditions"][0]["conditionThreshold"]
    assert 'metric.label.outcome="store_unavailable"' in store["filter"]
    assert store["thresholdValue"] == STORE_UNAVAILABLE_THRESHOLD
    # evaluationMissingData needs a non-zero duration (the API refuses "0s" with a 400):
    # the smallest valid one, 60 s, on both threshold conditions.
    assert problem["duration"] == store["duration"] == "60s"
    assert store["aggregations"][0]["alignmentPeriod"] == "300s"
    # One logged problem stays in the sliding window longer than the duration, so it
    # still holds the condition for the whole minute and alerts.
    problem_window = problem["aggregations"][0]["alignmentPeriod"]
    assert problem_window == "120s"
    assert int(problem_window[:-1]) > int(problem["duration"][:-1])


def test_incidents_page_once_per_streak_and_once_when_resolved(stack: StackUnderTest) -> None:
    """One policy per transition, each on the watchdog's incident lines by job and kind,
    notified when its incident opens only (it closes when its window passes, which says
    nothing); the window outlasts a watchdog period, so a repeated line (a retried tick)
    joins the incident still open instead of opening a second one."""
    found = policies(stack)
    period = schedule_period_seconds(stack.config.watchdog.schedule,
                                     stack.config.watchdog.time_zone)
    assert incident_window_seconds(stack.config.watchdog) == period + 300 == 900
    for suffix, event in (("incident-opened", "incident_opened"),
                          ("incident-resolved", "incident_resolved")):
        props = found[suffix].props
        assert props["alertStrategy"]["notificationPrompts"] == ["OPENED"]
        condition = props["conditions"][0]["conditionThreshold"]
        assert condition["filter"].startswith(
            f'metric.type="{USER_METRIC}{stack.config.name_prefix}-watchdog-incidents"')
        assert f'metric.label.event="{event}"' in condition["filter"]
        assert (condition["comparison"], condition["thresholdValue"]) == ("COMPARISON_GT", 0)
        assert condition["aggregations"][0]["alignmentPeriod"] == "900s"
        assert condition["aggregations"][0]["groupByFields"] == ["metric.label.job",
                                                                 "metric.label.kind"]
    assert found["incident-opened"].props["severity"] == "ERROR"
    assert "severity" not in found["incident-resolved"].props  # a recovery is no alarm
    # The other policies still notify when their incident closes.
    assert "notificationPrompts" not in found["store-unavailable"].props["alertStrategy"]


@pytest.mark.parametrize(("schedule", "window"), [
    ("*/10 * * * *", 900), ("* * * * *", 360), ("0 * * * *", 3900), ("0 3 * * *", 86700)])
def test_the_incident_window_follows_the_watchdog_period(schedule: str, window: int) -> None:
    cfg = load_config(_dev(watchdog={"schedule": schedule, "lookbackSeconds": 43200}))
    assert incident_window_seconds(cfg.watchdog) == window


def test_alert_policies_meet_the_monitoring_api_contract(stack: StackUnderTest) -> None:
    """Google's AlertPolicy type and the documented duration rules accept all five."""
    found = stack.all(ALERT_POLICY)
    assert len(found) == 5
    assert check_resources(found) == []


def test_the_watchdog_is_watched_by_absence(stack: StackUnderTest) -> None:
    """Its summary line absent for 3 of its periods (every 10 minutes: 30 minutes)."""
    absent = policies(stack)["watchdog-absent"].props["conditions"][0]["conditionAbsent"]
    assert absent["filter"].startswith(
        f'metric.type="{USER_METRIC}{stack.config.name_prefix}-watchdog-summaries"'
    )
    assert absent["duration"] == f"{ABSENT_PERIODS * 600}s" == "1800s"
    assert absent["trigger"] == {"count": 1}


@pytest.mark.parametrize(
    ("schedule", "time_zone", "period", "absent"),
    [
        ("*/10 * * * *", "Etc/UTC", 600, 1800),
        ("* * * * *", "Etc/UTC", 60, 180),
        ("0 * * * *", "Europe/Berlin", 3600, 10800),
        ("0 3 * * *", "Europe/Berlin", 86400, 84600),  # capped at Monitoring's 23.5 h
    ],
)
def test_absence_follows_the_watchdog_period(
    schedule: str, time_zone: str, period: int, absent: int
) -> None:
    cfg = load_config(_dev(watchdog={
        "schedule": schedule, "timeZone": time_zone, "lookbackSeconds": 43200}))
    assert schedule_period_seconds(schedule, time_zone) == period
    assert absence_seconds(cfg.watchdog) == absent


# --- dashboard ----------------------------------------------------------------------------


def test_dashboard_json(stack: StackUnderTest) -> None:
    dashboard = json.loads(stack.one(DASHBOARD).props["dashboardJson"])
    assert stack.config.name_prefix in dashboard["displayName"]
    tiles = dashboard["mosaicLayout"]["tiles"]
    titles = [t["widget"]["title"] for t in tiles]
    assert titles[0] == "Deliveries by job and outcome"
    assert "Duplicates suppressed by job" in titles
    assert any("duration" in t.lower() for t in titles)
    assert "Watchdog problems by job and kind" in titles
    assert "Incidents opened and resolved by job" in titles
    assert "Runs executed twice by job" in titles
    declared = {m.props["name"] for m in stack.all(METRIC)}
    for tile in tiles:
        query = tile["widget"]["xyChart"]["dataSets"][0]["timeSeriesQuery"]
        metric_type = query["timeSeriesFilter"]["filter"].split('"')[1]
        if metric_type != INSTANCE_COUNT_METRIC:  # Cloud Run's own, a runtime's instances
            assert metric_type.removeprefix(USER_METRIC) in declared, tile["widget"]["title"]
    # One row of four per runtime; none on a stack without runtimes.
    assert sum(t.startswith("Runtime ") for t in titles) == 4 * len(stack.config.runtimes)
    duplicates = next(t for t in tiles if t["widget"]["title"] == "Duplicates suppressed by job")
    assert 'metric.label.outcome="duplicate"' in (
        duplicates["widget"]["xyChart"]["dataSets"][0]["timeSeriesQuery"]["timeSeriesFilter"][
            "filter"]
    )


# --- runtimes -----------------------------------------------------------------------------


@pytest.fixture
def retail(stack_runs: dict[str, StackUnderTest]) -> StackUnderTest:
    """The retail example: jobs in runtimes `sync` and `export`, and a proxied one."""
    return stack_runs["retail"]


RETAIL_RUNTIME_JOBS = {"retail-inventory-sync": "retail-sync",
                       "retail-nightly-export": "retail-export"}
"""Its runtime jobs' deployed IDs -> the function (Cloud Run service) each runs in."""


def test_the_retail_stacks_metrics_and_alerts_cover_its_runtimes_jobs(
    retail: StackUnderTest,
) -> None:
    """A runtime job's deliveries are logged by its runtime's function, which every delivery
    metric reads; its runs are judged by the watchdog, whose table lists it; and no alert
    condition narrows to a service or a job, so each covers those jobs."""
    cfg = retail.config
    assert {cfg.job_id(j): cfg.runtime_function_name(r) for j in cfg.jobs
            if (r := cfg.runtime_of(j)) is not None} == RETAIL_RUNTIME_JOBS
    found = metrics(retail)
    for suffix in ("deliveries", "job-duration", "completed-unrecorded", "claim-lost"):
        for service in RETAIL_RUNTIME_JOBS.values():
            assert f'"{service}"' in found[suffix].props["filter"], (suffix, service)
    assert retail.watchdog is not None
    watched = {w["name"]: w for w in retail.job_table(retail.watchdog, WATCH_JOBS_TABLE)}
    assert {name: watched[name]["runtime"] for name in RETAIL_RUNTIME_JOBS} == {
        "retail-inventory-sync": "sync", "retail-nightly-export": "export"}
    for suffix in ("watchdog-problems", "watchdog-incidents", "watchdog-summaries"):
        # The watchdog's own lines, whichever job they name.
        assert "jsonPayload.job" not in found[suffix].props["filter"]
    types = {USER_METRIC + m.props["name"] for m in found.values()}
    for name, policy in policies(retail).items():
        [condition] = policy.props["conditions"]
        threshold = condition.get("conditionThreshold") or condition["conditionAbsent"]
        metric_type = threshold["filter"].split('"')[1]
        assert metric_type in types, name
        assert "metric.label.job" not in threshold["filter"], name
        assert "service_name" not in threshold["filter"], name


def test_the_dashboard_shows_each_runtime_by_name(retail: StackUnderTest) -> None:
    dashboard = json.loads(retail.one(DASHBOARD).props["dashboardJson"])
    tiles = dashboard["mosaicLayout"]["tiles"]
    for runtime, service in (("sync", "retail-sync"), ("export", "retail-export")):
        own = [t for t in tiles
               if t["widget"]["title"].startswith(f"Runtime {runtime} ({service}): ")]
        assert [t["widget"]["title"].split(": ", 1)[1] for t in own] == [
            "deliveries by job and outcome", "failed runs by job",
            "job duration p95 by job (ms)", "instances"]
        assert len({t["yPos"] for t in own}) == 1, "one row per runtime"
        filters = [t["widget"]["xyChart"]["dataSets"][0]["timeSeriesQuery"][
            "timeSeriesFilter"]["filter"] for t in own]
        assert all(f'resource.label.service_name="{service}"' in f for f in filters)
        assert 'metric.label.outcome=one_of("failed","failed_permanent")' in filters[1]
        assert f'metric.type="{INSTANCE_COUNT_METRIC}"' in filters[3]
    # The tiles tile the grid: within its 48 columns, none over another.
    cells = [(x, y) for t in tiles for x in range(t["xPos"], t["xPos"] + t["width"])
             for y in range(t["yPos"], t["yPos"] + t["height"])]
    assert len(cells) == len(set(cells))
    assert all(t["xPos"] + t["width"] <= dashboard["mosaicLayout"]["columns"] for t in tiles)


# --- config -------------------------------------------------------------------------------


def _dev(**kit: Any) -> dict[str, Any]:
    raw = copy.deepcopy(load_stack_config("dev", FIXTURE_STACKS_DIR))
    raw.update({f"scheduler-dedup:{k}": v for k, v in kit.items()})
    return raw


def _no_catch_up(raw: dict[str, Any]) -> dict[str, Any]:
    """`raw` with no job's catchUp (dev's hourly-sync has it): a stack without the
    watchdog cannot have it (tests/infra/test_catch_up.py)."""
    jobs = [{k: v for k, v in job.items() if k != "catchUp"} for job in raw["scheduler-dedup:jobs"]]
    return {**raw, "scheduler-dedup:jobs": jobs}


def test_watchdog_can_be_turned_off(tmp_path: Path) -> None:
    run = run_offline(
        _no_catch_up(_dev(watchdog={"enabled": False, "lookbackSeconds": 43200})), stack="dev",
        build_dir=tmp_path,
    )
    assert [f.name for f in run.of_type(FUNCTION)] == ["dedup-function"]
    assert not [r for r in run.resources if r.name.startswith("watchdog")]
    assert "sched-dedup-dev-watchdog" not in {a.props["accountId"] for a in run.of_type(ACCOUNT)}
    names = {m.props["name"].removeprefix("sched-dedup-dev-") for m in run.of_type(METRIC)}
    assert names == {"deliveries", "job-duration", "completed-unrecorded", "claim-lost"}
    assert [p.name for p in run.of_type(ALERT_POLICY)] == ["monitoring-alert-store-unavailable"]
    assert "watchdogUrl" not in run.outputs


def test_watchdog_config_is_validated() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(_dev(
            watchdog={"schedule": "every 10 minutes", "timeZone": "Mars/Olympus",
                      "lookbackSeconds": 10, "graceSeconds": -1, "cadence": 1},
            alerts={"emails": ["oncall@example.com", "not-an-address", "ONCALL@example.com"]},
        ))
    keys = set(caught.value.keys)
    assert {
        "scheduler-dedup:watchdog.schedule",
        "scheduler-dedup:watchdog.timeZone",
        "scheduler-dedup:watchdog.lookbackSeconds",
        "scheduler-dedup:watchdog.graceSeconds",
        "scheduler-dedup:watchdog.cadence",
        "scheduler-dedup:alerts.emails[1]",
    } <= keys


def test_alert_emails_listed_twice_are_rejected() -> None:
    with pytest.raises(ConfigError, match="listed twice") as caught:
        load_config(_dev(alerts={"emails": ["a@example.com", "A@example.com"]}))
    assert caught.value.keys == ("scheduler-dedup:alerts.emails[1]",)


def test_engine_strings_are_read() -> None:
    cfg = load_config(_no_catch_up(_dev(
        watchdog=json.dumps({"enabled": "false", "lookbackSeconds": "7200"}),
        alerts=json.dumps({"emails": ["oncall@example.com"]}),
    )))
    assert cfg.watchdog.enabled is False
    assert cfg.watchdog.lookback_seconds == 7200
    assert cfg.alerts.emails == ("oncall@example.com",)


def test_job_named_watchdog_is_rejected_while_the_watchdog_runs() -> None:
    raw = _dev()
    raw["scheduler-dedup:jobs"][0]["name"] = "watchdog"
    with pytest.raises(ConfigError) as caught:
        load_config(raw)
    assert caught.value.keys == ("scheduler-dedup:jobs[0].name",)
    assert load_config({**_no_catch_up(raw), "scheduler-dedup:watchdog": {"enabled": False}})


def test_the_watchdog_account_id_fits() -> None:
    long_prefix = "a" * 22
    raw = _dev(namePrefix=long_prefix, databaseName=None)
    raw.pop("scheduler-dedup:databaseName")
    with pytest.raises(ConfigError) as caught:
        load_config(raw)
    assert caught.value.keys == ("scheduler-dedup:namePrefix",)
    assert "at most 21" in str(caught.value)
    assert load_config({**_no_catch_up(raw), "scheduler-dedup:watchdog": {"enabled": False}})


# --- the policy pack on these stacks ------------------------------------------------------


def test_production_stack_without_alert_emails_fails_the_policy_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = copy.deepcopy(load_stack_config("prod", FIXTURE_STACKS_DIR))
    del raw["scheduler-dedup:alerts"]
    # The program's config refuses it first (infra.config.stack.DEPLOY_RULES): here, the pack's own.
    monkeypatch.setattr("infra.config.stack.DEPLOY_RULES", ())
    run = run_offline(raw, stack="prod", build_dir=tmp_path)
    found = offline_check.check_declared(run.resources)
    assert [(v.policy, v.enforcement.value) for v in found] == [
        ("dedup-alerting-notifies-production", "mandatory")
    ]


def test_the_watchdog_passes_the_policy_pack(stack: StackUnderTest) -> None:
    mandatory = [
        v for v in offline_check.check_declared(stack.run.resources)
        if v.enforcement.value == "mandatory"
    ]
    assert mandatory == []


def test_the_watchdog_reads_the_settings_infra_gives_it(stack: StackUnderTest) -> None:
    """The contract with function/dedup/watchdog/settings.py: its own parser accepts the
    environment as deployed, with the stack's jobs, lookback, grace and caller."""
    from dedup.watchdog.settings import WatchSettings

    assert stack.watchdog is not None
    cfg = stack.config
    env = stack.watchdog.props["serviceConfig"]["environmentVariables"]
    settings = WatchSettings.from_env(
        {**env, **stack.secret_env(stack.watchdog), **stack.tables_env(stack.watchdog)})
    assert settings.lookback_seconds == cfg.watchdog.lookback_seconds
    assert settings.grace_seconds == cfg.watchdog.grace_seconds
    assert settings.store.allowed_callers == frozenset({stack.account_email("invoker")})
    assert settings.cursor_collection == f"{cfg.dedup.collection}_watchdog"
    assert settings.watch_database == cfg.dedup.watch_database_name
    by_name = {job.name: job for job in settings.jobs}
    assert set(by_name) == {cfg.job_id(j) for j in cfg.jobs}
    for job in cfg.jobs:
        watched = by_name[cfg.job_id(job)]
        assert watched.schedule == job.schedule
        assert watched.time_zone == job.time_zone
        assert watched.attempt_deadline_seconds == job.attempt_deadline_seconds
        assert watched.retry_window_seconds == job.retry_window_seconds
        assert watched.paused is job.paused
        # `make rerun` accepts a request for it exactly when its watchdog delivers one.
        assert watched.reruns is cfg.watchdog_delivers_to(proxied=job.proxy is not None,
                                                          runtime=job.runtime,
                                                          service=job.service)
        assert watched.runtime == job.runtime


def test_the_lookback_must_fit_in_the_records_retention() -> None:
    """The function refuses a lookback the records do not outlive (TTL would delete them
    before they are judged); the config says so before anything is deployed."""
    with pytest.raises(ConfigError) as caught:
        load_config(_dev(watchdog={"lookbackSeconds": 86400}))  # dev keeps records a day
    assert caught.value.keys == ("scheduler-dedup:watchdog.lookbackSeconds",)
    assert "retentionSeconds" in str(caught.value)
    assert load_config(_no_catch_up(_dev(watchdog={"enabled": False, "lookbackSeconds": 86400})))

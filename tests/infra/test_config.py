"""Stack config validation: one clear error naming the key and the fix, before any
resource is declared."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import KIT_ROOT as REPO_ROOT
from infra.config import (
    DEFAULTS,
    DEPLOY_RULES,
    KIT_KEYS,
    ConfigError,
    load_config,
)
from operator_tools.offline import DeclaredResource, engine_config, run_offline
from policies import offline_check
from policies.evaluate import mandatory
from policies.model import Enforcement
from policies.registry import by_name

Config = dict[str, Any]


def base_config() -> Config:
    """A small valid stack: the defaults plus project, region and one job."""
    return {
        "gcp:project": "acme-scheduler-test",
        "gcp:region": "europe-west1",
        "scheduler-dedup:jobs": [
            {
                "name": "nightly",
                "schedule": "0 3 * * *",
                "timeZone": "Europe/Berlin",
                "attemptDeadlineSeconds": 300,
                "retry": {"retryCount": 2, "minBackoffSeconds": 10, "maxBackoffSeconds": 60},
            }
        ],
    }


def set_job(field: str, value: Any, index: int = 0) -> Callable[[Config], None]:
    def change(cfg: Config) -> None:
        cfg["scheduler-dedup:jobs"][index][field] = value

    return change


def set_retry(field: str, value: Any) -> Callable[[Config], None]:
    def change(cfg: Config) -> None:
        cfg["scheduler-dedup:jobs"][0]["retry"][field] = value

    return change


def set_key(key: str, value: Any) -> Callable[[Config], None]:
    def change(cfg: Config) -> None:
        cfg[key] = value

    return change


def drop_key(key: str) -> Callable[[Config], None]:
    def change(cfg: Config) -> None:
        del cfg[key]

    return change


def duplicate_job(cfg: Config) -> None:
    jobs = cfg["scheduler-dedup:jobs"]
    jobs.append({**copy.deepcopy(jobs[0]), "schedule": "0 4 * * *"})


def several(*changes: Callable[[Config], None]) -> Callable[[Config], None]:
    def change(cfg: Config) -> None:
        for c in changes:
            c(cfg)

    return change


JOB0 = "scheduler-dedup:jobs[0]"
WORKFLOW = "projects/acme-scheduler-test/locations/europe-west1/workflows/daily-report"
RUN_JOB = "projects/acme-scheduler-test/locations/europe-west1/jobs/reindex"
TRIGGER = "projects/acme-scheduler-test/locations/global/triggers/release"
# (id, change to the valid base config, key the error must name)
INVALID: list[tuple[str, Callable[[Config], None], str]] = [
    ("six-field-cron", set_job("schedule", "0 0 3 * * *"), f"{JOB0}.schedule"),
    ("groc-schedule", set_job("schedule", "every 5 minutes"), f"{JOB0}.schedule"),
    ("cron-field-out-of-range", set_job("schedule", "61 * * * *"), f"{JOB0}.schedule"),
    ("bad-time-zone", set_job("timeZone", "Mars/Olympus_Mons"), f"{JOB0}.timeZone"),
    ("abbreviated-time-zone", set_job("timeZone", "EST"), f"{JOB0}.timeZone"),
    ("fixed-offset-time-zone", set_job("timeZone", "Etc/GMT+5"), f"{JOB0}.timeZone"),
    ("retry-neither-mapping-nor-none", set_job("retry", "never"), f"{JOB0}.retry"),
    ("deadline-too-short", set_job("attemptDeadlineSeconds", 14), f"{JOB0}.attemptDeadlineSeconds"),
    (
        "deadline-too-long",
        set_job("attemptDeadlineSeconds", 1801),
        f"{JOB0}.attemptDeadlineSeconds",
    ),
    (
        "deadline-beyond-function-timeout",
        several(
            set_key("scheduler-dedup:functionTimeoutSeconds", 120),
            set_job("attemptDeadlineSeconds", 300),
        ),
        f"{JOB0}.attemptDeadlineSeconds",
    ),
    ("retry-count-six", set_retry("retryCount", 6), f"{JOB0}.retry.retryCount"),
    ("retry-count-negative", set_retry("retryCount", -1), f"{JOB0}.retry.retryCount"),
    (
        "min-backoff-above-max",
        set_retry("minBackoffSeconds", 120),
        f"{JOB0}.retry.minBackoffSeconds",
    ),
    ("negative-doublings", set_retry("maxDoublings", -2), f"{JOB0}.retry.maxDoublings"),
    ("unknown-retry-key", set_retry("retries", 3), f"{JOB0}.retry.retries"),
    (
        # The default store timeout is 10 s: the lease must be at least 30 s.
        "lease-shorter-than-three-store-timeouts",
        set_key("scheduler-dedup:leaseSeconds", 29),
        "scheduler-dedup:leaseSeconds",
    ),
    (
        # The default lease (60 s) against a store timeout of 30 s (at least 90 s).
        "store-timeout-outgrows-default-lease",
        set_key("scheduler-dedup:storeTimeoutSeconds", 30),
        "scheduler-dedup:leaseSeconds",
    ),
    (
        "retention-inside-retry-window",
        set_key("scheduler-dedup:retentionSeconds", 900),
        "scheduler-dedup:retentionSeconds",
    ),
    (
        "retention-not-longer-than-lease",
        several(
            set_key("scheduler-dedup:leaseSeconds", 600),
            set_key("scheduler-dedup:retentionSeconds", 600),
            set_job("retry", {"retryCount": 0}),
            set_job("attemptDeadlineSeconds", 60),
        ),
        "scheduler-dedup:retentionSeconds",
    ),
    ("duplicate-job-names", duplicate_job, "scheduler-dedup:jobs[1].name"),
    ("bad-job-name", set_job("name", "nightly export!"), f"{JOB0}.name"),
    ("missing-job-name", set_job("name", None), f"{JOB0}.name"),
    ("unknown-job-key", set_job("attemptDeadline", 300), f"{JOB0}.attemptDeadline"),
    ("bad-job-logic", set_job("jobLogic", "example_jobs.example"), f"{JOB0}.jobLogic"),
    ("description-too-long", set_job("description", "x" * 501), f"{JOB0}.description"),
    ("body-not-json", set_job("body", {"at": float("nan")}), f"{JOB0}.body"),
    ("paused-not-boolean", set_job("paused", "sometimes"), f"{JOB0}.paused"),
    (
        "bad-default-job-logic",
        set_key("scheduler-dedup:defaultJobLogic", "example_jobs/example.py:run"),
        "scheduler-dedup:defaultJobLogic",
    ),
    ("no-jobs", set_key("scheduler-dedup:jobs", []), "scheduler-dedup:jobs"),
    ("jobs-missing", drop_key("scheduler-dedup:jobs"), "scheduler-dedup:jobs"),
    ("missing-project", drop_key("gcp:project"), "gcp:project"),
    ("missing-region", drop_key("gcp:region"), "gcp:region"),
    ("project-name-not-id", set_key("gcp:project", "Acme Scheduler"), "gcp:project"),
    ("zone-not-region", set_key("gcp:region", "europe-west1-b"), "gcp:region"),
    (
        "bad-missing-schedule-time",
        set_key("scheduler-dedup:missingScheduleTime", "skip"),
        "scheduler-dedup:missingScheduleTime",
    ),
    (
        "memory-without-unit",
        set_key("scheduler-dedup:functionMemory", "512MB"),
        "scheduler-dedup:functionMemory",
    ),
    (
        "memory-too-large",
        set_key("scheduler-dedup:functionMemory", "64Gi"),
        "scheduler-dedup:functionMemory",
    ),
    (
        "negative-min-instances",
        set_key("scheduler-dedup:minInstances", -1),
        "scheduler-dedup:minInstances",
    ),
    (
        "min-above-max-instances",
        several(
            set_key("scheduler-dedup:minInstances", 5), set_key("scheduler-dedup:maxInstances", 2)
        ),
        "scheduler-dedup:minInstances",
    ),
    (
        "zero-max-instances",
        set_key("scheduler-dedup:maxInstances", 0),
        "scheduler-dedup:maxInstances",
    ),
    (
        "timeout-beyond-limit",
        set_key("scheduler-dedup:functionTimeoutSeconds", 7200),
        "scheduler-dedup:functionTimeoutSeconds",
    ),
    (
        "lease-not-a-number",
        set_key("scheduler-dedup:leaseSeconds", "ten minutes"),
        "scheduler-dedup:leaseSeconds",
    ),
    (
        "delete-protection-not-boolean",
        set_key("scheduler-dedup:deleteProtection", "yes"),
        "scheduler-dedup:deleteProtection",
    ),
    (
        "bad-database-name",
        set_key("scheduler-dedup:databaseName", "Dedup_DB"),
        "scheduler-dedup:databaseName",
    ),
    (
        "not-a-firestore-location",
        set_key("scheduler-dedup:firestoreLocation", "us-central"),
        "scheduler-dedup:firestoreLocation",
    ),
    (
        "region-without-firestore",
        set_key("gcp:region", "europe-west5"),
        "scheduler-dedup:firestoreLocation",
    ),
    ("key-without-namespace", set_key("maxInstances", 3), "maxInstances"),
    (
        "key-in-misspelt-namespace",
        set_key("scheduler_dedup:functionTimeoutSeconds", 300),
        "scheduler_dedup:functionTimeoutSeconds",
    ),
    (
        "reserved-collection",
        set_key("scheduler-dedup:collection", "__runs__"),
        "scheduler-dedup:collection",
    ),
    (
        "unknown-kit-key",
        set_key("scheduler-dedup:leaseSecond", 600),
        "scheduler-dedup:leaseSecond",
    ),
    (
        "bad-name-prefix",
        set_key("scheduler-dedup:namePrefix", "Scheduler_Dedup"),
        "scheduler-dedup:namePrefix",
    ),
    # Jobs that call the idempotent proxy (jobs[].proxy).
    (
        "proxy-unknown-target",
        set_job("proxy", {"target": "cloud_function", "resource": WORKFLOW}),
        f"{JOB0}.proxy.target",
    ),
    (
        "proxy-target-missing",
        set_job("proxy", {"resource": WORKFLOW}),
        f"{JOB0}.proxy.target",
    ),
    (
        "proxy-resource-missing",
        set_job("proxy", {"target": "workflow"}),
        f"{JOB0}.proxy.resource",
    ),
    (
        "proxy-resource-of-another-kind",
        set_job("proxy", {"target": "workflow", "resource": RUN_JOB}),
        f"{JOB0}.proxy.resource",
    ),
    (
        "proxy-short-resource-name",
        set_job("proxy", {"target": "run_job", "resource": "reindex"}),
        f"{JOB0}.proxy.resource",
    ),
    (
        "proxy-resource-in-another-project",
        set_job(
            "proxy",
            {
                "target": "workflow",
                "resource": "projects/other-project/locations/europe-west1/workflows/w",
            },
        ),
        f"{JOB0}.proxy.resource",
    ),
    (
        "proxy-resource-by-project-number",
        set_job(
            "proxy",
            {"target": "workflow", "resource": "projects/123456789012/locations/x1/workflows/w"},
        ),
        f"{JOB0}.proxy.resource",
    ),
    (
        "proxy-and-job-logic",
        several(
            set_job("proxy", {"target": "workflow", "resource": WORKFLOW}),
            set_job("jobLogic", "example_jobs.example:run"),
        ),
        f"{JOB0}.jobLogic",
    ),
    (
        "proxy-unknown-key",
        set_job("proxy", {"target": "workflow", "resource": WORKFLOW, "token": "t"}),
        f"{JOB0}.proxy.token",
    ),
    ("proxy-not-a-mapping", set_job("proxy", WORKFLOW), f"{JOB0}.proxy"),
    (
        "proxy-substitution-without-underscore",
        set_job(
            "proxy", {"target": "build_trigger", "resource": TRIGGER, "tokenName": "DEDUP_TOKEN"}
        ),
        f"{JOB0}.proxy.tokenName",
    ),
    (
        "proxy-container-on-a-workflow",
        set_job("proxy", {"target": "workflow", "resource": WORKFLOW, "container": "main"}),
        f"{JOB0}.proxy.container",
    ),
    (
        # <databaseName>-proxy, the proxy's own database, must be a database ID too
        "proxy-database-id-too-long",
        several(
            set_job("proxy", {"target": "workflow", "resource": WORKFLOW}),
            set_key("scheduler-dedup:databaseName", "scheduler-dedup-" + "r" * 43),
        ),
        "scheduler-dedup:databaseName",
    ),
    (
        "proxy-timeout-beyond-limit",
        set_key("scheduler-dedup:proxyTimeoutSeconds", 601),
        "scheduler-dedup:proxyTimeoutSeconds",
    ),
    (
        "proxy-timeout-not-under-deadline",
        several(
            set_job("proxy", {"target": "workflow", "resource": WORKFLOW}),
            set_key("scheduler-dedup:proxyTimeoutSeconds", 290),
        ),
        "scheduler-dedup:proxyTimeoutSeconds",
    ),
]


def invalid_config(change: Callable[[Config], None]) -> Config:
    cfg = base_config()
    change(cfg)
    return cfg


def test_base_config_is_valid() -> None:
    cfg = load_config(base_config())
    assert cfg.project == "acme-scheduler-test"
    assert len(cfg.jobs) == 1


def test_table_has_at_least_twelve_cases() -> None:
    assert len(INVALID) >= 12
    assert len({case[0] for case in INVALID}) == len(INVALID)


@pytest.mark.parametrize(("change", "key"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_config_is_rejected_with_the_key(
    change: Callable[[Config], None], key: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(invalid_config(change))
    error = caught.value
    assert key in error.keys
    assert key in str(error)
    assert "Fix:" in str(error)


@pytest.mark.parametrize(("change", "key"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_config_declares_no_resource(
    change: Callable[[Config], None], key: str, tmp_path: Path
) -> None:
    """The whole program under mocks, as `pulumi up` runs it: it stops before any resource."""
    declared: list[DeclaredResource] = []
    with pytest.raises(ConfigError) as caught:
        run_offline(invalid_config(change), stack="test", build_dir=tmp_path, sink=declared)
    assert key in str(caught.value)
    assert declared == []
    assert not list(tmp_path.iterdir()), "not even the source zip is written"


def test_a_short_lease_names_the_bound_and_the_fix() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(
            {
                **base_config(),
                "scheduler-dedup:leaseSeconds": 20,
                "scheduler-dedup:storeTimeoutSeconds": 8,
            }
        )
    assert caught.value.keys == ("scheduler-dedup:leaseSeconds",)
    message = str(caught.value)
    assert "20 s is shorter than 3 x storeTimeoutSeconds (24 s)" in message
    assert "two failed renewals" in message
    assert "Fix: set leaseSeconds >= 24 or lower storeTimeoutSeconds" in message


@pytest.mark.parametrize(
    ("lease", "store_timeout"), [(30, 10), (3, 1), (180, 60)], ids=["default", "min", "max"]
)
def test_a_lease_of_exactly_three_store_timeouts_is_valid(lease: int, store_timeout: int) -> None:
    cfg = load_config(
        {
            **base_config(),
            "scheduler-dedup:leaseSeconds": lease,
            "scheduler-dedup:storeTimeoutSeconds": store_timeout,
        }
    )
    assert cfg.dedup.lease_seconds == lease


def test_the_lease_need_not_cover_the_function_timeout_or_any_deadline() -> None:
    """The lease is a liveness window the heartbeat renews, not a bound on the job: a lease
    far shorter than the function's timeout and than every job's deadline is valid."""
    cfg = base_config()
    cfg["scheduler-dedup:leaseSeconds"] = 30
    cfg["scheduler-dedup:functionTimeoutSeconds"] = 1800
    cfg["scheduler-dedup:jobs"][0]["attemptDeadlineSeconds"] = 1800
    cfg["scheduler-dedup:jobs"].append(
        {"name": "quick", "schedule": "*/5 * * * *", "attemptDeadlineSeconds": 600}
    )
    loaded = load_config(cfg)
    assert loaded.dedup.lease_seconds == 30
    assert loaded.dedup.lease_seconds < loaded.function.timeout_seconds
    assert all(loaded.dedup.lease_seconds < j.attempt_deadline_seconds for j in loaded.jobs)


def test_all_problems_are_reported_at_once() -> None:
    cfg = base_config()
    del cfg["gcp:region"]
    cfg["scheduler-dedup:jobs"][0]["schedule"] = "every day 03:00"
    cfg["scheduler-dedup:jobs"][0]["retry"]["retryCount"] = 9
    with pytest.raises(ConfigError) as caught:
        load_config(cfg)
    assert set(caught.value.keys) == {
        "gcp:region",
        f"{JOB0}.schedule",
        f"{JOB0}.retry.retryCount",
    }
    assert "3 problems" in str(caught.value)


def test_unknown_key_suggests_the_right_one() -> None:
    with pytest.raises(ConfigError, match="did you mean 'leaseSeconds'"):
        load_config({**base_config(), "scheduler-dedup:leaseSecond": 600})


def test_defaults_apply() -> None:
    cfg = load_config(base_config())
    assert cfg.name_prefix == DEFAULTS["namePrefix"]
    assert cfg.dedup.database_name == "scheduler-dedup"
    assert cfg.dedup.collection == "scheduler_runs"
    assert cfg.dedup.firestore_location == "europe-west1"
    assert cfg.dedup.delete_protection is True
    assert cfg.dedup.point_in_time_recovery is False
    assert cfg.dedup.lease_seconds == 60
    assert cfg.dedup.retention_seconds == 604800
    assert cfg.dedup.missing_schedule_time == "reject"
    assert cfg.function.timeout_seconds == 540
    assert cfg.function.memory == "512Mi"
    assert (cfg.function.min_instances, cfg.function.max_instances) == (0, 10)
    job = load_config(
        {**base_config(), "scheduler-dedup:jobs": [{"name": "j", "schedule": "*/5 * * * *"}]}
    ).jobs[0]
    assert job.time_zone == "Etc/UTC"
    assert job.attempt_deadline_seconds == 180
    # Retried by default: 3 retries 30, 60 and 120 s after their failed attempts.
    assert job.retry.retry_count == 3
    assert (job.retry.min_backoff_seconds, job.retry.max_backoff_seconds) == (30, 300)
    assert job.retry.max_doublings == 5
    assert job.job_logic == "example_jobs.example:run"
    assert job.body_json is None


def test_engine_strings_read_like_native_values() -> None:
    """The Pulumi engine hands a program strings ("600", "true", JSON): same result."""
    raw = {
        **base_config(),
        "scheduler-dedup:leaseSeconds": 900,
        "scheduler-dedup:deleteProtection": False,
        "scheduler-dedup:functionMemory": "1Gi",
    }
    raw["scheduler-dedup:jobs"][0]["body"] = {"b": [1, 2], "a": "x"}
    strings = engine_config(raw)
    assert strings["scheduler-dedup:leaseSeconds"] == "900"
    assert strings["scheduler-dedup:deleteProtection"] == "false"
    assert isinstance(strings["scheduler-dedup:jobs"], str)
    assert load_config(strings) == load_config(raw)
    assert load_config(raw).jobs[0].body_json == '{"a":"x","b":[1,2]}'


def test_pulumi_yaml_declares_the_same_defaults() -> None:
    project = yaml.safe_load((REPO_ROOT / "Pulumi.yaml").read_text())
    assert project["name"] == "scheduler-dedup"
    assert project["main"] == "infra/"
    assert project["runtime"] == {
        "name": "python",
        "options": {"toolchain": "pip", "virtualenv": ".venv"},
    }
    schema = project["config"]
    assert set(schema) == set(DEFAULTS)
    assert set(schema) <= KIT_KEYS
    # Pulumi's project config types (its project.json schema): an array names its items'.
    types = {bool: "boolean", int: "integer", str: "string", list: "array"}
    for key, default in DEFAULTS.items():
        assert schema[key]["default"] == default, key
        assert schema[key]["type"] == types[type(default)], key
        assert ("items" in schema[key]) == isinstance(default, list), key
        assert schema[key]["description"], key


def test_job_logic_routes_and_prod_like_settings() -> None:
    raw = base_config()
    raw["scheduler-dedup:jobs"].append(
        {"name": "hourly", "schedule": "0 * * * *", "jobLogic": "jobs.other:main"}
    )
    raw["scheduler-dedup:maxRequestConcurrency"] = 4
    cfg = load_config(raw)
    # Keyed by the deployed Scheduler job ID, <namePrefix>-<name>: what the function receives.
    assert cfg.job_routes() == {
        "scheduler-dedup-hourly": "jobs.other:main",
        "scheduler-dedup-nightly": "example_jobs.example:run",
    }
    assert cfg.function.available_cpu == "1"


def test_proxied_jobs_and_their_routes() -> None:
    raw = base_config()
    raw["scheduler-dedup:jobs"].append(
        {
            "name": "report",
            "schedule": "0 5 * * *",
            "proxy": {"target": "run_job", "resource": RUN_JOB, "container": "worker"},
        }
    )
    cfg = load_config(raw)
    assert cfg.proxy_timeout_seconds == 30
    assert [j.name for j in cfg.proxied_jobs] == ["report"]
    assert cfg.job_routes() == {"scheduler-dedup-nightly": "example_jobs.example:run"}
    target = cfg.proxy_routes()["scheduler-dedup-report"]
    assert (target.project, target.location, target.resource_id) == (
        "acme-scheduler-test",
        "europe-west1",
        "reindex",
    )
    assert target.route() == {"target": "run_job", "resource": RUN_JOB, "container": "worker"}
    # Judged against proxied jobs only: proxy timeout + 2 x storeTimeout (10) < 180 (default).
    raw["scheduler-dedup:proxyTimeoutSeconds"] = 159
    assert load_config(raw).proxy_timeout_seconds == 159
    raw["scheduler-dedup:proxyTimeoutSeconds"] = 160
    with pytest.raises(ConfigError, match=r"jobs\[1\] \(report\)"):
        load_config(raw)


def problem_of(change: Callable[[Config], None]) -> str:
    """The one problem `change` makes, as the error prints it."""
    with pytest.raises(ConfigError) as caught:
        load_config(invalid_config(change))
    assert len(caught.value.problems) == 1, str(caught.value)
    return str(caught.value.problems[0])


@pytest.mark.parametrize(
    ("zone", "suggestion"),
    [
        ("EST", "America/New_York"),
        ("MST", "America/Denver"),
        ("HST", "Pacific/Honolulu"),
        ("EST5EDT", "America/New_York"),
        ("PST", "America/Los_Angeles"),
        ("Etc/GMT+5", "America/New_York"),
        ("America/NewYork", "did you mean 'America/New_York'?"),
        ("europe/berlin", "did you mean 'Europe/Berlin'?"),
    ],
)
def test_time_zones_of_no_place_are_rejected_with_a_suggestion(zone: str, suggestion: str) -> None:
    problem = problem_of(set_job("timeZone", zone))
    assert problem.startswith(f"{JOB0}.timeZone: ")
    assert suggestion in problem.split("Fix: ", 1)[1]


@pytest.mark.parametrize(
    "zone", ["Etc/UTC", "UTC", "Etc/GMT+0", "America/New_York", "Asia/Kolkata"]
)
def test_time_zones_of_places_and_utc_are_valid(zone: str) -> None:
    assert load_config(invalid_config(set_job("timeZone", zone))).jobs[0].time_zone == zone


@pytest.mark.parametrize(
    ("location", "suggestion"),
    [("us-central", "did you mean 'us-central1'?"), ("nam-5", "did you mean 'nam5'?")],
)
def test_firestore_locations_are_checked_against_the_real_list(
    location: str, suggestion: str
) -> None:
    problem = problem_of(set_key("scheduler-dedup:firestoreLocation", location))
    assert f"'{location}' is not a Firestore location" in problem
    assert suggestion in problem


@pytest.mark.parametrize("location", ["eur3", "nam5", "nam7", "us-central1", "asia-south1"])
def test_firestore_multi_regions_and_regions_are_valid(location: str) -> None:
    config = load_config({**base_config(), "scheduler-dedup:firestoreLocation": location})
    assert config.dedup.firestore_location == location


@pytest.mark.parametrize(
    ("change", "fix"),
    [
        (set_retry("retryCount", "five"), "give an integer from 0 to 5, e.g. 3"),
        (set_key("scheduler-dedup:leaseSeconds", "x"), "give an integer >= 1, e.g. 60"),
        (set_key("scheduler-dedup:functionTimeoutSeconds", "long"),
         "give an integer from 1 to 3600, e.g. 540"),
    ],
    ids=["retry-count", "lease", "function-timeout"],
)
def test_type_errors_give_a_hint_that_fits_the_key(
    change: Callable[[Config], None], fix: str
) -> None:
    assert problem_of(change).endswith(f"Fix: {fix}")


def test_a_six_field_cron_error_is_about_the_seconds_field() -> None:
    problem = problem_of(set_job("schedule", "0 30 2 * * *"))
    assert "drop the first field ('30 2 * * *')" in problem
    assert "every 5 minutes" not in problem
    assert "every 5 minutes" in problem_of(set_job("schedule", "every 5 minutes"))


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("maxInstances", "scheduler-dedup:maxInstances"),
        ("scheduler_dedup:functionTimeoutSeconds", "scheduler-dedup:functionTimeoutSeconds"),
        ("schedulerdedup:leaseSecond", "scheduler-dedup:leaseSeconds"),
    ],
)
def test_keys_in_an_unknown_namespace_name_the_key_meant(key: str, meant: str) -> None:
    problem = problem_of(set_key(key, 3))
    assert problem.startswith(f"{key}: ")
    assert f"did you mean {meant}?" in problem


def test_keys_of_the_providers_namespaces_are_theirs() -> None:
    config = {**base_config(), "gcp:zone": "europe-west1-b", "pulumi:tags": {"team": "a"},
              "time:anything": "x"}
    assert load_config(config).project == "acme-scheduler-test"


def test_retry_none_is_at_most_once() -> None:
    job = load_config(invalid_config(set_job("retry", "none"))).jobs[0]
    assert (job.retry.retry_count, job.retry.max_retry_duration_seconds) == (0, 0)
    assert job.retry_window_seconds == job.attempt_deadline_seconds


# --- deploy rules: the mandatory policies the stack config alone decides -------------------

ALERTS = "scheduler-dedup:alerts"
PROTECTION = "scheduler-dedup:deleteProtection"
# Per DEPLOY_RULES entry (by policy): a change of the base config that breaks it, the key
# the refusal names, and the changes its fix offers (each makes the stack pass the pack).
BREAKS: dict[str, tuple[Callable[[Config], None], str, list[Callable[[Config], None]]]] = {
    "dedup-alerting-notifies-production": (
        set_key(PROTECTION, True),  # the default, spelt out
        f"{ALERTS}.emails",
        [set_key(ALERTS, {"emails": ["oncall@example.com"]}), set_key(PROTECTION, False)],
    ),
}


def test_every_deploy_rule_is_a_mandatory_policy_of_the_pack() -> None:
    assert {rule.policy for rule in DEPLOY_RULES} == set(BREAKS)
    for rule in DEPLOY_RULES:
        assert by_name(rule.policy).enforcement is Enforcement.MANDATORY


def test_a_protected_stack_without_alert_emails_is_refused_for_a_deployment() -> None:
    """Delete protection is on by default, and such a stack must alert someone: the
    program's config (so `make plan`) refuses it with the key and the fix, not the policy
    check after the plan. Local runs (demo, emulator) deploy nothing and take it."""
    with pytest.raises(ConfigError) as caught:
        load_config(base_config(), deploying=True)
    assert caught.value.keys == (f"{ALERTS}.emails",)
    message = str(caught.value)
    assert "dedup-alerting-notifies-production" in message
    assert "Fix: add `scheduler-dedup:alerts: {emails: [oncall@example.com]}`" in message
    assert "or set `scheduler-dedup:deleteProtection: false`" in message
    assert load_config(base_config()).alerts.emails == ()
    emails = {**base_config(), ALERTS: {"emails": ["oncall@example.com"]}}
    assert load_config(emails, deploying=True).alerts.emails == ("oncall@example.com",)
    unprotected = load_config({**base_config(), PROTECTION: False}, deploying=True)
    assert not unprotected.dedup.delete_protection


def test_a_deploy_rule_is_reported_with_the_other_rules_across_settings() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(invalid_config(set_key("scheduler-dedup:retentionSeconds", 900)),
                    deploying=True)
    assert set(caught.value.keys) == {"scheduler-dedup:retentionSeconds", f"{ALERTS}.emails"}


@pytest.mark.parametrize("policy", sorted(BREAKS))
def test_a_deploy_rule_refuses_what_its_policy_would_block(
    policy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule and its policy agree: the program (`pulumi up`, `make plan`) refuses the
    broken stack before declaring anything; with the rule off, the pack blocks the same
    stack by that policy alone; each fix the rule offers passes the pack."""
    break_it, key, fixes = BREAKS[policy]
    broken = invalid_config(break_it)
    declared: list[DeclaredResource] = []
    with pytest.raises(ConfigError) as caught:
        run_offline(broken, stack="test", build_dir=tmp_path / "refused", sink=declared)
    assert caught.value.keys == (key,)
    assert declared == []

    with monkeypatch.context() as patch:
        patch.setattr("infra.config.stack.DEPLOY_RULES", ())
        run = run_offline(broken, stack="test", build_dir=tmp_path / "unruled")
    blocked = mandatory(offline_check.check_declared(run.resources))
    assert [v.policy for v in blocked] == [policy]

    for index, fix in enumerate(fixes):
        fixed = copy.deepcopy(broken)
        fix(fixed)
        run = run_offline(fixed, stack="test", build_dir=tmp_path / f"fix-{index}")
        assert mandatory(offline_check.check_declared(run.resources)) == [], index

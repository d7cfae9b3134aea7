"""Every malformed delivery gets a 400 with a one-line reason and writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from dedup.job_logic import JobRegistry
from dedup.settings import MissingScheduleTime, Settings, SettingsError
from local_stack.deliveries import PROJECT, in_process_function, scheduler_headers
from local_stack.steered_job import read_ledger
from local_stack.tables import write_job_tables

pytestmark = pytest.mark.usefixtures("firestore_emulator")


def with_(**changes: str | None) -> dict[str, str]:
    headers = scheduler_headers()
    for name, value in changes.items():
        header = {"job": "X-CloudScheduler-JobName", "time": "X-CloudScheduler-ScheduleTime",
                  "project": "X-Dedup-Project", "location": "X-Dedup-Location"}[name]
        if value is None:
            headers.pop(header)
        else:
            headers[header] = value
    return headers


MALFORMED: dict[str, tuple[dict[str, str], str]] = {
    "no headers": ({}, "missing X-CloudScheduler-JobName"),
    "empty job name": (with_(job=""), "missing X-CloudScheduler-JobName"),
    "job name with a space": (with_(job="nightly export"), "not a Cloud Scheduler job ID"),
    "job name with punctuation": (with_(job="job!"), "not a Cloud Scheduler job ID"),
    "job name too long": (with_(job="j" * 501), "not a Cloud Scheduler job ID"),
    "full name without job": (with_(job="projects/p/locations/l/jobs/"), "neither a job ID"),
    "path of the wrong shape": (with_(job="projects/acme-1/jobs/x"), "neither a job ID"),
    "full name contradicts project header": (
        with_(job="projects/other-proj/locations/europe-west1/jobs/x"), "contradicts"),
    "bad project inside full name": (
        with_(job="projects/BAD!/locations/europe-west1/jobs/x", project=None), "project"),
    "missing schedule time": (with_(time=None), "missing X-CloudScheduler-ScheduleTime"),
    "empty schedule time": (with_(time=""), "not an RFC 3339 timestamp"),
    "words for a time": (with_(time="yesterday"), "not an RFC 3339 timestamp"),
    "date only": (with_(time="2026-10-16"), "not an RFC 3339 timestamp"),
    "no offset": (with_(time="2026-10-16T12:00:00"), "not an RFC 3339 timestamp"),
    "unix seconds": (with_(time="1760616000"), "not an RFC 3339 timestamp"),
    "trailing junk": (with_(time="2026-10-16T12:00:00Zjunk"), "not an RFC 3339 timestamp"),
    "30 February": (with_(time="2026-02-30T12:00:00Z"), "not a real instant"),
    "hour 25": (with_(time="2026-10-16T25:00:00Z"), "not a real instant"),
    "offset beyond 24 h": (with_(time="2026-10-16T12:00:00+25:00"), "not a real instant"),
    "bad project header": (with_(project="Bad_Project!"), "not a Google Cloud project ID"),
    "too short project": (with_(project="abc"), "not a Google Cloud project ID"),
    "bad location header": (with_(location="EU WEST"), "not a Google Cloud location ID"),
    # Valid RFC 3339, but no UTC instant exists (datetime overflows): a 400, not a 500.
    "before year 1 in UTC": (with_(time="0001-01-01T00:30:00+01:00"), "outside years 1-9999"),
    "after year 9999 in UTC": (with_(time="9999-12-31T23:59:59-01:00"), "outside years 1-9999"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_delivery_is_a_400_that_writes_nothing(
    case: str, collection_name: str, ledger: Path
) -> None:
    headers, reason = MALFORMED[case]
    function = in_process_function(collection_name)
    status, body = function.deliver(headers, b'{"result": 1}')
    assert status == 400
    assert reason in body["error"]
    assert "\n" not in body["error"]
    assert list(function.client.collection(collection_name).stream()) == []
    assert read_ledger(str(ledger)) == []


def test_the_table_covers_at_least_fifteen_cases() -> None:
    assert len(MALFORMED) >= 15


def test_the_reason_quotes_a_huge_header_only_in_part(collection_name: str) -> None:
    function = in_process_function(collection_name)
    status, body = function.deliver(with_(time="x" * 100_000))
    assert status == 400
    assert "not an RFC 3339 timestamp" in body["error"]
    assert len(body["error"]) < 300


def test_missing_schedule_time_can_be_set_to_run_without_dedup(
    collection_name: str, ledger: Path
) -> None:
    function = in_process_function(
        collection_name, missing_schedule_time=MissingScheduleTime.RUN)
    replies = [function.deliver(with_(time=None)) for _ in range(2)]
    assert [(s, b["outcome"]) for s, b in replies] == [(200, "unkeyed")] * 2
    assert len(read_ledger(str(ledger))) == 2  # no key, so no dedup: the documented trade-off
    assert list(function.client.collection(collection_name).stream()) == []


BAD_SETTINGS: list[tuple[dict[str, str], str]] = [
    ({"DEDUP_LOCATION": "europe-west1"}, "DEDUP_PROJECT"),
    ({"DEDUP_PROJECT": PROJECT}, "DEDUP_LOCATION"),
    ({"DEDUP_LEASE_SECONDS": "ten"}, "DEDUP_LEASE_SECONDS"),
    ({"DEDUP_LEASE_SECONDS": "0"}, "DEDUP_LEASE_SECONDS"),
    ({"DEDUP_LEASE_SECONDS": "900", "DEDUP_RETENTION_SECONDS": "600"}, "DEDUP_RETENTION_SECONDS"),
    # Equal is not enough: a record must outlive the lease of the claim it holds.
    ({"DEDUP_LEASE_SECONDS": "600", "DEDUP_RETENTION_SECONDS": "600"}, "DEDUP_RETENTION_SECONDS"),
    # A NaN lease never expires (every comparison with NaN is false); inf likewise.
    ({"DEDUP_LEASE_SECONDS": "nan"}, "DEDUP_LEASE_SECONDS"),
    ({"DEDUP_LEASE_SECONDS": "inf"}, "DEDUP_LEASE_SECONDS"),
    ({"DEDUP_RETENTION_SECONDS": "NaN"}, "DEDUP_RETENTION_SECONDS"),
    ({"DEDUP_STORE_TIMEOUT_SECONDS": "infinity"}, "DEDUP_STORE_TIMEOUT_SECONDS"),
    ({"DEDUP_CACHE_SIZE": "nan"}, "DEDUP_CACHE_SIZE"),
    ({"DEDUP_MISSING_SCHEDULE_TIME": "ignore"}, "DEDUP_MISSING_SCHEDULE_TIME"),
    ({"DEDUP_STORE_TIMEOUT_SECONDS": "-1"}, "DEDUP_STORE_TIMEOUT_SECONDS"),
    ({"DEDUP_CACHE_SIZE": "many"}, "DEDUP_CACHE_SIZE"),
    ({"DEDUP_FORCED_RUN_MARGIN_SECONDS": "nan"}, "DEDUP_FORCED_RUN_MARGIN_SECONDS"),
    ({"DEDUP_FORCED_RUN_MARGIN_SECONDS": "inf"}, "DEDUP_FORCED_RUN_MARGIN_SECONDS"),
    ({"DEDUP_FORCED_RUN_MARGIN_SECONDS": "-1"}, "DEDUP_FORCED_RUN_MARGIN_SECONDS"),
    ({"DEDUP_FORCED_RUN_MARGIN_SECONDS": "soon"}, "DEDUP_FORCED_RUN_MARGIN_SECONDS"),
]


@pytest.mark.parametrize(("overrides", "named"), BAD_SETTINGS)
def test_bad_setting_fails_start_up_naming_the_variable(
    overrides: dict[str, str], named: str
) -> None:
    env = {"DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": "europe-west1", **overrides}
    if named in ("DEDUP_PROJECT", "DEDUP_LOCATION"):
        env = overrides
    with pytest.raises(SettingsError, match=named):
        Settings.from_env(env)


@pytest.mark.parametrize(("table", "named"), [
    ("{not json", "job_routes.json is not valid JSON"),
    ('["a"]', "job_routes.json must be a JSON object"),
    ('{"a": 1}', "job_routes.json must be a JSON object"),
])
def test_a_bad_job_routes_table_fails_start_up_naming_the_file(
    tmp_path: Path, table: str, named: str
) -> None:
    env = {"DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": "europe-west1",
           **write_job_tables(tmp_path, job_routes=table)}
    with pytest.raises(SettingsError, match=named):
        Settings.from_env(env)


def test_job_routes_are_read_from_the_table_and_absent_means_none(tmp_path: Path) -> None:
    base = {"DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": "europe-west1"}
    routes = {"p-export": "example_jobs.example:run"}
    env = {**base, **write_job_tables(tmp_path / "with", job_routes=routes)}
    assert Settings.from_env(env).job_routes == routes
    # The watchdog and the proxy read the store settings too: their archives hold no routes.
    without = {**base, **write_job_tables(tmp_path / "without")}
    assert Settings.from_env(without).job_routes == {}


@pytest.mark.parametrize(
    ("spec", "named"),
    [("example_jobs.example", "DEDUP_JOB"), ("no_such_module:run", "DEDUP_JOB"),
     ("example_jobs.example:missing", "DEDUP_JOB")],
)
def test_bad_job_logic_fails_start_up(spec: str, named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        JobRegistry(spec, {})
    with pytest.raises(SettingsError, match=r"DEDUP_JOB_ROUTES\['export'\]"):
        JobRegistry("example_jobs.example:run", {"export": spec})

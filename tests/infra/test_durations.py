"""Durations the program sends to Cloud Scheduler: whole seconds, always ("1000000s", never
"1e+06s", which the API refuses), within the bounds the API accepts; and every Scheduler
job the program declares passes the contract checks (infra/contracts: Google's own
`google.cloud.scheduler.v1.Job`, parsed strictly, and Scheduler's documented limits)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from google.cloud.scheduler_v1 import Job
from google.protobuf.json_format import ParseError  # type: ignore[import-untyped]

from infra.config import ConfigError, load_config
from infra.contracts import check_resource
from infra.contracts.convert import CONTRACTS, request_body
from infra.scheduled_job import duration
from infra.scheduler_rules import (
    ATTEMPT_DEADLINE_MAX_SECONDS,
    ATTEMPT_DEADLINE_MIN_SECONDS,
    DURATION_MAX_SECONDS,
    MAX_DOUBLINGS_MAX,
    duration_string,
)
from operator_tools.offline import load_stack_config, run_offline
from tests.infra.helpers import JOB
from tests.stacks import FIXTURE_STACKS_DIR

# (seconds, what the API gets): the API's maximum is google.protobuf.Duration's.
DURATIONS = [
    (0, "0s"),
    (5, "5s"),
    (15, "15s"),
    (180, "180s"),
    (1800, "1800s"),
    (3600, "3600s"),
    (86_400, "86400s"),
    (999_999, "999999s"),
    (1_000_000, "1000000s"),  # f"{1e6:g}s" was "1e+06s"
    (1_000_000.0, "1000000s"),
    (21_600_000, "21600000s"),
    (315_576_000_000, "315576000000s"),
    (DURATION_MAX_SECONDS, "315576000000s"),
]


@pytest.mark.parametrize(("seconds", "expected"), DURATIONS)
def test_duration_table(seconds: float, expected: str) -> None:
    assert duration(seconds) == duration_string(seconds) == expected
    # Google's own parser reads it back as the same number of seconds.
    job = Job.from_json(json.dumps({"retryConfig": {"maxRetryDuration": expected}}))
    assert job.retry_config.max_retry_duration.total_seconds() == seconds


@pytest.mark.parametrize(
    "seconds", [1.5, -1, DURATION_MAX_SECONDS + 1, float("inf"), float("nan"), True, "180"]
)
def test_durations_the_api_cannot_take_are_refused(seconds: Any) -> None:
    with pytest.raises(ValueError):
        duration_string(seconds)


@pytest.mark.parametrize("text", ["1e+06s", f"{DURATION_MAX_SECONDS + 1}s"])
def test_googles_parser_refuses_what_the_old_format_and_the_range_would_send(text: str) -> None:
    """Not vacuous: the check below tells a bad duration from a good one."""
    with pytest.raises(ParseError):
        Job.from_json(json.dumps({"retryConfig": {"maxRetryDuration": text}}))


def one_job_stack(retry: Mapping[str, Any], **kit: Any) -> dict[str, Any]:
    config = copy.deepcopy(load_stack_config("dev", FIXTURE_STACKS_DIR))
    config["scheduler-dedup:jobs"] = [
        {
            "name": "long-retries",
            "schedule": "0 3 * * *",
            "attemptDeadlineSeconds": ATTEMPT_DEADLINE_MAX_SECONDS,
            "retry": dict(retry),
        }
    ]
    config["scheduler-dedup:functionTimeoutSeconds"] = ATTEMPT_DEADLINE_MAX_SECONDS
    for key, value in kit.items():
        config[f"scheduler-dedup:{key}"] = value
    return config


STACKS: dict[str, dict[str, Any]] = {
    "dev": load_stack_config("dev", FIXTURE_STACKS_DIR),
    "prod": load_stack_config("prod", FIXTURE_STACKS_DIR),
    # Retried for 1,000,000 s, backoff up to 1,000,000 s.
    "one-million": one_job_stack(
        {
            "retryCount": 5,
            "maxRetryDurationSeconds": 1_000_000,
            "minBackoffSeconds": 1,
            "maxBackoffSeconds": 1_000_000,
            "maxDoublings": 20,
        },
        retentionSeconds=5_000_000,
    ),
    # Every bound at the API's maximum.
    "api-maximum": one_job_stack(
        {
            "retryCount": 0,
            "maxRetryDurationSeconds": DURATION_MAX_SECONDS,
            "minBackoffSeconds": DURATION_MAX_SECONDS,
            "maxBackoffSeconds": DURATION_MAX_SECONDS,
            "maxDoublings": MAX_DOUBLINGS_MAX,
        },
        retentionSeconds=DURATION_MAX_SECONDS + 2 * ATTEMPT_DEADLINE_MAX_SECONDS,
    ),
}


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_declared_jobs_are_valid_google_scheduler_jobs(stack: str, tmp_path: Path) -> None:
    run = run_offline(STACKS[stack], stack=stack, build_dir=tmp_path)
    jobs = run.of_type(JOB)
    assert jobs
    for declared in jobs:
        props = declared.props
        # The contract checks' conversion (the one `make plan` runs), parsed again here to
        # read the values back.
        assert check_resource(declared) == []
        body = request_body(CONTRACTS[JOB], props)
        parsed = Job.from_json(json.dumps(body), ignore_unknown_fields=False)
        retry = props["retryConfig"]
        for key in ("maxRetryDuration", "minBackoffDuration", "maxBackoffDuration"):
            assert retry[key].endswith("s") and retry[key][:-1].isdigit(), (key, retry[key])
        assert props["attemptDeadline"][:-1].isdigit()
        deadline = parsed.attempt_deadline.total_seconds()
        assert ATTEMPT_DEADLINE_MIN_SECONDS <= deadline <= ATTEMPT_DEADLINE_MAX_SECONDS
        assert parsed.retry_config.max_doublings == retry["maxDoublings"]
    if stack == "one-million":
        assert jobs[0].props["retryConfig"]["maxRetryDuration"] == "1000000s"
        assert jobs[0].props["retryConfig"]["maxBackoffDuration"] == "1000000s"
    if stack == "api-maximum":
        assert jobs[0].props["retryConfig"]["maxRetryDuration"] == "315576000000s"


def retry_config(**retry: Any) -> dict[str, Any]:
    config = copy.deepcopy(load_stack_config("dev", FIXTURE_STACKS_DIR))
    config["scheduler-dedup:jobs"][1]["retry"].update(retry)
    return config


RETRY_KEY = "scheduler-dedup:jobs[1].retry"


@pytest.mark.parametrize(
    ("field", "value", "accepted"),
    [
        ("maxRetryDurationSeconds", 0, True),
        ("maxRetryDurationSeconds", DURATION_MAX_SECONDS + 1, False),
        ("maxRetryDurationSeconds", -1, False),
        ("minBackoffSeconds", DURATION_MAX_SECONDS + 1, False),
        ("maxBackoffSeconds", DURATION_MAX_SECONDS + 1, False),
        ("maxDoublings", MAX_DOUBLINGS_MAX, True),
        ("maxDoublings", MAX_DOUBLINGS_MAX + 1, False),
        ("retryCount", 5, True),
        ("retryCount", 6, False),
    ],
)
def test_retry_bounds_match_the_api(field: str, value: int, accepted: bool) -> None:
    config = retry_config(**{field: value})
    if accepted:
        load_config(config)
        return
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert caught.value.keys == (f"{RETRY_KEY}.{field}",)
    assert "Fix: use a value" in str(caught.value)


@pytest.mark.parametrize(
    ("deadline", "accepted"),
    [(14, False), (15, True), (1800, True), (1801, False)],
)
def test_attempt_deadline_bounds_of_http_targets(deadline: int, accepted: bool) -> None:
    config = copy.deepcopy(load_stack_config("prod", FIXTURE_STACKS_DIR))
    config["scheduler-dedup:jobs"][1]["attemptDeadlineSeconds"] = deadline
    if accepted:
        load_config(config)
        return
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert caught.value.keys == ("scheduler-dedup:jobs[1].attemptDeadlineSeconds",)

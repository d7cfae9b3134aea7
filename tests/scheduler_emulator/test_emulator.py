"""The Scheduler emulator against Cloud Scheduler's documented behaviour, using a small
local HTTP target and a deterministic clock (no function, no Firestore)."""

from __future__ import annotations

import base64
import itertools
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from infra.config import JobSettings
from infra.scheduled_job import ScheduledJobArgs
from infra.scheduler_rules import RetrySettings
from scheduler_emulator import ManualClock, SchedulerEmulator
from scheduler_emulator.faults import (
    DEFAULT_MIX,
    MANUAL_OVERLAP,
    MISSED,
    STORE_FAULTS,
    STORE_OUTAGE,
    STORE_STALL,
    FaultPlan,
    StoreFaultsUnsupported,
)
from scheduler_emulator.records import Delivery, EmulatorResult, StoreFaultHook
from scheduler_emulator.stack import Job, Stack, job_from_settings
from tests.scheduler_emulator.target import Received, RecordingTarget, Responder
from tests.waiting import let_time_pass, wait_until

START = datetime(2026, 10, 16, 0, 0, tzinfo=UTC)
PROJECT = "acme-billing-dev"
REGION = "europe-west1"
PREFIX = "billing-dev"


def stack_of(*jobs: Job) -> Stack:
    return Stack(project=PROJECT, region=REGION, jobs=jobs, name_prefix=PREFIX)


def deployed(**settings: Any) -> Job:
    """A job declared as in a stack file (camelCase keys), as the Pulumi program deploys it."""
    return job_from_settings(
        JobSettings.model_validate(settings), project=PROJECT, region=REGION, name_prefix=PREFIX
    )


def utc(r: Received) -> str | None:
    """The schedule time a request carried, spelled in UTC (one spelling per instant)."""
    value = r.header("X-CloudScheduler-ScheduleTime")
    if value is None:
        return None
    return datetime.fromisoformat(value).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def replay(
    job: Job,
    responder: Responder | None = None,
    *,
    ticks: int = 1,
    faults: FaultPlan | None = None,
    target: RecordingTarget | None = None,
    **options: Any,
) -> tuple[EmulatorResult, RecordingTarget, ManualClock]:
    """Replay `job` against a target answering per `responder` (or `target`, whose
    responder may look at what it received), on a test clock: 1 simulated s = 10 ms."""
    clock = ManualClock(START, scale=0.01)
    target = target or RecordingTarget(responder)
    target.now = clock.now
    with target.serving():
        emulator = SchedulerEmulator(
            target.url,
            stack_of(job),
            ticks=ticks,
            start=START,
            clock_factory=lambda: clock,
            faults=faults,
            **options,
        )
        result = emulator.run()
    return result, target, clock


def offsets(received: list[Received]) -> list[float]:
    """Seconds between consecutive arrivals, on the emulator's clock."""
    times = [r.at for r in received if r.at is not None]
    assert len(times) == len(received)
    return [(b - a).total_seconds() for a, b in itertools.pairwise(times)]


# -- what each delivery carries ------------------------------------------------------


NIGHTLY = {
    "name": "nightly-export", "schedule": "0 3 * * *", "timeZone": "Europe/Berlin",
    "body": {"report": "daily"},
}


def test_headers_are_exactly_schedulers() -> None:
    job = deployed(**NIGHTLY)
    result, target, _ = replay(job, token="tok-123")
    [request] = target.received
    headers = dict(request.headers)
    sent = {k: v for k, v in headers.items() if k not in ("Host", "Accept-Encoding")}
    assert sent == {
        "X-CloudScheduler": "true",
        # The deployed job's full name: its ID carries the stack's namePrefix.
        "X-CloudScheduler-JobName": (
            f"projects/{PROJECT}/locations/{REGION}/jobs/{PREFIX}-nightly-export"
        ),
        # 03:00 in Berlin on 16 October (CEST, UTC+2), with the job's own offset.
        "X-CloudScheduler-ScheduleTime": "2026-10-16T03:00:00+02:00",
        "User-Agent": "Google-Cloud-Scheduler",
        "X-Dedup-Project": PROJECT,
        "X-Dedup-Location": REGION,
        # The job's own httpTarget headers: its business runs (dedup.business_runs; a job
        # outside a stack has no choices filled in: the function reads BSD cron -s's).
        "X-Dedup-Schedule": "0 3 * * *",
        "X-Dedup-Time-Zone": "Europe/Berlin",
        "X-Dedup-Attempt-Deadline": "180",
        "Content-Type": "application/json",
        "Content-Length": str(len(request.body)),
        "Authorization": "Bearer tok-123",
    }
    assert request.method == "POST"
    assert json.loads(request.body) == {"report": "daily"}
    [run] = result.runs
    assert run.acknowledged and run.stop_reason == "acknowledged"


def test_the_jobs_headers_and_body_are_the_pulumi_programs_own() -> None:
    # Whatever ScheduledJobArgs declares as the httpTarget is what arrives.
    settings = JobSettings.model_validate(NIGHTLY)
    args = ScheduledJobArgs(
        job=settings, project=PROJECT, region=REGION, target_uri="", invoker_email=""
    )
    _, target, _ = replay(deployed(**NIGHTLY))
    [request] = target.received
    for name, value in args.headers().items():
        assert request.header(name) == value
    assert request.body == base64.b64decode(args.body_base64() or "")
    # No body declared: infra still declares application/json; nothing is sent.
    _, target, _ = replay(deployed(name="bare", schedule="*/5 * * * *"))
    assert target.received[0].body == b""
    assert target.received[0].header("Content-Type") == "application/json"


def test_default_token_is_an_oidc_token_as_cloud_run_forwards_it() -> None:
    stack = Stack(PROJECT, REGION, (Job("j", "*/5 * * * *"),), invoker_email="inv@x.iam")
    target = RecordingTarget()
    with target.serving():
        SchedulerEmulator(target.url, stack, ticks=1, start=START).run()
    auth = target.received[0].header("Authorization")
    assert auth is not None and auth.startswith("Bearer ")
    header_b64, claims_b64, signature = auth.removeprefix("Bearer ").split(".")

    def decoded(part: str) -> dict[str, Any]:
        return dict(json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))))

    assert decoded(header_b64)["alg"] == "RS256"
    claims = decoded(claims_b64)
    assert claims["iss"] == "https://accounts.google.com"
    assert claims["aud"] == target.url  # the audience is the target's URL
    assert claims["email"] == "inv@x.iam" and claims["email_verified"] is True
    assert claims["exp"] > claims["iat"]
    assert signature == "SIGNATURE_REMOVED_BY_GOOGLE"


def test_schedule_times_follow_the_cron_in_its_time_zone_across_dst() -> None:
    # Berlin leaves summer time on 25 October 2026: 03:00 local moves from 01:00Z to 02:00Z.
    job = Job("nightly", "0 3 * * *", "Europe/Berlin")
    _, target, _ = replay(job, ticks=12)
    times = [utc(r) for r in target.received]
    assert times[:2] == ["2026-10-16T01:00:00Z", "2026-10-17T01:00:00Z"]
    assert times[8:11] == ["2026-10-24T01:00:00Z", "2026-10-25T02:00:00Z", "2026-10-26T02:00:00Z"]
    assert len(set(times)) == 12
    # Spelled with the job's own offset: the local time stays 03:00 across the change.
    spelled = [r.header("X-CloudScheduler-ScheduleTime") for r in target.received]
    assert spelled[8:10] == ["2026-10-24T03:00:00+02:00", "2026-10-25T03:00:00+01:00"]


def test_schedule_time_spellings_name_one_instant() -> None:
    job = Job(
        "j", "0 3 * * *", "Europe/Berlin", retry=RetrySettings(retry_count=2, min_backoff_seconds=1)
    )
    _, target, _ = replay(job, lambda r: (500, 0.0), time_style="mixed")
    assert [r.header("X-CloudScheduler-ScheduleTime") for r in target.received] == [
        "2026-10-16T03:00:00+02:00",
        "2026-10-16T01:00:00Z",
        "2026-10-16T03:00:00+02:00",
    ]
    _, target, _ = replay(job, time_style="utc")
    assert target.received[0].header("X-CloudScheduler-ScheduleTime") == "2026-10-16T01:00:00Z"


def test_the_default_spelling_has_the_jobs_offset_on_a_dst_day() -> None:
    # 29 March 2026, Berlin springs forward at 02:00: 03:30 that day is CEST (+02:00).
    job = Job("j", "30 3 * * *", "Europe/Berlin")
    start = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)
    clock = ManualClock(start)
    target = RecordingTarget(now=clock.now)
    with target.serving():
        SchedulerEmulator(
            target.url, stack_of(job), ticks=2, start=start, clock_factory=lambda: clock
        ).run()
    assert [r.header("X-CloudScheduler-ScheduleTime") for r in target.received] == [
        "2026-03-29T03:30:00+02:00",
        "2026-03-30T03:30:00+02:00",
    ]


def test_content_type_only_with_a_body_unless_declared() -> None:
    # No body, no declared Content-Type: none is sent (no forced octet-stream).
    _, target, _ = replay(Job("j", "*/5 * * * *"))
    [request] = target.received
    assert request.body == b"" and request.header("Content-Type") is None
    # A body without a declared Content-Type: Scheduler's default.
    _, target, _ = replay(Job("j", "*/5 * * * *", body=b"raw"))
    assert target.received[0].header("Content-Type") == "application/octet-stream"


def test_http2_style_lower_case_headers_and_job_name_styles() -> None:
    job = deployed(name="j", schedule="*/5 * * * *")
    _, target, _ = replay(job, header_case="lower")
    names = [k for k, _ in target.received[0].headers]
    assert "x-cloudscheduler-jobname" in names and "X-CloudScheduler-JobName" not in names
    assert target.received[0].header("x-cloudscheduler-jobname") == (
        f"projects/{PROJECT}/locations/{REGION}/jobs/{PREFIX}-j"
    )
    _, target, _ = replay(job, job_name_style="id")
    assert target.received[0].header("X-CloudScheduler-JobName") == f"{PREFIX}-j"


def test_paused_jobs_are_not_delivered() -> None:
    clock = ManualClock(START)
    target = RecordingTarget(now=clock.now)
    stack = stack_of(Job("on", "*/5 * * * *"), Job("off", "*/5 * * * *", paused=True))
    with target.serving():
        result = SchedulerEmulator(target.url, stack, ticks=2, start=START).run()
    assert {r.job for r in result.runs} == {"on"}
    assert len(target.received) == 2


# -- success, failure, deadline ------------------------------------------------------


@pytest.mark.parametrize("status", [200, 201, 204, 299])
def test_any_2xx_is_success(status: int) -> None:
    job = Job("j", "*/5 * * * *", retry=RetrySettings(retry_count=3))
    result, target, _ = replay(job, lambda r: (status, 0.0))
    assert len(target.received) == 1 and result.runs[0].acknowledged


@pytest.mark.parametrize("status", [301, 400, 404, 409, 429, 500, 503])
def test_any_other_status_is_a_failed_attempt(status: int) -> None:
    job = Job("j", "*/5 * * * *", retry=RetrySettings(retry_count=2, min_backoff_seconds=1))
    result, target, _ = replay(job, lambda r: (status, 0.0))
    assert len(target.received) == 3
    assert not result.runs[0].acknowledged
    assert [d.reply for d in result.runs[0].deliveries] == [str(status)] * 3


def test_the_connection_is_closed_at_the_deadline() -> None:
    # 15 s deadline = 0.15 s real on the test clock; the target answers after 2 s, so a
    # request that ended by 1.5 s was ended by Scheduler, with room for a loaded machine.
    job = Job("j", "*/5 * * * *", attempt_deadline_seconds=15)
    result, target, clock = replay(job, lambda r: (200, 2.0))
    [run] = result.runs
    [delivery] = run.deliveries
    assert delivery.reply == "timeout" and delivery.status is None
    assert delivery.error == "deadline exceeded"
    assert not run.acknowledged and run.stop_reason == "no retries configured"
    # Scheduler hung up at the deadline, as it cancels the request: the request ended
    # well before the target's answer, and the target found the connection closed.
    assert delivery.real_seconds < 1.5
    # The target's handler goes on after the hang-up.
    [answered] = wait_until(lambda: target.completed, what="the target to finish its answer")
    assert answered.hung_up is True
    # Simulated time moved on by exactly the deadline.
    assert clock.now() == datetime(2026, 10, 16, 0, 5, 15, tzinfo=UTC)


def test_a_timely_answer_finds_the_connection_open() -> None:
    _, target, _ = replay(Job("j", "*/5 * * * *", attempt_deadline_seconds=15))
    assert [r.hung_up for r in target.completed] == [False]


def test_deadline_then_retry_succeeds_with_the_same_schedule_time() -> None:
    slow_first: dict[str, int] = {"n": 0}

    def responder(r: Received) -> tuple[int, float]:
        slow_first["n"] += 1
        return (
            (200, 1.5)
            if slow_first["n"] == 1
            else (409, 0.0)
            if slow_first["n"] == 2
            else (200, 0.0)
        )

    # A 60 s deadline is 0.6 s real on the test clock: the first answer (1.5 s) always
    # misses it, and each retry, answered at once, has 0.6 s to arrive in, even on a
    # loaded machine (a 15 s deadline would give it 0.15 s, and a late one would shift the
    # offsets below).
    job = Job(
        "j",
        "0 * * * *",
        attempt_deadline_seconds=60,
        retry=RetrySettings(retry_count=3, min_backoff_seconds=10, max_doublings=1),
    )
    result, target, _ = replay(job, responder)
    assert [d.reply for d in result.runs[0].deliveries] == ["timeout", "409", "200"]
    assert result.runs[0].acknowledged
    assert len({utc(r) for r in target.received}) == 1
    # First attempt at 0:00, gives up at 1:00, waits 10 s, 409 at 1:10, waits 20 s, 200 at
    # 1:30.
    assert offsets(target.received) == [70.0, 20.0]


# -- the retry rules -----------------------------------------------------------------


def test_backoff_sequence_10s_300s_3_doublings() -> None:
    # Scheduler's documented example: 10 s min, 300 s max, 3 doublings -> 10, 20, 40, 80,
    # 160, 240, 300, 300. retryCount is capped at 5, so maxRetryDuration (1200 s) keeps
    # the retries going: both limits must be reached before Scheduler stops.
    retry = RetrySettings(
        retry_count=5,
        max_retry_duration_seconds=1200,
        min_backoff_seconds=10,
        max_backoff_seconds=300,
        max_doublings=3,
    )
    job = Job("j", "0 * * * *", retry=retry)
    result, target, clock = replay(job, lambda r: (500, 0.0))
    assert offsets(target.received) == [10, 20, 40, 80, 160, 240, 300, 300]
    assert clock.sleeps == [10, 20, 40, 80, 160, 240, 300, 300]
    assert result.runs[0].stop_reason == "retryCount and maxRetryDuration used up"
    assert [d.attempt for d in result.runs[0].deliveries] == list(range(1, 10))


def test_retry_count_alone_bounds_the_attempts() -> None:
    retry = RetrySettings(
        retry_count=3, min_backoff_seconds=10, max_backoff_seconds=300, max_doublings=3
    )
    result, target, _ = replay(Job("j", "0 * * * *", retry=retry), lambda r: (500, 0.0))
    assert offsets(target.received) == [10, 20, 40]
    assert result.runs[0].stop_reason == "retryCount used up"


def test_default_retry_config_never_retries() -> None:
    result, target, _ = replay(Job("j", "0 * * * *"), lambda r: (500, 0.0))
    assert len(target.received) == 1
    assert result.runs[0].stop_reason == "no retries configured"


def test_max_retry_duration_alone_keeps_retrying_until_it_is_reached() -> None:
    # retryCount 0 with maxRetryDuration 60 s: retries at 10, 30 (70 would be past 60).
    retry = RetrySettings(
        retry_count=0, max_retry_duration_seconds=60, min_backoff_seconds=10, max_doublings=5
    )
    result, target, _ = replay(Job("j", "0 * * * *", retry=retry), lambda r: (500, 0.0))
    assert offsets(target.received) == [10, 20]
    assert result.runs[0].stop_reason == "retryCount and maxRetryDuration used up"


def test_max_retry_duration_counts_attempt_time_too() -> None:
    # Each attempt times out after 15 s, and the duration is measured from the first
    # attempt's start: attempts at 0, 25 (15 + 10), 60 (25 + 15 + 20). Then both limits are
    # reached (2 retries made; the next would start at 115 s > 100 s).
    retry = RetrySettings(
        retry_count=2, max_retry_duration_seconds=100, min_backoff_seconds=10, max_doublings=5
    )
    job = Job("j", "0 * * * *", attempt_deadline_seconds=15, retry=retry)
    result, target, _ = replay(job, lambda r: (200, 0.3))
    assert offsets(target.received) == [25, 35]
    assert result.runs[0].stop_reason == "retryCount and maxRetryDuration used up"


FIVE_MINUTELY_RETRYING = Job(
    "j", "*/5 * * * *",
    retry=RetrySettings(retry_count=5, min_backoff_seconds=60, max_backoff_seconds=3600),
)


def test_retries_stop_at_the_next_scheduled_time_when_switched_on() -> None:
    # Every 5 minutes; waits 60, 120, then 240 would start after the next tick (300 s).
    result, target, _ = replay(
        FIVE_MINUTELY_RETRYING, lambda r: (500, 0.0), ticks=2, retries_stop_at_next_run=True
    )
    first = [r for r in target.received if utc(r) == "2026-10-16T00:05:00Z"]
    assert offsets(first) == [60, 120]
    assert result.runs[0].stop_reason == "next scheduled time reached"
    # The next tick is delivered at its own time, with its own schedule time.
    second = [r for r in target.received if utc(r) == "2026-10-16T00:10:00Z"]
    assert second[0].at == datetime(2026, 10, 16, 0, 10, tzinfo=UTC)


def test_switched_off_retries_run_through_the_next_tick_which_is_skipped() -> None:
    # The default: 5 retries (60, 120, 240, 480, 960 s) whatever the schedule, so the
    # run is retried until 00:05 + 1860 s = 00:36; the ticks 00:10 ... 00:35 come while
    # it is still being retried and are skipped; the 00:40 tick is delivered again (and
    # fails alike, so 00:45 is skipped too).
    result, target, _ = replay(FIVE_MINUTELY_RETRYING, lambda r: (500, 0.0), ticks=9)
    first = [r for r in target.received if utc(r) == "2026-10-16T00:05:00Z"]
    assert offsets(first) == [60, 120, 240, 480, 960]
    assert result.runs[0].stop_reason == "retryCount used up"
    skipped = [r for r in result.runs if r.stop_reason.startswith("skipped")]
    assert [r.schedule_time.astimezone(UTC).strftime("%H:%M") for r in skipped
            if r.schedule_time] == ["00:10", "00:15", "00:20", "00:25", "00:30", "00:35", "00:45"]
    assert all(not r.deliveries and r.kind == "scheduled" for r in skipped)
    after = [r for r in target.received if utc(r) == "2026-10-16T00:40:00Z"]
    assert after[0].at == datetime(2026, 10, 16, 0, 40, tzinfo=UTC)


def test_a_run_that_ends_before_the_next_tick_skips_nothing_either_way() -> None:
    for stop in (True, False):
        result, _, _ = replay(FIVE_MINUTELY_RETRYING, ticks=4, retries_stop_at_next_run=stop)
        assert [r.stop_reason for r in result.runs] == ["acknowledged"] * 4


# -- fault injection -----------------------------------------------------------------


RETRYING = Job("j", "0 * * * *", retry=RetrySettings(retry_count=3, min_backoff_seconds=5))


def test_lost_ack_discards_a_2xx_and_retries() -> None:
    plan = FaultPlan.parse(["lost-ack=1"])
    result, target, _ = replay(RETRYING, faults=plan)
    # Every attempt's 200 is lost: the run runs out of retries although the target said 200.
    assert [d.reply for d in result.runs[0].deliveries] == ["200 lost"] * 4
    assert not result.runs[0].acknowledged
    assert len(target.received) == 4


def test_a_missed_run_is_never_delivered() -> None:
    # Scheduler sends nothing for a missed run: no attempt, no retry; the others arrive.
    plan = FaultPlan.parse(["missed=0.5"], seed=4)
    struck = [t for t in range(8) if plan.hits(MISSED, RETRYING.name, t)]
    assert 0 < len(struck) < 8
    result, target, _ = replay(RETRYING, ticks=8, faults=plan)
    missed = [r for r in result.runs if MISSED in r.faults]
    assert [r.tick for r in missed] == struck
    for run in missed:
        assert not run.deliveries and not run.acknowledged and run.workers == 0
        assert run.stop_reason == "never delivered (missed)"
    delivered = {utc(r) for r in target.received}
    assert len(delivered) == 8 - len(struck)
    assert all(r.acknowledged for r in result.runs if r.tick not in struck)


def test_duplicate_delivery_sends_one_attempt_twice_at_once() -> None:
    result, target, _ = replay(RETRYING, faults=FaultPlan.parse(["duplicate=1"]))
    assert len(target.received) == 2
    a, b = target.received
    strip = {"X-Emulator-Delivery"}
    assert [h for h in a.headers if h[0] not in strip] == [
        h for h in b.headers if h[0] not in strip
    ]
    assert a.at == b.at
    assert [d.copy for d in result.runs[0].deliveries] == [0, 1]


def test_concurrent_workers_each_deliver_the_run() -> None:
    result, target, _ = replay(RETRYING, faults=FaultPlan.parse(["concurrent=1"]))
    assert len(target.received) == 2
    assert sorted(d.worker for d in result.runs[0].deliveries) == [0, 1]
    assert result.runs[0].workers == 2 and result.runs[0].acknowledged


def test_manual_run_carries_the_next_scheduled_time() -> None:
    job = Job("j", "*/5 * * * *")
    result, target, _ = replay(job, ticks=3, faults=FaultPlan.parse(["manual=1"]))
    sent = [utc(r) for r in target.received]
    assert sent == [
        "2026-10-16T00:05:00Z",
        "2026-10-16T00:10:00Z",  # forced run between ticks 1 and 2, stamped with tick 2
        "2026-10-16T00:10:00Z",
        "2026-10-16T00:15:00Z",  # forced run, stamped with tick 3
        "2026-10-16T00:15:00Z",
    ]
    assert [r.kind for r in result.runs] == [
        "scheduled",
        "manual",
        "scheduled",
        "manual",
        "scheduled",
    ]
    # The forced run happens between the ticks, before the time it is stamped with.
    assert target.received[1].at is not None
    assert target.received[1].at < datetime(2026, 10, 16, 0, 10, tzinfo=UTC)


def test_bare_manual_run_has_no_schedule_time_header() -> None:
    result, target, _ = replay(
        Job("j", "*/5 * * * *"), ticks=2, faults=FaultPlan.parse(["manual-bare=1"])
    )
    assert [utc(r) for r in target.received] == [
        "2026-10-16T00:05:00Z",
        None,
        "2026-10-16T00:10:00Z",
    ]
    assert result.runs[1].kind == "manual-bare" and result.runs[1].schedule_time is None


def test_slow_and_kill_are_asked_of_the_target_on_the_first_attempt_only() -> None:
    job = Job(
        "j",
        "0 * * * *",
        attempt_deadline_seconds=20,
        retry=RetrySettings(retry_count=1, min_backoff_seconds=1),
    )
    _, target, _ = replay(job, lambda r: (500, 0.0), faults=FaultPlan.parse(["slow=1"]))
    # 20 s deadline x 1.25 = 25 s simulated = 0.25 s real on the test clock (scale 0.01).
    assert [r.header("X-Emulator-Fault") for r in target.received] == ["slow=0.250", None]
    _, target, _ = replay(job, lambda r: (500, 0.0), faults=FaultPlan.parse(["kill=1"]))
    assert [r.header("X-Emulator-Fault") for r in target.received] == ["kill", None]


def test_fault_decisions_are_reproducible_per_seed() -> None:
    plan_a = FaultPlan.parse(["lost-ack=0.3"], seed=7)
    plan_b = FaultPlan.parse(["lost-ack=0.3"], seed=7)
    plan_c = FaultPlan.parse(["lost-ack=0.3:8"], seed=7)
    hits = [[p.hits("lost-ack", "j", t) for t in range(200)] for p in (plan_a, plan_b, plan_c)]
    assert hits[0] == hits[1] != hits[2]
    assert 30 < sum(hits[0]) < 90  # about 30 %


def test_fault_spec_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="unknown fault 'typo'"):
        FaultPlan.parse(["typo=0.1"])
    with pytest.raises(ValueError, match=r"rate must be in \[0, 1\]"):
        FaultPlan.parse(["slow=2"])
    with pytest.raises(ValueError, match="expected name=rate"):
        FaultPlan.parse(["slow"])


def test_next_tick_of_the_schedule_is_independent_of_run_duration() -> None:
    # A run that takes its full retry window does not shift the next scheduled time.
    job = Job(
        "j",
        "*/5 * * * *",
        attempt_deadline_seconds=15,
        retry=RetrySettings(retry_count=2, min_backoff_seconds=30),
    )
    _, target, _ = replay(job, lambda r: (200, 0.3), ticks=2)
    second = [r for r in target.received if utc(r) == "2026-10-16T00:10:00Z"]
    assert second[0].at == START + timedelta(minutes=10)


# -- the clocks ----------------------------------------------------------------------


def test_scaled_clock_jumps_to_scheduled_times_and_scales_durations() -> None:
    import threading

    from scheduler_emulator import RealClock, ScaledClock

    scale = 0.001
    clock = ScaledClock(START, scale=scale)

    def scaled(real_seconds: float) -> timedelta:
        """Simulated time `real_seconds` of real time make at this scale (+ rounding)."""
        return timedelta(seconds=real_seconds / scale + 0.001)

    jump = START + timedelta(days=3)
    m0 = time.monotonic()
    clock.advance_to(jump)  # no waiting: a jump (waiting for it would take 259 s)
    assert time.monotonic() - m0 < 10
    # At the jump's instant at once, then on by no more than the real time since scaled:
    # a preempted test thread moves the clock on, not the bound.
    assert timedelta(0) <= clock.now() - jump <= scaled(time.monotonic() - m0)
    before = time.monotonic()
    clock.sleep(100)  # 100 simulated seconds = 0.1 s
    waited = time.monotonic() - before
    assert 0.09 <= waited < 1.0
    assert clock.now() - (START + timedelta(days=3)) >= timedelta(seconds=90)
    assert clock.wait(threading.Event(), 50) is False  # 0.05 s real
    assert clock.real_seconds(180) == pytest.approx(0.18)
    # A wait of the emulator's own (0.5 s real = 500 s simulated) is taken back: the clock
    # moved on by the real time that passed less those 0.5 s (without exclude: at least
    # 500 s), and not by less than nothing (it took back no more than that).
    m0 = time.monotonic()
    then = clock.now()
    let_time_pass(0.5, "the emulator's own wait, which exclude takes back (bounds follow "
                  "the real time measured)")
    clock.exclude(0.5)
    moved = clock.now() - then
    assert timedelta(0) <= moved <= scaled(time.monotonic() - m0 - 0.5)
    real = RealClock()
    assert abs((real.now() - datetime.now(UTC)).total_seconds()) < 1
    assert real.real_seconds(3) == 3


# -- store faults: the emulator decides, a hook injects ----------------------------------


def test_store_faults_are_in_the_default_mix_and_decided_per_run_from_the_seed() -> None:
    assert DEFAULT_MIX[STORE_STALL] > 0 and DEFAULT_MIX[STORE_OUTAGE] > 0
    plan = FaultPlan.from_rates(DEFAULT_MIX, seed=7)
    assert plan.store_faults == (STORE_STALL, STORE_OUTAGE)

    def struck(p: FaultPlan) -> list[tuple[str, int]]:
        return [(f, t) for f in STORE_FAULTS for t in range(400) if p.hits(f, "j", t)]

    same = FaultPlan.from_rates(DEFAULT_MIX, seed=7)
    other = FaultPlan.from_rates(DEFAULT_MIX, seed=8)
    assert struck(plan) == struck(same) != struck(other)
    stalls = sum(1 for f, _ in struck(plan) if f == STORE_STALL)
    assert 4 < stalls < 30  # about 3 % of 400 runs
    assert FaultPlan.parse(["store-stall=0"]).store_faults == ()


def recording_hook() -> tuple[list[tuple[str, str, int, int]], StoreFaultHook]:
    """A store-fault hook that records (fault, delivery id, attempt, worker)."""
    calls: list[tuple[str, str, int, int]] = []

    def hook(name: str, delivery: Delivery) -> None:
        calls.append((name, delivery.id, delivery.attempt, delivery.worker))

    return calls, hook


def test_the_store_fault_hook_strikes_a_runs_first_attempt_before_it_is_sent() -> None:
    clock = ManualClock(START, scale=0.01)
    target = RecordingTarget(lambda r: (500, 0.0), now=clock.now)
    arrived_before_hook: list[int] = []
    calls, record = recording_hook()

    def hook(name: str, delivery: Delivery) -> None:
        arrived_before_hook.append(len(target.received))
        record(name, delivery)

    with target.serving():
        result = SchedulerEmulator(
            target.url,
            stack_of(RETRYING),
            ticks=2,
            start=START,
            clock_factory=lambda: clock,
            faults=FaultPlan.parse(["store-stall=1"]),
            store_faults=hook,
        ).run()
    # Once per run, for its first attempt only (the retries are not struck again), and
    # before that attempt reached the target: 4 attempts per run, all answered 500.
    assert [(name, attempt, worker) for name, _, attempt, worker in calls] == [
        (STORE_STALL, 1, 0),
        (STORE_STALL, 1, 0),
    ]
    assert arrived_before_hook == [0, 4]
    for run in result.runs:
        first, *retries = run.deliveries
        assert first.id in {delivery_id for _, delivery_id, _, _ in calls}
        assert STORE_STALL in first.faults and not any(STORE_STALL in d.faults for d in retries)
        assert STORE_STALL in run.faults


def test_an_outage_wins_over_a_stall_and_a_killed_attempt_gets_neither() -> None:
    calls, hook = recording_hook()
    replay(
        RETRYING,
        faults=FaultPlan.parse(["store-stall=1", "store-outage=1"]),
        store_faults=hook,
    )
    assert [name for name, *_ in calls] == [STORE_OUTAGE]
    calls, hook = recording_hook()
    replay(
        RETRYING,
        lambda r: (500, 0.0),
        faults=FaultPlan.parse(["kill=1", "store-outage=1"]),
        store_faults=hook,
    )
    assert calls == []  # a killed attempt's reply is lost whatever its store does


def test_a_store_fault_without_a_hook_is_an_error_naming_the_fix() -> None:
    for spec in ("store-stall=0.1", "store-outage=1"):
        with pytest.raises(StoreFaultsUnsupported, match=r"make demo") as caught:
            SchedulerEmulator(
                "http://127.0.0.1:9/", stack_of(RETRYING), faults=FaultPlan.parse([spec])
            )
        assert spec.partition("=")[0] in str(caught.value)
    # A store fault at rate 0 asks for nothing: no hook needed.
    SchedulerEmulator(
        "http://127.0.0.1:9/", stack_of(RETRYING), faults=FaultPlan.parse(["store-stall=0"])
    )


def test_a_failing_store_fault_hook_voids_the_replay() -> None:
    def hook(name: str, delivery: Delivery) -> None:
        raise RuntimeError("the fault proxy is gone")

    with pytest.raises(RuntimeError, match="the fault proxy is gone"):
        replay(RETRYING, ticks=3, faults=FaultPlan.parse(["store-outage=1"]), store_faults=hook)


# -- forced runs at any moment (manual-overlap) ------------------------------------------


def overlap_plan(phase: str) -> FaultPlan:
    """manual-overlap on every run, with a seed whose draw fires it in `phase` at tick 0."""
    for seed in range(100):
        plan = FaultPlan.parse(["manual-overlap=1"], seed=seed)
        if plan.overlap_phase("j", 0) == phase:
            return plan
    raise AssertionError(f"no seed below 100 draws {phase!r}")


def test_a_forced_run_fired_during_a_long_first_attempt() -> None:
    # "Run now" is pressed while the first attempt is in flight; the forced run carries
    # the next scheduled time. The first attempt lasts until the forced run has been
    # answered (an event, not a 0.2 s guess a loaded machine overran), inside its 30 min
    # deadline (18 s real at scale 0.01; the test clock stands still meanwhile).
    job = Job("j", "*/5 * * * *", attempt_deadline_seconds=1800)
    target = RecordingTarget()

    def responder(r: Received) -> tuple[int, float]:
        if utc(r) == "2026-10-16T00:05:00Z":
            wait_until(lambda: [c for c in target.completed if utc(c) != utc(r)],
                       timeout=15, what="the forced run to be answered")
        return (200, 0.0)

    target.responder = responder
    result, target, _ = replay(job, ticks=2, faults=overlap_plan("attempt"), target=target)
    order = [(utc(r), "in") for r in target.received]
    assert order[:2] == [("2026-10-16T00:05:00Z", "in"), ("2026-10-16T00:10:00Z", "in")]
    # The forced run arrived and was answered while the scheduled attempt was in flight.
    assert [utc(r) for r in target.completed][:2] == [
        "2026-10-16T00:10:00Z", "2026-10-16T00:05:00Z",
    ]
    forced = [r for r in result.runs if r.kind == "manual"]
    assert len(forced) == 1 and forced[0].acknowledged
    assert MANUAL_OVERLAP in forced[0].faults
    # The next scheduled run is still delivered at its own time.
    assert [r.kind for r in result.runs] == ["scheduled", "manual", "scheduled"]


def test_a_forced_run_fired_during_a_backoff_wait() -> None:
    job = Job("j", "*/5 * * * *", retry=RetrySettings(retry_count=2, min_backoff_seconds=30))
    answers = iter([500, 200, 200, 200, 200])

    def responder(r: Received) -> tuple[int, float]:
        return (next(answers), 0.0)

    result, target, _ = replay(job, responder, ticks=2, faults=overlap_plan("backoff"))
    # First attempt fails; while Scheduler waits 30 s to retry, the forced run comes in.
    # The forced run and retry 1 are sent from different threads and the test clock's
    # sleep returns at once, so which reaches the target first is a race: the send times
    # below are what show the forced run came during the backoff.
    received = [str(utc(r)) for r in target.received]
    assert received[0] == "2026-10-16T00:05:00Z"  # attempt 1: 500
    assert sorted(received) == sorted([
        "2026-10-16T00:05:00Z",  # attempt 1
        "2026-10-16T00:10:00Z",  # the forced run, during the backoff
        "2026-10-16T00:05:00Z",  # retry 1
        "2026-10-16T00:10:00Z",  # the scheduled run of 00:10, at its time
    ])
    scheduled = result.runs[0]
    forced = next(r for r in result.runs if r.kind == "manual")
    # Sent once the first attempt had failed, before the retry (the test clock stands
    # still until the backoff sleep, so the real send order tells).
    assert forced.deliveries[0].sent_at < scheduled.deliveries[1].sent_at
    sent = [d.sent_real or 0.0 for d in (scheduled.deliveries[0], forced.deliveries[0])]
    assert sent[0] < sent[1]
    assert scheduled.deliveries[0].reply == "500"


def test_overlap_moments_are_drawn_per_run_and_reproducible() -> None:
    plan = FaultPlan.parse(["manual-overlap=1"], seed=3)
    phases = [plan.overlap_phase("j", t) for t in range(200)]
    assert phases == [FaultPlan.parse(["manual-overlap=1"], seed=3).overlap_phase("j", t)
                      for t in range(200)]
    assert 60 < phases.count("attempt") < 140  # about half each
    assert DEFAULT_MIX[MANUAL_OVERLAP] > 0  # in the demo's default mix


# -- redirects ---------------------------------------------------------------------------


def test_a_307_redirect_is_followed_with_the_same_method_and_body() -> None:
    clock = ManualClock(START)
    target = RecordingTarget(redirects={"/": (307, "/moved")}, now=clock.now)
    job = deployed(**NIGHTLY)
    with target.serving():
        result = SchedulerEmulator(
            target.url, stack_of(job), ticks=1, start=START, clock_factory=lambda: clock
        ).run()
    first, moved = target.received
    assert (first.path, moved.path) == ("/", "/moved")
    assert moved.method == "POST" and moved.body == first.body
    assert moved.header("X-CloudScheduler-ScheduleTime") == first.header(
        "X-CloudScheduler-ScheduleTime"
    )
    [delivery] = result.runs[0].deliveries
    assert delivery.acknowledged and delivery.redirects == (target.url + "moved",)


def test_a_303_redirect_becomes_a_get_and_a_loop_fails_the_attempt() -> None:
    clock = ManualClock(START)
    target = RecordingTarget(redirects={"/": (303, "/result")}, now=clock.now)
    with target.serving():
        SchedulerEmulator(
            target.url, stack_of(deployed(**NIGHTLY)), ticks=1, start=START,
            clock_factory=lambda: clock,
        ).run()
    assert [(r.method, r.body) for r in target.received][1] == ("GET", b"")
    loop = RecordingTarget(redirects={"/": (302, "/a"), "/a": (301, "/")})
    with loop.serving():
        result = SchedulerEmulator(loop.url, stack_of(Job("j", "*/5 * * * *")), ticks=1,
                                   start=START, clock_factory=lambda: ManualClock(START)).run()
    [delivery] = result.runs[0].deliveries
    assert not delivery.acknowledged and delivery.error == "more than 5 redirects"
    assert len(loop.received) == 6  # the request and 5 redirects followed


# -- DST: ticks at local times that do not exist or occur twice -------------------------


def dst_replay(start: datetime, job: Job, ticks: int = 4) -> EmulatorResult:
    clock = ManualClock(start)
    target = RecordingTarget(now=clock.now)
    with target.serving():
        return SchedulerEmulator(
            target.url, stack_of(job), ticks=ticks, start=start, clock_factory=lambda: clock
        ).run()


def test_ticks_at_non_existent_or_repeated_local_times_are_reported() -> None:
    # 2027 in Berlin: 02:00 -> 03:00 on 28 March (02:07 does not exist), 03:00 -> 02:00 on
    # 31 October (02:07 occurs twice). An hourly job at :07 meets both.
    hourly = Job("hourly", "7 * * * *", "Europe/Berlin")
    spring = dst_replay(datetime(2027, 3, 27, 23, 30, tzinfo=UTC), hourly)
    assert [n.to_json() for n in spring.dst] == [{
        "job": "hourly", "time_zone": "Europe/Berlin", "date": "2027-03-28",
        "local_time": "02:07", "kind": "gap",
    }]
    assert spring.dst[0].text.startswith(
        "DST: job hourly: 2027-03-28 02:07 does not exist in Europe/Berlin (gap)"
    )
    autumn = dst_replay(datetime(2027, 10, 30, 23, 30, tzinfo=UTC), hourly)
    assert [(n.hazard.local_time.isoformat(), n.hazard.kind) for n in autumn.dst] == [
        ("02:07:00", "repeat"),
    ]
    assert "occurs twice in Europe/Berlin (repeat)" in autumn.dst[0].text


def test_no_dst_line_outside_a_change_or_in_utc() -> None:
    # Before the change only (two ticks: 00:07 and 01:07 local), and a UTC job on the day.
    start = datetime(2027, 3, 27, 22, 30, tzinfo=UTC)
    assert dst_replay(start, Job("hourly", "7 * * * *", "Europe/Berlin"), ticks=2).dst == []
    # A third tick comes after the gap (03:07): the window spans the change, 02:07 is named.
    assert len(dst_replay(start, Job("hourly", "7 * * * *", "Europe/Berlin"), ticks=3).dst) == 1
    assert dst_replay(start, Job("utc", "7 * * * *", "Etc/UTC")).dst == []

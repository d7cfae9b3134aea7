"""The Scheduler emulator against Cloud Scheduler's documented behaviour, using a small
local HTTP target and a deterministic clock (no function, no Firestore)."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from infra.scheduler_rules import RetrySettings
from scheduler_emulator import ManualClock, SchedulerEmulator
from scheduler_emulator.emulator import Delivery, EmulatorResult, StoreFaultHook
from scheduler_emulator.faults import (
    DEFAULT_MIX,
    MISSED,
    STORE_FAULTS,
    STORE_OUTAGE,
    STORE_STALL,
    FaultPlan,
    StoreFaultsUnsupported,
)
from scheduler_emulator.stack import Job, Stack
from tests.scheduler_emulator.target import Received, RecordingTarget, Responder

START = datetime(2026, 10, 16, 0, 0, tzinfo=UTC)
PROJECT = "acme-billing-dev"
REGION = "europe-west1"


def stack_of(*jobs: Job) -> Stack:
    return Stack(project=PROJECT, region=REGION, jobs=jobs)


def replay(
    job: Job,
    responder: Responder | None = None,
    *,
    ticks: int = 1,
    faults: FaultPlan | None = None,
    **options: Any,
) -> tuple[EmulatorResult, RecordingTarget, ManualClock]:
    clock = ManualClock(START, scale=0.01)
    target = RecordingTarget(responder, now=clock.now)
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


def test_headers_are_exactly_schedulers() -> None:
    job = Job(
        "nightly-export",
        "0 3 * * *",
        "Europe/Berlin",
        body=json.dumps({"report": "daily"}).encode(),
        content_type="application/json",
    )
    result, target, _ = replay(job, token="tok-123")
    [request] = target.received
    headers = dict(request.headers)
    sent = {k: v for k, v in headers.items() if k not in ("Host", "Accept-Encoding")}
    assert sent == {
        "X-CloudScheduler": "true",
        "X-CloudScheduler-JobName": "nightly-export",
        # 03:00 in Berlin on 16 October (CEST, UTC+2) is 01:00 UTC.
        "X-CloudScheduler-ScheduleTime": "2026-10-16T01:00:00Z",
        "User-Agent": "Google-Cloud-Scheduler",
        "X-Dedup-Project": PROJECT,
        "X-Dedup-Location": REGION,
        "Content-Type": "application/json",
        "Content-Length": str(len(request.body)),
        "Authorization": "Bearer tok-123",
    }
    assert request.method == "POST"
    assert json.loads(request.body) == {"report": "daily"}
    [run] = result.runs
    assert run.acknowledged and run.stop_reason == "acknowledged"


def test_default_token_is_a_bearer_jwt_shaped_token() -> None:
    _, target, _ = replay(Job("j", "*/5 * * * *"))
    auth = target.received[0].header("Authorization")
    assert auth is not None and auth.startswith("Bearer ")
    assert auth.removeprefix("Bearer ").count(".") == 2


def test_schedule_times_follow_the_cron_in_its_time_zone_across_dst() -> None:
    # Berlin leaves summer time on 25 October 2026: 03:00 local moves from 01:00Z to 02:00Z.
    job = Job("nightly", "0 3 * * *", "Europe/Berlin")
    _, target, _ = replay(job, ticks=12)
    times = [r.header("X-CloudScheduler-ScheduleTime") for r in target.received]
    assert times[:2] == ["2026-10-16T01:00:00Z", "2026-10-17T01:00:00Z"]
    assert times[8:11] == ["2026-10-24T01:00:00Z", "2026-10-25T02:00:00Z", "2026-10-26T02:00:00Z"]
    assert len(set(times)) == 12


def test_schedule_time_spellings_name_one_instant() -> None:
    job = Job(
        "j", "0 3 * * *", "Europe/Berlin", retry=RetrySettings(retry_count=2, min_backoff_seconds=1)
    )
    _, target, _ = replay(job, lambda r: (500, 0.0), time_style="mixed")
    assert [r.header("X-CloudScheduler-ScheduleTime") for r in target.received] == [
        "2026-10-16T01:00:00Z",
        "2026-10-16T03:00:00+02:00",
        "2026-10-16T01:00:00Z",
    ]
    _, target, _ = replay(job, time_style="offset")
    assert target.received[0].header("X-CloudScheduler-ScheduleTime") == (
        "2026-10-16T03:00:00+02:00"
    )


def test_without_body_nothing_is_sent_and_content_type_is_octet_stream() -> None:
    _, target, _ = replay(Job("j", "*/5 * * * *"))
    [request] = target.received
    assert request.body == b""
    assert request.header("Content-Type") == "application/octet-stream"


def test_http2_style_lower_case_headers_and_full_job_name() -> None:
    _, target, _ = replay(Job("j", "*/5 * * * *"), header_case="lower", full_job_name=True)
    names = [k for k, _ in target.received[0].headers]
    assert "x-cloudscheduler-jobname" in names and "X-CloudScheduler-JobName" not in names
    assert target.received[0].header("x-cloudscheduler-jobname") == (
        f"projects/{PROJECT}/locations/{REGION}/jobs/j"
    )


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


def test_deadline_gives_up_while_the_target_keeps_running() -> None:
    # 15 s deadline = 0.15 s real on the test clock; the target answers after 0.6 s.
    job = Job("j", "*/5 * * * *", attempt_deadline_seconds=15)
    result, target, clock = replay(job, lambda r: (200, 0.6))
    [run] = result.runs
    [delivery] = run.deliveries
    assert delivery.reply == "timeout" and delivery.status is None
    assert not run.acknowledged and run.stop_reason == "no retries configured"
    # The target was not cut off: it finished, and its late 200 is on record.
    assert len(target.completed) == 1
    assert delivery.late_status == 200
    # Simulated time moved on by exactly the deadline.
    assert clock.now() == datetime(2026, 10, 16, 0, 5, 15, tzinfo=UTC)


def test_deadline_then_retry_succeeds_with_the_same_schedule_time() -> None:
    slow_first: dict[str, int] = {"n": 0}

    def responder(r: Received) -> tuple[int, float]:
        slow_first["n"] += 1
        return (
            (200, 0.5)
            if slow_first["n"] == 1
            else (409, 0.0)
            if slow_first["n"] == 2
            else (200, 0.0)
        )

    job = Job(
        "j",
        "0 * * * *",
        attempt_deadline_seconds=15,
        retry=RetrySettings(retry_count=3, min_backoff_seconds=10, max_doublings=1),
    )
    result, target, _ = replay(job, responder)
    assert [d.reply for d in result.runs[0].deliveries] == ["timeout", "409", "200"]
    assert result.runs[0].acknowledged
    assert len({r.header("X-CloudScheduler-ScheduleTime") for r in target.received}) == 1
    # First attempt at :00, gives up at :15, waits 10 s, 409 at :25, waits 20 s, 200 at :45.
    assert offsets(target.received) == [25.0, 20.0]


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


def test_retries_stop_at_the_next_scheduled_time() -> None:
    # Every 5 minutes; waits 60, 120, then 240 would start after the next tick (300 s).
    retry = RetrySettings(retry_count=5, min_backoff_seconds=60, max_backoff_seconds=3600)
    result, target, _ = replay(Job("j", "*/5 * * * *", retry=retry), lambda r: (500, 0.0), ticks=2)
    first = [
        r
        for r in target.received
        if r.header("X-CloudScheduler-ScheduleTime") == "2026-10-16T00:05:00Z"
    ]
    assert offsets(first) == [60, 120]
    assert result.runs[0].stop_reason == "next scheduled time reached"
    # The next tick is delivered at its own time, with its own schedule time.
    second = [
        r
        for r in target.received
        if r.header("X-CloudScheduler-ScheduleTime") == "2026-10-16T00:10:00Z"
    ]
    assert second[0].at == datetime(2026, 10, 16, 0, 10, tzinfo=UTC)


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
    delivered = {r.header("X-CloudScheduler-ScheduleTime") for r in target.received}
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
    sent = [(r.header("X-CloudScheduler-ScheduleTime")) for r in target.received]
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
    assert [r.header("X-CloudScheduler-ScheduleTime") for r in target.received] == [
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
    second = [
        r
        for r in target.received
        if r.header("X-CloudScheduler-ScheduleTime") == "2026-10-16T00:10:00Z"
    ]
    assert second[0].at == START + timedelta(minutes=10)


# -- the clocks ----------------------------------------------------------------------


def test_scaled_clock_jumps_to_scheduled_times_and_scales_durations() -> None:
    import threading
    import time

    from scheduler_emulator import RealClock, ScaledClock

    clock = ScaledClock(START, scale=0.001)
    clock.advance_to(START + timedelta(days=3))  # no waiting: a jump
    assert clock.now() - (START + timedelta(days=3)) < timedelta(seconds=5)
    before = time.monotonic()
    clock.sleep(100)  # 100 simulated seconds = 0.1 s
    waited = time.monotonic() - before
    assert 0.09 <= waited < 1.0
    assert clock.now() - (START + timedelta(days=3)) >= timedelta(seconds=90)
    assert clock.wait(threading.Event(), 50) is False  # 0.05 s real
    assert clock.real_seconds(180) == pytest.approx(0.18)
    # A wait of the emulator's own (0.1 s real = 100 s simulated) is taken back.
    then = clock.now()
    time.sleep(0.1)
    clock.exclude(0.1)
    assert clock.now() - then < timedelta(seconds=30)
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
        with pytest.raises(StoreFaultsUnsupported, match=r"python -m demo") as caught:
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

"""The whole local stack: the Scheduler emulator driving the kit's real function (served by
functions-framework, 4 worker processes) on the real Firestore emulator, reached through
the demo's store-fault proxy, with each fault alone and all of them together. Job
executions are counted in the demo job's ledger, independently of the dedup store."""

from __future__ import annotations

import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from demo.local_function import LocalFunction, watch_store_settings
from demo.options import DemoOptions
from demo.outcome import DemoOutcome
from demo.replay import replay as run_replay
from demo.report import notes, render, watch_lines
from demo.store_faults import struck_run
from demo.verdict import verdict_line
from demo.watch import EXPECT_FAILED, FLAKY_SETTINGS, run_watchdog, with_flaky_job
from example_jobs.flaky import fails
from local_stack import FirestoreEmulator
from scheduler_emulator.faults import MISSED, STORE_OUTAGE, STORE_STALL, FaultPlan
from scheduler_emulator.oidc import scheduler_token
from scheduler_emulator.report import (
    EXACTLY_ONCE,
    EXHAUSTED,
    FORCED_ONCE,
    NOT_DELIVERED,
    SKIPPED_RUN,
    UNSCHEDULED,
)
from scheduler_emulator.stack import Job, Stack, parse_stack_config

pytestmark = pytest.mark.timeout(240)

START = datetime(2026, 10, 16, 0, 0, tzinfo=UTC)
# Simulated time: 1 s of schedule time = 20 ms, so the 15 s deadline lasts 0.3 s. The
# lease is real time (demo.store_faults): 3 s, or 7 s where store faults are injected.
# Each job retries for longer than 3 s, so a killed instance's run is taken over by a
# retry once the lease expires.
SCALE = 0.02
# A test that counts each run's replies (one delivery per run, or exactly N) needs every
# delivery answered within its deadline: at this scale the stack's 15 s deadline is 0.3 s
# real, and one slow answer on a loaded 2-core machine (gunicorn, the OIDC check, two
# Firestore commits) would turn into a timeout and a retry. Such tests give their jobs a
# 60 s deadline (1.2 s real): the longest the stack's functionTimeoutSeconds (60) allows,
# and the stack validation refuses a longer one; Cloud Scheduler allows 15 s to 30 min.
ROOMY_DEADLINE_SECONDS = 60


def e2e_stack(**overrides: Any) -> Stack:
    """The test stack; each call gets its own project, so replays sharing one function
    (and one ledger) never share a run key or a ledger line."""
    return parse_stack_config(e2e_config(**overrides), source="e2e stack")


def roomy_stack(**overrides: Any) -> Stack:
    """The test stack with every job's attemptDeadlineSeconds at least
    ROOMY_DEADLINE_SECONDS; all else as in e2e_stack."""
    config = e2e_config(**overrides)
    config["scheduler-dedup:jobs"] = [
        {**job, "attemptDeadlineSeconds": max(job["attemptDeadlineSeconds"],
                                              ROOMY_DEADLINE_SECONDS)}
        for job in config["scheduler-dedup:jobs"]
    ]
    return parse_stack_config(config, source="e2e stack (roomy deadlines)")


def e2e_config(**overrides: Any) -> dict[str, Any]:
    """The test stack's `config:` mapping, with its own project."""
    config: dict[str, Any] = {
        "gcp:project": f"acme-e2e-{uuid.uuid4().hex[:8]}",
        "gcp:region": "europe-west1",
        "scheduler-dedup:databaseName": "scheduler-dedup-e2e",
        "scheduler-dedup:leaseSeconds": 60,
        "scheduler-dedup:functionTimeoutSeconds": 60,
        "scheduler-dedup:retentionSeconds": 86400,
        "scheduler-dedup:jobs": [
            {
                "name": "five-minutely",
                "schedule": "*/5 * * * *",
                "attemptDeadlineSeconds": 15,
                "retry": {
                    "retryCount": 5,
                    "maxRetryDurationSeconds": 240,
                    "minBackoffSeconds": 5,
                    "maxBackoffSeconds": 30,
                    "maxDoublings": 3,
                },
                "body": {"kind": "tick"},
            },
            {
                "name": "quarter-hourly",
                "schedule": "*/15 * * * *",
                "timeZone": "America/New_York",
                "attemptDeadlineSeconds": 30,
                "retry": {
                    "retryCount": 4,
                    "maxRetryDurationSeconds": 300,
                    "minBackoffSeconds": 10,
                    "maxBackoffSeconds": 60,
                    "maxDoublings": 2,
                },
            },
            {
                "name": "hourly",
                "schedule": "5 * * * *",
                "timeZone": "Europe/Berlin",
                "attemptDeadlineSeconds": 60,
                "retry": {
                    "retryCount": 5,
                    "maxRetryDurationSeconds": 600,
                    "minBackoffSeconds": 10,
                    "maxBackoffSeconds": 120,
                    "maxDoublings": 3,
                },
                "body": {"report": "hourly"},
            },
        ],
    }
    config.update(overrides)
    return config


def serve(emulator: FirestoreEmulator, ledger: Path, **options: Any) -> LocalFunction:
    return LocalFunction(
        e2e_stack(),
        emulator.host,
        scale=SCALE,
        ledger=ledger,
        collection=f"runs_{uuid.uuid4().hex[:10]}",
        **options,
    )


@pytest.fixture(scope="module")
def function(
    firestore_emulator: FirestoreEmulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalFunction]:
    """One served function (4 worker processes) for the module's replays."""
    with serve(firestore_emulator, tmp_path_factory.mktemp("e2e") / "ledger.jsonl") as served:
        yield served


@pytest.fixture(scope="module")
def store_faulted(
    firestore_emulator: FirestoreEmulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalFunction]:
    """A served function whose lease is sized for store faults, as the demo's is."""
    ledger = tmp_path_factory.mktemp("e2e-store") / "ledger.jsonl"
    with serve(firestore_emulator, ledger, store_faults=True) as served:
        yield served


def replay(
    function: LocalFunction,
    faults: list[str],
    *,
    ticks: int = 8,
    stack: Stack | None = None,
    **settings: Any,
) -> DemoOutcome:
    options = DemoOptions(
        ticks=ticks, start=START, faults=FaultPlan.parse(faults, seed=3), **settings
    )
    outcome = run_replay(function, stack or e2e_stack(), options)
    report = "\n".join(render(outcome))
    print(report)  # shown by pytest when a test fails
    return outcome


def assert_exactly_once(outcome: DemoOutcome) -> None:
    """Every acknowledged run executed exactly once; no run executed more than once."""
    for s in outcome.summaries:
        assert s.ok, f"{s.job} {s.schedule_time}: {s.verdict} ({s.reply_text()})"
        if s.scheduled and s.acknowledged:
            assert s.executions == 1
        if s.scheduled:
            assert s.executions is not None and s.executions <= 1
    assert outcome.ok, verdict_line(outcome)


def replies(outcome: DemoOutcome) -> Counter[str]:
    total: Counter[str] = Counter()
    for s in outcome.summaries:
        total.update(s.replies())
    return total


def test_no_faults_every_run_once_with_one_delivery(function: LocalFunction) -> None:
    # One delivery per run: each must be answered within its deadline (see
    # ROOMY_DEADLINE_SECONDS).
    stack = roomy_stack()
    outcome = replay(function, [], ticks=5, stack=stack)
    assert_exactly_once(outcome)
    assert outcome.totals["scheduled_runs"] == 15
    assert outcome.totals["exhausted_runs"] == 0
    assert replies(outcome) == Counter({"200": 15})


def test_lost_acknowledgements(function: LocalFunction) -> None:
    outcome = replay(function, ["lost-ack=0.4"])
    assert_exactly_once(outcome)
    lost = [s for s in outcome.summaries if "lost-ack" in s.faults]
    assert len(lost) >= 5
    # The retry after a lost 200 finds the run completed: 200 again, job not run again.
    retried = [s for s in lost if s.acknowledged]
    assert retried and all(s.executions == 1 for s in retried)
    assert all(len(s.deliveries) >= 2 for s in retried)


def test_slow_attempts_outlive_the_deadline(function: LocalFunction) -> None:
    outcome = replay(function, ["slow=0.3"])
    assert_exactly_once(outcome)
    slow = [s for s in outcome.summaries if "slow" in s.faults]
    assert len(slow) >= 4
    for s in slow:
        first = s.deliveries[0]
        assert first.reply == "timeout" and first.error == "deadline exceeded"
        # Scheduler hung up at the deadline; the slow attempt's job started all the same.
        assert s.starts is not None and s.starts >= 1
    # While it ran, retries were told 409 (in progress), or 200 once it had completed.
    assert any("409" in s.replies() for s in slow)
    assert all(set(s.replies()) <= {"timeout", "409", "200"} for s in slow)


def test_duplicate_deliveries(function: LocalFunction) -> None:
    outcome = replay(function, ["duplicate=0.5"])
    assert_exactly_once(outcome)
    duplicated = [s for s in outcome.summaries if "duplicate" in s.faults]
    assert len(duplicated) >= 5
    assert all(len(s.deliveries) >= 2 for s in duplicated)


def test_instance_killed_mid_job(function: LocalFunction) -> None:
    # Seed 3 kills five runs in five ticks, at most two of one job: each waits for its
    # lease (3 s, real time) before a retry takes it over.
    outcome = replay(function, ["kill=0.3"], ticks=5)
    assert_exactly_once(outcome)
    killed = [s for s in outcome.summaries if "kill" in s.faults]
    assert len(killed) >= 3
    assert outcome.workers_replaced >= 1  # gunicorn replaced the killed worker processes
    for s in killed:
        assert s.deliveries[0].reply in ("dropped", "timeout")
        # The killed attempt started the job but never committed it.
        assert s.starts is not None and s.starts >= 1
    # Once the killed attempt's lease expired, a retry took the run over and ran it.
    recovered = [s for s in killed if s.acknowledged]
    assert recovered, "no killed run was taken over after its lease expired"
    assert all(s.executions == 1 and "409" in s.replies() for s in recovered)


@pytest.mark.parametrize("stop_at_next_run", [True, False])
def test_forced_runs_execute_once_and_leave_the_next_scheduled_run_alone(
    function: LocalFunction, stop_at_next_run: bool
) -> None:
    # "Run now" between ticks (manual), and while a run is still in its first attempt or
    # backoff (manual-overlap, with slow attempts and lost replies to make those long).
    outcome = replay(
        function,
        ["manual=0.4", "manual-overlap=0.4", "slow=0.3", "lost-ack=0.3"],
        retries_stop_at_next_run=stop_at_next_run,
    )
    assert_exactly_once(outcome)
    forced = [s for s in outcome.summaries if s.forced]
    assert {"manual", "manual-overlap"} <= {f for s in forced for f in s.faults}
    assert len(forced) >= 8
    for s in forced:
        assert all(d.kind == "manual" for d in s.deliveries)
        assert s.verdict in (FORCED_ONCE, EXHAUSTED), s.verdict
        # The scheduled run of the time it carries executed on its own, once.
        assert s.scheduled_run is not None and s.scheduled_run.executions == 1
    assert all(s.executions == 1 for s in forced if s.acknowledged)
    # The function keyed every execution as the kind of delivery it ran for: forced runs
    # apart (RunContext.forced), scheduled runs as scheduled.
    assert not outcome.ledger.forced_mismatch


def test_bare_manual_runs_are_rejected_by_default(function: LocalFunction) -> None:
    # Scheduler retries each 400 for the job's whole retry window: one job, retried once,
    # keeps it short. Every reply must be that 400, none a timeout: a deadline each answer
    # fits in (see ROOMY_DEADLINE_SECONDS).
    job = {
        "name": "retried-once",
        "schedule": "*/5 * * * *",
        "attemptDeadlineSeconds": ROOMY_DEADLINE_SECONDS,
        "retry": {"retryCount": 1, "minBackoffSeconds": 5},
    }
    stack = e2e_stack(**{"scheduler-dedup:jobs": [job]})
    outcome = replay(function, ["manual-bare=0.5"], ticks=6, stack=stack)
    assert_exactly_once(outcome)
    bare = [s for s in outcome.summaries if not s.scheduled]
    assert bare and all(s.verdict == UNSCHEDULED for s in bare)
    assert all(set(s.replies()) == {"400"} and s.executions == 0 for s in bare)


def test_bare_manual_runs_without_dedup_when_configured(
    firestore_emulator: FirestoreEmulator, tmp_path: Path
) -> None:
    # Each bare delivery runs the job: one answered after its deadline would be retried
    # and run it again, so every answer must fit in its deadline (see ROOMY_DEADLINE_SECONDS).
    stack = roomy_stack().only(["five-minutely"])
    with serve(firestore_emulator, tmp_path / "ledger.jsonl", missing_schedule_time="run") as run:
        outcome = replay(run, ["manual-bare=0.5"], ticks=6, stack=stack)
    assert_exactly_once(outcome)
    bare = [s for s in outcome.summaries if not s.scheduled]
    # missingScheduleTime=run: each such delivery runs the job (no key to dedup on).
    assert bare and all(s.executions == 1 and s.acknowledged for s in bare)


def test_concurrent_emulator_workers(function: LocalFunction) -> None:
    outcome = replay(function, ["concurrent=0.5"])
    assert_exactly_once(outcome)
    doubled = [s for s in outcome.summaries if "concurrent" in s.faults]
    assert len(doubled) >= 5
    assert all({d.worker for d in s.deliveries} == {0, 1} for s in doubled)


def test_header_spellings_do_not_split_a_run(function: LocalFunction) -> None:
    # HTTP/2-style lower-case names, the full job name, and the schedule time spelled in
    # UTC and with the job's offset on alternate attempts: still one run per instant.
    outcome = replay(
        function,
        ["lost-ack=0.5", "duplicate=0.3"],
        ticks=6,
        header_case="lower",
        job_name_style="id",
        time_style="mixed",
    )
    assert_exactly_once(outcome)
    assert sum(1 for s in outcome.summaries if len(s.deliveries) >= 2) >= 5


def test_a_run_whose_deliveries_all_failed_is_reported(function: LocalFunction) -> None:
    # Every 2xx is lost on the way back: Scheduler retries until it gives up. The job
    # still ran once (the retries got 200 'duplicate'), and the report says so. Each of
    # the three attempts must be answered within its deadline to be '200 lost' (see
    # ROOMY_DEADLINE_SECONDS).
    job = {
        "name": "three-tries",
        "schedule": "*/5 * * * *",
        "attemptDeadlineSeconds": ROOMY_DEADLINE_SECONDS,
        "retry": {"retryCount": 2, "minBackoffSeconds": 5},
    }
    stack = e2e_stack(**{"scheduler-dedup:jobs": [job]})
    outcome = replay(function, ["lost-ack=1"], ticks=3, stack=stack)
    assert_exactly_once(outcome)
    assert outcome.totals["exhausted_runs"] == 3
    for s in outcome.summaries:
        assert s.verdict == EXHAUSTED and not s.acknowledged and s.executions == 1
        assert [d.reply for d in s.deliveries] == ["200 lost"] * 3
    text = "\n".join(render(outcome))
    assert text.count("retries exhausted") >= 3
    assert "3 run(s) exhausted their retries" in text


def test_all_faults_together_over_60_runs(function: LocalFunction) -> None:
    """Every fault of the emulator at once, against the served function and the real
    emulator. Its breadth (200 runs, 36 s, before) is the simulation's now (`make simulate`:
    thousands of schedules with every feature against every fault, docs/protocol.md); this
    keeps the real processes, sockets and store in the loop."""
    outcome = replay(
        function,
        [
            "lost-ack=0.1",
            "slow=0.06",
            "duplicate=0.1",
            "kill=0.03",
            "manual=0.06",
            "manual-overlap=0.06",
            "manual-bare=0.02",
            "concurrent=0.1",
        ],
        ticks=20,
    )
    assert_exactly_once(outcome)
    assert outcome.totals["scheduled_runs"] == 60
    seen = {f for s in outcome.summaries for f in s.faults}
    assert seen >= {
        "lost-ack", "slow", "duplicate", "kill", "manual", "manual-overlap", "concurrent",
    }
    verdicts = Counter(s.verdict for s in outcome.summaries if s.scheduled)
    assert verdicts[EXACTLY_ONCE] >= 55


def test_store_stalls_and_outages(store_faulted: LocalFunction) -> None:
    # Seed 4 strikes five-minutely's third run and at-most-once's first with a stall, and
    # hourly's first two with an outage; lost and duplicated replies add the later
    # deliveries that would run a run again if a store fault had left it unrecorded.
    base = e2e_stack()
    at_most_once = Job("at-most-once", "*/5 * * * *", attempt_deadline_seconds=15)
    stack = replace(base, jobs=(*base.jobs, at_most_once))
    faults = ["store-stall=0.2:4", "store-outage=0.2:4", "lost-ack=0.2", "duplicate=0.2"]
    outcome = replay(store_faulted, faults, ticks=3, stack=stack)
    assert_exactly_once(outcome)
    assert sorted((r.name, r.job) for r in outcome.store_faults) == [
        (STORE_OUTAGE, "hourly"),
        (STORE_OUTAGE, "hourly"),
        (STORE_STALL, "at-most-once"),
        (STORE_STALL, "five-minutely"),
    ]
    for record in outcome.store_faults:
        s = struck_run(record, outcome.summaries)
        assert s is not None and record.name in s.faults
        if record.job == "at-most-once":
            # No retries, and a deadline shorter than the stall: Scheduler gave up. The
            # function settled the claim all the same: its write had landed (the job ran)
            # or, on a connection opened during the stall, had not left (500, nothing ran).
            assert not s.acknowledged and s.executions in (0, 1)
        else:
            # Retries for longer than a store fault lasts: acknowledged in the end.
            assert s.acknowledged and s.executions == 1, s.reply_text()
    # No job that ran went unrecorded. Whether an outage costs a 500 store_unavailable
    # depends on when it meets the claim: on a loaded machine the function may reach its
    # store only after gRPC has reconnected (200 after 1.0 s), or answer after Scheduler hung
    # up; each struck run's outcome is checked above, and the bounded retryable 500 itself
    # by tests/function/test_protocol.py::test_store_outage_is_a_bounded_retryable_500.
    assert outcome.function_outcomes["completed_unrecorded"] == 0
    text = "\n".join(render(outcome))
    assert "store faults: what the function answered" in text
    assert "store faults injected: 2 stall-late, 0 stall-drop, 2 outage" in text
    [note] = [n for n in notes(outcome) if n.startswith("at-most-once 2026-10-16T00:05:00Z")]
    assert "store-stall held an attempt past its deadline (scaled to 300 ms" in note


def test_the_function_serves_only_the_stacks_invoker_account(function: LocalFunction) -> None:
    """As deployed, the local function has DEDUP_ALLOWED_CALLERS = the stack's invoker
    account, and every replay above got in with the emulator's token of that account."""
    stack = function.stack
    assert stack.invoker_email.endswith(f"-invoker@{stack.project}.iam.gserviceaccount.com")

    def deliver(email: str) -> int:
        request = urllib.request.Request(
            function.url, method="POST", data=b"{}",
            headers={
                "X-CloudScheduler-JobName": "hourly",
                "X-CloudScheduler-ScheduleTime": "2031-01-01T00:05:00Z",
                "Authorization": f"Bearer {scheduler_token(function.url, email)}",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                return int(reply.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    assert deliver(f"intruder@{stack.project}.iam.gserviceaccount.com") == 403
    assert deliver(stack.invoker_email) == 200


def test_the_watchdog_finds_exactly_the_missed_and_failed_runs(function: LocalFunction) -> None:
    # Missed runs (Scheduler never delivers them) and the flaky job's failing runs (its
    # logic fails on every attempt): after the replay, the watchdog's own code over the
    # replay's window reports exactly those, each with its kind, and nothing else.
    stack = with_flaky_job(e2e_stack())
    # Seed 3: hourly's first run is missed (not judged: the job did not exist yet for the
    # watchdog), flaky-export's run of 00:30 fails, its next three are missed.
    outcome = replay(function, ["missed=0.15"], ticks=8, stack=stack)
    assert_exactly_once(outcome)
    watch = outcome.watch
    assert watch is not None and watch.ok, "\n".join(watch_lines(watch) if watch else [])
    # What the test expects, independently of demo.watch: every missed run after the
    # job's first delivered run (before it, the watchdog takes the job as not yet
    # existing), and every run the flaky job's rule makes fail.
    expected: set[tuple[str, datetime, str]] = set()
    for name in [job.name for job in stack.jobs]:
        runs = sorted(
            (s for s in outcome.summaries if s.job == name and s.schedule_time is not None),
            key=lambda s: s.tick,
        )
        delivered = [s.schedule_time for s in runs if s.deliveries]
        assert delivered, f"{name}: every run missed"
        for s in runs:
            assert s.schedule_time is not None
            if MISSED in s.faults and s.schedule_time > min(t for t in delivered if t):
                assert s.verdict == NOT_DELIVERED and not s.deliveries
                expected.add((name, s.schedule_time, "missed"))
            elif name == FLAKY_SETTINGS.name and fails(s.schedule_time, 7):
                assert s.executions == 0 and not s.acknowledged
                expected.add((name, s.schedule_time, "failed"))
    # The watchdog names jobs by their deployed IDs (<namePrefix>-<name>).
    names = {job.job_id: job.name for job in stack.jobs}
    found = {
        (names[f.problem.job], f.problem.schedule_time, f.problem.kind) for f in watch.findings
    }
    assert found == expected
    assert {k for _, _, k in expected} == {"missed", "failed"}  # both kinds shown
    assert watch.checked == 8 * len(stack.jobs) - len(watch.not_judged)
    text = "\n".join(render(outcome))
    assert "exactly the expected runs" in text
    assert "the watchdog found exactly the" in verdict_line(outcome)


def test_a_finding_no_fault_explains_fails_the_demo(function: LocalFunction) -> None:
    # The flaky job's failing run, but the demo is told it executed once: the watchdog's
    # `failed` finding is then unexpected, and the verdict fails.
    stack = with_flaky_job(e2e_stack()).only([FLAKY_SETTINGS.name])
    options = DemoOptions(ticks=8, start=START, faults=FaultPlan())
    outcome = run_replay(function, stack, options)
    assert outcome.ok and outcome.watch is not None and outcome.watch.count(EXPECT_FAILED) == 1
    told = [replace(s, executions=1) for s in outcome.summaries]
    settings = watch_store_settings(function, stack)
    watch = run_watchdog(
        stack, told, settings, function.firestore_host, outcome.result.started,
        client_project=function.stack.project,
    )
    assert not watch.ok
    [finding] = watch.findings
    assert finding.problem.kind == "failed" and finding.expected is None
    outcome.watch = watch
    assert not outcome.ok
    assert verdict_line(outcome).startswith("RESULT: FAIL: the watchdog's findings differ")
    assert "UNEXPECTED" in "\n".join(watch_lines(watch))


def test_retries_through_the_next_tick_skip_it_and_the_watchdog_reports_it(
    function: LocalFunction,
) -> None:
    # Retries not stopped at the next run: every 2xx lost, one retry 125 s after the first
    # attempt ended, and 2 attempts of at most 15 s each: the run ends 125-155 s after its
    # tick, past the next tick (120 s), so Scheduler skips it, and before the one after
    # (240 s) however slow the machine (85 simulated s to spare: 1.7 s real). The watchdog
    # reports the skipped run as missed, and the demo expected exactly that. (Schedule
    # time passes at SCALE: a 2-minute interval and one retry keep the replay short.)
    job = {
        "name": "long-retries",
        "schedule": "*/2 * * * *",
        "attemptDeadlineSeconds": 15,
        "retry": {"retryCount": 1, "minBackoffSeconds": 125, "maxBackoffSeconds": 125},
    }
    stack = e2e_stack(**{"scheduler-dedup:jobs": [job]})
    outcome = replay(function, ["lost-ack=1"], ticks=4, stack=stack)
    assert_exactly_once(outcome)
    verdicts = [s.verdict for s in outcome.summaries]
    assert verdicts == [EXHAUSTED, SKIPPED_RUN, EXHAUSTED, SKIPPED_RUN], verdicts
    assert outcome.watch is not None and outcome.watch.ok
    assert {f.problem.kind for f in outcome.watch.findings} == {"missed"}
    assert "tick(s) skipped while the job was still retrying" in verdict_line(outcome)


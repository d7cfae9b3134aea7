"""overlap against the function as Cloud Run serves it (functions-framework processes, real
concurrent HTTP deliveries, the real Firestore emulator): a job longer than its period
under each policy, under store stalls, and with the instance of the running run killed.

The job (local_stack.interval_job) records when each execution started and ended and
stops once its claim is lost, so "two runs overlapped" is read from its ledger, not from
the dedup store. Each run is delivered by a Scheduler-like client that retries every
non-2xx until a 200 (its retry window), and then once more, as after a lost 200.

The policies' scenarios are independent (a job of their own each, overlap is per job):
the four without store faults run at once against one served function, the three under
store faults at once under one fault schedule, each test asserting on its own scenario.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from google.cloud import firestore

from dedup.keys import RunKey
from dedup.store import RunStatus
from dedup.store.firestore import FirestoreRunStore
from infra.scheduler_rules import LEASE_STORE_TIMEOUTS
from local_stack import FirestoreEmulator, FunctionServer
from local_stack.deliveries import LOCATION, PROJECT, function_env, scheduler_headers
from local_stack.fault_schedule import FaultKind, FaultSchedule, InjectedFault
from local_stack.interval_job import Execution, executions, overlapping
from local_stack.processes import REPO_ROOT
from local_stack.store_faults import StoreFaultProxy
from tests.waiting import let_time_pass, wait_until

pytestmark = pytest.mark.usefixtures("firestore_emulator")

JOB = "sync"
INTERVAL_JOB = "local_stack.interval_job:run"
JOB_SECONDS = 3.0  # a job longer than its period: the next run falls due while it runs
RUNS = 5
LEASE_SECONDS = 4.0  # renewed every 1.3 s: `replace` stops the previous run within that
# The store budget of the tests without store faults: as long as the kit lets a lease of
# LEASE_SECONDS have (lease >= 3 x store timeout, docs/policies.md), so a slow emulator on a
# loaded host (1.3 s for one call has been seen) is more often an answer than a 500 to an
# un-retried post.
STORE_TIMEOUT_SECONDS = LEASE_SECONDS / LEASE_STORE_TIMEOUTS
RETRY_WINDOW_SECONDS = 40.0
FIRST = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)


@dataclass
class RunLog:
    job: str
    schedule_time: datetime
    replies: list[tuple[int, str]] = field(default_factory=list)
    replied_at: list[float] = field(default_factory=list)  # time.time() of each reply
    again: tuple[int, str] | None = None  # the delivery after its 200 (a lost reply)

    @property
    def run_id(self) -> str:
        return RunKey(PROJECT, LOCATION, self.job, self.schedule_time).run_id

    @property
    def final(self) -> tuple[int, str]:
        return self.replies[-1]


def headers(t: datetime, overlap: str, job: str = JOB) -> dict[str, str]:
    return {**scheduler_headers(job, t.strftime("%Y-%m-%dT%H:%M:%SZ")),
            "X-Dedup-Overlap": overlap}


def post(url: str, t: datetime, overlap: str, seconds: float, job: str = JOB
         ) -> tuple[int, str]:
    try:
        reply = requests.post(url, headers=headers(t, overlap, job),
                              data=json.dumps({"sleep": seconds}), timeout=60)
        return reply.status_code, str(reply.json().get("outcome", "?"))
    except requests.RequestException as exc:
        return 0, type(exc).__name__


def deliver(url: str, t: datetime, overlap: str, seconds: float = JOB_SECONDS,
            job: str = JOB) -> RunLog:
    """Scheduler's side of one run: retried every 0.3 s until a 200 or the retry window
    is over, then delivered once more."""
    log = RunLog(job, t)
    give_up = time.monotonic() + RETRY_WINDOW_SECONDS
    while time.monotonic() < give_up:
        log.replies.append(post(url, t, overlap, seconds, job))
        log.replied_at.append(time.time())
        if log.final[0] == 200:
            log.again = post(url, t, overlap, seconds, job)
            break
        let_time_pass(0.3, "Scheduler's backoff before it retries (any longer one would do)")
    return log


def job_longer_than_its_period(url: str, ledger: Path, overlap: str, runs: int = RUNS
                               ) -> list[RunLog]:
    """Each run falls due while the one before still runs: run i is delivered once run
    i-1's job has started (its ledger line), or once run i-1 was answered without running
    (skipped). A schedule in real time (a run every 2 s of a 3 s job) left that to the
    machine's speed: a loaded one started a run late enough to miss its predecessor. The
    job is the policy's own (`sync-<overlap>`)."""
    job = policy_job(overlap)
    times = [FIRST + timedelta(minutes=i) for i in range(runs)]
    run_ids = [RunKey(PROJECT, LOCATION, job, t).run_id for t in times]
    answered = [threading.Event() for _ in times]

    def when_its_time_comes(i: int) -> RunLog:
        if i:
            wait_until(lambda: answered[i - 1].is_set() or any(
                e.run_id == run_ids[i - 1] for e in executions(str(ledger))),
                timeout=RETRY_WINDOW_SECONDS * 2, what=f"run {i - 1} to start or be answered")
        try:
            return deliver(url, times[i], overlap, job=job)
        finally:
            answered[i].set()

    with ThreadPoolExecutor(max_workers=runs) as pool:
        return list(pool.map(when_its_time_comes, range(runs)))


def policy_job(overlap: str) -> str:
    return f"{JOB}-{overlap}"


def of_scenario(ledger: Path, logs: list[RunLog]) -> list[Execution]:
    """The executions of the scenario's runs (others share the ledger)."""
    ids = {log.run_id for log in logs}
    return [e for e in executions(str(ledger)) if e.run_id in ids]


def statuses(collection: str) -> dict[str, dict[str, object]]:
    direct = firestore.Client(project=PROJECT)
    return {doc.id: doc.to_dict() or {} for doc in direct.collection(collection).stream()}


def finished_once(found: list[Execution]) -> Counter[str]:
    """Executions per run that ran to their end (not stopped by a lost claim)."""
    return Counter(e.run_id for e in found if e.ended is not None and not e.stopped)


def server_env(collection: str, ledger: Path, *, lease: float = LEASE_SECONDS,
               store_timeout: float = STORE_TIMEOUT_SECONDS, **extra: str) -> dict[str, str]:
    settings = {"DEDUP_JOB": INTERVAL_JOB, "DEDUP_LEASE_SECONDS": f"{lease:g}",
                "DEDUP_STORE_TIMEOUT_SECONDS": f"{store_timeout:g}"}
    return function_env(collection, ledger, **{**settings, **extra})


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.jsonl"


@dataclass
class Scenarios:
    """Policies' scenarios running at once against one served function: `runs[overlap]`
    is each one's future (its RunLogs)."""

    server: FunctionServer
    collection: str
    ledger: Path
    runs: dict[str, Future[list[RunLog]]]
    started: dict[str, float] = field(default_factory=dict)  # time.monotonic()
    ended: dict[str, float] = field(default_factory=dict)
    faults: list[InjectedFault] = field(default_factory=list)  # injected meanwhile

    def logs(self, overlap: str) -> list[RunLog]:
        return self.runs[overlap].result(timeout=300)

    def found(self, overlap: str) -> list[Execution]:
        return of_scenario(self.ledger, self.logs(overlap))


def run_at_once(scenarios: Scenarios, overlaps: list[str], pool: ThreadPoolExecutor,
                run: Callable[[str], list[RunLog]]) -> None:
    def timed(overlap: str) -> list[RunLog]:
        scenarios.started[overlap] = time.monotonic()
        try:
            return run(overlap)
        finally:
            scenarios.ended[overlap] = time.monotonic()

    for overlap in overlaps:
        scenarios.runs[overlap] = pool.submit(timed, overlap)


@pytest.fixture(scope="module")
def policies(firestore_emulator: object, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[Scenarios]:
    """allow, forbid, wait and replace at once, each a job longer than its period. Four
    jobs' runs at once: 16 threads a worker, so no delivery waits for a free one."""
    collection = f"runs_{uuid.uuid4().hex[:12]}"
    ledger = tmp_path_factory.mktemp("overlap") / "ledger.jsonl"
    with FunctionServer(server_env(collection, ledger), workers=2, threads=16,
                        extra_pythonpath=[REPO_ROOT]) as served, \
            ThreadPoolExecutor(max_workers=4) as pool:
        scenarios = Scenarios(served, collection, ledger, {})
        run_at_once(scenarios, ["allow", "forbid", "wait", "replace"], pool,
                    lambda overlap: job_longer_than_its_period(served.url, ledger, overlap))
        yield scenarios
        for future in scenarios.runs.values():
            future.cancel()


def report(overlap: str, logs: list[RunLog], found: list[Execution]) -> None:
    outcomes = Counter(outcome for log in logs for _, outcome in log.replies)
    print(f"\noverlap {overlap}: replies {dict(outcomes)}; executions "
          f"{len(found)} ({sum(e.stopped for e in found)} stopped); overlapping pairs "
          f"{len(overlapping(found))}")


def test_allow_runs_a_job_longer_than_its_period_twice_at_once(policies: Scenarios) -> None:
    """Today's behaviour, kept as the default: each run executes once, and they overlap."""
    logs, found = policies.logs("allow"), policies.found("allow")
    report("allow", logs, found)
    assert all(log.final == (200, "completed") for log in logs)
    assert finished_once(found) == Counter({log.run_id: 1 for log in logs})
    assert overlapping(found)


def test_forbid_skips_the_runs_due_while_one_runs_and_never_overlaps(
    policies: Scenarios,
) -> None:
    logs, found = policies.logs("forbid"), policies.found("forbid")
    report("forbid", logs, found)
    assert overlapping(found) == []
    ran = {log.run_id for log in logs if log.final == (200, "completed")}
    skipped = {log.run_id for log in logs if log.final == (200, "skipped")}
    assert ran | skipped == {log.run_id for log in logs} and ran and skipped
    assert finished_once(found) == Counter({run_id: 1 for run_id in ran})
    # A lost 200 changes nothing: the completed run is a duplicate, the skipped one stays.
    assert {log.again for log in logs} <= {(200, "duplicate"), (200, "skipped")}
    records = statuses(policies.collection)
    for run_id in skipped:
        assert records[run_id]["status"] == "skipped"
        assert records[run_id]["blocked_by"] in ran  # the run that held it off


def test_wait_runs_every_run_once_one_after_the_other(policies: Scenarios) -> None:
    logs, found = policies.logs("wait"), policies.found("wait")
    report("wait", logs, found)
    assert all(log.final == (200, "completed") for log in logs)
    assert all(log.again == (200, "duplicate") for log in logs)
    assert finished_once(found) == Counter({log.run_id: 1 for log in logs})
    assert overlapping(found) == []
    # Each waited with 409s (Scheduler's retries) while the one before ran.
    assert sum((409, "in_progress") in log.replies for log in logs) >= RUNS - 1


def test_replace_stops_the_running_run_before_the_next_starts(policies: Scenarios) -> None:
    logs, found = policies.logs("replace"), policies.found("replace")
    report("replace", logs, found)
    assert overlapping(found) == []
    last = logs[-1]
    assert last.final == (200, "completed")
    records = statuses(policies.collection)
    for log in logs[:-1]:
        # Stopped for the next run (its retries answered `skipped`), or done before it came.
        assert log.final in {(200, "skipped"), (200, "completed")}
        if log.final == (200, "skipped"):
            assert records[log.run_id]["replaced_by"] is not None
    assert any(e.stopped for e in found), "no run was replaced"
    assert max(finished_once(found).values()) == 1


# The stall test's own store budget: its faults are sized to it (each outlasts one call).
STALL_STORE_TIMEOUT_SECONDS = 1.0
SCHEDULE = FaultSchedule(
    seed=20261202,
    weights=((FaultKind.STALL_LATE, 1.0), (FaultKind.STALL_DROP, 1.0), (FaultKind.OUTAGE, 1.0)),
    duration=(1.1 * STALL_STORE_TIMEOUT_SECONDS, 1.6 * STALL_STORE_TIMEOUT_SECONDS),
    gap=(1.5, 3.0),  # as in test_store_faults_served: never away for a lease
)
STALL_LEASE_SECONDS = 10.0
PERIOD_SECONDS = 2.0  # the stall test's schedule: a run every 2 s of a 3 s job
MIN_FAULTS = 3  # struck while the runs are delivered, or there is too little to judge


def on_a_schedule_through_faults(url: str, overlap: str, runs: int, proxy: StoreFaultProxy
                                 ) -> list[RunLog]:
    """Run i falls due i periods after the first, in real time: what the stall test asserts
    holds whatever the timing (a run later than its time changes none of it). Only how
    many faults strike depends on how long the runs last, so the last run falls due no
    sooner than the MIN_FAULTS-th fault. The job is the policy's own (`sync-<overlap>`)."""
    times = [FIRST + timedelta(minutes=i) for i in range(runs)]
    first_due = time.monotonic()

    def at_its_time(i: int) -> RunLog:
        let_time_pass(first_due + i * PERIOD_SECONDS - time.monotonic(),
                      f"run {i} falls due {i} periods after the first")
        if i == runs - 1:
            wait_until(lambda: sum(proxy.counts.values()) >= MIN_FAULTS,
                       timeout=RETRY_WINDOW_SECONDS, what=f"{MIN_FAULTS} store faults")
        return deliver(url, times[i], overlap, job=policy_job(overlap))

    with ThreadPoolExecutor(max_workers=runs) as pool:
        return list(pool.map(at_its_time, range(runs)))


@pytest.fixture(scope="module")
def under_store_faults(firestore_emulator: FirestoreEmulator,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenarios]:
    """forbid, wait and replace at once, each six runs of a job longer than its period,
    through a store-fault proxy running SCHEDULE until the last has finished."""
    collection = f"runs_{uuid.uuid4().hex[:12]}"
    ledger = tmp_path_factory.mktemp("overlap-faults") / "ledger.jsonl"
    overlaps = ["forbid", "wait", "replace"]
    with StoreFaultProxy(firestore_emulator.host) as proxy:
        env = server_env(collection, ledger, lease=STALL_LEASE_SECONDS,
                         store_timeout=STALL_STORE_TIMEOUT_SECONDS,
                         FIRESTORE_EMULATOR_HOST=proxy.host)
        with FunctionServer(env, workers=2, threads=16, extra_pythonpath=[REPO_ROOT]) as served, \
                ThreadPoolExecutor(max_workers=len(overlaps)) as pool:
            for overlap in overlaps:  # every worker's channel warm: not counted
                warm = deliver(served.url, FIRST - timedelta(days=1), overlap, 0,
                               job=policy_job(overlap))
                assert warm.final[0] == 200
            scenarios = Scenarios(served, collection, ledger, {})
            proxy.run_schedule(SCHEDULE)
            try:
                run_at_once(scenarios, overlaps, pool, lambda overlap: (
                    on_a_schedule_through_faults(served.url, overlap, 6, proxy)))
                for future in scenarios.runs.values():
                    future.exception(timeout=300)  # done, one way or the other
            finally:
                proxy.stop_schedule()
            scenarios.faults = proxy.injected
            yield scenarios


@pytest.mark.parametrize("overlap", ["forbid", "wait", "replace"])
def test_under_store_stalls_and_outages_no_two_runs_overlap_and_each_runs_once(
    under_store_faults: Scenarios, overlap: str
) -> None:
    logs, found = under_store_faults.logs(overlap), under_store_faults.found(overlap)
    # The faults that began while this scenario ran (the others' ran at the same time).
    began, ended = under_store_faults.started[overlap], under_store_faults.ended[overlap]
    injected = sum(began <= f.start <= ended for f in under_store_faults.faults)
    found = [e for e in found if e.schedule_time >= FIRST.isoformat()]
    report(f"{overlap} under {injected} store faults", logs, found)
    assert injected >= MIN_FAULTS
    assert overlapping(found) == []
    assert all(log.final[0] == 200 for log in logs), [log.replies for log in logs]
    done = {log.run_id for log in logs if log.final == (200, "completed")}
    # Every run that completed ran to its end exactly once; the others ran to no end.
    assert {r for r, n in finished_once(found).items() if n} == done
    assert max(finished_once(found).values()) == 1
    if overlap == "wait":
        assert done == {log.run_id for log in logs}
    else:
        assert {log.final for log in logs} <= {(200, "completed"), (200, "skipped")}


# The killed-run test's own lease: from t0's claim to t1's first reply come the pointer
# write, the ledger poll, the kill and t1's reads (seconds on a loaded host), all of which
# must fit inside it for the refusal to be seen; over 3 x the store budget (policies.md).
KILLED_LEASE_SECONDS = 9.0


def lease_lapses_at(collection: str, run_id: str) -> float:
    """When the run's claim lapses by the store's own clock (dedup.store.StoredRun:
    the record's last write plus its lease), as time.time(): the emulator runs on this
    host, so its clock is ours."""
    stored = FirestoreRunStore(firestore.Client(project=PROJECT), collection, 10).get(run_id)
    assert stored is not None and stored.record.status is RunStatus.IN_PROGRESS, stored
    return stored.version.timestamp() + stored.record.lease_seconds


@pytest.mark.parametrize("overlap", ["forbid", "wait"])
def test_a_killed_run_blocks_the_job_for_at_most_its_lease(
    collection_name: str, ledger: Path, overlap: str
) -> None:
    env = server_env(collection_name, ledger, lease=KILLED_LEASE_SECONDS)
    t0, t1, t2 = (FIRST + timedelta(minutes=i) for i in range(3))
    killed = RunKey(PROJECT, LOCATION, JOB, t0).run_id
    # Both instances up first: the second must answer within the killed run's lease.
    with FunctionServer(env, workers=2, threads=8, extra_pythonpath=[REPO_ROOT]) as second:
        first = FunctionServer(env, workers=1, extra_pythonpath=[REPO_ROOT]).start()
        try:
            with ThreadPoolExecutor(max_workers=1) as pool:
                pending = pool.submit(post, first.url, t0, overlap, 60)
                wait_until(lambda: executions(str(ledger)), what="the first run to start")
                os.killpg(first.process.pid, signal.SIGKILL)  # type: ignore[union-attr]
                killed_wall = time.time()
                assert pending.result()[0] == 0  # no reply: the instance died
        finally:
            first.stop()
        # Read after the kill and the stop: no write of the killed instance can land later.
        lapses_at = lease_lapses_at(collection_name, killed)
        if overlap == "forbid":
            # The killed run still holds a live claim by the store's clock: skipped.
            posted_at = time.time()
            assert posted_at < lapses_at, (
                f"test host too slow: t1 posted {posted_at - lapses_at:.1f} s after the "
                "killed run's lease lapsed")
            skipped = post(second.url, t1, overlap, 0.2)
            if skipped != (200, "skipped") and time.time() >= lapses_at:
                pytest.fail(f"test host too slow: t1 got {skipped}, answered only after the "
                            "killed run's lease lapsed")
            assert skipped == (200, "skipped")
            let_time_pass(lapses_at - time.time(), "the killed run's lease lapses, as the "
                          "store's own record dates it")
            # Its lease lapsed: the job's latest run names a run that is not live.
            assert post(second.url, t2, overlap, 0.2) == (200, "completed")
        else:
            log = deliver(second.url, t1, overlap, 0.2)
            assert log.final == (200, "completed")
            # Refused while the killed run's lease ran, and let in only once it lapsed.
            assert len(log.replies) > 1, "t1's first reply was already a 200"
            assert set(log.replies[:-1]) == {(409, "in_progress")}
            assert log.replied_at[-1] >= lapses_at, (
                f"t1 ran {lapses_at - log.replied_at[-1]:.2f} s before the lease lapsed")
        # Scheduler's retry of the killed run takes it over, once nothing else runs.
        retried = deliver(second.url, t0, overlap, 0.2)
        assert retried.final == (200, "completed")
    found = executions(str(ledger))
    assert overlapping(found, killed_at=killed_wall) == []
    assert finished_once(found)[killed] == 1

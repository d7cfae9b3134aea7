"""End to end under store faults: the function served by functions-framework, talking to
the real Firestore emulator through a fault-injecting TCP proxy (local_stack.store_faults)
that holds back or drops the store's replies and resets connections on a seeded schedule.

Each run is delivered by a Scheduler-like client that retries until a 200. Stalls last
longer than the store deadline but less than the lease: the windows the protocol closes.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
from google.cloud import firestore

from local_stack import FirestoreEmulator, FunctionServer
from local_stack.deliveries import PROJECT, function_env, scheduler_headers
from local_stack.fault_schedule import FaultKind, FaultSchedule
from local_stack.processes import REPO_ROOT
from local_stack.steered_job import read_ledger
from local_stack.store_faults import StoreFaultProxy
from tests.waiting import let_time_pass, wait_until

RUNS = 50
STORE_TIMEOUT_SECONDS = 1.0
LEASE_SECONDS = 10.0  # renewed every 3.3 s; the holder fences itself after 8.3 s without one
JOB_SECONDS = 3.5  # long enough for at least one renewal
SCHEDULE = FaultSchedule(
    seed=20261130,
    weights=((FaultKind.STALL_LATE, 1.0), (FaultKind.STALL_DROP, 1.0), (FaultKind.OUTAGE, 1.0)),
    duration=(1.1 * STORE_TIMEOUT_SECONDS, 1.6 * STORE_TIMEOUT_SECONDS),
    # After an outage gRPC reconnects with a backoff of about 1 s, so the store stays away
    # a little longer than the fault; the gaps keep one fault's tail out of the next, so
    # the store is never away for a lease: the window no protocol closes (README).
    gap=(1.5, 3.0),
)
GIVE_UP_SECONDS = 120.0
MIN_FAULTS = 3  # struck while runs are delivered, or there is too little to judge
LAST_RUNS = 10  # delivered once MIN_FAULTS faults have struck


@dataclass
class RunLog:
    """Every reply one run's deliveries got, in order: (HTTP status, outcome)."""

    schedule_time: str
    replies: list[tuple[int, str]] = field(default_factory=list)


@pytest.fixture
def store_proxy(firestore_emulator: FirestoreEmulator) -> Iterator[StoreFaultProxy]:
    with StoreFaultProxy(firestore_emulator.host) as proxy:
        yield proxy


@pytest.fixture
def server(
    store_proxy: StoreFaultProxy, collection_name: str, tmp_path: Path
) -> Iterator[FunctionServer]:
    env = function_env(
        collection_name, tmp_path / "ledger.jsonl",
        FIRESTORE_EMULATOR_HOST=store_proxy.host,
        DEDUP_LEASE_SECONDS=f"{LEASE_SECONDS:g}",
        DEDUP_STORE_TIMEOUT_SECONDS=f"{STORE_TIMEOUT_SECONDS:g}",
    )
    with FunctionServer(env, workers=2, threads=16, extra_pythonpath=[REPO_ROOT]) as served:
        yield served


def deliver_until_done(url: str, schedule_time: str, log: RunLog) -> None:
    """Scheduler's side of one run: deliver, and on any non-2xx retry after a short
    backoff, until a 200. The deadline is long, so no attempt is ever abandoned while it
    runs: whenever a reply arrives, no other delivery of this run is in flight."""
    headers = scheduler_headers(schedule_time=schedule_time)
    body = json.dumps({"sleep": JOB_SECONDS, "result": schedule_time})
    give_up = time.monotonic() + GIVE_UP_SECONDS
    while time.monotonic() < give_up:
        try:
            reply = requests.post(url, headers=headers, data=body, timeout=60)
            status, outcome = reply.status_code, reply.json().get("outcome", "?")
        except requests.RequestException as exc:
            status, outcome = 0, type(exc).__name__
        log.replies.append((status, outcome))
        if status == 200:
            return
        let_time_pass(0.2, "Scheduler's backoff before it retries (any longer one would do)")


def deliver_run(url: str, schedule_time: str) -> tuple[RunLog, RunLog]:
    """The run until a 200, then the run again until a 200, as after a lost 200."""
    run, again = RunLog(schedule_time), RunLog(schedule_time)
    deliver_until_done(url, schedule_time, run)
    deliver_until_done(url, schedule_time, again)
    return run, again


def test_every_run_executes_exactly_once_under_store_stalls_and_outages(
    server: FunctionServer, store_proxy: StoreFaultProxy, collection_name: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    # Warm every worker's channel before faults start (a throw-away run, not counted).
    warm, _ = deliver_run(server.url, "2020-01-01T00:00:00Z")
    assert warm.replies[0][0] == 200

    times = [f"2026-10-16T{12 + i // 60:02d}:{i % 60:02d}:00Z" for i in range(RUNS)]
    store_proxy.run_schedule(SCHEDULE)
    try:
        with ThreadPoolExecutor(max_workers=10) as pool:
            first = [pool.submit(deliver_run, server.url, t) for t in times[:-LAST_RUNS]]
            # Enough faults to judge, whatever the machine's speed: the last runs are
            # delivered only once the schedule has struck MIN_FAULTS times (a run that
            # a loaded machine stretches meets more of them, a quick one waits for them).
            wait_until(lambda: sum(store_proxy.counts.values()) >= MIN_FAULTS,
                       timeout=GIVE_UP_SECONDS, what=f"{MIN_FAULTS} store faults")
            last = [pool.submit(deliver_run, server.url, t) for t in times[-LAST_RUNS:]]
            pairs = [future.result() for future in first + last]
    finally:
        store_proxy.stop_schedule()
    injected = store_proxy.counts
    logs = [log for pair in pairs for log in pair]
    server_log = server.log_text
    (tmp_path / "function.log").write_text(server_log)  # kept for a failure's post-mortem
    lines = [json.loads(line) for line in server_log.splitlines() if line.startswith("{")]
    # Deliveries that a fault visibly hit: slower than the job plus one store budget.
    slowed = sum(
        1 for line in lines
        if line.get("latency_ms", 0) > (JOB_SECONDS + STORE_TIMEOUT_SECONDS) * 1000
    )
    failed_renewals = server_log.count("lease renewal failed")

    executions = Counter(e["schedule_time"] for e in read_ledger(str(ledger)))
    replies = Counter(status for log in logs for status, _ in log.replies)
    outcomes = Counter(outcome for log in logs for _, outcome in log.replies)
    twice = {t: n for t, n in executions.items() if n > 1}
    # A 5xx promises that nothing ran and nothing blocks: the next delivery (none other is
    # in flight) must not be turned away with 409.
    blocked_after_5xx = [
        log.schedule_time for log in logs
        for before, after in zip(log.replies, log.replies[1:], strict=False)
        if before[0] >= 500 and after[0] == 409
    ]
    kinds = {kind.value: n for kind, n in injected.items()}
    print(
        f"\nstore faults injected: {kinds}; replies: {dict(replies)}; "
        f"outcomes: {dict(outcomes)}; runs executed: {len(executions)}/{RUNS}; "
        f"double executions: {len(twice)}; 409 right after a 5xx: {len(blocked_after_5xx)}; "
        f"deliveries slowed by a fault: {slowed}; failed renewals: {failed_renewals}"
    )

    assert sum(injected.values()) >= MIN_FAULTS
    assert slowed + failed_renewals > 0, "no fault hit a delivery: nothing was tested"
    assert twice == {}, f"runs executed more than once: {twice}"
    assert len(executions) == RUNS + 1  # every run, plus the warm-up run
    unfinished = [log.schedule_time for log in logs if log.replies[-1][0] != 200]
    assert unfinished == [], f"runs never answered 200: {unfinished}"
    assert all(run.replies[-1] == (200, "completed") for run, _ in pairs)
    assert all(again.replies[-1] == (200, "duplicate") for _, again in pairs)
    assert blocked_after_5xx == []
    assert outcomes["completed_unrecorded"] == 0  # every stall was shorter than the lease

    direct = firestore.Client(project=PROJECT)  # straight to the emulator, no proxy
    statuses = Counter(
        (doc.to_dict() or {}).get("status") for doc in direct.collection(collection_name).stream()
    )
    assert statuses == Counter({"completed": RUNS + 1})

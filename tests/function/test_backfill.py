"""Backfills: `make backfill`'s code path plans the runs of a range, the watchdog releases
them into the re-run queue at a bounded rate and delivers them to the served function
(real Firestore emulator, the ledger job counting executions), and every run executes
once per generation under store faults and kills.

Two tests share the claim "10,000 runs, each executed once per generation": the count,
10,000 runs planned, queued in one backfill record (its commit's reply lost) and released,
delivered and tallied exactly once by the watchdog, is proven with a deliverer that
records instead of serving (the volume is the watchdog's and the store's, not HTTP's); the
mechanism, each run executed once per generation while the store stalls, drops replies
and goes away and watchdog and function instances are killed, is proven served, on a
backfill sized so that every kind of kill and the store faults strike it several times.

The watchdog runs in-process with its ticks driven by the test (its clock fixed), so the
volume costs the deliveries, not waiting.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore

from dedup.settings import Settings
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog import deliveries as watchdog_deliveries
from dedup.watchdog.backfills import (
    FINISHED,
    STOPPED,
    Backfill,
    BackfillPacer,
    BackfillSettings,
    FirestoreBackfills,
    backfills_collection,
)
from dedup.watchdog.cursors import FirestoreWatchStore
from dedup.watchdog.delivery import (
    DeliversRuns,
    DeliveryResult,
    HttpDeliverer,
    RunDelivery,
    TargetAuth,
)
from dedup.watchdog.due import WatchedJob
from dedup.watchdog.reruns import DONE, FirestoreRerunQueue, reruns_collection
from dedup.watchdog.settings import WatchSettings
from dedup.watchdog.tick import Watchdog, WatchdogHandler
from infra.config import StackConfig, load_config
from local_stack import FirestoreEmulator, FunctionServer
from local_stack.deliveries import LOCATION, PROJECT, function_env
from local_stack.fault_schedule import FaultSchedule
from local_stack.processes import REPO_ROOT
from local_stack.steered_job import read_ledger
from local_stack.store_faults import StoreFaultProxy
from operator_tools import backfill as backfill_cli
from operator_tools.runs import RunStores
from tests.function.backfill_chaos import (
    AFTER_PROGRESS,
    AFTER_THE_FUNCTION_RAN,
    BEFORE_DELIVERING,
    BEFORE_PROGRESS,
    INSTANCE_DIED,
    Chaos,
    ChaoticBackfills,
    ChaoticDeliverer,
    Killed,
    StoreFaultsOnCue,
)
from tests.function.test_catch_up import JOB_HEADERS
from tests.function.test_watchdog import Runs

pytestmark = pytest.mark.usefixtures("firestore_emulator")

PREFIX = "backfill-test"
FAST_BODY = json.dumps({"result": "backfilled"})
STORE_TIMEOUT_SECONDS = 1.0


@contextlib.contextmanager
def emulator_at(host: str) -> Iterator[None]:
    """Clients built inside talk to `host` (a store-fault proxy): the client reads
    FIRESTORE_EMULATOR_HOST when it is constructed."""
    before = os.environ["FIRESTORE_EMULATOR_HOST"]
    os.environ["FIRESTORE_EMULATOR_HOST"] = host
    try:
        yield
    finally:
        os.environ["FIRESTORE_EMULATOR_HOST"] = before


@dataclass
class Served:
    server: FunctionServer
    collection: str
    ledger: Path
    proxy: StoreFaultProxy

    def executions(self, job: str) -> Counter[tuple[str, int]]:
        return Counter((e["schedule_time"], e["generation"])
                       for e in read_ledger(str(self.ledger)) if e["job"] == job)


@pytest.fixture(scope="module")
def served(firestore_emulator: FirestoreEmulator,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The function, whose store is behind a fault proxy (shared by the watchdog)."""
    collection = f"runs_{uuid.uuid4().hex[:12]}"
    ledger = tmp_path_factory.mktemp("backfill") / "ledger.jsonl"
    with StoreFaultProxy(firestore_emulator.host) as proxy:
        env = function_env(collection, ledger, FIRESTORE_EMULATOR_HOST=proxy.host,
                           DEDUP_STORE_TIMEOUT_SECONDS=f"{STORE_TIMEOUT_SECONDS:g}",
                           DEDUP_LEASE_SECONDS="10")
        with FunctionServer(env, workers=2, threads=16, extra_pythonpath=[REPO_ROOT]) as server:
            yield Served(server, collection, ledger, proxy)


def stack(collection: str, job: str, schedule: str = "* * * * *",
          time_zone: str = "Etc/UTC") -> StackConfig:
    return load_config({
        "gcp:project": PROJECT, "gcp:region": LOCATION,
        "scheduler-dedup:namePrefix": PREFIX, "scheduler-dedup:collection": collection,
        "scheduler-dedup:watchdog": {"reruns": True, "graceSeconds": 30},
        "scheduler-dedup:jobs": [{
            "name": job, "schedule": schedule, "timeZone": time_zone,
            "attemptDeadlineSeconds": 60, "body": json.loads(FAST_BODY),
        }],
    })


def watched(job_id: str) -> WatchedJob:
    return WatchedJob(job_id, "* * * * *", "Etc/UTC", attempt_deadline_seconds=60,
                      body=FAST_BODY, headers=JOB_HEADERS, reruns=True)


@dataclass
class Watch:
    """An in-process watchdog (store behind `store_host`) with the test's clock."""

    collection: str
    jobs: list[WatchedJob]
    url: str
    now: datetime
    backfill: BackfillSettings
    store_host: str
    chaos: Chaos | None = None
    store_faults: StoreFaultsOnCue | None = None  # injected by the chaos's deliveries
    deliverer: DeliversRuns | None = None  # default: HttpDeliverer, no token
    logs: list[Mapping[str, Any]] = field(default_factory=list)
    # The function's default budget: a test without store faults never fails a tick because
    # a loaded machine's emulator took longer than 1 s; the fault test passes the budget its
    # faults are sized to (STORE_TIMEOUT_SECONDS).
    store_timeout_seconds: float = 10.0

    def handler(self) -> WatchdogHandler:
        settings = WatchSettings(
            Settings(project=PROJECT, location=LOCATION, collection=self.collection,
                     store_timeout_seconds=self.store_timeout_seconds),
            tuple(self.jobs), lookback_seconds=3600, grace_seconds=30, target_url=self.url,
            target_auth=TargetAuth.NONE, delivery_timeout_seconds=20, backfill=self.backfill,
        )
        with emulator_at(self.store_host):
            client = firestore.Client(project=PROJECT)
        runs = FirestoreRunStore(client, self.collection, self.store_timeout_seconds)
        queue = FirestoreRerunQueue(runs, reruns_collection(self.collection))
        deliverer = self.deliverer or HttpDeliverer(TargetAuth.NONE)
        backfills = FirestoreBackfills(runs, backfills_collection(self.collection))
        if self.chaos is not None:
            deliverer = ChaoticDeliverer(deliverer, self.chaos, self.store_faults)
            backfills = ChaoticBackfills(runs, backfills_collection(self.collection), self.chaos)
        pacer = BackfillPacer(self.backfill, backfills, queue, 86400 * 30)
        watchdog = Watchdog(settings, FirestoreWatchStore(runs, settings.cursor_collection),
                            lambda: self.now, deliverer, queue, pacer)
        return WatchdogHandler(settings, watchdog, self.logs.append)

    def tick(self) -> dict[str, Any] | None:
        """One tick; None if the instance was killed or the store failed it (500)."""
        try:
            reply = self.handler().handle({}, b"")
        except Killed:
            return None
        return dict(reply.body) if reply.status == 200 else None


def plan(cfg: StackConfig, store: FirestoreRunStore, first: datetime, last: datetime,
         now: datetime, **options: Any) -> backfill_cli.Planned:
    return backfill_cli.plan_backfill(
        cfg, RunStores(store), job_name=cfg.jobs[0].name, first_text=first.isoformat(),
        last_text=last.isoformat(), reason=options.pop("reason", "outage of 2026-11-30"),
        requested_by="alice@example.com", now=now, **options)


def minutes_back(count: int, *, end_minutes_ago: int = 10) -> tuple[datetime, list[datetime]]:
    """Now, and `count` real past minutes ending `end_minutes_ago` before it, oldest first
    (the served function takes a future schedule time for a forced run)."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    last = now - timedelta(minutes=end_minutes_ago)
    return now, [last - timedelta(minutes=k) for k in range(count - 1, -1, -1)]


def new_job() -> tuple[str, str]:
    name = f"sync{uuid.uuid4().hex[:6]}"
    return name, f"{PREFIX}-{name}"


def run_backfill(watch: Watch, served: Served, job_id: str, *, max_ticks: int) -> int:
    """Tick until the job's backfill finished; the number of ticks."""
    backfills = FirestoreBackfills(
        FirestoreRunStore(firestore.Client(project=PROJECT), served.collection, 5),
        backfills_collection(served.collection))
    for n in range(1, max_ticks + 1):
        watch.tick()
        stored = backfills.get(job_id)
        assert stored is not None
        if getattr(stored.value, "state", None) == FINISHED:
            return n
    raise AssertionError(f"not finished after {max_ticks} ticks: {stored}")


# -- the count: 10,000 runs planned, queued once, delivered and tallied once ------------------

BIG = 10_000
# Released 1,000 at a time: ten rounds of the watchdog's release, settle and progress write.
BIG_IN_FLIGHT = 1000


@dataclass
class Recorded:
    """Serves nothing: records each delivery and answers as the function answers a run it
    executed (200 `completed`), directly (not through a queue), as HttpDeliverer does."""

    asynchronous = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    delivered: Counter[tuple[str, int]] = field(default_factory=Counter)

    def deliver(self, delivery: RunDelivery) -> DeliveryResult:
        with self.lock:
            self.delivered[(delivery.schedule_time.isoformat(), delivery.generation)] += 1
        return DeliveryResult("completed", http_status=200)


@pytest.mark.timeout(900)  # minutes on a busy two-core machine: the store's RPCs
def test_ten_thousand_runs_are_queued_once_and_each_delivered_and_counted_once(
    served: Served, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The count at full size: `make backfill` plans 10,000 runs (of both generations),
    writes them in one backfill record once though its commit's reply is lost, and the
    watchdog releases, delivers and tallies each exactly once. What a served run does with
    a delivery under faults is the served test's below."""
    monkeypatch.setattr(watchdog_deliveries, "MAX_PARALLEL_DELIVERIES", 32)
    name, job_id = new_job()
    now, times = minutes_back(BIG)
    # Before and after an outage, every run completed: 1,000 runs of the range are re-runs
    # (generation 1), the other 9,000 first runs (few completed records to write).
    outage = set(times[500:-500])
    Runs(served.collection).bulk_completed(job_id, [t for t in times if t not in outage])
    cfg = stack(served.collection, name)
    store = FirestoreRunStore(firestore.Client(project=PROJECT), served.collection, 10)
    started = time.monotonic()
    planned = plan(cfg, store, times[0], times[-1], now, mode="all")
    assert [c.generation for c in planned.queued].count(0) == len(outage)
    assert len(planned.queued) == BIG and planned.skipped == []
    # Written with its reply lost (the store stalls, then drops it), and asked again by
    # the operator: one backfill, queued once.
    with emulator_at(served.proxy.host):
        faulty = FirestoreRunStore(firestore.Client(project=PROJECT), served.collection,
                                   STORE_TIMEOUT_SECONDS)
    faulty.get_many(["warm-up"])  # connected: the commit reaches the store in the stall
    # Stalled until the call has given up, however long building the 10,000-run commit
    # takes on a loaded machine (a timed stall of 2.5 s once ended before it was sent).
    served.proxy.stall(120, drop=True)
    try:
        with pytest.raises(Exception):  # noqa: B017 - StoreUnavailable, whichever layer says
            backfill_cli.queue_backfill(cfg, RunStores(faulty), planned, now)
    finally:
        served.proxy.heal()  # the held reply is dropped: lost
    served.proxy.wait_healthy(10)
    again = plan(cfg, store, times[0], times[-1], now, mode="all")
    said = backfill_cli.queue_backfill(cfg, RunStores(store), again, now)
    assert said.startswith("already queued: backfill "), said  # the lost commit landed
    assert said.endswith(f"0/{BIG} released; nothing queued again")
    planned_seconds = time.monotonic() - started

    recorded = Recorded()
    watch = Watch(served.collection, [watched(job_id)], served.server.url, now=now,
                  backfill=BackfillSettings(runs_per_tick=BIG, in_flight=BIG_IN_FLIGHT),
                  store_host=served.proxy.host, deliverer=recorded)
    ticks = run_backfill(watch, served, job_id, max_ticks=50)
    print(f"\n{BIG} runs: planned and queued in {planned_seconds:.1f}s, released, delivered "
          f"and tallied in {time.monotonic() - started - planned_seconds:.1f}s over {ticks} "
          "ticks")
    expected = {(c.schedule_time.isoformat(), c.generation) for c in planned.queued}
    assert len(expected) == BIG
    assert recorded.delivered == Counter(dict.fromkeys(expected, 1))  # each once, none else
    assert_tallied(served, store, job_id, BIG)


def assert_tallied(served: Served, store: FirestoreRunStore, job_id: str, total: int) -> None:
    """Each position counted once, whatever died when: the backfill's own tally, and each
    of its requests done."""
    stored = FirestoreBackfills(store, backfills_collection(served.collection)).get(job_id)
    assert stored is not None and isinstance(stored.value, Backfill)
    final = stored.value
    assert (final.state, final.done, final.failed, final.refused, final.in_flight) == (
        FINISHED, total, 0, 0, {})
    queue = FirestoreRerunQueue(store, reruns_collection(served.collection))
    requests = queue.for_job(job_id)
    assert len(requests) == total and {r.status for r in requests} == {DONE}


# -- the mechanism, served: under store faults and kills -----------------------------------------

# Sized so that each kind of kill strikes it several times (the rarest every 31 deliveries)
# and all its store faults find deliveries to strike; BACKFILL_TEST_RUNS serves a bigger one.
SERVED_RUNS = int(os.environ.get("BACKFILL_TEST_RUNS", "200"))
# 12 at a time: 17 rounds at least, so the kills around a progress write strike too.
SERVED_IN_FLIGHT = 12
KILLS_EVERY = {BEFORE_DELIVERING: 31, AFTER_THE_FUNCTION_RAN: 29, INSTANCE_DIED: 23,
               BEFORE_PROGRESS: 7, AFTER_PROGRESS: 5}
STORE_FAULTS = 6


@pytest.mark.timeout(900)
def test_served_backfill_runs_execute_once_per_generation_under_store_faults_and_kills(
    served: Served, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As wide as the served function (2 workers x 16 threads): the volume, not the rate.
    monkeypatch.setattr(watchdog_deliveries, "MAX_PARALLEL_DELIVERIES", 32)
    name, job_id = new_job()
    now, times = minutes_back(SERVED_RUNS)
    outage = set(times[int(SERVED_RUNS * 0.35):int(SERVED_RUNS * 0.65)])
    Runs(served.collection).bulk_completed(job_id, [t for t in times if t not in outage])
    cfg = stack(served.collection, name)
    store = FirestoreRunStore(firestore.Client(project=PROJECT), served.collection, 10)
    planned = plan(cfg, store, times[0], times[-1], now, mode="all")
    assert [c.generation for c in planned.queued].count(0) == len(outage)
    assert len(planned.queued) == SERVED_RUNS and planned.skipped == []
    said = backfill_cli.queue_backfill(cfg, RunStores(store), planned, now)
    assert said.startswith("queued: backfill "), said

    started = time.monotonic()
    chaos = Chaos(KILLS_EVERY, collection=served.collection)
    faults_before = sum(served.proxy.counts.values())
    cued = StoreFaultsOnCue(served.proxy, FaultSchedule(
        seed=7, duration=(1.1 * STORE_TIMEOUT_SECONDS, 1.6 * STORE_TIMEOUT_SECONDS),
        count=STORE_FAULTS), every=SERVED_RUNS // (STORE_FAULTS + 3))
    watch = Watch(served.collection, [watched(job_id)], served.server.url, now=now,
                  backfill=BackfillSettings(runs_per_tick=SERVED_RUNS,
                                            in_flight=SERVED_IN_FLIGHT),
                  store_host=served.proxy.host, chaos=chaos, store_faults=cued,
                  store_timeout_seconds=STORE_TIMEOUT_SECONDS)
    try:
        ticks = run_backfill(watch, served, job_id, max_ticks=400)
    finally:
        served.proxy.wait_healthy(30)  # a fault injected by the last deliveries
    injected = sum(served.proxy.counts.values()) - faults_before

    executions = served.executions(job_id)
    expected = {(c.schedule_time.isoformat(), c.generation) for c in planned.queued}
    twice = {run: n for run, n in executions.items() if n > 1}
    print(f"\n{SERVED_RUNS} runs served in {time.monotonic() - started:.1f}s over {ticks} "
          f"ticks; kills {dict(chaos.counts)}; store faults {injected} "
          f"({store_faults(served.proxy)} in the module); executed twice: {len(twice)}")
    assert twice == {}, f"runs executed more than once: {list(twice.items())[:5]}"
    assert set(executions) == expected
    assert set(chaos.counts) == set(KILLS_EVERY), f"a kind of kill never struck: {chaos.counts}"
    assert sum(chaos.counts.values()) >= 5, "too few kills to judge"
    assert injected >= 3, "too few store faults to judge"
    assert_tallied(served, store, job_id, SERVED_RUNS)


def store_faults(proxy: StoreFaultProxy) -> dict[str, int]:
    return {kind.value: n for kind, n in proxy.counts.items()}


# -- the rate: per tick, in flight, order ------------------------------------------------------

@dataclass
class Overlaps:
    """Delivers for real, and records how many deliveries of each job ran at once."""

    inner: DeliversRuns
    asynchronous = False
    running: Counter[str] = field(default_factory=Counter)
    most: Counter[str] = field(default_factory=Counter)
    order: list[tuple[datetime, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def deliver(self, delivery: RunDelivery) -> DeliveryResult:
        with self.lock:
            self.running[delivery.job_id] += 1
            self.most[delivery.job_id] = max(self.most[delivery.job_id],
                                             self.running[delivery.job_id])
            self.order.append((delivery.schedule_time, delivery.generation))
        try:
            return self.inner.deliver(delivery)
        finally:
            with self.lock:
                self.running[delivery.job_id] -= 1


@dataclass
class Queued:
    """A queue's hand-over (Cloud Tasks): the run is delivered, the answer is `queued`."""

    inner: DeliversRuns
    asynchronous = True

    def deliver(self, delivery: RunDelivery) -> DeliveryResult:
        self.inner.deliver(delivery)
        return DeliveryResult("queued")


def test_a_backfill_runs_one_at_a_time_at_most_n_a_tick_in_its_order(
    served: Served,
) -> None:
    name, job_id = new_job()
    now, times = minutes_back(7)
    cfg = stack(served.collection, name)
    store = FirestoreRunStore(firestore.Client(project=PROJECT), served.collection, 10)
    planned = plan(cfg, store, times[0], times[-1], now, order="reverse")
    assert [c.schedule_time for c in planned.queued] == times[::-1]
    backfill_cli.queue_backfill(cfg, RunStores(store), planned, now)
    overlaps = Overlaps(HttpDeliverer(TargetAuth.NONE))
    watch = Watch(served.collection, [watched(job_id)], served.server.url, now=now,
                  backfill=BackfillSettings(runs_per_tick=3, in_flight=1),
                  store_host=served.proxy.host, deliverer=overlaps)
    progress = []
    for _ in range(3):
        body = watch_tick(watch)
        progress.append((body["backfills"][0]["released"], body["backfills"][0]["done"]))
    assert progress == [(3, 3), (6, 6), (7, 7)]  # 3 a tick, the last one then finished
    assert body["backfills"][0]["state"] == FINISHED
    assert overlaps.most[job_id] == 1  # never two of its runs at once
    assert overlaps.order == [(t, 0) for t in times[::-1]]  # newest first, once each
    assert served.executions(job_id) == Counter({(t.isoformat(), 0): 1 for t in times})


def test_through_a_queue_a_backfill_releases_its_next_run_once_the_last_completed(
    served: Served,
) -> None:
    name, job_id = new_job()
    now, times = minutes_back(3)
    cfg = stack(served.collection, name)
    store = FirestoreRunStore(firestore.Client(project=PROJECT), served.collection, 10)
    backfill_cli.queue_backfill(cfg, RunStores(store), plan(cfg, store, times[0], times[-1],
                                                            now), now)
    watch = Watch(served.collection, [watched(job_id)], served.server.url, now=now,
                  backfill=BackfillSettings(runs_per_tick=20, in_flight=1),
                  store_host=served.proxy.host, deliverer=Queued(HttpDeliverer(TargetAuth.NONE)))
    released = [watch_tick(watch)["backfills"][0]["released"] for _ in range(4)]
    assert released == [1, 2, 3, 3]  # one a tick: its outcome is read at the next
    assert served.executions(job_id) == Counter({(t.isoformat(), 0): 1 for t in times})


def test_a_backfill_document_that_is_none_is_reported_once_and_never_delivered(
    served: Served,
) -> None:
    name, job_id = new_job()
    now, times = minutes_back(2)
    client = firestore.Client(project=PROJECT)
    client.collection(backfills_collection(served.collection)).document(job_id).set(
        {"backfill_id": "x", "job": job_id, "state": "active", "total": "all of them"})
    watch = Watch(served.collection, [watched(job_id)], served.server.url, now=now,
                  backfill=BackfillSettings(), store_host=served.proxy.host)
    [problem] = [p for p in watch_tick(watch)["problems"] if p["kind"] == "malformed"]
    assert problem["document"] == f"{backfills_collection(served.collection)}/{job_id}"
    assert problem["error"].startswith("backfill refused, never delivered: ")
    assert [p for p in watch_tick(watch)["problems"] if p["kind"] == "malformed"] == []
    assert served.executions(job_id) == Counter()
    # The job's next `make backfill` replaces it.
    cfg = stack(served.collection, name)
    store = FirestoreRunStore(client, served.collection, 10)
    said = backfill_cli.queue_backfill(
        cfg, RunStores(store), plan(cfg, store, times[0], times[-1], now), now)
    assert said.startswith("queued: backfill "), said
    watch_tick(watch)
    assert served.executions(job_id) == Counter({(t.isoformat(), 0): 1 for t in times})


def test_a_generation_asked_for_by_make_rerun_meanwhile_runs_once_theirs(
    served: Served,
) -> None:
    from operator_tools.rerun import request_rerun

    name, job_id = new_job()
    now, times = minutes_back(2)
    Runs(served.collection).bulk_completed(job_id, times)
    cfg = stack(served.collection, name)
    store = FirestoreRunStore(firestore.Client(project=PROJECT), served.collection, 10)
    planned = plan(cfg, store, times[0], times[-1], now, mode="all")
    assert [c.generation for c in planned.queued] == [1, 1]
    backfill_cli.queue_backfill(cfg, RunStores(store), planned, now)
    # Before the watchdog releases it, an operator re-runs the first run: generation 1.
    theirs = request_rerun(cfg, RunStores(store), job_name=name, time_text=times[0].isoformat(),
                           reason="by hand", requested_by="bob@example.com", now=now).request
    assert theirs.generation == 1
    watch = Watch(served.collection, [watched(job_id)], served.server.url, now=now,
                  backfill=BackfillSettings(), store_host=served.proxy.host)
    [progress] = watch_tick(watch)["backfills"]
    assert (progress["state"], progress["done"], progress["refused"]) == (FINISHED, 1, 1)
    stored = FirestoreBackfills(store, backfills_collection(served.collection)).get(job_id)
    assert stored is not None and isinstance(stored.value, Backfill)
    assert stored.value.last_error == (
        f"generation 1 of {times[0]:%Y-%m-%dT%H:%M:%SZ} was asked by bob@example.com meanwhile")
    assert served.executions(job_id) == Counter({(t.isoformat(), 1): 1 for t in times})


def watch_tick(watch: Watch) -> dict[str, Any]:
    body = watch.tick()
    assert body is not None
    return body




def test_a_backfill_asked_to_stop_on_failure_stops_at_its_failed_run(served: Served) -> None:
    """STOP_ON_FAILURE=1 (issue 40): the third of five runs fails; nothing after it is
    released, the backfill is `stopped` naming that run, and make backfill-status says
    what to do. Without it, the same backfill goes on past the failure (the next test)."""
    name, job_id = new_job()
    now, times = minutes_back(5)
    cfg = stack(served.collection, name)
    store = FirestoreRunStore(firestore.Client(project=PROJECT), served.collection, 10)
    planned = plan(cfg, store, times[0], times[-1], now, stop_on_failure=True)
    backfill_cli.queue_backfill(cfg, RunStores(store), planned, now)
    job = replace(watched(job_id), body=json.dumps({"fail_at": [times[2].isoformat()]}))
    watch = Watch(served.collection, [job], served.server.url, now=now,
                  backfill=BackfillSettings(runs_per_tick=5, in_flight=1),
                  store_host=served.proxy.host)
    [progress] = watch_tick(watch)["backfills"]  # delivered directly: one tick
    assert progress["state"] == STOPPED
    assert progress["stopped_at"] == times[2].strftime("%Y-%m-%dT%H:%M:%SZ")
    assert (progress["done"], progress["failed"], progress["released"]) == (2, 1, 3)
    assert "backfills" not in watch_tick(watch)  # stopped: nothing more is released
    assert served.executions(job_id) == Counter({(t.isoformat(), 0): 1 for t in times[:3]})
    out = io.StringIO()
    backfill_cli.show_status(cfg, RunStores(store), name, out)
    assert f"stopped at its failed run {times[2]:%Y-%m-%dT%H:%M:%S}Z" in out.getvalue()
    assert "make rerun TIME=<that run>" in out.getvalue()


def test_a_paused_job_is_backfilled_and_goes_on_past_a_failure_by_default(
    served: Served,
) -> None:
    """A paused job (Scheduler delivers nothing of its schedule) is backfilled as any job:
    the watchdog delivers its runs. Without STOP_ON_FAILURE a failed run is counted and
    the backfill goes on to its end."""
    name, job_id = new_job()
    now, times = minutes_back(3)
    cfg = stack(served.collection, name)
    store = FirestoreRunStore(firestore.Client(project=PROJECT), served.collection, 10)
    backfill_cli.queue_backfill(cfg, RunStores(store), plan(cfg, store, times[0], times[-1],
                                                            now), now)
    job = replace(watched(job_id), paused=True,
                  body=json.dumps({"fail_at": [times[0].isoformat()]}))
    watch = Watch(served.collection, [job], served.server.url, now=now,
                  backfill=BackfillSettings(runs_per_tick=5, in_flight=1),
                  store_host=served.proxy.host)
    [progress] = watch_tick(watch)["backfills"]
    assert (progress["state"], progress["done"], progress["failed"]) == (FINISHED, 2, 1)
    assert served.executions(job_id) == Counter({(t.isoformat(), 0): 1 for t in times})

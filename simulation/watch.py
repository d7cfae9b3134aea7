"""The watchdog in the simulation: its ticks (its own Scheduler job, retried after a 500,
sometimes two at once) and the queue that delivers its catch-ups and re-runs (Cloud Tasks:
`QueuedDeliveries`, a DeliversRuns that hands each run to the instances as a task)."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.delivery import DeliveryResult, RunDelivery
from dedup.watchdog.settings import WatchSettings
from dedup.watchdog.tick import Watchdog, WatchdogHandler
from simulation.actors import Deliveries, RetryPolicy, accepted
from simulation.clock import SimClock
from simulation.record import CursorState, Recorder
from simulation.scheduler import Scheduler

QUEUED, ERROR = "queued", "error"
TASK_NAME = "X-CloudTasks-TaskName"
TASK_ETA = "X-CloudTasks-TaskETA"


class QueuedDeliveries:
    """Cloud Tasks as the watchdog's deliverer: one task per name (run, generation,
    number); a name already used is ALREADY_EXISTS (queued, no second task). CreateTask
    may fail, or land with its reply lost. Called from the kit's delivery pool threads:
    its draws come from the delivery itself, and its tasks are spawned in name order."""

    asynchronous = True

    def __init__(self, scheduler: Scheduler, clock: SimClock, deliveries: Deliveries,
                 seed: int, retry: RetryPolicy, fault_chance: float) -> None:
        self._scheduler = self.scheduler = scheduler
        self._clock = clock
        self._deliveries = deliveries
        self._seed = seed
        self._retry = retry
        self._fault_chance = fault_chance
        self._names: set[str] = set()

    def deliver(self, delivery: RunDelivery) -> DeliveryResult:
        name = f"{delivery.run_id}-{delivery.generation}-{delivery.number}"
        rng = random.Random(f"{self._seed}/{name}/{len(self._names)}")
        fault = rng.random() < self._fault_chance
        if fault and rng.random() < 0.5:
            return DeliveryResult(ERROR, error="CreateTask failed (simulated)")
        if name in self._names:
            return DeliveryResult(QUEUED, 409)
        self._names.add(name)
        eta = self._scheduler.now + rng.uniform(0.5, 5.0)
        self._scheduler.spawn_soon(name, f"task:{name[:12]}", self._task(delivery, name, eta),
                                   eta)
        if fault:
            return DeliveryResult(ERROR, error="CreateTask's reply lost (simulated)")
        return DeliveryResult(QUEUED, 200)

    def _task(self, delivery: RunDelivery, name: str, eta: float) -> Callable[[], None]:
        def run() -> None:
            scheduler = self._scheduler
            headers = {**delivery.request_headers(), TASK_NAME: name,
                       TASK_ETA: f"{self._eta_epoch(eta):.3f}"}
            body = (delivery.body or "").encode()
            for attempt in range(self._retry.retry_count + 1):
                status = self._deliveries.attempt(
                    f"task {name[:12]} attempt {attempt + 1}", headers, body,
                    self._retry.attempt_deadline)
                if status is not None and 200 <= status < 300:
                    return
                scheduler.sleep(self._retry.backoff(attempt))
        return run

    def _eta_epoch(self, eta: float) -> float:
        return self._clock.at(eta).timestamp()


def carried_key(line: Mapping[str, Any]) -> str | None:
    """How the invariants name an outbox line: `opened:<incident>` for an
    `incident_opened` line, `<kind>:<run_id>` for a problem line; None for any other."""
    if line.get("event") == "incident_opened":
        return f"opened:{line.get('incident')}"
    if line.get("kind") and line.get("run_id"):
        return f"{line.get('kind')}:{line.get('run_id')}"
    return None


def recording_watch_store(runs: FirestoreRunStore, collection: str, database: str,
                          scheduler: Scheduler, recorder: Recorder) -> Any:
    """FirestoreWatchStore, noting for the silences' invariants what each tick read in the
    cursors' outboxes and what its cursor writes that landed hold (record.py)."""
    from dedup.watchdog.cursors import FirestoreWatchStore

    class RecordingWatchStore(FirestoreWatchStore):
        def get_cursors(self, jobs: Any) -> Any:
            cursors = super().get_cursors(jobs)
            me = scheduler.current
            if me is not None:
                recorder.carried[me.name] = {
                    job: {key for line in getattr(cursor, "outbox", ())  # older kits: none
                          if (key := carried_key(line))}
                    for job, cursor in cursors.items()}
            return cursors

        def put_cursors(self, cursors: Any, now: Any) -> Any:
            written = super().put_cursors(cursors, now)
            me = scheduler.current
            recorder.cursor_writes.append((me.name if me else "main", scheduler.now, {
                job: CursorState(
                    frozenset(s.incident for s in (getattr(cursor, "incidents", None)
                                                   or {}).values() if s.open and s.incident),
                    frozenset(str(line.get("incident"))
                              for line in getattr(cursor, "held", None) or ()))
                for job, cursor in cursors.items()}))
            return written

    return RecordingWatchStore(runs, collection, {database: runs}, runs)


def recording_silences(runs: FirestoreRunStore, collection: str, scheduler: Scheduler,
                       recorder: Recorder) -> Any:
    """FirestoreSilences (`make silence`'s, in the watchdog's database), noting when each
    tick read them (None on a kit without silences)."""
    try:
        from dedup.watchdog.silences import FirestoreSilences, silences_collection
    except ImportError:
        return None

    class RecordingSilences(FirestoreSilences):
        def read_all(self) -> Any:
            began = scheduler.now
            found = super().read_all()
            me = scheduler.current
            if me is not None:
                recorder.silences_read[me.name] = (began, scheduler.now)
            return found

    return RecordingSilences(runs, silences_collection(collection))


def build_watchdog(settings: WatchSettings, client: Any, clock: SimClock,
                   deliverer: QueuedDeliveries, emit: Callable[[Mapping[str, Any]], None],
                   recorder: Recorder, silenced: bool, operator_silences: bool,
                   ) -> WatchdogHandler:
    """As tick.build_watchdog_handler, on the fake store, the simulated clock and the
    simulated queue (one database: the records', the cursors' and the requests'). What the
    ticks read and write is recorded only in a seed with a silence (`silenced`: the
    silences' invariant reads it). The operator silences are read only in a seed that
    draws a `make silence`: the read is an RPC at every tick, which would change every
    older seed's run."""
    store = settings.store
    runs = FirestoreRunStore(client, store.collection, store.store_timeout_seconds)
    scheduler = deliverer.scheduler
    if silenced:
        watch_store = recording_watch_store(runs, settings.cursor_collection, store.database,
                                            scheduler, recorder)
    else:
        from dedup.watchdog.cursors import FirestoreWatchStore
        watch_store = FirestoreWatchStore(runs, settings.cursor_collection,
                                          {store.database: runs}, runs)
    silences = (recording_silences(runs, store.collection, scheduler, recorder)
                if operator_silences else None)
    reruns = backfills = None
    try:
        from dedup.watchdog.backfills import (
            BackfillPacer,
            FirestoreBackfills,
            backfills_collection,
        )
        from dedup.watchdog.reruns import FirestoreRerunQueue
        reruns = FirestoreRerunQueue(runs, settings.reruns_collection)
        backfills = BackfillPacer(
            settings.backfill, FirestoreBackfills(runs, backfills_collection(store.collection)),
            reruns, store.retention_seconds, **accepted(BackfillPacer,
                                                         monotonic=clock.monotonic))
    except ImportError:
        pass
    watchdog = Watchdog(settings, watch_store, **accepted(
        Watchdog, wall_clock=clock.wall, deliverer=deliverer, reruns=reruns,
        backfills=backfills, silences=silences))
    return WatchdogHandler(settings, watchdog, emit)


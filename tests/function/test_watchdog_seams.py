"""Where backfills, re-runs and alert streaks meet in one watchdog tick (real Firestore
emulator, a fake deliverer): the pending pass leaves backfill requests to their backfill
(an operator's request is never crowded out), a re-run or backfill generation that ran
twice is reported and counted in its job's streak, and a catch-up answered `skipped`
is no recovery."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.cloud import firestore

from dedup.keys import RunKey
from dedup.settings import Settings
from dedup.store import RunRecord, RunStatus
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.cursors import FirestoreWatchStore
from dedup.watchdog.delivery import DeliveryResult, RunDelivery
from dedup.watchdog.due import WatchedJob
from dedup.watchdog.incidents import OPENED, RESOLVED
from dedup.watchdog.ran_twice import RAN_TWICE
from dedup.watchdog.rerun_deliveries import MAX_RERUNS_PER_TICK
from dedup.watchdog.reruns import (
    DONE,
    PENDING,
    FirestoreRerunQueue,
    RerunRequest,
    reruns_collection,
)
from dedup.watchdog.settings import WatchSettings
from dedup.watchdog.tick import TickResult, Watchdog, WatchdogHandler
from local_stack.deliveries import LOCATION, PROJECT
from tests.function.faulty_store import CursorCommitFaults

pytestmark = pytest.mark.usefixtures("firestore_emulator")

NOW = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)
URL = "http://127.0.0.1:9/"  # never called: the fake deliverer answers


class Answers:
    """A direct deliverer that answers `status` (and runs `effect` first), recording what
    it was given."""

    asynchronous = False

    def __init__(self, status: str = "completed", effect: object = None) -> None:
        self.status = status
        self.effect = effect
        self.given: list[RunDelivery] = []
        self._lock = threading.Lock()

    def deliver(self, delivery: RunDelivery) -> DeliveryResult:
        with self._lock:
            self.given.append(delivery)
        if callable(self.effect):
            self.effect(delivery)
        return DeliveryResult(self.status, 200)


def _runs(collection: str) -> FirestoreRunStore:
    return FirestoreRunStore(firestore.Client(project=PROJECT), collection, 5)


def _watchdog(collection: str, jobs: list[WatchedJob], deliverer: Answers) -> Watchdog:
    runs = _runs(collection)
    store = Settings(project=PROJECT, location=LOCATION, collection=collection,
                     store_timeout_seconds=5)
    settings = WatchSettings(store, tuple(jobs), 3600, 30, target_url=URL)
    return Watchdog(settings, FirestoreWatchStore(runs, settings.cursor_collection),
                    lambda: NOW, deliverer, FirestoreRerunQueue(runs, reruns_collection(
                        collection)))


def _record(runs: FirestoreRunStore, key: RunKey, *, taken_over: bool) -> None:
    """A finished record of `key`, by attempt 2 after it took attempt 1 over (ran twice),
    or by attempt 1 alone."""
    record = replace(
        RunRecord.claim(key, "a" * 32, 2 if taken_over else 1, 60, NOW + timedelta(days=3650),
                        key.schedule_time, unfinished_attempts=(1,) if taken_over else ()),
        status=RunStatus.COMPLETED, finished_at=key.schedule_time, duration_seconds=0.1)
    runs.create(key.run_id, record)


def _request(job: str, t: datetime, generation: int, asked: datetime,
             backfill: str | None = None) -> RerunRequest:
    return RerunRequest(PROJECT, LOCATION, job, t, generation, "alice@example.com", "fixed",
                        asked, backfill=backfill)


def test_an_operator_request_is_delivered_while_a_large_backfill_is_in_flight(
    collection_name: str,
) -> None:
    job = WatchedJob("seam-bf", "* * * * *", reruns=True, attempt_deadline_seconds=60)
    runs = _runs(collection_name)
    queue = FirestoreRerunQueue(runs, reruns_collection(collection_name))
    first = NOW - timedelta(hours=2)
    times = [first + timedelta(minutes=m) for m in range(MAX_RERUNS_PER_TICK + 20)]
    # The backfill's requests, asked before the operator's: more than a pass takes.
    queue.create_many([_request(job.name, t, 0, NOW - timedelta(hours=1), "bf-1")
                       for t in times])
    operator = _request(job.name, NOW - timedelta(minutes=30), 0, NOW - timedelta(minutes=1))
    queue.create(operator)
    found = queue.pending(MAX_RERUNS_PER_TICK)
    assert [r.request_id for r in found] == [operator.request_id]

    answers = Answers()
    result = _watchdog(collection_name, [job], answers).run_tick()
    assert [d.schedule_time for d in answers.given] == [operator.schedule_time]
    assert [(d.run_id, d.status) for d in result.reruns] == [(operator.request_id, "completed")]
    assert queue.get_many([operator.request_id])[operator.request_id].status == DONE
    # The backfill's are left to it (its pacer delivers them by ID), still pending.
    still = queue.read_many([_request(job.name, t, 0, NOW).request_id for t in times])
    assert {getattr(r, "status", None) for r in still.values()} == {PENDING}


def test_pending_requests_are_taken_oldest_asked_first(collection_name: str) -> None:
    queue = FirestoreRerunQueue(_runs(collection_name), reruns_collection(collection_name))
    asked = [NOW - timedelta(minutes=m) for m in (5, 50, 20)]
    for minute, at in enumerate(asked):
        queue.create(_request("seam-order", NOW - timedelta(hours=3, minutes=minute), 0, at))
    assert [r.requested_at for r in queue.pending(10) if isinstance(r, RerunRequest)] == (
        sorted(asked))


def _ran_twice(result: TickResult) -> list[str]:
    return sorted(str(p.run_id) for p in result.problems if p.kind == RAN_TWICE)


def test_a_rerun_generation_that_ran_twice_is_reported_and_opens_the_incident(
    collection_name: str,
) -> None:
    job = WatchedJob("seam-twice", "* * * * *", reruns=True, attempt_deadline_seconds=60)
    runs = _runs(collection_name)
    queue = FirestoreRerunQueue(runs, reruns_collection(collection_name))
    settled_t, delivered_t = NOW - timedelta(minutes=20), NOW - timedelta(minutes=15)
    for t in (settled_t, delivered_t):
        _record(runs, RunKey(PROJECT, LOCATION, job.name, t), taken_over=False)
    # One generation already finished when the tick reads it (settled by its record, as
    # through a queue), one executed by the tick's own direct delivery; both taken over.
    settled = RunKey(PROJECT, LOCATION, job.name, settled_t, generation=1)
    _record(runs, settled, taken_over=True)
    queue.create(_request(job.name, settled_t, 1, NOW - timedelta(minutes=5)))
    queue.create(_request(job.name, delivered_t, 1, NOW - timedelta(minutes=4)))

    def executes_twice(delivery: RunDelivery) -> None:
        _record(runs, RunKey(PROJECT, LOCATION, job.name, delivery.schedule_time,
                             generation=delivery.generation), taken_over=True)

    answers = Answers("completed", executes_twice)
    result = _watchdog(collection_name, [job], answers).run_tick()
    delivered = RunKey(PROJECT, LOCATION, job.name, delivered_t, generation=1)
    assert _ran_twice(result) == sorted([settled.run_id, delivered.run_id])
    assert all("generation 1: attempt 2 completed the run after taking over attempt(s) 1"
               in (p.error or "") for p in result.problems if p.kind == RAN_TWICE)
    # Counted in the job's ran_twice streak: one incident for both, paged once.
    opened = [t for t in result.transitions if t.kind == RAN_TWICE]
    assert [(t.event, t.job) for t in opened] == [(OPENED, job.name)]
    # Judged once: the requests are done, a later tick reports nothing again.
    again = _watchdog(collection_name, [job], Answers()).run_tick()
    assert _ran_twice(again) == []


def test_a_generation_that_ran_once_is_no_ran_twice(collection_name: str) -> None:
    job = WatchedJob("seam-once", "* * * * *", reruns=True, attempt_deadline_seconds=60)
    runs = _runs(collection_name)
    queue = FirestoreRerunQueue(runs, reruns_collection(collection_name))
    t = NOW - timedelta(minutes=20)
    _record(runs, RunKey(PROJECT, LOCATION, job.name, t), taken_over=False)
    _record(runs, RunKey(PROJECT, LOCATION, job.name, t, generation=1), taken_over=False)
    queue.create(_request(job.name, t, 1, NOW - timedelta(minutes=5)))
    result = _watchdog(collection_name, [job], Answers()).run_tick()
    assert _ran_twice(result) == [] and [d.status for d in result.reruns] == ["completed"]


def test_a_catch_up_answered_skipped_is_no_recovery(collection_name: str) -> None:
    """Missed runs beyond the catch-up bound open the incident; the later ones, caught up
    and skipped by the job's overlap, do not resolve it (nor count as good runs)."""
    job = WatchedJob("seam-skip", "* * * * *", attempt_deadline_seconds=60, catch_up=True,
                     catch_up_within_seconds=300)
    runs = _runs(collection_name)
    _record(runs, RunKey(PROJECT, LOCATION, job.name, NOW - timedelta(minutes=20)),
            taken_over=False)
    answers = Answers("skipped")
    result = _watchdog(collection_name, [job], answers).run_tick()
    assert answers.given and {c.status for c in result.caught_up} == {"skipped"}
    assert result.counts["skipped"] == len(answers.given)
    events = [t.event for t in result.transitions]
    assert events == [OPENED] and RESOLVED not in events


def test_a_generation_that_ran_twice_is_reported_when_its_settling_tick_fails_after_commit(
    collection_name: str,
) -> None:
    """Item 4 of issue 37: the tick that settles a re-run generation which executed twice
    commits its cursor, then the store goes away (the reply lost, unresolved): 500. The
    request stays pending until the cursor carrying its ran_twice line was written, so the
    retry still reports it; once reported, it is finished and never reported again.
    (Before: the request was written done first, so no later tick reported it.)"""
    job = WatchedJob("seam-told", "* * * * *", reruns=True, attempt_deadline_seconds=60)
    runs = _runs(collection_name)
    queue = FirestoreRerunQueue(runs, reruns_collection(collection_name))
    t = NOW - timedelta(minutes=20)
    _record(runs, RunKey(PROJECT, LOCATION, job.name, t), taken_over=False)
    twice = RunKey(PROJECT, LOCATION, job.name, t, generation=1)
    _record(runs, twice, taken_over=True)  # killed mid-job and taken over: ran twice
    request = _request(job.name, t, 1, NOW - timedelta(minutes=5))
    queue.create(request)
    logs: list[Mapping[str, Any]] = []
    watchdog = _watchdog(collection_name, [job], Answers())
    handler = WatchdogHandler(watchdog._settings, watchdog, logs.append)
    watchdog._store = CursorCommitFaults(watchdog._store, landed=1)
    assert handler.handle({}, b"").status == 500
    assert queue.get_many([request.request_id])[request.request_id].status == PENDING
    assert handler.handle({}, b"").status == 200  # Scheduler's retry
    told = [e for e in logs if e.get("kind") == RAN_TWICE]
    assert told and {e["run_id"] for e in told} == {twice.run_id}
    assert queue.get_many([request.request_id])[request.request_id].status == DONE
    logs.clear()
    assert handler.handle({}, b"").status == 200
    assert [e for e in logs if e.get("kind") == RAN_TWICE] == []

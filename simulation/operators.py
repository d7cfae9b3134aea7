"""Operators in the simulation: `make rerun` asked at random moments, through the same
checks and the same request the tool writes (operator_tools/rerun.py: generations,
plan_rerun, then FirestoreRerunQueue.create), on the fake store and the simulated clock.
The watchdog delivers the requests at its ticks. `make silence` and its removal write
and delete the silence as operator_tools/silence.py does (FirestoreSilences.put, .remove),
retried until it lands (an operator runs the command again after an error)."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from dedup.keys import RunKey
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.reruns import FirestoreRerunQueue, RerunRequest, reruns_collection
from simulation.clock import SimClock
from simulation.record import Recorder
from simulation.scheduler import Scheduler


def ask_rerun(client: Any, collection: str, store_timeout: float, retention: float,
              job: Any, instant: datetime, grace: float, project: str, location: str,
              scheduler: Scheduler, clock: SimClock, recorder: Recorder) -> None:
    """One `make rerun ... CONFIRM=1` of run `instant` of `job` (a WatchedJob)."""
    from operator_tools.rerun import RerunRefused, generations, plan_rerun

    actor = scheduler.current
    name = actor.name if actor is not None else "main"
    runs = FirestoreRunStore(client, collection, store_timeout)
    queue = FirestoreRerunQueue(runs, reruns_collection(collection))
    now = clock.wall()
    try:
        asked = queue.for_run(RunKey(project, location, job.name, instant).run_id)
        highest = max((r.generation for r in asked), default=-1)
        found = generations(runs, project, location, job.name, instant, through=highest)
        plan = plan_rerun(job, instant, asked, found, now=now, grace_seconds=grace,
                          again=True)
        request = RerunRequest(
            project=project, location=location, job=job.name, schedule_time=instant,
            generation=plan.generation, requested_by="operator@sim", reason="simulated",
            requested_at=now, expire_at=now + timedelta(seconds=retention))
        queue.create(request)
    except RerunRefused as refused:
        recorder.note(scheduler.now, name, f"rerun refused: {str(refused)[:120]}")
        return
    except Exception as exc:
        recorder.note(scheduler.now, name, f"rerun failed: {type(exc).__name__}")
        return
    run_id = RunKey(project, location, job.name, instant, generation=plan.generation).run_id
    recorder.requested.append((run_id, scheduler.now, None))
    recorder.note(scheduler.now, name, f"rerun asked: run {run_id} generation "
                  f"{plan.generation}")


def rerun_times(rng: random.Random, count: int, span: float) -> list[float]:
    return sorted(rng.uniform(span * 0.3, span) for _ in range(count))


def ask_backfill(client: Any, collection: str, store_timeout: float, retention: float,
                 job: Any, first: datetime, last: datetime, grace: float, project: str,
                 location: str, scheduler: Scheduler, clock: SimClock,
                 recorder: Recorder) -> None:
    """One `make backfill ... MODE=all CONFIRM=1` of `job`'s runs from `first` to `last`:
    each run's next generation as plan_backfill chooses it (operator_tools/backfill.py:
    plan_rerun per run), written as the tool writes it (FirestoreBackfills.create)."""
    from dedup.watchdog.backfills import (
        ACTIVE,
        ALL,
        FORWARD,
        Backfill,
        FirestoreBackfills,
        PlannedRun,
        backfill_id,
        backfills_collection,
    )
    from operator_tools.rerun import RerunRefused, generations_of, plan_rerun

    actor = scheduler.current
    name = actor.name if actor is not None else "main"
    runs = FirestoreRunStore(client, collection, store_timeout)
    queue = FirestoreRerunQueue(runs, reruns_collection(collection))
    backfills = FirestoreBackfills(runs, backfills_collection(collection))
    now = clock.wall()
    times = [run.key_time for run in job.business.runs(first - timedelta(seconds=1), last)]
    base = {t: RunKey(project, location, job.name, t).run_id for t in times}
    planned: list[PlannedRun] = []
    try:
        existing = backfills.get(job.name)
        if existing is not None and getattr(existing.value, "state", None) == ACTIVE:
            recorder.note(scheduler.now, name, "backfill refused: one is active")
            return
        asked = queue.for_runs(list(base.values()))
        through = {t: max((r.generation for r in asked.get(base[t], [])), default=-1)
                   for t in times}
        found = generations_of(runs, project, location, job.name, through)
        for t in times:
            try:
                plan = plan_rerun(job, t, asked.get(base[t], []), found[t], now=now,
                                  grace_seconds=grace, again=True)
            except RerunRefused:
                continue
            planned.append(PlannedRun(t, plan.generation))
        if not planned:
            return
        backfill = Backfill(
            backfill_id(project, location, job.name, first, last, ALL, FORWARD), project,
            location, job.name, first, last, ALL, FORWARD, "simulated", "operator@sim", now,
            total=len(planned))
        backfills.create(backfill, planned, now, existing)
    except Exception as exc:
        recorder.note(scheduler.now, name, f"backfill failed: {type(exc).__name__}")
        return
    for run in planned:
        run_id = RunKey(project, location, job.name, run.schedule_time,
                        generation=run.generation).run_id
        recorder.requested.append((run_id, scheduler.now, job.name))
        recorder.note(scheduler.now, name, f"backfill asked: run {run_id} generation "
                      f"{run.generation}")


def ask_silence(silence: Any, collection: str, store_timeout: float, client: Any,
                scheduler: Scheduler, clock: SimClock, recorder: Recorder) -> None:
    """`make silence` of `silence` (a world.SilenceSpec) at its begin, and `make
    silence-remove` at its `removed_at`; each noted in `recorder.silence_ops` with its
    first attempt and when it succeeded. Nothing on a kit without silences."""
    try:
        from dedup.watchdog.silences import (
            FirestoreSilences,
            OperatorSilence,
            silences_collection,
        )
    except ImportError:
        return
    book = FirestoreSilences(FirestoreRunStore(client, collection, store_timeout),
                             silences_collection(collection))
    scope = silence.job or ""

    def until_done(what: str, call: Callable[[], object]) -> None:
        first = scheduler.now
        for _ in range(100):
            try:
                call()
            except Exception as exc:  # as an operator sees a failed command: run it again
                recorder.note(scheduler.now, f"operator:silence {scope}",
                              f"silence {what} failed: {type(exc).__name__}")
                scheduler.sleep(10.0)
                continue
            recorder.silence_ops.append((scope, what, first, scheduler.now))
            recorder.note(scheduler.now, f"operator:silence {scope}",
                          f"silence {what}: {silence.describe()}")
            return

    def put() -> None:
        asked = OperatorSilence(silence.job, clock.at(silence.until), "simulated maintenance",
                                "operator@sim", clock.wall())
        until_done("put", lambda: book.put(asked))

    def remove() -> None:
        while not any(op[:2] == (scope, "put") for op in recorder.silence_ops):
            scheduler.sleep(5.0)  # the silence is lifted once it was set
        until_done("remove", lambda: book.remove(silence.job))

    scheduler.spawn(f"operator:silence {scope}", put, at=silence.begin, killable=False)
    if silence.removed_at is not None:
        scheduler.spawn(f"operator:silence-remove {scope}", remove, at=silence.removed_at,
                        killable=False)

"""Operators in the simulation: `make rerun` asked at random moments, through the same
checks and the same request the tool writes (operator_tools/rerun.py: generations,
plan_rerun, then FirestoreRerunQueue.create), on the fake store and the simulated clock.
The watchdog delivers the requests at its ticks."""

from __future__ import annotations

import random
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
    recorder.requested.append((run_id, scheduler.now))
    recorder.note(scheduler.now, name, f"rerun asked: run {run_id} generation "
                  f"{plan.generation}")


def rerun_times(rng: random.Random, count: int, span: float) -> list[float]:
    return sorted(rng.uniform(span * 0.3, span) for _ in range(count))

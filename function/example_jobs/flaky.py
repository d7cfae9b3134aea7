"""A job that fails on some runs, every time: the demo's stand-in for a broken run.

It fails, on every attempt, the runs whose schedule time falls on a multiple of
`failEvery` minutes since the epoch (the job's JSON body, e.g. {"failEvery": 7}); every
other run succeeds. Deterministic from the schedule time alone, so whoever knows the
schedule (the demo) knows which runs fail through all their retries, and so which runs
the run watchdog must report as `failed`.
"""

from __future__ import annotations

import json
from datetime import datetime

from dedup import RunContext

DEFAULT_FAIL_EVERY = 7


def fail_every(body: bytes | None) -> int:
    """The job body's failEvery (minutes), or the default."""
    try:
        value = json.loads(body or b"{}").get("failEvery", DEFAULT_FAIL_EVERY)
    except (ValueError, AttributeError):
        return DEFAULT_FAIL_EVERY
    return value if isinstance(value, int) and value > 0 else DEFAULT_FAIL_EVERY


def fails(schedule_time: datetime, every: int = DEFAULT_FAIL_EVERY) -> bool:
    """Does the run scheduled at `schedule_time` fail (on every attempt)?"""
    return (int(schedule_time.timestamp()) // 60) % every == 0


def run(context: RunContext) -> dict[str, object]:
    every = fail_every(context.body)
    if fails(context.schedule_time, every):
        raise RuntimeError(f"flaky: this run fails on every attempt (failEvery {every})")
    return {"job": context.job_name, "schedule_time": context.schedule_time.isoformat()}

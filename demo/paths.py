"""`make demo`'s paths: runs the main replay's random faults cannot be counted on to reach,
each replayed on purpose against the same served function, with its own exactly-once
verdict (SPEC §9, business runs):

- the autumn change for a daily 01:30 Europe/London job, with Scheduler firing the repeated
  01:30 once and twice, and the spring change (no 01:30 that day): one run per day;
- a job by the clock (`30 * * * *`) over the autumn change: both 01:30s run;
- a forced run ("Run now") of a job under each forcedRuns choice: `separate` (a run of its
  own, the scheduled run still runs), `replaceNext` (it is the next scheduled run, whose
  delivery is then a duplicate) and `refuse` (400, nothing runs);
- long store stalls: every first attempt's store replies held past the function's store
  deadline (its claims land, and it learns so late): each run still executes once.

Each path is one job replayed from a fixed start (the served function runs on the replay's
clock), so the dates are the same every time. A path is a PathSpec (demo.options), its
outcome a PathResult (demo.outcome).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

from demo.local_function import LocalFunction
from demo.options import DemoOptions, PathSpec
from demo.outcome import PathResult
from demo.replay import replay
from infra.config import DedupSettings, JobSettings, with_stack_defaults
from scheduler_emulator import Job, Stack, job_from_settings
from scheduler_emulator.faults import MANUAL, STORE_STALL, FaultPlan

AUTUMN_START = datetime(2026, 10, 24, 12, 0, tzinfo=UTC)  # 25 Oct: 01:30 happens twice
SPRING_START = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)  # 29 Mar: no 01:30
FORCED_START = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)
STALL_START = datetime(2026, 11, 3, 9, 30, tzinfo=UTC)


def _job(name: str, schedule: str, time_zone: str = "Etc/UTC", **choices: str) -> JobSettings:
    """A path's job, with its unset choices filled in as StackConfig fills them."""
    job = JobSettings.model_validate({
        "name": name, "schedule": schedule, "timeZone": time_zone, **choices,
        # Two retries, no duration bound (Scheduler retries until both are used up: a
        # refused forced run would otherwise be retried for the whole duration).
        "retry": {"retryCount": 2, "maxRetryDurationSeconds": 0, "minBackoffSeconds": 10,
                  "maxBackoffSeconds": 30},
        "body": {"path": name},
    })
    return job.model_copy(update=with_stack_defaults(job, DedupSettings()))


def path_specs(nonce: str = "") -> list[PathSpec]:
    """The paths; `nonce` ends every job name, so replays on a shared store (the fixed
    dates give the same run keys every time) never meet each other's records."""
    end = f"-{nonce}" if nonce else ""
    london = _job(f"dst-london-0130{end}", "30 1 * * *", "Europe/London")
    hourly = _job(f"dst-london-hourly{end}", "30 * * * *", "Europe/London")
    forced = [_job(f"forced-{choice.lower()}{end}", "0 * * * *", forcedRuns=choice)
              for choice in ("separate", "replaceNext", "refuse")]
    return [
        # 24, 25 (twice or once) and 26 October: three business days.
        PathSpec("autumn change, 01:30 Europe/London, Scheduler fires it twice", london,
                 AUTUMN_START, 4, 3, dst_fires="twice"),
        PathSpec("autumn change, 01:30 Europe/London, Scheduler fires it once", london,
                 AUTUMN_START, 3, 3, dst_fires="once"),
        PathSpec("spring change, 01:30 Europe/London (no 01:30 that day)", london,
                 SPRING_START, 3, 3),
        # 23:30 ... 02:30 UTC: 00:30 BST, 01:30 BST, 01:30 GMT, 02:30 GMT: by the clock.
        PathSpec("autumn change, 30 * * * * Europe/London (by the clock)", hourly,
                 datetime(2026, 10, 24, 23, 0, tzinfo=UTC), 4, 4),
        *(PathSpec(f"forced runs, forcedRuns {job.forced_runs}", job, FORCED_START, 3, 3,
                   FaultPlan.from_rates({MANUAL: 1.0}, seed=3)) for job in forced),
        PathSpec("long store stalls on every first attempt",
                 _job(f"store-stalls{end}", "0 * * * *"), STALL_START, 2, 2,
                 FaultPlan.from_rates({STORE_STALL: 1.0}, seed=5)),
    ]


def path_job(stack: Stack, job: JobSettings) -> Job:
    return job_from_settings(job, project=stack.project, region=stack.region,
                             name_prefix=stack.name_prefix)


def run_paths(
    function: LocalFunction,
    stack: Stack,
    options: DemoOptions,
    specs: Sequence[PathSpec] | None = None,
) -> list[PathResult]:
    """Replay each path against `function` (served for `stack`: same project, its own
    job IDs), each on its own clock from its fixed start."""
    results: list[PathResult] = []
    for spec in specs if specs is not None else path_specs(uuid.uuid4().hex[:6]):
        if spec.faults.store_faults and not function.timing.sized_for_faults:
            continue  # a function served without its store-fault proxy cannot stall
        path_stack = replace(stack, jobs=(path_job(stack, spec.job),))
        path_options = replace(options, ticks=spec.ticks, start=spec.start,
                               faults=spec.faults, watchdog=False, dst_fires=spec.dst_fires)
        results.append(PathResult(spec, replay(function, path_stack, path_options)))
    return results

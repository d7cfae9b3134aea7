"""After the silence: an extra run, delivered at a time no business run of the job has.

A second Scheduler job sends one job's headers (its httpTarget copied, the same job name
and X-Dedup-Schedule) on a schedule of its own: it fires once, a minute or more after the
job's next business run, at a time that is none of the job's runs. The function runs it
(executed once) and notes it in the job's ledger of runs beyond the schedule
(dedup/beyond.py). The job has `runsBeyondSchedule: page` in the demo's copy of the stack
(the demo sets it where the stack file does not). The watchdog's own code then ticks on
the demo's clock: it reports `unexplained_run` for that time and pages once (one
`incident_opened`, of its `beyond_schedule` streak); one more tick pages nothing again.
The job: a replayed one without catchUp, preferably neither the silence's nor the
backfill's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from dedup.beyond import BEYOND_OFF, BEYOND_PAGE, UNEXPLAINED_RUN
from dedup.settings import Settings
from dedup.watchdog.due import WatchedJob
from dedup.watchdog.incidents import BEYOND_SCHEDULE
from demo.local_function import LocalFunction
from demo.scene_ticks import (
    SceneTick,
    SceneWatchdog,
    answered,
    deliver_first_run,
    executions,
    last_replayed,
    next_runs,
    shown_executions,
    shown_when,
)
from demo.watch import watched_jobs_of
from scheduler_emulator.report import RunSummary
from scheduler_emulator.stack import Job, Stack

# The second Scheduler job fires this many minutes after the job's next run, at most.
MAX_MINUTES_AFTER = 4


@dataclass
class ExtraRunReport:
    job: str
    schedule: str = ""  # the job's own schedule and time zone
    second_schedule: str = ""  # the second Scheduler job's
    set_by_demo: bool = False  # runsBeyondSchedule: page set on the demo's copy
    at: datetime | None = None  # the extra run's schedule time
    answer: str = ""
    executions: int = 0
    first: SceneTick | None = None
    again: SceneTick | None = None
    error: str | None = None

    @property
    def unexplained(self) -> list[Any]:
        """The first tick's `unexplained_run` problems (the extra run's, if it worked)."""
        if self.first is None:
            return []
        return [p for p in self.first.problems if p.kind == UNEXPLAINED_RUN]

    @property
    def ok(self) -> bool:
        if self.error is not None or self.first is None or self.again is None:
            return False
        pages = self.first.pages
        return (self.executions == 1
                and [p.schedule_time for p in self.unexplained] == [self.at]
                and len(pages) == 1 and pages[0].get("incident_kind") == BEYOND_SCHEDULE
                and not self.again.pages
                and not any(p.kind == UNEXPLAINED_RUN for p in self.again.problems))

    def lines(self) -> list[str]:
        if self.error is not None:
            return [f"  extra run of {self.job}: FAIL: {self.error}"]
        assert self.first is not None and self.again is not None
        setting = ("set by the demo on its copy of the stack" if self.set_by_demo
                   else "the stack's own")
        found = self.unexplained
        lines = [
            f"  a second Scheduler job ({self.second_schedule}) sends {self.job}'s headers: "
            f"{self.job} @ {shown_when(self.at)}, no run of its schedule {self.schedule}: "
            f"{self.answer}, {shown_executions(self.executions)}",
            f"  {self.job} has runsBeyondSchedule: page ({setting}); the tick at "
            f"{shown_when(self.first.now)}: "
            + (", ".join(f"{p.kind} @ {shown_when(p.schedule_time)}" for p in found)
               or "NO unexplained_run")
            + f", {len(self.first.pages)} incident_opened"
            + (f" ({self.first.pages[0].get('incident_kind')})" if self.first.pages else ""),
            f"  the tick after it: {len(self.again.pages)} incident_opened",
            "  reported unexplained_run and paged once" if self.ok else
            "  FAIL: the extra run must be reported unexplained_run and page exactly once",
        ]
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job, "ok": self.ok, "error": self.error, "schedule": self.schedule,
            "second_schedule": self.second_schedule, "set_by_demo": self.set_by_demo,
            "schedule_time": shown_when(self.at), "answer": self.answer,
            "executions": self.executions,
            "unexplained_run": [shown_when(p.schedule_time) for p in self.unexplained],
            "first": self.first.to_json() if self.first else None,
            "again": self.again.to_json() if self.again else None,
        }



def paging(stack: Stack, job: Job, runtime_urls: dict[str, str]) -> tuple[WatchedJob, bool]:
    """The job as the watchdog's table lists it with `runsBeyondSchedule: page` (infra's
    own entry, from the demo's copy of the stack config if the job is in it), and whether
    the demo set it (the stack's own setting was not `page`)."""
    cfg = stack.config
    settings = next((j for j in cfg.jobs if j.name == job.name), None) if cfg else None
    if cfg is None or settings is None:
        watched = watched_jobs_of(stack, runtime_urls)[job.name]
        return replace(watched, runs_beyond_schedule=BEYOND_PAGE), True
    set_by_demo = settings.runs_beyond_schedule != BEYOND_PAGE
    paged = settings.model_copy(update={"runs_beyond_schedule": BEYOND_PAGE})
    copy = cfg.model_copy(update={"jobs": tuple(paged if j is settings else j
                                                for j in cfg.jobs)})
    return watched_jobs_of(replace(stack, config=copy), runtime_urls)[job.name], set_by_demo


def extra_time(job: WatchedJob, after: datetime, due: timedelta) -> datetime | None:
    """A whole minute after the job's next run that is none of its runs, early enough that
    a tick a minute later judges no run of the job (its next run is not due yet)."""
    runs = next_runs(job, after, 1)
    if not runs:
        return None
    following = runs[0]
    for minutes in range(1, MAX_MINUTES_AFTER + 1):
        at = following + timedelta(minutes=minutes)
        if at + timedelta(minutes=1) < following + due and not job.is_scheduled(at):
            return at
    return None


def run_extra_run(
    function: LocalFunction,
    stack: Stack,
    summaries: Sequence[RunSummary],
    store_settings: Settings,
    grace_seconds: float,
    *,
    avoid: Sequence[str] = (),
    ticked: Mapping[str, datetime] | None = None,
) -> ExtraRunReport | None:
    """The scene; None where no replayed job (without catchUp) has a free minute.
    `ticked`: per job, the last "now" an earlier scene ticked it at (the silence's): the
    extra run comes after it, outside the silence."""
    ticked = ticked or {}
    replayed = last_replayed(summaries)
    in_config = {job.name for job in stack.config.jobs} if stack.config else set()
    # Not the silence's job (avoid[0]), a job of the stack file, not the backfill's.
    candidates = sorted(
        (job for job in stack.active_jobs if job.name in replayed),
        key=lambda j: (j.name in avoid[:1], j.name not in in_config, j.name in avoid,
                       j.runtime is not None))
    for job in candidates:
        watched, set_by_demo = paging(stack, job, function.runtime_urls)
        if watched.catch_up or watched.runs_beyond_schedule == BEYOND_OFF:
            continue
        report = ExtraRunReport(job.name, f"'{job.schedule}' {job.time_zone}",
                                set_by_demo=set_by_demo)
        watchdog = SceneWatchdog(store_settings, function.firestore_host, watched,
                                 grace_seconds, function.stack.project)
        try:
            judged = max(watchdog.judged_through() or replayed[job.name],
                         ticked.get(job.name, replayed[job.name]))
            at = extra_time(watched, judged, timedelta(seconds=watchdog.due_seconds()))
            if at is None:
                continue
            report.at = at
            # Fires once a year, at `at`: the second job's one delivery in the scene.
            second = replace(job, schedule=f"{at.minute} {at.hour} {at.day} {at.month} *",
                             time_zone="Etc/UTC")
            report.second_schedule = f"'{second.schedule}' Etc/UTC"
            delivered = deliver_first_run(function, stack, second, at - timedelta(seconds=1))
            report.answer = answered(delivered)
            report.executions = executions(function, stack, job, at)
            report.first = watchdog.tick(at + timedelta(minutes=1), at)
            report.again = watchdog.tick(at + timedelta(minutes=1, seconds=1), at)
        except Exception as exc:  # reported, and the demo fails on it
            report.error = f"{type(exc).__name__}: {exc}"
        finally:
            watchdog.close()
        return report
    return None

"""What the silence and extra-run scenes (demo.silence, demo.extra_run) share: one job of
the stack ticked by the watchdog's own code (dedup.watchdog.tick.Watchdog) on the demo's
clock, with the lines it logged kept (an `incident_opened` line is what pages:
infra/monitoring.py); where the job's cursor stands (each scene plays after everything
the watchdog judged of its job: after the replay's window, and the backfill's); and one
run delivered by the Scheduler emulator at a time the scene chooses, against the served
function, on the replay's clock (X-Emulator-Now).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from dedup.keys import RunKey
from dedup.settings import Settings
from dedup.watchdog.due import WatchedJob, rfc3339
from dedup.watchdog.incidents import OPENED
from dedup.watchdog.outbox import Line
from dedup.watchdog.settings import WatchSettings
from dedup.watchdog.silences import FirestoreSilences, silences_collection
from dedup.watchdog.tick import Watchdog
from dedup.watchdog.verdicts import Problem
from demo.ledger import commits_by_run_id
from demo.local_function import LocalFunction
from demo.record_stores import RecordStores
from demo.watch import fixed_instant
from scheduler_emulator.emulator import SchedulerEmulator
from scheduler_emulator.oidc import scheduler_token
from scheduler_emulator.records import RunResult
from scheduler_emulator.report import RunSummary, answer_text
from scheduler_emulator.stack import Job, Stack


@dataclass
class SceneTick:
    """One watchdog tick of a scene: its "now", the problems it found, the lines it logged."""

    now: datetime
    problems: list[Problem]
    lines: list[Line] = field(default_factory=list)

    @property
    def pages(self) -> list[Line]:
        """Its `incident_opened` lines: each one pages."""
        return [line for line in self.lines if line.get("event") == OPENED]

    def to_json(self) -> dict[str, object]:
        return {"now": self.now.isoformat(), "problems": [p.to_json() for p in self.problems],
                "pages": len(self.pages)}


class SceneWatchdog:
    """The watchdog of one job, on the Firestore emulator directly (as demo.watch's), with
    the operator silences of `make silence` read at each tick. Close it."""

    def __init__(self, settings: Settings, firestore_host: str, job: WatchedJob,
                 grace_seconds: float, client_project: str | None = None) -> None:
        self.job = job
        self._settings = settings
        self._grace = grace_seconds
        self.records = RecordStores(settings, firestore_host, [job], client_project)
        self._cursors = WatchSettings(settings, (job,)).cursor_collection
        self._store = self.records.watch_store(self._cursors)
        self.silences = FirestoreSilences(self.records.runs,
                                          silences_collection(settings.collection))

    def judged_through(self) -> datetime | None:
        """Every run of the job scheduled at or before this is judged (its cursor)."""
        cursor = self._store.get_cursors([self.job.name]).get(self.job.name)
        return None if cursor is None else cursor.judged_through

    def tick(self, now: datetime, since: datetime) -> SceneTick:
        """One tick at `now`, looking back to `since` (before the scene's first run)."""
        settings = WatchSettings(self._settings, (self.job,),
                                 lookback_seconds=(now - since).total_seconds() + 3600,
                                 grace_seconds=self._grace)
        watchdog = Watchdog(settings, self._store, functools.partial(fixed_instant, now),
                            silences=self.silences)
        logged: list[Line] = []
        watchdog.announce = logged.extend
        result = watchdog.run_tick()
        return SceneTick(now, list(result.problems), logged)

    def due_seconds(self) -> float:
        """How long after its schedule time a run of the job is judged."""
        return self.job.retry_window_seconds + self._grace

    def close(self) -> None:
        self.records.close()


def next_runs(job: WatchedJob, after: datetime, count: int) -> list[datetime]:
    """The job's next `count` business runs after `after` (fewer if it has none within a
    year and more)."""
    span = timedelta(hours=1)
    while True:
        times = list(job.schedule_times(after, after + span))
        if len(times) >= count or span > timedelta(days=400):
            return times[:count]
        span *= 4


def deliver_first_run(function: LocalFunction, stack: Stack, job: Job,
                      after: datetime) -> RunResult:
    """Scheduler delivers `job`'s first run after `after` to the served function (or its
    runtime's), no fault injected, on the replay's clock; returns once it ended."""
    emulator = SchedulerEmulator(
        function.url, stack, jobs=[job], runtime_urls=function.runtime_urls,
        token=scheduler_token(function.url, function.stack.invoker_email),
        ticks=1, start=after, time_scale=function.scale, trace_deliveries=True,
    )
    [run] = emulator.run().runs
    return run


def answered(run: RunResult) -> str:
    """What the function answered the run's last attempt, e.g. `200 completed`."""
    return answer_text(run.deliveries[-1]) if run.deliveries else "not delivered"


def executions(function: LocalFunction, stack: Stack, job: Job, at: datetime) -> int:
    """The run's job logic commits in the ledger."""
    key = RunKey(stack.project, stack.region, job.job_id, at)
    return commits_by_run_id(function.ledger, stack.project)[key.run_id]


def last_replayed(summaries: Sequence[RunSummary]) -> dict[str, datetime]:
    """Per job, its last replayed business run's schedule time."""
    last: dict[str, datetime] = {}
    for s in summaries:
        if s.schedule_time is not None and not s.forced:
            last[s.job] = max(s.schedule_time, last.get(s.job, s.schedule_time))
    return last


def shown_when(instant: datetime | None) -> str:
    """An instant as the scenes' report shows it ("-": none)."""
    return rfc3339(instant) if instant is not None else "-"


def shown_executions(n: int) -> str:
    """How often a run executed, as the scenes' report says it (loud when not once)."""
    return {0: "never executed", 1: "executed once"}.get(n, f"EXECUTED {n} TIMES")

"""A run's verdict from its record, and the problems the watchdog reports.

Once a run's verdict is due (schedule time + retry window + grace <= now:
dedup/watchdog/due.py), its record says what became of it: no record -> `missed`;
`failed` -> `failed`; `completed` -> fine; `skipped` (its overlap policy held it off) ->
skipped, never missed; `in_progress` -> running, `overlong` once it has run longer than its
attempt deadline + grace. A run scheduled before the job's first recorded run is not judged
(the job did not exist yet). `classify_run` is that verdict, as a tick judges it and `make
runs` shows it; `Problem` is one reported problem, with its severity in PROBLEM_SEVERITY;
`JobTick` is a tick's verdicts on one job (its problems, its good runs, the missed runs set
aside for catch-up, the forced runs it saw: `ForcedRun`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dedup.beyond import TOO_MANY_FORCED_RUNS, UNEXPLAINED_RUN
from dedup.store import RunStatus, StoredRun
from dedup.watchdog.due import WatchedJob, rfc3339, verdict_due_at
from dedup.watchdog.ran_twice import RAN_TWICE

MISSED, FAILED, OVERLONG, NEVER_RAN = "missed", "failed", "overlong", "never_ran"
# A cursor, re-run request or run record the watchdog cannot read: refused, reported,
# never trusted (a run record's: that run is not judged).
MALFORMED = "malformed"
# Verdicts that are not problems (classify_run; shown by `make runs`).
FINE, NOT_DUE, RUNNING, BEFORE_FIRST_RUN = "ok", "not_due", "running", "before_first_run"
# overlap: forbid (or replace): the run did not run, by the job's choice, because another
# run of the job held a live claim; counted in the tick's `skipped`, never `missed`.
SKIPPED = "skipped"
PROBLEM_SEVERITY = {
    MISSED: "ERROR", FAILED: "ERROR", NEVER_RAN: "ERROR", OVERLONG: "WARNING",
    MALFORMED: "ERROR", RAN_TWICE: "ERROR",
    # Runs beyond the schedule (dedup.watchdog.beyond): they page only through an incident.
    UNEXPLAINED_RUN: "WARNING", TOO_MANY_FORCED_RUNS: "WARNING",
}


@dataclass(frozen=True)
class Problem:
    job: str
    schedule_time: datetime | None
    kind: str
    run_id: str | None = None
    attempts: int | None = None
    error: str | None = None
    running_seconds: float | None = None
    document: str | None = None  # a malformed document's path (collection/ID)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "job": self.job,
            "schedule_time": None if self.schedule_time is None else rfc3339(self.schedule_time),
            "kind": self.kind,
        }
        for name in ("run_id", "attempts", "error", "running_seconds", "document"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        return body


def running_seconds(schedule_time: datetime, stored: StoredRun, now: datetime) -> float:
    """How long an in-progress run has been running (since its claim, else its schedule)."""
    began = stored.record.claimed_at or schedule_time
    return (now - began).total_seconds()


def is_overlong(
    job: WatchedJob, schedule_time: datetime, stored: StoredRun, now: datetime,
    grace_seconds: float,
) -> bool:
    return running_seconds(schedule_time, stored, now) > (
        job.attempt_deadline_seconds + grace_seconds
    )


def classify_run(
    job: WatchedJob,
    schedule_time: datetime,
    stored: StoredRun | None,
    now: datetime,
    grace_seconds: float,
    first_run: datetime | None,
) -> str:
    """The watchdog's verdict on one run at `now`, as a tick judges it: `ok` (completed),
    `not_due` (still inside its retry window + grace), `before_first_run` (scheduled
    before the job's first recorded run), `skipped` (overlap: another run of the job held
    it off), `missed`, `failed`, `running` or `overlong` (in progress beyond its attempt
    deadline + grace)."""
    due = verdict_due_at(job, schedule_time, grace_seconds) <= now
    if due and (first_run is None or schedule_time < first_run):
        return BEFORE_FIRST_RUN
    if stored is not None and stored.record.status is RunStatus.COMPLETED:
        return FINE
    if stored is not None and (stored.record.status is RunStatus.SKIPPED or (
            stored.record.replaced_by is not None
            and stored.record.status is RunStatus.FAILED)):
        return SKIPPED  # final as soon as it is written: never missed, never caught up
    if not due:
        return NOT_DUE
    if stored is None:
        return MISSED
    if stored.record.status is RunStatus.FAILED:
        return FAILED
    return OVERLONG if is_overlong(job, schedule_time, stored, now, grace_seconds) else RUNNING


@dataclass(frozen=True)
class ForcedRun:
    """A forced run the tick saw: kept apart, or one that replaced the scheduled run."""

    job: str
    schedule_time: datetime  # the scheduled run's time it carries
    status: str  # its record's status
    replaced: bool  # forcedRuns replaceNext: it was the scheduled run, run early
    run_id: str

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "schedule_time": rfc3339(self.schedule_time),
                "status": self.status, "replaced_scheduled_run": self.replaced,
                "run_id": self.run_id}


@dataclass
class JobTick:
    checked: int = 0
    reads: int = 0
    skipped: int = 0  # runs the job's overlap policy skipped (not problems)
    problems: list[Problem] = field(default_factory=list)
    # Missed runs of a catchUp job, inside its bound: delivered before the cursor moves.
    to_catch_up: dict[str, datetime] = field(default_factory=dict)
    forced: list[ForcedRun] = field(default_factory=list)
    # Runs judged completed this tick (run_id -> schedule time): good runs for the streaks;
    # and runs already counted at an earlier tick (reported overlong), not counted again.
    good: dict[str, datetime] = field(default_factory=dict)
    counted: set[str] = field(default_factory=set)

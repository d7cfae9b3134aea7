"""Alert hygiene: one incident per streak of bad runs, not one page per problem line.

Per job the watchdog keeps one `Streak` per incident kind in the job's cursor document (its
own database, written in the same guarded write as the cursor), and advances it with the
runs each tick judged, in schedule order:

- `failing`: a run judged `missed`, `failed` or `overlong` is bad, a completed one good;
  `failureThreshold` consecutive bad runs open an incident, `recoveryThreshold`
  consecutive good runs close it (as Sentry Crons' failure_issue_threshold and
  recovery_threshold). A `never_ran` job opens it at once: no later run would count.
- `ran_twice`: a run whose record shows a second execution (dedup.watchdog.ran_twice) opens an
  incident at once (threshold 1, always); `recoveryThreshold` runs without one close it.
- `beyond_schedule`: a run beyond the schedule (`unexplained_run`, `too_many_forced_runs`:
  dedup.watchdog.beyond) of a job whose runsBeyondSchedule is `page` opens an incident at
  once; a tick that finds one counts no good run; `recoveryThreshold` good runs judged by
  ticks that find none close it.

Each open and each close is one `Transition`, logged as one `incident_opened` or
`incident_resolved` line (`event`), which the alert policies count (infra/monitoring.py):
one notification per streak, one when it recovers. Problem lines are still logged per run.

A transition is identified by its incident (a digest of job, kind and the schedule time of
the run that began the streak), the same however often a tick is retried.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final

from dedup.beyond import BEYOND_PROBLEMS

FAILING: Final = "failing"
RAN_TWICE: Final = "ran_twice"
# Runs beyond the schedule (dedup/watchdog/beyond.py) of a job whose runsBeyondSchedule is
# `page`: opened at once, closed as ran_twice is.
BEYOND_SCHEDULE: Final = "beyond_schedule"
INCIDENT_KINDS: Final = (FAILING, RAN_TWICE, BEYOND_SCHEDULE)
OPENED: Final = "incident_opened"
RESOLVED: Final = "incident_resolved"
DEFAULT_FAILURE_THRESHOLD: Final = 1
DEFAULT_RECOVERY_THRESHOLD: Final = 1
MAX_THRESHOLD: Final = 1000
"""Far beyond any sensible streak; the policy pack judges how long one takes to page."""


class MalformedStreak(ValueError):
    """A cursor's `incidents` field that is no streak state (the cursor is refused)."""


@dataclass(frozen=True)
class Thresholds:
    """How many consecutive bad runs open an incident, and good ones close it."""

    failure: int = DEFAULT_FAILURE_THRESHOLD
    recovery: int = DEFAULT_RECOVERY_THRESHOLD

    def __post_init__(self) -> None:
        for name, value in (("failure", self.failure), ("recovery", self.recovery)):
            if isinstance(value, bool) or not isinstance(value, int) or not (
                1 <= value <= MAX_THRESHOLD
            ):
                raise ValueError(f"{name} threshold {value!r} is not a whole number from 1 to "
                                 f"{MAX_THRESHOLD}")


@dataclass(frozen=True)
class Observation:
    """One judged run, as a streak counts it: bad or good (`opens`: a bad one that opens an
    incident whatever the threshold, e.g. never_ran)."""

    schedule_time: datetime | None
    bad: bool
    run_id: str | None = None
    problem: str | None = None  # the problem kind of a bad run (missed, failed, ...)
    opens: bool = False


@dataclass(frozen=True)
class Streak:
    """One incident kind of one job: open or not, and the current run of bad or good runs."""

    open: bool = False
    bad: int = 0  # consecutive bad runs, the last ones judged
    good: int = 0  # consecutive good runs, the last ones judged
    incident: str | None = None  # the open incident (or the streak that may open one)
    began: datetime | None = None  # schedule time of the streak's first bad run
    opened_at: datetime | None = None  # when the watchdog opened the incident

    def to_document(self) -> dict[str, Any]:
        return {"open": self.open, "bad": self.bad, "good": self.good,
                "incident": self.incident, "began": self.began, "opened_at": self.opened_at}

    @classmethod
    def from_document(cls, data: Any, where: str) -> Streak:
        if not isinstance(data, Mapping):
            raise MalformedStreak(f"{where} is not a map")
        is_open = data.get("open", False)
        if not isinstance(is_open, bool):
            raise MalformedStreak(f"{where}.open is not a bool")
        counts = {}
        for key in ("bad", "good"):
            value = data.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise MalformedStreak(f"{where}.{key} is not a count")
            counts[key] = value
        incident = data.get("incident")
        if incident is not None and not isinstance(incident, str):
            raise MalformedStreak(f"{where}.incident is not text")
        instants = {}
        for key in ("began", "opened_at"):
            value = data.get(key)
            if value is not None and not (isinstance(value, datetime) and value.tzinfo):
                raise MalformedStreak(f"{where}.{key} is not a timestamp")
            instants[key] = value
        if is_open and incident is None:
            raise MalformedStreak(f"{where} is open without an incident")
        return cls(is_open, counts["bad"], counts["good"], incident, instants["began"],
                   instants["opened_at"])


@dataclass(frozen=True)
class Transition:
    """An incident opened or resolved: one log line, the alert policies' signal."""

    job: str
    kind: str  # FAILING or RAN_TWICE
    event: str  # OPENED or RESOLVED
    incident: str
    threshold: int  # the failure threshold (opened) or recovery threshold (resolved)
    runs: int  # the bad (opened) or good (resolved) runs in a row that made it
    began: datetime | None  # schedule time of the streak's first bad run
    last: datetime | None  # schedule time of the run that made the transition
    run_id: str | None = None
    problem: str | None = None  # the last bad run's problem kind (opened)

    def to_json(self) -> dict[str, Any]:
        # `incident_kind`, never `kind`: the problem metric counts lines with a `kind`.
        body: dict[str, Any] = {
            "job": self.job, "event": self.event, "incident_kind": self.kind,
            "incident": self.incident, "threshold": self.threshold, "runs": self.runs,
            "began": _rfc3339(self.began), "schedule_time": _rfc3339(self.last),
        }
        if self.run_id is not None:
            body["run_id"] = self.run_id
        if self.problem is not None:
            body["problem"] = self.problem
        return body

    @property
    def message(self) -> str:
        verb = "opened" if self.event == OPENED else "resolved"
        return (f"watchdog incident {verb}: {self.job} {self.kind} after {self.runs} "
                f"{'bad' if self.event == OPENED else 'good'} run(s) in a row")


def incident_id(job: str, kind: str, began: datetime | None) -> str:
    """The same for every tick that sees the same streak begin (retries, overlaps)."""
    text = f"{job}|{kind}|{_rfc3339(began) or '-'}"
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def advance(
    job: str, kind: str, streak: Streak, observed: Iterable[Observation],
    thresholds: Thresholds, now: datetime,
) -> tuple[Streak, list[Transition]]:
    """The streak after `observed` (in the order judged), and the transitions it made."""
    transitions: list[Transition] = []
    for seen in observed:
        if seen.bad:
            # An open incident keeps the streak it began with (its id names that run).
            began = streak.began if streak.bad or streak.open else seen.schedule_time
            streak = replace(streak, bad=streak.bad + 1, good=0, began=began)
            if not streak.open and (seen.opens or streak.bad >= thresholds.failure):
                incident = incident_id(job, kind, streak.began)
                streak = replace(streak, open=True, incident=incident, opened_at=now)
                transitions.append(Transition(
                    job, kind, OPENED, incident, thresholds.failure, streak.bad,
                    streak.began, seen.schedule_time, seen.run_id, seen.problem,
                ))
        else:
            streak = replace(streak, good=streak.good + 1, bad=0)
            if streak.open and streak.good >= thresholds.recovery:
                assert streak.incident is not None
                transitions.append(Transition(
                    job, kind, RESOLVED, streak.incident, thresholds.recovery, streak.good,
                    streak.began, seen.schedule_time, seen.run_id,
                ))
                streak = Streak(good=streak.good)
            elif not streak.open:
                streak = replace(streak, began=None)
    return streak, transitions


def streaks_from_document(data: Any) -> dict[str, Streak]:
    """A cursor's `incidents` field; MalformedStreak if it is none."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise MalformedStreak("incidents is not a map")
    unknown = sorted(str(k) for k in data if k not in INCIDENT_KINDS)
    if unknown:
        raise MalformedStreak(f"incidents has unknown kinds {unknown[:3]}")
    return {str(k): Streak.from_document(v, f"incidents.{k}") for k, v in data.items()}


def _rfc3339(instant: datetime | None) -> str | None:
    return None if instant is None else instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# Problem kinds (dedup.watchdog.verdicts) that make a run bad for the `failing` streak; `never_ran`
# opens the incident at once (the job has no run to count).
FAILING_PROBLEMS: Final = frozenset({"missed", "failed", "overlong"})
OPENS_AT_ONCE: Final = frozenset({"never_ran"})


def judge_streaks(
    job: str,
    thresholds: Thresholds,
    streaks: Mapping[str, Streak],
    problems: Iterable[tuple[datetime | None, str | None, str]],
    good: Mapping[str, datetime],
    now: datetime,
) -> tuple[dict[str, Streak], list[Transition]]:
    """Advance the job's streaks with one tick's verdicts: `problems` as (schedule time,
    run_id, kind), `good` the runs judged completed (run_id -> schedule time). Each run is
    counted once, in schedule order (a job's `never_ran` first)."""
    problems = list(problems)
    twice = {run_id for _, run_id, kind in problems if kind == RAN_TWICE}
    failing = [
        Observation(t, True, r, kind, opens=kind in OPENS_AT_ONCE) for t, r, kind in problems
        if kind in FAILING_PROBLEMS | OPENS_AT_ONCE
    ] + [Observation(t, False, r) for r, t in good.items()]
    doubled = [Observation(t, True, r, RAN_TWICE) for t, r, kind in problems
               if kind == RAN_TWICE] + [
        Observation(t, False, r) for r, t in good.items() if r not in twice]
    # Runs beyond the schedule come between the business runs (a second Scheduler job's
    # times): a tick that found one counts no good run, so the incident stays open (one
    # page) while they go on, and closes after recoveryThreshold good runs without one.
    # Only a job that has had one keeps this streak (older watchdogs refuse a cursor with
    # a streak kind they do not know: most jobs never have it).
    beyond = [Observation(t, True, r, kind) for t, r, kind in problems
              if kind in BEYOND_PROBLEMS]
    if not beyond and BEYOND_SCHEDULE in streaks:
        beyond = [Observation(t, False, r) for r, t in good.items()]
    ran_twice_thresholds = Thresholds(1, thresholds.recovery)  # always pages
    result: dict[str, Streak] = {}
    transitions: list[Transition] = []
    for kind, observed, limits in ((FAILING, failing, thresholds),
                                   (RAN_TWICE, doubled, ran_twice_thresholds),
                                   (BEYOND_SCHEDULE, beyond, ran_twice_thresholds)):
        observed.sort(key=_in_schedule_order)
        streak, made = advance(job, kind, streaks.get(kind, Streak()), observed, limits, now)
        transitions += made
        if streak != Streak():
            result[kind] = streak
    return result, transitions


def _in_schedule_order(seen: Observation) -> tuple[bool, datetime]:
    return (seen.schedule_time is not None,
            seen.schedule_time or datetime.min.replace(tzinfo=UTC))

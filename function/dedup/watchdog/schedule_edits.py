"""Schedule edits judged right: each run judged by the schedule in force at its time.

The watchdog's job table holds a job's schedule as deployed now; the runs before an edit
(a new cron, time zone or DST choice, deployed by `pulumi up`) were Scheduler's under the
old one. So each job's cursor remembers the schedules it judged the job by
(`ScheduleHistory`): the one it judges by now, since when, when a tick last saw it in the
table, and the ones before it with their instants. A tick that finds the table's schedule
changed records the edit: the old schedule judges the runs up to the tick that first saw
the new one (E), the new one the runs after the last tick that saw the old one (A).

Between A and E, Scheduler switched at an instant the watchdog cannot see (the Scheduler
job and the watchdog's table are updated by the same deploy, in some order, between two
ticks): the runs of both schedules in that window are read, and their records tell where
the switch was. A run only the old schedule has, with no record, is `missed` if a later
run only the old schedule has ran (the old schedule was still in force); one only the new
schedule has, if an earlier or same-time run only the new schedule has ran. A run of the
window with no record and no such evidence is not judged (neither missed nor caught up); a
run both schedules have is judged as ever. Catch-up delivers only runs of the schedule the
table holds (dedup/watchdog/catch_up.py): an old schedule's missed run is reported, never
delivered under the new one's headers. The function keys each delivery by the schedule it
carries (X-Dedup-Schedule, dedup.keys), so a run of either schedule has the run ID the
watchdog reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from itertools import pairwise
from typing import Any

from dedup.watchdog.due import WatchedJob


def schedule_key(job: WatchedJob) -> str:
    """What makes a job's business runs: its cron, time zone and DST choices."""
    return json.dumps([job.schedule, job.time_zone, job.dst_repeated, job.dst_skipped])


def under(job: WatchedJob, key: str) -> WatchedJob:
    """The job as it was under the schedule `key`."""
    schedule, time_zone, repeated, skipped = json.loads(key)
    return replace(job, schedule=schedule, time_zone=time_zone, dst_repeated=repeated,
                   dst_skipped=skipped)


@dataclass(frozen=True)
class PastSchedule:
    """A schedule the job had: it judged the runs after `since` (None: from the start) up
    to `until` (the tick that first saw the next one)."""

    key: str
    since: datetime | None
    until: datetime

    def to_document(self) -> dict[str, Any]:
        return {"key": self.key, "since": self.since, "until": self.until}


@dataclass
class ScheduleHistory:
    """The schedules a job's cursor judged it by (stored in the cursor as `schedules`)."""

    key: str | None = None  # the one it judges by now (None: not recorded yet)
    since: datetime | None = None  # the last tick that saw the one before (A)
    seen_at: datetime | None = None  # the last tick that saw this one in the table
    past: list[PastSchedule] = field(default_factory=list)

    def to_document(self) -> dict[str, Any]:
        return {"key": self.key, "since": self.since, "seen_at": self.seen_at,
                "past": [p.to_document() for p in self.past]}

    @classmethod
    def from_document(cls, data: Any) -> ScheduleHistory:
        """ValueError naming what is wrong if `data` is none (the cursor is refused)."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ValueError("schedules is not a map")
        key = data.get("key")
        if key is not None and not _is_key(key):
            raise ValueError("schedules.key is not a schedule")
        since, seen_at = (_instant(data.get(k), f"schedules.{k}") for k in ("since", "seen_at"))
        raw = data.get("past") or []
        if not isinstance(raw, list):
            raise ValueError("schedules.past is not a list")
        past = []
        for i, item in enumerate(raw):
            if not isinstance(item, Mapping) or not _is_key(item.get("key")):
                raise ValueError(f"schedules.past[{i}] is no past schedule")
            until = _instant(item.get("until"), f"schedules.past[{i}].until")
            if until is None:
                raise ValueError(f"schedules.past[{i}].until is missing")
            past.append(PastSchedule(item["key"], _instant(item.get("since"),
                                                           f"schedules.past[{i}].since"), until))
        return cls(key, since, seen_at, past)


def _is_key(value: Any) -> bool:
    try:
        parts = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return False
    return isinstance(parts, list) and len(parts) == 4 and isinstance(parts[0], str)


def _instant(value: Any, where: str) -> datetime | None:
    if value is not None and not (isinstance(value, datetime) and value.tzinfo):
        raise ValueError(f"{where} is not a timestamp")
    return value


def note_table(job: WatchedJob, history: ScheduleHistory, now: datetime,
               forget_before: datetime) -> None:
    """Record what the table holds at this tick: an edit if it changed since the last."""
    key = schedule_key(job)
    if history.key is not None and history.key != key:
        history.past.append(PastSchedule(history.key, history.since, now))
        history.since = history.seen_at or now
    history.key = key
    history.seen_at = now
    # A past schedule whose runs are all before the lookback judges nothing any more.
    history.past = [p for p in history.past if p.until >= forget_before]


def _segments(job: WatchedJob, history: ScheduleHistory
              ) -> Iterator[tuple[WatchedJob, datetime | None, datetime | None]]:
    """Each schedule with the runs it judges: (the job under it, after, up to)."""
    for past in history.past:
        yield under(job, past.key), past.since, past.until
    yield job, history.since, None


def _within(t: datetime, since: datetime | None, until: datetime | None) -> bool:
    return (since is None or t > since) and (until is None or t <= until)


def due_times(job: WatchedJob, history: ScheduleHistory, start: datetime,
              horizon: datetime) -> list[datetime]:
    """The runs whose verdict falls due in (start, horizon], each by the schedule in force
    at its time (both schedules' in an edit's window)."""
    if horizon <= start:
        return []
    if not history.past:  # no edit: the table's schedule (the common case, unchanged)
        return list(job.schedule_times(start, horizon))
    times: set[datetime] = set()
    for schedule, since, until in _segments(job, history):
        times.update(t for t in schedule.schedule_times(start, horizon)
                     if _within(t, since, until))
    return sorted(times)


@dataclass(frozen=True)
class EditWindow:
    """The runs of an edit's window (A, E]: only the old schedule's, only the new one's."""

    old_only: frozenset[datetime]
    new_only: frozenset[datetime]


def edit_windows(job: WatchedJob, history: ScheduleHistory, start: datetime
                 ) -> list[EditWindow]:
    """The windows of the job's edits not all judged yet (ending after `start`), whole:
    a run judged earlier may be the evidence for one judged now."""
    segments = list(_segments(job, history))
    windows = []
    for (old, _, until), (new, since, _) in pairwise(segments):
        if until is None or since is None or until <= start or since >= until:
            continue
        old_times = set(old.schedule_times(since, until))
        new_times = set(new.schedule_times(since, until))
        windows.append(EditWindow(frozenset(old_times - new_times),
                                  frozenset(new_times - old_times)))
    return windows


def unsure(t: datetime, windows: list[EditWindow], recorded: set[datetime]) -> bool:
    """Whether a run with no record at `t` may simply not have been in force: in an edit's
    window, with no record of that window saying its schedule still (or already) was."""
    for window in windows:
        if t in window.old_only:
            last_old = max((r for r in window.old_only if r in recorded), default=None)
            return last_old is None or t > last_old
        if t in window.new_only:
            first_new = min((r for r in window.new_only if r in recorded), default=None)
            return first_new is None or t < first_new
    return False

"""Business runs: one run per scheduled local time of a job (SPEC §9), whatever Cloud
Scheduler does when the clocks change.

A cron names local wall times; X-CloudScheduler-ScheduleTime names an instant. The two part
twice a year in a zone with daylight saving time: in autumn a local time happens twice, in
spring one does not happen at all. Scheduler documents neither case, so the kit decides, per
job (a stack default, then the job's own):

- `dstRepeated`: `once` (one run: a delivery for either instant is that run, the second a
  duplicate) or `each` (each instant is a run of its own);
- `dstSkipped`: `shift` (the run is due at the change: the first instant after the missing
  hour, keyed by an instant no other run of the job uses) or `skip` (no run that day).

Unset, both follow BSD cron's `-s` (FreeBSD cron(8); in the code, jobs "with a wildcard in
the minute or hour field"): a job whose minute or hour field starts with `*` runs by the
clock (`each`, `skip`: `30 * * * *` runs in both 01:30s and not in the missing hour); a job
at fixed times runs once, neither skipped nor doubled (`once`, `shift`).

The function and the proxy key each delivery by `BusinessSchedule.run_named`; the watchdog,
`make runs`, `make rerun`, the Scheduler emulator's report and the demo expect
`BusinessSchedule.runs`: one implementation, so none of them can disagree.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo

from croniter import croniter

ONCE: Final = "once"
EACH: Final = "each"
SHIFT: Final = "shift"
SKIP: Final = "skip"
DST_REPEATED: Final = (ONCE, EACH)
DST_SKIPPED: Final = (SHIFT, SKIP)
# Wider than any offset change in the tz database (1 h; 2 h at Antarctica/Troll): a window
# this much wider on each side holds every local time that can name an instant inside it.
_MARGIN: Final = timedelta(hours=3)
_STEADY_STEP: Final = timedelta(hours=12)


def runs_by_the_clock(schedule: str) -> bool:
    """BSD cron's "wildcard" job: its minute or hour field starts with `*` (`*`, `*/15`)."""
    minute, hour = [*schedule.split(), "", ""][:2]
    return minute.startswith("*") or hour.startswith("*")


def default_dst(schedule: str) -> tuple[str, str]:
    """(dstRepeated, dstSkipped) as BSD cron's `-s` treats the schedule."""
    return (EACH, SKIP) if runs_by_the_clock(schedule) else (ONCE, SHIFT)


@dataclass(frozen=True)
class BusinessRun:
    """One scheduled local time of a job, as the kit runs it."""

    key_time: datetime
    """UTC: the schedule time of the run's key (its run_id), and what the watchdog sends
    when it delivers the run. No other run of the job is named by it."""
    local: datetime
    """Its local wall time (naive): what the team scheduled."""
    deliveries: tuple[datetime, ...]
    """UTC: every X-CloudScheduler-ScheduleTime that names this run, key_time first."""
    due: datetime
    """UTC: the first instant it is due (a shifted run: the change)."""

    @property
    def latest(self) -> datetime:
        """The last instant Scheduler might deliver it at: its verdict waits for this."""
        return max(self.deliveries)


@dataclass(frozen=True)
class SkippedTime:
    """A local time the zone skipped, under `dstSkipped: skip`: a delivery naming it runs
    nothing (answered 200)."""

    local: datetime
    deliveries: tuple[datetime, ...]
    due: datetime  # the change that skipped it


@dataclass(frozen=True)
class BusinessSchedule:
    """A job's schedule, time zone and DST choices (None: as BSD cron's `-s`)."""

    schedule: str
    time_zone: str = "Etc/UTC"
    dst_repeated: str | None = None
    dst_skipped: str | None = None
    zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.dst_repeated not in (None, *DST_REPEATED):
            raise ValueError(f"dstRepeated {self.dst_repeated!r} is not one of "
                             f"{', '.join(DST_REPEATED)}")
        if self.dst_skipped not in (None, *DST_SKIPPED):
            raise ValueError(f"dstSkipped {self.dst_skipped!r} is not one of "
                             f"{', '.join(DST_SKIPPED)}")
        if not croniter.is_valid(self.schedule) or len(self.schedule.split()) != 5:
            raise ValueError(f"schedule {self.schedule!r} is not a 5-field unix-cron expression")
        object.__setattr__(self, "zone", ZoneInfo(self.time_zone))

    @property
    def repeated(self) -> str:
        return self.dst_repeated or default_dst(self.schedule)[0]

    @property
    def skipped(self) -> str:
        return self.dst_skipped or default_dst(self.schedule)[1]

    def runs(self, after: datetime, until: datetime) -> Iterator[BusinessRun]:
        """The runs whose latest delivery lies in (after, until], in that order: a run is
        judged once Scheduler can no longer deliver it."""
        after, until = after.astimezone(UTC), until.astimezone(UTC)
        if _steady(self.zone, after - _MARGIN, until + _MARGIN):
            # No offset change near: every local time is one instant (the common case, and
            # the cheap one: no margin to walk).
            for named in self._named(after, until):
                if isinstance(named, BusinessRun) and after < named.latest <= until:
                    yield named
            return
        for run in self._window(after, until):
            if after < run.latest <= until:
                yield run

    def run_named(self, instant: datetime) -> BusinessRun | SkippedTime | None:
        """The run a delivery for `instant` (UTC) is; None: the instant names no scheduled
        local time (a manual POST, a schedule changed since), so it is a run of its own."""
        # In UTC: arithmetic on a zoned datetime is wall-clock arithmetic, and two zoned
        # instants of a repeated local time compare equal within their zone.
        instant = instant.astimezone(UTC)
        if _steady(self.zone, instant - _MARGIN, instant + _MARGIN):
            return None  # no offset change near it: the instant is its own run, as ever
        for named in _named_near(self, instant.replace(minute=0, second=0, microsecond=0)):
            if instant in named.deliveries:
                return named
        return None

    def key_time(self, instant: datetime) -> datetime:
        """The key time of the run `instant` names (itself when it names none)."""
        named = self.run_named(instant)
        return named.key_time if isinstance(named, BusinessRun) else instant

    def latest_delivery(self, key_time: datetime) -> datetime:
        """The latest delivery of the run keyed by `key_time` (itself when steady)."""
        named = self.run_named(key_time)
        return named.latest if isinstance(named, BusinessRun) else key_time

    def _window(self, after: datetime, until: datetime) -> list[BusinessRun]:
        return [n for n in self._named(after - _MARGIN, until + _MARGIN)
                if isinstance(n, BusinessRun)]

    def _named(self, start: datetime, end: datetime) -> list[BusinessRun | SkippedTime]:
        """Every scheduled local time between the local times of `start` and `end`, as a
        run (or a skipped time), each with the instants that name it; sorted by due."""
        zone = self.zone
        local = copy.copy(_parsed_cron(self.schedule))
        local.set_current(_wall(start, zone) - timedelta(seconds=1), force=True)
        last = _wall(end, zone)
        plain: list[BusinessRun] = []
        gaps: list[datetime] = []
        while (wall := local.get_next(datetime)) <= last:
            first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
            second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
            if first == second:
                plain.append(BusinessRun(first, wall, (first,), first))
            elif _wall(first, zone) != wall:
                gaps.append(wall)  # the zone skips it: judged once every real run is known
            elif self.repeated == ONCE:
                plain.append(BusinessRun(first, wall, (first, second), first))
            else:
                plain.append(BusinessRun(first, wall, (first,), first))
                plain.append(BusinessRun(second, wall, (second,), second))
        named: list[BusinessRun | SkippedTime] = list(plain)
        claimed = {instant for run in plain for instant in run.deliveries}
        for wall in gaps:
            change = _change_after(zone, wall)
            # The instants a scheduler might send for it: the change, then the wall time
            # read with the offset after and before it; never one another run already has.
            candidates = [change, wall.replace(tzinfo=zone, fold=1).astimezone(UTC),
                          wall.replace(tzinfo=zone, fold=0).astimezone(UTC)]
            free = tuple(dict.fromkeys(i for i in candidates if i not in claimed))
            claimed.update(free)
            if self.skipped == SKIP or not free:
                # (no free instant: every reading of it is another run's: skipped too)
                named.append(SkippedTime(wall, free, change))
            else:
                named.append(BusinessRun(free[0], wall, free, change))
        named.sort(key=lambda n: (n.due, n.local))
        return named


@functools.lru_cache(maxsize=8192)
def _parsed_cron(schedule: str) -> croniter:
    """The schedule parsed once (parsing was a third of a 5,000-job watchdog tick)."""
    return croniter(schedule, datetime(2000, 1, 1))


@functools.lru_cache(maxsize=256)
def _named_near(
    schedule: BusinessSchedule, hour: datetime
) -> tuple[BusinessRun | SkippedTime, ...]:
    """The local times that can name an instant of this hour (cached: the deliveries near
    a change ask for the same hours)."""
    return tuple(schedule._named(hour - _MARGIN, hour + timedelta(hours=1) + _MARGIN))


def _wall(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def _steady(zone: ZoneInfo, start: datetime, end: datetime) -> bool:
    """No offset change between `start` and `end`: the offset read every 12 hours (no zone
    changes twice within that; Morocco's Ramadan changes are weeks apart) never differs."""
    first = start.astimezone(zone).utcoffset()
    at = start
    while at < end:
        at = min(at + _STEADY_STEP, end)
        if at.astimezone(zone).utcoffset() != first:
            return False
    return True


def _change_after(zone: ZoneInfo, wall: datetime) -> datetime:
    """The instant of the offset change that skips the local time `wall`: the first
    instant after the missing interval (found to the second)."""
    return _change_between(zone, wall.replace(tzinfo=zone, fold=1).astimezone(UTC),
                           wall.replace(tzinfo=zone, fold=0).astimezone(UTC))


@functools.lru_cache(maxsize=1024)
def _change_between(zone: ZoneInfo, low: datetime, high: datetime) -> datetime:
    before = low.astimezone(zone).utcoffset()
    lo, hi = int(low.timestamp()), int(high.timestamp())
    while hi - lo > 1:
        middle = (lo + hi) // 2
        if datetime.fromtimestamp(middle, UTC).astimezone(zone).utcoffset() == before:
            lo = middle
        else:
            hi = middle
    return datetime.fromtimestamp(hi, UTC)


@functools.lru_cache(maxsize=4096)
def business_schedule(
    schedule: str, time_zone: str, dst_repeated: str | None = None,
    dst_skipped: str | None = None,
) -> BusinessSchedule:
    """One BusinessSchedule per distinct job (the function builds one per delivery)."""
    return BusinessSchedule(schedule, time_zone, dst_repeated, dst_skipped)

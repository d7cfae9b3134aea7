"""Cloud Scheduler's documented rules, as pure functions.

One implementation shared by the stack-config validation (infra/config/), the policy
pack (policies/) and the local Scheduler emulator, so the three never disagree about what
Scheduler accepts, how it retries, or which DST changes a schedule runs into (`dst_hazards`).
No Pulumi imports here: this module must load in the policy pack's and the emulator's
processes too.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from itertools import groupby, islice, pairwise
from typing import Final, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import croniter

# HTTP targets: attemptDeadline between 15 seconds and 30 minutes (default 3 minutes).
ATTEMPT_DEADLINE_MIN_SECONDS = 15
ATTEMPT_DEADLINE_MAX_SECONDS = 1800
ATTEMPT_DEADLINE_DEFAULT_SECONDS = 180
# App Engine HTTP targets: attemptDeadline between 15 seconds and 24 hours (Job.attemptDeadline,
# https://cloud.google.com/scheduler/docs/reference/rest/v1/projects.locations.jobs).
APP_ENGINE_ATTEMPT_DEADLINE_MAX_SECONDS = 24 * 3600
RETRY_COUNT_MAX = 5
# Scheduler's RetryConfig defaults.
MIN_BACKOFF_DEFAULT_SECONDS = 5
MAX_BACKOFF_DEFAULT_SECONDS = 3600
MAX_DOUBLINGS_DEFAULT = 5
# maxRetryDuration, minBackoffDuration and maxBackoffDuration are google.protobuf.Duration
# values ("a duration in seconds ... ending with 's'"; 0 maxRetryDuration = unlimited).
# Scheduler documents no bound of its own beyond the type's: a Duration's seconds must lie
# within +-315,576,000,000 (10,000 years); the API refuses anything outside.
DURATION_MAX_SECONDS = 315_576_000_000
# maxDoublings is an int32 with no documented upper bound.
MAX_DOUBLINGS_MAX = 2**31 - 1
# A job ID: letters, digits, hyphens and underscores, at most 500 characters.
JOB_ID_MAX_LENGTH = 500


class ScheduleError(ValueError):
    """A schedule or time zone that Cloud Scheduler (or the dedup key) cannot use."""


def duration_string(seconds: float) -> str:
    """A google.protobuf.Duration in whole seconds, as the API takes it: 1000000 ->
    "1000000s" (never "1e+06s", which Scheduler refuses). Raises ValueError for a value
    that is not a whole number of seconds within 0..DURATION_MAX_SECONDS."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValueError(f"duration {seconds!r} is not a number of seconds")
    if isinstance(seconds, float):
        if not seconds.is_integer():
            raise ValueError(f"duration {seconds!r} s is not a whole number of seconds")
        seconds = int(seconds)
    if not 0 <= seconds <= DURATION_MAX_SECONDS:
        raise ValueError(
            f"duration {seconds} s is outside 0..{DURATION_MAX_SECONDS} s "
            "(google.protobuf.Duration's range)"
        )
    return f"{seconds}s"


def validate_cron(schedule: str) -> None:
    """Accept only a 5-field unix-cron expression.

    The schedule-time header is reliable only for unix-cron schedules, so the legacy
    App Engine "every 5 minutes" (groc) form and croniter's 6/7-field extensions are
    rejected here; croniter judges the fields themselves.
    """
    fields = schedule.split()
    if len(fields) != 5:
        raise ScheduleError(
            f"schedule {schedule!r} is not a 5-field unix-cron expression "
            "(minute hour day-of-month month day-of-week), e.g. '*/5 * * * *'"
        )
    if not _croniter_accepts(schedule):
        raise ScheduleError(
            f"schedule {schedule!r} is not valid unix-cron: check each of the 5 fields "
            "(minute 0-59, hour 0-23, day-of-month 1-31, month 1-12, day-of-week 0-6)"
        )


@functools.lru_cache(maxsize=4096)
def _croniter_accepts(schedule: str) -> bool:
    # A plan judges each job's schedule three or four times (the config, the program's own
    # config, the DST advisory), and jobs share schedules: croniter expands it only once.
    return bool(croniter.is_valid(schedule))


@functools.cache
def _iana_zones() -> frozenset[str]:
    return frozenset(available_timezones())  # reads the zone database: do it once


def validate_time_zone(time_zone: str) -> ZoneInfo:
    """Return the IANA zone, or raise naming the bad value."""
    if time_zone not in _iana_zones():
        raise ScheduleError(
            f"time zone {time_zone!r} is not an IANA time zone name, e.g. 'Etc/UTC' "
            "or 'Europe/Berlin'"
        )
    try:
        return ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError) as exc:  # pragma: no cover - listed zones load
        raise ScheduleError(f"time zone {time_zone!r} cannot be loaded: {exc}") from exc


def schedule_times(schedule: str, time_zone: str, after: datetime) -> Iterator[datetime]:
    """Yield the scheduled instants strictly after `after`, aware, in `time_zone`."""
    validate_cron(schedule)
    zone = validate_time_zone(time_zone)
    it = croniter(schedule, after.astimezone(zone))
    while True:
        yield it.get_next(datetime)


def schedule_period_seconds(schedule: str, time_zone: str, fallback: int = 84600) -> int:
    """The longest gap between two runs of `schedule` over a sample of its next 200 runs
    from 2026-01-01; `fallback` when the sample has fewer than two runs."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    times = list(islice(schedule_times(schedule, time_zone, start), 200))
    gaps = [(b - a).total_seconds() for a, b in pairwise(times)]
    return int(max(gaps)) if gaps else fallback


@dataclass(frozen=True)
class RetrySettings:
    """A job's retryConfig, in seconds (0 max retry duration means unlimited)."""

    retry_count: int = 0
    max_retry_duration_seconds: float = 0
    min_backoff_seconds: float = MIN_BACKOFF_DEFAULT_SECONDS
    max_backoff_seconds: float = MAX_BACKOFF_DEFAULT_SECONDS
    max_doublings: int = MAX_DOUBLINGS_DEFAULT


def backoff_seconds(retry: RetrySettings, retry_index: int) -> float:
    """Wait before retry number `retry_index` (0-based).

    The wait starts at the minimum, doubles `max_doublings` times, then grows linearly by
    2^max_doublings x minimum, capped at the maximum: 10 s / 300 s / 3 doublings gives
    10, 20, 40, 80, 160, 240, 300, 300.
    """
    if retry_index < 0:
        raise ValueError("retry_index must be >= 0")
    doublings = retry.max_doublings
    if retry_index <= doublings:
        wait = retry.min_backoff_seconds * 2**retry_index
    else:
        step = retry.min_backoff_seconds * 2**doublings
        wait = step + (retry_index - doublings) * step
    return float(min(wait, retry.max_backoff_seconds))


def retry_window_seconds(attempt_deadline_seconds: float, retry: RetrySettings) -> float:
    """Longest time from a run's first attempt to the end of its last one.

    Scheduler retries until both `retryCount` and `maxRetryDuration` are reached, so the
    window is the larger of the two bounds. Dedup records must outlive it, or a late retry
    would find no record and run the job again.
    """
    count_bound = (retry.retry_count + 1) * attempt_deadline_seconds + sum(
        backoff_seconds(retry, i) for i in range(retry.retry_count)
    )
    duration_bound = (
        retry.max_retry_duration_seconds + attempt_deadline_seconds
        if retry.max_retry_duration_seconds > 0
        else 0.0
    )
    return max(count_bound, duration_bound)


def fast_failure_retry_span_seconds(retry: RetrySettings) -> float:
    """How long Scheduler keeps retrying a run when every attempt fails at once.

    Measured from the first attempt: the sum of the backoffs of `retryCount` retries, or
    `maxRetryDuration` if that is longer (Scheduler retries until both limits are reached);
    0 when the job has no retries. A dedup claim whose instance crashed mid-job answers 409
    at once until its lease lapses, so a retry can take such a run over only if this span
    is at least the lease; a shorter span skips the crashed run.
    """
    backoffs = sum(backoff_seconds(retry, i) for i in range(retry.retry_count))
    return float(max(backoffs, retry.max_retry_duration_seconds))


def retry_duration_to_recover_seconds(
    attempt_deadline_seconds: float, lease_seconds: float, retry: RetrySettings
) -> float:
    """The maxRetryDuration that makes sure a retry comes once a crashed attempt's lease has
    lapsed, so the run is taken over rather than skipped; 0 if retryCount alone does.

    The first attempt's instance may crash as late as its deadline; its claim answers 409
    until `lease_seconds` later, and the retries after it, answered at once, come at the
    job's backoffs. The duration (measured from the first attempt) must reach the first
    of those retries that falls at or after the lease, unless it is within retryCount.
    """
    if retry.min_backoff_seconds <= 0 or retry.max_backoff_seconds <= 0:
        # No backoff: the counted retries all come at once, only the duration reaches on.
        return float(attempt_deadline_seconds + lease_seconds)
    waited, retries = 0.0, 0
    while waited < lease_seconds:
        waited += backoff_seconds(retry, retries)
        retries += 1
    return 0.0 if retries <= retry.retry_count else float(attempt_deadline_seconds + waited)


# A claim's lease is a liveness window: the heartbeat renews it every lease/3 while the job
# runs (from the last renewal that landed), and the holder fences itself once the lease,
# less a margin, has passed since then. One renewal may take a whole store timeout (the
# bound on a Firestore call), so the lease must be at least this many store timeouts: one
# stalled renewal then ends before the next is due, and two renewals may fail before the
# holder gives up its claim.
LEASE_STORE_TIMEOUTS = 3


def min_lease_seconds(store_timeout_seconds: float) -> float:
    """The shortest lease that survives missed renewals (config leaseSeconds, the policy
    dedup-lease-survives-missed-renewals): LEASE_STORE_TIMEOUTS x the store timeout."""
    return float(LEASE_STORE_TIMEOUTS * store_timeout_seconds)


# -- daylight saving time --------------------------------------------------------------------
# Google's page on cron schedules and time zones, which the advisory cites.
CRON_SCHEDULES_PAGE = "https://cloud.google.com/scheduler/docs/configuring/cron-job-schedules"


# The DST changes a schedule runs into: the one computation behind `make plan`'s and the
# policy pack's advisory (scheduler-job-dst-change) and the Scheduler emulator's DST ticks.
#
# A job whose cron fires at a local wall-clock time that does not exist on a spring-forward
# day (a "gap": 02:30 in Europe/Berlin on the last Sunday of March) or that occurs twice on a
# fall-back day (a "repeat": 02:30 on the last Sunday of October) runs at a time Cloud
# Scheduler does not document: the run may be moved, skipped or doubled.
#
# Fast whatever the schedule: the zone's UTC-offset changes in the period are found first (a
# coarse scan, then a bisection to the second), and croniter is asked only which wall-clock
# times it fires at inside each change's window (an hour or so), never for a year of ticks.
GAP: Final = "gap"  # the local time does not exist that day (clocks spring forward)
REPEAT: Final = "repeat"  # the local time occurs twice that day (clocks fall back)
HazardKind = Literal["gap", "repeat"]
# How far ahead `make plan` and the policy pack look.
ADVISORY_HORIZON: Final = timedelta(days=365)
# The coarse scan's step: shorter than any interval between two offset changes (zones
# change at most a few times a year), so no change is stepped over.
_SCAN_STEP: Final = timedelta(hours=6)
# Above this many fire times in one change window, the advisory shows the first and last.
_TIMES_SHOWN: Final = 4


@dataclass(frozen=True)
class DstHazard:
    """One local wall-clock time a cron fires at that a DST change makes ambiguous."""

    date: date  # the local date of `local_time`
    local_time: time  # a wall-clock time the cron fires at, in the job's time zone
    kind: HazardKind  # GAP: does not exist that day; REPEAT: occurs twice that day
    # The change's window of wall-clock time, [window_start, window_end) local (naive):
    # skipped for a gap, lived twice for a repeat.
    window_start: datetime
    window_end: datetime


@dataclass(frozen=True)
class OffsetChange:
    """A change of the zone's UTC offset (a DST change, or a change of standard time)."""

    at: datetime  # aware UTC: the first instant of the new offset
    before: timedelta
    after: timedelta

    @property
    def kind(self) -> HazardKind:
        return GAP if self.after > self.before else REPEAT

    @property
    def window(self) -> tuple[datetime, datetime]:
        """The wall-clock times skipped (gap) or lived twice (repeat), naive local."""
        instant = self.at.replace(tzinfo=None)
        early, late = sorted((instant + self.before, instant + self.after))
        return early, late


def offset_changes(zone: ZoneInfo, start: datetime, end: datetime) -> Iterator[OffsetChange]:
    """The zone's UTC-offset changes in [start, end) (aware instants), in order."""
    # Scanned once per zone and pair of whole UTC days (cached): a stack of 5,000 jobs in a
    # handful of zones scans each zone once, not once per job.
    first_day = start.astimezone(UTC).date()
    last_day = end.astimezone(UTC).date() + timedelta(days=1)
    for change in _day_offset_changes(zone, first_day, last_day):
        if start <= change.at < end:
            yield change


@functools.lru_cache(maxsize=256)
def _day_offset_changes(
    zone: ZoneInfo, first_day: date, last_day: date
) -> tuple[OffsetChange, ...]:
    """The zone's offset changes from first_day's to last_day's UTC midnight."""
    start = datetime.combine(first_day, time(), UTC)
    end = datetime.combine(last_day, time(), UTC)
    return tuple(_scan_offset_changes(zone, start, end))


def _scan_offset_changes(zone: ZoneInfo, start: datetime, end: datetime) -> Iterator[OffsetChange]:
    cursor = start.astimezone(UTC)
    end = end.astimezone(UTC)
    offset = _offset(zone, cursor)
    while cursor < end:
        step_end = min(cursor + _SCAN_STEP, end)
        next_offset = _offset(zone, step_end)
        if next_offset != offset:
            # Bisect on whole seconds: zones change offset on a whole second.
            low, high = int(cursor.timestamp()), int(step_end.timestamp()) + 1
            while high - low > 1:
                middle = (low + high) // 2
                if _offset(zone, datetime.fromtimestamp(middle, UTC)) == offset:
                    low = middle
                else:
                    high = middle
            at = datetime.fromtimestamp(high, UTC)
            if start <= at < end:
                yield OffsetChange(at, offset, _offset(zone, at))
        cursor, offset = step_end, next_offset


def _offset(zone: ZoneInfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None  # a ZoneInfo always has one
    return offset


def dst_hazards(cron: str, time_zone: str, start: datetime, end: datetime) -> list[DstHazard]:
    """Every local time in [start, end) at which `cron` fires in `time_zone` and which does
    not exist (GAP) or occurs twice (REPEAT), in order. Raises ScheduleError for a schedule
    or time zone Cloud Scheduler does not accept."""
    validate_cron(cron)
    zone = validate_time_zone(time_zone)
    hazards: list[DstHazard] = []
    for change in offset_changes(zone, start, end):
        window_start, window_end = change.window
        # croniter over naive datetimes walks the wall clock with no zone at all: exactly
        # the times the cron names, whether or not the zone lives them once.
        ticks = croniter(cron, window_start - timedelta(seconds=1))
        while (tick := ticks.get_next(datetime)) < window_end:
            hazards.append(DstHazard(
                tick.date(), tick.time(), change.kind, window_start, window_end
            ))
    return hazards


def chosen_kinds(names: Iterable[str] | None) -> frozenset[HazardKind]:
    """The kinds of DST change among `names` (what OfflineRun.dst_chosen holds)."""
    return frozenset(kind for kind in get_args(HazardKind) if kind in (names or ()))


def dst_advisory(
    cron: str, time_zone: str, now: datetime | None = None,
    horizon: timedelta = ADVISORY_HORIZON, chosen: frozenset[HazardKind] = frozenset(),
) -> str | None:
    """One line for `make plan` and the policy pack: the DST changes of the next year (from
    `now`) that `cron` in `time_zone` runs into, and what to do; None when there are none.
    `chosen`: the kinds of change whose behaviour the job's team chose (dstRepeated:
    "repeat", dstSkipped: "gap"), left out: nothing to advise there.
    Raises ScheduleError for a schedule or time zone Cloud Scheduler does not accept."""
    start = now or datetime.now(UTC)
    hazards = [h for h in dst_hazards(cron, time_zone, start, start + horizon)
               if h.kind not in chosen]
    if not hazards:
        return None
    changes = [
        _describe_change(list(group))
        for _, group in groupby(hazards, key=lambda h: (h.window_start, h.kind))
    ]
    return (
        f"schedule {cron!r} in {time_zone} runs into daylight saving time changes in the next "
        f"year: {'; '.join(changes)}. Google says only that DST \"can cause jobs to run or "
        "not run unexpectedly\" and recommends UTC (" + CRON_SCHEDULES_PAGE + "); the "
        "kit runs each local time as dstRepeated and dstSkipped say (unset: as BSD cron -s, "
        "once at fixed hours, by the clock with '*' in the minute or hour field): set them "
        "to choose, or use timeZone Etc/UTC"
    )


def _describe_change(hazards: Sequence[DstHazard]) -> str:
    first = hazards[0]
    times = [_hhmm(h.local_time) for h in hazards]
    if len(times) > _TIMES_SHOWN:
        shown = f"{times[0]} ... {times[-1]} ({len(times)} times)"
    else:
        shown = ", ".join(times)
    window = f"{_hhmm(first.window_start.time())}-{_hhmm(first.window_end.time())}"
    one = len(times) == 1
    if first.kind == GAP:
        verb = "does not exist" if one else "do not exist"
        return f"on {first.date.isoformat()} {shown} {verb} (clocks skip {window})"
    verb = "occurs twice" if one else "occur twice"
    return f"on {first.date.isoformat()} {shown} {verb} (clocks repeat {window})"


def _hhmm(moment: time) -> str:
    return moment.strftime("%H:%M")

"""Cloud Scheduler's documented rules, as pure functions.

One implementation shared by the stack-config validation (infra/config.py), the policy
pack (policies/) and the local Scheduler emulator, so the three never disagree about what
Scheduler accepts or how it retries. No Pulumi imports here: this module must load in the
policy pack's and the emulator's processes too.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import croniter

# HTTP targets: attemptDeadline between 15 seconds and 30 minutes (default 3 minutes).
ATTEMPT_DEADLINE_MIN_SECONDS = 15
ATTEMPT_DEADLINE_MAX_SECONDS = 1800
ATTEMPT_DEADLINE_DEFAULT_SECONDS = 180
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
    if not croniter.is_valid(schedule):
        raise ScheduleError(
            f"schedule {schedule!r} is not valid unix-cron: check each of the 5 fields "
            "(minute 0-59, hour 0-23, day-of-month 1-31, month 1-12, day-of-week 0-6)"
        )


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

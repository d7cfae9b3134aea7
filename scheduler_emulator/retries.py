"""When Scheduler makes a run's next retry (retry_refusal: why not, or None).

Google documents the end of a run's retries two ways, so the emulator has a switch for
both (SchedulerEmulator's `retries_stop_at_next_run`):
- on: retries never start at or after the job's next scheduled time (RetryConfig's API
  reference: "retry_count times, or until the next scheduled execution time, whichever
  comes first");
- off (the default): retries go on until both limits are reached, and a scheduled time
  that passes while the job is still being retried is skipped: not delivered late, not
  queued (the retry guide: "the next scheduled execution time might be skipped if the
  retries continue through that time"). The emulator's model: a job is one sequence of
  runs; a tick whose time comes while an earlier run (scheduled or forced) of the job is
  still in an attempt or a backoff wait is skipped; the next tick after it is delivered.
Off is the default: it is the reading of the current user guide, and the stricter one for
dedup (a retry may outlive the next tick, and skipped ticks must show up as missed runs).
"""

from __future__ import annotations

from datetime import datetime

from infra.scheduler_rules import RetrySettings


def retry_refusal(
    retry: RetrySettings,
    retries_done: int,
    first_attempt: datetime,
    next_attempt: datetime,
    next_scheduled: datetime | None,
) -> str | None:
    """Why Scheduler would not make the retry starting at `next_attempt`, or None.

    Scheduler retries until both retryCount and maxRetryDuration (measured from the first
    attempt; 0 = no limit) are used up, and, if `next_scheduled` is given (retries stop at
    the next run), never at or past the next scheduled time.
    """
    if next_scheduled is not None and next_attempt >= next_scheduled:
        return "next scheduled time reached"
    count_left = retries_done < retry.retry_count
    duration = retry.max_retry_duration_seconds
    duration_left = duration > 0 and (next_attempt - first_attempt).total_seconds() <= duration
    if count_left or duration_left:
        return None
    if retry.retry_count == 0 and duration <= 0:
        return "no retries configured"
    if duration > 0:
        return "retryCount and maxRetryDuration used up"
    return "retryCount used up"

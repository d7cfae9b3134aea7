"""How long Scheduler keeps retrying a run whose every attempt fails at once, the retry
duration after which a crashed attempt's run is surely taken over, and the shortest lease
that survives missed heartbeat renewals."""

from __future__ import annotations

import pytest

from infra.scheduler_rules import (
    LEASE_STORE_TIMEOUTS,
    RetrySettings,
    backoff_seconds,
    fast_failure_retry_span_seconds,
    min_lease_seconds,
    retry_duration_to_recover_seconds,
)

DOC_EXAMPLE = RetrySettings(
    retry_count=5, min_backoff_seconds=10, max_backoff_seconds=300, max_doublings=3
)


@pytest.mark.parametrize(
    ("retry", "span"),
    [
        (RetrySettings(), 0.0),  # no retries at all
        (RetrySettings(retry_count=0, max_retry_duration_seconds=600), 600.0),
        (DOC_EXAMPLE, 10 + 20 + 40 + 80 + 160),  # the backoffs of 5 retries
        (RetrySettings(5, 1200, 10, 300, 3), 1200.0),  # maxRetryDuration is longer
        (RetrySettings(5, 100, 10, 300, 3), 310.0),  # retryCount is longer
        (RetrySettings(3, 0, 10, 60, 2), 70.0),  # dev's hourly-sync before the fix
        (RetrySettings(3, 600, 10, 60, 2), 600.0),  # ... and after
    ],
)
def test_fast_failure_retry_span(retry: RetrySettings, span: float) -> None:
    assert fast_failure_retry_span_seconds(retry) == span


def test_span_is_the_larger_of_both_limits() -> None:
    for count in range(6):
        for duration in (0, 30, 3600):
            retry = RetrySettings(count, duration, 5, 3600, 5)
            backoffs = sum(backoff_seconds(retry, i) for i in range(count))
            assert fast_failure_retry_span_seconds(retry) == max(backoffs, duration)


@pytest.mark.parametrize(
    ("deadline", "lease", "retry", "duration"),
    [
        # Retries after a crash at the deadline: +10, +30, +70, +130, +190, +250, +310 s.
        (120, 300, RetrySettings(3, 600, 10, 60, 2), 120 + 310),
        # A long lease (1860 s, as leases had to be before the heartbeat made them liveness
        # windows): +30, +90, +210, +450, +930, +1530, +2130 s.
        (600, 1860, RetrySettings(5, 3000, 30, 600, 4), 600 + 2130),
        # ... +120, +360, +840, +1800, +3600 s.
        (900, 1860, RetrySettings(3, 5400, 120, 1800, 3), 900 + 3600),
        # prod's invoice-sync: the second retry (+90 s) comes after the 60 s lease.
        (600, 60, RetrySettings(3, 0, 30, 600, 4), 0),
        # prod's month-end-close: the first retry (+120 s) already does.
        (900, 60, RetrySettings(3, 0, 120, 1800, 3), 0),
        # Scheduler's defaults (5 s .. 1 h, 5 doublings): +5, +15, ..., +155, +315 s.
        (30, 300, RetrySettings(), 30 + 315),
        # retryCount alone reaches past the lease (+60 ... +1020 s): no duration needed.
        (300, 600, RetrySettings(5, 0, 60, 300, 3), 0),
        # No backoff: the counted retries all come at once, only the duration reaches on.
        (300, 600, RetrySettings(5, 0, 0, 0, 3), 300 + 600),
    ],
)
def test_retry_duration_to_recover(
    deadline: float, lease: float, retry: RetrySettings, duration: float
) -> None:
    assert retry_duration_to_recover_seconds(deadline, lease, retry) == duration


def test_a_duration_that_recovers_outlasts_the_lease() -> None:
    """Sufficient implies necessary: what recovers a crashed run passes the span rule."""
    for deadline in (15, 180, 1800):
        for lease in (30, 60, deadline, 600, 1860):
            for retry in (DOC_EXAMPLE, RetrySettings(), RetrySettings(2, 0, 1, 4, 1)):
                needed = retry_duration_to_recover_seconds(deadline, lease, retry)
                fixed = RetrySettings(
                    retry.retry_count,
                    needed,
                    retry.min_backoff_seconds,
                    retry.max_backoff_seconds,
                    retry.max_doublings,
                )
                assert fast_failure_retry_span_seconds(fixed) >= lease


@pytest.mark.parametrize(
    ("store_timeout", "lease"), [(10, 30.0), (1, 3.0), (60, 180.0), (2.5, 7.5)]
)
def test_min_lease_is_three_store_timeouts(store_timeout: float, lease: float) -> None:
    """The heartbeat renews every lease/3 and a renewal may take one store timeout: one
    stalled renewal ends before the next is due (lease/3 >= store timeout)."""
    assert LEASE_STORE_TIMEOUTS == 3
    assert min_lease_seconds(store_timeout) == lease
    assert min_lease_seconds(store_timeout) / 3 >= store_timeout

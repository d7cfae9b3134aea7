"""The shared renewal timer (dedup/heartbeat.py): each running job's claim is renewed when
its renewal falls due, whether that is before the timer's planned wake-up (it is woken)
or after it (it is not: a fresh run costs no thread switch, and the renewal still comes)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from dedup.heartbeat import Heartbeats


def recorder() -> tuple[Callable[[], bool], threading.Event, list[float]]:
    """A renew callable that records when it ran, and an event set at its first run."""
    renewed = threading.Event()
    times: list[float] = []

    def renew() -> bool:
        times.append(time.monotonic())
        renewed.set()
        return True

    return renew, renewed, times


def test_a_renewal_due_before_the_timers_wake_up_wakes_it() -> None:
    heartbeats = Heartbeats()
    slow, slow_renewed, _ = recorder()
    fast, fast_renewed, _ = recorder()
    # The timer waits for a renewal 30 s away; one due in 0.05 s must not wait that long.
    with heartbeats.keep(slow, time.monotonic, 30.0, "slow"), \
            heartbeats.keep(fast, time.monotonic, 0.05, "fast"):
        assert fast_renewed.wait(10.0)
    assert not slow_renewed.is_set()


def test_a_renewal_due_after_the_timers_wake_up_still_comes_on_time() -> None:
    heartbeats = Heartbeats()
    early, early_renewed, _ = recorder()
    later, later_renewed, later_times = recorder()
    with heartbeats.keep(early, time.monotonic, 0.3, "early"):
        # Once it has renewed, the timer waits for its next renewal, 0.3 s away ...
        assert early_renewed.wait(10.0)
        scheduled = time.monotonic()
        # ... and this one falls due after that wake-up: nothing wakes the timer for it.
        with heartbeats.keep(later, time.monotonic, 0.45, "later"):
            assert later_renewed.wait(10.0)
    assert later_times[0] - scheduled >= 0.45


def test_a_job_that_returned_is_not_renewed() -> None:
    heartbeats = Heartbeats()
    ended, ended_renewed, _ = recorder()
    running, running_renewed, _ = recorder()
    with heartbeats.keep(ended, time.monotonic, 0.1, "ended"):
        pass
    # The timer may still plan to wake for the job that ended; it renews only this one.
    with heartbeats.keep(running, time.monotonic, 0.2, "running"):
        assert running_renewed.wait(10.0)
    assert not ended_renewed.is_set()

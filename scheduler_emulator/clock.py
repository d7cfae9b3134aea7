"""The emulator's one notion of time, as an injectable object.

Every wait the emulator makes (the attempt deadline, the backoff between retries, the wait
for the next scheduled time) goes through a `Clock`, so the same delivery code runs:

- in simulated time (`ScaledClock`, the default): scheduled times follow the cron, the
  emulator jumps straight to the next one ("replay N ticks as fast as the function
  answers"), and durations inside a run (deadlines, backoff) pass `scale` times faster;
- in real time (`RealClock`): wall-clock time, waits for the real scheduled instants;
- in tests (`ManualClock`): simulated time advances only when the emulator sleeps or a
  deadline expires, so the times a target sees are exact and repeatable.

A wait that is the emulator's own, not Scheduler's (a store-fault hook holding an attempt
until the store has settled from the previous fault), is taken back with `exclude`, so it
uses up no retry window and no time before the next tick.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """What the emulator needs from time. Durations are simulated seconds."""

    def now(self) -> datetime:
        """The current simulated instant (aware, UTC)."""
        ...

    def advance_to(self, when: datetime) -> None:
        """Move to `when` (a scheduled time): jump in simulated time, wait in real time."""
        ...

    def sleep(self, seconds: float) -> None:
        """Let `seconds` of simulated time pass (a backoff wait)."""
        ...

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait for `event` at most `seconds` of simulated time; True if it was set."""
        ...

    def real_seconds(self, seconds: float) -> float:
        """How long `seconds` of simulated time last in real time."""
        ...

    def exclude(self, real_seconds: float) -> None:
        """Take back `real_seconds` of real time that just passed outside the schedule
        (the emulator waited for something Scheduler never waits for)."""
        ...


def _aware(when: datetime) -> datetime:
    if when.tzinfo is None:
        raise ValueError("clock instants must be timezone-aware")
    return when.astimezone(UTC)


class ScaledClock:
    """Simulated time: jumps to scheduled times, runs durations `scale` times real time.

    `scale` is real seconds per simulated second (0.01: a 180 s attempt deadline lasts
    1.8 s). Between jumps, simulated time advances with the real monotonic clock, so an
    attempt that takes 50 ms of real time takes 50 ms / scale of simulated time.
    """

    def __init__(self, start: datetime, scale: float) -> None:
        if scale <= 0:
            raise ValueError("time scale must be > 0")
        self.scale = scale
        self._lock = threading.Lock()
        self._base_sim = _aware(start)
        self._base_real = time.monotonic()

    def now(self) -> datetime:
        with self._lock:
            elapsed = (time.monotonic() - self._base_real) / self.scale
            return self._base_sim + timedelta(seconds=elapsed)

    def advance_to(self, when: datetime) -> None:
        when = _aware(when)
        with self._lock:
            current = self._base_sim + timedelta(
                seconds=(time.monotonic() - self._base_real) / self.scale
            )
            if when > current:
                self._base_sim = when
                self._base_real = time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds * self.scale)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(seconds, 0.0) * self.scale)

    def real_seconds(self, seconds: float) -> float:
        return seconds * self.scale

    def exclude(self, real_seconds: float) -> None:
        with self._lock:
            self._base_real += max(real_seconds, 0.0)


class RealClock:
    """Wall-clock time: scheduled times are waited for, durations are real."""

    scale = 1.0

    def now(self) -> datetime:
        return datetime.now(UTC)

    def advance_to(self, when: datetime) -> None:
        delay = (_aware(when) - self.now()).total_seconds()
        if delay > 0:
            time.sleep(delay)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(seconds, 0.0))

    def real_seconds(self, seconds: float) -> float:
        return seconds

    def exclude(self, real_seconds: float) -> None:
        pass  # real time cannot be taken back: the wait delays what follows


class ManualClock:
    """Deterministic simulated time for tests.

    Time stands still while a target handles a request; it advances by exactly the
    backoff on `sleep`, by exactly the deadline when a `wait` times out, and jumps on
    `advance_to`. Real waits (a target that outlives its deadline) still happen, scaled
    by `scale`, so deadline tests stay fast.
    """

    def __init__(self, start: datetime, scale: float = 0.01) -> None:
        self.scale = scale
        self._lock = threading.Lock()
        self._now = _aware(start)
        self.sleeps: list[float] = []

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance_to(self, when: datetime) -> None:
        when = _aware(when)
        with self._lock:
            self._now = max(self._now, when)

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            self._now += timedelta(seconds=max(seconds, 0.0))

    def wait(self, event: threading.Event, seconds: float) -> bool:
        if event.wait(max(seconds, 0.0) * self.scale):
            return True
        with self._lock:
            self._now += timedelta(seconds=max(seconds, 0.0))
        return False

    def real_seconds(self, seconds: float) -> float:
        return seconds * self.scale

    def exclude(self, real_seconds: float) -> None:
        pass  # time stands still here unless the emulator sleeps or a deadline passes

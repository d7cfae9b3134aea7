"""How a test waits (docs/testing.md): for an event, never for a guess at how long
something takes. A loaded machine makes every guess wrong some day; an event is on time
whatever the load.

- `wait_until(condition, timeout=..., what=...)`: the one way to wait for something to
  happen (a record in the store, a line in a log, a request at a fake, a thread's result).
  It returns as soon as the condition holds, so its timeout can be generous: it is only
  how long to wait before calling the thing broken. (A `threading.Event` or a queue the
  code under test signals is as good: wait on it with a timeout and assert it came.)
- `job_works_for(seconds)`: simulated work. A fake job, step or target that takes this
  long because its duration is part of the scene (a job longer than its lease, a target
  slower than its deadline). Nothing may wait on it as a synchronisation.
- `let_time_pass(seconds, why)`: time itself must pass, and any longer wait keeps the
  assertion true (a lease that must lapse, judged by the store's clock; a moment after
  which nothing more may happen). Never "long enough for X to have happened": that is
  `wait_until`.

`tests/test_waits.py` refuses a direct sleep anywhere else under tests/.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# How long a condition may take before the test calls it broken. Generous on purpose: a
# met condition returns at once, and a loaded 2-core machine has taken seconds for what
# takes milliseconds alone.
PATIENCE_SECONDS = 60.0
POLL_SECONDS = 0.02


def wait_until(
    condition: Callable[[], T | None], *, timeout: float = PATIENCE_SECONDS, what: str,
    poll: float = POLL_SECONDS,
) -> T:
    """Poll `condition` until it returns something truthy, and return that (so a
    condition may answer None until it holds). After `timeout` seconds fail, naming
    `what` was waited for (and the last value seen)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"waited {timeout:g} s for {what}; it never happened (last: {value!r})")
        time.sleep(poll)


def job_works_for(seconds: float) -> None:
    """Simulated work: a fake job, step or target taking `seconds` of real time."""
    time.sleep(max(0.0, seconds))


def let_time_pass(seconds: float, why: str) -> None:
    """Let `seconds` of real time pass (none if not positive), because `why` needs time
    itself to pass, and any longer wait would do as well."""
    assert why, "say which time must pass, and why a longer wait would do as well"
    time.sleep(max(0.0, seconds))

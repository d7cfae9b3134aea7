"""Lease renewals for every job this instance is running, on one shared timer thread.

A claim is renewed `interval` after its last renewal that landed (not after the end of a
failed one, so one slow renewal cannot use up the lease); after a failure the renewal is
tried again every half interval until one lands or the claim is lost or fenced.

Why shared: a thread of its own per delivery cost about 15% of a fresh run's latency (thread
start and join contend for the GIL with gRPC's threads), although most jobs end before
their first renewal is due. One timer thread per process wakes when a renewal falls due;
the renewal RPCs run on a small pool, so a renewal stalled by the store does not hold up
another claim's.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)

# Renewals in flight at once; more wait for a free slot (a renewal takes at most one
# store timeout, well inside the third of a lease between two of them).
_MAX_RENEWALS_IN_FLIGHT = 64


class _Renewal:
    """One running job's renewals, from when it starts until it returns."""

    def __init__(
        self, heartbeats: Heartbeats, renew: Callable[[], bool],
        landed_at: Callable[[], float], interval: float, name: str,
    ) -> None:
        self._heartbeats = heartbeats
        self._renew = renew
        self._landed_at = landed_at
        self._interval = interval
        self._name = name
        self.due = landed_at() + interval
        self.entry: tuple[float, int, _Renewal] | None = None  # its place in the timer's heap
        self.done = False
        # Held while a renewal is in flight: stop() waits on it, so no renewal of this
        # claim runs once the job has returned and its completion is being written.
        self._busy = threading.Lock()

    def run(self) -> None:
        with self._busy:
            if self.done:
                return
            try:
                if not self._renew():
                    log.warning(
                        "%s: claim lost while the job ran (taken over, or no renewal landed "
                        "in time): the job is told to stop", self._name,
                    )
                    return
                self.due = self._landed_at() + self._interval
            except Exception as exc:  # StoreUnavailable or anything else: keep trying
                log.warning("%s: lease renewal failed: %s", self._name, exc)
                self.due = max(self._heartbeats.now(), self.due + self._interval / 2)
            self._heartbeats.schedule(self)

    def stop(self) -> None:
        self.done = True
        self._heartbeats.unschedule(self)
        with self._busy:
            pass


class Heartbeats:
    """The shared timer: renews each registered claim when its renewal falls due."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.now = monotonic
        self._due: list[tuple[float, int, _Renewal]] = []
        self._order = itertools.count()  # ties on `due` never compare two _Renewals
        self._wake = threading.Condition()
        # When the waiting timer looks at the heap next (inf: not until notified). A new
        # renewal due later needs no wake-up: waking the timer on every delivery cost a
        # thread switch on each fresh run, and a renewal is due a third of a lease away.
        self._wakes_at = math.inf
        self._timer: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(_MAX_RENEWALS_IN_FLIGHT, "lease-renewal")

    @contextlib.contextmanager
    def keep(
        self, renew: Callable[[], bool], landed_at: Callable[[], float], interval: float,
        name: str,
    ) -> Iterator[None]:
        """Renew with `renew()` while the block runs. `landed_at()`: monotonic time of the
        claim's last write known to have landed; `renew()` returns False once it is lost."""
        renewal = _Renewal(self, renew, landed_at, interval, name)
        self.schedule(renewal)
        try:
            yield
        finally:
            renewal.stop()

    def schedule(self, renewal: _Renewal) -> None:
        with self._wake:
            renewal.entry = (renewal.due, next(self._order), renewal)
            heapq.heappush(self._due, renewal.entry)
            if self._timer is None:
                self._timer = threading.Thread(
                    target=self._loop, name="lease-heartbeat", daemon=True
                )
                self._timer.start()
            if renewal.due < self._wakes_at:
                self._wake.notify()  # only a deadline before its wake-up needs the timer

    def unschedule(self, renewal: _Renewal) -> None:
        """Drop a finished job's pending renewal now, so the heap holds running jobs only
        and the timer never wakes for a job that has already returned."""
        with self._wake:
            if renewal.entry is not None and renewal.entry in self._due:
                self._due.remove(renewal.entry)
                heapq.heapify(self._due)
            renewal.entry = None

    def _loop(self) -> None:
        while True:
            with self._wake:
                while True:
                    if not self._due:
                        self._wakes_at = math.inf
                        self._wake.wait()
                        continue
                    due, _, renewal = self._due[0]
                    left = due - self.now()
                    if left <= 0:
                        heapq.heappop(self._due)
                        renewal.entry = None
                        break
                    self._wakes_at = due
                    self._wake.wait(left)
            if not renewal.done:
                self._pool.submit(renewal.run)


# One per process: every Deduplicator of this instance shares the timer and the pool.
HEARTBEATS = Heartbeats()

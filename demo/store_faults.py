"""The demo's store faults: the function's store timings, and the emulator's hook that
injects store-stall and store-outage through the fault proxy in front of the Firestore
emulator (local_stack.store_faults).

The timings are real seconds, not scaled with the schedule like deadlines and backoff:
the Firestore emulator's latency and gRPC's reconnect backoff do not shrink with the
time scale. `store_timing` derives the lease from the faults, so that every fault ends
well within the fence of every claim it meets: a store away for longer than that is the
window no protocol closes (README, failure model: the job ran, its completion cannot be
recorded, and once the lease lapses a later delivery may run it again).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from infra.scheduler_rules import min_lease_seconds
from local_stack.fault_schedule import InjectedFault
from local_stack.store_faults import StoreFaultProxy
from scheduler_emulator.faults import STORE_OUTAGE, STORE_STALL
from scheduler_emulator.records import Delivery
from scheduler_emulator.report import RunSummary
from scheduler_emulator.stack import Stack

# The least store budget (DEDUP_STORE_TIMEOUT_SECONDS) the demo gives the function: the
# stack's 10 s scaled like the deadlines (0.2 s) would time out on the emulator's own
# latency on a busy 2-core machine, so every delivery would meet a store fault of its own.
MIN_STORE_TIMEOUT_SECONDS = 1.0
# A store-stall holds the replies back for longer than the store budget, so a write lands
# while the function gives up waiting for its reply: a claim of unknown outcome, settled
# by its attempt_id (the settle read's own budget outlasts the rest of the stall).
STALL_STORE_TIMEOUTS = 1.5
# gRPC reconnects after a lost connection with a backoff of about 1 s (+-20 % jitter), each
# failed try waiting 1.6 times longer than the one before: an outage that outlasts the
# first reconnect keeps the function from its store much longer than itself (2 s at the
# proxy: up to 3.9 s). A store-outage of 0.75 s ends before the first reconnect can come,
# so the function is cut off for 1 to 2 s: its claim gives up (one store budget), the
# settle read finds nothing, and the delivery is answered 500 store_unavailable.
OUTAGE_SECONDS = 0.75
RECONNECT_FIRST_SECONDS, RECONNECT_GROWTH, RECONNECT_JITTER = 1.0, 1.6, 0.2
# Once the store is back, a finishing write (completion, release) lands at its next try:
# within one store budget after a pause of at most 0.4 s while the store has been away
# for less than 3 s (dedup.claim retries it with pauses of 0.1 s, doubling), rounded up.
FINISH_RETRY_PAUSE_SECONDS = 0.5


def away_after_outage(outage: float) -> float:
    """The longest the store may stay away for a gRPC client after an outage of `outage`
    seconds begins: every reconnect that may fall inside the outage fails and lengthens
    the next wait, and the wait after the last of them may run past the outage's end."""
    tried_at, wait = 0.0, RECONNECT_FIRST_SECONDS
    while tried_at + wait * (1 - RECONNECT_JITTER) < outage:  # the next try may still fail
        tried_at += wait * (1 - RECONNECT_JITTER)
        wait *= RECONNECT_GROWTH
    return outage + wait * (1 + RECONNECT_JITTER)


@dataclass(frozen=True)
class StoreTiming:
    """The function's store budget and lease, and the store faults', in real seconds."""

    store_timeout: float
    lease: float
    stall: float  # store-stall: the store's replies are held back this long
    outage: float  # store-outage: the store is unreachable this long (at the proxy)
    sized_for_faults: bool  # the lease outlasts the store faults (see store_timing)

    def away(self, fault: str) -> float:
        """How long, from its start, `fault` may keep the store away from the function."""
        if fault == STORE_STALL:
            return self.stall
        if fault == STORE_OUTAGE:
            return away_after_outage(self.outage)
        raise ValueError(f"not a store fault: {fault!r}")

    @property
    def recovery(self) -> float:
        """Once the store is back, the longest a finishing write takes to land."""
        return self.store_timeout + FINISH_RETRY_PAUSE_SECONDS


def store_timing(stack: Stack, scale: float, store_faults: bool) -> StoreTiming:
    """The function's store budget and lease for a replay at `scale`.

    Store budget: the stack's scaled like the rest, but at least 1 s (see
    MIN_STORE_TIMEOUT_SECONDS); at the demo's scale (0.02), 1 s. Lease: the stack's scaled
    (60 s x 0.02 = 1.2 s), but at least 3 store budgets (the rule every stack obeys, lease
    >= 3 x store timeout) and, with store faults, long enough for any claim a fault meets.
    A running job's claim may have been renewed a third of a lease before the fault began,
    and fences itself 5/6 of a lease after that renewal, so half a lease must cover the
    longest a fault keeps the store away (an outage: 1.95 s) and the recovery after it
    (1.5 s): 2 x 3.45 s, 7 s rounded up to the half second. That also keeps a crashed
    instance's run recoverable where it was: hourly-sync retries for 12 s, nightly-report
    takes it over at its 4th retry (9 s). In real time (scale 1) the stack's own values
    (10 s, 60 s) already satisfy both.
    """
    timeout = max(stack.store_timeout_seconds * scale, MIN_STORE_TIMEOUT_SECONDS)
    timing = StoreTiming(
        store_timeout=timeout,
        lease=max(stack.lease_seconds * scale, min_lease_seconds(timeout)),
        stall=STALL_STORE_TIMEOUTS * timeout,
        outage=OUTAGE_SECONDS,
        sized_for_faults=store_faults,
    )
    if store_faults:
        longest = max(timing.away(STORE_STALL), timing.away(STORE_OUTAGE))
        needed = math.ceil(2 * (longest + timing.recovery) * 2) / 2  # half seconds, up
        timing = replace(timing, lease=max(timing.lease, needed))
    return timing


@dataclass(frozen=True)
class StoreFaultRecord:
    """One store fault the demo injected, and the attempt it was injected for."""

    name: str
    job: str
    schedule_time: datetime | None
    delivery_id: str
    fault: InjectedFault  # the proxy's record: when it began and how long it lasted
    away_until: float  # time.monotonic() by which the store is back at the latest


class StoreFaultInjector:
    """The Scheduler emulator's `store_faults` hook: injects each store fault with the
    proxy just before its struck attempt is sent, one at a time.

    A fault asked for while an earlier one may still keep the store away, or before the
    function has had `timing.recovery` to finish what that one held up, waits (the struck
    attempt is sent that much later in real time; the emulator takes the wait back from
    its job's simulated time): back-to-back faults would keep the store away for longer
    than the fence, the window no protocol closes. close() ends any such wait.
    """

    def __init__(self, proxy: StoreFaultProxy, timing: StoreTiming) -> None:
        self.proxy = proxy
        self.timing = timing
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._quiet_from = 0.0  # time.monotonic() from which the next fault may begin
        self._records: list[StoreFaultRecord] = []

    def __call__(self, name: str, delivery: Delivery) -> None:
        with self._lock:
            if self._closed.wait(max(0.0, self._quiet_from - time.monotonic())):
                raise RuntimeError("store faults: the demo is stopping")
            if name == STORE_STALL:
                fault = self.proxy.stall(self.timing.stall)
            elif name == STORE_OUTAGE:
                fault = self.proxy.outage(self.timing.outage)
            else:
                raise ValueError(f"not a store fault: {name!r}")
            away_until = fault.start + self.timing.away(name)
            self._quiet_from = away_until + self.timing.recovery
            self._records.append(
                StoreFaultRecord(
                    name, delivery.job, delivery.schedule_time, delivery.id, fault, away_until
                )
            )

    @property
    def records(self) -> list[StoreFaultRecord]:
        """The faults injected so far, in order (a copy)."""
        with self._lock:
            return list(self._records)

    def close(self) -> None:
        self._closed.set()


def struck_run(record: StoreFaultRecord, summaries: Iterable[RunSummary]) -> RunSummary | None:
    """The run `record`'s fault was injected for."""
    for s in summaries:
        if any(d.id == record.delivery_id for d in s.deliveries):
            return s
    return None


def mark_exposed(
    summaries: list[RunSummary], records: Iterable[StoreFaultRecord], timing: StoreTiming
) -> None:
    """Note in each run's `exposed_to` the store faults injected for other runs that held
    up one of its deliveries: a store fault meets every delivery in flight."""
    records = list(records)
    for s in summaries:
        exposed: list[str] = []
        for record in records:
            if record.name in exposed or any(d.id == record.delivery_id for d in s.deliveries):
                continue
            if any(_held_up(d, record, timing) for d in s.deliveries):
                exposed.append(record.name)
        s.exposed_to = tuple(exposed)


def _held_up(d: Delivery, record: StoreFaultRecord, timing: StoreTiming) -> bool:
    """Was `d` in flight while `record`'s fault may have kept the store away, and did it
    show: no 2xx or 409 in time, or slower than half a store budget (normally: ~20 ms)?"""
    if d.sent_real is None:
        return False  # never sent
    # A request still unanswered when the replay ended counts as in flight until then.
    answered = d.sent_real + d.real_seconds if d.real_seconds else math.inf
    if not (d.sent_real < record.away_until and answered > record.fault.start):
        return False
    normal = d.status is not None and (200 <= d.status < 300 or d.status == 409)
    return not normal or d.real_seconds >= timing.store_timeout / 2

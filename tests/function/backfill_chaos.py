"""The kills and store faults the served backfill test (test_backfill.py) runs under,
each struck at a count of what the watchdog does (deliveries, progress writes), never at a
time, so a backfill of a given size meets every one of them however fast it goes."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from google.cloud import firestore

from dedup.cache import CompletedRunCache
from dedup.claim import Claim
from dedup.keys import RunKey
from dedup.protocol import Deduplicator
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.backfills import FirestoreBackfills
from dedup.watchdog.delivery import DeliversRuns, DeliveryResult, RunDelivery
from local_stack.deliveries import LOCATION, PROJECT
from local_stack.fault_schedule import FaultKind, FaultSchedule, PlannedFault
from local_stack.store_faults import StoreFaultProxy


class Killed(Exception):
    """The watchdog instance died here (the tick ends with nothing more written)."""


BEFORE_DELIVERING = "watchdog killed before delivering"
AFTER_THE_FUNCTION_RAN = "watchdog killed after the function ran"
BEFORE_PROGRESS = "watchdog killed before writing progress"
AFTER_PROGRESS = "watchdog killed after writing progress"
INSTANCE_DIED = "function instance died"


@dataclass
class Chaos:
    """Kills: of the watchdog after the function ran (the answer never read), before it
    delivered, and after its requests were created (before its progress was written, or
    after); of a function instance that claimed the run and died (its lease lapses).

    Each kind strikes every `every[kind]`-th time its point is reached (counted per kind,
    under a lock): which delivery or round it hits varies with the threads, how many times
    it strikes does not, so a backfill of a given size meets every kind."""

    every: Mapping[str, int]
    collection: str = ""
    max_dead_claims: int = 5
    lock: threading.Lock = field(default_factory=threading.Lock)
    reached: Counter[str] = field(default_factory=Counter)
    counts: Counter[str] = field(default_factory=Counter)

    def strikes(self, what: str) -> bool:
        with self.lock:
            if what == INSTANCE_DIED and self.counts[what] >= self.max_dead_claims:
                return False
            self.reached[what] += 1
            hit = self.reached[what] % self.every[what] == 0
            if hit:
                self.counts[what] += 1
            return hit


@dataclass
class StoreFaultsOnCue:
    """Store faults (each one's kind and length drawn from `schedule`'s seed; its gaps
    unused) injected at cues in the deliveries: one after every `every` deliveries begun
    while the store was healthy, so faults never overlap and how many strike a backfill
    follows its size, not how fast the machine delivers it. Two may follow each other
    closely: the store is then away for both and a gRPC reconnect (under 5 s), still well
    within the served backfill's lease (10 s)."""

    proxy: StoreFaultProxy
    schedule: FaultSchedule
    every: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    healthy_deliveries: int = 0
    planned: Iterator[PlannedFault] = field(init=False)

    def __post_init__(self) -> None:
        self.planned = self.schedule.faults()

    def delivering(self) -> None:
        """A delivery begins: at a cue, the next fault starts (the call returns at once)."""
        with self.lock:
            if not self.proxy.healthy:
                return
            self.healthy_deliveries += 1
            if self.healthy_deliveries % self.every:
                return
            fault = next(self.planned, None)
            if fault is None:
                return
            if fault.kind is FaultKind.OUTAGE:
                self.proxy.outage(fault.duration)
            else:
                self.proxy.stall(fault.duration, drop=fault.kind is FaultKind.STALL_DROP)


@dataclass
class ChaoticDeliverer:
    inner: DeliversRuns
    chaos: Chaos
    store_faults: StoreFaultsOnCue | None = None
    asynchronous = False

    def deliver(self, delivery: RunDelivery) -> DeliveryResult:
        if self.store_faults is not None:
            self.store_faults.delivering()
        if self.chaos.strikes(BEFORE_DELIVERING):
            raise Killed("before delivering")
        if self.chaos.strikes(INSTANCE_DIED):
            # A function instance claims the run (1 s lease) and dies: nothing renews it.
            store = FirestoreRunStore(firestore.Client(project=PROJECT),
                                      self.chaos.collection, 5)
            dedup = Deduplicator(store, lease_seconds=1, retention_seconds=86400,
                                 cache=CompletedRunCache(0, 60))
            key = RunKey(PROJECT, LOCATION, delivery.job_id, delivery.schedule_time,
                         generation=delivery.generation)
            if isinstance(dedup.claim(key), Claim):
                return DeliveryResult("error", error="connection reset by peer")
        result = self.inner.deliver(delivery)
        if self.chaos.strikes(AFTER_THE_FUNCTION_RAN):
            raise Killed("after delivering")
        return result


class ChaoticBackfills(FirestoreBackfills):
    def __init__(self, store: FirestoreRunStore, collection: str, chaos: Chaos) -> None:
        super().__init__(store, collection)
        self.chaos = chaos

    def update(self, backfill: Any, version: datetime, now: datetime) -> datetime:
        if self.chaos.strikes(BEFORE_PROGRESS):
            raise Killed("before writing progress")
        written = super().update(backfill, version, now)
        if self.chaos.strikes(AFTER_PROGRESS):
            raise Killed("after writing progress")
        return written

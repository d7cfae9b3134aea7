"""The demo's store faults without a function: the timings it gives the function, the
hook that injects the faults through the proxy one at a time, and which other runs a
fault is reported to have held up."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from demo.store_faults import (
    StoreFaultInjector,
    StoreFaultRecord,
    StoreTiming,
    away_after_outage,
    mark_exposed,
    store_timing,
)
from local_stack import FaultKind, InjectedFault, StoreFaultProxy
from scheduler_emulator.faults import STORE_FAULTS, STORE_OUTAGE, STORE_STALL
from scheduler_emulator.records import Delivery, EmulatorResult, RunResult
from scheduler_emulator.report import summarise
from scheduler_emulator.stack import Stack

T1 = datetime(2026, 10, 16, 1, 0, tzinfo=UTC)


def test_demo_timings_keep_every_store_fault_inside_the_lease() -> None:
    # The kit's defaults, which the dev stack keeps: a 60 s lease, a 10 s store timeout.
    stack = Stack("acme-dev", "europe-west1", (), lease_seconds=60, store_timeout_seconds=10)
    timing = store_timing(stack, 0.02, store_faults=True)
    assert (timing.store_timeout, timing.stall, timing.outage) == (1.0, 1.5, 0.75)
    assert timing.stall > timing.store_timeout  # a write lands, its reply comes too late
    assert timing.lease >= 3 * timing.store_timeout  # every stack's rule
    for fault in STORE_FAULTS:
        # A claim renewed a third of a lease before the fault fences itself 5/6 of a lease
        # after that renewal: the store must be back, and a write landed, before then.
        assert timing.lease / 3 + timing.away(fault) + timing.recovery <= timing.lease * 5 / 6
    # A crashed instance's run is still taken over within hourly-sync's retries (12 s).
    assert timing.lease < 600 * 0.02
    # Without store faults the lease is only as long as the store budget needs.
    assert store_timing(stack, 0.02, store_faults=False).lease == 3.0
    # In real time the stack's own settings fit the faults already.
    real = store_timing(stack, 1.0, store_faults=True)
    assert (real.store_timeout, real.lease) == (10.0, 60.0)


def test_gRPC_reconnect_backoff_lengthens_an_outage() -> None:
    # Shorter than the first reconnect (1 s -20 %): one failed try at most, then <= 1.2 s.
    assert away_after_outage(0.75) == pytest.approx(1.95)
    # 2 s: two failed tries, the next up to 1.6 x 1.2 s after the second.
    assert away_after_outage(2.0) == pytest.approx(3.92)


def attempt(job: str, tick: int, **kw: object) -> Delivery:
    d = Delivery(job, tick, T1, "scheduled", 0, 1, 0, T1)
    for key, value in kw.items():
        setattr(d, key, value)
    return d


def test_the_hook_injects_one_fault_at_a_time_through_the_proxy() -> None:
    # Nothing connects: the proxy's faults are only recorded and timed here.
    timing = StoreTiming(
        store_timeout=0.1, lease=1.0, stall=0.15, outage=0.05, sized_for_faults=True
    )
    with StoreFaultProxy("127.0.0.1:9") as proxy:
        hook = StoreFaultInjector(proxy, timing)
        hook(STORE_STALL, attempt("a", 0))
        hook(STORE_STALL, attempt("b", 3))
        first, second = hook.records
        # The second waited until the store was back from the first, and the function had
        # had time to land what the first held up.
        assert second.fault.start >= first.away_until + timing.recovery
        assert [(r.name, r.job, r.fault.kind) for r in hook.records] == [
            (STORE_STALL, "a", FaultKind.STALL_LATE),
            (STORE_STALL, "b", FaultKind.STALL_LATE),
        ]
        assert proxy.counts[FaultKind.STALL_LATE] == 2
        with pytest.raises(ValueError, match="not a store fault"):
            hook("lost-ack", attempt("c", 0))
        hook.close()  # a demo stopping mid-replay: a hook waiting to inject gives up
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="stopping"):
            hook(STORE_OUTAGE, attempt("d", 0))
        assert time.monotonic() - started < 0.5
        assert proxy.counts[FaultKind.OUTAGE] == 0


def test_runs_held_up_by_a_fault_are_marked_and_quick_ones_are_not() -> None:
    timing = StoreTiming(
        store_timeout=1.0, lease=7.0, stall=1.5, outage=0.75, sized_for_faults=True
    )
    start = 1000.0
    record = StoreFaultRecord(
        STORE_STALL, "struck", T1, attempt("struck", 0).id,
        InjectedFault(FaultKind.STALL_LATE, start, 1.5), start + 1.5,
    )
    runs = [
        # The struck run itself: its fault is its own, not one it was exposed to.
        ("struck", attempt("struck", 0, sent_real=start, real_seconds=1.5, status=200)),
        # In flight during the stall and held up by it.
        ("slowed", attempt("slowed", 0, sent_real=start - 0.1, real_seconds=1.6, status=200)),
        ("failed", attempt("failed", 0, sent_real=start + 0.5, error="deadline exceeded")),
        # During the stall but answered at once (say, from the instance's cache): not held.
        ("quick", attempt("quick", 0, sent_real=start + 0.2, real_seconds=0.02, status=200)),
        # Before and after the fault.
        ("before", attempt("before", 0, sent_real=start - 2, real_seconds=0.5, status=500)),
        ("after", attempt("after", 0, sent_real=start + 1.6, real_seconds=0.9, status=500)),
    ]
    result = EmulatorResult(
        [RunResult(job, 0, T1, "scheduled", 1, [d]) for job, d in runs], "http://x/", 1, T1, 0.0
    )
    summaries = summarise(result)
    mark_exposed(summaries, [record], timing)
    exposed = {s.job for s in summaries if s.exposed_to}
    assert exposed == {"slowed", "failed"}

"""Exactly once under store faults: a write that lands while its reply is lost, a store
that stays away for a while, an unexpected error. Each test scripts the fault at the
storage seam (tests/function/faulty_store.py) over the real Firestore emulator, so the
outcome is deterministic; tests/function/test_store_faults_served.py injects the same kinds
of fault in the network, at random, end to end."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from google.cloud import firestore

from dedup.cache import CompletedRunCache
from dedup.claim import Claim
from dedup.entry.http import STATUS
from dedup.keys import RunKey
from dedup.outcomes import Delivery, Outcome
from dedup.protocol import Deduplicator
from dedup.run_context import RunContext
from dedup.store import RecordChanged, RecordExists, StoredRun, StoreUnavailable
from dedup.store.firestore import FirestoreRunStore
from local_stack.deliveries import LOCATION, PROJECT
from tests.function.faulty_store import Fault, FaultyStore
from tests.function.helpers import lease_lapsed
from tests.waiting import job_works_for, let_time_pass

pytestmark = pytest.mark.usefixtures("firestore_emulator")

KEY = RunKey(PROJECT, LOCATION, "nightly-export", datetime(2026, 10, 16, 12, 0, tzinfo=UTC))


def faulty_dedup(
    collection: str, *, lease: float = 60.0, heartbeat: float | None = None,
    retention: float = 3600.0, cache: CompletedRunCache | None = None,
) -> tuple[Deduplicator, FaultyStore]:
    client = firestore.Client(project=PROJECT)
    store = FaultyStore(FirestoreRunStore(client, collection, timeout_seconds=5))
    dedup = Deduplicator(
        store, lease_seconds=lease, retention_seconds=retention,
        cache=cache or CompletedRunCache(0), heartbeat_seconds=heartbeat, settle_seconds=1.0,
    )
    return dedup, store


class CountingJob:
    """Job logic that records each execution, optionally working for a while."""

    def __init__(self, seconds: float = 0.0, result: Any = "done") -> None:
        self.seconds = seconds
        self.result = result
        self.executions: list[str] = []

    def __call__(self, context: RunContext) -> Any:
        self.executions.append(context.attempt_id)
        job_works_for(self.seconds)
        return self.result


def failing_job(context: RunContext) -> None:
    raise RuntimeError("downstream said no")


def status_of(store: FaultyStore) -> str | None:
    stored = store.inner.get(KEY.run_id)
    return None if stored is None else stored.record.status.value


# -- a write that landed, reported as failed ----------------------------------------------

def claim_with_an_unseen_renewal(collection: str) -> tuple[Deduplicator, FaultyStore, Claim]:
    """A claim whose renewal landed while the attempt was told it failed: the record is
    still this attempt's, at a version the attempt never saw."""
    dedup, store = faulty_dedup(collection)
    claim = dedup.claim(KEY)
    assert isinstance(claim, Claim)
    store.script("renew", Fault.LOST_REPLY)
    with pytest.raises(StoreUnavailable):
        dedup.renew(claim)
    return dedup, store, claim


def test_a_renewal_that_landed_unseen_does_not_make_completion_look_lost(
    collection_name: str,
) -> None:
    dedup, store, claim = claim_with_an_unseen_renewal(collection_name)
    assert dedup.complete(claim, '"ok"') is True  # adopts its own renewal, then completes
    assert status_of(store) == "completed"
    assert not claim.lost.is_set()


def test_a_renewal_lost_during_the_job_still_ends_completed_and_never_runs_twice(
    collection_name: str,
) -> None:
    dedup, store = faulty_dedup(collection_name, lease=3.0, heartbeat=0.2)
    store.script("renew", Fault.LOST_REPLY)
    job = CountingJob(seconds=0.7)
    delivery = dedup.run(KEY, job, b"", {})
    assert delivery.outcome is Outcome.COMPLETED
    assert status_of(store) == "completed"
    late, _ = faulty_dedup(collection_name, lease=3.0)
    assert late.run(KEY, job, b"", {}).outcome is Outcome.DUPLICATE
    assert len(job.executions) == 1


def test_a_release_after_an_unseen_renewal_frees_the_run_at_once(collection_name: str) -> None:
    dedup, store, claim = claim_with_an_unseen_renewal(collection_name)
    assert dedup.release(claim, "RuntimeError: downstream said no") is True
    assert status_of(store) == "failed"
    assert isinstance(dedup.claim(KEY), Claim)  # the retry after the 500 runs, no 409


def test_a_claim_whose_reply_was_lost_is_adopted_not_left_as_a_phantom(
    collection_name: str,
) -> None:
    dedup, store = faulty_dedup(collection_name)
    store.script("create", Fault.LOST_REPLY)
    job = CountingJob()
    delivery = dedup.run(KEY, job, b"", {})
    assert delivery.outcome is Outcome.COMPLETED
    assert len(job.executions) == 1 and status_of(store) == "completed"


def test_a_takeover_whose_reply_was_lost_is_adopted(collection_name: str) -> None:
    dedup, store = faulty_dedup(collection_name, lease=1.0)
    crashed = dedup.claim(KEY)
    assert isinstance(crashed, Claim)
    lease_lapsed(store.inner, KEY.run_id)
    store.script("replace", Fault.LOST_REPLY)
    job = CountingJob()
    delivery = dedup.run(KEY, job, b"", {})
    assert (delivery.outcome, delivery.attempt) == (Outcome.COMPLETED, 2)
    assert job.executions == [delivery.attempt_id]


def fenced(store: FaultyStore) -> bool:
    """The run's ID holds a fence ("nothing ran"), which every reader counts as absent:
    get returns it past its expiry (the claimer takes it over), get_many (the watchdog's
    and the tools' read) leaves it out."""
    stored = store.inner.get(KEY.run_id)
    return (stored is not None and stored.record.is_fence and stored.past_expiry
            and store.inner.get_many([KEY.run_id]) == {})


def test_a_claim_that_did_not_land_is_a_5xx_that_blocks_nothing(collection_name: str) -> None:
    dedup, store = faulty_dedup(collection_name)
    store.script("create", Fault.UNREACHABLE)
    job = CountingJob()
    delivery = dedup.run(KEY, job, b"", {})
    assert delivery.outcome is Outcome.STORE_UNAVAILABLE and STATUS[delivery.outcome] == 500
    assert job.executions == [] and fenced(store)
    retry = dedup.run(KEY, job, b"", {})
    assert (retry.outcome, retry.attempt) == (Outcome.COMPLETED, 1)  # no 409 after the 5xx


def test_a_create_that_commits_after_the_5xx_cannot_block_the_retry(
    collection_name: str,
) -> None:
    """Issue 37, item 7: the claim's create times out, the read that resolves it finds no
    record, the delivery answers 500 "nothing landed", and then the create commits. Before,
    that late claim of an attempt no longer running answered 409 to every retry for a
    whole lease; now the run's ID was fenced after the read, so the late create fails and
    the retry runs the job at once (the lease is 60 s: no waiting for it)."""
    dedup, store = faulty_dedup(collection_name, lease=60.0)
    store.script("create", Fault.LANDS_LATE)
    job = CountingJob()
    first = dedup.run(KEY, job, b"", {}, answer_within=170)
    assert first.outcome is Outcome.STORE_UNAVAILABLE and job.executions == []
    [late] = store.land_late()
    retry = dedup.run(KEY, job, b"", {}, answer_within=170)
    assert (retry.outcome, retry.attempt) == (Outcome.COMPLETED, 1)  # before: IN_PROGRESS
    assert isinstance(late, RecordExists)  # the fence held: the late create did not land
    assert dedup.run(KEY, job, b"", {}).outcome is Outcome.DUPLICATE
    assert job.executions == [retry.attempt_id]


class FailingJob:
    def __call__(self, context: RunContext) -> Any:
        raise RuntimeError("ledger locked")


@pytest.mark.parametrize("left", ["lapsed claim", "failed run"])
def test_a_takeover_that_commits_after_the_5xx_cannot_block_the_retry(
    collection_name: str, left: str,
) -> None:
    """Item 7's takeover twin: the takeover of a lapsed claim (or of a failed run) times
    out, the read finds the record unchanged, the delivery answers 500, and then the
    takeover (guarded by that version) commits: before, a live claim of an attempt no
    longer running, 409 to every retry for a lease. Now the record was moved on to a new
    version, meaning what it did to every reader (a lapsed claim lapsed, the failed run
    failed), so the late takeover fails its guard and the retry runs the job at once."""
    earlier, _ = faulty_dedup(collection_name, lease=1.0)
    if left == "lapsed claim":
        assert isinstance(earlier.claim(KEY), Claim)
    else:
        assert earlier.run(KEY, FailingJob(), b"", {}).outcome is Outcome.FAILED
    dedup, store = faulty_dedup(collection_name, lease=60.0)
    before = lease_lapsed(store.inner, KEY.run_id)
    store.script("replace", Fault.LANDS_LATE)
    job = CountingJob()
    first = dedup.run(KEY, job, b"", {}, answer_within=170)
    assert first.outcome is Outcome.STORE_UNAVAILABLE and job.executions == []
    moved_on = store.inner.get(KEY.run_id)
    [late] = store.land_late()
    retry = dedup.run(KEY, job, b"", {}, answer_within=170)
    assert (retry.outcome, retry.attempt) == (Outcome.COMPLETED, 2)  # before: IN_PROGRESS
    assert isinstance(late, RecordChanged)  # the version it was guarded by moved on
    assert moved_on is not None and moved_on.version != before.version
    assert moved_on.record == (replace(before.record, lease_seconds=0.0)
                               if left == "lapsed claim" else before.record)
    assert job.executions == [retry.attempt_id]
    stored = store.inner.get(KEY.run_id)
    assert stored is not None and stored.record.unfinished_attempts == (
        (1,) if left == "lapsed claim" else ())


def land_after_the_first_read(
    store: FaultyStore, first: Callable[[], object] = lambda: None,
) -> list[object]:
    """The create held in flight commits just after the read that resolves it (which
    found nothing), before the attempt's next write, once `first` has run. Returns the
    list that then receives what the late create returned or raised."""
    real_get = store.get
    landed: list[object] = []

    def get(run_id: str) -> StoredRun | None:
        found = real_get(run_id)
        store.get = real_get  # type: ignore[method-assign]
        first()
        landed.extend(store.land_late())
        return found

    store.get = get  # type: ignore[method-assign]
    return landed


def test_a_create_that_commits_before_the_fence_is_adopted_and_runs_once(
    collection_name: str,
) -> None:
    """The late create lands between the read that found nothing and the fence: the fence
    finds this attempt's own claim, which it adopts and runs (as when the read finds it)."""
    dedup, store = faulty_dedup(collection_name, lease=60.0)
    store.script("create", Fault.LANDS_LATE)
    landed = land_after_the_first_read(store)
    job = CountingJob()
    first = dedup.run(KEY, job, b"", {}, answer_within=170)
    assert len(landed) == 1 and first.outcome is Outcome.COMPLETED
    assert dedup.run(KEY, job, b"", {}).outcome is Outcome.DUPLICATE
    assert job.executions == [first.attempt_id]


def test_a_rival_delivery_that_claims_before_the_fence_runs_the_job_once(
    collection_name: str,
) -> None:
    """Two deliveries race: the rival claims and completes the run between the read that
    found nothing and the fence; the late create of the first attempt cannot land over
    it, and the fence finds the rival's record: a duplicate, not a 500."""
    dedup, store = faulty_dedup(collection_name, lease=60.0)
    rival, _ = faulty_dedup(collection_name, lease=60.0)
    job = CountingJob()
    rival_answers: list[Outcome] = []
    store.script("create", Fault.LANDS_LATE)
    landed = land_after_the_first_read(
        store, first=lambda: rival_answers.append(rival.run(KEY, job, b"", {}).outcome))
    first = dedup.run(KEY, job, b"", {}, answer_within=170)
    assert rival_answers == [Outcome.COMPLETED]
    assert [type(outcome) for outcome in landed] == [RecordExists]
    assert first.outcome is Outcome.DUPLICATE
    assert len(job.executions) == 1 and status_of(store) == "completed"


def heal_after(store: FaultyStore, operation: str, seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, store.heal, (operation,))
    timer.start()
    return timer


def test_a_claim_whose_reply_was_lost_is_resolved_through_a_stall_longer_than_the_settle_time(
    collection_name: str,
) -> None:
    """The create landed, then no read gets through for twice the settle time: the attempt
    keeps asking until its claim's fence time, finds it holds the run, and runs it. Before,
    it answered 500 after the settle time and every retry got 409 for a whole lease."""
    dedup, store = faulty_dedup(collection_name, lease=12.0)  # fence time 10 s
    store.script("create", Fault.LOST_REPLY)
    store.break_("get")
    heal_after(store, "get", 2.5)  # settle_seconds is 1
    job = CountingJob()
    delivery = dedup.run(KEY, job, b"", {}, answer_within=170)  # a 180 s attempt deadline
    assert delivery.outcome is Outcome.COMPLETED
    assert len(job.executions) == 1 and status_of(store) == "completed"


def test_a_claim_left_unknown_past_its_fence_time_is_a_5xx_and_fenced(
    collection_name: str,
) -> None:
    """The window no protocol closes: no read gets through until the claim is fenced. The
    5xx is honest (nothing ran); the phantom cannot run anything and lapses a fence margin
    (lease / 6) later."""
    dedup, store = faulty_dedup(collection_name, lease=3.0)  # fence 2.5 s, lapses at 3 s
    assert store.inner.get(KEY.run_id) is None  # the client's first RPC, out of the way
    store.script("create", Fault.LOST_REPLY)
    store.break_("get")
    job = CountingJob()
    started = time.monotonic()
    assert dedup.run(KEY, job, b"", {}, answer_within=170).outcome is Outcome.STORE_UNAVAILABLE
    assert 1.0 < time.monotonic() - started < 2.5 + 5  # past the settle time, to the fence
    store.heal("get")
    # The phantom's lease runs from its commit, which the store's own record dates.
    lease_lapsed(store.inner, KEY.run_id)
    assert dedup.run(KEY, job, b"", {}).outcome is Outcome.COMPLETED
    assert len(job.executions) == 1


def test_an_unknown_claim_is_resolved_no_longer_than_the_caller_can_wait(
    collection_name: str,
) -> None:
    """The job's attempt deadline bounds the resolving (Scheduler would have hung up):
    the answer comes within it, not at the fence time; without a deadline, within the
    settle time, as before."""
    for answer_within, bound in ((2.0, 2.0 + 1.5), (None, 1.0 + 1.5)):
        dedup, store = faulty_dedup(collection_name, lease=60.0)  # fence time 50 s
        store.script("create", Fault.LOST_REPLY)
        store.break_("get")
        started = time.monotonic()
        delivery = dedup.run(replace(KEY, job_id=f"bounded-{answer_within}"), CountingJob(),
                             b"", {}, answer_within=answer_within)
        assert delivery.outcome is Outcome.STORE_UNAVAILABLE
        assert time.monotonic() - started < bound


def test_a_claim_learnt_after_its_fence_time_is_released_so_the_retry_runs_at_once(
    collection_name: str,
) -> None:
    """The read that finds the claim answers only after its fence time (a slow reply): the
    claim is released, the attempt answers 500, and the retry claims the run at once."""
    clock = [0.0]
    client = firestore.Client(project=PROJECT)
    inner = FirestoreRunStore(client, collection_name, timeout_seconds=5)
    store = FaultyStore(inner)
    dedup = Deduplicator(store, lease_seconds=60, retention_seconds=3600,
                         cache=CompletedRunCache(0), settle_seconds=1.0,
                         monotonic=lambda: clock[0])
    store.script("create", Fault.LOST_REPLY)
    real_get = store.get

    def slow_get(run_id: str) -> StoredRun | None:
        clock[0] += 60  # the answer arrives past the claim's fence time (50 s)
        return real_get(run_id)

    store.get = slow_get  # type: ignore[method-assign]
    job = CountingJob()
    assert dedup.run(KEY, job, b"", {}, answer_within=170).outcome is (
        Outcome.STORE_UNAVAILABLE)
    assert job.executions == [] and status_of(store) == "failed"
    store.get = real_get  # type: ignore[method-assign]
    assert dedup.run(KEY, job, b"", {}).outcome is Outcome.COMPLETED  # no 409
    assert len(job.executions) == 1


# -- renewals: expiry, fencing, resilience -------------------------------------------------

def test_renewals_move_expire_at_so_a_live_claim_is_never_past_expiry(
    collection_name: str,
) -> None:
    """Retention shorter than the job: the heartbeat must keep the record alive, or a rival
    would take it over as a leftover and run the job a second time. The job lasts 5/3 of
    the lease and the retention; a renewal every 0.5 s leaves 2.5 s for one to land (a 1 s
    lease left 0.8 s: one slow round trip on a loaded machine let the rival in)."""
    dedup, store = faulty_dedup(collection_name, lease=3.0, heartbeat=0.5, retention=3.0)
    rival, _ = faulty_dedup(collection_name, lease=3.0, retention=3.0)
    rival_answers: list[Outcome] = []
    expiries: list[datetime] = []

    def job(context: RunContext) -> str:
        for _ in range(4):
            job_works_for(1.25)
            stored = store.inner.get(KEY.run_id)
            assert stored is not None
            expiries.append(stored.record.expire_at)
            decision = rival.claim(KEY)
            assert isinstance(decision, Delivery), "a rival took over a live claim"
            rival_answers.append(decision.outcome)
        return "done"

    assert dedup.run(KEY, job, b"", {}).outcome is Outcome.COMPLETED
    assert rival_answers == [Outcome.IN_PROGRESS] * 4
    assert expiries == sorted(expiries) and expiries[-1] > expiries[0]


def test_the_holder_fences_itself_before_a_rival_can_take_over(collection_name: str) -> None:
    """No renewal lands: the job is told at the fence (lease minus lease / 6 after the
    claim's create was sent, by the holder's clock), while a rival still finds the lease
    live. Timed from before the create, as the fence is (from the job's start, the create's
    round trip fell outside the measure); lease 6 leaves the rival, its client warmed
    beforehand, a 1 s margin to be answered in."""
    lease = 6.0
    fence = lease - lease / 6  # the default fence margin (dedup/protocol.py)
    dedup, store = faulty_dedup(collection_name, lease=lease, heartbeat=0.5)
    rival, rival_store = faulty_dedup(collection_name, lease=lease)
    assert rival_store.inner.get(KEY.run_id) is None  # its client's first RPC, out of the way
    store.break_("renew")
    seen: dict[str, Any] = {}
    started = time.monotonic()

    def job(context: RunContext) -> None:
        seen["told"] = context.claim_lost.wait(3 * lease)
        seen["after"] = time.monotonic() - started
        decision = rival.claim(KEY)  # at the moment the job is told, no rival is in yet
        seen["rival"] = decision.outcome if isinstance(decision, Delivery) else "took over"
        raise RuntimeError("claim lost: stopping before the next state-changing step")

    delivery = dedup.run(KEY, job, b"", {})
    assert seen["told"] is True
    # Not before the fence, and before the lease lapses, by its own clock.
    assert fence <= seen["after"] < lease
    assert seen["rival"] is Outcome.IN_PROGRESS
    assert delivery.outcome is Outcome.FAILED and status_of(store) == "failed"
    assert store.count("renew") >= 2  # renewals kept being tried until the fence


def test_an_unexpected_renewal_error_does_not_end_the_heartbeat(collection_name: str) -> None:
    # Lease 3, a renewal every 0.5 s: one may take 2.5 s to land (1 s and 0.2 s left 0.8 s).
    dedup, store = faulty_dedup(collection_name, lease=3.0, heartbeat=0.5)
    rival, _ = faulty_dedup(collection_name, lease=3.0)
    store.script("renew", Fault.BUG)
    answers: list[Any] = []

    def job(context: RunContext) -> None:
        job_works_for(4.0)  # well past one lease: only later renewals keep the claim
        decision = rival.claim(KEY)
        answers.append(decision.outcome if isinstance(decision, Delivery) else "took over")
        answers.append(context.claim_lost.is_set())

    assert dedup.run(KEY, job, b"", {}).outcome is Outcome.COMPLETED
    assert answers == [Outcome.IN_PROGRESS, False]


# -- once the job has run ------------------------------------------------------------------

@pytest.mark.parametrize(
    "faults",
    [(Fault.UNREACHABLE,) * 3, (Fault.LOST_REPLY,), (Fault.UNREACHABLE, Fault.LOST_REPLY)],
    ids=["unreachable-3x", "lost-reply", "unreachable-then-lost-reply"],
)
def test_completion_is_retried_until_it_lands(
    collection_name: str, faults: tuple[Fault, ...]
) -> None:
    dedup, store = faulty_dedup(collection_name, lease=5.0)
    store.script("replace", *faults)
    job = CountingJob()
    assert dedup.run(KEY, job, b"", {}).outcome is Outcome.COMPLETED
    assert status_of(store) == "completed"
    assert dedup.run(KEY, job, b"", {}).outcome is Outcome.DUPLICATE
    assert len(job.executions) == 1


def test_a_store_away_for_longer_than_the_lease_after_the_job_is_completed_unrecorded(
    collection_name: str,
) -> None:
    """The completion is retried with doubling pauses (0.1, 0.2, 0.4 s, ...) while the
    claim holds by its own clock: given up once the next pause would cross the fence. So
    the attempt ends before the fence but past half of it (the pauses so far sum to about
    the next one), whatever the create's round trip; lease 3 (fence 2.5 s) leaves room
    for at least 3 tries after a slow create, and a warmed client makes the create quick."""
    lease = 3.0
    fence = lease - lease / 6  # the default fence margin (dedup/protocol.py)
    dedup, store = faulty_dedup(collection_name, lease=lease)
    assert store.inner.get(KEY.run_id) is None  # the client's first RPC, out of the way
    store.break_("replace")
    job = CountingJob()
    started = time.monotonic()
    delivery = dedup.run(KEY, job, b"", {})
    elapsed = time.monotonic() - started
    assert delivery.outcome is Outcome.COMPLETED_UNRECORDED and STATUS[delivery.outcome] == 200
    assert fence / 2 < elapsed < fence + 2  # retried until the fence, not beyond
    assert store.count("replace") >= 3


def deeply_nested(depth: int = 100_000) -> list[Any]:
    nested: list[Any] = []
    for _ in range(depth):
        nested = [nested]
    return nested


@pytest.mark.parametrize(
    ("result", "fault", "outcome"),
    [
        ("done", Fault.BUG, Outcome.COMPLETED_UNRECORDED),
        (deeply_nested(), None, Outcome.COMPLETED),  # json.dumps raises RecursionError
    ],
    ids=["unexpected-store-error", "result-too-deep-for-json"],
)
def test_nothing_after_the_job_returned_becomes_a_5xx(
    collection_name: str, result: Any, fault: Fault | None, outcome: Outcome
) -> None:
    dedup, store = faulty_dedup(collection_name)
    if fault is not None:
        store.break_("replace", fault)
    job = CountingJob(result=result)
    delivery = dedup.run(KEY, job, b"", {})
    assert delivery.outcome is outcome and STATUS[delivery.outcome] == 200
    assert len(job.executions) == 1


def test_a_release_is_retried_so_the_retry_runs_at_once(collection_name: str) -> None:
    dedup, store = faulty_dedup(collection_name, lease=5.0)
    store.script("replace", Fault.UNREACHABLE, Fault.LOST_REPLY)  # the mark-failed write
    assert dedup.run(KEY, failing_job, b"", {}).outcome is Outcome.FAILED
    assert status_of(store) == "failed"  # its own landed write recognised, not feared
    stored = store.inner.get(KEY.run_id)
    assert stored is not None and stored.record.error == "RuntimeError: downstream said no"
    job = CountingJob()
    assert dedup.run(KEY, job, b"", {}).outcome is Outcome.COMPLETED


# -- the per-instance cache -----------------------------------------------------------------

def test_a_cached_completion_lives_no_longer_than_its_record(collection_name: str) -> None:
    """A reader caches a completion it read for as long as the record has left to live
    by the store's clock (expire_at less the read's time), never for the retention from
    its own read. The reader's cache runs on the test's clock: it is moved to the end of
    the record's life as two reads of the store's clock bound it, no real time passes."""
    completer, store = faulty_dedup(collection_name, retention=60.0)
    now = [0.0]
    reader, reader_store = faulty_dedup(collection_name, retention=60.0,
                                        cache=CompletedRunCache(10, monotonic=lambda: now[0]))
    job = CountingJob()
    assert completer.run(KEY, job, b"", {}).outcome is Outcome.COMPLETED
    # The reader's client warmed: its slow first RPC would widen the window between the
    # two reads of the store's clock below.
    assert reader_store.inner.get("warm-up") is None
    before = store.inner.get(KEY.run_id)
    first = reader.run(KEY, job, b"", {})
    after = store.inner.get(KEY.run_id)
    assert before is not None and after is not None
    assert (first.outcome, first.from_cache) == (Outcome.DUPLICATE, False)
    # The reader read between these two reads: what the record had left then lies between.
    left_at_most = (before.record.expire_at - before.read_time).total_seconds()
    left_at_least = (after.record.expire_at - after.read_time).total_seconds()
    assert 0 < left_at_least <= left_at_most < 60  # younger than the retention, not older
    assert reader.run(KEY, job, b"", {}).from_cache is True
    now[0] = left_at_least - 0.001  # the record still lives: the cache answers
    assert reader.run(KEY, job, b"", {}).from_cache is True
    now[0] = left_at_most  # the record has expired for every instance: the cache forgets it
    later = reader.run(KEY, job, b"", {})
    assert later.from_cache is False
    assert later.outcome is Outcome.DUPLICATE  # (the record itself has time left in fact)
    assert len(job.executions) == 1


def test_cache_entries_end_at_the_record_expiry_or_the_max_age() -> None:
    now = [0.0]
    cache = CompletedRunCache(10, max_age_seconds=100, monotonic=lambda: now[0])
    cache.put("short", '"a"', record_lives_seconds=5)
    cache.put("long", '"b"', record_lives_seconds=10_000)
    cache.put("expired", '"c"', record_lives_seconds=-1)
    now[0] = 4.9
    assert cache.get("short") == (True, '"a"')
    assert cache.get("expired") == (False, None)
    now[0] = 5.0
    assert cache.get("short") == (False, None)
    now[0] = 99.9
    assert cache.get("long") == (True, '"b"')
    now[0] = 100.0
    assert cache.get("long") == (False, None)


def test_renewals_stop_when_the_job_returns(collection_name: str) -> None:
    # A 1.5 s job: two renewals 0.1 s apart even when one round trip takes a second; lease 3
    # so a slow renewal does not fence the claim (a fenced claim is renewed no more).
    dedup, store = faulty_dedup(collection_name, lease=3.0, heartbeat=0.1)
    assert dedup.run(KEY, CountingJob(seconds=1.5), b"", {}).outcome is Outcome.COMPLETED
    renewals = store.count("renew")
    assert renewals >= 2  # the shared heartbeat renewed while the job ran
    let_time_pass(0.5, "five heartbeats' time: none may renew after the job returned")
    assert store.count("renew") == renewals

"""Claiming a run for a new attempt: create its record, or judge the one already there
(completed: a duplicate; skipped or failed for good: final; a live lease: 409; failed, or
its holder gone past its lease: taken over at once), and find out what became of a
claiming write whose outcome is unknown.

A claim whose reply was lost may have landed: left alone, that phantom claim would answer
409 to every retry for a whole lease. So before a 5xx the attempt looks the record up by
its `attempt_id`, until the store answers or that claim's own fence time has passed: found
in time, adopted and run; learnt too late, released. Absent is no proof that the create
will not land later (still in flight), so the attempt then creates a fence in its place
(RunRecord.fence_of: "nothing ran", counted absent by every reader), which that create
would meet and fail on; only then does the 5xx leave nothing behind that blocks a retry.
A takeover whose read finds the record unchanged moves it on to a new version instead,
meaning what it did, which the takeover (guarded by the old one) would fail on.
The claim and the writes under it are dedup/claim.py.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from dedup.cache import CompletedRunCache
from dedup.claim import Claim, ClaimWrites, retry_unavailable
from dedup.keys import RunKey
from dedup.outcomes import Delivery, Outcome
from dedup.store import (
    RecordChanged,
    RecordExists,
    RunRecord,
    RunStatus,
    RunStore,
    StoredRun,
    StoreUnavailable,
)

# How often a claim/read race is retried before answering 409 (which Scheduler retries).
_CLAIM_ROUNDS = 3


class Claimer:
    """Takes runs for new attempts: each success is a Claim whose fence falls
    `fence_after` seconds after its write was sent (by `monotonic`)."""

    def __init__(
        self,
        store: RunStore,
        writes: ClaimWrites,
        *,
        cache: CompletedRunCache,
        fence_after: float,
        settle_seconds: float,
        monotonic: Callable[[], float],
    ) -> None:
        self._store = store
        self._writes = writes
        self._cache = cache
        self._fence_after = fence_after
        # How long to keep asking the store what became of a write whose outcome is unknown.
        self._settle = settle_seconds
        self._monotonic = monotonic

    def claim(self, key: RunKey, answer_within: float | None = None) -> Claim | Delivery:
        """Claim the run for a new attempt, or say why not (a Delivery to answer with).

        Raises StoreUnavailable only when nothing of this attempt's can run (at most its
        fence is left in the store, which counts as absent), or the store stayed
        unreachable for the settle time: then a claim may remain, bounded by the lease.
        """
        run_id = key.run_id
        attempt_id = uuid.uuid4().hex
        for _ in range(_CLAIM_ROUNDS):
            sent = self._monotonic()
            fresh = self._writes.record(key, attempt_id, 1)
            try:
                version = self._store.create(run_id, fresh)
                return self._claim(key, fresh, version, sent)
            except RecordExists:
                stored = self._store.get(run_id)
            except StoreUnavailable:
                # The create may have landed with its reply lost: left alone, that phantom
                # claim would answer 409 to every retry for a whole lease. Find out first,
                # for as long as that claim could be used (its fence time).
                stored = self._resolve(run_id, sent, answer_within)
                if stored is None:
                    # Nothing landed yet, but the create may still be in flight: fence the
                    # run's ID so it never can, and learn what holds it if it did.
                    stored = self._fence(key, attempt_id, sent, answer_within)
                if stored is None:
                    raise  # nothing landed, and now none can: the 5xx blocks no retry
            if stored is None:
                continue  # released or deleted between our create and read: try again
            if stored.record.attempt_id == attempt_id:
                # Our create landed though its reply was lost: this attempt holds the run.
                return self._adopt(key, attempt_id, stored, sent, None)
            decided = self._judge(key, attempt_id, stored, answer_within)
            if decided is not None:
                return decided
        return Delivery(Outcome.IN_PROGRESS, run_id, detail="record kept changing; retry")

    def _judge(
        self, key: RunKey, attempt_id: str, stored: StoredRun, answer_within: float | None,
    ) -> Claim | Delivery | None:
        run_id = key.run_id
        record = stored.record
        unfinished = record.unfinished_attempts
        previous: RunRecord | None = record
        if record.is_fence:
            # Nothing ran under it: as if absent. Kept as `previous`: a claim given back
            # (dedup/overlap.py) restores the fence, which a create in flight may still meet.
            attempts, unfinished = 1, ()
        elif stored.past_expiry:
            previous = None
            attempts, unfinished = 1, ()  # a leftover the TTL has not deleted yet: a new life
        elif record.status is RunStatus.COMPLETED:
            lives = (record.expire_at - stored.read_time).total_seconds()
            self._cache.put(run_id, record.result_json, lives)
            return Delivery(
                Outcome.DUPLICATE, run_id, record.attempt_id, record.attempts, record.result_json
            )
        elif record.status is RunStatus.SKIPPED:
            # Final (overlap: forbid): it did not run when its time came, and does not now.
            return Delivery(Outcome.SKIPPED, run_id, record.attempt_id, record.attempts,
                            detail=f"skipped: run {record.blocked_by} of the job held a claim")
        elif record.status is RunStatus.FAILED and record.permanent:
            # Final: a late retry or a duplicate must not start what was refused for good
            # (a re-run is another generation, another record). Not cached: the cache
            # answers `duplicate`, which would count the run as done.
            return Delivery(
                Outcome.FAILED_PERMANENT, run_id, record.attempt_id, record.attempts,
                record.result_json, detail=record.error,
            )
        elif record.status is RunStatus.FAILED:
            attempts = record.attempts + 1  # a failed attempt: the retry runs at once
        elif not stored.lease_expired:
            return Delivery(Outcome.IN_PROGRESS, run_id, record.attempt_id, record.attempts)
        else:
            # The holder stopped without recording how its attempt ended (crashed, or its
            # job ran and the completion could not be recorded): take over, and say so.
            attempts = record.attempts + 1
            unfinished = (*unfinished, record.attempts)
        sent = self._monotonic()
        takeover = self._writes.record(key, attempt_id, attempts, unfinished_attempts=unfinished)
        try:
            version = self._store.replace(run_id, takeover, stored.version)
        except RecordChanged:
            return None  # someone else moved first: look again
        except StoreUnavailable:
            now = self._resolve(run_id, sent, answer_within)
            if now is not None and now.version == stored.version:
                # Not landed yet, but the takeover (guarded by this very version) may still
                # be in flight: move the version on, the record meaning what it did.
                now = self._move_on(run_id, now, sent, answer_within)
                if now is None:
                    raise  # our takeover did not land, and now cannot: the 5xx blocks nothing
            if now is not None and now.record.attempt_id == attempt_id:
                return self._adopt(key, attempt_id, now, sent, previous)
            return None  # it moved (or went): look again
        return self._claim(key, takeover, version, sent, previous)

    def _claim(
        self, key: RunKey, record: RunRecord, version: datetime, sent: float,
        previous: RunRecord | None = None,
    ) -> Claim:
        """This attempt's claim on `record`, which the store holds at `version`."""
        return Claim(
            key, key.run_id, record.attempt_id, record.attempts, version, sent,
            self._fence_after, self._monotonic, claimed_at=record.claimed_at,
            unfinished_attempts=record.unfinished_attempts, previous=previous, record=record,
        )

    def _adopt(self, key: RunKey, attempt_id: str, stored: StoredRun, sent: float,
               previous: RunRecord | None) -> Claim:
        """This attempt's claim, found by reading after its write's reply was lost. Learnt
        too late to use (its fence time has passed), it is released, so the retry claims
        the run at once, and the attempt answers a 5xx: nothing ran."""
        claim = self._claim(key, stored.record, stored.version, sent, previous)
        if claim.lost.is_set():
            self._finish_late(claim)
            raise StoreUnavailable(
                "the claim's outcome was learnt after its fence time: released, nothing ran")
        return claim

    def _finish_late(self, claim: Claim) -> None:
        """Release a claim learnt too late to use (one attempt; a failure leaves it to the
        lease, which lapses a fence margin after its fence time)."""
        with contextlib.suppress(StoreUnavailable):
            self._writes.release(claim, "claim outcome unknown until its fence time; nothing ran")

    def _resolve(
        self, run_id: str, sent: float, answer_within: float | None
    ) -> StoredRun | None:
        """Read the record after a claiming write (sent at `sent`) whose outcome is unknown,
        until the store answers or the claim that write may have made is fenced: a 5xx
        before that could leave a usable phantom behind. But the caller must still get an
        answer: at most `answer_within` seconds after `sent` (the delivery's attempt
        deadline, less a store budget to answer in; None: the settle time only), and at
        least the settle time. StoreUnavailable if the store never answered."""
        return retry_unavailable(lambda: self._store.get(run_id),
                                 self._settle_until(sent, answer_within), self._monotonic)

    def _settle_until(self, sent: float, answer_within: float | None) -> float:
        """When to stop settling a claiming write sent at `sent` (see _resolve)."""
        # An unknown deadline: the settle time alone, as before.
        fenced = sent + self._fence_after
        until = sent if answer_within is None else min(fenced, sent + answer_within)
        return max(until, self._monotonic() + self._settle)

    def _move_on(
        self, run_id: str, unchanged: StoredRun, sent: float, answer_within: float | None
    ) -> StoredRun | None:
        """_fence for a takeover whose outcome is unknown, after a read found the record
        `unchanged`: give it a new version, guarded by the one read, so the takeover in
        flight (guarded by it too) fails if it lands later. What the record says stays, for
        every reader: a lapsed claim is restored lapsed (lease 0, as the overlap gate gives
        one back), anything else is renewed (a new version, nothing else changed). None:
        moved on. Otherwise the record found at a newer version (this attempt's takeover,
        landed first; or another's move), for the caller to judge. StoreUnavailable if the
        store never answered (then the lease bounds a takeover that lands late)."""
        record = unchanged.record

        def move_on() -> StoredRun | None:
            try:
                if record.status is RunStatus.IN_PROGRESS and record.lease_seconds > 0:
                    self._store.replace(run_id, replace(record, lease_seconds=0.0),
                                        unchanged.version, record)
                else:
                    self._store.renew(run_id, record.expire_at, unchanged.version)
                return None
            except RecordChanged:
                return self._store.get(run_id)  # moved: by whom, the caller judges

        return retry_unavailable(move_on, self._settle_until(sent, answer_within),
                                 self._monotonic)

    def _fence(
        self, key: RunKey, attempt_id: str, sent: float, answer_within: float | None
    ) -> StoredRun | None:
        """Make "this attempt's create never lands" true, after a read found no record: a
        read cannot prove that a create still in flight will not commit later, as a live
        claim of an attempt that answered 5xx (409 to every retry for a lease). So the
        run's ID is taken, create-if-absent, by this attempt's fence (RunRecord.fence_of),
        which every reader counts as absent: the late create meets it and fails, and a
        retry claims over it at once (a watchdog's delivery, a catch-up or re-run, is
        delivered again: it is no failed run). None: the fence holds the ID. Otherwise the
        record found there, for the caller to judge as after a conflicting create: this
        attempt's own claim (its create landed first: adopted), or a rival's record (a
        rival's fence included). StoreUnavailable if the store never answered (then the
        lease bounds a claim that lands late, as when no read got through)."""
        run_id = key.run_id
        fence = self._writes.fence(key, attempt_id)

        def write_fence() -> StoredRun | None:
            for _ in range(_CLAIM_ROUNDS):
                try:
                    self._store.create(run_id, fence)
                    return None
                except RecordExists:
                    found = self._store.get(run_id)
                if found is None:
                    continue  # deleted between our create and read (a give-back): again
                if found.record.attempt_id == attempt_id and found.record.is_fence:
                    return None  # our own fence, landed with its reply lost
                return found
            raise StoreUnavailable(f"run {run_id}: the record kept changing under the fence")

        return retry_unavailable(write_fence, self._settle_until(sent, answer_within),
                                 self._monotonic)

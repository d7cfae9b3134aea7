"""Claiming a run for a new attempt: create its record, or judge the one already there
(completed: a duplicate; skipped or failed for good: final; a live lease: 409; failed, or
its holder gone past its lease: taken over at once), and find out what became of a
claiming write whose outcome is unknown.

A claim whose reply was lost may have landed: left alone, that phantom claim would answer
409 to every retry for a whole lease. So before a 5xx the attempt looks the record up by
its `attempt_id`, until the store answers or that claim's own fence time has passed: found
in time, adopted and run; learnt too late, released; absent, the 5xx leaves nothing
behind. The claim and the writes under it are dedup/claim.py.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
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

        Raises StoreUnavailable only when nothing of this attempt's is left in the store
        (or the store stayed unreachable for the settle time: then a claim may remain,
        bounded by the lease).
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
                    raise  # nothing landed: the 5xx leaves nothing behind
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
        if stored.past_expiry:
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
            if now is not None and now.record.attempt_id == attempt_id:
                return self._adopt(key, attempt_id, now, sent, previous)
            if now is not None and now.version == stored.version:
                raise  # our takeover did not land: the record is as the crash left it
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
        # An unknown deadline: the settle time alone, as before.
        fenced = sent + self._fence_after
        until = sent if answer_within is None else min(fenced, sent + answer_within)
        until = max(until, self._monotonic() + self._settle)
        return retry_unavailable(lambda: self._store.get(run_id), until, self._monotonic)

"""The dedup protocol (SPEC section 2), independent of HTTP and of Firestore.

claim -> run the job -> complete (success) or release (failure). Every step is one
conditional write or read against a RunStore; leases are judged by the store's clock.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from dedup.cache import CompletedRunCache
from dedup.keys import RunKey
from dedup.store import (
    RecordChanged,
    RecordExists,
    RunRecord,
    RunStatus,
    RunStore,
    StoredRun,
    StoreUnavailable,
)

log = logging.getLogger(__name__)

# Results are replayed to duplicates from the record; keep them well under Firestore's
# 1 MiB document limit. A larger result is dropped (the run still counts as completed).
MAX_RESULT_BYTES = 16 * 1024
# How often a claim/read race is retried before answering 409 (which Scheduler retries).
_CLAIM_ROUNDS = 3


@dataclass(frozen=True)
class RunContext:
    """What a job's logic is told about the run it executes."""

    run_id: str
    job_name: str
    schedule_time: datetime  # aware, UTC
    attempt_id: str
    attempt: int
    project: str
    location: str
    body: bytes
    headers: Mapping[str, str]  # lower-cased names
    # Set when this attempt lost its claim (its lease expired and another attempt took
    # over): a long job should check it before each state-changing step.
    claim_lost: threading.Event = field(default_factory=threading.Event)
    deduplicated: bool = True


Job = Callable[[RunContext], Any]


class Outcome(StrEnum):
    COMPLETED = "completed"  # this attempt ran the job and recorded it
    DUPLICATE = "duplicate"  # the run had completed: not run again
    IN_PROGRESS = "in_progress"  # another attempt holds a live lease
    FAILED = "failed"  # the job raised; the claim was released for a retry
    STORE_UNAVAILABLE = "store_unavailable"  # could not claim: nothing ran
    # The job ran, but recording it failed (store outage) or another attempt had taken
    # the claim over: answered as done so that Scheduler does not run it again.
    COMPLETED_UNRECORDED = "completed_unrecorded"
    CLAIM_LOST = "claim_lost"
    UNKEYED = "unkeyed"  # no schedule time and the setting says run without dedup


@dataclass(frozen=True)
class Delivery:
    """What happened to one delivery, for the reply and the log line."""

    outcome: Outcome
    run_id: str
    attempt_id: str | None = None
    attempt: int | None = None
    result_json: str | None = None
    detail: str | None = None
    from_cache: bool = False


@dataclass
class Claim:
    """This attempt's hold on a run: valid while the record is still at `version`."""

    key: RunKey
    run_id: str
    attempt_id: str
    attempt: int
    version: datetime
    lost: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Deduplicator:
    """Runs each scheduled run's job at most once per completion, across instances."""

    def __init__(
        self,
        store: RunStore,
        *,
        lease_seconds: float,
        retention_seconds: float,
        cache: CompletedRunCache,
        heartbeat_seconds: float | None = None,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._store = store
        self._lease = lease_seconds
        self._retention = retention_seconds
        self._cache = cache
        # Renew three times per lease, so two renewals may fail before the lease lapses.
        self._heartbeat = heartbeat_seconds if heartbeat_seconds is not None else lease_seconds / 3
        # Only for `expire_at` (the TTL deadline, days away): leases never use it.
        self._wall_clock = wall_clock

    # -- the three protocol steps ------------------------------------------------------

    def claim(self, key: RunKey) -> Claim | Delivery:
        """Claim the run for a new attempt, or say why not (a Delivery to answer with)."""
        run_id = key.run_id
        attempt_id = uuid.uuid4().hex
        for _ in range(_CLAIM_ROUNDS):
            fresh = self._record(key, attempt_id, attempts=1)
            try:
                version = self._store.create(run_id, fresh)
                return Claim(key, run_id, attempt_id, 1, version)
            except RecordExists:
                pass
            stored = self._store.get(run_id)
            if stored is None:
                continue  # released or deleted between our create and read: try again
            if stored.record.attempt_id == attempt_id:
                # Our create landed but its reply was lost and the client retried it.
                return Claim(key, run_id, attempt_id, stored.record.attempts, stored.version)
            decided = self._judge(key, attempt_id, stored)
            if decided is not None:
                return decided
        return Delivery(Outcome.IN_PROGRESS, run_id, detail="record kept changing; retry")

    def _judge(self, key: RunKey, attempt_id: str, stored: StoredRun) -> Claim | Delivery | None:
        run_id = key.run_id
        record = stored.record
        if stored.past_expiry:
            attempts = 1  # a leftover the TTL has not deleted yet: a new life
        elif record.status is RunStatus.COMPLETED:
            self._cache.put(run_id, record.result_json)
            return Delivery(
                Outcome.DUPLICATE, run_id, record.attempt_id, record.attempts, record.result_json
            )
        elif not stored.lease_expired:
            return Delivery(Outcome.IN_PROGRESS, run_id, record.attempt_id, record.attempts)
        else:
            attempts = record.attempts + 1  # the holder crashed: take over
        try:
            version = self._store.replace(
                run_id, self._record(key, attempt_id, attempts), stored.version
            )
        except RecordChanged:
            return None  # someone else moved first: look again
        return Claim(key, run_id, attempt_id, attempts, version)

    def complete(self, claim: Claim, result_json: str | None) -> bool:
        """Mark the run completed if this attempt still holds it. False: claim lost."""
        done = replace(
            self._record(claim.key, claim.attempt_id, claim.attempt),
            status=RunStatus.COMPLETED,
            result_json=result_json,
        )
        with claim.lock:
            try:
                claim.version = self._store.replace(claim.run_id, done, claim.version)
            except RecordChanged:
                if not self._landed(claim, RunStatus.COMPLETED):
                    claim.lost.set()
                    return False
        self._cache.put(claim.run_id, result_json)
        return True

    def release(self, claim: Claim) -> bool:
        """Delete the claim so a retry runs at once. False: another attempt holds it now."""
        with claim.lock:
            try:
                self._store.delete(claim.run_id, claim.version)
            except RecordChanged:
                stored = self._store.get(claim.run_id)
                if stored is not None and stored.record.attempt_id != claim.attempt_id:
                    claim.lost.set()
                    return False
        return True

    def renew(self, claim: Claim) -> bool:
        """Extend the lease; False once the claim is lost."""
        with claim.lock:
            if claim.lost.is_set():
                return False
            try:
                claim.version = self._store.renew(claim.run_id, claim.version)
            except RecordChanged:
                if not self._landed(claim, RunStatus.IN_PROGRESS):
                    claim.lost.set()
                    return False
        return True

    def _landed(self, claim: Claim, status: RunStatus) -> bool:
        """After a precondition failure: did our own write land (a retried RPC)?"""
        stored = self._store.get(claim.run_id)
        if (
            stored is not None
            and stored.record.attempt_id == claim.attempt_id
            and stored.record.status is status
        ):
            claim.version = stored.version
            return True
        return False

    def _record(self, key: RunKey, attempt_id: str, attempts: int) -> RunRecord:
        expire_at = self._wall_clock() + timedelta(seconds=self._retention)
        return RunRecord.claim(key, attempt_id, attempts, self._lease, expire_at)

    # -- one delivery, end to end ------------------------------------------------------

    def run(self, key: RunKey, job: Job, body: bytes, headers: Mapping[str, str]) -> Delivery:
        """Claim, run the job with a lease heartbeat, then complete or release."""
        run_id = key.run_id
        hit, cached = self._cache.get(run_id)
        if hit:
            return Delivery(Outcome.DUPLICATE, run_id, result_json=cached, from_cache=True)
        try:
            decision = self.claim(key)
        except StoreUnavailable as exc:
            return Delivery(Outcome.STORE_UNAVAILABLE, run_id, detail=str(exc))
        if isinstance(decision, Delivery):
            return decision
        claim = decision
        context = RunContext(
            run_id=run_id,
            job_name=key.job_id,
            schedule_time=key.schedule_time,
            attempt_id=claim.attempt_id,
            attempt=claim.attempt,
            project=key.project,
            location=key.location,
            body=body,
            headers=headers,
            claim_lost=claim.lost,
        )
        base = Delivery(Outcome.COMPLETED, run_id, claim.attempt_id, claim.attempt)
        try:
            with _Heartbeat(self, claim, self._heartbeat):
                result = job(context)
        except Exception as exc:
            log.exception("job %s failed for run %s", key.job_id, run_id)
            try:
                self.release(claim)
            except StoreUnavailable as store_exc:
                # The claim stays until its lease lapses; then a retry takes it over.
                return replace(base, outcome=Outcome.FAILED, detail=f"{exc!r}; {store_exc}")
            return replace(base, outcome=Outcome.FAILED, detail=repr(exc))
        result_json, note = encode_result(result)
        try:
            held = self.complete(claim, result_json)
        except StoreUnavailable as exc:
            # The job ran: a 5xx would make Scheduler retry and, once the lease lapses,
            # run it a second time. Answer as done and log the failure loudly instead.
            return replace(
                base, outcome=Outcome.COMPLETED_UNRECORDED, result_json=result_json,
                detail=str(exc),
            )
        if not held:
            return replace(
                base, outcome=Outcome.CLAIM_LOST, result_json=result_json,
                detail="lease expired and another attempt took the run over",
            )
        return replace(base, result_json=result_json, detail=note)


def encode_result(result: Any) -> tuple[str | None, str | None]:
    """The job's result as JSON for the record, or (None, why it was dropped)."""
    if result is None:
        return None, None
    try:
        text = json.dumps(result, separators=(",", ":"), sort_keys=True)
    except (TypeError, ValueError) as exc:
        return None, f"result dropped: not JSON-serialisable ({exc})"
    if len(text.encode()) > MAX_RESULT_BYTES:
        return None, f"result dropped: larger than {MAX_RESULT_BYTES} bytes"
    return text, None


class _Heartbeat:
    """Renews the lease in the background while the job runs."""

    def __init__(self, dedup: Deduplicator, claim: Claim, interval: float) -> None:
        self._dedup = dedup
        self._claim = claim
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lease-heartbeat", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                if not self._dedup.renew(self._claim):
                    log.warning("run %s: claim lost while the job ran", self._claim.run_id)
                    return
            except StoreUnavailable as exc:
                # Keep trying: the lease still has two intervals left.
                log.warning("run %s: lease renewal failed: %s", self._claim.run_id, exc)

"""The dedup protocol: each run's job runs once; independent of HTTP and of Firestore.

claim -> run the job while a heartbeat renews the claim -> complete (success) or
release (failure: the record is kept, marked `failed`, and the retry claims it at once).
A job that raises PermanentFailure (nothing ran, and no retry could succeed) is recorded
`failed` and `permanent` and answered as done, so Scheduler stops: that record is final.
Every step is one conditional write or read against a RunStore; leases are judged by the
store's clock, and the holder fences itself by its own monotonic clock before the store
would let a rival in.

Any write can land while its reply is lost or late, so no step trusts a failure report:
- a claim whose outcome is unknown is looked up by its `attempt_id` before a 5xx is sent,
  until the store answers or that claim's own fence time has passed (then adopted, released
  or known absent), so a 5xx means nothing ran and nothing usable blocks the retry;
- a guarded write that finds the record changed reads it: still this attempt's record at
  another version means one of its own writes landed unseen, so it adopts that version;
- once the job has run, recording the outcome is retried while the claim is still held;
  nothing after the job returned becomes a 5xx.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, TypeVar

from dedup.cache import CompletedRunCache
from dedup.heartbeat import HEARTBEATS, Heartbeats
from dedup.keys import OVERLAP_ALLOW, OVERLAP_FORBID, RunKey
from dedup.overlap import UNKNOWN, Answer, Clear, OverlapGate, is_delivery
from dedup.store import (
    MAX_ERROR_CHARS,
    RecordChanged,
    RecordExists,
    RunRecord,
    RunStatus,
    RunStore,
    StoredRun,
    StoreUnavailable,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

# Results are replayed to duplicates from the record; keep them well under Firestore's
# 1 MiB document limit. A larger result is dropped (the run still counts as completed).
MAX_RESULT_BYTES = 16 * 1024
# How often a claim/read race is retried before answering 409 (which Scheduler retries).
_CLAIM_ROUNDS = 3
# A guarded write adopts its own unseen writes at most this often: only this attempt
# writes records with its attempt_id, so one adoption is the norm.
_ADOPT_ROUNDS = 3
# Backoff between tries of a step whose outcome must be known (seconds).
_FIRST_PAUSE, _MAX_PAUSE = 0.1, 2.0


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
    # Set when this attempt may no longer hold its claim (no renewal landed for most of a
    # lease, or another attempt took over): a long job checks it before each
    # state-changing step and stops (raises) once it is set.
    claim_lost: threading.Event = field(default_factory=threading.Event)
    deduplicated: bool = True
    # A forced run ("Run now" in the console, `gcloud scheduler jobs run`): deduplicated
    # under its own run_id; the scheduled run of `schedule_time` still runs at its time.
    forced: bool = False
    # A re-run (`make rerun`): generation g > 0 is the g-th extra execution of this run.
    generation: int = 0


Job = Callable[[RunContext], Any]


class PermanentFailure(Exception):
    """Raised by a job that did nothing and cannot succeed on a retry (the proxy: the
    downstream refused the start with a 403 or 404). The run is recorded `failed` and
    `permanent` with the message (one line) and `result` (small JSON, replayed to later
    deliveries), and answered 200 (Outcome.FAILED_PERMANENT) so Scheduler stops retrying."""

    def __init__(self, message: str, result: Any = None) -> None:
        super().__init__(message)
        self.result = result


class Outcome(StrEnum):
    COMPLETED = "completed"  # this attempt ran the job and recorded it
    DUPLICATE = "duplicate"  # the run had completed: not run again
    IN_PROGRESS = "in_progress"  # another attempt holds a live lease
    FAILED = "failed"  # the job raised; the record is marked failed, a retry runs at once
    # The job raised PermanentFailure, or the run's record is such a failure: nothing ran
    # and nothing will; answered 200 (a retry could not succeed) with the failure replayed.
    FAILED_PERMANENT = "failed_permanent"
    STORE_UNAVAILABLE = "store_unavailable"  # could not claim: nothing ran
    # The job ran, but recording it failed for longer than the lease (store outage) or
    # failed otherwise: answered as done so that Scheduler does not run it again.
    COMPLETED_UNRECORDED = "completed_unrecorded"
    CLAIM_LOST = "claim_lost"
    UNKEYED = "unkeyed"  # no schedule time and the setting says run without dedup
    # overlap: forbid: another run of the job held a live claim, so this one did not run
    # (recorded `skipped`, final); also a run replaced by a newer one (overlap: replace).
    SKIPPED = "skipped"


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
    duration_seconds: float | None = None  # how long this attempt's job ran (if it ran)


class ClaimLost(threading.Event):
    """`claim_lost` as the job sees it. Set when another attempt took the run over, and
    also, with no timer thread, once the claim's fence time (monotonic) has passed: the
    holder fences itself by its own clock, before the store would let a rival in."""

    def __init__(self, fence_at: Callable[[], float], monotonic: Callable[[], float]) -> None:
        super().__init__()
        self._fence_at = fence_at
        self._now = monotonic

    def is_set(self) -> bool:
        return super().is_set() or self._now() >= self._fence_at()

    def wait(self, timeout: float | None = None) -> bool:
        give_up = None if timeout is None else self._now() + timeout
        while not self.is_set():
            left = self._fence_at() - self._now()  # the fence may move while we wait
            if give_up is not None:
                left = min(left, give_up - self._now())
            if left <= 0:
                break
            super().wait(left)
        return self.is_set()


@dataclass
class Claim:
    """This attempt's hold on a run: valid while the record is still at `version`."""

    key: RunKey
    run_id: str
    attempt_id: str
    attempt: int
    version: datetime
    # Monotonic time at which this attempt's last write known to have landed was sent:
    # the store's lease runs from a later instant, so a fence judged from here is early.
    held_since: float
    # The holder fences itself this long after `held_since` (lease minus a margin).
    fence_after: float
    monotonic: Callable[[], float] = time.monotonic
    lock: threading.Lock = field(default_factory=threading.Lock)
    claimed_at: datetime | None = None  # as written in the record (kept by every write)
    # The earlier attempts this run's claims took over unfinished (RunRecord's field),
    # kept by every write of this attempt.
    unfinished_attempts: tuple[int, ...] = ()
    # The record this claim replaced (a takeover of a failed run or a lapsed claim); None:
    # it created the record (or replaced a leftover past its expiry, which counts as
    # absent). What the overlap gate restores when the claim must leave no outcome.
    previous: RunRecord | None = None
    # The record the store holds at `version`, as this attempt knows it (written or read
    # at that version); None: unknown. An outcome written over it sends only what changed.
    record: RunRecord | None = None
    lost: ClaimLost = field(init=False)

    def __post_init__(self) -> None:
        self.lost = ClaimLost(self.fence_at, self.monotonic)

    def fence_at(self) -> float:
        return self.held_since + self.fence_after


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
        fence_margin_seconds: float | None = None,
        settle_seconds: float = 10.0,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
        heartbeats: Heartbeats = HEARTBEATS,
        overlap: OverlapGate | None = None,
    ) -> None:
        self._store = store
        # Jobs whose overlap is not `allow` (dedup/overlap.py); None: only `allow` served.
        self._overlap = overlap
        self._lease = lease_seconds
        self._retention = retention_seconds
        self._cache = cache
        # Renew three times per lease, so two renewals may fail before the claim is fenced.
        self._heartbeat = heartbeat_seconds if heartbeat_seconds is not None else lease_seconds / 3
        # The holder tells its job to stop this long before a rival could take over.
        margin = fence_margin_seconds if fence_margin_seconds is not None else lease_seconds / 6
        self._fence_after = lease_seconds - margin
        # How long to keep asking the store what became of a write whose outcome is unknown.
        self._settle = settle_seconds
        # Only for `expire_at` (the TTL deadline, days away): leases never use it.
        self._wall_clock = wall_clock
        self._monotonic = monotonic
        self._heartbeats = heartbeats

    # -- the protocol steps ------------------------------------------------------------

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
            fresh = self._record(key, attempt_id, 1)
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
        takeover = self._record(key, attempt_id, attempts, unfinished_attempts=unfinished)
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

    def complete(
        self, claim: Claim, result_json: str | None, duration_seconds: float | None = None
    ) -> bool:
        """Mark the run completed if this attempt still holds it. False: claim lost."""
        done = replace(
            self._record(claim.key, claim.attempt_id, claim.attempt, claim.claimed_at,
                         claim.unfinished_attempts),
            status=RunStatus.COMPLETED,
            result_json=result_json,
            finished_at=self._wall_clock(),
            duration_seconds=duration_seconds,
        )
        held = self._write_outcome(claim, done)
        if held:
            self._cache.put(claim.run_id, result_json, self._retention)
        return held

    def release(
        self, claim: Claim, error: str = "", *, permanent: bool = False,
        result_json: str | None = None,
    ) -> bool:
        """Mark the run `failed` (kept for the watchdog and people) so a retry claims it at
        once, or for good when `permanent` (with `result_json` to replay). False: another
        attempt holds it now."""
        failed = replace(
            self._record(claim.key, claim.attempt_id, claim.attempt, claim.claimed_at,
                         claim.unfinished_attempts),
            status=RunStatus.FAILED,
            failed_at=self._wall_clock(),
            error=summarize_error(error),
            permanent=permanent,
            result_json=result_json,
        )
        return self._write_outcome(claim, failed)

    def _write_outcome(self, claim: Claim, record: RunRecord) -> bool:
        """Replace the claim with its outcome (completed or failed), guarded; a retry of a
        write that landed finds this attempt's record already in that status."""
        def write(version: datetime) -> tuple[datetime, RunRecord]:
            return self._store.replace(claim.run_id, record, version, claim.record), record

        return self._guarded_write(
            claim, write, already_done=lambda stored: self._is_ours(claim, stored, record.status),
        )

    def renew(self, claim: Claim) -> bool:
        """Extend the lease and the record's expiry; False once the claim is lost."""
        if claim.lost.is_set():
            return False
        expire_at = self._expire_at()

        def write(version: datetime) -> tuple[datetime, RunRecord | None]:
            renewed = self._store.renew(claim.run_id, expire_at, version)
            known = claim.record
            return renewed, None if known is None else replace(known, expire_at=expire_at)

        return self._guarded_write(
            claim, write,
            already_done=lambda stored: False,  # a renewal is only known by landing anew
            yields_to_replacement=True,
        )

    def _guarded_write(
        self,
        claim: Claim,
        write: Callable[[datetime], tuple[datetime, RunRecord | None]],
        already_done: Callable[[StoredRun | None], bool],
        yields_to_replacement: bool = False,
    ) -> bool:
        """One write guarded by the claim's version, with its own unseen writes accounted
        for. `write(version)` returns the new version and the record the store then holds
        (None: unknown). False: another attempt holds the run (the claim is marked lost).
        StoreUnavailable: unknown. The claim's `version` and `record` move together."""
        with claim.lock:
            for _ in range(_ADOPT_ROUNDS):
                sent = self._monotonic()
                try:
                    version, written = write(claim.version)
                except RecordChanged:
                    stored = self._store.get(claim.run_id)
                    if already_done(stored):
                        # This very write landed and the client's retry of it conflicted.
                        if stored is not None:
                            claim.version, claim.record = stored.version, stored.record
                        return True
                    if stored is None or stored.record.attempt_id != claim.attempt_id or (
                            yields_to_replacement and stored.record.replaced_by is not None):
                        # Taken over, or (a renewal) a newer run of the job asked this one
                        # to stop (overlap: replace): the job is told through claim_lost.
                        claim.lost.set()
                        return False
                    # Still ours, at a version we never saw: an earlier write of ours (a
                    # renewal reported as failed) landed. Adopt it and write again.
                    claim.version, claim.record = stored.version, stored.record
                    continue
                claim.version, claim.record = version, written
                claim.held_since = sent
                return True
        raise StoreUnavailable(f"run {claim.run_id}: the record kept moving under this attempt")

    def _is_ours(self, claim: Claim, stored: StoredRun | None, status: RunStatus) -> bool:
        return (
            stored is not None
            and stored.record.attempt_id == claim.attempt_id
            and stored.record.status is status
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
            self.release(claim, "claim outcome unknown until its fence time; nothing ran")

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
        return _retry_unavailable(lambda: self._store.get(run_id), until, self._monotonic)

    def _finish(self, claim: Claim, step: Callable[[], bool]) -> bool:
        """Retry a finishing write (complete or release) while this attempt still holds its
        lease by its own clock: a stall a little longer than one store timeout must not
        leave a job that ran unrecorded, nor a failed run blocked for a lease."""
        return _retry_unavailable(step, claim.fence_at(), self._monotonic)

    def _expire_at(self) -> datetime:
        return self._wall_clock() + timedelta(seconds=self._retention)

    def _record(
        self, key: RunKey, attempt_id: str, attempts: int, claimed_at: datetime | None = None,
        unfinished_attempts: tuple[int, ...] = (),
    ) -> RunRecord:
        return RunRecord.claim(
            key, attempt_id, attempts, self._lease, self._expire_at(),
            claimed_at or self._wall_clock(), unfinished_attempts,
        )

    # -- one delivery, end to end ------------------------------------------------------

    def run(
        self, key: RunKey, job: Job, body: bytes, headers: Mapping[str, str],
        answer_within: float | None = None, overlap: str = OVERLAP_ALLOW,
    ) -> Delivery:
        """Claim, run the job while the heartbeat renews, then complete or release.
        `answer_within`: how long a claim whose outcome is unknown may be resolved before
        the caller must be answered (see `_resolve`). `overlap`: the job's policy towards
        its other runs (dedup/overlap.py); `allow` reads and writes nothing more."""
        run_id = key.run_id
        hit, cached = self._cache.get(run_id)
        if hit:
            return Delivery(Outcome.DUPLICATE, run_id, result_json=cached, from_cache=True)
        clear: Clear | None = None
        if overlap != OVERLAP_ALLOW:
            if self._overlap is None:
                return Delivery(Outcome.STORE_UNAVAILABLE, run_id,
                                detail=f"overlap {overlap!r} needs a latest-run store")
            try:
                entered = self._overlap.enter(key, overlap)
            except StoreUnavailable as exc:
                return Delivery(Outcome.STORE_UNAVAILABLE, run_id, detail=str(exc))
            if isinstance(entered, Answer):
                return Delivery(Outcome(entered.outcome), run_id, entered.attempt_id,
                                entered.attempts, entered.result_json, entered.detail or None)
            clear = entered
        try:
            decision = self.claim(key, answer_within)
        except StoreUnavailable as exc:
            return Delivery(Outcome.STORE_UNAVAILABLE, run_id, detail=str(exc))
        if isinstance(decision, Delivery):
            return decision
        claim = decision
        if clear is not None:
            refused = self._take_job(key, claim, clear, overlap, is_delivery(headers))
            if refused is not None:
                return refused
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
            forced=key.forced,
            generation=key.generation,
        )
        base = Delivery(Outcome.COMPLETED, run_id, claim.attempt_id, claim.attempt)
        started = self._monotonic()
        try:
            with self._heartbeats.keep(
                lambda: self.renew(claim), lambda: claim.held_since, self._heartbeat,
                f"run {run_id}",
            ):
                result = job(context)
        except PermanentFailure as failure:
            return self._record_permanent_failure(
                claim, base, failure, self._monotonic() - started
            )
        except Exception as exc:
            log.exception("job %s failed for run %s", key.job_id, run_id)
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            base = replace(base, duration_seconds=round(self._monotonic() - started, 3))
            try:
                self._finish(claim, lambda: self.release(claim, error))
            except Exception as store_exc:
                # The claim stays until its lease lapses; then a retry takes it over.
                return replace(base, outcome=Outcome.FAILED, detail=f"{exc!r}; {store_exc}")
            return replace(base, outcome=Outcome.FAILED, detail=repr(exc))
        return self._record_completion(claim, base, result, self._monotonic() - started)

    def _take_job(self, key: RunKey, claim: Claim, clear: Clear, overlap: str,
                  delivered: bool) -> Delivery | None:
        """Make this claim the job's latest run before the job runs (dedup/overlap.py);
        a Delivery when it must run nothing: another run took the job first, or the write's
        outcome is unknown. A run that had no record and lost to a scheduled run under
        `forbid` is recorded skipped; otherwise the claim is given back (deleted, or the
        record it took over restored: no outcome is left, as nothing ran) and answered 409,
        or 500 when the write's outcome is unknown. `delivered`: a watchdog delivery."""
        assert self._overlap is not None
        base = Delivery(Outcome.IN_PROGRESS, key.run_id, claim.attempt_id, claim.attempt)
        try:
            first = self._overlap.take(key, claim.attempt_id, clear, delivered)
        except StoreUnavailable as exc:
            detail = f"the job's latest run could not be written ({exc}); nothing ran"
            try:
                self._finish(claim, lambda: self._give_back(claim))
            except StoreUnavailable as again:
                # The claim stays for one lease, as any claim the store would not take back.
                detail += f"; not given back ({again})"
            return replace(base, outcome=Outcome.STORE_UNAVAILABLE, detail=detail)
        if first is None:
            return None
        if (overlap == OVERLAP_FORBID and claim.previous is None and not first.delivered
                and first.run_id != UNKNOWN):  # an unknown winner may be a delivery: 409
            skipped = replace(self._overlap.skipped_record(key, first.run_id),
                              attempt_id=claim.attempt_id, attempts=claim.attempt)
            step = lambda: self._write_outcome(claim, skipped)  # noqa: E731
            outcome = Outcome.SKIPPED
        else:
            step = lambda: self._give_back(claim)  # noqa: E731
            outcome = Outcome.IN_PROGRESS
        try:
            held = self._finish(claim, step)
        except StoreUnavailable as exc:
            return replace(base, outcome=Outcome.STORE_UNAVAILABLE, detail=str(exc))
        return replace(base, outcome=outcome if held else Outcome.IN_PROGRESS,
                       detail=f"run {first.run_id} of the job took it first; nothing ran")

    def _give_back(self, claim: Claim) -> bool:
        """Undo this claim, guarded (OverlapGate.give_back): a retry of a give-back that
        landed finds the record gone or no longer this attempt's. True: given back."""
        assert self._overlap is not None
        gate = self._overlap

        def write(version: datetime) -> tuple[datetime, RunRecord | None]:
            written = gate.give_back(claim.run_id, claim.previous, version)
            # Given back: the record restored, or none (deleted).
            return (version, None) if written is None else (written, claim.previous)

        def done(stored: StoredRun | None) -> bool:
            return stored is None or stored.record.attempt_id != claim.attempt_id

        return self._guarded_write(claim, write, already_done=done)

    def _record_permanent_failure(
        self, claim: Claim, base: Delivery, failure: PermanentFailure, duration_seconds: float
    ) -> Delivery:
        """The job refused for good and ran nothing: recorded failed and permanent, then a
        200 so Scheduler stops. Unrecorded (store outage), a 500: nothing ran, so the
        retry is harmless, meets the same refusal and records it then."""
        log.error("job %s failed permanently for run %s: %s", claim.key.job_id, claim.run_id,
                  failure)
        result_json, _ = encode_result(failure.result)
        message = str(failure) or type(failure).__name__
        base = replace(
            base, duration_seconds=round(duration_seconds, 3), result_json=result_json,
            detail=summarize_error(message),
        )
        try:
            self._finish(claim, lambda: self.release(
                claim, message, permanent=True, result_json=result_json,
            ))
        except Exception as store_exc:
            return replace(
                base, outcome=Outcome.FAILED, detail=f"{message}; not recorded: {store_exc}"
            )
        return replace(base, outcome=Outcome.FAILED_PERMANENT)

    def _record_completion(
        self, claim: Claim, base: Delivery, result: Any, duration_seconds: float
    ) -> Delivery:
        """The job ran: whatever happens now, the answer is a 2xx (a 5xx would make
        Scheduler retry and, once the lease lapsed, run the job a second time)."""
        result_json, note = encode_result(result)
        duration = round(duration_seconds, 3)
        base = replace(base, duration_seconds=duration)
        try:
            held = self._finish(claim, lambda: self.complete(claim, result_json, duration))
        except Exception as exc:
            log.exception("run %s: the job ran but recording it failed", claim.run_id)
            return replace(
                base, outcome=Outcome.COMPLETED_UNRECORDED, result_json=result_json,
                detail=str(exc) or repr(exc),
            )
        if not held:
            return replace(
                base, outcome=Outcome.CLAIM_LOST, result_json=result_json,
                detail="lease expired and another attempt took the run over",
            )
        return replace(base, result_json=result_json, detail=note)


def _retry_unavailable(
    step: Callable[[], T], give_up_at: float, monotonic: Callable[[], float]
) -> T:
    """Run `step`, retrying StoreUnavailable with backoff until `give_up_at` (monotonic);
    always tried at least once."""
    pause = _FIRST_PAUSE
    while True:
        try:
            return step()
        except StoreUnavailable:
            if monotonic() + pause >= give_up_at:
                raise
        time.sleep(pause)
        pause = min(pause * 2, _MAX_PAUSE)


def summarize_error(error: str) -> str:
    """A failed record's `error`: one line (whitespace runs collapsed), at most
    MAX_ERROR_CHARS characters."""
    line = " ".join(error.split())
    if len(line) > MAX_ERROR_CHARS:
        line = line[: MAX_ERROR_CHARS - 1] + "…"
    return line


def encode_result(result: Any) -> tuple[str | None, str | None]:
    """The job's result as JSON for the record, or (None, why it was dropped). Never
    raises: it runs after the job, when an exception would turn into a second run."""
    if result is None:
        return None, None
    try:
        text = json.dumps(result, separators=(",", ":"), sort_keys=True)
        json.loads(text)  # replayed to duplicates by parsing it: it must parse back
    except Exception as exc:  # TypeError, ValueError, RecursionError (deep nesting), ...
        return None, f"result dropped: not JSON-serialisable ({type(exc).__name__}: {exc})"
    if len(text.encode()) > MAX_RESULT_BYTES:
        return None, f"result dropped: larger than {MAX_RESULT_BYTES} bytes"
    return text, None

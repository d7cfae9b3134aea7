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

The steps, one module per idea: dedup/claiming.py takes a run for an attempt (create, or
take over) and settles a claim whose outcome is unknown; dedup/claim.py holds the claim and
makes every guarded write under it (renew, complete, mark failed); this module runs one
delivery end to end (Deduplicator.run). What job code sees is dedup/run_context.py, what a
delivery came to dedup/outcomes.py; both are importable from here too, as they always were.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from dedup.business_runs import BusinessSchedule
from dedup.cache import CompletedRunCache
from dedup.claim import Claim, ClaimLost, ClaimWrites
from dedup.claiming import Claimer
from dedup.heartbeat import HEARTBEATS, Heartbeats
from dedup.keys import OVERLAP_ALLOW, OVERLAP_FORBID, RunKey
from dedup.outcomes import MAX_RESULT_BYTES, Delivery, Outcome, encode_result, summarize_error
from dedup.overlap import UNKNOWN, Answer, Clear, OverlapGate, is_delivery
from dedup.run_context import Job, PermanentFailure, RunContext
from dedup.store import MalformedRecord, RunRecord, RunStore, StoredRun, StoreUnavailable

# What job code and callers have always imported from here.
__all__ = [
    "MAX_RESULT_BYTES", "Claim", "ClaimLost", "Deduplicator", "Delivery", "Job", "Outcome",
    "PermanentFailure", "RunContext", "encode_result", "summarize_error",
]

log = logging.getLogger(__name__)


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
        # Jobs whose overlap is not `allow` (dedup/overlap.py); None: only `allow` served.
        self._overlap = overlap
        self._cache = cache
        # Renew three times per lease, so two renewals may fail before the claim is fenced.
        self._heartbeat = heartbeat_seconds if heartbeat_seconds is not None else lease_seconds / 3
        # The holder tells its job to stop this long before a rival could take over.
        margin = fence_margin_seconds if fence_margin_seconds is not None else lease_seconds / 6
        self._monotonic = monotonic
        self._heartbeats = heartbeats
        self._writes = ClaimWrites(
            store, lease_seconds=lease_seconds, retention_seconds=retention_seconds,
            cache=cache, wall_clock=wall_clock, monotonic=monotonic,
        )
        self._claimer = Claimer(
            store, self._writes, cache=cache, fence_after=lease_seconds - margin,
            settle_seconds=settle_seconds, monotonic=monotonic,
        )

    # -- the protocol steps (dedup/claiming.py, dedup/claim.py) --------------------------

    def claim(self, key: RunKey, answer_within: float | None = None) -> Claim | Delivery:
        """Claim the run for a new attempt, or say why not (a Delivery to answer with).

        Raises StoreUnavailable only when nothing of this attempt's can run (at most its
        fence is left in the store, which counts as absent), or the store stayed
        unreachable for the settle time: then a claim may remain, bounded by the lease.
        """
        return self._claimer.claim(key, answer_within)

    def complete(
        self, claim: Claim, result_json: str | None, duration_seconds: float | None = None
    ) -> bool:
        """Mark the run completed if this attempt still holds it. False: claim lost."""
        return self._writes.complete(claim, result_json, duration_seconds)

    def release(
        self, claim: Claim, error: str = "", *, permanent: bool = False,
        result_json: str | None = None,
    ) -> bool:
        """Mark the run `failed` so a retry claims it at once, or for good when `permanent`.
        False: another attempt holds it now."""
        return self._writes.release(claim, error, permanent=permanent, result_json=result_json)

    def renew(self, claim: Claim) -> bool:
        """Extend the lease and the record's expiry; False once the claim is lost."""
        return self._writes.renew(claim)

    # -- one delivery, end to end ------------------------------------------------------

    def run(
        self, key: RunKey, job: Job, body: bytes, headers: Mapping[str, str],
        answer_within: float | None = None, overlap: str = OVERLAP_ALLOW,
        business: BusinessSchedule | None = None,
    ) -> Delivery:
        """Claim, run the job while the heartbeat renews, then complete or release.
        `answer_within`: how long a claim whose outcome is unknown may be resolved before
        the caller must be answered (dedup/claiming.py). `overlap`: the job's policy towards
        its other runs (dedup/overlap.py); `allow` reads and writes nothing more.
        `business`: the job's schedule, which orders its runs under `replace`."""
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
                entered = self._overlap.enter(key, overlap, business)
            except (StoreUnavailable, MalformedRecord) as exc:
                return Delivery(Outcome.STORE_UNAVAILABLE, run_id, detail=_why(exc))
            if isinstance(entered, Answer):
                return Delivery(Outcome(entered.outcome), run_id, entered.attempt_id,
                                entered.attempts, entered.result_json, entered.detail or None)
            clear = entered
        try:
            decision = self.claim(key, answer_within)
        except (StoreUnavailable, MalformedRecord) as exc:
            return Delivery(Outcome.STORE_UNAVAILABLE, run_id, detail=_why(exc))
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
                self._writes.finish(claim, lambda: self.release(claim, error))
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
        `forbid` is recorded skipped (a forced one: given back, answered skipped); otherwise
        the claim is given back (deleted, or the record it took over restored: no outcome
        is left, as nothing ran) and answered 409,
        or 500 when the write's outcome is unknown. `delivered`: a watchdog delivery."""
        assert self._overlap is not None
        base = Delivery(Outcome.IN_PROGRESS, key.run_id, claim.attempt_id, claim.attempt)
        try:
            first = self._overlap.take(key, claim.attempt_id, clear, delivered)
        except StoreUnavailable as exc:
            detail = f"the job's latest run could not be written ({exc}); nothing ran"
            try:
                self._writes.finish(claim, lambda: self._give_back(claim))
            except StoreUnavailable as again:
                # The claim stays for one lease, as any claim the store would not take back.
                detail += f"; not given back ({again})"
            return replace(base, outcome=Outcome.STORE_UNAVAILABLE, detail=detail)
        if first is None:
            return None
        had_no_record = claim.previous is None or claim.previous.is_fence  # nothing ran
        refused = (overlap == OVERLAP_FORBID and had_no_record
                   and not first.delivered
                   and first.run_id != UNKNOWN)  # an unknown winner may be a delivery: 409
        if refused and not (key.forced or key.early):
            skipped = replace(self._overlap.skipped_record(key, first.run_id),
                              attempt_id=claim.attempt_id, attempts=claim.attempt)
            step = lambda: self._writes.write_outcome(claim, skipped)  # noqa: E731
            outcome = Outcome.SKIPPED
        elif refused:
            # A forced run is refused unrecorded (OverlapGate._skip): its claim given back.
            step = lambda: self._give_back(claim)  # noqa: E731
            outcome = Outcome.SKIPPED
        else:
            step = lambda: self._give_back(claim)  # noqa: E731
            outcome = Outcome.IN_PROGRESS
        try:
            held = self._writes.finish(claim, step)
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
            # Given back (the record restored, or deleted): no longer this attempt's to know.
            return (version if written is None else written), None

        def done(stored: StoredRun | None) -> bool:
            return stored is None or stored.record.attempt_id != claim.attempt_id

        return self._writes.guarded_write(claim, write, already_done=done)

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
            self._writes.finish(claim, lambda: self.release(
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
            held = self._writes.finish(claim, lambda: self.complete(claim, result_json, duration))
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


def _why(exc: StoreUnavailable | MalformedRecord) -> str:
    """The detail of a 500 before the job ran. A run whose document is no run record (job
    code can write its own records database) is never claimed over it: nothing runs until
    the document is deleted, and every delivery says so."""
    if isinstance(exc, MalformedRecord):
        return (f"{exc}; nothing ran: the run is not claimed over a document the protocol "
                "did not write (delete it to let the run execute)")
    return str(exc)

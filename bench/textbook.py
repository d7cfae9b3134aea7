"""The comparator: the textbook transactional dedup handler, as the usual sample has it.

What the usual sample does, implemented correctly:
1. claim in one read-write transaction: read the record; `completed` -> 200 duplicate;
   `in_progress` with a live lease, judged by this instance's LOCAL clock -> 409;
   otherwise (absent, lease expired, or past `expire_at`) write the claim;
2. run the job;
3. finish in a second read-write transaction: read the record, check that it still holds
   this attempt's `attempt_id`, then mark it `completed` (success) or delete it (failure).

A fresh run costs 6 RPCs (BeginTransaction, BatchGetDocuments, Commit, twice). No lease
renewal, no per-instance cache. Everything else is the kit's own, so that the two differ
only in protocol: the same headers and key (dedup.keys), the same record fields
(dedup.store.firestore's document mapping), the same job registry, the same HTTP layer,
replies and log line (dedup.entry.http.DedupHandler), the same settings and Firestore client.
Error outcomes map like the kit's: a failed claim is `store_unavailable` (500), a failed
finish after the job ran is `completed_unrecorded` (200). As in the usual sample, only the
reads carry DEDUP_STORE_TIMEOUT_SECONDS; BeginTransaction and Commit keep the client
library's defaults (the Python client takes no timeout for them).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from google.api_core import exceptions as gexc
from google.cloud import firestore

from dedup.business_runs import BusinessSchedule
from dedup.entry.http import DedupHandler, emit_log_line
from dedup.job_logic import JobRegistry
from dedup.keys import RunKey
from dedup.outcomes import Delivery, Outcome, encode_result
from dedup.run_context import Job, RunContext
from dedup.settings import Settings
from dedup.store import RunRecord, RunStatus
from dedup.store.firestore import document_to_record, record_to_document

log = logging.getLogger(__name__)


class TextbookStoreError(Exception):
    """A transaction failed (contention after its retries, timeout, RPC error)."""


@dataclass
class TextbookClaim:
    key: RunKey
    attempt_id: str
    attempt: int
    record: RunRecord


class TextbookDeduplicator:
    """Claim and finish each in a Firestore read-write transaction."""

    def __init__(
        self,
        client: firestore.Client,
        collection: str,
        *,
        lease_seconds: float,
        retention_seconds: float,
        timeout_seconds: float,
        local_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._client = client
        self._runs = client.collection(collection)
        self._lease = lease_seconds
        self._retention = retention_seconds
        self._timeout = timeout_seconds
        self._clock = local_clock

    @property
    def client(self) -> firestore.Client:
        return self._client

    def _transaction(self, body: Callable[[Any], Any]) -> Any:
        """Run `body(transaction)` in a read-write transaction (the library retries an
        aborted commit up to 5 times); any failure becomes TextbookStoreError."""
        try:
            return firestore.transactional(body)(self._client.transaction())
        except (gexc.GoogleAPICallError, gexc.RetryError, ValueError) as exc:
            # ValueError: "Failed to commit transaction in 5 attempts" (contention).
            raise TextbookStoreError(f"transaction failed: {exc!r}") from exc

    def claim(self, key: RunKey) -> TextbookClaim | Delivery:
        run_id = key.run_id
        ref = self._runs.document(run_id)
        attempt_id = uuid.uuid4().hex

        def claim_in(transaction: Any) -> TextbookClaim | Delivery:
            snapshot: Any = ref.get(transaction=transaction, timeout=self._timeout)
            attempts = 1
            if snapshot.exists:
                data = snapshot.to_dict() or {}
                stored = document_to_record(data)
                now = self._clock()
                if now < stored.expire_at:  # past expire_at: a leftover, a new life
                    if stored.status is RunStatus.COMPLETED:
                        return Delivery(
                            Outcome.DUPLICATE, run_id, stored.attempt_id, stored.attempts,
                            stored.result_json,
                        )
                    if now < data["lease_expires_at"]:
                        return Delivery(
                            Outcome.IN_PROGRESS, run_id, stored.attempt_id, stored.attempts
                        )
                    attempts = stored.attempts + 1  # the holder's lease ran out: take over
            record = self._record(key, attempt_id, attempts)
            # The usual sample: the lease's end by this instance's clock, in the record.
            lease_end = self._clock() + timedelta(seconds=record.lease_seconds)
            transaction.set(ref, {**record_to_document(record), "lease_expires_at": lease_end})
            return TextbookClaim(key, attempt_id, attempts, record)

        return cast(TextbookClaim | Delivery, self._transaction(claim_in))

    def finish(self, claim: TextbookClaim, succeeded: bool, result_json: str | None) -> bool:
        """Mark completed (success) or delete (failure) if this attempt still holds the
        claim; False if another attempt has taken it over (or it is gone)."""
        ref = self._runs.document(claim.key.run_id)

        def finish_in(transaction: Any) -> bool:
            snapshot: Any = ref.get(transaction=transaction, timeout=self._timeout)
            if not snapshot.exists or snapshot.get("attempt_id") != claim.attempt_id:
                return False
            if succeeded:
                done = dataclasses.replace(
                    claim.record, status=RunStatus.COMPLETED, result_json=result_json
                )
                # A whole-document set: replaced_by too, which the kit's completed record
                # keeps from its claim (None) and record_to_document leaves to the claim.
                transaction.set(ref, {**record_to_document(done), "replaced_by": done.replaced_by})
            else:
                transaction.delete(ref)
            return True

        return bool(self._transaction(finish_in))

    def _record(self, key: RunKey, attempt_id: str, attempts: int) -> RunRecord:
        expire_at = self._clock() + timedelta(seconds=self._retention)
        return RunRecord.claim(key, attempt_id, attempts, self._lease, expire_at)

    def run(
        self, key: RunKey, job: Job, body: bytes, headers: Mapping[str, str],
        answer_within: float | None = None, overlap: str = "allow",
        business: BusinessSchedule | None = None,
    ) -> Delivery:
        """One delivery end to end; the same signature and outcomes as Deduplicator.run
        (overlap `allow` only: the textbook handler knows no other run of the job)."""
        if overlap != "allow":
            raise ValueError(f"the textbook handler has no overlap policy {overlap!r}")
        run_id = key.run_id
        try:
            decision = self.claim(key)
        except TextbookStoreError as exc:
            return Delivery(Outcome.STORE_UNAVAILABLE, run_id, detail=str(exc))
        if isinstance(decision, Delivery):
            return decision
        claim = decision
        context = RunContext(
            run_id=run_id, job_name=key.job_id, schedule_time=key.schedule_time,
            attempt_id=claim.attempt_id, attempt=claim.attempt, project=key.project,
            location=key.location, body=body, headers=headers,
        )
        base = Delivery(Outcome.COMPLETED, run_id, claim.attempt_id, claim.attempt)
        try:
            result = job(context)
        except Exception as exc:
            log.exception("job %s failed for run %s", key.job_id, run_id)
            try:
                self.finish(claim, succeeded=False, result_json=None)
            except TextbookStoreError as store_exc:
                return dataclasses.replace(
                    base, outcome=Outcome.FAILED, detail=f"{exc!r}; {store_exc}"
                )
            return dataclasses.replace(base, outcome=Outcome.FAILED, detail=repr(exc))
        result_json, note = encode_result(result)
        try:
            held = self.finish(claim, succeeded=True, result_json=result_json)
        except TextbookStoreError as exc:
            return dataclasses.replace(
                base, outcome=Outcome.COMPLETED_UNRECORDED, result_json=result_json,
                detail=str(exc),
            )
        if not held:
            return dataclasses.replace(
                base, outcome=Outcome.CLAIM_LOST, result_json=result_json,
                detail="another attempt took the run over",
            )
        return dataclasses.replace(base, result_json=result_json, detail=note)


def build_textbook_handler(
    settings: Settings,
    client: firestore.Client | None = None,
    emit: Callable[[Mapping[str, Any]], None] = emit_log_line,
    local_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> DedupHandler:
    """The kit's HTTP handler around the textbook protocol instead of the kit's."""
    client = client or firestore.Client(project=settings.project, database=settings.database)
    textbook = TextbookDeduplicator(
        client,
        settings.collection,
        lease_seconds=settings.lease_seconds,
        retention_seconds=settings.retention_seconds,
        timeout_seconds=settings.store_timeout_seconds,
        local_clock=local_clock,
    )
    jobs = JobRegistry(settings.default_job, settings.job_routes)
    # DedupHandler only needs `.run(key, job, body, headers) -> Delivery` (RunsDeliveries).
    return DedupHandler(settings, textbook, jobs, emit)


def build_textbook_handler_from_env(environ: Mapping[str, str] | None = None) -> DedupHandler:
    return build_textbook_handler(Settings.from_env(environ))

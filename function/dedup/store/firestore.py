"""RunStore on Firestore: one document per run, every write a single guarded RPC.

- create: precondition "must not exist" (DocumentReference.create), one Commit.
- get: one BatchGetDocuments; the snapshot carries update_time (version) and read_time.
- get_many: the watchdog's batched reads by ID, one BatchGetDocuments per 300 IDs.
- replace / renew: one Commit each, with a `last_update_time` precondition, so a writer
  whose claim moved on cannot overwrite the new claim (fencing).
No transactions: they would cost BeginTransaction + Commit and contend for the document
lock under a burst of duplicates.
Every document read is checked field by field (document_to_record): job code can write
any document of its own records database, and one that is no record is MalformedRun
(get_many) or MalformedRecord (get), never a crash of its reader.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry
from google.cloud import firestore

from dedup.store import (
    MalformedRecord,
    MalformedRun,
    RecordChanged,
    RecordExists,
    RunRecord,
    RunStatus,
    StoredRun,
    StoreUnavailable,
)

T = TypeVar("T")
# Documents per BatchGetDocuments in get_many (the watchdog's reads).
GET_MANY_BATCH = 300

# Transient failures worth retrying inside the store's time budget.
_TRANSIENT = gretry.if_exception_type(
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.InternalServerError,
    gexc.Aborted,
    gexc.ResourceExhausted,
)


def record_to_document(record: RunRecord) -> dict[str, Any]:
    document: dict[str, Any] = {
        "status": record.status.value,
        "attempt_id": record.attempt_id,
        "attempts": record.attempts,
        "lease_seconds": record.lease_seconds,
        "expire_at": record.expire_at,
        "job": record.job,
        "schedule_time": record.schedule_time,
        "project": record.project,
        "location": record.location,
        "result_json": record.result_json,
        # Always written (None clears them): replace() updates only the fields it is
        # given, and a takeover of a failed record must not keep the old error.
        "claimed_at": record.claimed_at,
        "finished_at": record.finished_at,
        "duration_seconds": record.duration_seconds,
        "failed_at": record.failed_at,
        "error": record.error,
        # Always written too: a takeover of a permanent failure past its expiry (a new
        # life) must not inherit the flag.
        "permanent": record.permanent,
        # Always written: a new life (past expiry) starts without the old run's history.
        "unfinished_attempts": list(record.unfinished_attempts),
    }
    if record.forced:
        # Only forced records carry it: scheduled records keep their fields as they were.
        # A run_id is forced or not for good (a scheduled run a forced run replaced stays
        # marked as started by it), so replace() never needs to clear it.
        document["forced"] = True
    if record.generation:
        # Likewise only re-runs: a run_id's generation never changes.
        document["generation"] = record.generation
    # Written by claims and skips even when None (None clears them): a new life of a
    # record (past expiry) must not keep an old life's skip or replacement, any more than
    # its `permanent`. An outcome (completed, failed) without `replaced_by` leaves it as
    # it is: the run was asked to stop while it ran (overlap: replace), and ending must
    # not erase that; its claim cleared any older life's.
    document["blocked_by"] = record.blocked_by
    if record.replaced_by is not None or record.status in (
            RunStatus.IN_PROGRESS, RunStatus.SKIPPED):
        document["replaced_by"] = record.replaced_by
    return document


def changed_fields(held: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    """The fields of `document` that an update over `held` (the stored document) must
    write: those absent from it or holding another value (or type: 1 is not 1.0 in the
    store). The fields it leaves out already hold these values."""
    return {
        name: value for name, value in document.items()
        if name not in held or type(held[name]) is not type(value) or held[name] != value
    }


class NotARunRecord(ValueError):
    """document_to_record: the document is no run record (a field missing or not of the
    type the protocol writes); the message names the first such field, in one line."""


def document_to_record(data: Mapping[str, Any]) -> RunRecord:
    """The record a document holds, each field checked against the type the protocol
    writes (a number may be an integer); NotARunRecord otherwise. Fields added after the
    first records read as their default when absent. Checked, not coerced: a value that
    would fail later (a text where a timestamp belongs) would fail wherever it is used,
    the watchdog's whole tick included."""
    status = data.get("status")
    if not isinstance(status, str) or status not in _STATUSES:
        raise NotARunRecord(f"status is {_shown(status)}, not one of {sorted(_STATUSES)}")
    return RunRecord(
        status=RunStatus(status),
        attempt_id=_text(data, "attempt_id"),
        attempts=_count(data, "attempts"),
        lease_seconds=_number(data, "lease_seconds"),
        expire_at=_instant(data, "expire_at"),
        job=_text(data, "job"),
        schedule_time=_instant(data, "schedule_time"),
        project=_text(data, "project"),
        location=_text(data, "location"),
        result_json=_optional(data, "result_json", _text),
        # Absent in records written before these fields existed.
        claimed_at=_optional(data, "claimed_at", _instant),
        finished_at=_optional(data, "finished_at", _instant),
        duration_seconds=_optional(data, "duration_seconds", _number),
        failed_at=_optional(data, "failed_at", _instant),
        error=_optional(data, "error", _text),
        forced=_flag(data, "forced"),
        generation=_optional(data, "generation", _count) or 0,
        permanent=_flag(data, "permanent"),
        blocked_by=_optional(data, "blocked_by", _text),
        replaced_by=_optional(data, "replaced_by", _text),
        unfinished_attempts=_attempts(data.get("unfinished_attempts")),
    )


_STATUSES = frozenset(status.value for status in RunStatus)
_Field = TypeVar("_Field")


def _shown(value: Any) -> str:
    return "missing" if value is None else f"{type(value).__name__} {str(value)[:60]!r}"


def _optional(
    data: Mapping[str, Any], key: str, read: Callable[[Mapping[str, Any], str], _Field]
) -> _Field | None:
    return None if data.get(key) is None else read(data, key)


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise NotARunRecord(f"{key} is {_shown(value)}, not text")
    return value


def _count(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise NotARunRecord(f"{key} is {_shown(value)}, not a whole number")
    return value


def _number(data: Mapping[str, Any], key: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NotARunRecord(f"{key} is {_shown(value)}, not a number")
    return float(value)


def _instant(data: Mapping[str, Any], key: str) -> datetime:
    value = data.get(key)
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise NotARunRecord(f"{key} is {_shown(value)}, not a timestamp")
    return value


def _flag(data: Mapping[str, Any], key: str) -> bool:
    value = data.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise NotARunRecord(f"{key} is {_shown(value)}, not a bool")
    return value


def _attempts(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or any(
            isinstance(a, bool) or not isinstance(a, int) for a in value):
        raise NotARunRecord(f"unfinished_attempts is {_shown(value)}, not a list of attempts")
    return tuple(value)


def _read(run_id: str, document: str, snapshot: Any) -> StoredRun | MalformedRun:
    """A snapshot that exists, as a record, or as the MalformedRun it is."""
    try:
        record = document_to_record(snapshot.to_dict() or {})
    except NotARunRecord as exc:
        return MalformedRun(run_id, document, str(exc))
    return StoredRun(record=record, version=snapshot.update_time,
                     read_time=snapshot.read_time)


class FirestoreRunStore:
    """One Firestore collection of run records (default `scheduler_runs`)."""

    def __init__(
        self, client: firestore.Client, collection: str, timeout_seconds: float
    ) -> None:
        self._client = client
        self._collection = client.collection(collection)
        self._timeout = timeout_seconds
        self._retry = gretry.Retry(
            predicate=_TRANSIENT, initial=0.05, maximum=1.0, multiplier=2.0,
            timeout=timeout_seconds,
        )

    @property
    def client(self) -> firestore.Client:
        return self._client

    @property
    def collection(self) -> str:
        return str(self._collection.id)

    @property
    def retry(self) -> gretry.Retry:
        return self._retry

    @property
    def timeout(self) -> float:
        return self._timeout

    def call(self, operation: Callable[[], T]) -> T:
        """Run a Firestore call with this store's error mapping (StoreUnavailable)."""
        return self._call(operation)

    def _call(self, operation: Callable[[], T]) -> T:
        try:
            return operation()
        except (RecordExists, RecordChanged):
            raise
        except gexc.RetryError as exc:
            raise StoreUnavailable(
                f"Firestore did not answer within {self._timeout:g}s: {exc}"
            ) from exc
        except gexc.GoogleAPICallError as exc:
            raise StoreUnavailable(f"Firestore call failed: {exc}") from exc

    def _guarded(self, if_version: datetime) -> Any:
        return self._client.write_option(last_update_time=if_version)

    def create(self, run_id: str, record: RunRecord) -> datetime:
        def op() -> datetime:
            try:
                result: Any = self._collection.document(run_id).create(
                    record_to_document(record), retry=self._retry, timeout=self._timeout
                )
            except gexc.AlreadyExists as exc:
                raise RecordExists(run_id) from exc
            return result.update_time  # type: ignore[no-any-return]

        return self._call(op)

    def get(self, run_id: str) -> StoredRun | None:
        """One read; MalformedRecord if the document is no run record."""
        def op() -> StoredRun | MalformedRun | None:
            # The sync client's stubs also admit the async type: narrow with Any.
            snapshot: Any = self._collection.document(run_id).get(
                retry=self._retry, timeout=self._timeout
            )
            return _read(run_id, self._path(run_id), snapshot) if snapshot.exists else None

        found = self._call(op)
        if isinstance(found, MalformedRun):
            raise MalformedRecord(found)
        return found

    def get_many(self, run_ids: Sequence[str]) -> dict[str, StoredRun | MalformedRun]:
        """One BatchGetDocuments per GET_MANY_BATCH IDs; absent records are left out, and
        so are fences (nothing ran: every reader of many records, the watchdog's and the
        tools', counts the run as absent); a document that is no run record is its
        MalformedRun (each parsed on its own: one cannot fail the read of the others).
        Firestore bills one read per requested document, found or not."""

        def op() -> dict[str, StoredRun | MalformedRun]:
            found: dict[str, StoredRun | MalformedRun] = {}
            ids = list(dict.fromkeys(run_ids))
            for start in range(0, len(ids), GET_MANY_BATCH):
                refs = [self._collection.document(i) for i in ids[start:start + GET_MANY_BATCH]]
                snapshots: Any = self._client.get_all(
                    refs, retry=self._retry, timeout=self._timeout
                )
                for snapshot in snapshots:
                    if not snapshot.exists:
                        continue
                    read = _read(snapshot.id, self._path(snapshot.id), snapshot)
                    if not (isinstance(read, StoredRun) and read.record.is_fence):
                        found[snapshot.id] = read
            return found

        return self._call(op)

    def _path(self, run_id: str) -> str:
        return f"{self._collection.id}/{run_id}"

    def _conditional_update(
        self, run_id: str, fields: dict[str, Any], if_version: datetime
    ) -> datetime:
        def op() -> datetime:
            try:
                result: Any = self._collection.document(run_id).update(
                    fields, option=self._guarded(if_version),
                    retry=self._retry, timeout=self._timeout,
                )
            except (gexc.FailedPrecondition, gexc.NotFound) as exc:
                raise RecordChanged(run_id) from exc
            return result.update_time  # type: ignore[no-any-return]

        return self._call(op)

    def replace(
        self, run_id: str, record: RunRecord, if_version: datetime,
        over: RunRecord | None = None,
    ) -> datetime:
        document = record_to_document(record)
        if over is not None:
            # An update rewrites only the fields it names, and encoding each costs more
            # than anything else on a fresh run's path (a completion changes 5 of 18).
            document = changed_fields(record_to_document(over), document) or document
        return self._conditional_update(run_id, document, if_version)

    def delete(self, run_id: str, if_version: datetime) -> None:
        """One Commit with a `last_update_time` precondition (the overlap gate's give-back
        of a claim that ran nothing)."""
        def op() -> None:
            try:
                self._collection.document(run_id).delete(
                    option=self._guarded(if_version), retry=self._retry, timeout=self._timeout)
            except (gexc.FailedPrecondition, gexc.NotFound) as exc:
                raise RecordChanged(run_id) from exc

        self._call(op)

    def renew(self, run_id: str, expire_at: datetime, if_version: datetime) -> datetime:
        # Any change gives the document a new update_time, which is what extends the lease;
        # `renewed_at` is only for people reading the record (no server-side transform).
        # `expire_at` moves too, so the TTL policy never deletes a record still being renewed.
        return self._conditional_update(
            run_id, {"renewed_at": datetime.now(UTC), "expire_at": expire_at}, if_version
        )


"""Operator re-run requests (`make rerun`), in `<collection>_reruns`, one document each.

The collection is in the watchdog's own database (DEDUP_WATCH_DATABASE, infra's
`<databaseName>-watchdog`), which only the watchdog's account and the operators running
`make rerun` may write: the dedup function's account, running the team's job code, holds
nothing there. The watchdog still re-checks every request before it delivers it
(dedup/watchdog/rerun_deliveries.py), and a document it cannot read as a request is refused,
not a 500.

A request asks for one more execution of one run: generation g of the run (g >= 1; 0
when the run never ran at all: a late delivery of the run itself), whose own run_id
(keys.RunKey.generation) is also the request's document ID, so two requests for the same
generation cannot both be created (a conditional create). `make rerun` (operator_tools/rerun.py)
writes it `pending`; the watchdog delivers the pending requests at each tick (those a
backfill released, by their backfill: dedup/watchdog/backfills.py), counting each delivery on the
request (`deliveries`, `delivered_at`, `last_error`), and marks it
`done` once the function answered completed or duplicate (the dedup protocol makes however
many deliveries execute that generation once), `failed` when the job ran and raised (not
retried at every tick: a new request asks for the next generation), `refused` when it
cannot deliver it; a re-run (g >= 1) of a run that is not completed stays pending, not
delivered, while Scheduler may still retry that run (its retry window + the watchdog's
grace). `make rerun` numbers a new request past every request of the run, whatever its
status. The original record, and those of earlier generations, are kept.
A request carries `expire_at` (when asked + the stack's retention), which the TTL policy
infra declares on this collection honours, as it does the run records'. One released by a
backfill (dedup/watchdog/backfills.py) names it in `backfill`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from google.api_core import exceptions as gexc
from google.cloud.firestore_v1.base_query import FieldFilter

from dedup.keys import RunKey
from dedup.store import RecordExists, RunStatus, StoredRun
from dedup.store.firestore import FirestoreRunStore

RERUNS_SUFFIX = "_reruns"
PENDING, DONE, FAILED, REFUSED = "pending", "done", "failed", "refused"
STATUSES = frozenset({PENDING, DONE, FAILED, REFUSED})
# Firestore's "in" filter takes at most 30 values.
_IN_BATCH = 30
# Writes per commit (Firestore's limit).
_WRITE_BATCH = 500


class MalformedDocument(ValueError):
    """A document that is not what its collection holds (a field missing, of the wrong
    type, or contradicting its ID): refused and reported, never trusted."""


@dataclass(frozen=True)
class MalformedRequest:
    """A document of the requests' collection that is no valid request: its ID, the job it
    names (if it names one as text) and why it was refused."""

    request_id: str
    job: str | None
    reason: str
    status: str | None = None  # its `status`, when it is text


def _text(data: Mapping[str, Any], key: str, *, required: bool = True) -> str:
    value = data.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise MalformedDocument(f"{key} is {_shown(value)}, not text")
    return value


def _instant(data: Mapping[str, Any], key: str, *, required: bool = True) -> datetime | None:
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise MalformedDocument(f"{key} is {_shown(value)}, not a timestamp")
    return value


def _shown(value: Any) -> str:
    if value is None:
        return "missing"
    return f"{type(value).__name__} {str(value)[:60]!r}"


def reruns_collection(collection: str) -> str:
    return collection + RERUNS_SUFFIX


@dataclass(frozen=True)
class RerunRequest:
    project: str
    location: str
    job: str  # the deployed Scheduler job ID
    schedule_time: datetime  # aware, UTC
    generation: int  # >= 1
    requested_by: str
    reason: str
    requested_at: datetime
    status: str = PENDING
    outcome: str | None = None  # the function's answer that finished it
    finished_at: datetime | None = None
    # When Firestore's TTL policy on the requests' collection may delete it (infra sets
    # requested_at + the stack's retention: the records of the run are gone by then too).
    expire_at: datetime | None = None
    # The backfill (dedup/watchdog/backfills.py) that released it, if one did: a tick that meets
    # the request again (its own release, retried) adopts it instead of counting it twice.
    backfill: str | None = None
    # How often the watchdog delivered it (each delivery a Cloud Tasks task of its own:
    # `<run_id>-<n>-<mac>`, as catch-ups are numbered), the last one when, and what
    # the last answer said when it was no execution (e.g. "held off (409)").
    deliveries: int = 0
    delivered_at: datetime | None = None
    last_error: str | None = None

    @property
    def key(self) -> RunKey:
        return RunKey(
            self.project, self.location, self.job, self.schedule_time,
            generation=self.generation,
        )

    @property
    def request_id(self) -> str:
        """The document ID: the run_id of the generation it asks for."""
        return self.key.run_id

    @property
    def base_run_id(self) -> str:
        """The run_id of the run itself (generation 0), which every request of it shares."""
        return RunKey(self.project, self.location, self.job, self.schedule_time).run_id

    def to_document(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "location": self.location,
            "job": self.job,
            "schedule_time": self.schedule_time,
            "generation": self.generation,
            "run_id": self.request_id,
            "base_run_id": self.base_run_id,
            "requested_by": self.requested_by,
            "reason": self.reason,
            "requested_at": self.requested_at,
            "status": self.status,
            "outcome": self.outcome,
            "finished_at": self.finished_at,
            "expire_at": self.expire_at,
            "backfill": self.backfill,
            "deliveries": self.deliveries,
            "delivered_at": self.delivered_at,
            "last_error": self.last_error,
        }

    @classmethod
    def from_document(
        cls, data: Mapping[str, Any], document_id: str | None = None
    ) -> RerunRequest:
        """The request a document holds; MalformedDocument if it is none: a field missing
        or of the wrong type, an unknown status, or IDs (`document_id`, `run_id`,
        `base_run_id`) that are not the ones its job, time and generation make."""
        generation = data.get("generation")
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
            raise MalformedDocument(f"generation is {_shown(generation)}, not a whole number")
        schedule_time = _instant(data, "schedule_time")
        requested_at = _instant(data, "requested_at")
        assert schedule_time is not None and requested_at is not None
        status = _text(data, "status", required=False) or PENDING
        if status not in STATUSES:
            raise MalformedDocument(f"status {status[:40]!r} is not one of "
                                    f"{', '.join(sorted(STATUSES))}")
        outcome = data.get("outcome")
        if outcome is not None and not isinstance(outcome, str):
            raise MalformedDocument(f"outcome is {_shown(outcome)}, not text")
        deliveries = data.get("deliveries") or 0
        if isinstance(deliveries, bool) or not isinstance(deliveries, int) or deliveries < 0:
            raise MalformedDocument(f"deliveries is {_shown(deliveries)}, not a count")
        request = cls(
            project=_text(data, "project"),
            location=_text(data, "location"),
            job=_text(data, "job"),
            schedule_time=schedule_time,
            generation=generation,
            requested_by=_text(data, "requested_by", required=False),
            reason=_text(data, "reason", required=False),
            requested_at=requested_at,
            status=status,
            outcome=outcome,
            finished_at=_instant(data, "finished_at", required=False),
            expire_at=_instant(data, "expire_at", required=False),
            backfill=_text(data, "backfill", required=False) or None,
            deliveries=deliveries,
            delivered_at=_instant(data, "delivered_at", required=False),
            last_error=_text(data, "last_error", required=False) or None,
        )
        try:
            expected = request.to_document()
        except ValueError as exc:  # dedup.keys refuses the job ID (a '/', a control char)
            raise MalformedDocument(str(exc)) from None
        for key, value in (("document ID", document_id), ("run_id", data.get("run_id")),
                           ("base_run_id", data.get("base_run_id"))):
            wanted = expected["base_run_id" if key == "base_run_id" else "run_id"]
            if (document_id is not None or key != "document ID") and value != wanted:
                raise MalformedDocument(
                    f"{key} {str(value)[:80]!r} is not the run_id its job, schedule time and "
                    f"generation make ({wanted})"
                )
        return request


def retries_may_execute(run: StoredRun | None) -> bool:
    """Whether a retry of Scheduler's could still execute this run (its generation 0
    record): it is neither completed, skipped (overlap: forbid) nor failed for good
    (`permanent`): each answered 2xx, and every later delivery the same. While its retry
    window lasts, a re-run of such a run could execute next to that retry."""
    if run is None:
        return True
    status = run.record.status
    return not (status in (RunStatus.COMPLETED, RunStatus.SKIPPED) or (
        status is RunStatus.FAILED and run.record.permanent))


class RerunQueue(Protocol):
    """What the watchdog needs: the pending requests (and the pending documents that are
    no request), every request of some runs, and a way to finish one."""

    def pending(self, limit: int) -> list[RerunRequest | MalformedRequest]:
        ...

    def for_runs(self, base_run_ids: Sequence[str]) -> dict[str, list[RerunRequest]]:
        ...

    def finish(self, request: RerunRequest, status: str, outcome: str, now: datetime) -> None:
        ...

    def finish_all(
        self, finished: Sequence[tuple[RerunRequest, str, str]], now: datetime
    ) -> None:
        ...

    def refuse(self, malformed: MalformedRequest, now: datetime) -> None:
        ...

    def note_deliveries(self, delivered: Sequence[tuple[RerunRequest, str | None]],
                        now: datetime) -> None:
        ...


class FirestoreRerunQueue:
    """The requests' collection, through the run store's client, timeouts and errors."""

    def __init__(self, runs: FirestoreRunStore, collection: str) -> None:
        self._runs = runs
        self._collection = runs.client.collection(collection)

    def pending(self, limit: int) -> list[RerunRequest | MalformedRequest]:
        """Up to `limit` pending documents that no backfill released (those are delivered
        by their backfill, by ID: dedup/watchdog/backfills.py), oldest asked first, each a request
        or, if it is none, why.

        Two queries: `status` pending with `backfill` null (two equalities, which Firestore
        serves by merging its automatic single-field indexes: no composite index), so a
        large backfill in flight never crowds an operator's request out; then `status`
        pending alone, for the documents the first cannot match (no `backfill` field at
        all: a malformed one, refused, or one written before the field existed). Sorted
        here by when asked (a query order would need a composite index)."""
        found: dict[str, RerunRequest | MalformedRequest] = {}
        for where in ((("status", PENDING), ("backfill", None)), (("status", PENDING),)):
            for document in self._equal(where, limit):
                if isinstance(document, RerunRequest) and document.backfill is not None:
                    continue  # its backfill delivers it
                found.setdefault(document.request_id, document)
        return sorted(found.values(), key=_asked_at)[:limit]

    def _equal(
        self, where: Sequence[tuple[str, Any]], limit: int
    ) -> list[RerunRequest | MalformedRequest]:
        def op() -> list[RerunRequest | MalformedRequest]:
            query: Any = self._collection
            for field, value in where:
                query = query.where(filter=FieldFilter(field, "==", value))
            snapshots = query.limit(limit).get(
                retry=self._runs.retry, timeout=self._runs.timeout)
            return [_parsed(s.id, s.to_dict() or {}) for s in snapshots]

        return self._runs.call(op)

    def for_job(self, job: str) -> list[RerunRequest]:
        """Every request of one job, oldest schedule time first (for `make runs`); a
        document that is no request is left out (the watchdog refuses it)."""
        found = _requests(self._where("job", "==", job, None))
        return sorted(found, key=lambda r: (r.schedule_time, r.generation))

    def for_run(self, base_run_id: str) -> list[RerunRequest]:
        """Every request of one run, whatever its status, lowest generation first (for
        `make rerun`, which numbers the next one past them all)."""
        return self.for_runs([base_run_id]).get(base_run_id, [])

    def for_runs(self, base_run_ids: Sequence[str]) -> dict[str, list[RerunRequest]]:
        """Every request of each run (by its generation 0 run_id), lowest generation
        first; one query per 30 runs."""
        wanted = list(dict.fromkeys(base_run_ids))
        found: dict[str, list[RerunRequest]] = {}
        for start in range(0, len(wanted), _IN_BATCH):
            chunk = wanted[start:start + _IN_BATCH]
            for request in _requests(self._where("base_run_id", "in", chunk, None)):
                found.setdefault(request.base_run_id, []).append(request)
        return {run: sorted(found[run], key=lambda r: r.generation) for run in found}

    def _where(
        self, field: str, op_string: str, value: Any, limit: int | None
    ) -> list[RerunRequest | MalformedRequest]:
        def op() -> list[RerunRequest | MalformedRequest]:
            query: Any = self._collection.where(filter=FieldFilter(field, op_string, value))
            if limit is not None:
                query = query.limit(limit)
            snapshots = query.get(retry=self._runs.retry, timeout=self._runs.timeout)
            return [_parsed(s.id, s.to_dict() or {}) for s in snapshots]

        return self._runs.call(op)

    def get_many(self, request_ids: Sequence[str]) -> dict[str, RerunRequest]:
        def op() -> dict[str, RerunRequest]:
            refs = [self._collection.document(i) for i in dict.fromkeys(request_ids)]
            snapshots: Any = self._runs.client.get_all(
                refs, retry=self._runs.retry, timeout=self._runs.timeout
            )
            return {
                s.id: RerunRequest.from_document(s.to_dict() or {}, s.id)
                for s in snapshots if s.exists
            }

        return self._runs.call(op) if request_ids else {}

    def create(self, request: RerunRequest) -> None:
        """Write the request if no request for that generation exists (RecordExists).

        A create can land while its reply is lost: the client's (or the caller's) retry
        then meets the document it wrote itself. Found with this request's own asker,
        reason and instant, it is this request, and the create has succeeded."""

        def op() -> None:
            try:
                self._collection.document(request.request_id).create(
                    request.to_document(), retry=self._runs.retry, timeout=self._runs.timeout
                )
            except gexc.AlreadyExists as exc:
                raise RecordExists(request.request_id) from exc

        try:
            self._runs.call(op)
        except RecordExists:
            found = self.get_many([request.request_id]).get(request.request_id)
            if found is None or _asked(found) != _asked(request):
                raise

    def create_many(self, requests: Sequence[RerunRequest]) -> dict[str, RerunRequest]:
        """Create each request that does not exist yet, in one commit when none does; the
        requests found already there instead (request ID -> the stored one), for the caller
        to judge (its own, written by an earlier try, or someone else's)."""
        def op() -> None:
            batch = self._runs.client.batch()
            for request in requests:
                batch.create(self._collection.document(request.request_id),
                             request.to_document())
            try:
                batch.commit(retry=self._runs.retry, timeout=self._runs.timeout)
            except gexc.AlreadyExists as exc:
                raise RecordExists(requests[0].request_id) from exc

        if not requests:
            return {}
        try:
            self._runs.call(op)
            return {}
        except RecordExists:  # some exist (or the commit landed unseen): one by one
            pass
        found: dict[str, RerunRequest] = {}
        for request in requests:
            try:
                self.create(request)
            except RecordExists:
                stored = self.get_many([request.request_id]).get(request.request_id)
                if stored is not None:
                    found[request.request_id] = stored
        return found

    def read_many(self, request_ids: Sequence[str]) -> dict[str, RerunRequest | MalformedRequest]:
        """The documents of these IDs that exist, each a request or, if it is none, why."""
        def op() -> dict[str, RerunRequest | MalformedRequest]:
            refs = [self._collection.document(i) for i in dict.fromkeys(request_ids)]
            snapshots: Any = self._runs.client.get_all(
                refs, retry=self._runs.retry, timeout=self._runs.timeout)
            return {s.id: _parsed(s.id, s.to_dict() or {}) for s in snapshots if s.exists}

        return self._runs.call(op) if request_ids else {}

    def finish_all(
        self, finished: Sequence[tuple[RerunRequest, str, str]], now: datetime
    ) -> None:
        """`finish` each (request, status, outcome), in one commit per 500."""
        for start in range(0, len(finished), _WRITE_BATCH):
            chunk = finished[start:start + _WRITE_BATCH]

            def op(chunk: Sequence[tuple[RerunRequest, str, str]] = chunk) -> None:
                batch = self._runs.client.batch()
                for request, status, outcome in chunk:
                    batch.update(self._collection.document(request.request_id),
                                 {"status": status, "outcome": outcome, "finished_at": now})
                batch.commit(retry=self._runs.retry, timeout=self._runs.timeout)

            self._runs.call(op)

    def finish(self, request: RerunRequest, status: str, outcome: str, now: datetime) -> None:
        # Two ticks finishing the same request write the same status: no guard needed.
        def op() -> None:
            self._collection.document(request.request_id).update(
                {"status": status, "outcome": outcome, "finished_at": now},
                retry=self._runs.retry, timeout=self._runs.timeout,
            )

        self._runs.call(op)

    def note_deliveries(self, delivered: Sequence[tuple[RerunRequest, str | None]],
                        now: datetime) -> None:
        """Count one more delivery of each request (and its last answer, if no execution),
        in one commit per 500: the next delivery's task is numbered past it."""
        for start in range(0, len(delivered), _WRITE_BATCH):
            chunk = delivered[start:start + _WRITE_BATCH]

            def op(chunk: Sequence[tuple[RerunRequest, str | None]] = chunk) -> None:
                batch = self._runs.client.batch()
                for request, error in chunk:
                    batch.update(self._collection.document(request.request_id), {
                        "deliveries": request.deliveries + 1, "delivered_at": now,
                        "last_error": error})
                batch.commit(retry=self._runs.retry, timeout=self._runs.timeout)

            self._runs.call(op)

    def refuse(self, malformed: MalformedRequest, now: datetime) -> None:
        """Mark a document that is no request refused, with why (by its ID): no tick
        reads it as pending again."""
        def op() -> None:
            self._collection.document(malformed.request_id).update(
                {"status": REFUSED, "outcome": malformed.reason, "finished_at": now},
                retry=self._runs.retry, timeout=self._runs.timeout,
            )

        self._runs.call(op)


def _parsed(document_id: str, data: Mapping[str, Any]) -> RerunRequest | MalformedRequest:
    try:
        return RerunRequest.from_document(data, document_id)
    except MalformedDocument as exc:
        job = data.get("job")
        status = data.get("status")
        return MalformedRequest(
            document_id, job if isinstance(job, str) else None, str(exc),
            status if isinstance(status, str) else None,
        )


def _requests(found: Sequence[RerunRequest | MalformedRequest]) -> list[RerunRequest]:
    return [r for r in found if isinstance(r, RerunRequest)]


def _asked_at(found: RerunRequest | MalformedRequest) -> tuple[bool, datetime]:
    """Malformed documents first (refused at once), then requests oldest asked first."""
    if isinstance(found, MalformedRequest):
        return (False, datetime.min.replace(tzinfo=UTC))
    return (True, found.requested_at)


def _asked(request: RerunRequest) -> tuple[str, str, datetime]:
    """What tells one operator's request from another's for the same generation."""
    return (request.requested_by, request.reason, request.requested_at)

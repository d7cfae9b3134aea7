"""Operator re-run requests (`make rerun`), in `<collection>_reruns`, one document each.

A request asks for one more execution of one run: generation g of the run (g >= 1; 0
when the run never ran at all: a late delivery of the run itself), whose own run_id
(keys.RunKey.generation) is also the request's document ID, so two requests for the same
generation cannot both be created (a conditional create). `make rerun` (infra/rerun.py)
writes it `pending`; the watchdog delivers every pending request at each tick and marks it
`done` once the function answered completed or duplicate (the dedup protocol makes however
many deliveries execute that generation once), `failed` when the job ran and raised (not
retried at every tick: a new request asks for the next generation), `refused` when it
cannot deliver it; a re-run (g >= 1) of a run that is not completed stays pending, not
delivered, while Scheduler may still retry that run (its retry window + the watchdog's
grace). `make rerun` numbers a new request past every request of the run, whatever its
status. The original record, and those of earlier generations, are kept.
A request carries `expire_at` (when asked + the stack's retention), which the TTL policy
infra declares on this collection honours, as it does the run records'.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from google.api_core import exceptions as gexc
from google.cloud.firestore_v1.base_query import FieldFilter

from dedup.firestore_store import FirestoreRunStore
from dedup.keys import RunKey
from dedup.store import RecordExists, RunStatus, StoredRun

RERUNS_SUFFIX = "_reruns"
PENDING, DONE, FAILED, REFUSED = "pending", "done", "failed", "refused"


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

    def to_document(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "location": self.location,
            "job": self.job,
            "schedule_time": self.schedule_time,
            "generation": self.generation,
            "run_id": self.request_id,
            "base_run_id": RunKey(
                self.project, self.location, self.job, self.schedule_time
            ).run_id,
            "requested_by": self.requested_by,
            "reason": self.reason,
            "requested_at": self.requested_at,
            "status": self.status,
            "outcome": self.outcome,
            "finished_at": self.finished_at,
            "expire_at": self.expire_at,
        }

    @classmethod
    def from_document(cls, data: dict[str, Any]) -> RerunRequest:
        return cls(
            project=str(data["project"]),
            location=str(data["location"]),
            job=str(data["job"]),
            schedule_time=data["schedule_time"],
            generation=int(data["generation"]),
            requested_by=str(data.get("requested_by") or ""),
            reason=str(data.get("reason") or ""),
            requested_at=data["requested_at"],
            status=str(data.get("status") or PENDING),
            outcome=data.get("outcome"),
            finished_at=data.get("finished_at"),
            expire_at=data.get("expire_at"),
        )


def retries_may_execute(run: StoredRun | None) -> bool:
    """Whether a retry of Scheduler's could still execute this run (its generation 0
    record): it is neither completed nor failed for good (`permanent`: answered 2xx, and
    every later delivery is answered the same). While its retry window lasts, a re-run of
    such a run could execute next to that retry."""
    if run is None:
        return True
    status = run.record.status
    return not (status is RunStatus.COMPLETED or (
        status is RunStatus.FAILED and run.record.permanent))


class RerunQueue(Protocol):
    """What the watchdog needs: the pending requests, and a way to finish one."""

    def pending(self, limit: int) -> list[RerunRequest]:
        ...

    def finish(self, request: RerunRequest, status: str, outcome: str, now: datetime) -> None:
        ...


class FirestoreRerunQueue:
    """The requests' collection, through the run store's client, timeouts and errors."""

    def __init__(self, runs: FirestoreRunStore, collection: str) -> None:
        self._runs = runs
        self._collection = runs.client.collection(collection)

    def pending(self, limit: int) -> list[RerunRequest]:
        """Up to `limit` pending requests (a single-field equality: Firestore's automatic
        index serves it)."""
        return self._where("status", PENDING, limit)

    def for_job(self, job: str) -> list[RerunRequest]:
        """Every request of one job, oldest schedule time first (for `make runs`)."""
        found = self._where("job", job, None)
        return sorted(found, key=lambda r: (r.schedule_time, r.generation))

    def for_run(self, base_run_id: str) -> list[RerunRequest]:
        """Every request of one run, whatever its status, lowest generation first (for
        `make rerun`, which numbers the next one past them all)."""
        found = self._where("base_run_id", base_run_id, None)
        return sorted(found, key=lambda r: r.generation)

    def _where(self, field: str, value: str, limit: int | None) -> list[RerunRequest]:
        def op() -> list[RerunRequest]:
            query: Any = self._collection.where(filter=FieldFilter(field, "==", value))
            if limit is not None:
                query = query.limit(limit)
            snapshots = query.get(retry=self._runs.retry, timeout=self._runs.timeout)
            return [RerunRequest.from_document(s.to_dict() or {}) for s in snapshots]

        return self._runs.call(op)

    def get_many(self, request_ids: Sequence[str]) -> dict[str, RerunRequest]:
        def op() -> dict[str, RerunRequest]:
            refs = [self._collection.document(i) for i in dict.fromkeys(request_ids)]
            snapshots: Any = self._runs.client.get_all(
                refs, retry=self._runs.retry, timeout=self._runs.timeout
            )
            return {
                s.id: RerunRequest.from_document(s.to_dict() or {})
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

    def finish(self, request: RerunRequest, status: str, outcome: str, now: datetime) -> None:
        # Two ticks finishing the same request write the same status: no guard needed.
        def op() -> None:
            self._collection.document(request.request_id).update(
                {"status": status, "outcome": outcome, "finished_at": now},
                retry=self._runs.retry, timeout=self._runs.timeout,
            )

        self._runs.call(op)


def _asked(request: RerunRequest) -> tuple[str, str, datetime]:
    """What tells one operator's request from another's for the same generation."""
    return (request.requested_by, request.reason, request.requested_at)

"""The storage seam: what the dedup protocol needs from a store, and nothing more.

The protocol (dedup/protocol.py, claiming.py, claim.py) speaks only to `RunStore`;
store/firestore.py is the one implementation. Every write is conditional, so the store's
own clock and versions decide who holds a claim: `version` is the server time of a
record's last write, `read_time` the server time of a read, and both come from the store,
never from this instance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Protocol

from dedup.keys import RunKey

# A failed record's `error`: one line, at most this long.
MAX_ERROR_CHARS = 500
# A fence's `expire_at` (RunRecord.is_fence): past from the start, so every reader of one
# record counts it absent (StoredRun.past_expiry), older code included, and the TTL
# policy may delete it (long after any create it stood in for could still land).
FENCE_EXPIRE_AT = datetime(1970, 1, 1, tzinfo=UTC)


class RunStatus(StrEnum):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    # The job raised: the record is kept (for the watchdog and people) and a retry claims
    # it at once, as if it were absent; unless it is `permanent` (RunRecord): then final.
    FAILED = "failed"
    # overlap: forbid (dedup/overlap.py): the run's time came while another run of the job
    # held a live claim, so it did not run (`blocked_by` names that run). Final: later
    # deliveries are answered 200 skipped, the watchdog shows it `skipped`, never `missed`.
    SKIPPED = "skipped"


@dataclass(frozen=True)
class RunRecord:
    """One scheduled run's dedup record, as the protocol writes it."""

    status: RunStatus
    attempt_id: str
    attempts: int
    lease_seconds: float
    expire_at: datetime  # the TTL policy deletes the record after this instant
    job: str
    schedule_time: datetime
    project: str
    location: str
    result_json: str | None = None  # the job's result, replayed to duplicates
    # When this attempt claimed the run (the instance's wall clock): how long an
    # in_progress run has been running, for the watchdog's `overlong` verdict.
    claimed_at: datetime | None = None
    # Completed records: when the job finished and how long it ran (by the instance's
    # monotonic clock). Records written before these fields existed read as None.
    finished_at: datetime | None = None
    duration_seconds: float | None = None
    # Failed records: when the attempt gave up, and a one-line summary of what the job
    # raised (at most MAX_ERROR_CHARS characters).
    failed_at: datetime | None = None
    error: str | None = None
    # A forced run's record ("Run now"; keys.RunKey.forced): its own run_id, never the
    # scheduled run of the same schedule time; or the scheduled run's, claimed by a forced
    # run that replaced it (RunKey.early). Records written before it read as False.
    forced: bool = False
    # A re-run's generation (keys.RunKey.generation); 0: the run itself (and every record
    # written before re-runs existed).
    generation: int = 0
    # Failed records only: the job refused for good (run_context.PermanentFailure, e.g. the
    # proxy's start answered 403/404), so nothing ran and no retry could succeed. Such a
    # record is final: Scheduler got a 200 and later deliveries replay the failure; a
    # re-run (the next generation) may start again. Records written before it read False.
    permanent: bool = False
    # overlap (dedup/overlap.py), None in every other record: a skipped record's blocking
    # run, and, on a run asked to stop for a newer one (overlap: replace), that run's ID.
    blocked_by: str | None = None
    replaced_by: str | None = None
    # The attempts (their numbers) whose claim this run's later attempts took over while it
    # was still `in_progress`: each held the run and ended without recording an outcome
    # (its lease lapsed), so it may have executed the job (completed_unrecorded, claim_lost,
    # killed mid-job). Carried by every attempt after; records written before read ().
    # The watchdog's `ran_twice` evidence (dedup.watchdog.ran_twice).
    unfinished_attempts: tuple[int, ...] = ()

    @property
    def is_fence(self) -> bool:
        """A fence (fence_of): not a run's record but a stand-in for "nothing ran", put
        where a claim's create whose outcome was unknown found nothing, so that create,
        should it still be in flight, fails when it lands. Counted absent by every reader:
        get_many leaves it out; get returns it past its expiry, for the claimer to take
        over. Told by `failed` with no attempt: a run's records count from attempt 1."""
        return self.status is RunStatus.FAILED and self.attempts == 0

    @classmethod
    def claim(
        cls, key: RunKey, attempt_id: str, attempts: int, lease_seconds: float,
        expire_at: datetime, claimed_at: datetime | None = None,
        unfinished_attempts: tuple[int, ...] = (),
    ) -> RunRecord:
        """The record of an attempt that has just claimed `key`'s run."""
        return cls(
            status=RunStatus.IN_PROGRESS,
            attempt_id=attempt_id,
            attempts=attempts,
            lease_seconds=lease_seconds,
            expire_at=expire_at,
            job=key.job_id,
            schedule_time=key.schedule_time,
            project=key.project,
            location=key.location,
            claimed_at=claimed_at,
            forced=key.forced or key.early,
            generation=key.generation,
            unfinished_attempts=unfinished_attempts,
        )

    @classmethod
    def fence_of(
        cls, key: RunKey, attempt_id: str, lease_seconds: float, written_at: datetime
    ) -> RunRecord:
        """The fence of `attempt_id` on `key`'s run (is_fence): `failed` with no attempt
        under it, and past its expiry, so a reader that does not know fences (an older
        version) takes it for the leftover it is as good as: a new life, attempt 1."""
        return replace(
            cls.claim(key, attempt_id, 0, lease_seconds, FENCE_EXPIRE_AT),
            status=RunStatus.FAILED, failed_at=written_at,
            error="nothing ran: this attempt's claim had an unknown outcome and no record "
                  "was found; fenced so it cannot land later",
        )


@dataclass(frozen=True)
class StoredRun:
    """A record as read, with the store's own clock readings."""

    record: RunRecord
    version: datetime  # server time of the last write (claim, renewal or finish)
    read_time: datetime  # server time of this read

    @property
    def lease_expired(self) -> bool:
        """Judged by the store's clock only: last write plus the lease, against the read."""
        elapsed = (self.read_time - self.version).total_seconds()
        return elapsed >= self.record.lease_seconds

    @property
    def past_expiry(self) -> bool:
        """TTL deletion lags by up to a day or more: an expired record counts as absent.

        Only once nobody holds it: a live claim's renewals keep moving `expire_at`, and a
        record whose holder is still renewing is never a leftover, whatever its date says.
        """
        if self.record.status is RunStatus.IN_PROGRESS and not self.lease_expired:
            return False
        return self.read_time >= self.record.expire_at


@dataclass(frozen=True)
class MalformedRun:
    """A run's document that is no run record (a field missing or of the wrong type): the
    protocol never writes one, but job code can write any document of its own records
    database. Never trusted, never judged as a run: get_many returns it in the record's
    place, so one such document costs only its own run a verdict."""

    run_id: str
    document: str  # its path in its database: `<collection>/<run_id>`
    reason: str  # what is wrong with it, one line

    def __str__(self) -> str:
        return f"run record {self.document} is malformed: {self.reason}"


class StoreError(Exception):
    """Base of the store's outcomes that are not a plain success."""


class RecordExists(StoreError):
    """create(): a record with this run ID is already there."""


class RecordChanged(StoreError):
    """A conditional write found a newer version (or no record): the claim moved on."""


class StoreUnavailable(StoreError):
    """The store did not answer in time or failed: retryable, never a success."""


class MalformedRecord(StoreError):
    """get(): the run's document is no run record (MalformedRun). Not StoreUnavailable:
    reading it again gives the same answer, so nothing retries it."""

    def __init__(self, malformed: MalformedRun) -> None:
        super().__init__(str(malformed))
        self.malformed = malformed


class RunStore(Protocol):
    """Conditional single-document operations; each is one round trip to the store.

    The protocol writes with create (claim), replace (takeover, complete, mark failed)
    and renew; a failed run's record is kept (status `failed`), not deleted. `get_many`
    is the watchdog's: it reads records by ID, never writes them.
    """

    def create(self, run_id: str, record: RunRecord) -> datetime:
        """Write the record if none exists; return its version. Raises RecordExists."""
        ...

    def get(self, run_id: str) -> StoredRun | None:
        """Read the record, or None if there is none; a fence (RunRecord.is_fence) is
        returned, past its expiry, for the claimer to take over. Raises MalformedRecord."""
        ...

    def replace(
        self, run_id: str, record: RunRecord, if_version: datetime,
        over: RunRecord | None = None,
    ) -> datetime:
        """Overwrite if still at `if_version`; return the new version. Raises RecordChanged.
        `over`: the record the store holds at `if_version`, as the writer knows it; then
        only what differs from it need be sent (the record stored is the same)."""
        ...

    def renew(self, run_id: str, expire_at: datetime, if_version: datetime) -> datetime:
        """Extend the lease (a new version) and move `expire_at`, if still at `if_version`.
        Raises RecordChanged."""
        ...

    def get_many(self, run_ids: Sequence[str]) -> Mapping[str, StoredRun | MalformedRun]:
        """Read many records by ID (batched); absent ones are left out of the result, and
        so are fences (RunRecord.is_fence: nothing ran, no run to judge); a document that is
        no record is a MalformedRun (the others are read as ever)."""
        ...


class DeletableRunStore(RunStore, Protocol):
    """A RunStore that can also delete a record, guarded: the overlap gate's (a claim that
    lost the race to take its job gives itself back, leaving no outcome behind)."""

    def delete(self, run_id: str, if_version: datetime) -> None:
        """Delete the record if still at `if_version`. Raises RecordChanged (moved on, or
        already gone)."""
        ...

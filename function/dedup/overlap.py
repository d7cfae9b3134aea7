"""Overlap between runs of one job (X-Dedup-Overlap; the job's `overlap` in the stack).

`allow` (the default) costs nothing here: no document is read or written. The other
policies find "the previous run" without a query, in one small document per job (its
*latest run*: collection `<collection>_overlap`, ID `job:<project>:<location>:<job ID>`)
that names the run that last took the job, written in the same guarded way as run
records (a "must not exist" create or a `last_update_time` precondition):

1. read the job's latest run, then in one batched read both that run's record and this
   run's own (a duplicate of a run that has ended is answered from its record);
2. the previous run is *live* while its record is `in_progress` with a lease that has not
   lapsed by the store's clock; anything else (ended, failed, a crashed holder, a stale
   pointer to a run whose lease lapsed or whose record is gone or is no record) does not
   block; this run's own document being no record refuses it (MalformedRecord, a 500);
3. blocked: `forbid` records this run `skipped` (naming the blocking run) and answers 200
   if it has no record (one that failed or whose claim lapsed keeps that record and
   answers 409); a forced run ("Run now") with no record is answered 200 skipped and
   recorded nowhere, so pressing it again once the job is free runs it, and under
   `forcedRuns: replaceNext` the scheduled run it is keyed as keeps its own outcome;
   `wait` answers 409, so Scheduler's retries start it once that run ended;
   `replace`, from a newer run (`run_order`), marks that run's record `replaced_by` (its
   next renewal sets its `claim_lost`) and answers 409 until it stopped or its lease
   lapsed; an older run (a late retry of a run that failed, say) never stops a newer
   one: it waits (409, nothing written), as under `wait`;
4. not blocked: this run is claimed as always, and then the job's latest run is moved to
   it, guarded by the version read in step 1, before the job runs. Two runs that both
   found the job free cannot both move it: the one that loses runs nothing and, unless it
   had no record, is not forced, and lost under `forbid` to a scheduled run (then recorded
   `skipped`), gives its claim back, leaving no outcome: a claim it created is deleted
   (guarded by its version), a record it took over is restored as it was (a lapsed claim
   restored lapsed), and it answers 409 (a forced run refused so under `forbid`: 200
   skipped).

The pointer is written at claim only: once the run ends, its own record says so, which
step 2 reads anyway. A pointer write whose outcome is unknown gives the claim back the
same way, retried until the claim's fence time (500, nothing ran): a pointer that did
land then names a run that is not live, which blocks nothing.

Deliveries the watchdog queues (catch-up, re-runs, backfills: they carry
X-Dedup-Deliver-Within) were asked for: under `forbid` and `replace` they wait (409,
delivered again at a later tick) rather than being skipped for good or cutting short the
run they meet. The pointer records that its run is such a delivery (`delivered`): a
scheduled run meeting it live waits (409) under every policy, never skipped, never
replacing it.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from google.api_core import exceptions as gexc
from google.cloud import firestore

from dedup.business_runs import BusinessRun, BusinessSchedule
from dedup.keys import (
    DELIVER_WITHIN_HEADER,
    OVERLAP_ALLOW,
    OVERLAP_FORBID,
    OVERLAP_REPLACE,
    OVERLAP_WAIT,
    RunKey,
)
from dedup.store import (
    DeletableRunStore,
    MalformedRecord,
    MalformedRun,
    RecordChanged,
    RecordExists,
    RunRecord,
    RunStatus,
    StoredRun,
    StoreUnavailable,
)

# The per-job documents' collection, beside the run records' (`<collection>_overlap`).
COLLECTION_SUFFIX = "_overlap"
# The run named by a latest-run document that cannot be read: no run has this ID.
MALFORMED = "(malformed)"


def effective_policy(policy: str, lowered: Mapping[str, str]) -> str:
    """The policy a delivery follows: a queued watchdog delivery (catch-up, re-run,
    backfill) under `forbid` or `replace` waits instead: it was asked for (skipped, it
    would be lost), and it must not cut short the run it meets (replaced, that run would
    be judged `skipped` and lost)."""
    if policy in (OVERLAP_FORBID, OVERLAP_REPLACE) and DELIVER_WITHIN_HEADER in lowered:
        return OVERLAP_WAIT
    return policy


def is_delivery(lowered: Mapping[str, str]) -> bool:
    """A delivery the watchdog queued (catch-up, re-run, backfill)."""
    return DELIVER_WITHIN_HEADER in lowered


def latest_run_id(key: RunKey) -> str:
    """The ID of the job's latest-run document: every run of the job (scheduled, forced,
    re-run) shares it. Job IDs, project and location IDs hold no '/' (dedup.keys)."""
    return f"job:{key.project}:{key.location}:{key.job_id}"


@dataclass(frozen=True)
class LatestRun:
    """The run that last took the job, and the attempt that did."""

    run_id: str
    attempt_id: str
    job: str
    schedule_time: datetime
    generation: int = 0
    forced: bool = False
    # A watchdog delivery (catch-up, re-run, backfill): a scheduled run meeting it live
    # waits (409) instead of being skipped or replacing it. Documents written before it:
    # False.
    delivered: bool = False


# The run named when the latest-run document could not be read after a lost race.
UNKNOWN = "(unknown)"


@dataclass(frozen=True)
class StoredLatest:
    latest: LatestRun
    version: datetime  # server time of its last write


class LatestRunStore(Protocol):
    def get(self, job_doc: str) -> StoredLatest | None:
        """One read; None if the job has no such document yet."""
        ...

    def put(self, job_doc: str, latest: LatestRun, if_version: datetime | None) -> datetime:
        """Write if still at `if_version` (None: if there is none); the new version.
        Raises RecordChanged when another write came first."""
        ...


class FirestoreLatestRunStore:
    """The latest-run documents, with the run store's timeout, retries and error mapping."""

    def __init__(self, client: firestore.Client, collection: str, call: Callable[[Any], Any],
                 retry: Any, timeout: float) -> None:
        self._collection = client.collection(collection)
        self._client = client
        self._call = call
        self._retry = retry
        self._timeout = timeout

    def get(self, job_doc: str) -> StoredLatest | None:
        def op() -> StoredLatest | None:
            snapshot: Any = self._collection.document(job_doc).get(
                retry=self._retry, timeout=self._timeout)
            if not snapshot.exists:
                return None
            data = snapshot.to_dict() or {}
            try:
                latest = LatestRun(
                    str(data["run_id"]), str(data["attempt_id"]), str(data["job"]),
                    data["schedule_time"], int(data.get("generation", 0)),
                    bool(data.get("forced", False)), bool(data.get("delivered", False)))
            except (KeyError, TypeError, ValueError):
                # Edited by hand, say: it names no run, so it blocks nothing, and the next
                # run that takes the job overwrites it (guarded by this version).
                latest = LatestRun(MALFORMED, "", "", datetime.min.replace(tzinfo=UTC))
            return StoredLatest(latest, snapshot.update_time)

        result: StoredLatest | None = self._call(op)
        return result

    def put(self, job_doc: str, latest: LatestRun, if_version: datetime | None) -> datetime:
        document = {
            "run_id": latest.run_id, "attempt_id": latest.attempt_id, "job": latest.job,
            "schedule_time": latest.schedule_time, "generation": latest.generation,
            "forced": latest.forced, "delivered": latest.delivered,
            "taken_at": firestore.SERVER_TIMESTAMP,
        }

        def op() -> datetime:
            ref = self._collection.document(job_doc)
            try:
                if if_version is None:
                    result: Any = ref.create(document, retry=self._retry, timeout=self._timeout)
                else:
                    result = ref.update(
                        document, option=self._client.write_option(last_update_time=if_version),
                        retry=self._retry, timeout=self._timeout)
            except (gexc.AlreadyExists, gexc.FailedPrecondition, gexc.NotFound) as exc:
                raise RecordChanged(job_doc) from exc
            return result.update_time  # type: ignore[no-any-return]

        written: datetime = self._call(op)
        return written


@dataclass(frozen=True)
class Clear:
    """No live previous run: claim this run, then take the job at `version`."""

    job_doc: str
    version: datetime | None  # the latest-run document's, None: there was none
    previous: str | None  # the run it named (None: none, or this run itself)


@dataclass(frozen=True)
class Answer:
    """The delivery is answered without running: `outcome` (a protocol Outcome value)."""

    outcome: str
    run_id: str
    detail: str
    attempt_id: str | None = None
    attempts: int | None = None
    result_json: str | None = None


def run_order(schedule_time: datetime, forced: bool, business: BusinessSchedule | None
              ) -> tuple[datetime, datetime, int]:
    """Where a run stands among its job's runs, for `replace` (only a later run replaces
    an earlier one): the first instant its business run is due, then its local time (runs
    shifted to one clock change), from the job's schedule; a schedule time that names no
    business run (away from a clock change, a manual POST) is its own instant. A forced run
    ("Run now") carries the job's next schedule time and was pressed before that time: it
    stands just before the scheduled run of that time, after every earlier run."""
    named = business.run_named(schedule_time) if business is not None else None
    if isinstance(named, BusinessRun):
        return named.due, named.local, 0 if forced else 1
    return schedule_time, datetime.min, 0 if forced else 1


def is_live(stored: StoredRun | None) -> bool:
    """A run that blocks the next one: in progress, its lease not lapsed (store's clock)."""
    return (stored is not None and stored.record.status is RunStatus.IN_PROGRESS
            and not stored.lease_expired and not stored.past_expiry)


def settled_answer(run_id: str, stored: StoredRun | None) -> Answer | None:
    """A run whose record says it is over for good, answered from that record."""
    if stored is None or stored.past_expiry:
        return None
    record = stored.record
    if record.status is RunStatus.COMPLETED:
        return Answer("duplicate", run_id, "", record.attempt_id, record.attempts,
                      record.result_json)
    if record.status is RunStatus.SKIPPED:
        return Answer("skipped", run_id, f"skipped: run {record.blocked_by} of the job held "
                      "a live claim (overlap: forbid)", record.attempt_id, record.attempts)
    if record.replaced_by is not None and not is_live(stored):
        # Asked to stop for a newer run (overlap: replace), and stopped: never taken again.
        return Answer("skipped", run_id, f"replaced by run {record.replaced_by} of the job "
                      f"(overlap: replace); it had {record.status.value}",
                      record.attempt_id, record.attempts)
    if record.status is RunStatus.FAILED and record.permanent:
        return Answer("failed_permanent", run_id, record.error or "", record.attempt_id,
                      record.attempts, record.result_json)
    return None


class OverlapGate:
    """Steps 1-4 of the module's docstring, over the run store and the latest-run store."""

    def __init__(
        self, latest: LatestRunStore, runs: DeletableRunStore, lease_seconds: float,
        expire_at: Callable[[], datetime], wall_clock: Callable[[], datetime],
    ) -> None:
        self._latest = latest
        self._runs = runs
        self._lease = lease_seconds
        self._expire_at = expire_at
        self._wall_clock = wall_clock

    def enter(self, key: RunKey, policy: str, business: BusinessSchedule | None = None
              ) -> Clear | Answer:
        """Before the claim: may this run go on? `business`: the job's schedule (its
        X-Dedup-Schedule), which orders its runs under `replace`. StoreUnavailable: nothing
        was written; MalformedRecord: this run's own document is no run record (nothing
        runs over it)."""
        assert policy != OVERLAP_ALLOW  # allow never reads the job's latest run
        job_doc = latest_run_id(key)
        found = self._latest.get(job_doc)
        previous = found.latest.run_id if found is not None else None
        if previous == key.run_id:
            previous = None  # this run's own earlier attempt: the claim judges it
        records = self._runs.get_many([key.run_id] + ([previous] if previous else []))
        own = records.get(key.run_id)
        if isinstance(own, MalformedRun):
            raise MalformedRecord(own)
        settled = settled_answer(key.run_id, own)
        if settled is not None:
            return settled
        # A previous run whose document is no record blocks nothing, as a latest-run
        # document that names no run (MALFORMED): its holder, if any, finds it changed.
        read = records.get(previous) if previous else None
        blocking = read if isinstance(read, StoredRun) else None
        if previous is None or not is_live(blocking):
            return Clear(job_doc, found.version if found is not None else None, previous)
        assert blocking is not None
        assert found is not None
        if found.latest.delivered and policy in (OVERLAP_FORBID, OVERLAP_REPLACE):
            # The watchdog delivered the live run (a re-run, a backfill, a catch-up): it is
            # never replaced, and a scheduled run meeting it is not lost: it waits.
            return Answer("in_progress", key.run_id, f"run {previous} of the job (a watchdog "
                          "delivery) holds a live claim; this run waits for it")
        if policy == OVERLAP_FORBID:
            return self._skip(key, previous, own)
        if policy == OVERLAP_REPLACE and (
                run_order(key.schedule_time, key.forced or key.early, business)
                <= run_order(found.latest.schedule_time, found.latest.forced, business)):
            # Only a newer run replaces: an older one (a late retry of a run that failed)
            # must not stop the run that took the job after it. It waits, writing nothing:
            # a retry once that run ended runs it; if its retries run out first, its record
            # (`failed`) or its absence (`missed`) is what the watchdog reports.
            return Answer("in_progress", key.run_id, f"run {previous} of the job, a newer "
                          "run, holds a live claim; this older run waits for it (overlap: "
                          "replace: only a newer run replaces an older one)")
        if policy == OVERLAP_REPLACE and blocking.record.replaced_by is None:
            # Best effort: a write that failed or lost a race is made by the next retry.
            with contextlib.suppress(RecordChanged, StoreUnavailable):
                self._runs.replace(previous, replace(blocking.record, replaced_by=key.run_id),
                                   blocking.version)
        why = ("asked it to stop (overlap: replace)" if policy == OVERLAP_REPLACE
               else "overlap: wait")
        return Answer("in_progress", key.run_id,
                      f"run {previous} of the job holds a live claim; {why}")

    def take(self, key: RunKey, attempt_id: str, clear: Clear, delivered: bool = False
             ) -> LatestRun | None:
        """After the claim, before the job: make this attempt the job's latest run. None:
        done; else the run that took the job first (this attempt must run nothing; its
        run_id is UNKNOWN if it could not be read). `delivered`: this is a watchdog
        delivery. StoreUnavailable: unknown (the caller gives its claim back)."""
        latest = LatestRun(key.run_id, attempt_id, key.job_id, key.schedule_time,
                           key.generation, key.forced or key.early, delivered)
        try:
            self._latest.put(clear.job_doc, latest, clear.version)
            return None
        except RecordChanged:
            now = self._latest.get(clear.job_doc)
        if now is not None and (now.latest.run_id, now.latest.attempt_id) == (
                key.run_id, attempt_id):
            return None  # our own write landed and the client's retry of it conflicted
        if now is None:
            return LatestRun(UNKNOWN, "", "", datetime.min.replace(tzinfo=UTC))
        return now.latest

    def give_back(self, run_id: str, previous: RunRecord | None, if_version: datetime
                  ) -> datetime | None:
        """Undo a claim that ran nothing and must leave no outcome (it lost the race to take
        the job, or could not take it): a fresh claim is deleted, a takeover restores the
        record it replaced (a lapsed claim restored lapsed: lease 0, so it blocks nothing).
        Guarded by the claim's version: RecordChanged if the record moved on."""
        if previous is None:
            self._runs.delete(run_id, if_version)
            return None
        if previous.status is RunStatus.IN_PROGRESS:
            previous = replace(previous, lease_seconds=0.0)
        return self._runs.replace(run_id, previous, if_version)

    def skipped_record(self, key: RunKey, blocked_by: str) -> RunRecord:
        return replace(
            RunRecord.claim(key, uuid.uuid4().hex, 0, self._lease, self._expire_at(),
                            self._wall_clock()),
            status=RunStatus.SKIPPED, blocked_by=blocked_by,
        )

    def _skip(self, key: RunKey, blocked_by: str, own: StoredRun | None) -> Answer:
        """Record this run `skipped`, only if it has no record: a run with one (it failed,
        or its claim lapsed) keeps that evidence and waits instead (409); a live one is
        answered 409 too, a settled one from its record."""
        detail = f"skipped: run {blocked_by} of the job holds a live claim (overlap: forbid)"
        if (key.forced or key.early) and (own is None or (own.past_expiry and not is_live(own))):
            # "Run now" refused, not recorded: a record would be final under a run_id the
            # next press shares (separate) or the scheduled run shares (replaceNext).
            return Answer("skipped", key.run_id, f"{detail}; a forced run is not recorded: "
                          "press it again once that run ended")
        if own is None:
            record = self.skipped_record(key, blocked_by)
            try:
                self._runs.create(key.run_id, record)
                return Answer("skipped", key.run_id, detail, record.attempt_id, 0)
            except RecordExists:
                own = self._runs.get(key.run_id)
        if own is not None and own.past_expiry and not is_live(own):
            record = self.skipped_record(key, blocked_by)  # a leftover counts as absent
            try:
                self._runs.replace(key.run_id, record, own.version)
                return Answer("skipped", key.run_id, detail, record.attempt_id, 0)
            except RecordChanged:
                own = self._runs.get(key.run_id)
        if own is None or own.past_expiry:
            return Answer("in_progress", key.run_id, "record kept changing; retry")
        settled = settled_answer(key.run_id, own)
        if settled is not None:
            return settled
        if is_live(own):
            return Answer("in_progress", key.run_id, "another attempt holds it",
                          own.record.attempt_id, own.record.attempts)
        return Answer("in_progress", key.run_id, f"run {blocked_by} of the job holds a live "
                      f"claim; this run has a record ({own.record.status.value}), kept: it "
                      "waits (overlap: forbid)", own.record.attempt_id, own.record.attempts)

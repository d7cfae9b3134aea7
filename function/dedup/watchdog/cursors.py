"""The watchdog's store: run records by ID (read only), and its guarded cursor documents.

A job's records are in the dedup function's database (DEDUP_DATABASE) unless its entry
names another `database`: a proxied job's, in the proxy's own database; a runtime's job's,
in its runtime's (`<databaseName>-<runtime>`). The watchdog only reads run records (the
function it delivers to writes them). What it writes is in a database of its own
(DEDUP_WATCH_DATABASE, infra's `<databaseName>-watchdog`), which the dedup function's
account, running the team's job code, cannot write: one cursor document per job in
`<collection>_watchdog` (the last judged schedule time, the in-progress runs it still
watches, the overlong runs already reported, its pending catch-ups and incident streaks, the
incidents held during a silence: dedup/watchdog/silences.py),
so each problem is reported once, and the status of the re-run requests it delivers, from
`<collection>_reruns` there (dedup/watchdog/reruns.py). (Unset: both in DEDUP_DATABASE, as
the demo and older tests keep them.) Each cursor write is guarded by the version the tick
read: a tick that overlapped another gets CursorMoved instead of overwriting it. A cursor
document it cannot read (a field missing or of the wrong type) is never trusted: the tick
reports it `malformed` and judges the job afresh.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol, TypeVar

from google.api_core import exceptions as gexc

from dedup.beyond import COLLECTION_SUFFIX as BEYOND_COLLECTION_SUFFIX
from dedup.store import MalformedRun, StoredRun, StoreError
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.incidents import MalformedStreak, Streak, streaks_from_document
from dedup.watchdog.outbox import Line, lines_from_document
from dedup.watchdog.reruns import MalformedDocument
from dedup.watchdog.schedule_edits import ScheduleHistory

_Chunk = TypeVar("_Chunk")
_Result = TypeVar("_Result")
# Cursors read per BatchGetDocuments: 5,000 in one call outlasted the store timeout.
CURSOR_READ_BATCH = 300
# Batched reads and writes of one tick in flight side by side (each a round trip).
MAX_PARALLEL_BATCHES = 8
# Cursor writes per commit (Firestore's limit per batch): 5,000 jobs, 10 commits, not 5,000.
CURSOR_WRITE_BATCH = 500


@dataclass
class Cursor:
    """Per job, in `<collection>_watchdog/<job name>`."""

    judged_through: datetime | None = None  # every run scheduled at or before is judged
    watch_from: datetime | None = None  # when the watchdog began watching the job
    first_run: datetime | None = None  # schedule time of the job's first recorded run
    never_ran_reported: bool = False
    # In-progress runs still watched (run_id -> schedule time), and the overlong ones
    # already reported (run_id -> schedule time); both pruned to the lookback.
    watching: dict[str, datetime] = field(default_factory=dict)
    overlong: dict[str, datetime] = field(default_factory=dict)
    # Catch-ups delivered but not executed yet (run_id -> PendingCatchUp): delivered again
    # while inside their bound, reported with their last error once it is over.
    catch_ups: dict[str, PendingCatchUp] = field(default_factory=dict)
    # The job's incident streaks by kind (dedup.watchdog.incidents): moved with the cursor, in one
    # guarded write, so a transition is made once.
    incidents: dict[str, Streak] = field(default_factory=dict)
    # The lines a tick committed with this cursor and has not yet logged and cleared
    # (dedup/watchdog/outbox.py): the next tick carries them into its commit and logs them.
    outbox: list[Line] = field(default_factory=list)
    # The `incident_opened` lines held during a silence, logged (paged) once it is over if
    # their streak is still open (dedup/watchdog/silences.py).
    held: list[Line] = field(default_factory=list)
    # The runs beyond the schedule already judged (run_id -> arrival; dedup/watchdog/beyond.py),
    # pruned to the ledgers a tick reads.
    beyond_seen: dict[str, datetime] = field(default_factory=dict)
    # The schedules the job was judged by, and when each changed (dedup/watchdog/
    # schedule_edits.py): each run is judged by the schedule in force at its time.
    schedules: ScheduleHistory = field(default_factory=ScheduleHistory)
    # Not stored: why the document read was no cursor (this one then starts afresh).
    malformed: str | None = None
    # Not stored: the document's version as read (None: there was none); its write is
    # guarded by it, so an overlapping tick cannot overwrite (nor repeat) this one's moves.
    version: datetime | None = None

    def to_document(self, now: datetime) -> dict[str, Any]:
        return {
            "judged_through": self.judged_through,
            "watch_from": self.watch_from,
            "first_run": self.first_run,
            "never_ran_reported": self.never_ran_reported,
            "watching": dict(self.watching),
            "overlong": dict(self.overlong),
            "catch_ups": {r: c.to_document() for r, c in self.catch_ups.items()},
            "incidents": {k: v.to_document() for k, v in self.incidents.items()},
            "outbox": [dict(line) for line in self.outbox],
            "held": [dict(line) for line in self.held],
            "beyond_seen": dict(self.beyond_seen),
            "schedules": self.schedules.to_document(),
            "updated_at": now,
        }

    @classmethod
    def from_document(cls, data: Mapping[str, Any] | None) -> Cursor:
        """The cursor a document holds; MalformedDocument if it is none (a field of the
        wrong type: the tick would fail on it, every tick)."""
        if not data:
            return cls()
        never_ran = data.get("never_ran_reported", False)
        if not isinstance(never_ran, bool):
            raise MalformedDocument(f"never_ran_reported is {_shown(never_ran)}, not a bool")
        catch_ups = _mapping(data, "catch_ups")
        try:
            incidents = streaks_from_document(data.get("incidents"))
        except MalformedStreak as exc:
            raise MalformedDocument(str(exc)) from None
        try:
            outbox = lines_from_document(data.get("outbox"))
            held = lines_from_document(data.get("held"), "held")
            schedules = ScheduleHistory.from_document(data.get("schedules"))
        except ValueError as exc:
            raise MalformedDocument(str(exc)) from None
        return cls(
            judged_through=_instant_or_none(data, "judged_through"),
            watch_from=_instant_or_none(data, "watch_from"),
            first_run=_instant_or_none(data, "first_run"),
            never_ran_reported=never_ran,
            watching=_instants(data, "watching"),
            overlong=_instants(data, "overlong"),
            catch_ups={
                str(r): PendingCatchUp.from_document(c, f"catch_ups.{r}")
                for r, c in catch_ups.items()
            },
            incidents=incidents,
            outbox=outbox,
            held=held,
            beyond_seen=_instants(data, "beyond_seen"),
            schedules=schedules,
        )

    @classmethod
    def refused(cls, why: str, version: datetime | None = None) -> Cursor:
        """A fresh cursor in place of a document that is none: the job is judged afresh
        (its open incidents are forgotten: a streak that goes on opens a new one)."""
        return cls(malformed=why, version=version)


def _shown(value: Any) -> str:
    return "missing" if value is None else f"{type(value).__name__} {str(value)[:60]!r}"


def _is_instant(value: Any) -> bool:
    return isinstance(value, datetime) and value.tzinfo is not None


def _instant_or_none(data: Mapping[str, Any], key: str) -> datetime | None:
    value = data.get(key)
    if value is not None and not _is_instant(value):
        raise MalformedDocument(f"{key} is {_shown(value)}, not a timestamp")
    return value


def _mapping(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise MalformedDocument(f"{key} is {_shown(value)}, not a map")
    return value


def _instants(data: Mapping[str, Any], key: str) -> dict[str, datetime]:
    found = dict(_mapping(data, key))
    for run_id, value in found.items():
        if not _is_instant(value):
            raise MalformedDocument(f"{key}.{run_id[:16]} is {_shown(value)}, not a timestamp")
    return found


@dataclass(frozen=True)
class PendingCatchUp:
    """A catch-up delivered `deliveries` times, the last at `delivered_at`, not executed yet
    (no record, or one whose lease lapsed: its instance stopped)."""

    deliveries: int
    delivered_at: datetime
    error: str | None = None  # what the last delivery answered, if it failed

    def to_document(self) -> dict[str, Any]:
        return {"deliveries": self.deliveries, "delivered_at": self.delivered_at,
                "error": self.error}

    @classmethod
    def from_document(cls, data: Any, where: str = "catch_up") -> PendingCatchUp:
        if not isinstance(data, Mapping):
            raise MalformedDocument(f"{where[:40]} is {_shown(data)}, not a map")
        deliveries = data.get("deliveries") or 1
        if isinstance(deliveries, bool) or not isinstance(deliveries, int) or deliveries < 1:
            raise MalformedDocument(f"{where[:40]}.deliveries is {_shown(deliveries)}")
        delivered_at, error = data.get("delivered_at"), data.get("error")
        if not isinstance(delivered_at, datetime) or delivered_at.tzinfo is None:
            raise MalformedDocument(f"{where[:40]}.delivered_at is {_shown(delivered_at)}, "
                                    "not a timestamp")
        if error is not None and not isinstance(error, str):
            raise MalformedDocument(f"{where[:40]}.error is {_shown(error)}, not text")
        return cls(deliveries, delivered_at, error)


class WatchStore(Protocol):
    """What the watchdog needs: records by ID (read only), in its own database or in the
    job's `database`, and its own cursor documents."""

    def get_many(
        self, run_ids: Sequence[str], database: str | None = None
    ) -> Mapping[str, StoredRun | MalformedRun]:
        """The records by ID (absent ones left out); a document that is no record is its
        MalformedRun, so it costs only its own run a verdict."""
        ...

    def get_cursors(self, jobs: Sequence[str]) -> dict[str, Cursor]:
        ...

    def put_cursors(self, cursors: Mapping[str, Cursor], now: datetime) -> dict[str, datetime]:
        """Write each job's cursor (job name -> cursor); each written one's new version."""
        ...

    def clear_outboxes(self, versions: Mapping[str, datetime]) -> None:
        """Empty each job's cursor outbox, if the cursor is still at that version (its lines
        were logged); one that moved on is left to the tick that moved it."""
        ...


class FirestoreWatchStore:
    """The watchdog's store: run records by ID through the RunStore (read only), in
    DEDUP_DATABASE or the one a job names (`by_database`: a RunStore per database ID a job
    may name, DEDUP_DATABASE's included), and its own cursor documents, one per job, in
    `<collection>_watchdog` of its own database (`own`, DEDUP_WATCH_DATABASE's store; by
    default the records' store): the only thing it writes there besides the re-run
    requests' status."""

    def __init__(
        self,
        runs: FirestoreRunStore,
        cursor_collection: str,
        by_database: Mapping[str, FirestoreRunStore] | None = None,
        own: FirestoreRunStore | None = None,
    ) -> None:
        self._runs = runs
        self._own = own or runs
        self._by_database = dict(by_database or {})
        self._cursors = self._own.client.collection(cursor_collection)

    def get_many(
        self, run_ids: Sequence[str], database: str | None = None
    ) -> Mapping[str, StoredRun | MalformedRun]:
        store = self._runs if database is None else self._by_database[database]
        return store.get_many(run_ids)

    def get_ledgers(
        self, ledger_ids: Sequence[str], database: str | None = None
    ) -> dict[str, Mapping[str, Any]]:
        """The ledgers of runs beyond the schedule (dedup/beyond.py) by ID, beside the
        records of `database` (absent ones left out); read only."""
        store = self._runs if database is None else self._by_database[database]
        ledgers = store.client.collection(store.collection + BEYOND_COLLECTION_SUFFIX)

        def read(chunk: Sequence[str]) -> dict[str, Mapping[str, Any]]:
            def op() -> dict[str, Mapping[str, Any]]:
                snapshots: Any = store.client.get_all(
                    [ledgers.document(i) for i in chunk], retry=store.retry,
                    timeout=store.timeout)
                return {s.id: s.to_dict() or {} for s in snapshots if s.exists}

            return store.call(op)

        found: dict[str, Mapping[str, Any]] = {}
        for part in in_parallel(read, [ledger_ids[i:i + CURSOR_READ_BATCH]
                                       for i in range(0, len(ledger_ids), CURSOR_READ_BATCH)]):
            found.update(part)
        return found

    def get_cursors(self, jobs: Sequence[str]) -> dict[str, Cursor]:
        def read(chunk: Sequence[str]) -> dict[str, Cursor]:
            def op() -> dict[str, Cursor]:
                refs = [self._cursors.document(job) for job in chunk]
                snapshots: Any = self._own.client.get_all(
                    refs, retry=self._own.retry, timeout=self._own.timeout
                )
                return {s.id: _cursor(s.to_dict(), s.update_time) for s in snapshots
                        if s.exists}

            return self._own.call(op)

        chunks = [jobs[i:i + CURSOR_READ_BATCH] for i in range(0, len(jobs), CURSOR_READ_BATCH)]
        found: dict[str, Cursor] = {}
        for part in in_parallel(read, chunks):
            found.update(part)
        return found

    def put_cursors(self, cursors: Mapping[str, Cursor], now: datetime) -> dict[str, datetime]:
        """Each cursor written only if its document is still as this tick read it (created
        if there was none): a tick that overlapped another (a Scheduler retry next to a slow
        tick) gets CursorMoved instead of overwriting the other's cursors and streaks (and
        writes nothing of that chunk: one commit per chunk, all or nothing). Returns each
        cursor's new version (what its outbox's acknowledgement is guarded by)."""
        # Marks this write, so that a retry of a commit that landed knows it for its own.
        written_by = uuid.uuid4().hex

        def write(chunk: Sequence[tuple[str, Cursor]]) -> dict[str, datetime]:
            def op() -> dict[str, datetime]:
                batch = self._own.client.batch()
                for job, cursor in chunk:
                    ref = self._cursors.document(job)
                    document = {**cursor.to_document(now), WRITTEN_BY: written_by}
                    if cursor.version is None:
                        batch.create(ref, document)
                    else:
                        batch.update(ref, document, option=self._own.client.write_option(
                            last_update_time=cursor.version))
                try:
                    results: Any = batch.commit(retry=self._own.retry, timeout=self._own.timeout)
                except (gexc.FailedPrecondition, gexc.AlreadyExists, gexc.NotFound) as exc:
                    landed = self._landed(chunk, written_by)
                    if landed is not None:
                        return landed  # our commit landed, its reply was lost: the retry met it
                    raise CursorMoved(
                        f"a cursor of jobs {[job for job, _ in chunk][:3]} changed since this "
                        f"tick read it (another tick wrote it): {exc}") from exc
                return {job: result.update_time
                        for (job, _), result in zip(chunk, results, strict=True)}

            return self._own.call(op)

        items = list(cursors.items())
        versions: dict[str, datetime] = {}
        for part in in_parallel(write, [items[i:i + CURSOR_WRITE_BATCH]
                                        for i in range(0, len(items), CURSOR_WRITE_BATCH)]):
            versions.update(part)
        return versions

    def clear_outboxes(self, versions: Mapping[str, datetime]) -> None:
        """One guarded commit per chunk; a chunk with a cursor that moved on (its commit
        fails whole) is cleared one cursor at a time, skipping the moved ones: the tick
        that moved a cursor carried its lines into its own commit."""
        def clear(chunk: Sequence[tuple[str, datetime]]) -> None:
            def guarded(job: str, version: datetime) -> dict[str, Any]:
                return {"reference": self._cursors.document(job), "field_updates": {
                    "outbox": []}, "option": self._own.client.write_option(
                        last_update_time=version)}

            def op() -> None:
                batch = self._own.client.batch()
                for job, version in chunk:
                    batch.update(**guarded(job, version))
                try:
                    batch.commit(retry=self._own.retry, timeout=self._own.timeout)
                except (gexc.FailedPrecondition, gexc.NotFound):
                    for job, version in chunk:
                        single = self._own.client.batch()
                        single.update(**guarded(job, version))
                        try:
                            single.commit(retry=self._own.retry, timeout=self._own.timeout)
                        except (gexc.FailedPrecondition, gexc.NotFound):
                            continue  # moved on since: no longer this tick's to clear

            self._own.call(op)

        items = list(versions.items())
        in_parallel(clear, [items[i:i + CURSOR_WRITE_BATCH]
                            for i in range(0, len(items), CURSOR_WRITE_BATCH)])

    def _landed(
        self, chunk: Sequence[tuple[str, Cursor]], written_by: str
    ) -> dict[str, datetime] | None:
        """Each cursor's version if every cursor of `chunk` is this write's own (its
        WRITTEN_BY mark): a commit that landed while its reply was lost, which the client's
        retry then found changed. None if any is not."""
        refs = [self._cursors.document(job) for job, _ in chunk]
        snapshots: Any = self._own.client.get_all(
            refs, retry=self._own.retry, timeout=self._own.timeout)
        found = {s.id: s for s in snapshots if s.exists}
        if not all(job in found and (found[job].to_dict() or {}).get(WRITTEN_BY) == written_by
                   for job, _ in chunk):
            return None
        return {job: found[job].update_time for job, _ in chunk}


WRITTEN_BY = "written_by"
"""A cursor document's mark of the write that made it (put_cursors)."""


class CursorMoved(StoreError):
    """A cursor's guarded write found the document changed: another tick moved it."""


def _cursor(data: Mapping[str, Any] | None, version: datetime | None = None) -> Cursor:
    try:
        return replace(Cursor.from_document(data), version=version)
    except MalformedDocument as exc:
        return Cursor.refused(str(exc), version)


def in_parallel(call: Callable[[_Chunk], _Result], chunks: Sequence[_Chunk]) -> list[_Result]:
    """`call` on each chunk, up to MAX_PARALLEL_BATCHES at a time (the first error raised,
    as a sequential loop would); one chunk runs here, with no thread."""
    if len(chunks) <= 1:
        return [call(chunk) for chunk in chunks]
    workers = min(MAX_PARALLEL_BATCHES, len(chunks))
    with ThreadPoolExecutor(workers, thread_name_prefix="watchdog-batch") as pool:
        return list(pool.map(call, chunks))

"""Backfills (`make backfill`): the runs of a range, released into the re-run queue a few
at a time, so the watchdog delivers them at a bounded rate, exactly once per generation.

`make backfill` (operator_tools/backfill.py) judges every run of the range with `make rerun`'s
checks and writes the plan in one commit (atomic: a killed command wrote all of it or
nothing) to the watchdog's own database, next to the re-run requests:

- `<collection>_backfills/<job>`: the job's backfill (one at a time per job: the latest,
  kept once finished until the next replaces it): its ID (a hash of what it asks for, so
  the same command asked again finds it and queues nothing), range, mode, order, who asked
  and why, and its progress: `next` (how many of its runs are released), `in_flight`
  (the released requests not finished yet: request ID -> position), the counts of `done`,
  `failed` and `refused` ones, and its `state` (active, finished, cancelled, or stopped:
  asked with STOP_ON_FAILURE=1, one of its runs failed, `stopped_at` names the earliest);
- `.../pages/<backfill ID>-<k>`: its runs in delivery order, PAGE_SIZE per page (schedule
  time and generation each).

At each tick (after the pending re-runs are delivered), for each active backfill of a job
with re-runs on, the watchdog (BackfillPacer) reads its in-flight requests: finished ones
are counted and leave `in_flight`; then it releases the next runs, as many as keep
`in_flight` within DEDUP_WATCH_BACKFILL_IN_FLIGHT (default 1: a backfill never runs two
runs of a job at once) and at most DEDUP_WATCH_BACKFILL_RUNS_PER_TICK a tick: each becomes
a re-run request (dedup/watchdog/reruns.py, `backfill` set) and is delivered by the same code,
with the same checks, as `make rerun`'s. Delivered directly (the demo, tests), the tick
repeats this while the requests finish at once, up to the per-tick bound and
TICK_BUDGET_SECONDS; through Cloud Tasks, once a tick (their outcome is read at the next).

Every write is safe to repeat: requests are created before the backfill's progress is
written (a tick that dies in between leaves requests that the next tick, releasing the
same positions, finds and adopts: their `backfill` is this one), and the progress is
written guarded by the version the tick read (`last_update_time`): two ticks at once
release the same positions, one writes, the other stops. Each position is counted once,
when it leaves `in_flight` in a write that landed.
"""

from __future__ import annotations

import functools
import hashlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from google.api_core import exceptions as gexc

from dedup.settings import SettingsError, number_setting
from dedup.store import RecordChanged, RecordExists
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.due import rfc3339
from dedup.watchdog.reruns import (
    DONE,
    FAILED,
    PENDING,
    FirestoreRerunQueue,
    MalformedDocument,
    RerunRequest,
)

BACKFILLS_SUFFIX = "_backfills"
PAGES = "pages"
# Runs per page document: about 30 KB, far below Firestore's 1 MiB per document.
PAGE_SIZE = 1000
# Backfill documents read per BatchGetDocuments (as the watchdog's cursors).
READ_BATCH = 300
# The most runs one backfill queues: its plan is one commit (Firestore: 500 writes, 10 MiB),
# and `make backfill` reads about two records per run of the range to judge it.
MAX_BACKFILL_RUNS = 20_000
MISSING, FAILED_RUNS, ALL = "missing", "failed", "all"
MODES = (MISSING, FAILED_RUNS, ALL)
FORWARD, REVERSE = "forward", "reverse"
ORDERS = (FORWARD, REVERSE)
ACTIVE, FINISHED, CANCELLED = "active", "finished", "cancelled"
# STOP_ON_FAILURE: a run of it failed, so nothing more is released (its runs in flight
# finish); `stopped_at` names the failed run.
STOPPED = "stopped"
STATES = (ACTIVE, FINISHED, CANCELLED, STOPPED)
# What the watchdog marks a document that is no backfill (never read as one again).
REFUSED_STATE = "refused"
RUNS_PER_TICK_ENV = "DEDUP_WATCH_BACKFILL_RUNS_PER_TICK"
IN_FLIGHT_ENV = "DEDUP_WATCH_BACKFILL_IN_FLIGHT"
DEFAULT_RUNS_PER_TICK = 20
DEFAULT_IN_FLIGHT = 1
# A tick stops releasing after this long (its Scheduler attempt deadline is 180 s).
TICK_BUDGET_SECONDS = 60.0
_Delivered = TypeVar("_Delivered")
_Value = TypeVar("_Value")


@dataclass(frozen=True)
class BackfillSettings:
    """How fast the watchdog releases a backfill's runs, per job."""

    runs_per_tick: int = DEFAULT_RUNS_PER_TICK
    in_flight: int = DEFAULT_IN_FLIGHT

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> BackfillSettings:
        per_tick = number_setting(env, RUNS_PER_TICK_ENV, DEFAULT_RUNS_PER_TICK, minimum=1)
        in_flight = number_setting(env, IN_FLIGHT_ENV, DEFAULT_IN_FLIGHT, minimum=1)
        if per_tick != int(per_tick) or in_flight != int(in_flight):
            raise SettingsError(f"{RUNS_PER_TICK_ENV} and {IN_FLIGHT_ENV} must be whole "
                                "numbers of runs")
        return cls(int(per_tick), int(in_flight))


def backfills_collection(collection: str) -> str:
    return collection + BACKFILLS_SUFFIX


def backfill_id(project: str, location: str, job: str, first: datetime, last: datetime,
                mode: str, order: str) -> str:
    """What a backfill asks for, hashed: the same command asked again has the same ID."""
    text = "\x1f".join([project, location, job, first.isoformat(), last.isoformat(), mode,
                        order])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class PlannedRun:
    schedule_time: datetime  # aware UTC: the run's key time (dedup.business_runs)
    generation: int


@dataclass
class Backfill:
    """A job's backfill: what it asks for and how far it got (see the module doc)."""

    backfill_id: str
    project: str
    location: str
    job: str
    first: datetime  # FROM and TO, aware
    last: datetime
    mode: str
    order: str
    reason: str
    requested_by: str
    requested_at: datetime
    total: int
    next: int = 0
    in_flight: dict[str, int] = field(default_factory=dict)
    done: int = 0
    failed: int = 0
    refused: int = 0
    last_error: str | None = None
    state: str = ACTIVE
    finished_at: datetime | None = None
    # STOP_ON_FAILURE=1: stop releasing at the first failed run (`stopped_at`: its time).
    stop_on_failure: bool = False
    stopped_at: datetime | None = None

    @property
    def pages(self) -> int:
        return math.ceil(self.total / PAGE_SIZE)

    @property
    def finished_runs(self) -> int:
        return self.done + self.failed + self.refused

    def page_ids(self) -> list[str]:
        return [f"{self.backfill_id}-{k}" for k in range(self.pages)]

    def progress(self) -> dict[str, Any]:
        return {
            "job": self.job, "backfill": self.backfill_id, "state": self.state,
            "total": self.total, "released": self.next, "in_flight": len(self.in_flight),
            "done": self.done, "failed": self.failed, "refused": self.refused,
            **({"stopped_at": rfc3339(self.stopped_at)}
               if self.stopped_at is not None else {}),
        }

    def to_document(self, now: datetime) -> dict[str, Any]:
        return {
            "backfill_id": self.backfill_id, "project": self.project,
            "location": self.location, "job": self.job, "first": self.first,
            "last": self.last, "mode": self.mode, "order": self.order, "reason": self.reason,
            "requested_by": self.requested_by, "requested_at": self.requested_at,
            "total": self.total, "next": self.next, "in_flight": dict(self.in_flight),
            "done": self.done, "failed": self.failed, "refused": self.refused,
            "last_error": self.last_error, "state": self.state,
            "finished_at": self.finished_at, "updated_at": now,
            "stop_on_failure": self.stop_on_failure, "stopped_at": self.stopped_at,
        }

    @classmethod
    def from_document(cls, data: Mapping[str, Any]) -> Backfill:
        """The backfill a document holds; MalformedDocument if it is none."""
        def text(key: str) -> str:
            value = data.get(key)
            if not isinstance(value, str):
                raise MalformedDocument(f"{key} is {_shown(value)}, not text")
            return value

        def count(key: str) -> int:
            value = data.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise MalformedDocument(f"{key} is {_shown(value)}, not a count")
            return value

        def instant(key: str) -> datetime:
            value = data.get(key)
            if not isinstance(value, datetime) or value.tzinfo is None:
                raise MalformedDocument(f"{key} is {_shown(value)}, not a timestamp")
            return value

        stop_on_failure = data.get("stop_on_failure", False)  # absent: written before it
        if not isinstance(stop_on_failure, bool):
            raise MalformedDocument(f"stop_on_failure is {_shown(stop_on_failure)}, not a bool")
        stopped_at = data.get("stopped_at")
        if stopped_at is not None and not (
                isinstance(stopped_at, datetime) and stopped_at.tzinfo is not None):
            raise MalformedDocument(f"stopped_at is {_shown(stopped_at)}, not a timestamp")
        in_flight = data.get("in_flight") or {}
        if not isinstance(in_flight, Mapping) or not all(
                isinstance(k, str) and isinstance(v, int) for k, v in in_flight.items()):
            raise MalformedDocument(f"in_flight is {_shown(in_flight)}, not a map of positions")
        backfill = cls(
            backfill_id=text("backfill_id"), project=text("project"),
            location=text("location"), job=text("job"), first=instant("first"),
            last=instant("last"), mode=text("mode"), order=text("order"),
            reason=text("reason"), requested_by=text("requested_by"),
            requested_at=instant("requested_at"), total=count("total"), next=count("next"),
            in_flight=dict(in_flight), done=count("done"), failed=count("failed"),
            refused=count("refused"),
            last_error=data.get("last_error") if isinstance(data.get("last_error"), str)
            else None,
            state=text("state"),
            finished_at=data.get("finished_at") if isinstance(data.get("finished_at"),
                                                              datetime) else None,
            stop_on_failure=stop_on_failure, stopped_at=stopped_at,
        )
        if backfill.mode not in MODES or backfill.order not in ORDERS or (
                backfill.state not in STATES) or backfill.next > backfill.total or (
                backfill.total > MAX_BACKFILL_RUNS):
            raise MalformedDocument(
                f"mode {backfill.mode[:20]!r}, order {backfill.order[:20]!r}, state "
                f"{backfill.state[:20]!r}, next {backfill.next} of total {backfill.total}: "
                "not a backfill `make backfill` writes")
        return backfill


def _shown(value: Any) -> str:
    return "missing" if value is None else f"{type(value).__name__} {str(value)[:60]!r}"


@dataclass(frozen=True)
class Stored(Generic[_Value]):
    """A document as read, with its version (for a guarded write)."""

    value: _Value
    version: datetime


@dataclass(frozen=True)
class MalformedBackfill:
    """A job's backfill document that is no backfill: why; `refused` once the watchdog
    marked it so (then not reported again; the job's next `make backfill` replaces it)."""

    job: str
    reason: str
    refused: bool = False


class FirestoreBackfills:
    """`<collection>_backfills` of the watchdog's own database, through a RunStore's client,
    timeouts and error mapping."""

    def __init__(self, store: FirestoreRunStore, collection: str) -> None:
        self._store = store
        self._collection = store.client.collection(collection)
        self.path = collection

    def get_many(self, jobs: Sequence[str]) -> dict[str, Stored[Backfill | MalformedBackfill]]:
        def op(chunk: Sequence[str]) -> dict[str, Stored[Backfill | MalformedBackfill]]:
            refs = [self._collection.document(job) for job in chunk]
            found: dict[str, Stored[Backfill | MalformedBackfill]] = {}
            for s in self._store.client.get_all(
                    refs, retry=self._store.retry, timeout=self._store.timeout):
                if not s.exists:
                    continue
                value: Backfill | MalformedBackfill
                data = s.to_dict() or {}
                if data.get("state") == REFUSED_STATE:
                    found[s.id] = Stored(MalformedBackfill(
                        s.id, str(data.get("last_error"))[:300], refused=True), s.update_time)
                    continue
                try:
                    value = Backfill.from_document(data)
                    if value.job != s.id:
                        raise MalformedDocument(f"job {value.job[:80]!r} is not its ID")
                except MalformedDocument as exc:
                    value = MalformedBackfill(s.id, str(exc))
                found[s.id] = Stored(value, s.update_time)
            return found

        wanted = list(dict.fromkeys(jobs))
        found: dict[str, Stored[Backfill | MalformedBackfill]] = {}
        for start in range(0, len(wanted), READ_BATCH):  # thousands at once outlast a timeout
            chunk = wanted[start:start + READ_BATCH]
            found.update(self._store.call(functools.partial(op, chunk)))
        return found

    def get(self, job: str) -> Stored[Backfill | MalformedBackfill] | None:
        return self.get_many([job]).get(job)

    def page(self, backfill: Backfill, k: int) -> list[PlannedRun]:
        def op() -> list[PlannedRun]:
            snapshot: Any = self._pages(backfill.job).document(
                backfill.page_ids()[k]).get(retry=self._store.retry, timeout=self._store.timeout)
            data = snapshot.to_dict() or {} if snapshot.exists else {}
            times, generations = data.get("times"), data.get("generations")
            if not isinstance(times, list) or not isinstance(generations, list) or len(
                    times) != len(generations) or not all(
                    isinstance(t, datetime) for t in times) or not all(
                    isinstance(g, int) and g >= 0 for g in generations):
                raise MalformedDocument(f"page {k} of backfill {backfill.backfill_id} is "
                                        "missing or not a list of runs")
            return [PlannedRun(t, g) for t, g in zip(times, generations, strict=True)]

        return self._store.call(op)

    def _pages(self, job: str) -> Any:
        return self._collection.document(job).collection(PAGES)

    def create(
        self, backfill: Backfill, runs: Sequence[PlannedRun], now: datetime,
        replacing: Stored[Backfill | MalformedBackfill] | None,
    ) -> None:
        """Write the backfill and its pages in one commit: in place of `replacing` (the
        job's previous, finished backfill, unchanged since it was read: its pages are
        deleted), else only if the job has none (RecordExists otherwise)."""
        header = self._collection.document(backfill.job)

        def op() -> None:
            batch = self._store.client.batch()
            if replacing is None:
                batch.create(header, backfill.to_document(now))
            else:
                batch.update(header, backfill.to_document(now),
                             option=self._store.client.write_option(
                                 last_update_time=replacing.version))
                if isinstance(replacing.value, Backfill):  # one write per document
                    for page_id in set(replacing.value.page_ids()) - set(backfill.page_ids()):
                        batch.delete(self._pages(backfill.job).document(page_id))
            for k, page_id in enumerate(backfill.page_ids()):
                chunk = runs[k * PAGE_SIZE:(k + 1) * PAGE_SIZE]
                batch.set(self._pages(backfill.job).document(page_id), {
                    "backfill_id": backfill.backfill_id, "page": k,
                    "times": [r.schedule_time for r in chunk],
                    "generations": [r.generation for r in chunk],
                })
            try:
                batch.commit(retry=self._store.retry, timeout=self._store.timeout)
            except (gexc.AlreadyExists, gexc.FailedPrecondition) as exc:
                raise RecordExists(backfill.job) from exc

        self._store.call(op)

    def update(self, backfill: Backfill, version: datetime, now: datetime) -> datetime:
        """Write the backfill's progress if nobody did since `version` (RecordChanged)."""
        def op() -> datetime:
            try:
                result: Any = self._collection.document(backfill.job).update(
                    backfill.to_document(now),
                    option=self._store.client.write_option(last_update_time=version),
                    retry=self._store.retry, timeout=self._store.timeout)
            except (gexc.FailedPrecondition, gexc.NotFound) as exc:
                raise RecordChanged(backfill.job) from exc
            return result.update_time  # type: ignore[no-any-return]

        return self._store.call(op)

    def refuse(self, job: str, why: str, now: datetime) -> None:
        """Mark a document that is no backfill refused (not read as active again)."""
        def op() -> None:
            self._collection.document(job).update(
                {"state": REFUSED_STATE, "last_error": why, "updated_at": now},
                retry=self._store.retry, timeout=self._store.timeout)

        self._store.call(op)


@dataclass
class _Live:
    backfill: Backfill
    version: datetime
    released: int = 0  # this tick
    changed: bool = False


class BackfillPacer:
    """Releases the active backfills' runs into the re-run queue at a bounded rate."""

    def __init__(
        self, settings: BackfillSettings, backfills: FirestoreBackfills,
        queue: FirestoreRerunQueue, retention_seconds: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._backfills = backfills
        self._queue = queue
        self._retention = timedelta(seconds=retention_seconds)
        self._monotonic = monotonic

    def advance(
        self, jobs: Sequence[str], now: datetime,
        deliver: Callable[[list[RerunRequest], dict[str, list[RerunRequest]]], list[_Delivered]],
        asynchronous: bool, report: Callable[[str, str, str], None],
    ) -> tuple[list[_Delivered], list[dict[str, Any]]]:
        """Settle, release and deliver the backfills of `jobs`: `deliver(requests, of_runs)`
        is the watchdog's delivery of pending re-run requests (its checks included), given
        every request of their runs. (What it delivered, each backfill's progress.)
        `report(job, document, why)` is told of a document that is no backfill."""
        live: dict[str, _Live] = {}
        for job, stored in self._backfills.get_many(jobs).items():
            value = stored.value
            if isinstance(value, MalformedBackfill):
                if value.refused:
                    continue
                self._backfills.refuse(job, value.reason, now)
                report(job, f"{self._backfills.path}/{job}",
                       f"backfill refused, never delivered: {value.reason}")
            elif value.state == ACTIVE or value.in_flight:
                live[job] = _Live(value, stored.version)
        if not live:
            return [], []
        pages: dict[tuple[str, int], list[PlannedRun]] = {}
        budget_end = self._monotonic() + TICK_BUDGET_SECONDS
        delivered: list[_Delivered] = []
        first = True
        while True:
            pending = self._settle(live)
            before = sum(entry.backfill.next for entry in live.values())
            released = [r for entry in live.values() for r in self._release(entry, now, pages)]
            moved = sum(entry.backfill.next for entry in live.values()) > before
            self._write(live, now)
            todo = [*pending, *released]
            if not (moved or first):
                break  # nothing new: what still waits is delivered again at the next tick
            first = False
            if not todo:
                continue  # its positions went to others' requests: release the next ones
            delivered += deliver(todo, self._siblings(todo))
            # Through a queue: the first round settles what the last tick handed over (its
            # records read by `deliver`), so the next round releases the runs after them;
            # once new runs are handed over, their outcome is read at the next tick.
            if (asynchronous and released) or self._monotonic() > budget_end:
                self._settle(live)
                self._write(live, now)
                break
        return delivered, [entry.backfill.progress() for entry in live.values()]

    def _siblings(self, requests: Sequence[RerunRequest]) -> dict[str, list[RerunRequest]]:
        """Every request of each run, read by ID: `make rerun` and `make backfill` number a
        request past every request of its run, so those of generation g's run are among
        generations 0 to g + 1 (no query: the watchdog's pending pass queries)."""
        ids = {
            replace(r.key, generation=g).run_id: r.base_run_id
            for r in requests for g in range(r.generation + 2)
        }
        found: dict[str, list[RerunRequest]] = {}
        for request_id, request in self._queue.read_many(list(ids)).items():
            if isinstance(request, RerunRequest):
                found.setdefault(ids[request_id], []).append(request)
        return {run: sorted(of_run, key=lambda r: r.generation) for run, of_run in found.items()}

    def _settle(self, live: Mapping[str, _Live]) -> list[RerunRequest]:
        """Count the in-flight requests that finished, and let them go; the pending ones.
        A backfill asked to stop on failure stops at its earliest failed run (by position)."""
        wanted = [r for entry in live.values() for r in entry.backfill.in_flight]
        found = self._queue.read_many(wanted) if wanted else {}
        pending: list[RerunRequest] = []
        for entry in live.values():
            backfill = entry.backfill
            failed: list[tuple[int, RerunRequest]] = []
            for request_id, position in list(backfill.in_flight.items()):
                request = found.get(request_id)
                if isinstance(request, RerunRequest) and request.status == PENDING:
                    pending.append(request)
                    continue
                del backfill.in_flight[request_id]
                entry.changed = True
                if request is None or not isinstance(request, RerunRequest):
                    backfill.refused += 1
                    backfill.last_error = ("the request is gone" if request is None
                                           else f"the request is malformed: {request.reason}")
                elif request.status == DONE:
                    backfill.done += 1
                elif request.status == FAILED:
                    backfill.failed += 1
                    backfill.last_error = request.outcome
                    failed.append((position, request))
                else:
                    backfill.refused += 1
                    backfill.last_error = request.outcome
            if failed and backfill.stop_on_failure and backfill.state == ACTIVE:
                _, first_failed = min(failed, key=lambda f: f[0])
                backfill.state = STOPPED
                backfill.stopped_at = first_failed.schedule_time
                backfill.last_error = first_failed.outcome
            if backfill.next >= backfill.total and not backfill.in_flight and (
                    backfill.state == ACTIVE):
                backfill.state = FINISHED
                entry.changed = True
        return pending

    def _release(
        self, entry: _Live, now: datetime, pages: dict[tuple[str, int], list[PlannedRun]]
    ) -> list[RerunRequest]:
        """Create the requests of the next positions the bounds admit; those to deliver."""
        backfill = entry.backfill
        if backfill.state != ACTIVE:
            return []
        room = min(self._settings.in_flight - len(backfill.in_flight),
                   self._settings.runs_per_tick - entry.released,
                   backfill.total - backfill.next)
        if room <= 0:
            return []
        requests: list[tuple[int, RerunRequest]] = []
        for position in range(backfill.next, backfill.next + room):
            k = position // PAGE_SIZE
            if (backfill.backfill_id, k) not in pages:
                pages[(backfill.backfill_id, k)] = self._backfills.page(backfill, k)
            run = pages[(backfill.backfill_id, k)][position % PAGE_SIZE]
            requests.append((position, RerunRequest(
                project=backfill.project, location=backfill.location, job=backfill.job,
                schedule_time=run.schedule_time, generation=run.generation,
                requested_by=backfill.requested_by,
                reason=f"{backfill.reason} (backfill {position + 1}/{backfill.total})",
                requested_at=now, expire_at=now + self._retention,
                backfill=backfill.backfill_id,
            )))
        found = self._queue.create_many([r for _, r in requests])
        released: list[RerunRequest] = []
        for position, request in requests:
            other = found.get(request.request_id)
            if other is not None and other.backfill != backfill.backfill_id:
                # Someone asked for that generation meanwhile (`make rerun`): theirs runs it.
                backfill.refused += 1
                backfill.last_error = (
                    f"generation {request.generation} of "
                    f"{request.schedule_time:%Y-%m-%dT%H:%M:%SZ} was asked by "
                    f"{other.requested_by} meanwhile")
                continue
            backfill.in_flight[request.request_id] = position
            # Released by an earlier try (its tick died before writing the progress):
            # that request, as it now stands (perhaps finished: settled next round).
            adopted = other if other is not None else request
            if adopted.status == PENDING:
                released.append(adopted)
        backfill.next += room
        entry.released += room
        entry.changed = True
        return released

    def _write(self, live: dict[str, _Live], now: datetime) -> None:
        for job, entry in list(live.items()):
            if not entry.changed:
                continue
            backfill = entry.backfill
            if backfill.finished_at is None and (backfill.state == FINISHED or (
                    backfill.state == STOPPED and not backfill.in_flight)):
                backfill.finished_at = now
            try:
                entry.version = self._backfills.update(entry.backfill, entry.version, now)
                entry.changed = False
            except RecordChanged:
                # Another tick (or `make backfill-cancel`) wrote it first: this tick leaves
                # it; what it released is adopted by the next tick that releases it.
                del live[job]


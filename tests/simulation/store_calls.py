"""Seeded sequences of the kit's own store calls, and their answers in a form two stores can
be compared by (test_fake_firestore.py: the emulator's against FakeFirestore's).

A sequence contends the way the protocol's writers do: a few run IDs and jobs only, so
creates meet existing documents, and every guarded write names a version symbolically
(`VersionRef`: the latest its caller saw, an older one, or one never written), which each
store's run resolves against the versions it was itself answered. Answers are normalised:
a timestamp the store made (a version) becomes a label by first appearance ("v0", "v1",
...), so equal versions stay equal and different ones different; values that are not the
store's to answer (NOT_THE_STORES: the kit's wall clock, a random mark) are left out; a
read's read_time is checked not to precede the version it read, then dropped.
"""

from __future__ import annotations

import dataclasses
import enum
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from dedup.overlap import LatestRun
from dedup.store import RunRecord, RunStatus, StoredRun
from dedup.watchdog.backfills import BACKFILLS_SUFFIX, PAGES, Backfill, PlannedRun, Stored
from dedup.watchdog.cursors import Cursor, PendingCatchUp
from dedup.watchdog.incidents import Streak
from dedup.watchdog.reruns import DONE, FAILED, REFUSED, MalformedRequest, RerunRequest
from tests.simulation.kit_stores import KitStores, kit_stores

BASE = datetime(2000, 6, 1, 12, 0, tzinfo=UTC)  # the times calls pass: in the year after it
PASSED_TIMES = (BASE, BASE + timedelta(days=365))
RUNS = ("r0", "r1", "r2")
JOBS = ("jobA", "jobB")
# Fields whose values are not the store's to answer: the kit's wall clock (`renewed_at`),
# the server's time of a transform (`taken_at`: milliseconds, just before the commit, in the
# emulator; the commit's time in production), a random mark (put_cursors' `written_by`).
NOT_THE_STORES = frozenset({"renewed_at", "taken_at", "written_by"})
NEVER = datetime(1999, 1, 1, tzinfo=UTC)  # a version no document has


class Which(enum.Enum):
    LATEST = "latest"  # the last version this caller saw of the document
    STALE = "stale"  # the one before it (a writer whose claim moved on)
    NEVER = "never"  # one the document never had


@dataclass(frozen=True)
class VersionRef:
    kind: str  # "run", "latest", "cursor", "backfill"
    key: str
    which: Which

    def __str__(self) -> str:
        return f"<{self.which.value} {self.kind} {self.key}>"


@dataclass(frozen=True)
class GuardedCursor:
    """A cursor to write, guarded by `ref` (None: created, as one never read)."""

    cursor: Cursor
    ref: VersionRef | None


@dataclass(frozen=True)
class Call:
    """One call of a kit store: `method` of `store` ("raw" writes a document as job code
    or a person could), its arguments (a VersionRef where a version goes) and how the
    failure message shows it."""

    store: str
    method: str
    args: tuple[Any, ...]
    shown: str

    def __str__(self) -> str:
        return f"{self.store}.{self.method}({self.shown})"


# --- the generator -----------------------------------------------------------------------


class CallGenerator:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.last_record: dict[str, RunRecord] = {}
        self.last_backfill: dict[str, Backfill] = {}
        self.minute = 0

    def now(self) -> datetime:
        self.minute += self.rng.choice((0, 1, 1, 5))
        return BASE + timedelta(minutes=self.minute)

    def ref(self, kind: str, key: str) -> VersionRef:
        which = self.rng.choices(list(Which), weights=(6, 3, 1))[0]
        return VersionRef(kind, key, which)

    def record(self, run: str) -> RunRecord:
        rng = self.rng
        attempts = rng.randint(1, 3)
        status = rng.choice(list(RunStatus))
        record = RunRecord(
            status=status, attempt_id=f"a{attempts}", attempts=attempts,
            lease_seconds=rng.choice((30.0, 45.5)), expire_at=BASE + timedelta(days=7),
            job="jobA", schedule_time=BASE, project="p", location="l",
            result_json='{"ok": 1}' if status is RunStatus.COMPLETED else None,
            claimed_at=self.now(), error="boom" if status is RunStatus.FAILED else None,
            forced=rng.random() < 0.2, generation=rng.choice((0, 0, 1)),
            blocked_by="r9" if status is RunStatus.SKIPPED else None,
            replaced_by=rng.choice((None, None, "r8")),
            unfinished_attempts=tuple(range(1, attempts)) if rng.random() < 0.3 else (),
        )
        self.last_record[run] = record
        return record

    def request(self) -> RerunRequest:
        rng = self.rng
        return RerunRequest(
            "p", "l", rng.choice(JOBS), BASE + timedelta(hours=rng.randint(0, 1)),
            rng.randint(1, 2), rng.choice(("ops", "other")), "why",
            BASE + timedelta(minutes=rng.randint(0, 2)),
            backfill=rng.choice((None, None, "bf1")))

    def cursor(self, job: str) -> GuardedCursor:
        rng = self.rng
        return GuardedCursor(Cursor(
            judged_through=self.now(), watch_from=BASE, first_run=rng.choice((None, BASE)),
            never_ran_reported=rng.random() < 0.2,
            watching={f"run{i}": BASE for i in range(rng.randint(0, 2))},
            catch_ups={"run9": PendingCatchUp(rng.randint(1, 3), self.now(),
                                              rng.choice((None, "409")))}
            if rng.random() < 0.4 else {},
            incidents={"missed": Streak(open=True, bad=2, incident="inc1", began=BASE,
                                        opened_at=self.now())} if rng.random() < 0.3 else {},
        ), None if rng.random() < 0.3 else self.ref("cursor", job))

    def backfill(self, job: str) -> tuple[Backfill, list[PlannedRun]]:
        total = self.rng.choice((1, 2, 2, 1001))
        backfill = Backfill(
            f"bf{self.rng.randint(1, 2)}", "p", "l", job, BASE, BASE + timedelta(days=1),
            "all", "forward", "why", "ops", BASE, total=total, next=self.rng.randint(0, total),
            in_flight={"run1": 1} if self.rng.random() < 0.5 else {}, done=self.rng.randint(0, 1))
        return backfill, [PlannedRun(BASE + timedelta(minutes=m), m % 2) for m in range(total)]

    def call(self) -> Call:
        rng = self.rng
        run, job = rng.choice(RUNS), rng.choice(JOBS)
        pick = rng.randrange(100)
        if pick < 11:
            return Call("runs", "create", (run, self.record(run)), run)
        if pick < 17:
            return Call("runs", "get", (run,), run)
        if pick < 21:
            ids = [*rng.sample(RUNS, 2), run, "absent"]
            return Call("runs", "get_many", (ids,), str(ids))
        if pick < 32:
            over = self.last_record.get(run) if rng.random() < 0.5 else None
            ref = self.ref("run", run)
            # Sometimes the record written last again: a write that changes nothing
            same = run in self.last_record and rng.random() < 0.25
            record = self.last_record[run] if same else self.record(run)
            return Call("runs", "replace", (run, record, ref, over),
                        f"{run}, {'the same record ' if same else ''}if {ref}, "
                        f"over={'last' if over else None}")
        if pick < 37:
            ref = self.ref("run", run)
            return Call("runs", "renew", (run, self.now() + timedelta(days=7), ref),
                        f"{run}, if {ref}")
        if pick < 41:
            ref = self.ref("run", run)
            return Call("runs", "delete", (run, ref), f"{run}, if {ref}")
        if pick < 46:
            guard = self.ref("latest", job) if rng.random() < 0.7 else None
            latest = LatestRun(rng.choice(RUNS), "a1", job, BASE, rng.randint(0, 1),
                               rng.random() < 0.3, rng.random() < 0.3)
            return Call("latest", "put", (job, latest, guard),
                        f"{job}, {latest.run_id}, if {guard}")
        if pick < 49:
            return Call("latest", "get", (job,), job)
        if pick < 55:
            cursors = {j: self.cursor(j) for j in rng.sample(JOBS, rng.randint(1, 2))}
            return Call("watch", "put_cursors", (cursors, self.now()),
                        ", ".join(f"{j} if {c.ref}" for j, c in cursors.items()))
        if pick < 59:
            return Call("watch", "get_cursors", (list(JOBS),), "all jobs")
        if pick < 63:
            request = self.request()
            return Call("reruns", "create", (request,), _shown_request(request))
        if pick < 66:
            requests = list({r.request_id: r for r in (self.request() for _ in range(2))}.values())
            return Call("reruns", "create_many", (requests,),
                        ", ".join(_shown_request(r) for r in requests))
        if pick < 70:
            return Call("reruns", "pending", (rng.choice((1, 5)),), "limit")
        if pick < 74:
            request, status = self.request(), rng.choice((DONE, FAILED, REFUSED))
            if rng.random() < 0.5:
                return Call("reruns", "finish", (request, status, "completed", self.now()),
                            f"{_shown_request(request)}, {status}")
            return Call("reruns", "finish_all", ([(request, status, "completed")], self.now()),
                        f"{_shown_request(request)}, {status}")
        if pick < 76:
            request = self.request()
            return Call("reruns", "note_deliveries", ([(request, "409")], self.now()),
                        _shown_request(request))
        if pick < 78:
            request = self.request()
            return Call("reruns", "refuse", (MalformedRequest(request.request_id, job, "bad"),
                                             self.now()), _shown_request(request))
        if pick < 80:
            ids = [self.request().request_id for _ in range(2)]
            return Call("reruns", rng.choice(("get_many", "read_many")), (ids,), "2 requests")
        if pick < 82:
            bases = [self.request().base_run_id for _ in range(2)]
            return Call("reruns", "for_runs", (bases,), "2 runs")
        if pick < 86:
            backfill, planned = self.backfill(job)
            self.last_backfill[job] = backfill
            replacing = rng.random() < 0.6
            return Call("backfills", "create", (backfill, planned, self.now(), replacing),
                        f"{job} {backfill.backfill_id} total {backfill.total}, "
                        f"replacing={'last read' if replacing else None}")
        if pick < 90:
            return Call("backfills", "get_many", (list(JOBS),), "all jobs")
        if pick < 94:
            backfill, _ = self.backfill(job)
            ref = self.ref("backfill", job)
            return Call("backfills", "update", (backfill, ref, self.now()), f"{job}, if {ref}")
        if pick < 96:
            backfill = self.last_backfill.get(job) or self.backfill(job)[0]
            return Call("backfills", "page", (backfill, rng.randint(0, backfill.pages - 1)),
                        f"{job} {backfill.backfill_id}")
        return self.raw()

    def raw(self) -> Call:
        """A document the protocol never writes (job code or a person could)."""
        rng = self.rng
        request = self.request()
        without_backfill = {k: v for k, v in request.to_document().items() if k != "backfill"}
        path, document = rng.choice((
            ("", {"status": "bogus", "job": 1}),
            (RERUNS_PATH, without_backfill),
            (RERUNS_PATH, {"status": "pending", "backfill": None, "job": "jobA"}),
            ("_watchdog", {"never_ran_reported": "yes"}),
            (BACKFILLS_SUFFIX, {"state": "refused", "last_error": "nope"}),
            (BACKFILLS_SUFFIX, {"state": "active"}),
        ))
        key = request.request_id if path == RERUNS_PATH else rng.choice(
            RUNS if path == "" else JOBS)
        return Call("raw", "set", (path, key, document), f"{path or 'runs'}/{key}")


RERUNS_PATH = "_reruns"


def _shown_request(request: RerunRequest) -> str:
    return (f"{request.job}@{request.schedule_time:%H:%M} g{request.generation} "
            f"by {request.requested_by} bf={request.backfill}")


# --- one store's run -----------------------------------------------------------------------


class Executor:
    """Runs calls on one client's kit stores, remembering the versions it was answered."""

    def __init__(self, client: Any, collection: str) -> None:
        self.client = client
        self.collection = collection
        self.stores: KitStores = kit_stores(client, collection)
        self.seen: dict[tuple[str, str], list[datetime]] = {}
        self.last_backfill: dict[str, Stored[Any]] = {}
        self.labels: dict[datetime, str] = {}

    def answer(self, call: Call) -> tuple[str, Any]:
        """What the call returned, or the type of what it raised, normalised."""
        args = tuple(self.resolved(a) for a in call.args)
        try:
            result: Any = None
            if call.store == "raw":
                self.raw(*args)
            elif call.store == "backfills" and call.method == "create":
                backfill, planned, now, replacing = args
                self.stores.backfills.create(
                    backfill, planned, now,
                    self.last_backfill.get(backfill.job) if replacing else None)
            else:
                result = getattr(getattr(self.stores, call.store), call.method)(*args)
        except Exception as exc:  # the answer compared: its type
            return "raised", type(exc).__name__
        self.remember(call, args, result)
        return "returned", self.normalised(result)

    def step(self, step: Callable[[Any, str], Any]) -> tuple[str, Any]:
        """A call of the client itself (client_calls.py), answered as `answer` answers."""
        try:
            return "returned", self.normalised(step(self.client, self.collection))
        except Exception as exc:  # the answer compared: its type
            return "raised", type(exc).__name__

    def resolved(self, arg: Any) -> Any:
        if isinstance(arg, VersionRef):
            seen = self.seen.get((arg.kind, arg.key), [])
            if arg.which is Which.LATEST and seen:
                return seen[-1]
            if arg.which is Which.STALE and len(seen) > 1:
                return seen[-2]
            return NEVER
        if isinstance(arg, dict):
            return {k: self.resolved(v) for k, v in arg.items()}
        if isinstance(arg, GuardedCursor):
            return dataclasses.replace(
                arg.cursor, version=None if arg.ref is None else self.resolved(arg.ref))
        return arg

    def raw(self, suffix: str, key: str, document: dict[str, Any]) -> None:
        self.client.collection(self.collection + suffix).document(key).set(document)

    def remember(self, call: Call, args: tuple[Any, ...], result: Any) -> None:
        """The versions this answer shows, for the VersionRefs of later calls."""
        def saw(kind: str, key: str, version: datetime | None) -> None:
            if version is not None:
                self.seen.setdefault((kind, key), []).append(version)

        kind = {"runs": "run", "latest": "latest", "backfills": "backfill"}.get(call.store)
        if isinstance(result, datetime) and kind is not None:
            saw(kind, args[0] if call.store != "backfills" else args[0].job, result)
        found = {args[0]: result} if call.method == "get" else result
        if isinstance(found, dict):
            for key, value in found.items():
                if isinstance(value, StoredRun):
                    saw("run", key, value.version)
                elif isinstance(value, Cursor):
                    saw("cursor", key, value.version)
                elif isinstance(value, Stored):
                    saw("backfill", key, value.version)
                    self.last_backfill[key] = value
        if call.store == "latest" and call.method == "get" and result is not None:
            saw("latest", args[0], result.version)

    def label(self, moment: datetime) -> str:
        if PASSED_TIMES[0] <= moment < PASSED_TIMES[1]:
            return moment.isoformat()  # a time a call passed, not the store's
        return self.labels.setdefault(moment, f"v{len(self.labels)}")

    def normalised(self, value: Any, field: str | None = None) -> Any:
        if field in NOT_THE_STORES:
            return f"<{field}>"
        if isinstance(value, datetime):
            return self.label(value)
        if isinstance(value, StoredRun):
            assert value.read_time >= value.version, "a read before the version it read"
            return ("StoredRun", self.normalised(value.record), self.label(value.version))
        if isinstance(value, enum.Enum):  # not its value: a stored one comes back as text
            return (type(value).__name__, value.value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return (type(value).__name__, {f.name: self.normalised(getattr(value, f.name), f.name)
                                           for f in dataclasses.fields(value)})
        if isinstance(value, dict):
            return {k: self.normalised(v, k) for k, v in sorted(value.items())}
        if isinstance(value, (list, tuple)):
            return [self.normalised(v) for v in value]
        if isinstance(value, float):
            return ("float", value)  # 1.0 and 1 are different answers
        return value

    def documents(self) -> dict[str, Any]:
        """Every document the calls could have written, normalised."""
        paths = [self.collection + suffix for suffix in (
            "", "_latest", "_watchdog", RERUNS_PATH, BACKFILLS_SUFFIX)]
        paths += [f"{self.collection}{BACKFILLS_SUFFIX}/{job}/{PAGES}" for job in JOBS]
        return {path: [(s.id, self.normalised(s.to_dict()))
                       for s in self.client.collection(path).get()] for path in paths}

    def version_order(self) -> list[str]:
        """The store's versions' labels, oldest first."""
        return [label for _, label in sorted(self.labels.items())]


@dataclass(frozen=True)
class StoreRun:
    """What one store answered to a sequence of calls, in collections named after
    `collection` (which the answers may name: the other store's run takes the same)."""

    collection: str
    answers: list[tuple[str, Any]]
    version_order: list[str]
    documents: dict[str, Any]


def calls_of(seed: int, count: int) -> list[Call]:
    generator = CallGenerator(seed)
    return [generator.call() for _ in range(count)]


def store_run(executor: Executor, calls: Sequence[Call]) -> StoreRun:
    answers = [executor.answer(call) for call in calls]
    return StoreRun(executor.collection, answers, executor.version_order(),
                    executor.documents())


def divergence(seed: int, calls: Sequence[Call], at: int, what: str, emulator: Any,
               fake: Any) -> str:
    """The failure message: the calls up to the first that diverged, and both answers."""
    shown = "\n".join(f"  {i:2} {call}" for i, call in enumerate(calls[:at + 1]))
    return (f"seed {seed}: FakeFirestore's {what} after call {at} differs from the emulator's"
            f"\n{shown}\nemulator: {emulator!r}\nfake:     {fake!r}\n"
            f"replay: pytest '{REPLAY}[seed{seed}]'")


REPLAY = ("tests/simulation/test_fake_firestore.py::"
          "test_the_fake_answers_the_kits_calls_as_the_emulator")

"""FakeFirestore: the part of `google.cloud.firestore.Client` the kit calls, in memory, with
every RPC's fate in the simulation's hands.

What it models (checked against the emulator by tests/simulation/test_fake_firestore.py,
but for several databases and the faults, which tests/simulation/test_fake_fates.py holds):
- documents by path in one or more databases (`for_database`), subcollections included (a
  document's subcollections outlive it, as Firestore's do);
- single-document commits (`create`, `set` without merge, `update`, `delete`) and batches
  (`client.batch()`), all or nothing, with their preconditions and the exceptions the real
  client raises: AlreadyExists (create over a document), NotFound (update of a missing
  document, or a delete with an `exists=True` option), FailedPrecondition (a
  `last_update_time` option that does not match, the document missing included);
- versions: each landed commit's time comes from the simulated clock, strictly after the
  database's previous commit (+1 µs when the clock has not moved); a document's
  `update_time` moves only when a write changes its content (a write of the same values
  keeps the old one and answers it, as Firestore's do); `create_time`; reads' `read_time`
  (never before the database's last commit);
- values as Firestore returns them: datetimes UTC-aware (a naive one is taken as UTC),
  ints stay ints and floats floats (1 and 1.0 are different contents, equal in a query), a
  subclass (a StrEnum) as its plain type, tuples as lists, maps and lists copied both ways
  so no caller shares stored state; SERVER_TIMESTAMP (the commit's time: a stalled
  commit's, when it lands) and DELETE_FIELD (update only); update's keys as field paths
  ("a.b" is field b of map a);
- reads: `DocumentReference.get`, `client.get_all` (duplicates read once, in request
  order), queries on one collection with `==` / `in` filters (`None` with `==` matches a
  null field only; `in` never matches null) and `limit`, ordered by document ID.
- faults: every RPC (a commit, a BatchGetDocuments, a RunQuery) first calls
  `before_rpc(rpc)` (the simulation's yield point), then `fates(rpc)` decides its `Fate`
  (both outside the store's lock: they may block the calling thread). `retry=` and
  `timeout=` are accepted and ignored: a fault is final for the call.

What it does not model (the kit does not call them): transactions, `set(merge=...)`,
transforms other than SERVER_TIMESTAMP and DELETE_FIELD (Increment, ArrayUnion, ...),
query operators other than `==` and `in`, `order_by`, cursors, `select`, listeners,
indexes (every query is served), field paths quoted with backticks, Firestore's limits
(document size, 500 writes per commit, 30 values of an `in`), a batch writing one document
twice with different preconditions (the emulator refuses it as InvalidArgument; here the
writes apply in order), a delete's WriteResult without update_time (here the commit's
time), and the emulator's SERVER_TIMESTAMP at millisecond precision just before the commit
(here the commit's own time, as production's).
"""

from __future__ import annotations

import enum
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal, TypeVar

from google.api_core import exceptions as gexc

from simulation.firestore_documents import (
    Database,
    Precondition,
    StoredDocument,
    Write,
    WriteResult,
    api_error,
    matches,
)
from simulation.firestore_values import MISSING, copied, field_value, stored, utc

DEFAULT_DATABASE = "(default)"
_Answer = TypeVar("_Answer")


class Fate(enum.Enum):
    """What becomes of one RPC."""

    LAND = "land"  # applied, replied
    FAIL = "fail"  # nothing applied; the caller gets ServiceUnavailable
    LOST_REPLY = "lost_reply"  # applied; the caller gets DeadlineExceeded (reads: as FAIL)
    STALL = "stall"  # the caller gets DeadlineExceeded now; a commit is parked (land_stalled)


RpcKind = Literal["commit", "batch_get", "run_query"]


@dataclass(frozen=True)
class Rpc:
    """One RPC as the simulation sees it: `paths` are the documents a commit writes or a
    read asks for (a query: its collection's path), relative to the database; `writes`
    the kind of each write of a commit ("create", "set", "update", "delete"), in step with
    `paths` (empty for reads); `attempt`, which sending of the call it is."""

    kind: RpcKind
    database: str
    paths: tuple[str, ...]
    writes: tuple[str, ...] = ()
    attempt: int = 1  # > 1: the client's own retry of the same call (client_retries)


@dataclass
class _Parked:
    rpc: Rpc
    database: Database
    writes: tuple[Write, ...]


class _World:
    """What every database view of one FakeFirestore shares: the clock, the fault hooks,
    the databases and the parked commits."""

    def __init__(self, clock: Callable[[], datetime], fates: Callable[[Rpc], Fate] | None,
                 before_rpc: Callable[[Rpc], None] | None, client_retries: int) -> None:
        self.clock = clock
        self.fates = fates
        self.before_rpc = before_rpc
        self.client_retries = client_retries
        self.databases: dict[str, Database] = {}
        self.parked: list[_Parked] = []
        self.lock = threading.RLock()
        self.ids = itertools.count(1)

    def database(self, name: str) -> Database:
        found = self.databases.get(name)
        if found is None:
            found = self.databases[name] = Database(name)
        return found

    def fate(self, rpc: Rpc) -> Fate:
        if self.before_rpc is not None:
            self.before_rpc(rpc)
        return Fate.LAND if self.fates is None else self.fates(rpc)

    def now(self) -> datetime:
        return utc(self.clock())


def _unavailable(rpc: Rpc) -> gexc.GoogleAPICallError:
    return api_error(gexc.ServiceUnavailable, f"simulated: {rpc.kind} {rpc.paths[:3]} failed")


def _deadline(rpc: Rpc) -> gexc.GoogleAPICallError:
    return api_error(gexc.DeadlineExceeded,
                     f"simulated: {rpc.kind} {rpc.paths[:3]} got no answer")


def _retry_error(rpc: Rpc, last: Exception) -> gexc.RetryError:
    return gexc.RetryError(  # type: ignore[no-untyped-call]
        f"simulated: {rpc.kind} {rpc.paths[:3]} retried, no answer", last)


class FakeFirestore:
    """An in-memory Firestore client for one database (see the module's docstring).

    `clock` gives the simulated time (commit and read times); `fates(rpc)` decides each
    RPC's fate (default: every one lands); `before_rpc(rpc)` runs before each RPC and may
    raise (nothing is then sent). `client_retries` (default 0: a fault is final for the
    call) makes a call that passed `retry=` send its RPC up to that many more times after
    a ServiceUnavailable or DeadlineExceeded, each sending its own RPC with its own fate, as
    the client's Retry does (the kit's retries both), the last fault raised as RetryError:
    so a retried create whose first commit landed unanswered meets its own document."""

    def __init__(
        self,
        clock: Callable[[], datetime],
        *,
        project: str = "sim-project",
        database: str = DEFAULT_DATABASE,
        fates: Callable[[Rpc], Fate] | None = None,
        before_rpc: Callable[[Rpc], None] | None = None,
        client_retries: int = 0,
        _world: _World | None = None,
    ) -> None:
        self.project = project
        self._world = _world or _World(clock, fates, before_rpc, client_retries)
        self._database_name = database
        self._db = self._world.database(database)
        self._views: dict[str, FakeFirestore] = {database: self}

    # --- the client's surface ---

    @property
    def database(self) -> str:
        return self._database_name

    def for_database(self, name: str) -> FakeFirestore:
        """The client of another database of the same simulated project (its documents
        kept for the next call with that name; the clock, fates and stalls shared)."""
        view = self._views.get(name)
        if view is None:
            view = FakeFirestore(self._world.clock, project=self.project, database=name,
                                 _world=self._world)
            view._views = self._views
            self._views[name] = view
        return view

    def collection(self, *path: str) -> CollectionReference:
        return CollectionReference(self, "/".join(path))

    def document(self, *path: str) -> DocumentReference:
        return DocumentReference(self, "/".join(path))

    def batch(self) -> WriteBatch:
        return WriteBatch(self)

    def transaction(self, **_: Any) -> Any:
        raise NotImplementedError("FakeFirestore models no transactions (the kit uses none)")

    @staticmethod
    def write_option(**kwargs: Any) -> Precondition:
        if len(kwargs) != 1:
            raise TypeError("write_option takes exactly one of last_update_time, exists")
        name, value = next(iter(kwargs.items()))
        if name == "last_update_time":
            return Precondition(last_update_time=utc(value))
        if name == "exists":
            return Precondition(exists=bool(value))
        raise TypeError(f"write_option: unknown option {name}")

    def get_all(self, references: Iterable[DocumentReference], field_paths: Any = None,
                transaction: Any = None, retry: Any = None,
                timeout: Any = None) -> Iterator[DocumentSnapshot]:
        refs = list({ref.path: ref for ref in references}.values())
        return iter(self._read(refs, retry))

    # --- outside the simulation ---

    def documents(self, collection: str) -> dict[str, dict[str, Any]]:
        """The documents of `collection` in this database (ID -> a copy of its fields),
        read as an invariant checker reads them: no RPC, no fate, no yield point."""
        with self._world.lock:
            docs = self._db.collections.get(collection, {})
            return {doc_id: copied(docs[doc_id].data) for doc_id in sorted(docs)}

    # --- the fault seam ---

    @property
    def stalled(self) -> tuple[Rpc, ...]:
        """The parked commits (STALL), oldest first."""
        with self._world.lock:
            return tuple(parked.rpc for parked in self._world.parked)

    def land_stalled(self, which: Callable[[Rpc], bool] | None = None) -> list[tuple[Rpc, bool]]:
        """Commit the parked commits `which` selects (all by default), oldest first, each
        checked against the store as it is now, as a late commit is; each with whether it
        applied (False: a precondition failed, and nothing of it was written)."""
        landed: list[tuple[Rpc, bool]] = []
        with self._world.lock:
            for parked in self._take_parked(which):
                try:
                    parked.database.commit(parked.writes, self._world.now())
                except (gexc.AlreadyExists, gexc.FailedPrecondition, gexc.NotFound):
                    landed.append((parked.rpc, False))
                else:
                    landed.append((parked.rpc, True))
        return landed

    def drop_stalled(self, which: Callable[[Rpc], bool] | None = None) -> list[Rpc]:
        """Discard the parked commits `which` selects (all by default): they never land."""
        with self._world.lock:
            return [parked.rpc for parked in self._take_parked(which)]

    def _take_parked(self, which: Callable[[Rpc], bool] | None) -> list[_Parked]:
        world = self._world
        taken = [p for p in world.parked if which is None or which(p.rpc)]
        world.parked = [p for p in world.parked if p not in taken]
        return taken

    # --- RPCs ---

    def _sent(self, rpc: Rpc, retry: Any, send: Callable[[Rpc], _Answer]) -> _Answer:
        """`send(rpc)`, and again (client_retries) after a transient fault if the caller
        passed a retry."""
        retries = self._world.client_retries if retry is not None else 0
        attempt = rpc
        while True:
            try:
                return send(attempt)
            except (gexc.ServiceUnavailable, gexc.DeadlineExceeded) as exc:
                if retries == 0:
                    raise
                if attempt.attempt > retries:
                    raise _retry_error(rpc, exc) from exc
            attempt = replace(attempt, attempt=attempt.attempt + 1)

    def _commit(self, writes: tuple[Write, ...],
                retry: Any = None) -> tuple[datetime, list[WriteResult]]:
        rpc = Rpc("commit", self._database_name, tuple(w.path for w in writes),
                  tuple(w.kind for w in writes))
        return self._sent(rpc, retry, lambda attempt: self._commit_once(attempt, writes))

    def _commit_once(self, rpc: Rpc,
                     writes: tuple[Write, ...]) -> tuple[datetime, list[WriteResult]]:
        world = self._world
        fate = world.fate(rpc)
        if fate is Fate.FAIL:
            raise _unavailable(rpc)
        with world.lock:
            if fate is Fate.STALL:
                world.parked.append(_Parked(rpc, self._db, writes))
                raise _deadline(rpc)
            try:
                answer = self._db.commit(writes, world.now())
            except gexc.GoogleAPICallError:
                if fate is Fate.LOST_REPLY:
                    raise _deadline(rpc) from None
                raise
        if fate is Fate.LOST_REPLY:
            raise _deadline(rpc)
        return answer

    def _read(self, refs: list[DocumentReference], retry: Any = None) -> list[DocumentSnapshot]:
        rpc = Rpc("batch_get", self._database_name, tuple(ref.path for ref in refs))
        return self._sent(rpc, retry, lambda attempt: self._read_once(attempt, refs))

    def _read_once(self, rpc: Rpc, refs: list[DocumentReference]) -> list[DocumentSnapshot]:
        world = self._world
        fate = world.fate(rpc)
        if fate is not Fate.LAND:
            raise _deadline(rpc) if fate is Fate.STALL else _unavailable(rpc)
        with world.lock:
            read_time = self._db.read_time(world.now())
            find = self._db.find
            return [DocumentSnapshot(ref, find(ref.path), read_time) for ref in refs]

    def _query(self, query: Query, retry: Any = None) -> list[DocumentSnapshot]:
        rpc = Rpc("run_query", self._database_name, (query.queried.path,))
        return self._sent(rpc, retry, lambda attempt: self._query_once(attempt, query))

    def _query_once(self, rpc: Rpc, query: Query) -> list[DocumentSnapshot]:
        world = self._world
        fate = world.fate(rpc)
        if fate is not Fate.LAND:
            raise _deadline(rpc) if fate is Fate.STALL else _unavailable(rpc)
        with world.lock:
            read_time = self._db.read_time(world.now())
            docs = self._db.collections.get(query.queried.path, {})
            found: list[DocumentSnapshot] = []
            for doc_id in sorted(docs):
                doc = docs[doc_id]
                if all(matches(doc.data, f) for f in query.filters):
                    found.append(DocumentSnapshot(query.queried.document(doc_id), doc, read_time))
                    if query.limit_to is not None and len(found) >= query.limit_to:
                        break
            return found

    def _auto_id(self) -> str:
        return f"auto{next(self._world.ids):016d}"


# --- references, snapshots, batches ----------------------------------------------------


class DocumentSnapshot:
    __slots__ = ("_doc", "read_time", "reference")

    def __init__(self, reference: DocumentReference, doc: StoredDocument | None,
                 read_time: datetime) -> None:
        self.reference = reference
        self._doc = doc
        self.read_time = read_time

    @property
    def id(self) -> str:
        return self.reference.id

    @property
    def exists(self) -> bool:
        return self._doc is not None

    @property
    def update_time(self) -> datetime | None:
        return None if self._doc is None else self._doc.update_time

    @property
    def create_time(self) -> datetime | None:
        return None if self._doc is None else self._doc.create_time

    def to_dict(self) -> dict[str, Any] | None:
        if self._doc is None:
            return None
        return {k: v if type(v) is not dict and type(v) is not list else copied(v)
                for k, v in self._doc.data.items()}

    def get(self, field_path: str) -> Any:
        if self._doc is None:
            raise KeyError(field_path)
        found = field_value(self._doc.data, field_path)
        if found is MISSING:
            raise KeyError(field_path)
        return copied(found)


class DocumentReference:
    __slots__ = ("_client", "path")

    def __init__(self, client: FakeFirestore, path: str) -> None:
        if path.count("/") % 2 != 1:
            raise ValueError(f"a document path has an even number of parts: {path!r}")
        self._client = client
        self.path = path

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, DocumentReference) and other.path == self.path
                and other._client._db is self._client._db)

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return f"DocumentReference({self.path!r})"

    @property
    def id(self) -> str:
        return self.path.rpartition("/")[2]

    @property
    def parent(self) -> CollectionReference:
        return CollectionReference(self._client, self.path.rpartition("/")[0])

    def collection(self, collection_id: str) -> CollectionReference:
        return CollectionReference(self._client, f"{self.path}/{collection_id}")

    def get(self, field_paths: Any = None, transaction: Any = None, retry: Any = None,
            timeout: Any = None) -> DocumentSnapshot:
        return self._client._read([self], retry)[0]

    def create(self, document_data: Mapping[str, Any], retry: Any = None,
               timeout: Any = None) -> WriteResult:
        return self._one(Write("create", self.path, stored(document_data), None), retry)

    def set(self, document_data: Mapping[str, Any], merge: bool = False, retry: Any = None,
            timeout: Any = None) -> WriteResult:
        return self._one(_set_write(self.path, document_data, merge), retry)

    def update(self, field_updates: Mapping[str, Any], option: Precondition | None = None,
               retry: Any = None, timeout: Any = None) -> WriteResult:
        return self._one(_update_write(self.path, field_updates, option), retry)

    def delete(self, option: Precondition | None = None, retry: Any = None,
               timeout: Any = None) -> datetime:
        commit_time, _ = self._client._commit(
            (Write("delete", self.path, None, option),), retry)
        return commit_time

    def _one(self, write: Write, retry: Any) -> WriteResult:
        return self._client._commit((write,), retry)[1][0]


def _set_write(path: str, data: Mapping[str, Any], merge: bool) -> Write:
    if merge:
        raise NotImplementedError("FakeFirestore models set() without merge only")
    return Write("set", path, stored(data), None)


def _update_write(path: str, fields: Mapping[str, Any], option: Precondition | None) -> Write:
    if not fields:
        raise ValueError("Cannot update with an empty document.")
    if option is not None and option.exists is False:
        raise ValueError("update() cannot require the document not to exist")
    if any("`" in key for key in fields):
        raise NotImplementedError("FakeFirestore models no quoted field paths")
    return Write("update", path, stored(fields), option)


class Query:
    __slots__ = ("filters", "limit_to", "queried")

    def __init__(self, queried: CollectionReference,
                 filters: tuple[tuple[str, str, Any], ...] = (),
                 limit_to: int | None = None) -> None:
        self.queried = queried
        self.filters = filters
        self.limit_to = limit_to

    def where(self, field_path: str | None = None, op_string: str | None = None,
              value: Any = None, *, filter: Any = None) -> Query:
        if filter is not None:
            field_path, op_string, value = filter.field_path, filter.op_string, filter.value
        if getattr(op_string, "name", None) == "IS_NULL":  # FieldFilter's form of == None
            op_string, value = "==", None
        if op_string not in ("==", "in"):
            raise NotImplementedError(f"FakeFirestore models == and in, not {op_string}")
        assert field_path is not None
        value = [stored(v) for v in value] if op_string == "in" else stored(value)
        return Query(self.queried, (*self.filters, (field_path, op_string, value)),
                     self.limit_to)

    def limit(self, count: int) -> Query:
        return Query(self.queried, self.filters, count)

    def get(self, transaction: Any = None, retry: Any = None,
            timeout: Any = None) -> list[DocumentSnapshot]:
        return self.queried._client._query(self, retry)

    def stream(self, transaction: Any = None, retry: Any = None,
               timeout: Any = None) -> Iterator[DocumentSnapshot]:
        return iter(self.queried._client._query(self, retry))


class CollectionReference(Query):
    __slots__ = ("_client", "path")

    def __init__(self, client: FakeFirestore, path: str) -> None:
        if path.count("/") % 2 != 0:
            raise ValueError(f"a collection path has an odd number of parts: {path!r}")
        self._client = client
        self.path = path
        super().__init__(self)

    @property
    def id(self) -> str:
        return self.path.rpartition("/")[2]

    @property
    def parent(self) -> DocumentReference | None:
        above = self.path.rpartition("/")[0]
        return DocumentReference(self._client, above) if above else None

    def document(self, document_id: str | None = None) -> DocumentReference:
        return DocumentReference(self._client, f"{self.path}/"
                                 f"{document_id or self._client._auto_id()}")


class WriteBatch:
    """Writes gathered, then one commit: all land or none."""

    def __init__(self, client: FakeFirestore) -> None:
        self._client = client
        self._writes: list[Write] = []

    def __len__(self) -> int:
        return len(self._writes)

    def __enter__(self) -> WriteBatch:
        return self

    def __exit__(self, kind: object, *_: object) -> None:
        if kind is None:
            self.commit()

    def create(self, reference: DocumentReference, document_data: Mapping[str, Any]) -> None:
        self._writes.append(Write("create", reference.path, stored(document_data), None))

    def set(self, reference: DocumentReference, document_data: Mapping[str, Any],
            merge: bool = False) -> None:
        self._writes.append(_set_write(reference.path, document_data, merge))

    def update(self, reference: DocumentReference, field_updates: Mapping[str, Any],
               option: Precondition | None = None) -> None:
        self._writes.append(_update_write(reference.path, field_updates, option))

    def delete(self, reference: DocumentReference, option: Precondition | None = None) -> None:
        self._writes.append(Write("delete", reference.path, None, option))

    def commit(self, retry: Any = None, timeout: Any = None) -> list[WriteResult]:
        return self._client._commit(tuple(self._writes), retry)[1]

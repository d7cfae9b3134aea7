"""The real Firestore store with scripted faults at the storage seam, for deterministic
regression tests of "what if it landed and I was told it failed?".

Each fault applies to one call of one operation, in order:
- LOST_REPLY: the call runs against the emulator (a write lands), then reports
  StoreUnavailable, as when the reply is lost or arrives after the deadline;
- UNREACHABLE: the call reports StoreUnavailable without reaching the store;
- BUG: an unexpected exception (RuntimeError) without reaching the store;
- LANDS_LATE: the call reports StoreUnavailable without reaching the store yet, and is
  held until `land_late()` runs it (a write still in flight when its caller gave up,
  which commits after the caller's next read).
`break_` makes every call of an operation fail until `heal`. (The network-level injector,
local_stack.store_faults, drives the end-to-end tests and the demo.)
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from enum import Enum
from typing import TypeVar

from dedup.store import MalformedRun, RunRecord, StoredRun, StoreError, StoreUnavailable
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.cursors import Cursor, WatchStore

T = TypeVar("T")


class Fault(Enum):
    LOST_REPLY = "lost_reply"
    UNREACHABLE = "unreachable"
    BUG = "bug"
    LANDS_LATE = "lands_late"


class FaultyStore:
    def __init__(self, inner: FirestoreRunStore) -> None:
        self.inner = inner
        self._script: dict[str, deque[Fault]] = defaultdict(deque)
        self._broken: dict[str, Fault] = {}
        self._lock = threading.Lock()
        self.calls: list[tuple[str, Fault | None]] = []
        self._in_flight: list[Callable[[], object]] = []

    def script(self, operation: str, *faults: Fault) -> None:
        with self._lock:
            self._script[operation].extend(faults)

    def break_(self, operation: str, fault: Fault = Fault.UNREACHABLE) -> None:
        with self._lock:
            self._broken[operation] = fault

    def heal(self, operation: str) -> None:
        with self._lock:
            self._broken.pop(operation, None)

    def land_late(self) -> list[object]:
        """Run the calls held in flight (LANDS_LATE), in order: what each returned or
        raised (a StoreError is returned, not raised)."""
        with self._lock:
            held, self._in_flight = self._in_flight, []
        outcomes: list[object] = []
        for call in held:
            try:
                outcomes.append(call())
            except StoreError as exc:
                outcomes.append(exc)
        return outcomes

    def count(self, operation: str) -> int:
        return sum(1 for name, _ in self.calls if name == operation)

    def _call(self, operation: str, call: Callable[[], T]) -> T:
        with self._lock:
            queue = self._script[operation]
            fault = queue.popleft() if queue else self._broken.get(operation)
            self.calls.append((operation, fault))
        if fault is Fault.UNREACHABLE:
            raise StoreUnavailable(f"injected: {operation} did not reach the store")
        if fault is Fault.BUG:
            raise RuntimeError(f"injected: {operation} hit an unexpected error")
        if fault is Fault.LANDS_LATE:
            with self._lock:
                self._in_flight.append(call)
            raise StoreUnavailable(f"injected: {operation} timed out, still in flight")
        result = call()
        if fault is Fault.LOST_REPLY:
            raise StoreUnavailable(f"injected: {operation} landed but its reply was lost")
        return result

    def create(self, run_id: str, record: RunRecord) -> datetime:
        return self._call("create", lambda: self.inner.create(run_id, record))

    def get(self, run_id: str) -> StoredRun | None:
        return self._call("get", lambda: self.inner.get(run_id))

    def replace(
        self, run_id: str, record: RunRecord, if_version: datetime,
        over: RunRecord | None = None,
    ) -> datetime:
        return self._call("replace", lambda: self.inner.replace(run_id, record, if_version, over))

    def renew(self, run_id: str, expire_at: datetime, if_version: datetime) -> datetime:
        return self._call("renew", lambda: self.inner.renew(run_id, expire_at, if_version))

    def get_many(self, run_ids: Sequence[str]) -> Mapping[str, StoredRun | MalformedRun]:
        return self._call("get_many", lambda: self.inner.get_many(run_ids))


class CursorCommitFaults:
    """A watch store (dedup.watchdog.cursors.WatchStore) whose next cursor commits fail,
    as a tick meets them: `landed` of them land and then report StoreUnavailable (the
    store went away right after the commit, or its reply was lost and could not be
    resolved); `unreached` of them report it without reaching the store."""

    def __init__(self, inner: WatchStore, landed: int = 0, unreached: int = 0) -> None:
        self.inner = inner
        self.landed = landed
        self.unreached = unreached

    def get_many(
        self, run_ids: Sequence[str], database: str | None = None
    ) -> Mapping[str, StoredRun | MalformedRun]:
        return self.inner.get_many(run_ids, database)

    def get_cursors(self, jobs: Sequence[str]) -> dict[str, Cursor]:
        return self.inner.get_cursors(jobs)

    def put_cursors(self, cursors: Mapping[str, Cursor], now: datetime) -> dict[str, datetime]:
        if self.unreached:
            self.unreached -= 1
            raise StoreUnavailable("the cursor commit never reached the store")
        versions = self.inner.put_cursors(cursors, now)
        if self.landed:
            self.landed -= 1
            raise StoreUnavailable("the cursor commit landed; its reply was lost")
        return versions

    def clear_outboxes(self, versions: Mapping[str, datetime]) -> None:
        self.inner.clear_outboxes(versions)

"""The documents of FakeFirestore's databases, and one commit applied to them, all or
nothing, with Firestore's preconditions, errors and versions (simulation/firestore_fake.py)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from google.api_core import exceptions as gexc

from simulation.firestore_values import (
    MISSING,
    field_value,
    holds_server_time,
    query_equal,
    same_content,
    updated,
    with_server_time,
)

_ONE_MICROSECOND = timedelta(microseconds=1)


def api_error(kind: type[gexc.GoogleAPICallError], message: str) -> gexc.GoogleAPICallError:
    """The exception the real client raises for an RPC's error status (api_core's
    constructors are untyped)."""
    return kind(message)


@dataclass(frozen=True)
class Precondition:
    """What `client.write_option(...)` returns: one of the two."""

    last_update_time: datetime | None = None
    exists: bool | None = None


class WriteResult:
    """One write's answer: the document's version after it (a delete's: the commit's time,
    where the real client leaves it unset; the kit reads neither)."""

    __slots__ = ("update_time",)

    def __init__(self, update_time: datetime) -> None:
        self.update_time = update_time


class StoredDocument:
    """A stored document. `data` is never changed in place (a write stores a new dict), so
    a snapshot may hold it; `to_dict()` hands out copies."""

    __slots__ = ("create_time", "data", "update_time")

    def __init__(self, data: dict[str, Any], create_time: datetime, update_time: datetime):
        self.data = data
        self.create_time = create_time
        self.update_time = update_time


class Write:
    __slots__ = ("data", "has_server_time", "kind", "path", "precondition")

    def __init__(self, kind: str, path: str, data: dict[str, Any] | None,
                 precondition: Precondition | None) -> None:
        self.kind = kind
        self.path = path
        self.data = data
        self.precondition = precondition
        self.has_server_time = data is not None and holds_server_time(data)




class Database:
    """One database's documents: collection path -> document ID -> document."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.collections: dict[str, dict[str, StoredDocument]] = {}
        self.last_commit: datetime | None = None

    def find(self, path: str) -> StoredDocument | None:
        collection, _, doc_id = path.rpartition("/")
        docs = self.collections.get(collection)
        return None if docs is None else docs.get(doc_id)

    def read_time(self, now: datetime) -> datetime:
        last = self.last_commit
        return now if last is None or now > last else last

    def commit(self, writes: Iterable[Write], now: datetime) -> tuple[datetime, list[WriteResult]]:
        """Check every precondition against the state as the writes before it leave it,
        then apply all, or raise and apply none."""
        last = self.last_commit
        when = now if last is None or now > last else last + _ONE_MICROSECOND
        staged: dict[str, StoredDocument | None] = {}
        results: list[WriteResult] = []
        for write in writes:
            old = staged[write.path] if write.path in staged else self.find(write.path)
            _check(write, old)
            if write.kind == "delete":
                staged[write.path] = None
                results.append(WriteResult(when))
                continue
            data = write.data or {}
            if write.kind == "update":
                content = updated({} if old is None else old.data, data, when)
            else:
                content = with_server_time(data, when) if write.has_server_time else data
            if old is not None and same_content(old.data, content):
                staged[write.path] = old
                results.append(WriteResult(old.update_time))
                continue
            created = when if old is None else old.create_time
            staged[write.path] = StoredDocument(content, created, when)
            results.append(WriteResult(when))
        self.last_commit = when
        for path, doc in staged.items():
            collection, _, doc_id = path.rpartition("/")
            if doc is None:
                docs = self.collections.get(collection)
                if docs is not None:
                    docs.pop(doc_id, None)
            else:
                self.collections.setdefault(collection, {})[doc_id] = doc
        return when, results


def _check(write: Write, old: StoredDocument | None) -> None:
    condition = write.precondition
    if write.kind == "create" or (condition is not None and condition.exists is False):
        if old is not None:
            raise api_error(gexc.AlreadyExists, f"entity already exists: {write.path}")
        return
    if condition is not None and condition.last_update_time is not None:
        stored = None if old is None else old.update_time
        if stored != condition.last_update_time:
            raise api_error(
                gexc.FailedPrecondition,
                f"the stored version ({stored}) does not match the required base version "
                f"({condition.last_update_time}): {write.path}")
        return
    if old is None and (write.kind == "update" or (condition is not None and condition.exists)):
        raise api_error(gexc.NotFound, f"no entity to update: {write.path}")


def matches(data: dict[str, Any], condition: tuple[str, str, Any]) -> bool:
    field_path, op, value = condition
    found = field_value(data, field_path)
    if found is MISSING:
        return False
    if op == "==":
        return found is None if value is None else query_equal(found, value)
    # "in": null never matches (as the emulator answers)
    return found is not None and any(
        v is not None and query_equal(found, v) for v in value)

"""Calls of Firestore's client itself, each answering what Firestore decides (preconditions,
versions of writes that change nothing, value types, query matches and order, batches all
or nothing, subcollections): what FakeFirestore's docstring claims beyond what the kit's
stores show today (test_fake_firestore.py runs them on both)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from dedup.store import RunStatus

Step = Callable[[Any, str], Any]  # (client, collection) -> the answer
MOMENT = datetime(2000, 6, 1, 12, 0, tzinfo=UTC)


def _doc(client: Any, collection: str, name: str) -> Any:
    return client.collection(collection).document(name)


def _read(client: Any, collection: str, name: str) -> Any:
    snapshot = _doc(client, collection, name).get()
    return (snapshot.exists, snapshot.to_dict(), snapshot.update_time, snapshot.create_time)


def _ids(query: Any) -> list[str]:
    return [s.id for s in query.get()]


def _where(field: str, op: str, value: Any) -> Callable[[Any, str], list[str]]:
    return lambda c, col: _ids(c.collection(col).where(filter=FieldFilter(field, op, value)))


def _stale_batch(c: Any, col: str) -> Any:
    batch = c.batch()
    batch.create(_doc(c, col, "b"), {"n": 1})
    batch.update(_doc(c, col, "a"), {"n": 9},
                 option=c.write_option(last_update_time=datetime(1999, 1, 1, tzinfo=UTC)))
    return batch.commit()


def _batch(c: Any, col: str) -> Any:
    batch = c.batch()
    batch.create(_doc(c, col, "b"), {"status": "pending", "backfill": None, "n": 1})
    batch.set(_doc(c, col, "0c"), {"status": "pending", "n": 1.0})
    batch.set(_doc(c, col, "Zd"), {"status": "pending", "n": True, "backfill": "bf"})
    return [result.update_time for result in batch.commit()]


def _resave(c: Any, col: str) -> Any:
    return _doc(c, col, "a").set(_doc(c, col, "a").get().to_dict()).update_time


def _guarded_noop(c: Any, col: str) -> Any:
    version = _doc(c, col, "a").get().update_time
    return _doc(c, col, "a").update(
        {"n": 2}, option=c.write_option(last_update_time=version)).update_time


STEPS: list[tuple[str, Step]] = [
    ("create a", lambda c, col: _doc(c, col, "a").create({
        "n": 1, "f": 1.0, "b": True, "none": None, "t": MOMENT, "naive": datetime(2000, 6, 1, 12),
        "m": {"k": [1, {"x": "y"}]}, "tup": (1, 2), "empty": {}, "s": "text",
        "enum": RunStatus.COMPLETED}).update_time),
    ("read a", lambda c, col: _read(c, col, "a")),
    ("update a, same n", lambda c, col: _doc(c, col, "a").update({"n": 1}).update_time),
    ("update a, n 1.0", lambda c, col: _doc(c, col, "a").update({"n": 1.0}).update_time),
    ("set a as read", _resave),
    ("update a m.k", lambda c, col: _doc(c, col, "a").update({"m.k": [2]}).update_time),
    ("update a m", lambda c, col: _doc(c, col, "a").update({"m": {"z": 1}}).update_time),
    ("update a, delete b", lambda c, col: _doc(c, col, "a").update(
        {"b": firestore.DELETE_FIELD, "n": 2}).update_time),
    ("read a again", lambda c, col: _read(c, col, "a")),
    ("guarded update, same n", _guarded_noop),
    ("update missing", lambda c, col: _doc(c, col, "x").update({"n": 1})),
    ("guarded update missing", lambda c, col: _doc(c, col, "x").update(
        {"n": 1}, option=c.write_option(last_update_time=MOMENT))),
    ("guarded delete missing", lambda c, col: _doc(c, col, "x").delete(
        option=c.write_option(last_update_time=MOMENT))),
    ("delete missing", lambda c, col: _doc(c, col, "x").delete() is not None),
    ("delete missing, must exist", lambda c, col: _doc(c, col, "x").delete(
        option=c.write_option(exists=True))),
    ("update a, must not exist", lambda c, col: _doc(c, col, "a").update(
        {"n": 3}, option=c.write_option(exists=False))),
    ("create a again", lambda c, col: _doc(c, col, "a").create({"n": 1})),
    ("batch: create b, stale update a", _stale_batch),
    ("read b", lambda c, col: _read(c, col, "b")),
    ("batch: create b, set 0c, set Zd", _batch),
    ("backfill == None", _where("backfill", "==", None)),
    ("status == pending", _where("status", "==", "pending")),
    ("n == 1", _where("n", "==", 1)),
    ("n in [1, None]", _where("n", "in", [1, None])),
    ("none in [None]", _where("none", "in", [None])),
    ("m == {z: 1}", _where("m", "==", {"z": 1})),
    ("status == pending, limit 2", lambda c, col: _ids(c.collection(col).where(
        filter=FieldFilter("status", "==", "pending")).limit(2))),
    ("get_all a, x, a", lambda c, col: [(s.id, s.exists) for s in c.get_all(
        [_doc(c, col, "a"), _doc(c, col, "x"), _doc(c, col, "a")])]),
    ("set a/pages/p0", lambda c, col: _doc(c, col, "a").collection("pages").document(
        "p0").set({"p": 0}).update_time),
    ("delete a", lambda c, col: _doc(c, col, "a").delete() is not None),
    ("read a/pages/p0", lambda c, col: _read(c, f"{col}/a/pages", "p0")),
    ("server time", lambda c, col: _server_time(c, col)),
]


def _server_time(c: Any, col: str) -> bool:
    _doc(c, col, "e").create({"st": firestore.SERVER_TIMESTAMP})
    value = _doc(c, col, "e").get().to_dict()["st"]
    return isinstance(value, datetime) and value.tzinfo is not None

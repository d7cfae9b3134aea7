"""Values as Firestore stores, returns and compares them (simulation/firestore_fake.py)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from google.cloud.firestore_v1 import transforms

# Stored as they are (exact types only: a subclass, a StrEnum say, is stored as its base
# type, as the real client encodes it).
_PLAIN = frozenset({str, int, float, bool, bytes, type(None)})


def stored(value: Any) -> Any:
    """`value` as Firestore stores it (a copy of any container); the two sentinels the kit
    writes are kept for the commit to resolve."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is dict or isinstance(value, Mapping):
        copy = {}
        for key, item in value.items():
            if type(key) is not str:
                raise TypeError(f"a field name must be text, not {type(key).__name__}")
            copy[key] = item if type(item) in _PLAIN else stored(item)
        return copy
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value if value.tzinfo is UTC else value.astimezone(UTC)
    if isinstance(value, (list, tuple, set, frozenset)):
        return [item if type(item) in _PLAIN else stored(item) for item in value]
    if isinstance(value, int):  # bool cannot be subclassed: an IntEnum, say
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, str):
        return str.__str__(value)
    if value is transforms.SERVER_TIMESTAMP or value is transforms.DELETE_FIELD:
        return value
    raise TypeError(f"FakeFirestore does not store {type(value).__name__} values")


def holds_server_time(data: Mapping[str, Any]) -> bool:
    return any(v is transforms.SERVER_TIMESTAMP
               or (type(v) is dict and holds_server_time(v)) for v in data.values())


def with_server_time(data: dict[str, Any], now: datetime) -> dict[str, Any]:
    return {k: now if v is transforms.SERVER_TIMESTAMP
            else with_server_time(v, now) if type(v) is dict else v for k, v in data.items()}


def copied(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {k: copied(v) for k, v in value.items()}
    if kind is list:
        return [copied(v) for v in value]
    return value


def same_content(a: Any, b: Any) -> bool:
    """Equal as stored contents: of one type (1 is not 1.0, nor True) and value."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return a.keys() == b.keys() and all(same_content(v, b[k]) for k, v in a.items())
    if type(a) is list:
        return len(a) == len(b) and all(same_content(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def query_equal(a: Any, b: Any) -> bool:
    """Equal as a query compares: numbers by value whatever their type; bool, text,
    timestamps, lists and maps only with their own kind."""
    if type(a) is bool or type(b) is bool:
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if type(a) is dict and type(b) is dict:
        return a.keys() == b.keys() and all(query_equal(v, b[k]) for k, v in a.items())
    if type(a) is list and type(b) is list:
        return len(a) == len(b) and all(
            query_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


MISSING = object()


def field_value(data: Mapping[str, Any], field_path: str) -> Any:
    value: Any = data
    for part in field_path.split("."):
        if type(value) is not dict or part not in value:
            return MISSING
        value = value[part]
    return value


def updated(old: dict[str, Any], fields: dict[str, Any], now: datetime) -> dict[str, Any]:
    """`old` with update()'s `fields` (keys are field paths) applied, as a new dict; maps on
    the way copied, never changed."""
    new = dict(old)
    for path, value in fields.items():
        parts = path.split(".")
        target = new
        for part in parts[:-1]:
            inner = target.get(part)
            target[part] = dict(inner) if type(inner) is dict else {}
            target = target[part]
        if value is transforms.DELETE_FIELD:
            target.pop(parts[-1], None)
        elif value is transforms.SERVER_TIMESTAMP:
            target[parts[-1]] = now
        else:
            target[parts[-1]] = with_server_time(value, now) if type(value) is dict else value
    return new


def utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment if moment.tzinfo is UTC else moment.astimezone(UTC)

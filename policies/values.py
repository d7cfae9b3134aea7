"""Reading resource properties the way the Pulumi engine hands them to a policy.

During `pulumi preview` an output of a resource that does not exist yet arrives as a
sentinel string (one per kind: string, number, bool, array, object, asset, archive;
the engine almost always sends the string one). pulumi_policy wraps the properties in a
proxy that raises on such a value, and turns that exception into a single advisory
"can't run policy during preview" note, which would skip every other check of that
policy on the resource. The pack therefore hands the policies plain data with the
sentinels left in place (see `policies.pack.plain`), and every policy reads properties
only through `get`, which answers `UNKNOWN` or `MISSING` explicitly, so a policy can
judge what is known and tell "not known yet" apart from "not set".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

# The same strings as pulumi_policy.proxy.UNKNOWN_*_VALUE (tests/policies check they match).
UNKNOWN_SENTINELS: Final = frozenset(
    {
        "1c4a061d-8072-4f0a-a4cb-0ff528b18fe7",  # boolean
        "3eeb2bf0-c639-47a8-9e75-3b44932eb421",  # number
        "04da6b54-80e4-46f7-96ec-b56ff0331ba9",  # string
        "6a19a0b0-7e62-4c92-b797-7f8e31da9cc2",  # array
        "030794c1-ac77-496b-92df-f27374a8bd58",  # asset
        "e48ece36-62e2-4504-bad9-02848725956a",  # archive
        "dd056dcd-154b-4c76-9bd3-c8f88648b5ff",  # object
    }
)
# The sentinel tests and fixtures use for "a string output not known yet".
UNKNOWN_STRING: Final = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


class _Marker:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


MISSING: Final = _Marker("MISSING")
"""The property is absent or null: the provider's default applies."""
UNKNOWN: Final = _Marker("UNKNOWN")
"""The property (or an object on its path) is not known until the update runs."""


def is_unknown(value: object) -> bool:
    return value is UNKNOWN or (isinstance(value, str) and value in UNKNOWN_SENTINELS)


def is_missing(value: object) -> bool:
    return value is MISSING


def get(props: object, *path: str | int) -> Any:
    """Follow `path` through nested mappings/lists.

    Returns the value, `UNKNOWN` if the value or any object on the way is not known yet,
    or `MISSING` if anything on the way is absent, null or not a container.
    """
    current: object = props
    for key in path:
        if is_unknown(current):
            return UNKNOWN
        if isinstance(key, str):
            if not isinstance(current, Mapping) or key not in current:
                return MISSING
            current = current[key]
        else:
            if (
                not isinstance(current, Sequence)
                or isinstance(current, str | bytes)
                or not -len(current) <= key < len(current)
            ):
                return MISSING
            current = current[key]
        if current is None:
            return MISSING
    if is_unknown(current):
        return UNKNOWN
    if current is None:
        return MISSING
    return current


def known_str(value: object) -> str | None:
    """The value if it is a known, non-empty string, else None."""
    if isinstance(value, str) and value and not is_unknown(value):
        return value
    return None


def as_list(value: object) -> list[Any] | None:
    """A known list (elements may still be unknown), or None if unknown or missing."""
    if is_unknown(value) or value is MISSING or value is None:
        return None
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return list(value)
    return None


def as_mapping(value: object) -> Mapping[str, Any] | None:
    """A known mapping, or None if unknown, missing or not a mapping."""
    if isinstance(value, Mapping) and not is_unknown(value):
        return value
    return None

"""What a contract check reports: the resource, the property, the value, the rule and where
Google documents it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

VALUE_SHOWN_CHARS: Final = 80
"""A finding shows at most this many characters of the offending value."""


@dataclass(frozen=True)
class Source:
    """A page of Google's documentation that states a rule."""

    title: str
    url: str


@dataclass(frozen=True)
class Rule:
    """One documented rule: what it demands, and its source."""

    text: str
    source: Source


@dataclass(frozen=True)
class Finding:
    """One declared value that Google's API would refuse (or that breaks a documented
    limit), named well enough to fix without reading the checker."""

    resource_type: str
    resource_name: str
    property: str
    """The property's path in the resource's props (camelCase, dots, [index])."""
    value: Any
    rule: Rule

    def message(self) -> str:
        return (
            f"{self.resource_type} {self.resource_name!r}: {self.property} = "
            f"{abbreviate(self.value)}: {self.rule.text} "
            f"(source: {self.rule.source.title}, {self.rule.source.url})"
        )


def abbreviate(value: Any) -> str:
    """`value` as a short repr: long values cut to VALUE_SHOWN_CHARS with their length."""
    text = repr(value)
    if len(text) <= VALUE_SHOWN_CHARS:
        return text
    return f"{text[:VALUE_SHOWN_CHARS]}... ({len(text)} characters)"

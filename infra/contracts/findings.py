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
    """One documented rule: what it demands, its source, and how to mend a declaration that
    breaks it when that is not plain from the rule (the stack file's keys to change)."""

    text: str
    source: Source
    fix: str = ""


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
    detail: str = ""
    """What makes the value break the rule when the value alone does not show it (a size's
    parts, a count's members), shown in full."""

    def message(self) -> str:
        detail = f" ({self.detail})" if self.detail else ""
        fix = f"; fix: {self.rule.fix}" if self.rule.fix else ""
        return (
            f"{self.resource_type} {self.resource_name!r}: {self.property} = "
            f"{abbreviate(self.value)}{detail}: {self.rule.text}{fix} "
            f"(source: {self.rule.source.title}, {self.rule.source.url})"
        )


def abbreviate(value: Any) -> str:
    """`value` as a short repr: long values cut to VALUE_SHOWN_CHARS with their length."""
    text = repr(value)
    if len(text) <= VALUE_SHOWN_CHARS:
        return text
    return f"{text[:VALUE_SHOWN_CHARS]}... ({len(text)} characters)"

"""What a policy is, independent of pulumi_policy (so the offline check needs no server)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Enforcement(StrEnum):
    """The CrossGuard enforcement levels the kit uses (same strings as pulumi_policy)."""

    MANDATORY = "mandatory"
    ADVISORY = "advisory"
    DISABLED = "disabled"


@dataclass(frozen=True)
class Resource:
    """One declared resource: Pulumi type token, name, URN and camelCase properties."""

    type: str
    name: str
    urn: str
    props: Mapping[str, Any] = field(default_factory=dict)
    parent: str | None = None


@dataclass(frozen=True)
class Finding:
    """A stack policy's violation, attached to the resource that has to change."""

    message: str
    urn: str | None = None


ResourceCheck = Callable[[str, Mapping[str, Any]], list[str]]
"""(resource type, camelCase props) -> violation messages (empty: compliant or not judgeable)."""
StackCheck = Callable[[Sequence[Resource]], list[Finding]]
"""(every resource of the stack) -> findings."""


@dataclass(frozen=True)
class ResourcePolicy:
    name: str
    description: str
    enforcement: Enforcement
    check: ResourceCheck


@dataclass(frozen=True)
class StackPolicy:
    name: str
    description: str
    enforcement: Enforcement
    check: StackCheck


Policy = ResourcePolicy | StackPolicy

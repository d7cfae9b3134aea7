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
    dependencies: tuple[str, ...] = ()
    """URNs of the resources it depends on (stack policies only: the CLI gives resource
    policies none)."""


@dataclass(frozen=True)
class Finding:
    """A stack policy's violation, attached to the resource that has to change."""

    message: str
    urn: str | None = None


ResourceCheck = Callable[[str, Mapping[str, Any]], list[str]]
"""(resource type, camelCase props) -> violation messages (empty: compliant or not judgeable)."""
ResourceGraphCheck = Callable[["Resource"], list[str]]
"""(the resource with its name, URN and parent) -> violation messages."""
StackCheck = Callable[[Sequence[Resource]], list[Finding]]
"""(every resource of the stack) -> findings."""


@dataclass(frozen=True)
class ResourcePolicy:
    name: str
    description: str
    enforcement: Enforcement
    check: ResourceCheck

    def judge(self, resource: Resource) -> list[str]:
        return self.check(resource.type, resource.props)


@dataclass(frozen=True)
class ResourceGraphPolicy:
    """A resource policy that also needs where the resource sits in the resource graph
    (its URN, whose type chain names the components it is declared in, and its parent):
    it still judges one resource as it is registered, before anything is applied."""

    name: str
    description: str
    enforcement: Enforcement
    check: ResourceGraphCheck

    def judge(self, resource: Resource) -> list[str]:
        return self.check(resource)


@dataclass(frozen=True)
class StackPolicy:
    name: str
    description: str
    enforcement: Enforcement
    check: StackCheck


Policy = ResourcePolicy | ResourceGraphPolicy | StackPolicy

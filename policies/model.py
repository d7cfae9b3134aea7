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
"""(every resource of the stack) -> findings. A policy with settings gets each as a keyword
argument too (its default when the policy config does not set it)."""


class SettingError(ValueError):
    """A policy's setting in the policy config that the pack refuses."""


@dataclass(frozen=True)
class Setting:
    """A property a policy reads from its entry of the --policy-pack-config document
    (`{"<policy>": {"enforcementLevel": ..., "<setting>": ...}}`: per policy, as the CLI
    hands them; properties under "all" reach no policy)."""

    name: str
    description: str
    schema: Mapping[str, Any]
    """JSON Schema of the value: the CLI validates the config with it before any policy runs."""
    parse: Callable[[Any], Any]
    """The value from the config -> the check's keyword argument; raises SettingError."""
    default: Any


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
    settings: tuple[Setting, ...] = ()

    def configure(self, properties: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The check's keyword arguments from the policy's config properties (a property it
        does not read is ignored, as by the CLI); raises SettingError."""
        given = properties or {}
        return {
            s.name: s.parse(given[s.name]) if s.name in given else s.default
            for s in self.settings
        }

    def run(
        self, resources: Sequence[Resource], settings: Mapping[str, Any] | None = None
    ) -> list[Finding]:
        """The findings over `resources` with `settings` (from `configure`; defaults if None)."""
        values = self.configure() if settings is None else dict(settings)
        return self.check(resources, **values)


Policy = ResourcePolicy | ResourceGraphPolicy | StackPolicy

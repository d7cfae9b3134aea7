"""What one run of the kit's Pulumi program under mocks declared, as plain data: each
resource's type, name, URN, inputs and mocked state (`DeclaredResource`), and the run's
resources in tree order with its stack outputs (`OfflineRun`). Made by
operator_tools/offline.py; read by the plan, the start-up check, the contract checks and the
policy pack's offline check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DeclaredResource:
    """One resource the program registered (custom resources and components)."""

    type: str
    """Type token, e.g. "gcp:cloudscheduler/job:Job"."""
    name: str
    """Pulumi logical name."""
    urn: str
    props: Mapping[str, Any]
    """Inputs, camelCase, as the engine and a policy pack see them."""
    parent: str | None = None
    """URN of the parent (the stack, or a component)."""
    custom: bool = True
    """False for component resources (DedupService, DedupProxy, ScheduledJob)."""
    dependencies: tuple[str, ...] = ()
    """URNs this resource depends on (explicit depends_on and inputs)."""
    protect: bool = False
    outputs: Mapping[str, Any] = field(default_factory=dict)
    """The state the mocks returned (inputs plus computed outputs)."""
    aliases: tuple[Mapping[str, Any], ...] = ()
    """Its aliases as registered: `{"urn": ...}`, or a spec (`{"noParent": True}`, ...)."""


@dataclass(frozen=True)
class OfflineRun:
    """What one offline run of the program declared."""

    stack: str
    resources: tuple[DeclaredResource, ...]
    outputs: Mapping[str, Any]
    """The stack outputs (pulumi.export), resolved."""
    dst_chosen: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Each Scheduler job ID -> the DST behaviours its stack file chose ("repeat", "gap"),
    when the run came from a checked stack file (offline.checked_run); else nothing known."""

    def of_type(self, type_token: str) -> list[DeclaredResource]:
        return [r for r in self.resources if r.type == type_token]

    def one(self, type_token: str) -> DeclaredResource:
        found = self.of_type(type_token)
        if len(found) != 1:
            raise LookupError(f"expected one {type_token}, found {len(found)}")
        return found[0]

    def by_name(self, name: str) -> DeclaredResource:
        for resource in self.resources:
            if resource.name == name:
                return resource
        raise LookupError(f"no resource named {name!r}")

    def by_urn(self, urn: str) -> DeclaredResource:
        for resource in self.resources:
            if resource.urn == urn:
                return resource
        raise LookupError(f"no resource with URN {urn!r}")

"""Contract checks: what the program declares, judged by Google's own API contracts.

    from infra.contracts import check_resources
    findings = check_resources(run.resources)     # [] when every declaration is valid

Each declared resource whose type has a Google API counterpart is converted to that API's
request body and parsed strictly with Google's own client type (infra/contracts/convert.py),
then checked against the limits Google documents that no type encodes
(infra/contracts/limits.py, a function's in infra/contracts/function_limits.py), and the
stack's resources together against the limits on how many a project may hold. `make plan`
(operator_tools/plan.py) fails a stack with findings like a config error. docs/contracts.md
lists every rule with its source.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from infra.contracts import function_limits, limits
from infra.contracts.convert import (
    CONTRACTS,
    Declared,
    parse_strictly,
    unknown_properties,
)
from infra.contracts.findings import Finding, Rule, Source

__all__ = [
    "CHECKED_TYPES",
    "UNCHECKED_TYPES",
    "Finding",
    "Rule",
    "Source",
    "check_resource",
    "check_resources",
]

assert not set(limits.LIMITS) & set(function_limits.LIMITS), "each type's limits in one module"
LIMITS: Final = {**limits.LIMITS, **function_limits.LIMITS}

CHECKED_TYPES: Final = frozenset(CONTRACTS) | frozenset(LIMITS)
"""Resource types with a contract (a Google client type) or documented limits, or both."""

UNCHECKED_TYPES: Final[Mapping[str, str]] = {
    "gcp:projects/service:Service": "enables an API by its name; Service Usage's client "
    "library (google-cloud-service-usage) is not a dependency, and the names are the kit's "
    "own constants",
    "gcp:monitoring/dashboard:Dashboard": "its dashboardJson is a Monitoring Dashboards API "
    "Dashboard; that API's client (google-cloud-monitoring-dashboards) is not a dependency",
    "gcp:artifactregistry/repository:Repository": "Artifact Registry's client "
    "(google-cloud-artifact-registry) is not a dependency; the repository is the build's "
    "image store with fixed settings",
    "time:index/sleep:Sleep": "pulumiverse-time: a wait inside the deployment, no Google API",
    "random:index/randomPassword:RandomPassword": "pulumi-random: generated locally, no Google "
    "API (the secret version holding it is checked)",
}
"""Declared resource types left unchecked, and why (tests/infra/test_contracts.py fails for a
declared type in neither list)."""


def check_resource(resource: Declared) -> list[Finding]:
    """Every finding for one declared resource ([] for an unchecked type or a component)."""
    found: list[Finding] = []
    contract = CONTRACTS.get(resource.type)
    if contract is not None:
        found += unknown_properties(contract, resource)
        found += parse_strictly(contract, resource)
    for check in LIMITS.get(resource.type, ()):
        found += check(resource)
    return found


def check_resources(resources: Iterable[Declared]) -> list[Finding]:
    """Every finding for the declared resources, in declaration order, then those of the
    limits across them (`limits.STACK_LIMITS`)."""
    declared = list(resources)
    found = [finding for resource in declared for finding in check_resource(resource)]
    return found + [finding for check in limits.STACK_LIMITS for finding in check(declared)]

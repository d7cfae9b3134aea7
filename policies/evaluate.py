"""Run the registry's policies over a set of declared resources, as the CLI would.

`evaluate` applies every resource policy to each resource and every stack policy to the
whole set, with the enforcement levels of the registry, optionally overridden by a
`--policy-pack-config` style document (`load_policy_config`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policies.model import Enforcement, Policy, Resource, StackPolicy
from policies.registry import ALL_POLICIES


@dataclass(frozen=True)
class Violation:
    policy: str
    enforcement: Enforcement
    urn: str | None
    message: str

    @property
    def resource(self) -> str:
        """`name (type)` from the URN, or "(stack)" if the violation names no resource."""
        if not self.urn:
            return "(stack)"
        parts = self.urn.split("::")
        if len(parts) < 4:
            return self.urn
        qualified_type, name = parts[2], "::".join(parts[3:])
        return f"{name} ({qualified_type.rsplit('$', 1)[-1]})"


class PolicyConfigError(ValueError):
    """A policy config document the Pulumi CLI would reject."""


def parse_policy_config(
    document: Mapping[str, Any], policies: Sequence[Policy] = ALL_POLICIES
) -> dict[str, Enforcement]:
    """Enforcement levels from a --policy-pack-config document.

    Keys are policy names or "all"; values an enforcement level string or an object with
    "enforcementLevel" (other keys are per-policy properties, which these policies do not
    use). A level under "all" applies to every policy; a policy's own entry wins.
    """
    names = {p.name for p in policies}
    allowed = {e.value for e in Enforcement} | {"remediate"}

    def level_of(key: str, value: Any) -> Enforcement | None:
        raw = value.get("enforcementLevel") if isinstance(value, Mapping) else value
        if raw is None:
            return None
        if raw not in allowed:
            raise PolicyConfigError(f"{key}: unknown enforcement level {raw!r}")
        # Stack policies and policies without remediation count "remediate" as mandatory.
        return Enforcement.MANDATORY if raw == "remediate" else Enforcement(raw)

    levels: dict[str, Enforcement] = {}
    if "all" in document:
        level = level_of("all", document["all"])
        if level is not None:
            levels = dict.fromkeys(names, level)
    for key, value in document.items():
        if key == "all":
            continue
        if key not in names:
            raise PolicyConfigError(f"unknown policy {key!r} (known: {', '.join(sorted(names))})")
        level = level_of(key, value)
        if level is not None:
            levels[key] = level
    return levels


def load_policy_config(path: Path) -> dict[str, Enforcement]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise PolicyConfigError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(document, Mapping):
        raise PolicyConfigError(f"{path}: expected a JSON object")
    return parse_policy_config(document)


def evaluate(
    resources: Sequence[Resource],
    levels: Mapping[str, Enforcement] | None = None,
    policies: Sequence[Policy] = ALL_POLICIES,
    stack_resources: Sequence[Resource] | None = None,
) -> list[Violation]:
    """Every violation, resource policies first, in registry order.

    Like the CLI, resource policies see each resource's inputs (`resources`) and stack
    policies the resources' final state (`stack_resources`: inputs plus computed outputs;
    defaults to `resources`).
    """
    levels = levels or {}
    stack_view = resources if stack_resources is None else stack_resources
    violations: list[Violation] = []
    for policy in policies:
        enforcement = levels.get(policy.name, policy.enforcement)
        if enforcement is Enforcement.DISABLED:
            continue
        if isinstance(policy, StackPolicy):
            for finding in policy.check(stack_view):
                violations.append(Violation(policy.name, enforcement, finding.urn, finding.message))
        else:
            for resource in resources:
                for message in policy.judge(resource):
                    violations.append(Violation(policy.name, enforcement, resource.urn, message))
    return violations


def mandatory(violations: Sequence[Violation]) -> list[Violation]:
    return [v for v in violations if v.enforcement is Enforcement.MANDATORY]

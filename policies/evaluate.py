"""Run the registry's policies over a set of declared resources, as the CLI would.

`evaluate` applies every resource policy to each resource and every stack policy to the
whole set, with the enforcement levels of the registry, optionally overridden by a
`--policy-pack-config` style document (`load_pack_config`), which also carries the
settings some policies read (`deployers`: policies/deployers.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policies.model import Enforcement, Policy, Resource, SettingError, StackPolicy
from policies.registry import ALL_POLICIES

Settings = Mapping[str, Mapping[str, Any]]
"""Policy name -> its check's keyword arguments (StackPolicy.configure)."""


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
    "enforcementLevel" (other keys are per-policy properties: `parse_policy_settings`). A
    level under "all" applies to every policy; a policy's own entry wins.
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


def parse_policy_settings(
    document: Mapping[str, Any], policies: Sequence[Policy] = ALL_POLICIES
) -> dict[str, dict[str, Any]]:
    """Each configurable policy's settings from a --policy-pack-config document, as the CLI
    hands them: the properties of the policy's own entry (the CLI gives a policy nothing
    from "all"). A property no policy reads is ignored, as by the CLI; a setting of the
    pack in the entry of a policy that does not read it, or under "all", is an error (it
    would silently do nothing), and so is a value the policy refuses."""
    readers: dict[str, list[str]] = {}
    for policy in policies:
        if isinstance(policy, StackPolicy):
            for setting in policy.settings:
                readers.setdefault(setting.name, []).append(policy.name)
    settings: dict[str, dict[str, Any]] = {}
    for policy in policies:
        if not isinstance(policy, StackPolicy) or not policy.settings:
            continue
        entry = document.get(policy.name)
        try:
            settings[policy.name] = policy.configure(
                entry if isinstance(entry, Mapping) else None
            )
        except SettingError as exc:
            raise PolicyConfigError(f"{policy.name}: {exc}") from exc
    for key, entry in document.items():
        if not isinstance(entry, Mapping):
            continue
        for name, policy_names in readers.items():
            if name in entry and key not in policy_names:
                where = "under 'all', which the CLI passes to no policy" if key == "all" else (
                    "a setting this policy does not read")
                raise PolicyConfigError(
                    f"{key}: {name!r} is {where}: set it in the entry of "
                    f"{' and '.join(repr(n) for n in policy_names)}"
                )
    return settings


@dataclass(frozen=True)
class PackConfig:
    """A --policy-pack-config document: enforcement levels and the policies' settings."""

    levels: dict[str, Enforcement]
    settings: dict[str, dict[str, Any]]


def parse_pack_config(
    document: Mapping[str, Any], policies: Sequence[Policy] = ALL_POLICIES
) -> PackConfig:
    return PackConfig(
        parse_policy_config(document, policies), parse_policy_settings(document, policies)
    )


def load_pack_config(path: Path) -> PackConfig:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise PolicyConfigError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(document, Mapping):
        raise PolicyConfigError(f"{path}: expected a JSON object")
    try:
        return parse_pack_config(document)
    except PolicyConfigError as exc:
        raise PolicyConfigError(f"{path}: {exc}") from exc


def load_policy_config(path: Path) -> dict[str, Enforcement]:
    return load_pack_config(path).levels


def evaluate(
    resources: Sequence[Resource],
    levels: Mapping[str, Enforcement] | None = None,
    policies: Sequence[Policy] = ALL_POLICIES,
    stack_resources: Sequence[Resource] | None = None,
    settings: Settings | None = None,
) -> list[Violation]:
    """Every violation, resource policies first, in registry order.

    Like the CLI, resource policies see each resource's inputs (`resources`) and stack
    policies the resources' final state (`stack_resources`: inputs plus computed outputs;
    defaults to `resources`). `settings` (from `parse_policy_settings`) configures the
    policies that read any; the others get their defaults.
    """
    levels = levels or {}
    settings = settings or {}
    stack_view = resources if stack_resources is None else stack_resources
    violations: list[Violation] = []
    for policy in policies:
        enforcement = levels.get(policy.name, policy.enforcement)
        if enforcement is Enforcement.DISABLED:
            continue
        if isinstance(policy, StackPolicy):
            for finding in policy.run(stack_view, settings.get(policy.name)):
                violations.append(Violation(policy.name, enforcement, finding.urn, finding.message))
        else:
            for resource in resources:
                for message in policy.judge(resource):
                    violations.append(Violation(policy.name, enforcement, resource.urn, message))
    return violations


def mandatory(violations: Sequence[Violation]) -> list[Violation]:
    return [v for v in violations if v.enforcement is Enforcement.MANDATORY]

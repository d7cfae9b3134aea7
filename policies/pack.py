"""The registry's policies as pulumi_policy objects (building them starts no server).

Both wrappers hand the pure policy functions plain dicts and lists, with preview's unknown
sentinels left in place: pulumi_policy's proxy would raise on the first unknown value read
and skip the whole policy for that resource with an advisory note, hiding real violations
in the values that are known.

A policy with settings (`deployers`) declares them as its config schema, so the CLI refuses
a --policy-pack-config whose value does not match before any policy runs; a value the
schema lets through and the policy refuses is reported as a violation of that policy, which
then runs with its defaults (no exemption).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import _DictProxy, _ListProxy

from policies.model import (
    Enforcement,
    Resource,
    ResourceGraphPolicy,
    ResourcePolicy,
    SettingError,
    StackPolicy,
)
from policies.registry import ALL_POLICIES

PACK_NAME: Final = "scheduler-dedup"

_LEVELS: Final = {
    Enforcement.MANDATORY: EnforcementLevel.MANDATORY,
    Enforcement.ADVISORY: EnforcementLevel.ADVISORY,
    Enforcement.DISABLED: EnforcementLevel.DISABLED,
}


def plain(value: Any) -> Any:
    """Unwrap pulumi_policy's unknown-checking proxies into dicts/lists, keeping sentinels."""
    if isinstance(value, _DictProxy | _ListProxy):
        value = value["__target"]
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [plain(v) for v in value]
    return value


def _resource_validator(policy: ResourcePolicy | ResourceGraphPolicy) -> Any:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        opts = getattr(args, "opts", None)
        resource = Resource(
            type=args.resource_type,
            name=args.name,
            urn=args.urn,
            props=plain(args.props),
            parent=getattr(opts, "parent", None) or None,
        )
        for message in policy.judge(resource):
            report_violation(message, args.urn)

    return validate


def _stack_validator(policy: StackPolicy) -> Any:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        resources = [
            Resource(
                type=r.resource_type,
                name=r.name,
                urn=r.urn,
                props=plain(r.props),
                parent=r.parent.urn if r.parent is not None else None,
                dependencies=tuple(d.urn for d in r.dependencies or ()),
            )
            for r in args.resources
        ]
        try:
            settings = policy.configure(plain(args.get_config()))
        except SettingError as exc:
            report_violation(
                f"the policy config of {policy.name}: {exc} (fix the --policy-pack-config "
                "file; until then the policy runs with its defaults)",
                None,
            )
            settings = policy.configure()
        for finding in policy.run(resources, settings):
            report_violation(finding.message, finding.urn)

    return validate


def config_schema(policy: StackPolicy) -> PolicyConfigSchema | None:
    """The JSON Schema of the policy's settings, for the CLI to validate its config with."""
    if not policy.settings:
        return None
    return PolicyConfigSchema(
        properties={
            s.name: {**s.schema, "description": s.description} for s in policy.settings
        }
    )


def build_policies() -> list[Policy]:
    built: list[Policy] = []
    for policy in ALL_POLICIES:
        level = _LEVELS[policy.enforcement]
        if not isinstance(policy, StackPolicy):
            built.append(
                ResourceValidationPolicy(
                    name=policy.name,
                    description=policy.description,
                    validate=_resource_validator(policy),
                    enforcement_level=level,
                )
            )
        else:
            built.append(
                StackValidationPolicy(
                    name=policy.name,
                    description=policy.description,
                    validate=_stack_validator(policy),
                    enforcement_level=level,
                    config_schema=config_schema(policy),
                )
            )
    return built

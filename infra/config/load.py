"""Reading a stack's config: `load_config(values)`, a pure function over a plain mapping of
full config keys (`"gcp:project"`, `"scheduler-dedup:jobs"`, ...) to values, native YAML
values (a `Pulumi.<stack>.yaml` file's `config:` section) or the strings the Pulumi engine
hands a program (`"600"`, `"true"`, JSON for objects and lists), which returns the
validated `StackConfig` or raises one `ConfigError` with every problem, a key of a
namespace nobody reads among them; and `config_from_pulumi()`, its thin adapter from
`pulumi.Config` for a deployment.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from infra.config.errors import ConfigError, Problem
from infra.config.explain import validation_problems
from infra.config.fields import model_fields
from infra.config.names import (
    GCP_PROJECT_KEY,
    GCP_REGION_KEY,
    PROJECT_NAME,
    PROVIDER_NAMESPACES,
    kit_key,
)
from infra.config.stack import DEPLOYING, GROUPS, KIT_KEYS, StackConfig

# --------------------------------------------------------------------------- reading


def load_config(values: Mapping[str, Any], *, deploying: bool = False) -> StackConfig:
    """Validate a stack's config mapping and return the typed config; `deploying`: for a
    deployment, so the `DEPLOY_RULES` apply too (the program's config).

    `values` maps full keys (`"gcp:project"`, `"scheduler-dedup:leaseSeconds"`) to native
    or string values. Keys of the providers' namespaces (e.g. `gcp:zone`) are left to
    them; a key in any other namespace, or in none, is a problem (Pulumi would not give it
    to the program: a typo there would silently keep the default). Raises `ConfigError`
    listing every problem.
    """
    group_of = {key: group for group, model in GROUPS.items() for key in model_fields(model)}
    data: dict[str, Any] = {group: {} for group in GROUPS}
    problems = [p for key in values if (p := _namespace_problem(key)) is not None]
    for full_key, value in values.items():
        namespace, _, name = full_key.partition(":")
        if full_key in (GCP_PROJECT_KEY, GCP_REGION_KEY):
            data[full_key] = value
        elif namespace == PROJECT_NAME and name in GROUPS:  # the models' name, not a key
            raise ConfigError([Problem(full_key, "is not a setting of the kit", "remove it")])
        elif namespace == PROJECT_NAME:
            (data[group_of[name]] if name in group_of else data)[name] = parse_structure(value)
    try:
        config = StackConfig.model_validate(data, context={DEPLOYING: deploying})
    except ValidationError as exc:
        raise ConfigError([*problems, *validation_problems(exc)]) from None
    if problems:
        raise ConfigError(problems)
    return config


def _namespace_problem(full_key: str) -> Problem | None:
    """A problem if `full_key` is in a namespace nobody reads, with the key likely meant."""
    namespace, colon, name = full_key.rpartition(":")
    if colon and namespace in (PROJECT_NAME, *PROVIDER_NAMESPACES):
        return None
    meant = name if name in KIT_KEYS else next(
        iter(difflib.get_close_matches(name, sorted(KIT_KEYS), n=1)), None)
    if not colon:
        what = f"has no namespace, so the kit does not read it (it reads {PROJECT_NAME}:<key>)"
    else:
        what = (f"is in namespace {namespace!r}, which neither the kit ({PROJECT_NAME}) nor a "
                f"provider it uses ({', '.join(PROVIDER_NAMESPACES)}) reads")
    if meant is not None:
        fix = f"did you mean {kit_key(meant)}? write the kit's settings as {PROJECT_NAME}:<key>"
    else:
        fix = f"write the kit's settings as {PROJECT_NAME}:<key>, or remove it"
    return Problem(full_key, what, fix)


def parse_structure(raw: Any) -> Any:
    """Objects and lists arrive from the Pulumi engine as JSON strings."""
    if isinstance(raw, str) and raw.lstrip()[:1] in ("[", "{"):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


# --------------------------------------------------------------------------- Pulumi adapter


def config_from_pulumi() -> StackConfig:
    """Read the running stack's config through `pulumi.Config` and validate it, for a
    deployment (the `DEPLOY_RULES` included)."""
    return load_config(pulumi_config_values(), deploying=True)


def pulumi_config_values() -> dict[str, Any]:
    """The kit's keys plus gcp:project/gcp:region, as the Pulumi engine gives them."""
    import pulumi

    values: dict[str, Any] = {}
    kit = pulumi.Config(PROJECT_NAME)
    for name in sorted(KIT_KEYS):
        raw = kit.get(name)
        if raw is not None:
            values[kit_key(name)] = raw
    gcp = pulumi.Config("gcp")
    for full_key in (GCP_PROJECT_KEY, GCP_REGION_KEY):
        raw = gcp.get(full_key.split(":", 1)[1])
        if raw is not None:
            values[full_key] = raw
    # Unknown keys of the kit's namespace (typos), and keys of no known namespace, are only
    # visible in the raw config map.
    for full_key, raw in _raw_config_map().items():
        namespace = full_key.rpartition(":")[0]
        if namespace not in PROVIDER_NAMESPACES and full_key not in values:
            values[full_key] = raw
    return values


def _raw_config_map() -> dict[str, Any]:
    """All config the engine passed, best effort (used only to report unknown keys)."""
    try:
        from pulumi.runtime import config as runtime_config

        merged: dict[str, Any] = dict(runtime_config.get_config_env())
        merged.update(runtime_config.CONFIG.get())
        return merged
    except (ImportError, AttributeError, ValueError):  # pragma: no cover - SDK internals moved
        return {}

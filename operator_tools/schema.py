"""What follows from the config models (infra/config/), generated and checked in: the
`config:` block of `Pulumi.yaml` and docs/configuration.md's reference (each between its
`config-reference` markers), `schema/stack.schema.json`, the JSON Schema of
`Pulumi.<stack>.yaml` files that editors use through the files' `yaml-language-server` comment,
and the component package's (provider/): `provider/schema.json`, the package schema Pulumi's
host infers from the SchedulerDedup component (infra/component_host.py), and
`provider/requirements.txt`, the kit release the package installs.

`breaking_changes(released, current)` lists what a consumer of the last release's schema
(`provider/schema.released.json`, `--record-release` writes it) would break on: a removed
or renamed property or type, a changed type, an input made required, an output made
optional, an enum value removed. tests/infra/test_component_package.py allows them only with
a new major version.

`make schema` (`python -m operator_tools schema`) rewrites whichever has drifted from the models;
`--check` only lists them (exit 1). tests/infra/test_schema.py fails on any drift.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Final, get_args, get_origin

import yaml
from pydantic.fields import FieldInfo

from dedup.version import __version__ as KIT_VERSION
from infra.config import (
    DEFAULTS,
    GROUPS,
    PROJECT_NAME,
    PROVIDER_NAMESPACES,
    StackConfig,
    bounds,
    choices,
    hint,
    kit_key,
    model_fields,
    model_in,
    stack_fields,
)

REPO_ROOT: Final = Path(__file__).resolve().parents[1]
SCHEMA_PATH: Final = Path("schema/stack.schema.json")
PACKAGE_SCHEMA_PATH: Final = Path("provider/schema.json")
RELEASED_SCHEMA_PATH: Final = Path("provider/schema.released.json")
PROVIDER_REQUIREMENTS_PATH: Final = Path("provider/requirements.txt")
KIT_DISTRIBUTION: Final = "scheduler-dedup-kit"
REFERENCE_PATH: Final = Path("docs/configuration.md")
REFERENCE_MARKERS: Final = ("<!-- config-reference:start -->", "<!-- config-reference:end -->")
PULUMI_MARKERS: Final = ("# config-reference:start", "# config-reference:end")
_TYPES: Final[dict[Any, str]] = {str: "string", int: "integer", bool: "boolean"}


def documented_keys(model: Any = None, prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
    """Every key as the configuration reference names it (`leaseSeconds`,
    `jobs[].retry.retryCount`), in order."""
    for key, info in (model_fields(model) if model else stack_fields()).items():
        yield f"{prefix}{key}", info
        if (inner := model_in(info.annotation)) is not None:
            yield from documented_keys(inner, f"{prefix}{key}{'[]' if is_list(info) else ''}.")


def is_list(info: FieldInfo) -> bool:
    return get_origin(info.annotation) in (tuple, list)


def type_text(info: FieldInfo) -> str:
    if model_in(info.annotation) is not None or is_list(info):
        return "list" if is_list(info) else "object"
    if choices(info):
        return "string"
    found = [_TYPES[a] for a in (info.annotation, *get_args(info.annotation)) if a in _TYPES]
    return found[0] if found else "any JSON value"


def default_text(info: FieldInfo) -> str:
    if follows := hint(info).default:
        return f"= `{follows}`"
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        return "see below"
    if isinstance(info.default, bool):
        return f"`{str(info.default).lower()}`"
    if isinstance(info.default, str):
        return f"`{info.default}`"
    if info.default == ():
        return "`[]`"
    return "none" if info.default is None else str(info.default)


def allowed_text(info: FieldInfo) -> str:
    low, high = bounds(info)
    if (low, high) != (None, None):
        return f"≤ {high}" if low is None else f"≥ {low}" if high is None else f"{low}..{high}"
    if options := choices(info):
        return ", ".join(f"`{option}`" for option in options)
    longest = [m.max_length for m in info.metadata if hasattr(m, "max_length")]
    what = "entries" if get_origin(info.annotation) is tuple else "characters"
    return f"≤ {longest[0]} {what}" if longest else ""


# --------------------------------------------------------------------------- the artefacts


def reference_table() -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| Key | Type | Default | Allowed | Description |", "|---|---|---|---|---|"]
    for key, info in documented_keys():
        fields = (f"`{key}`", type_text(info), default_text(info), allowed_text(info),
                  info.description or "")
        lines.append("| " + " | ".join(cell(f) for f in fields) + " |")
    return "\n".join(lines) + "\n"


def pulumi_type(info: FieldInfo) -> dict[str, Any]:
    """A field's type as a Pulumi project config declares it: string, integer, boolean, or
    array with its items' type (Pulumi rejects a project file with any other)."""
    if is_list(info):
        item = get_args(info.annotation)[0]
        base = get_args(item)[0] if get_origin(item) is Annotated else item
        return {"type": "array", "items": {"type": _TYPES[base]}}
    return {"type": type_text(info)}


def pulumi_config_block() -> str:
    followers = [f"{k} (unset: {hint(i).default})" for k, i in stack_fields().items()
                 if hint(i).default]
    header = textwrap.fill(
        "Generated from infra/config/ by `make schema`: edit the models there, not this "
        f"block. The kit's settings with a fixed default (stack files set them as {PROJECT_NAME}:"
        "<key>); infra/config/ validates every key, and their relations, before any resource "
        "is declared. Not declared here, as a declared key without a default is required: "
        f"{', '.join(followers)}; jobs (required) and runtimes, lists of objects, which a "
        "project config schema cannot type; gcp:project and gcp:region (required). Every "
        "key, the jobs' too: "
        f"docs/configuration.md's reference; editors check stack files with {SCHEMA_PATH}.",
        width=92, initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False,
    )
    config = {}
    for key, info in stack_fields().items():
        if key in DEFAULTS:
            low, high = bounds(info)
            span = f" ({allowed_text(info)})" if (low, high) != (None, None) else ""
            config[key] = {**pulumi_type(info), "default": DEFAULTS[key],
                           "description": f"{info.description}{span}"}
    body = yaml.safe_dump({"config": config}, sort_keys=False, width=92, allow_unicode=True)
    return f"{header}\n{body}"


def stack_schema() -> dict[str, Any]:
    """JSON Schema of a `Pulumi.<stack>.yaml` file: its `config:` map, the kit's keys
    namespaced, the groups' keys flat, the providers' namespaces' keys free."""
    models = StackConfig.model_json_schema(by_alias=True)
    defs: dict[str, Any] = models.pop("$defs")
    keys: dict[str, Any] = {}
    for key, schema in models["properties"].items():
        if key in GROUPS:  # flat in a stack file; kept in $defs for a runtime's `resources`
            group = defs[schema["$ref"].rsplit("/", 1)[1]]
            keys.update({kit_key(k): v for k, v in group["properties"].items()})
        else:
            keys[key if ":" in key else kit_key(key)] = schema
    config = {
        "type": "object",
        "description": f"Stack settings: gcp:project, gcp:region and the {PROJECT_NAME}: keys",
        "properties": keys,
        "required": [k if ":" in k else kit_key(k) for k in models["required"]],
        # The providers' namespaces are theirs; any other key is a mistake (load_config).
        "patternProperties": {f"^({'|'.join(PROVIDER_NAMESPACES)}):": {}},
        "additionalProperties": False,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"Pulumi.<stack>.yaml of the {PROJECT_NAME} project",
        "description": "Generated from infra/config/ by `make schema`; do not edit.",
        "type": "object",
        "properties": {"config": _without_titles(config)},
        "required": ["config"],
        "$defs": _without_titles(defs),
    }


def _without_titles(node: Any) -> Any:
    """Pydantic's titles ("Leaseseconds") say less than the key itself."""
    if isinstance(node, dict):
        return {k: _without_titles(v) for k, v in node.items() if k != "title"}
    if isinstance(node, list):
        return [_without_titles(v) for v in node]
    return node


def package_schema() -> dict[str, Any]:
    """The component package's schema, exactly as `component_provider_host` infers and
    serves it (GetSchema), from the same ComponentProvider."""
    from infra.component_host import component_provider

    schema: dict[str, Any] = json.loads(component_provider().schema or "{}")
    return schema


def provider_requirements(kit_version: str | None = None) -> str:
    """The kit release the package installs: `kit_version`, or this checkout's."""
    version = KIT_VERSION if kit_version is None else kit_version
    return ("# Generated from function/dedup/version.py by `make schema`: the kit release the "
            "component\n# package runs; Pulumi installs it into the plugin's virtualenv "
            "(docs/component-package.md).\n"
            f"{KIT_DISTRIBUTION}=={version}\n")


def breaking_changes(released: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What a program written against `released` would break on in `current` (additions
    are fine: a new optional input, a new output, a new type, a new enum value)."""
    found: list[str] = []
    for token, old in released.get("resources", {}).items():
        new = current.get("resources", {}).get(token)
        if new is None:
            found.append(f"resource {token} removed")
            continue
        found += _properties(token, "input", old.get("inputProperties", {}),
                             new.get("inputProperties", {}))
        found += _properties(token, "output", old.get("properties", {}),
                             new.get("properties", {}))
        found += [f"{token}: input {k} is now required" for k in
                  sorted(set(new.get("requiredInputs", [])) - set(old.get("requiredInputs", [])))]
        found += [f"{token}: output {k} is no longer always set" for k in
                  sorted(set(old.get("required", [])) - set(new.get("required", [])))
                  if k in new.get("properties", {})]
    for token, old in released.get("types", {}).items():
        new = current.get("types", {}).get(token)
        if new is None:
            found.append(f"type {token} removed")
            continue
        if old.get("type") != new.get("type"):
            found.append(f"type {token}: {old.get('type')} is now {new.get('type')}")
        found += _properties(f"type {token}", "property", old.get("properties", {}),
                             new.get("properties", {}))
        old_values = {v["value"] for v in old.get("enum") or []}
        new_values = {v["value"] for v in new.get("enum") or []}
        found += [f"type {token}: enum value {v!r} removed"
                  for v in sorted(old_values - new_values)]
        found += [f"type {token}: property {k} is now required" for k in
                  sorted(set(new.get("required", [])) - set(old.get("required", [])))]
    return found


def _properties(owner: str, what: str, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    found: list[str] = []
    for name, spec in old.items():
        if name not in new:
            found.append(f"{owner}: {what} {name} removed (or renamed)")
        elif _shape(spec) != _shape(new[name]):
            found.append(f"{owner}: {what} {name} is {_shape(new[name])}, was {_shape(spec)}")
    return found


def _shape(spec: Any) -> Any:
    """A property's type, without its description: type, $ref, items, map values, plain."""
    if not isinstance(spec, dict):
        return spec
    return {k: _shape(v) for k, v in spec.items()
            if k not in ("description", "willReplaceOnChanges")}


def _json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _between(text: str, markers: tuple[str, str], body: str, path: Path) -> str:
    start, end = markers
    if start not in text or end not in text.split(start, 1)[1]:
        raise ValueError(f"{path}: the markers {start!r} and {end!r} are missing")
    head, rest = text.split(start, 1)
    return f"{head}{start}\n{body}{end}{rest.split(end, 1)[1]}"


def generated(root: Path = REPO_ROOT) -> dict[Path, str]:
    """Each generated file's path under `root` and the text it must have."""
    pulumi_yaml, reference = root / "Pulumi.yaml", root / REFERENCE_PATH
    return {
        pulumi_yaml: _between(pulumi_yaml.read_text(), PULUMI_MARKERS, pulumi_config_block(),
                              pulumi_yaml),
        reference: _between(reference.read_text(), REFERENCE_MARKERS, reference_table(),
                            reference),
        root / SCHEMA_PATH: _json(stack_schema()),
        root / PACKAGE_SCHEMA_PATH: _json(package_schema()),
        root / PROVIDER_REQUIREMENTS_PATH: provider_requirements(),
    }


def stale(root: Path = REPO_ROOT) -> dict[Path, str]:
    """The generated files that differ from the models, with their due text."""
    return {p: t for p, t in generated(root).items() if not p.exists() or p.read_text() != t}


def main(argv: Sequence[str] = (), root: Path = REPO_ROOT) -> int:
    parser = argparse.ArgumentParser(
        prog="scheduler-dedup schema",
        description="Regenerate Pulumi.yaml's config block, docs/configuration.md's reference, "
        "schema/stack.schema.json, provider/schema.json and provider/requirements.txt from the "
        "config models and the SchedulerDedup component (make schema).")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming each file that is not current")
    parser.add_argument("--record-release", action="store_true",
                        help=f"also record {PACKAGE_SCHEMA_PATH} as the released schema "
                        f"({RELEASED_SCHEMA_PATH}), when tagging a release")
    options = parser.parse_args(list(argv))
    check = options.check
    drifted = stale(root)
    for path, text in drifted.items():
        name = path.relative_to(root)
        if check:
            print(f"{name} is not current: run `make schema`", file=sys.stderr)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {name}")
    if options.record_release and not check:
        (root / RELEASED_SCHEMA_PATH).write_text(_json(package_schema()))
        print(f"wrote {RELEASED_SCHEMA_PATH}")
    return 1 if drifted and check else 0


if __name__ == "__main__":
    from operator_tools import not_an_entry_point

    not_an_entry_point("schema")

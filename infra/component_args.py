"""The inputs of the `SchedulerDedup` component (infra/component.py), derived from the
config models (infra/config/), which stay the one declaration of every setting: the
component's args are a stack file's `config:` block as typed inputs, a TypedDict per model
(`JobSettings`, `RetryConfig`, `ProxyTarget`, `JobAlertSettings`, `WatchdogSettings`,
`AlertSettings`), an Enum per choice (`Overlap`, ...) and `SchedulerDedupArgs`, the stack's
keys (`project`, `region`, the flat settings, `watchdog`, `alerts`, `jobs`).

Pulumi's component analyzer (pulumi.provider.experimental.analyzer) infers the package
schema from these annotations and reads each property's description from the docstring
under it in the class's *source* (`inspect.getsource`). So the classes are rendered as
source text from the models' fields and executed, and that text is registered with
`linecache` under the module's pseudo file name, where `inspect` finds it: the schema gets
the models' descriptions without a hand-written copy of any field.

`config_values(args)` turns the component's inputs back into the stack config mapping
(`"scheduler-dedup:leaseSeconds": 60`, ...), which `load_config` validates with the same
errors a stack file gets; `component_args(values)` is the reverse, for the Python program.
"""

from __future__ import annotations

import enum
import inspect
import json
import linecache
import sys
import types
import typing
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, get_args, get_origin

from pydantic import BaseModel, BeforeValidator
from pydantic.alias_generators import to_snake
from pydantic.fields import FieldInfo

from infra.config import (
    ConfigError,
    Problem,
    StackConfig,
    bounds,
    hint,
    kit_key,
    model_fields,
    stack_fields,
)
from infra.config.load import parse_structure

TYPES_MODULE: Final = "infra.component_types"
"""The module the rendered classes live in (in sys.modules, with no file of its own)."""
_TYPES_FILE: Final = "<infra.component_types: rendered by infra/component_args.py>"
ARGS_TYPE: Final = "SchedulerDedupArgs"
_PLAIN: Final = (str, int, bool, float)


@dataclass(frozen=True)
class InputField:
    """One input property: its Python key, the config key it is, and what it holds."""

    key: str
    """The TypedDict key (snake_case; the schema's name is its camelCase, the config key)."""
    config_key: str
    """The model's key (`leaseSeconds`, `retry`), or a full key at the top (`gcp:project`)."""
    model: type[BaseModel] | None
    """The model a nested object (or each item of a list) is."""


@dataclass
class _Rendering:
    """The classes' source, rendered once from the models, dependencies first."""

    blocks: list[str]
    fields: dict[str, dict[str, InputField]]
    """Per rendered class name: its input fields by key."""
    enums: dict[tuple[str, ...], str]
    """A choice's values -> its Enum's name."""


def _python_key(config_key: str) -> str:
    key = config_key.rpartition(":")[2]
    snake = to_snake(key)
    # The analyzer names the schema property camel_case(key): it must be the config key.
    if schema_name(snake) != key:
        raise ValueError(f"config key {config_key!r} has no snake_case name that camel-cases "
                         "back to it")
    return snake


def schema_name(name: str) -> str:
    """The analyzer's camel_case (pulumi.provider.experimental.util), not imported: the
    module stays light for the policy pack."""
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _bare(annotation: Any) -> Any:
    """A field's type without Annotated's metadata and without `| None`."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (typing.Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        if len(inner) == 1:
            return _bare(inner[0])
    return annotation


def _description(info: FieldInfo) -> str:
    """The model's description, with its default and bounds (as the reference gives them)."""
    text = (info.description or "").rstrip(".")
    low, high = bounds(info)
    extra: list[str] = []
    if low is not None or high is not None:
        extra.append(f"{'' if low is None else low}..{'' if high is None else high}")
    if (follows := hint(info).default) and "unset" not in text:
        extra.append(f"unset: {follows}")
    elif not follows and not info.is_required() and info.default_factory is None and (
            info.default not in (None, (), [], "")):
        extra.append(f"default {json.dumps(info.default)}")
    if also := hint(info).also:
        # A union is no schema type: name the object the shorthand stands for instead.
        extra.append(f"a stack file's `{also}` is {json.dumps(_shorthand(info, also))} here")
    return f"{text} ({'; '.join(extra)})" if extra else text


def _shorthand(info: FieldInfo, also: str) -> Any:
    """What the field's before-validator makes of its shorthand (`none` -> the object)."""
    metadata = [*info.metadata, *get_args(info.annotation)[1:]]
    for item in metadata:
        if isinstance(item, BeforeValidator):
            return item.func(also)  # type: ignore[call-arg]
    return also


def _owner_name(module: str, choice: Any, config_key: str) -> str:
    """A choice's Enum name: the module's name for its Literal, else its key's."""
    for name, value in vars(sys.modules[module]).items():
        if value is choice and name[:1].isupper():
            return name
    return config_key[:1].upper() + config_key[1:]


def _render(rendering: _Rendering, annotation: Any, module: str, config_key: str,
            ) -> tuple[str, type[BaseModel] | None]:
    """The annotation's source text, rendering the classes it needs first."""
    bare = _bare(annotation)
    if bare in _PLAIN:
        return bare.__name__, None
    if bare is Any:
        return "Any", None
    if get_origin(bare) is Literal:
        values = tuple(str(v) for v in get_args(bare))
        if values not in rendering.enums:
            name = _owner_name(module, bare, config_key)
            members = "".join(f"    {v} = {v!r}\n" for v in values)
            doc = f"The choices of `{config_key}`."
            rendering.blocks.append(f"class {name}(Enum):\n    {doc!r}\n\n{members}")
            rendering.enums[values] = name
        return rendering.enums[values], None
    if get_origin(bare) in (tuple, list):
        item, model = _render(rendering, get_args(bare)[0], module, config_key)
        return f"list[{item}]", model
    if get_origin(bare) is dict and get_args(bare)[0] is str:  # a map: `settings`
        item, model = _render(rendering, get_args(bare)[1], module, config_key)
        return f"dict[str, {item}]", model
    if isinstance(bare, type) and issubclass(bare, BaseModel):
        if bare.__name__ not in rendering.fields:
            _render_model(rendering, bare)
        return bare.__name__, bare
    raise TypeError(f"{config_key}: no schema type for {annotation!r}")


def _render_model(rendering: _Rendering, model: type[BaseModel]) -> None:
    rendering.fields[model.__name__] = {}  # before its fields: a model never nests itself
    lines = _class_lines(rendering, model.__name__, model.__doc__ or model.__name__,
                         model_fields(model), model.__module__)
    rendering.blocks.append(lines)


def _class_lines(rendering: _Rendering, name: str, doc: str, fields: Mapping[str, FieldInfo],
                 module: str) -> str:
    body = [f"class {name}(TypedDict):", f"    {inspect.cleandoc(doc)!r}", ""]
    inputs: dict[str, InputField] = {}
    for config_key, info in fields.items():
        key = _python_key(config_key)
        text, model = _render(rendering, info.annotation, module, config_key)
        inputs[key] = InputField(key, config_key, model)
        body.append(f"    {key}: {text if info.is_required() else f'NotRequired[{text}]'}")
        body.append(f"    {_description(info)!r}")
        body.append("")
    rendering.fields[name] = inputs
    return "\n".join(body) + "\n"


def _render_all() -> _Rendering:
    rendering = _Rendering(blocks=[], fields={}, enums={})
    args_doc = ("The stack's settings, as a stack file's `config:` block gives them (gcp:project "
                "and gcp:region as `project` and `region`); docs/configuration.md")
    rendering.blocks.append(_class_lines(rendering, ARGS_TYPE, args_doc, stack_fields(),
                                         StackConfig.__module__))
    return rendering


def _load() -> tuple[types.ModuleType, _Rendering, str]:
    rendering = _render_all()
    # No `from __future__ import annotations` in the rendered source: the analyzer reads
    # annotations as objects (inspect.get_annotations, without eval_str).
    source = ("from enum import Enum\nfrom typing import Any, NotRequired, TypedDict\n\n\n"
              + "\n\n".join(rendering.blocks))
    module = types.ModuleType(TYPES_MODULE, "The SchedulerDedup component's input types, "
                              "rendered from infra/config/ by infra/component_args.py.")
    module.__file__ = _TYPES_FILE
    # mtime None: linecache.checkcache keeps the entry (it has no file to compare with).
    linecache.cache[_TYPES_FILE] = (len(source), None, source.splitlines(True), _TYPES_FILE)
    sys.modules[TYPES_MODULE] = module
    # dont_inherit: not this module's `from __future__ import annotations`.
    exec(compile(source, _TYPES_FILE, "exec", dont_inherit=True), module.__dict__)
    return module, rendering, source


TYPES, _RENDERING, _SOURCE = _load()
SOURCE: Final = _SOURCE
"""The rendered classes' source (what the analyzer reads their descriptions from)."""
INPUTS: Final[Mapping[str, Mapping[str, InputField]]] = _RENDERING.fields
"""Per input type (and `SchedulerDedupArgs`): its fields by Python key."""


def input_type(name: str) -> Any:
    """A rendered class by name (`SchedulerDedupArgs`, `JobSettings`, `Overlap`, ...)."""
    return getattr(TYPES, name)


# --------------------------------------------------------------------------- to the config


def config_values(args: Mapping[str, Any]) -> dict[str, Any]:
    """The component's inputs as the stack config mapping `load_config` validates.

    Every value must be plain and known: the config decides the resources' names and how
    many there are, which Pulumi needs before it can register them, so an Output (another
    resource's attribute, a secret, a value unknown until deployment) is a problem."""
    problems: list[Problem] = []
    values: dict[str, Any] = {}
    top = INPUTS[ARGS_TYPE]
    for key, value in args.items():
        spec = top.get(key)
        if spec is None:
            problems.append(_unknown(key, top))
            continue
        full = spec.config_key if ":" in spec.config_key else kit_key(spec.config_key)
        values[full] = _config_value(value, spec, key, problems)
    if problems:
        raise ConfigError(problems)
    return values


def _unknown(path: str, known: Mapping[str, InputField]) -> Problem:
    import difflib

    name = path.rpartition(".")[2]
    close = difflib.get_close_matches(name, sorted(known), n=1)
    fix = f"did you mean {close[0]}?" if close else f"use one of {', '.join(sorted(known))}"
    return Problem(path, "is not an input of SchedulerDedup", fix)


def _config_value(value: Any, spec: InputField, path: str, problems: list[Problem]) -> Any:
    # An object's or a list's own fields are checked one by one, so the problem names one.
    if _not_plain(value, deep=spec.model is None):
        problems.append(Problem(path, "is an Output (a value known only once resources exist, "
                                "or a secret): the kit's settings must be plain, known values, "
                                "as they decide the resources' names and how many there are",
                                "give the value itself (a literal, or read from your config)"))
        return None
    if isinstance(value, enum.Enum):
        return value.value
    if spec.model is None:
        return value
    if isinstance(value, list | tuple):
        return [_object(item, spec.model, f"{path}[{index}]", problems)
                for index, item in enumerate(value)]
    return _object(value, spec.model, path, problems)


def _object(value: Any, model: type[BaseModel], path: str, problems: list[Problem]) -> Any:
    if _not_plain(value, deep=False) or not isinstance(value, Mapping):
        return _config_value(value, InputField(path, path, None), path, problems)
    known = INPUTS[model.__name__]
    found: dict[str, Any] = {}
    for key, item in value.items():
        spec = known.get(key)
        if spec is None:
            problems.append(_unknown(f"{path}.{key}", known))
            continue
        found[spec.config_key] = _config_value(item, spec, f"{path}.{key}", problems)
    return found


def _not_plain(value: Any, *, deep: bool) -> bool:
    """An Output, a future, or the engine's unknown sentinel (inside it too, if `deep`)."""
    import pulumi

    if isinstance(value, pulumi.Output | Awaitable) or type(value).__name__ == "Unknown":
        return True
    if deep and isinstance(value, Mapping):
        return any(_not_plain(v, deep=True) for v in value.values())
    if deep and isinstance(value, list | tuple):
        return any(_not_plain(v, deep=True) for v in value)
    return False


# --------------------------------------------------------------------------- from the config


def component_args(values: Mapping[str, Any]) -> dict[str, Any]:
    """A stack config mapping (a stack file's `config:` block, or the engine's strings) as
    the component's inputs; keys of the providers' namespaces (gcp:zone, ...) are theirs.
    Scalars are passed as given (`load_config` reads the engine's strings); objects and
    lists given as JSON text are parsed, so their keys can be named."""
    by_key = {spec.config_key if ":" in spec.config_key else kit_key(spec.config_key): spec
              for spec in INPUTS[ARGS_TYPE].values()}
    return {by_key[k].key: _arg(parse_structure(v), by_key[k])
            for k, v in values.items() if k in by_key}


def _arg(value: Any, spec: InputField) -> Any:
    if spec.model is None:
        return value
    if isinstance(value, list | tuple):
        return [_arg_object(item, spec.model) for item in value]
    return _arg_object(value, spec.model)


def _arg_object(value: Any, model: type[BaseModel]) -> Any:
    if not isinstance(value, Mapping):
        return value  # e.g. `retry: none`: load_config reads it as it reads a stack file
    by_key = {spec.config_key: spec for spec in INPUTS[model.__name__].values()}
    # An unknown key keeps its name, so load_config reports it as it would in a stack file.
    return {by_key[k].key if k in by_key else k: _arg(v, by_key[k]) if k in by_key else v
            for k, v in value.items()}

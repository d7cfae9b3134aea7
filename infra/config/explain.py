"""Pydantic's validation errors, read as the kit's problems: each error's location becomes
the full config key (`scheduler-dedup:jobs[1].schedule`), a validator's own `Invalid`
keeps its message and fix, and every other error (missing, unknown key, wrong type, out of
range, pattern) is explained from the field it concerns, with its bounds, choices, `Hint`
and the known keys of a near miss.
"""

from __future__ import annotations

import difflib

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from infra.config.errors import Invalid, Loc, Problem
from infra.config.fields import bounds, choices, hint, model_fields, model_in
from infra.config.names import kit_key
from infra.config.stack import GROUPS, KIT_KEYS, StackConfig


def validation_problems(exc: ValidationError) -> list[Problem]:
    problems: list[Problem] = []
    for error in exc.errors(include_url=False):
        loc: Loc = tuple(error["loc"])
        raised = error.get("ctx", {}).get("error")
        if isinstance(raised, Invalid):
            problems += [Problem(_key(loc + at), msg, fix) for at, msg, fix in raised.problems]
        else:
            problems.append(Problem(_key(loc), *_explain(error, loc)))
    return problems


def _key(loc: Loc) -> str:
    """("jobs", 1, "schedule") -> "scheduler-dedup:jobs[1].schedule"."""
    head, *rest = [part for part in loc if part not in GROUPS]
    key = str(head) if ":" in str(head) else kit_key(str(head))
    return key + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in rest)


def _lookup(loc: Loc) -> tuple[type[BaseModel], FieldInfo | None]:
    """The model that holds the last key of `loc` (or is its value), and that key's field."""
    model: type[BaseModel] = StackConfig
    info: FieldInfo | None = None
    for part in (p for p in loc if isinstance(p, str)):
        info = model_fields(model).get(part)
        if info is None:
            return model, None
        model = model_in(info.annotation) or model
    return model, info


def _explain(error: ErrorDetails, loc: Loc) -> tuple[str, str]:
    """What is wrong and the fix, for one of pydantic's own errors."""
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx", {})
    model, info = _lookup(loc)
    advice, options = hint(info), choices(info)
    use_one_of = f"use one of: {', '.join(options)}" if options else ""
    if kind == "missing":
        return "is not set", advice.unset_fix or advice.fix or use_one_of or "set it"
    if kind == "extra_forbidden":
        parent = _lookup(loc[:-1])[0]
        known = sorted(KIT_KEYS if parent is StackConfig else model_fields(parent))
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        guess = f"did you mean {close[0]!r}? " if close else ""
        return f"is not {getattr(parent, 'setting_of', 'a setting')}", (
            f"{guess}known keys: {', '.join(known)}"
        )
    if kind in ("int_type", "int_parsing"):
        low, high = bounds(info)
        span = "" if low is None and high is None else (
            f" >= {low}" if high is None else f" <= {high}" if low is None else
            f" from {low} to {high}")
        example = info.default if info is not None and isinstance(info.default, int) else (
            low if low is not None else 1)
        return f"{value!r} is not a whole number", f"give an integer{span}, e.g. {example}"
    if kind in ("greater_than_equal", "less_than_equal"):
        low, high = bounds(info)
        span = f">= {low}" if high is None else f"<= {high}" if low is None else (
            f"from {low} to {high}")
        return f"{value} is out of range", f"use a value {span}"
    if kind == "bool_type":
        return f"{value!r} is not a boolean", "use true or false"
    if kind in ("string_pattern_mismatch", "literal_error"):
        return f"{value!r} is not {advice.what}", advice.fix or use_one_of
    if kind == "string_too_long":
        return f"is longer than {ctx['max_length']} characters", advice.fix
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        keys = model_fields(model)
        required = ", ".join(k for k, i in keys.items() if i.is_required())
        optional = ", ".join(k for k, i in keys.items() if not i.is_required())
        listed = f"{required} and optionally {optional}" if required else f"any of {optional}"
        return f"{value!r} is not a mapping", f"give a mapping with {listed}"
    if kind in ("tuple_type", "list_type"):
        return f"{value!r} is not a list", advice.fix
    if kind == "string_type":
        return f"{value!r} is not a string", advice.fix or "give a string value"
    fix = advice.fix or "see docs/configuration.md"
    return f"{value!r} is not valid ({error['msg']})", fix

"""How a setting is declared and read back: `ConfigModel`, the base of every config model
(unknown keys forbidden, frozen, camelCase keys, null as unset); `Int` and `Bool`, which
also read the Pulumi engine's strings; `Hint`, a field's error text and schema extras; and
what the generated schema and the error messages read from a field (`model_fields`, `hint`,
`has_fixed_default`, `choices`, `bounds`, `model_in`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ConfigDict, Strict, model_validator
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

_INT_STRING = re.compile(r"^\s*-?[0-9]+\s*$")


@dataclass(frozen=True)
class Hint:
    """A field's `json_schema_extra`: how its invalid values are reported beyond type and
    bounds ("'<value>' is not <what>. Fix: <fix>"; `unset_fix` when a required one is
    missing), and `default` for one whose unset value follows another setting's."""

    what: str = "valid"
    fix: str = ""
    unset_fix: str = ""
    default: str = ""
    schema: Mapping[str, Any] | None = None
    also: str | None = None
    """A value the field accepts besides its type (`retry: none`)."""

    def __call__(self, schema: dict[str, Any]) -> None:
        """Pydantic's JSON schema hook: a follower's "" default is no value to suggest."""
        if self.default:
            schema.pop("default", None)
        if self.also is not None:  # the field's own type, or that one value
            own = {k: schema.pop(k) for k in ("$ref", "type") if k in schema}
            schema["anyOf"] = [own, {"const": self.also}]
        schema.update(self.schema or {})


def _to_int(raw: Any) -> Any:
    """Engine strings ("600") and whole floats read as integers; anything else as given."""
    integral = isinstance(raw, float) and raw.is_integer()
    return int(raw) if integral or (isinstance(raw, str) and _INT_STRING.match(raw)) else raw


def _to_bool(raw: Any) -> Any:
    """Engine strings "true"/"false" read as booleans (not "yes", "1", ...)."""
    text = raw.strip().lower() if isinstance(raw, str) else None
    return text == "true" if text in ("true", "false") else raw


Int = Annotated[int, Strict(), BeforeValidator(_to_int)]
Bool = Annotated[bool, Strict(), BeforeValidator(_to_bool)]


class ConfigModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel)
    setting_of: ClassVar[str] = "a setting"
    """What an unknown key of this model is not ("is not a job setting")."""

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, raw: Any) -> Any:
        """A key given as null (YAML `key:` with no value) is unset, as if left out."""
        return {k: v for k, v in raw.items() if v is not None} if isinstance(raw, dict) else raw


def model_fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """A model's fields by config key (alias), in declaration order."""
    return {info.alias or name: info for name, info in model.model_fields.items()}


def hint(info: FieldInfo | None) -> Hint:
    extra = info.json_schema_extra if info is not None else None
    return extra if isinstance(extra, Hint) else Hint()


def has_fixed_default(info: FieldInfo) -> bool:
    return not info.is_required() and info.default_factory is None and not hint(info).default


def choices(info: FieldInfo | None) -> tuple[str, ...]:
    """The values of a Literal field."""
    args = get_args(info.annotation) if info is not None else ()
    if type(None) in args:  # `Literal[...] | None`: unset follows a default elsewhere
        args = tuple(v for a in args if a is not type(None) for v in get_args(a))
    return tuple(args) if args and all(isinstance(a, str) for a in args) else ()


def bounds(info: FieldInfo | None) -> tuple[int | None, int | None]:
    """A field's `ge` and `le`."""
    metadata = info.metadata if info is not None else []
    low = [m.ge for m in metadata if hasattr(m, "ge")]
    high = [m.le for m in metadata if hasattr(m, "le")]
    return (low[0] if low else None, high[0] if high else None)


def model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: its type, or one inside it (`X | None`, `tuple[X, ...]`)."""
    if get_origin(annotation) is None and isinstance(annotation, type):
        return annotation if issubclass(annotation, BaseModel) else None
    return next(filter(None, map(model_in, get_args(annotation))), None)

"""How the stack config reports what is wrong: `Problem` (one invalid setting: its full key,
what is wrong, the fix) and `ConfigError`, which carries every problem of a stack at once;
`Invalid`, `invalid` and `ProblemList`, with which the models' validators raise problems
relative to the value they check (`Loc`); and `did_you_mean`, the "did you mean" of a near miss.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One invalid setting: the full config key, what is wrong, and how to fix it."""

    key: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}. Fix: {self.fix}"


class ConfigError(ValueError):
    """The stack config cannot be deployed. Raised before any resource is declared."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        if not problems:
            raise ValueError("ConfigError needs at least one problem")
        self.problems: tuple[Problem, ...] = tuple(problems)
        if len(self.problems) == 1:
            text = f"invalid stack config: {self.problems[0]}"
        else:
            lines = "\n".join(f"  - {p}" for p in self.problems)
            text = f"invalid stack config ({len(self.problems)} problems):\n{lines}"
        super().__init__(text)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(p.key for p in self.problems)


Loc = tuple[str | int, ...]


class Invalid(ValueError):
    """Raised by a validator: its problems, as (key relative to the value, what, fix)."""

    def __init__(self, problems: Sequence[tuple[Loc, str, str]]) -> None:
        super().__init__("; ".join(message for _, message, _ in problems))
        self.problems = tuple(problems)


class ProblemList(list[tuple[Loc, str, str]]):
    def add(self, at: Loc | str, message: str, fix: str) -> None:
        self.append(((at,) if isinstance(at, str) else at, message, fix))

    def raise_any(self) -> None:
        if self:
            raise Invalid(self)


def invalid(message: str, fix: str, at: Loc | str = ()) -> Invalid:
    return Invalid([((at,) if isinstance(at, str) else at, message, fix)])


def did_you_mean(what: str, value: str, known: Sequence[str]) -> str:
    """"did you mean 'X'? " for the closest of `known` (case-insensitive), else ""."""
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(value.lower(), list(by_lower), n=1, cutoff=0.75)
    return f"did you mean {by_lower[close[0]]!r}? " if close else ""

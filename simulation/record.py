"""What one seed's run left behind: the handlers' log lines, the job executions, a trace."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Execution:
    """One start of a job body: `how` it ended (returned, raised, or `running`: killed)."""

    run_id: str
    attempt_id: str
    actor: str
    started: float
    how: str = "running"
    ended: float | None = None


@dataclass
class Line:
    """One log line a handler emitted, at simulated second `at`, by `actor`."""

    at: float
    actor: str
    entry: Mapping[str, Any]


@dataclass
class Recorder:
    lines: list[Line] = field(default_factory=list)
    executions: list[Execution] = field(default_factory=list)
    trace: list[tuple[float, str, str]] = field(default_factory=list)
    # attempt_id (any uuid4 the kit made) -> the actor that made it
    made_by: dict[str, str] = field(default_factory=dict)
    # actor name -> when it ended (answered, gave up, or was killed)
    ended: dict[str, float] = field(default_factory=dict)
    # actor name -> when a commit of it that the store held (stalled) landed late
    late_landings: dict[str, float] = field(default_factory=dict)
    # re-runs operators asked for: (the generation's run_id, when, the backfill's job or
    # None for a `make rerun`)
    requested: list[tuple[str, float, str | None]] = field(default_factory=list)

    def note(self, at: float, actor: str, text: str) -> None:
        self.trace.append((at, actor, text))

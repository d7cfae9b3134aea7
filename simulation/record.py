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


@dataclass(frozen=True)
class CursorState:
    """Of one job's cursor as a tick wrote it: the incidents open in its streaks, and
    those held during a silence (dedup/watchdog/silences.py)."""

    open: frozenset[str]
    held: frozenset[str]


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
    # What the watchdog's ticks saw and wrote (simulation/watch.py), for the silences'
    # invariants: tick actor -> when it began (its `now`); tick actor -> when it read the
    # operator silences (the read's start and end); tick actor -> per job, the incident
    # IDs of the `incident_opened` lines and the (kind, run_id) of the problem lines in
    # the outbox of the cursor it read (lines an earlier tick committed, logged now).
    tick_began: dict[str, float] = field(default_factory=dict)
    silences_read: dict[str, tuple[float, float]] = field(default_factory=dict)
    carried: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    # Each cursor write that landed: (tick actor, when it landed, job -> CursorState).
    cursor_writes: list[tuple[str, float, dict[str, CursorState]]] = field(
        default_factory=list)
    # `make silence` and its removal as they went: (scope, what, first attempt, success)
    # with `what` "put" or "remove"; scope: the job, or "" for the stack.
    silence_ops: list[tuple[str, str, float, float]] = field(default_factory=list)

    def note(self, at: float, actor: str, text: str) -> None:
        self.trace.append((at, actor, text))

"""The store-fault proxy's faults (local_stack.store_faults): their kinds (FaultKind), one
injected (InjectedFault), and a reproducible sequence of them (FaultSchedule, drawn from a
seed, of PlannedFaults) that the proxy can run on its own."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum


class FaultKind(StrEnum):
    STALL_LATE = "stall-late"  # replies held back, then delivered
    STALL_DROP = "stall-drop"  # replies held back, then discarded; connections reset
    OUTAGE = "outage"  # connections reset; new ones closed at once


@dataclass(frozen=True)
class InjectedFault:
    """One fault the proxy injected: `start` is time.monotonic() when it began."""

    kind: FaultKind
    start: float
    duration: float

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass(frozen=True)
class PlannedFault:
    """One step of a schedule: `gap` seconds of health, then `kind` for `duration`."""

    kind: FaultKind
    gap: float
    duration: float


_DEFAULT_WEIGHTS: tuple[tuple[FaultKind, float], ...] = (
    (FaultKind.STALL_LATE, 1.0),
    (FaultKind.STALL_DROP, 1.0),
    (FaultKind.OUTAGE, 1.0),
)


@dataclass(frozen=True)
class FaultSchedule:
    """A reproducible sequence of faults: `random.Random(seed)` picks every kind,
    duration and gap, so a failing run can be replayed with its seed.

    weights: (kind, weight) pairs; a kind left out is never injected.
    duration, gap: (low, high) ranges in seconds, drawn uniformly.
    count: stop after this many faults; None runs until stopped.
    """

    seed: int
    weights: tuple[tuple[FaultKind, float], ...] = _DEFAULT_WEIGHTS
    duration: tuple[float, float] = (0.2, 1.0)
    gap: tuple[float, float] = (0.5, 2.0)
    count: int | None = None

    def __post_init__(self) -> None:
        if not self.weights or any(w < 0 for _, w in self.weights):
            raise ValueError("weights: at least one kind, no negative weight")
        if sum(w for _, w in self.weights) <= 0:
            raise ValueError("weights: at least one kind needs a positive weight")
        for kind, _ in self.weights:
            FaultKind(kind)  # a typo fails here, not minutes into a run
        for name, (low, high) in (("duration", self.duration), ("gap", self.gap)):
            if not 0 <= low <= high:
                raise ValueError(f"{name}: need 0 <= low <= high, got ({low}, {high})")
        if self.duration[1] <= 0:
            raise ValueError("duration: the high end must be positive")
        if self.count is not None and self.count < 0:
            raise ValueError("count must be >= 0")

    def faults(self) -> Iterator[PlannedFault]:
        """The schedule's faults in order (endless when `count` is None). Pure: no timing."""
        rng = random.Random(self.seed)
        kinds = [FaultKind(kind) for kind, _ in self.weights]
        weights = [weight for _, weight in self.weights]
        steps = itertools.count() if self.count is None else range(self.count)
        for _ in steps:
            gap = rng.uniform(*self.gap)
            kind = rng.choices(kinds, weights)[0]
            duration = rng.uniform(*self.duration)
            if duration <= 0:  # only when low == 0 and the draw is exactly 0
                duration = self.duration[1]
            yield PlannedFault(kind, gap, duration)

    def plan(self, n: int) -> list[PlannedFault]:
        """The first `n` faults (fewer if `count` is smaller)."""
        return list(itertools.islice(self.faults(), n))

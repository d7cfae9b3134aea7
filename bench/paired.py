"""Timing verdicts on paired rounds: the kit and the comparator are measured side by side,
round after round, and a timing target is judged on the median of the per-round
kit/comparator ratios, reported with their spread.

Why: the machine's speed drifts during a run (other processes, the emulator's JIT and its
growing data, CPU frequency). A figure pooled over the whole run per handler lets a slow
phase that covers more of one handler's measurements than the other's move the ratio.
A slow phase longer than a round slows both halves of the rounds it covers alike and
cancels in their ratios; the median then ignores the few rounds it splits unevenly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


def abba(pair: int, sides: tuple[T, T]) -> tuple[T, T]:
    """The order of the two measurements of pair number `pair`: as given on even pairs,
    reversed on odd ones, so that neither side always goes first (warm caches, a
    collector's pause queued by the other side) and a linear drift cancels over two pairs."""
    return sides if pair % 2 == 0 else (sides[1], sides[0])


def median(values: Sequence[float]) -> float:
    return quantile(values, 0.5)


def quantile(values: Sequence[float], fraction: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default, statistics'
    "inclusive"): defined for a single value too, as a quick run has one pair."""
    if not values:
        raise ValueError("the quantile of no values")
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction {fraction} is outside 0..1")
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def round_medians(samples: Sequence[float], per_round: int) -> list[float]:
    """The median of each run of `per_round` consecutive samples (the last may be short):
    a handler's figure per round, from samples in the order they were measured."""
    if per_round < 1:
        raise ValueError(f"per_round must be at least 1, not {per_round}")
    return [median(samples[i:i + per_round]) for i in range(0, len(samples), per_round)]


def paired_ratios(kit: Sequence[float], comparator: Sequence[float]) -> list[float]:
    """kit/comparator of each pair, in run order. A pair whose comparator figure is not
    positive (no comparator run completed) has no ratio and is left out."""
    if len(kit) != len(comparator):
        raise ValueError(f"{len(kit)} kit rounds but {len(comparator)} comparator rounds")
    return [k / c for k, c in zip(kit, comparator, strict=True) if c > 0]


@dataclass(frozen=True)
class Spread:
    """The median of the paired ratios and how widely they spread around it."""

    median: float
    q1: float  # lower quartile
    q3: float  # upper quartile
    low: float
    high: float
    pairs: int

    @classmethod
    def of(cls, ratios: Sequence[float]) -> Spread:
        return cls(
            median=median(ratios), q1=quantile(ratios, 0.25), q3=quantile(ratios, 0.75),
            low=min(ratios), high=max(ratios), pairs=len(ratios),
        )


@dataclass(frozen=True)
class Limit:
    """What a timing target asks of the kit/comparator ratio."""

    value: float
    at_most: bool  # True: ratio <= value (a latency); False: ratio >= value (a throughput)

    def met_by(self, ratio: float) -> bool:
        return ratio <= self.value if self.at_most else ratio >= self.value

    def __str__(self) -> str:
        return f"{'<=' if self.at_most else '>='} {self.value:g}"


@dataclass(frozen=True)
class Verdict:
    passed: bool
    spread: Spread | None  # None: not one pair had a ratio
    ratios: tuple[float, ...]


def decide(kit: Sequence[float], comparator: Sequence[float], limit: Limit) -> Verdict:
    """Judge a timing target on paired rounds: `kit[i]` and `comparator[i]` are the two
    handlers' figures of round i. Passes when the median ratio meets the limit; no pairs,
    no pass."""
    ratios = paired_ratios(kit, comparator)
    if not ratios:
        return Verdict(passed=False, spread=None, ratios=())
    spread = Spread.of(ratios)
    return Verdict(passed=limit.met_by(spread.median), spread=spread, ratios=tuple(ratios))

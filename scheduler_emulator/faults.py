"""Fault injection: which scheduled runs and attempts misbehave, reproducibly.

Each fault has a rate (the probability that it strikes a run or an attempt) and a seed.
Whether it strikes is decided from (seed, fault, job, tick, worker, attempt) alone, so a
run is reproducible whatever order threads happen to run in.

Faults the emulator itself applies (they need nothing from the target):
- lost-ack: the target ran and answered 2xx, but the reply never reaches Scheduler, so
  the attempt counts as failed and is retried (per attempt).
- duplicate: one attempt is delivered twice at the same moment (per attempt).
- concurrent: two emulator workers both deliver the same scheduled run, each with its
  own attempts and retries (per run).
- manual: a forced run (`gcloud scheduler jobs run`) between two ticks; it carries the
  *next* scheduled time, as real Scheduler does (per run).
- manual-bare: a forced run that carries no X-CloudScheduler-ScheduleTime header at all.

Faults the target applies when asked through the `X-Emulator-Fault` request header (the
demo's job honours it; the kit's function knows nothing about it):
- slow=<seconds>: the job runs that many real seconds, longer than the attempt deadline,
  so Scheduler gives up and retries while the first attempt still runs (first attempt).
- kill: the function instance is killed mid-job (SIGKILL of its worker process, which
  the server restarts), so the attempt fails with a dropped connection (first attempt).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

FAULT_HEADER = "X-Emulator-Fault"

LOST_ACK = "lost-ack"
SLOW = "slow"
DUPLICATE = "duplicate"
KILL = "kill"
MANUAL = "manual"
MANUAL_BARE = "manual-bare"
CONCURRENT = "concurrent"

FAULT_NAMES = (LOST_ACK, SLOW, DUPLICATE, KILL, MANUAL, MANUAL_BARE, CONCURRENT)
# Faults that only take effect if the target honours X-Emulator-Fault.
TARGET_FAULTS = (SLOW, KILL)

# The demo's default mix: every kind of fault that can make a run execute twice, often
# enough that a short replay shows each of them. (manual-bare is left out: without a
# schedule time there is nothing to dedup on; the function rejects it with 400 by default,
# and Scheduler then retries those 400s for the job's whole retry window.)
DEFAULT_MIX: Mapping[str, float] = {
    LOST_ACK: 0.10,
    SLOW: 0.06,
    DUPLICATE: 0.10,
    KILL: 0.04,
    MANUAL: 0.06,
    CONCURRENT: 0.10,
}


class FaultSpecError(ValueError):
    """A --fault argument that cannot be understood."""


@dataclass(frozen=True)
class Fault:
    name: str
    rate: float
    seed: int

    def __post_init__(self) -> None:
        if self.name not in FAULT_NAMES:
            raise FaultSpecError(
                f"unknown fault {self.name!r}; known faults: {', '.join(FAULT_NAMES)}"
            )
        if not 0.0 <= self.rate <= 1.0:
            raise FaultSpecError(f"fault {self.name}: rate must be in [0, 1], got {self.rate}")


@dataclass(frozen=True)
class FaultPlan:
    """The faults to inject. An empty plan delivers like a healthy Scheduler."""

    faults: tuple[Fault, ...] = ()
    # A slow attempt runs this many attempt deadlines long.
    slow_factor: float = 1.25
    _by_name: dict[str, Fault] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.slow_factor <= 1.0:
            raise FaultSpecError("slow factor must be > 1 (a slow attempt outlives its deadline)")
        by_name: dict[str, Fault] = {}
        for fault in self.faults:
            if fault.name in by_name:
                raise FaultSpecError(f"fault {fault.name} given twice")
            by_name[fault.name] = fault
        object.__setattr__(self, "_by_name", by_name)

    @classmethod
    def from_rates(
        cls, rates: Mapping[str, float], seed: int = 0, slow_factor: float = 1.25
    ) -> FaultPlan:
        return cls(
            tuple(Fault(name, rate, seed) for name, rate in rates.items() if rate > 0),
            slow_factor,
        )

    @classmethod
    def parse(cls, specs: Iterable[str], seed: int = 0, slow_factor: float = 1.25) -> FaultPlan:
        """Parse `name=rate[:seed]` specs, e.g. `lost-ack=0.1` or `kill=0.05:7`."""
        faults = []
        for spec in specs:
            name, sep, value = spec.partition("=")
            if not sep:
                raise FaultSpecError(f"fault {spec!r}: expected name=rate[:seed], e.g. slow=0.1")
            rate_text, _, seed_text = value.partition(":")
            try:
                rate = float(rate_text)
                fault_seed = int(seed_text) if seed_text else seed
            except ValueError as exc:
                raise FaultSpecError(
                    f"fault {spec!r}: rate must be a number and seed an integer"
                ) from exc
            faults.append(Fault(name.strip(), rate, fault_seed))
        return cls(tuple(faults), slow_factor)

    def rate(self, name: str) -> float:
        fault = self._by_name.get(name)
        return fault.rate if fault else 0.0

    def hits(self, name: str, job: str, tick: int, worker: int = 0, attempt: int = 1) -> bool:
        """Does fault `name` strike this job's tick (and worker/attempt)? Deterministic."""
        fault = self._by_name.get(name)
        if fault is None or fault.rate <= 0:
            return False
        if fault.rate >= 1:
            return True
        draw = random.Random(f"{fault.seed}/{name}/{job}/{tick}/{worker}/{attempt}").random()
        return draw < fault.rate

    def describe(self) -> str:
        if not self.faults:
            return "no faults"
        return ", ".join(f"{f.name} {f.rate:.0%}" for f in self.faults)


def fault_header(slow_seconds: float | None = None, kill: bool = False) -> str | None:
    """The X-Emulator-Fault value asking the target to misbehave, or None."""
    parts = []
    if kill:
        parts.append(KILL)
    if slow_seconds is not None:
        parts.append(f"{SLOW}={slow_seconds:.3f}")
    return ",".join(parts) or None

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
- manual: a forced run (`gcloud scheduler jobs run`, "Run now") between two ticks, once
  the scheduled run is over; it carries the *next* scheduled time, as real Scheduler does
  (per run). The function tells it from the scheduled run of that time (its schedule time
  lies in the future) and runs it under its own key.
- manual-overlap: the same forced run, fired while the scheduled run is still being
  delivered: during its first attempt (in flight, possibly a slow one) or during its
  first backoff wait, as a "Run now" pressed at any moment would (per run).
- manual-bare: a forced run that carries no X-CloudScheduler-ScheduleTime header at all.
- missed: Scheduler never delivers the scheduled run at all: no attempt, no retry (per
  run). Nothing dedup can do; the run watchdog (function/dedup/watchdog/verdicts.py) reports it.

Faults the target applies when asked through the `X-Emulator-Fault` request header (the
demo's job honours it; the kit's function knows nothing about it):
- slow=<seconds>: the job runs that many real seconds, longer than the attempt deadline,
  so Scheduler gives up and retries while the first attempt still runs (first attempt).
- kill: the function instance is killed mid-job (SIGKILL of its worker process, which
  the server restarts), so the attempt fails with a dropped connection (first attempt).

Faults of the target's store (first attempt of a scheduled run, like slow and kill). The
emulator cannot cause them, nor ask the target to: it calls the `store_faults` hook it was
given just before it sends the struck attempt, and the hook injects the fault (the demo's
drives a fault proxy between the function and the Firestore emulator; demo.store_faults
has the durations). Without a hook, a plan with a store fault is refused
(StoreFaultsUnsupported), never silently left out:
- store-stall: the store's replies are held back for longer than the function's store
  deadline, then delivered: its writes land, and it learns so too late.
- store-outage: the store is unreachable for a while (connections reset, new ones
  refused), so the function's claim fails.
If both strike one attempt, the outage is injected. A killed attempt gets neither: its
reply is lost anyway.
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
MANUAL_OVERLAP = "manual-overlap"
CONCURRENT = "concurrent"
MISSED = "missed"
STORE_STALL = "store-stall"
STORE_OUTAGE = "store-outage"

FAULT_NAMES = (
    LOST_ACK, SLOW, DUPLICATE, KILL, MANUAL, MANUAL_OVERLAP, MANUAL_BARE, CONCURRENT,
    STORE_STALL, STORE_OUTAGE, MISSED,
)
# Forced runs ("Run now"): each carries the next scheduled time.
FORCED_FAULTS = (MANUAL, MANUAL_OVERLAP)
# Faults that only take effect if the target honours X-Emulator-Fault.
TARGET_FAULTS = (SLOW, KILL)
# Faults that only a store-fault hook can inject (the emulator has no way to).
STORE_FAULTS = (STORE_STALL, STORE_OUTAGE)

# The demo's default mix: every kind of fault that can make a run execute twice, often
# enough that a short replay shows each of them. (manual-bare is left out: without a
# schedule time there is nothing to dedup on; the function rejects it with 400 by default,
# and Scheduler then retries those 400s for the job's whole retry window.) Store faults
# are rarer than the rest: each holds up every delivery in flight and the next store
# fault (one at a time), so each costs the replay a few seconds of real time; a 20-tick
# replay of three jobs still sees three or four of them. Missed runs are rare too: they
# cost nothing, but each is one run fewer that the dedup is tested on; the demo's watchdog
# section must report every one of them (and nothing else).
DEFAULT_MIX: Mapping[str, float] = {
    LOST_ACK: 0.10,
    SLOW: 0.06,
    DUPLICATE: 0.10,
    KILL: 0.04,
    MANUAL: 0.06,
    MANUAL_OVERLAP: 0.06,
    CONCURRENT: 0.10,
    STORE_STALL: 0.03,
    STORE_OUTAGE: 0.03,
    MISSED: 0.04,
}


class FaultSpecError(ValueError):
    """A --fault argument that cannot be understood, or not be applied."""


class StoreFaultsUnsupported(FaultSpecError):
    """A store fault was asked for, but nothing can inject it (no store-fault hook)."""

    def __init__(self, names: Iterable[str]) -> None:
        listed = ", ".join(names)
        super().__init__(
            f"{listed}: the Scheduler emulator cannot reach the target's store, so it "
            "cannot inject store faults against an arbitrary target; run `make demo`, "
            "which puts a fault proxy between the function and the Firestore emulator and "
            "injects them (or pass a store_faults hook to SchedulerEmulator), or leave "
            f"{listed} out of --fault"
        )


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

    @property
    def store_faults(self) -> tuple[str, ...]:
        """The store faults this plan may inject (a hook must apply them)."""
        return tuple(f.name for f in self.faults if f.name in STORE_FAULTS and f.rate > 0)

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
        return self.draw(name, job, tick, worker, attempt) < fault.rate

    def draw(self, name: str, job: str, tick: int, worker: int = 0, attempt: int = 1) -> float:
        """A number in [0, 1) fixed by (seed, name, job, tick, worker, attempt) alone."""
        fault = self._by_name.get(name)
        seed = fault.seed if fault is not None else 0
        return random.Random(f"{seed}/{name}/{job}/{tick}/{worker}/{attempt}").random()

    def overlap_phase(self, job: str, tick: int) -> str:
        """When a manual-overlap forced run is fired: "attempt" (while the scheduled run's
        first attempt is in flight) or "backoff" (during its first backoff wait)."""
        return "attempt" if self.draw(MANUAL_OVERLAP, job, tick, attempt=0) < 0.5 else "backoff"

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

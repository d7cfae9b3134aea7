"""`python -m simulation --seeds N [--first S] [--seed S ...] [--workers W]`: run the seeds,
check the invariants, print each failing seed's trace (the events of its violating runs)
and how to replay it; the last line is `simulation: N schedules, K invariant violations`,
and the exit status 1 on any violation."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from simulation.invariants import Violation, check
from simulation.world import SeedRun, draw_world, run_world


@dataclass(frozen=True)
class SeedReport:
    seed: int
    violations: tuple[Violation, ...]
    text: str  # the report of a failing seed ("" if none)
    steps: int


def run_seed(seed: int) -> SeedReport:
    """One seed: its world run, its invariants checked, a trace if any fails."""
    run = run_world(draw_world(seed))
    violations = tuple(check(run))
    text = report(run, violations) if violations else ""
    return SeedReport(seed, violations, text, run.steps)


def report(run: SeedRun, violations: Sequence[Violation], limit: int = 120) -> str:
    """The violations, and the trace of events touching the violating runs' IDs and
    actors (`limit` lines each), then the replay command."""
    lines = [run.spec.describe()]
    for violation in violations:
        lines.append(f"VIOLATION ({violation.invariant}): {violation.text}")
        marks = {violation.run_id} if violation.run_id else set()
        actors = set(violation.actors)
        attempts = {a for a, actor in run.recorder.made_by.items()
                    if any(actor == x for x in actors)}
        touching = [
            (at, actor, text) for at, actor, text in run.recorder.trace
            if any(mark and mark in text for mark in marks | attempts)
            or actor in actors or any(actor.startswith(a + "/") for a in actors)
            or (actor.startswith("watchdog:") and at >= violation.since)
        ]
        for at, actor, text in touching[:limit]:
            lines.append(f"  {at:10.2f}s {actor}: {text}")
        if len(touching) > limit:
            lines.append(f"  ... {len(touching) - limit} more events")
    lines.append(f"replay: SEED={run.spec.seed} make simulate")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation", description=__doc__)
    parser.add_argument("--seeds", type=int, default=300, help="how many seeds (default 300)")
    parser.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--seed", type=int, action="append", default=None,
                        help="replay this seed (may be repeated)")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes (default: 2, or the CPUs if fewer)")
    args = parser.parse_args(argv)
    seeds = list(args.seed) if args.seed is not None else list(
        range(args.first, args.first + args.seeds))
    started = time.monotonic()
    if args.workers > 1 and len(seeds) > 1:
        with multiprocessing.get_context("fork").Pool(args.workers, maxtasksperchild=200
                                                      ) as pool:
            reports = list(pool.imap(run_seed, seeds, chunksize=4))
    else:
        reports = [run_seed(seed) for seed in seeds]
    violations = 0
    for seed_report in reports:
        if seed_report.violations:
            violations += len(seed_report.violations)
            print(seed_report.text, flush=True)
    took = time.monotonic() - started
    print(f"({len(seeds) / took:.1f} seeds per second, {took:.1f} s)", file=sys.stderr)
    print(f"simulation: {len(seeds)} schedules, {violations} invariant violations")
    return 1 if violations else 0

"""Command line of the Scheduler emulator (python -m scheduler_emulator)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TextIO

from scheduler_emulator.clock import Clock, RealClock
from scheduler_emulator.emulator import SchedulerEmulator
from scheduler_emulator.faults import (
    DEFAULT_MIX,
    FAULT_NAMES,
    STORE_FAULTS,
    FaultPlan,
    FaultSpecError,
)
from scheduler_emulator.records import Progress
from scheduler_emulator.report import (
    format_table,
    job_result_json,
    job_results,
    summarise,
    summary_json,
    totals,
)
from scheduler_emulator.stack import StackError, load_stack, resolve_stack

DEFAULT_STACK = "dev"
DEFAULT_TIME_SCALE = 0.02


def add_replay_arguments(parser: argparse.ArgumentParser, default_ticks: int) -> None:
    """Options shared by the emulator and the demo: stack, jobs, time, faults."""
    parser.add_argument(
        "--stack",
        default=DEFAULT_STACK,
        metavar="NAME|PATH",
        help="the stack with the jobs: a name (staging: Pulumi.staging.yaml) or a stack "
        f"file's path (default {DEFAULT_STACK})",
    )
    parser.add_argument(
        "--job", action="append", default=[], metavar="NAME", help="only this job (repeatable)"
    )
    parser.add_argument(
        "--ticks",
        type=int,
        default=default_ticks,
        help=f"scheduled runs per job (default {default_ticks})",
    )
    parser.add_argument(
        "--start",
        type=_instant,
        default=None,
        help="replay the schedule after this instant (RFC 3339; default: now)",
    )
    parser.add_argument(
        "--dst-fires",
        choices=["twice", "once"],
        default="twice",
        help="a local time the autumn DST change repeats: fire it at both instants "
        "(croniter's reading, the default) or once; the function runs it as the job's "
        "dstRepeated says either way",
    )
    timing = parser.add_mutually_exclusive_group()
    timing.add_argument(
        "--time-scale",
        type=float,
        default=DEFAULT_TIME_SCALE,
        help="simulated time: real seconds per simulated second for deadlines and backoff "
        f"(default {DEFAULT_TIME_SCALE}: a 180 s deadline lasts {180 * DEFAULT_TIME_SCALE:g} s)",
    )
    timing.add_argument(
        "--real-time",
        action="store_true",
        help="wait for the real scheduled times and real deadlines/backoff",
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=None,
        metavar="NAME=RATE[:SEED]",
        help=f"inject a fault (repeatable); names: {', '.join(FAULT_NAMES)} "
        f"({' and '.join(STORE_FAULTS)} need the demo's store-fault proxy: make demo)",
    )
    parser.add_argument("--no-faults", action="store_true", help="deliver like a healthy Scheduler")
    parser.add_argument("--seed", type=int, default=1, help="seed for every fault (default 1)")
    parser.add_argument(
        "--slow-factor",
        type=float,
        default=1.25,
        help="a slow attempt lasts this many attempt deadlines (default 1.25)",
    )
    parser.add_argument(
        "--header-case",
        choices=("canonical", "lower"),
        default="canonical",
        help="header name case: canonical (HTTP/1.1 style) or lower (HTTP/2 style)",
    )
    parser.add_argument(
        "--schedule-time-style",
        choices=("offset", "utc", "mixed"),
        default="offset",
        help="spell X-CloudScheduler-ScheduleTime with the job's own UTC offset, as "
        "Scheduler does (default, e.g. 2026-03-29T03:30:00+02:00), in UTC with Z, or "
        "alternately per attempt (one instant, two spellings)",
    )
    parser.add_argument(
        "--job-name-style",
        choices=("full", "id"),
        default="full",
        help="X-CloudScheduler-JobName: the deployed job's full name "
        "projects/P/locations/L/jobs/<namePrefix>-<name> (default) or its bare ID",
    )
    parser.add_argument(
        "--retries-stop-at-next-run",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="on: a run's retries end at the job's next scheduled time (RetryConfig's API "
        "reference); off (default): they go on until retryCount and maxRetryDuration are "
        "both used up, and a tick that comes meanwhile is skipped (the retry guide)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable report on stdout")


def fault_plan(args: argparse.Namespace, default_mix: bool) -> FaultPlan:
    if args.no_faults:
        return FaultPlan(slow_factor=args.slow_factor)
    if args.fault:
        return FaultPlan.parse(args.fault, seed=args.seed, slow_factor=args.slow_factor)
    if default_mix:
        return FaultPlan.from_rates(DEFAULT_MIX, seed=args.seed, slow_factor=args.slow_factor)
    return FaultPlan(slow_factor=args.slow_factor)


def clock_factory(args: argparse.Namespace) -> Callable[[], Clock] | None:
    if args.real_time:
        return RealClock
    return None


def progress_printer(stream: TextIO | None = None) -> Callable[[Progress], None]:
    """A progress line: rewritten in place on a terminal, every ~10% otherwise."""
    out = stream if stream is not None else sys.stderr
    tty = out.isatty()
    last = [0]

    def show(p: Progress) -> None:
        line = (
            f"[{p.runs_done:>4}/{p.runs_total} runs] {p.deliveries} deliveries, "
            f"{p.acknowledged} acknowledged, {p.exhausted} out of retries"
        )
        if tty:
            end = "\n" if p.runs_done >= p.runs_total else ""
            print(f"\r{line}", end=end, file=out)
        elif p.runs_done >= p.runs_total or p.runs_done - last[0] >= max(p.runs_total // 10, 1):
            last[0] = p.runs_done
            print(line, file=out)
        out.flush()

    return show


def _instant(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an RFC 3339 instant: {text!r}") from exc
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler_emulator",
        description="A local Cloud Scheduler: delivers a stack's jobs to an HTTP target with "
        "Scheduler's headers, attempt deadline and retry rules, and can inject the faults "
        "that make Scheduler deliver a run twice. Exit status 0 if every run was "
        "acknowledged, 1 if some ran out of retries or a job failed every attempt, 2 on a "
        "usage error.",
    )
    parser.add_argument(
        "--target", required=True, help="URL of the function, e.g. http://127.0.0.1:8080/"
    )
    parser.add_argument("--token", default=None, help="bearer token to send (default: a fake one)")
    add_replay_arguments(parser, default_ticks=10)
    args = parser.parse_args(argv)
    try:
        stack = load_stack(resolve_stack(args.stack)).only(args.job)
        faults = fault_plan(args, default_mix=False)
        emulator = SchedulerEmulator(
            args.target,
            stack,
            ticks=args.ticks,
            start=args.start,
            time_scale=args.time_scale,
            clock_factory=clock_factory(args),
            faults=faults,
            token=args.token,
            header_case=args.header_case,
            time_style=args.schedule_time_style,
            job_name_style=args.job_name_style,
            retries_stop_at_next_run=args.retries_stop_at_next_run,
            dst_fires=args.dst_fires,
            progress=None if args.json else progress_printer(),
        )
    except (StackError, FaultSpecError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        result = emulator.run()
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    summaries = summarise(result)
    total = totals(summaries)
    if args.json:
        json.dump(
            {
                "target": args.target,
                "faults": faults.describe(),
                "totals": total,
                "jobs": [job_result_json(r) for r in job_results(summaries)],
                "dst": [note.to_json() for note in result.dst],
                "runs": [summary_json(s) for s in summaries],
            },
            sys.stdout,
            indent=2,
        )
        print()
    else:
        jobs = len(stack.active_jobs)
        print(
            f"replayed {args.ticks} ticks of {jobs} job{'' if jobs == 1 else 's'} against "
            f"{args.target} "
            f"({faults.describe()}) in {result.real_seconds:.1f} s"
        )
        for line in format_table(summaries):
            print(line)
        if result.dst:
            print()
            for note in result.dst:
                print(note.text)
        print()
        print(
            f"{total['acknowledged_runs']} of {total['scheduled_runs']} scheduled runs "
            f"acknowledged, {total['exhausted_runs']} ran out of retries; replies: "
            + ", ".join(f"{k} x{v}" for k, v in total["replies"].items())
        )
    return 0 if total["exhausted_runs"] == 0 and not total["failed_jobs"] else 1

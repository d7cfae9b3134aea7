"""`python -m operator_tools demo` (what `make demo` runs)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from demo.keep import main_keeping_firestore
from demo.options import DEFAULT_TICKS, DEFAULT_TIME_SCALE, DemoOptions
from demo.report import render
from demo.report_json import outcome_json
from demo.run import run_demo
from local_stack import LocalStackError
from scheduler_emulator.cli import add_replay_arguments, fault_plan, progress_printer
from scheduler_emulator.faults import FaultSpecError
from scheduler_emulator.stack import StackError


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def command(argv: Sequence[str]) -> int:
    """`python -m operator_tools demo` (make demo): the demo; with --keep, its Firestore
    emulator outlives the report, for make runs to read (demo.keep.main_keeping_firestore)."""
    return main_keeping_firestore(list(argv), main)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scheduler-dedup demo",
        description="Run the kit's main job locally: the Firestore emulator, the kit's "
        "function served by functions-framework, and the local Cloud Scheduler emulator "
        "replaying the stack's jobs with injected faults. Reports per scheduled run the "
        "deliveries, the replies and how often the job really executed. Exit status 0 "
        "when every run whose retries were not exhausted executed exactly once (and none "
        "twice), 1 otherwise, 2 on a setup or usage error, 130 if interrupted.",
    )
    add_replay_arguments(parser, default_ticks=DEFAULT_TICKS)
    parser.set_defaults(time_scale=DEFAULT_TIME_SCALE)
    parser.add_argument("--workers", type=int, default=4, help="function worker processes")
    parser.add_argument("--threads", type=int, default=8, help="threads per worker process")
    parser.add_argument("--firestore-port", type=int, default=None, help="default: a free port")
    parser.add_argument("--function-port", type=int, default=None, help="default: a free port")
    parser.add_argument(
        "--firestore-host",
        default=None,
        metavar="HOST:PORT",
        help="use this running Firestore emulator instead of starting one",
    )
    parser.add_argument(
        "--only-notable",
        action="store_true",
        help="list only runs with a fault or an unusual outcome",
    )
    parser.add_argument(
        "--logs", type=Path, default=None, metavar="DIR", help="keep the ledger and logs in DIR"
    )
    parser.add_argument(
        "--no-paths", action="store_true",
        help="skip the paths replayed after the main replay (demo/paths.py: DST changes, "
        "forced-run choices, long store stalls)",
    )
    parser.add_argument(
        "--no-proxied-job", action="store_true",
        help="do not add the demo's proxied job (proxied-export, a workflow started through "
        "the idempotent proxy on fake Google APIs) to a stack without proxied jobs",
    )
    parser.add_argument(
        "--no-refused-start", action="store_true",
        help="do not have the fake Google APIs refuse (403) one proxied run's start",
    )
    args = parser.parse_args(argv)
    try:
        options = DemoOptions(
            stack_path=args.stack,
            jobs=tuple(args.job),
            ticks=args.ticks,
            start=args.start,
            time_scale=args.time_scale,
            real_time=args.real_time,
            faults=fault_plan(args, default_mix=True),
            workers=args.workers,
            threads=args.threads,
            firestore_host=args.firestore_host,
            firestore_port=args.firestore_port,
            function_port=args.function_port,
            header_case=args.header_case,
            time_style=args.schedule_time_style,
            job_name_style=args.job_name_style,
            retries_stop_at_next_run=args.retries_stop_at_next_run,
            dst_fires=args.dst_fires,
            paths=not args.no_paths,
            proxied_job=not args.no_proxied_job,
            refuse_proxied_run=0 if args.no_refused_start else DemoOptions.refuse_proxied_run,
            logs_dir=args.logs,
        )
    except FaultSpecError as exc:
        parser.error(str(exc))

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    # Ctrl-C stops it even when started with SIGINT ignored (a background job of a
    # non-interactive shell: Python then keeps SIG_IGN instead of raising KeyboardInterrupt).
    signal.signal(signal.SIGINT, _terminate)
    try:
        outcome = run_demo(options, status=log, progress=progress_printer(sys.stderr))
    except (StackError, LocalStackError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "\ninterrupted: stopped the function server and the Firestore emulator", file=sys.stderr
        )
        return 130
    if args.json:
        json.dump(outcome_json(outcome), sys.stdout, indent=2)
        print()
    else:
        print("\n".join(render(outcome, show_all=not args.only_notable)))
    return 0 if outcome.ok else 1

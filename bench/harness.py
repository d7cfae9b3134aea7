"""`python -m bench`: start one Firestore emulator, run every scenario for both handlers,
print the table and the targets, write bench/results/latest.json and latency.png.
`python -m bench --scale` (make bench BENCH_ARGS=--scale): the kit at Scheduler's quota
instead (bench/scale.py), written to bench/results/scale.json."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench import report as rep
from bench import scale
from bench.scenarios import Bench, Config, workdir
from local_stack import FirestoreEmulator, LocalStackError
from local_stack.deliveries import PROJECT

RESULTS_DIR = Path(__file__).resolve().parent / "results"
_ENV_KEYS = ("FIRESTORE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT", "TEST_LEDGER")


@contextlib.contextmanager
def _emulator(host: str | None) -> Iterator[str]:
    """The given emulator, or one started (and stopped) here."""
    if host:
        yield host
        return
    with FirestoreEmulator() as emulator:
        yield emulator.host


@contextlib.contextmanager
def _environment(host: str, project: str) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in _ENV_KEYS}
    os.environ["FIRESTORE_EMULATOR_HOST"] = host
    os.environ["GOOGLE_CLOUD_PROJECT"] = project
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_benchmark(
    *, quick: bool = False, out_dir: Path = RESULTS_DIR, emulator_host: str | None = None
) -> dict[str, Any]:
    """Run everything; write latest.json and latency.png into out_dir; return the report."""
    config = Config.quick() if quick else Config()
    started = time.perf_counter()
    with _emulator(emulator_host) as host, _environment(host, PROJECT), workdir() as tmp, \
            Bench(config, tmp) as bench:
        results = bench.run_all()
    report = rep.build_report(results, config, quick)
    report["timings_s"]["total"] = round(time.perf_counter() - started, 2)
    rep.write_json(report, out_dir / "latest.json")
    rep.write_chart(report, out_dir / "latency.png")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="The kit's dedup protocol against the textbook transactional handler.",
    )
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: few repetitions, figures not meaningful")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 on a missed timing target too (default: only on a "
                             "missed exact target or an anomaly)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR,
                        help=f"where latest.json and latency.png go (default {RESULTS_DIR})")
    parser.add_argument("--emulator-host", default=None,
                        help="use this running Firestore emulator (HOST:PORT) instead of "
                             "starting one")
    parser.add_argument("--scale", action="store_true",
                        help="instead of the protocol scenarios: plan, policy check and "
                             "one watchdog tick for stacks of --scale-jobs jobs")
    parser.add_argument("--scale-jobs", default=",".join(map(str, scale.SCALES)),
                        help="comma-separated stack sizes for --scale (default "
                             "%(default)s; the first is the comparator)")
    args = parser.parse_args(argv)
    if args.scale:
        sizes = [int(n) for n in args.scale_jobs.split(",") if n.strip()]
        return run_scale_benchmark(sizes, args.out, args.emulator_host, args.strict)

    try:
        report = run_benchmark(quick=args.quick, out_dir=args.out,
                               emulator_host=args.emulator_host)
    except LocalStackError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    print()
    print(rep.table(report))
    print()
    print("Latencies are measured against the Firestore emulator on this machine: they rank "
          "the two protocols;\nproduction Firestore latencies differ. RPC counts are exact.")
    for name, causes in report["details"]["burst.failure_details"].items():
        for cause, count in causes.items():
            print(f"{name} burst 5xx x{count}: {cause}")
    print()
    print("targets:" + (" (quick run: too few repetitions to mean much)" if args.quick else ""))
    print("  (a timing target is judged on the median kit/comparator ratio of rounds run side "
          "by side, so drift\n  during the run cannot flip it; IQR and range show how widely "
          "those ratios spread)")
    print(rep.verdict_lines(report))
    print()
    print(f"wrote {args.out / 'latest.json'} and {args.out / 'latency.png'} "
          f"in {report['timings_s']['total']:.0f} s")
    code = rep.exit_code(report, args.strict)
    if code:
        print("bench: FAILED (a missed exact target or an anomaly; with --strict, any miss)")
    return code


def run_scale_benchmark(
    sizes: Sequence[int], out_dir: Path, emulator_host: str | None, strict: bool
) -> int:
    """The --scale scenario: print its table, write scale.json; with --strict, exit 1 on a
    missed target."""
    try:
        with _emulator(emulator_host) as host, _environment(host, PROJECT), \
                tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
            rows = scale.run_scale(sizes, Path(tmp), PROJECT, "europe-west1")
    except LocalStackError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    table = scale.scale_table(rows)
    print()
    print(table)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "scale.json").write_text(
        json.dumps([dataclasses.asdict(row) for row in rows], indent=2) + "\n")
    print(f"\nwrote {out_dir / 'scale.json'}")
    return 1 if strict and "MISSED" in table else 0

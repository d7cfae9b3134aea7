"""The local stack, end to end: Firestore emulator + served function + Scheduler emulator.

`run_demo(options)` is what `make demo` runs and what the end-to-end tests call: it
reads the stack's runtimes and their local secret values (demo.local_runtimes: a missing
one stops it here, before anything starts), starts (or reuses) the Firestore emulator,
serves the kit's function and each runtime's with functions-framework behind a
store-fault proxy (the functions' only way to their store),
replays the stack's jobs through the Scheduler emulator with the chosen faults, and
counts, from the demo job's ledger, how often each run's job logic really executed.
Process management is `local_stack` (shared with the tests and the benchmark): every
child runs in its own process group and is stopped with it.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from demo.extra_run import run_extra_run
from demo.function_log import save_log
from demo.ledger import LedgerCounts
from demo.local_function import LocalFunction, watch_store_settings
from demo.local_runtimes import local_runtimes, secret_files_written, team_code_warning
from demo.options import DemoOptions
from demo.outcome import DemoOutcome
from demo.overlap import run_overlap_paths
from demo.paths import run_paths
from demo.proxied import replay_proxied_jobs, with_proxied_job
from demo.replay import replay
from demo.silence import run_silence
from demo.store_faults import store_timing
from demo.watch import with_flaky_job
from local_stack import FirestoreEmulator
from scheduler_emulator.records import EmulatorResult, Progress
from scheduler_emulator.report import totals
from scheduler_emulator.stack import Stack, load_stack, resolve_stack


@contextlib.contextmanager
def _firestore(options: DemoOptions, log: Callable[[str], None]) -> Iterator[str]:
    if options.firestore_host:
        yield options.firestore_host
        return
    log("starting the Firestore emulator (gcloud emulators firestore start) ...")
    emulator = FirestoreEmulator(port=options.firestore_port)
    try:
        emulator.start()
        yield emulator.host
    finally:
        if options.logs_dir is not None:
            save_log(options.logs_dir / "firestore-emulator.log", emulator.log_text)
        emulator.stop()


def unserved_outcome(
    stack: Stack, options: DemoOptions, firestore_host: str, scale: float
) -> DemoOutcome:
    """The outcome of a replay with no job for the dedup function (not served): empty."""
    result = EmulatorResult(
        runs=[], target_url="", ticks=options.ticks,
        started=options.start or datetime.now(UTC), real_seconds=0.0,
    )
    return DemoOutcome(
        stack=stack, options=replace(options, stack=None), result=result, summaries=[],
        totals=totals([]), ledger=LedgerCounts(), function_url="",
        firestore_host=firestore_host, workers_replaced=0, real_seconds=0.0,
        timing=store_timing(stack, scale, False), store_host="", store_faults=[],
        store_summary="", function_outcomes=Counter(),
    )


def watch_scenes(function: LocalFunction, stack: Stack, outcome: DemoOutcome) -> None:
    """After the watchdog and the backfill: a silence (demo.silence), then an extra run
    (demo.extra_run), each on a job of its own where the stack has enough."""
    assert outcome.watch is not None
    settings = watch_store_settings(function, stack)
    grace = outcome.watch.grace_seconds
    backfilled = [outcome.backfill.job] if outcome.backfill is not None else []
    outcome.silence = run_silence(function, stack, outcome.summaries, settings, grace,
                                  avoid=backfilled)
    silence = outcome.silence
    silenced = [silence.job] if silence is not None else [""]
    ticked = {silence.job: silence.again.now} if silence and silence.again else {}
    outcome.extra_run = run_extra_run(function, stack, outcome.summaries, settings, grace,
                                      avoid=[*silenced, *backfilled], ticked=ticked)


def nothing_to_run(stack: Stack) -> str | None:
    """Why none of `stack`'s own jobs (the demo's flaky job aside) would run locally, or
    None: a replay of nothing must not pass."""
    own = [*stack.jobs, *stack.proxied_jobs]
    if any(not job.paused for job in own):
        return None
    if not own:
        return f"nothing to run locally: no job of {stack.source or 'the stack'} was chosen"
    return (f"nothing to run locally: every job of {stack.source or 'the stack'} is paused ("
            + ", ".join(job.name for job in own) + ")")


def run_demo(
    options: DemoOptions,
    *,
    status: Callable[[str], None] = lambda line: None,
    progress: Callable[[Progress], None] | None = None,
) -> DemoOutcome:
    """Run the whole local stack once; raises local_stack.LocalStackError on setup."""
    started = time.monotonic()

    def log(line: str) -> None:
        status(f"[{time.monotonic() - started:5.1f}s] {line}")

    stack = options.stack or load_stack(resolve_stack(options.stack_path))
    own = {job.name for job in (*stack.jobs, *stack.proxied_jobs)}
    if options.flaky_job:
        stack = with_flaky_job(stack)
    if options.proxied_job:
        stack = with_proxied_job(stack)
    stack = stack.only(list(options.jobs))
    if (warning := team_code_warning(stack)) is not None:
        log(warning)
    # Every runtime's secret values, checked before anything starts (LocalSecretsError).
    runtimes = local_runtimes(stack)
    idle = nothing_to_run(replace(
        stack, jobs=tuple(j for j in stack.jobs if j.name in own),
        proxied_jobs=tuple(j for j in stack.proxied_jobs if j.name in own)))
    scale = 1.0 if options.real_time else options.time_scale
    workdir = Path(tempfile.mkdtemp(prefix="scheduler-demo-"))
    ledger = (options.logs_dir or workdir) / "ledger.jsonl"
    ledger.parent.mkdir(parents=True, exist_ok=True)
    ledger.unlink(missing_ok=True)
    # The dedup function is served for the stack's jobs that run in it, and the paths.
    serve_function = bool(stack.active_jobs) or options.paths
    try:
        with secret_files_written(runtimes), _firestore(options, log) as firestore_host:
            function = None
            if serve_function:
                log(
                    f"Firestore emulator on {firestore_host}; serving the function: "
                    f"functions-framework, {options.workers} worker processes x "
                    f"{options.threads} threads, and warming it up ..."
                )
                function = LocalFunction(
                    stack,
                    firestore_host,
                    scale=scale,
                    ledger=ledger,
                    workers=options.workers,
                    threads=options.threads,
                    port=options.function_port,
                    collection=options.collection,
                    missing_schedule_time=options.missing_schedule_time,
                    work_seconds=options.work_seconds,
                    store_faults=bool(options.faults.store_faults),
                    runtimes=runtimes,
                )
            try:
                if function is not None:
                    function.start()
                    log(
                        f"function serving on {function.url}, reaching its store through "
                        f"the store-fault proxy on {function.store_host}"
                    )
                    for name, url in function.runtime_urls.items():
                        log(f"runtime {name}: its own function serving on {url}, same "
                            "store path")
                    jobs = len(stack.active_jobs)
                    log(
                        f"replaying {options.ticks} scheduled runs of {jobs} "
                        f"job{'' if jobs == 1 else 's'} ({options.faults.describe()}) ..."
                    )
                    outcome = replay(function, stack, options, progress=progress)
                    if outcome.watch is not None:
                        log("replay finished; a silence, then an extra run, each judged by "
                            "the watchdog ...")
                        watch_scenes(function, stack, outcome)
                else:
                    log(f"Firestore emulator on {firestore_host}; no job of the stack runs "
                        "in the dedup function: not serving it")
                    outcome = unserved_outcome(stack, options, firestore_host, scale)
                outcome.nothing_to_run = idle
                outcome.runtimes = {r.name: (r, function.runtime_urls.get(r.name, ""))
                                    for r in runtimes} if function is not None else {}
                if stack.active_proxied_jobs and not outcome.result.stopped_early:
                    outcome.proxied = replay_proxied_jobs(
                        stack, options, firestore_host, outcome.timing, workdir, log,
                        progress)
                if function is not None and options.paths and not outcome.result.stopped_early:
                    log("replay finished; replaying the paths (DST changes, forced-run "
                        "choices, long store stalls) ...")
                    outcome.paths = run_paths(function, stack, options)
                    outcome.overlap = run_overlap_paths(function.url, stack, function.ledger)
                log("replay finished; stopping everything ...")
            finally:
                if function is not None:
                    if options.logs_dir is not None:
                        for name, text in function.log_texts().items():
                            save_log(options.logs_dir / f"{name}.log", text)
                    function.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    outcome.real_seconds = time.monotonic() - started
    return outcome

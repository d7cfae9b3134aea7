"""One replay of a stack's jobs through the Scheduler emulator against a served function
(LocalFunction), counting, from the demo job's ledger, how often each run's job logic
really executed; then the watchdog and the backfill over its window."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from demo.backfill import run_backfill
from demo.function_log import logged_errors, logged_outcomes
from demo.ledger import count
from demo.local_function import LocalFunction, watch_store_settings
from demo.options import DemoOptions
from demo.outcome import DemoOutcome
from demo.store_faults import mark_exposed
from demo.watch import run_watchdog
from scheduler_emulator.clock import RealClock
from scheduler_emulator.emulator import SchedulerEmulator
from scheduler_emulator.faults import STORE_OUTAGE
from scheduler_emulator.oidc import scheduler_token
from scheduler_emulator.records import DEADLINE_EXCEEDED, EmulatorResult, Progress
from scheduler_emulator.report import job_results, summarise, totals
from scheduler_emulator.stack import Stack

# After the replay, how long (real seconds) the demo waits at most for job logic that
# Scheduler hung up on at the deadline to end, on top of the longest slow attempt.
SETTLE_SECONDS = 10.0


def replay(
    function: LocalFunction,
    stack: Stack,
    options: DemoOptions,
    *,
    progress: Callable[[Progress], None] | None = None,
) -> DemoOutcome:
    """Replay `stack`'s jobs against a running function; count executions in its ledger."""
    if options.faults.store_faults and not function.timing.sized_for_faults:
        raise ValueError(
            f"{', '.join(options.faults.store_faults)}: this function's lease "
            f"({function.timing.lease:g} s) is not sized for store faults; serve it with "
            "LocalFunction(..., store_faults=True)"
        )
    started = time.monotonic()
    workers_before = function.worker_pids()
    store_faults = function.store_faults()
    emulator = SchedulerEmulator(
        function.url,
        stack,
        # A runtime's jobs go to its own function, served next to the dedup function.
        runtime_urls=function.runtime_urls,
        # The identity the served function admits (DEDUP_ALLOWED_CALLERS): its stack's
        # invoker account, as the deployed jobs' OIDC tokens carry it.
        token=scheduler_token(function.url, function.stack.invoker_email),
        ticks=options.ticks,
        start=options.start,
        time_scale=function.scale,
        clock_factory=RealClock if options.real_time else None,
        faults=options.faults,
        header_case=options.header_case,
        time_style=options.time_style,
        job_name_style=options.job_name_style,
        retries_stop_at_next_run=options.retries_stop_at_next_run,
        dst_fires=options.dst_fires,
        trace_deliveries=True,
        progress=progress,
        store_faults=store_faults,
    )
    try:
        result = emulator.run()
    except BaseException:
        emulator.stop()
        store_faults.close()
        raise
    names = {job.job_id: job.name for job in stack.jobs}
    settle_for_hung_up_jobs(function, stack, result, names)
    workers_after = function.worker_pids()
    counts = count(function.ledger, project=stack.project, job_names=names)
    summaries = summarise(result, counts.executions, counts.starts, counts.unscheduled)
    errors = logged_errors(function.log_text, stack.project, names)
    injected = store_faults.records
    mark_exposed(summaries, injected, function.timing)
    watch, backfilled = None, None
    if options.watchdog and not result.stopped_early:
        settings = watch_store_settings(function, stack)
        watch = run_watchdog(
            stack, summaries, settings, function.firestore_host, result.started,
            client_project=function.stack.project,
            function_url=function.url, ledger=function.ledger,
            lease_seconds=function.timing.lease, runtime_urls=function.runtime_urls,
        )
        backfilled = run_backfill(
            stack, summaries, settings, function.firestore_host, watch.grace_seconds,
            function_url=function.url, ledger=function.ledger,
            client_project=function.stack.project, runtime_urls=function.runtime_urls,
        )
    return DemoOutcome(
        stack=stack,
        options=replace(options, stack=None),
        result=result,
        summaries=summaries,
        totals=totals(summaries, errors),
        ledger=counts,
        function_url=function.url,
        firestore_host=function.firestore_host,
        workers_replaced=len(workers_after - workers_before),
        real_seconds=time.monotonic() - started,
        timing=function.timing,
        store_host=function.store_host,
        store_faults=injected,
        store_summary=function.proxy.summary(),
        function_outcomes=logged_outcomes(function.log_text, stack.project),
        watch=watch,
        backfill=backfilled,
        jobs=job_results(summaries, errors),
    )


def settle_for_hung_up_jobs(
    function: LocalFunction, stack: Stack, result: EmulatorResult, names: dict[str, str]
) -> None:
    """Wait (bounded) until the job logic of every attempt Scheduler hung up on has ended.

    At the deadline Scheduler closes the connection, but the function's job goes on (a
    slow attempt, or one held up by a store fault) and may still execute: executions are
    counted once every job logic start in the ledger has its end (or its process is gone:
    a killed instance), and the function has logged every delivery, or has logged nothing
    for longer than a store fault can hold a request (a killed instance never logs its
    requests in flight)."""
    hung_up = [
        d for run in result.runs for d in run.deliveries if d.error == DEADLINE_EXCEEDED
    ]
    if not hung_up:
        return
    # Deliveries the function logs under this project: all but those it refused (400,
    # 403: logged without one) and those whose connection dropped (a killed instance).
    expected = sum(
        1
        for run in result.runs
        for d in run.deliveries
        if d.error == DEADLINE_EXCEEDED or (d.status is not None and d.status not in (400, 403))
    )
    timing = function.timing
    quiet_for = max(timing.stall, timing.away(STORE_OUTAGE), timing.store_timeout) + 0.5
    slowest = max((d.real_seconds for d in hung_up), default=0.0)
    limit = time.monotonic() + SETTLE_SECONDS + slowest
    logged, quiet_since = -1, time.monotonic()
    while time.monotonic() < limit:
        alive = function.worker_pids()
        counts = count(function.ledger, project=stack.project, job_names=names)
        running = any(n > 0 and pid in alive for pid, n in counts.open_starts.items())
        now_logged = sum(logged_outcomes(function.log_text, stack.project).values())
        if now_logged != logged:
            logged, quiet_since = now_logged, time.monotonic()
        quiet = time.monotonic() - quiet_since >= quiet_for
        if not running and (logged >= expected or quiet):
            return
        time.sleep(0.05)

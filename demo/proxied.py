"""The stack's proxied jobs, replayed against the idempotent proxy (demo.local_proxy):
each run's executions are the starts the fake Google APIs received for it, by the run ID
in the proxy's token; the demo adds a proxied job (PROXIED_JOB) to a stack without one."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from dedup.keys import RunKey
from dedup.store import RunStatus
from dedup.store.firestore import FirestoreRunStore
from demo.function_log import logged_errors, logged_outcomes, save_log
from demo.local_proxy import PROXY_TARGET, LocalProxy
from demo.options import DemoOptions
from demo.outcome import ProxiedOutcome, RefusedRun
from demo.record_stores import emulator_env
from demo.replay import SETTLE_SECONDS
from demo.store_faults import StoreTiming
from infra.config import JobSettings
from scheduler_emulator.clock import RealClock
from scheduler_emulator.emulator import SchedulerEmulator
from scheduler_emulator.faults import STORE_FAULTS, TARGET_FAULTS, FaultPlan
from scheduler_emulator.oidc import scheduler_token
from scheduler_emulator.records import DEADLINE_EXCEEDED, EmulatorResult, Progress
from scheduler_emulator.report import RunSummary, job_results, summarise, totals
from scheduler_emulator.stack import Job, Stack, job_from_settings

# The proxied replay injects the faults of Scheduler's side only: nothing in the proxy
# honours X-Emulator-Fault (slow, kill), and its store is reached directly (no store faults).
PROXY_SKIPPED_FAULTS = (*TARGET_FAULTS, *STORE_FAULTS)
# The demo's proxied job, added to a stack that has none (like demo.watch's flaky job):
# never deployed; declared like a stack file's job, its workflow in the stack's project.
PROXIED_JOB = "proxied-export"


def proxied_job(stack: Stack) -> Job:
    """The demo's proxied job, as `stack` would deploy it: it starts a workflow."""
    settings = JobSettings.model_validate({
        "name": PROXIED_JOB,
        "schedule": "15 * * * *",
        "timeZone": "Etc/UTC",
        "attemptDeadlineSeconds": 60,
        "retry": {"retryCount": 3, "minBackoffSeconds": 10, "maxBackoffSeconds": 40,
                  "maxDoublings": 2},
        "body": {"export": "hourly"},
        "proxy": {"target": "workflow", "resource": f"projects/{stack.project}/locations/"
                  f"{stack.region}/workflows/demo-export"},
    })
    return job_from_settings(
        settings, project=stack.project, region=stack.region, name_prefix=stack.name_prefix)


def with_proxied_job(stack: Stack) -> Stack:
    """The stack plus the demo's proxied job, unless it has proxied jobs (or a job of that
    name) already."""
    if stack.proxied_jobs or any(job.name == PROXIED_JOB for job in stack.jobs):
        return stack
    return replace(stack, proxied_jobs=(proxied_job(stack),))


def proxied_faults(plan: FaultPlan) -> FaultPlan:
    """The plan without the faults a proxied run cannot be given (PROXY_SKIPPED_FAULTS)."""
    return replace(plan, faults=tuple(
        f for f in plan.faults if f.name not in PROXY_SKIPPED_FAULTS))


def proxied_run_id(stack: Stack, job: Job, summary: RunSummary) -> str | None:
    """The run ID the proxy keys `summary`'s run by (what its token carries)."""
    if summary.schedule_time is None:
        return None
    key = RunKey(stack.project, stack.region, job.job_id, summary.schedule_time,
                 forced=summary.forced)
    return key.run_id


def replay_proxied(
    proxy: LocalProxy,
    stack: Stack,
    options: DemoOptions,
    *,
    progress: Callable[[Progress], None] | None = None,
) -> ProxiedOutcome:
    """Replay `stack`'s proxied jobs against the served proxy; count, per run, the starts
    the fake Google APIs received for it (by the run ID in the token)."""
    started = time.monotonic()
    faults = proxied_faults(options.faults)
    jobs = stack.active_proxied_jobs
    emulator = SchedulerEmulator(
        proxy.url, stack, jobs=jobs,
        token=scheduler_token(proxy.url, stack.invoker_email),
        ticks=options.ticks, start=options.start, time_scale=proxy.scale,
        clock_factory=RealClock if options.real_time else None, faults=faults,
        header_case=options.header_case, time_style=options.time_style,
        job_name_style=options.job_name_style,
        retries_stop_at_next_run=options.retries_stop_at_next_run,
        dst_fires=options.dst_fires, trace_deliveries=True, progress=progress,
    )
    try:
        result = emulator.run()
    except BaseException:
        emulator.stop()
        raise
    names = {job.job_id: job.name for job in jobs}
    _settle_proxy(proxy, result)
    summaries = summarise(result)
    by_name = {job.name: job for job in jobs}
    run_ids: dict[str, RunSummary] = {}
    for s in summaries:
        run_id = proxied_run_id(stack, by_name[s.job], s)
        if run_id is not None:
            run_ids[run_id] = s
    starts = proxy.apis.starts_per_run()
    for s in summaries:
        s.executions = s.starts = 0 if s.scheduled else None
    for run_id, n in starts.items():
        found = run_ids.get(run_id)
        if found is not None:
            found.executions = found.starts = n
    refused = None
    for run_id, behaviour in proxy.apis.struck_runs().items():
        found = run_ids.get(run_id)
        if found is None:
            continue
        found.refused = behaviour.status
        record, error = _proxy_record(proxy, run_id)
        refused = RefusedRun(found.job, found.schedule_time, found.forced, behaviour.status,
                             record, error)
    errors = logged_errors(proxy.log_text, stack.project, names)
    return ProxiedOutcome(
        result=result, summaries=summaries, totals=totals(summaries, errors),
        jobs=job_results(summaries, errors), proxy_url=proxy.url, apis_url=proxy.apis.url,
        faults=faults, outcomes=logged_outcomes(proxy.log_text, stack.project),
        skipped_faults=tuple(f.name for f in options.faults.faults
                             if f.name in PROXY_SKIPPED_FAULTS and f.rate > 0),
        unattributed_starts=sum(n for run_id, n in starts.items() if run_id not in run_ids),
        refused=refused, real_seconds=time.monotonic() - started,
    )


def _settle_proxy(proxy: LocalProxy, result: EmulatorResult) -> None:
    """Wait (bounded) until the proxy has logged every delivery it got: one Scheduler hung
    up on may still be starting its execution."""
    expected = sum(
        1 for run in result.runs for d in run.deliveries
        if d.error == DEADLINE_EXCEEDED or (d.status is not None and d.status not in (400, 403))
    )
    limit = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < limit:
        if sum(logged_outcomes(proxy.log_text, proxy.stack.project).values()) >= expected:
            return
        time.sleep(0.05)


def _proxy_record(proxy: LocalProxy, run_id: str) -> tuple[str, str | None]:
    """The proxy's record of a run, as 'failed (permanent)', 'completed', 'no record'."""
    with emulator_env(proxy.firestore_host):
        from google.cloud import firestore

        client = firestore.Client(project=proxy.stack.project, database=proxy.database)
        stored = FirestoreRunStore(client, proxy.collection, 10.0).get(run_id)
    if stored is None:
        return "no record", None
    record = stored.record
    text = str(record.status.value if isinstance(record.status, RunStatus) else record.status)
    if record.permanent:
        text += " (permanent)"
    return text, record.error


def replay_proxied_jobs(
    stack: Stack,
    options: DemoOptions,
    firestore_host: str,
    timing: StoreTiming,
    workdir: Path,
    log: Callable[[str], None],
    progress: Callable[[Progress], None] | None,
) -> ProxiedOutcome:
    """Serve the proxy on fake Google APIs and replay the stack's proxied jobs."""
    jobs = len(stack.active_proxied_jobs)
    log(f"serving the idempotent proxy (functions-framework, target {PROXY_TARGET}) "
        "against fake Google APIs ...")
    proxy = LocalProxy(
        stack, firestore_host, scale=1.0 if options.real_time else options.time_scale,
        timing=timing, workdir=workdir, workers=2, threads=options.threads,
        collection=options.collection, refuse=options.refuse_proxied_run,
    )
    try:
        proxy.start()
        log(f"proxy serving on {proxy.url}, fake Google APIs on {proxy.apis.url}; replaying "
            f"{options.ticks} scheduled runs of {jobs} proxied job{'' if jobs == 1 else 's'} "
            f"({proxied_faults(options.faults).describe()}) ...")
        return replay_proxied(proxy, stack, options, progress=progress)
    finally:
        if options.logs_dir is not None:
            save_log(options.logs_dir / "proxy.log", proxy.log_text)
        proxy.stop()

"""The local stack, end to end: Firestore emulator + served function + Scheduler emulator.

`run_demo(options)` is what `make demo` runs and what the end-to-end tests call: it
starts (or reuses) the Firestore emulator, serves the kit's function with
functions-framework behind a store-fault proxy (the function's only way to its store),
replays the stack's jobs through the Scheduler emulator with the chosen faults, and
counts, from the demo job's ledger, how often each run's job logic really executed.
Process management is `local_stack` (shared with the tests and the benchmark): every
child runs in its own process group and is stopped with it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import os
import secrets
import shutil
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dedup.keys import RunKey
from dedup.protocol import Outcome
from dedup.proxy.tokens import TOKEN_SECRET_ENV
from dedup.settings import Settings
from dedup.store import RunStatus
from dedup.store.firestore import FirestoreRunStore
from demo.backfill import BackfillReport, run_backfill
from demo.job_wrapper import OTHER_JOBS
from demo.ledger import LedgerCounts, count
from demo.overlap import OverlapResult, run_overlap_paths
from demo.paths import PathResult, run_paths
from demo.store_faults import (
    StoreFaultInjector,
    StoreFaultRecord,
    StoreTiming,
    mark_exposed,
    store_timing,
)
from demo.watch import (
    WatchReport,
    _emulator_env,
    run_watchdog,
    watchdog_caller,
    with_flaky_job,
)
from infra.config import JobSettings, proxy_database_of
from local_stack import (
    FirestoreEmulator,
    FunctionServer,
    LocalStackError,
    StoreFaultProxy,
    free_port,
)
from local_stack.deliveries import scheduler_headers
from local_stack.fake_google_apis import Behaviour, FakeGoogleApis, service_account_file
from local_stack.processes import REPO_ROOT
from local_stack.tables import write_job_tables
from scheduler_emulator.clock import RealClock
from scheduler_emulator.emulator import (
    DEADLINE_EXCEEDED,
    DstFires,
    EmulatorResult,
    HeaderCase,
    JobNameStyle,
    Progress,
    SchedulerEmulator,
    TimeStyle,
    format_schedule_time,
)
from scheduler_emulator.faults import (
    DEFAULT_MIX,
    STORE_FAULTS,
    STORE_OUTAGE,
    TARGET_FAULTS,
    FaultPlan,
)
from scheduler_emulator.oidc import scheduler_token
from scheduler_emulator.report import JobResult, RunSummary, job_results, summarise, totals
from scheduler_emulator.stack import Job, Stack, job_from_settings, load_stack, resolve_stack

DEFAULT_TICKS = 20
# 1 s of schedule time = 20 ms: the dev stack's shortest deadline (30 s) lasts 0.6 s,
# well above the function's latency even on a busy 2-core machine.
DEFAULT_TIME_SCALE = 0.02
DEMO_JOB = "demo.job_wrapper:run"
SERVED_FUNCTION = REPO_ROOT / "demo" / "served_function.py"
# The warm-up's throw-away job (its own project too).
WARMUP_JOB = "warmup"
# What jobs DEMO_JOB_LOGIC does not name run: the warm-up's, and, on a function served for
# one stack, jobs of another (the tests' replays share one function).
OTHER_JOBS_LOGIC = "example_jobs.example:run"
# After the replay, how long (real seconds) the demo waits at most for job logic that
# Scheduler hung up on at the deadline to end, on top of the longest slow attempt.
SETTLE_SECONDS = 10.0


@dataclass
class DemoOptions:
    stack_path: str | Path = "dev"  # a stack name (Pulumi.<name>.yaml) or a stack file
    jobs: tuple[str, ...] = ()
    ticks: int = DEFAULT_TICKS
    start: datetime | None = None
    time_scale: float = DEFAULT_TIME_SCALE
    real_time: bool = False
    faults: FaultPlan = field(default_factory=lambda: FaultPlan.from_rates(DEFAULT_MIX, seed=1))
    workers: int = 4
    threads: int = 8
    firestore_host: str | None = None  # reuse a running emulator instead of starting one
    firestore_port: int | None = None
    function_port: int | None = None
    header_case: HeaderCase = "canonical"
    time_style: TimeStyle = "offset"
    job_name_style: JobNameStyle = "full"
    # Off: retries go on until both retry limits are used up, skipping ticks meanwhile
    # (scheduler_emulator.emulator explains both readings).
    retries_stop_at_next_run: bool = False
    work_seconds: float = 0.005  # how long the demo job's own work takes (real seconds)
    collection: str | None = None  # default: the stack's collection
    missing_schedule_time: str | None = None  # default: the stack's setting
    logs_dir: Path | None = None  # keep the ledger and both processes' logs here
    stack: Stack | None = None  # use this instead of reading stack_path
    # run_demo adds the demo's flaky job (demo.watch.flaky_job) to the stack's jobs.
    flaky_job: bool = True
    # After the replay, run the watchdog over its window and check its findings.
    watchdog: bool = True
    # A local time the autumn change repeats: fired at both instants, or once (emulator).
    dst_fires: DstFires = "twice"
    # After the replay, replay the paths of demo.paths (DST changes, forced-run choices,
    # long store stalls), each with its own verdict.
    paths: bool = True
    # run_demo adds the demo's proxied job (PROXIED_JOB) to a stack without proxied jobs.
    proxied_job: bool = True
    # Proxied jobs: the fake downstream refuses this run's start (the n-th run it sees of
    # the first proxied job) with 403, for good; 0: refuses nothing.
    refuse_proxied_run: int = 2


@dataclass
class DemoOutcome:
    stack: Stack
    options: DemoOptions
    result: EmulatorResult
    summaries: list[RunSummary]
    totals: dict[str, Any]
    ledger: LedgerCounts
    function_url: str
    firestore_host: str
    workers_replaced: int
    real_seconds: float
    timing: StoreTiming
    store_host: str  # the fault proxy the function reaches its store through
    store_faults: list[StoreFaultRecord]  # injected during this replay, in order
    # The proxy's totals (StoreFaultProxy.summary()): over the function's whole life, so
    # over this one replay in the demo, over all of them where replays share a function.
    store_summary: str
    # What the function answered, per outcome, from its own log (this stack's project):
    # also for the deliveries Scheduler hung up on, or whose reply was lost.
    function_outcomes: Counter[str]
    # The watchdog's findings over the replay's window, checked against the faults.
    watch: WatchReport | None = None
    # Per job: did it ever execute, did any attempt succeed, its last error.
    jobs: list[JobResult] = field(default_factory=list)
    # demo.paths, replayed after the main replay against the same function.
    paths: list[PathResult] = field(default_factory=list)
    # demo.overlap: a job longer than its period under forbid and wait, after the paths.
    overlap: list[OverlapResult] = field(default_factory=list)
    # The stack's proxied jobs, replayed against the proxy on fake Google APIs.
    proxied: ProxiedOutcome | None = None
    # Why nothing of the stack's own jobs ran locally (all paused, none chosen), or None.
    nothing_to_run: str | None = None
    # demo.backfill: the runs of a simulated outage after the replay, backfilled.
    backfill: BackfillReport | None = None

    @property
    def ok(self) -> bool:
        """Every acknowledged run executed exactly once; no run executed twice; every job
        executed (a job that failed every attempt fails the demo); the watchdog (if run)
        found exactly the runs the demo expected."""
        watch_ok = self.watch is None or self.watch.ok
        paths_ok = all(path.ok for path in self.paths) and all(o.ok for o in self.overlap)
        proxied_ok = self.proxied is None or self.proxied.ok
        backfill_ok = self.backfill is None or self.backfill.ok
        return (bool(self.totals["all_ok"]) and not self.result.stopped_early and watch_ok
                and paths_ok and proxied_ok and backfill_ok and self.nothing_to_run is None)

    @property
    def scale(self) -> float:
        return 1.0 if self.options.real_time else self.options.time_scale


@dataclass
class ProxiedOutcome:
    """The stack's proxied jobs, replayed against the idempotent proxy served locally
    (LocalProxy), which starts executions on fake Google APIs: each run's `executions` are
    the starts the fake received for it (by the token's run ID), and `refused` marks the
    run whose start the fake refused (403) on purpose."""

    result: EmulatorResult
    summaries: list[RunSummary]
    totals: dict[str, Any]
    jobs: list[JobResult]
    proxy_url: str
    apis_url: str
    faults: FaultPlan  # what the emulator injected into the proxied runs
    skipped_faults: tuple[str, ...]  # faults of the plan it could not give them
    # What the proxy answered, per outcome, from its own log (this stack's project).
    outcomes: Counter[str]
    # Starts whose run ID is no replayed run's (a run keyed apart and started again).
    unattributed_starts: int
    # The run the fake refused: its job, schedule time, forced, the status, and whether
    # the proxy's record of it is `failed` and permanent (None: nothing refused).
    refused: RefusedRun | None
    real_seconds: float

    @property
    def ok(self) -> bool:
        refused_ok = self.refused is None or self.refused.ok
        return (bool(self.totals["all_ok"]) and not self.result.stopped_early
                and not self.unattributed_starts and refused_ok)


@dataclass
class RefusedRun:
    """A proxied run whose start the fake downstream refused (403 on every start)."""

    job: str
    schedule_time: datetime | None
    forced: bool
    status: int  # what the fake answered
    record: str  # the proxy's record of it: e.g. "failed (permanent)"
    error: str | None  # the record's error line

    @property
    def ok(self) -> bool:
        return self.record == "failed (permanent)"


def function_env(
    stack: Stack,
    *,
    firestore_host: str,
    ledger: Path,
    scale: float,
    timing: StoreTiming,
    collection: str | None = None,
    missing_schedule_time: str | None = None,
    work_seconds: float = 0.005,
) -> dict[str, str]:
    """The function's DEDUP_* environment for `stack`, as the Pulumi program sets it, with
    the retention scaled like every other duration of the replay, and the store budget
    and lease of `timing` (real seconds: see demo.store_faults)."""
    # Longer than the lease (the function insists), and than every scaled retry window.
    retention = max(stack.retention_seconds * scale, 60.0, 2 * timing.lease)
    return {
        "DEDUP_PROJECT": stack.project,
        "DEDUP_LOCATION": stack.region,
        "DEDUP_DATABASE": stack.database_name,
        "DEDUP_COLLECTION": collection or stack.collection,
        "DEDUP_LEASE_SECONDS": f"{timing.lease:g}",
        "DEDUP_RETENTION_SECONDS": f"{retention:g}",
        "DEDUP_MISSING_SCHEDULE_TIME": missing_schedule_time or stack.missing_schedule_time,
        "DEDUP_STORE_TIMEOUT_SECONDS": f"{timing.store_timeout:g}",
        "DEDUP_CACHE_SIZE": str(stack.cache_size),
        # As deployed: the served function runs on the replay's simulated clock
        # (demo/served_function.py), so a forced run ("Run now", the manual faults) is told
        # from a scheduled one by the stack's own margin, in schedule seconds.
        "DEDUP_FORCED_RUN_MARGIN_SECONDS": f"{stack.forced_run_margin_seconds:g}",
        # As deployed: the function serves only the jobs' invoker account, read from the
        # OIDC token the Scheduler emulator sends (shaped as Cloud Run forwards it), and
        # the watchdog's where it delivers runs (catch-up, re-runs: demo.watch).
        "DEDUP_ALLOWED_CALLERS": ",".join(
            [stack.invoker_email, *filter(None, [watchdog_caller(stack)])]
        ),
        # Every job runs through the ledger wrapper, which calls the job's own logic: no job
        # table (the checkout ships none, function/dedup/tables.py), so DEDUP_JOB runs all.
        "DEDUP_JOB": DEMO_JOB,
        # Keyed by the deployed job ID, as the function names the job (RunContext.job_name);
        # the demo's flaky job fails its runs in any served function (demo.watch).
        "DEMO_JOB_LOGIC": json.dumps({
            OTHER_JOBS: OTHER_JOBS_LOGIC,
            **{j.job_id: j.job_logic for j in with_flaky_job(stack).jobs},
        }),
        "DEMO_LEDGER": str(ledger),
        "DEMO_WORK_SECONDS": f"{work_seconds:g}",
        "FIRESTORE_EMULATOR_HOST": firestore_host,
        "GOOGLE_CLOUD_PROJECT": stack.project,
    }


def warm_up(url: str, stack: Stack, requests: int = 8, rounds: int = 4) -> None:
    """Warm every worker's Firestore channel before anything is timed: rounds of
    concurrent deliveries of a throw-away project (never counted), until one is quick."""
    project = f"warmup-{uuid.uuid4().hex[:8]}"
    base = datetime(2000, 1, 1, tzinfo=UTC)
    for round_no in range(rounds):

        def one(i: int, round_no: int = round_no) -> float:
            when = base + timedelta(minutes=round_no * 1000 + i)
            headers = scheduler_headers(
                WARMUP_JOB,
                format_schedule_time(when),
                project=project,
                location=stack.region,
                authorization=f"Bearer {scheduler_token(url, stack.invoker_email)}",
            )
            started = time.monotonic()
            with contextlib.suppress(OSError, http.client.HTTPException):
                _post(url, headers, timeout=30)
            return time.monotonic() - started

        with ThreadPoolExecutor(max_workers=requests) as pool:
            slowest = max(pool.map(one, range(requests)))
        if slowest < 0.3:
            return


def warm_emulator(host: str, project: str, database: str, writes: int = 40) -> None:
    """JIT-warm the Firestore emulator's JVM with REST writes (its first RPCs take seconds),
    while the function server starts. A throw-away collection; errors are ignored."""
    base = f"http://{host}/v1/projects/{project}/databases/{database}/documents/warmup"
    body = json.dumps({"fields": {"n": {"integerValue": "1"}}}).encode()

    def one(i: int) -> None:
        with contextlib.suppress(OSError, http.client.HTTPException):
            conn = http.client.HTTPConnection(host, timeout=30)
            try:
                conn.request(
                    "POST",
                    f"{base}?documentId=w{uuid.uuid4().hex[:8]}{i}",
                    body=body,
                    headers={"Content-Type": "application/json"},
                )
                conn.getresponse().read()
            finally:
                conn.close()

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(one, range(writes)))


def _post(url: str, headers: dict[str, str], timeout: float) -> int:
    host = url.split("//", 1)[1].split("/", 1)[0]
    conn = http.client.HTTPConnection(host, timeout=timeout)
    try:
        conn.request("POST", "/", body=b"", headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


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
            _save(options.logs_dir / "firestore-emulator.log", emulator.log_text)
        emulator.stop()


def _save(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


class LocalFunction:
    """The kit's function served locally for `stack`, with the demo's ledger job, reaching
    the Firestore emulator only through a store-fault proxy (`store_faults()`, the hook
    that injects the emulator's store faults).

    A context manager: starts the proxy and functions-framework (WORKERS processes, each
    its own process group member), warms them up, and stops both on exit. Several replays
    may share one: each counts only the ledger lines of its own stack's project.
    `store_faults`: size the lease for the store faults (demo.store_faults.store_timing);
    a replay that injects them needs it.
    """

    def __init__(
        self,
        stack: Stack,
        firestore_host: str,
        *,
        scale: float,
        ledger: Path,
        workers: int = 4,
        threads: int = 8,
        port: int | None = None,
        collection: str | None = None,
        missing_schedule_time: str | None = None,
        work_seconds: float = 0.005,
        store_faults: bool = False,
    ) -> None:
        self.stack = stack
        self.firestore_host = firestore_host
        self.scale = scale
        self.ledger = ledger
        self.workers = workers
        self.threads = threads
        self.port = port or free_port()
        self.timing = store_timing(stack, scale, store_faults)
        self.proxy = StoreFaultProxy(firestore_host)
        self._injector: StoreFaultInjector | None = None
        self.collection = collection
        self.missing_schedule_time = missing_schedule_time
        self.work_seconds = work_seconds
        # Built by start(), once the proxy's port (the function's store address) is known.
        self._server: FunctionServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def store_host(self) -> str:
        """Where the function's Firestore client connects: the proxy."""
        return self.proxy.host

    @property
    def log_text(self) -> str:
        """The function server's output so far (its JSON log lines among it)."""
        return self._server.log_text if self._server is not None else ""

    def worker_pids(self) -> set[int]:
        return set(self._server.worker_pids()) if self._server is not None else set()

    def store_faults(self) -> StoreFaultInjector:
        """A fresh store-fault hook for one replay (it records what it injects)."""
        if self._server is None:
            raise RuntimeError("LocalFunction not started")
        if self._injector is not None:
            self._injector.close()  # a replay abandoned mid-fault must not hold the next
        self._injector = StoreFaultInjector(self.proxy, self.timing)
        return self._injector

    def start(self) -> LocalFunction:
        warmer = threading.Thread(
            target=warm_emulator,  # straight to the emulator: warming is no store traffic
            args=(self.firestore_host, self.stack.project, self.stack.database_name),
            daemon=True,
        )
        warmer.start()
        try:
            self.proxy.start()
            env = function_env(
                self.stack,
                firestore_host=self.proxy.host,
                ledger=self.ledger,
                scale=self.scale,
                timing=self.timing,
                collection=self.collection,
                missing_schedule_time=self.missing_schedule_time,
                work_seconds=self.work_seconds,
            )
            self._server = FunctionServer(
                env,
                port=self.port,
                workers=self.workers,
                threads=self.threads,
                # The kit's function on the replay's simulated clock (see that file).
                source=SERVED_FUNCTION,
                extra_pythonpath=[REPO_ROOT],
            )
            self._server.start(timeout_seconds=60)
            warmer.join(30)
            warm_up(self.url, self.stack)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._injector is not None:
            self._injector.close()
        if self._server is not None:
            self._server.stop()
        self.proxy.stop()

    def __enter__(self) -> LocalFunction:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def watch_store_settings(function: LocalFunction, stack: Stack) -> Settings:
    """The function's own store settings for `stack`'s project, but on the Firestore
    emulator directly: the watchdog is no part of the replay, no store fault strikes it.
    Its store budget is the stack's own, unscaled, as the deployed watchdog's and the
    operator tools' are: the function's scaled budget (1 s) is for the replay's faults,
    and on a loaded machine the emulator alone can take longer than that to answer."""
    scaled = Settings.from_env(
        function_env(
            stack,
            firestore_host=function.firestore_host,
            ledger=function.ledger,
            scale=function.scale,
            timing=function.timing,
            collection=function.collection,
            missing_schedule_time=function.missing_schedule_time,
        )
    )
    return dataclasses.replace(scaled, store_timeout_seconds=stack.store_timeout_seconds)


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
            lease_seconds=function.timing.lease,
        )
        backfilled = run_backfill(
            stack, summaries, settings, function.firestore_host, watch.grace_seconds,
            function_url=function.url, ledger=function.ledger,
            client_project=function.stack.project,
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


def logged_errors(log_text: str, project: str, names: dict[str, str]) -> dict[str, str]:
    """Per job (the stack's name), the last error the function logged for it: its
    outcome and detail, e.g. "500 failed: KeyError('customer')". A 409 in_progress only
    says that another attempt held the run (one killed mid-job, say, whose retries all
    came within its lease): it is the job's last error only if the job has no other."""
    errors: dict[str, str] = {}
    busy: dict[str, str] = {}
    for entry in _log_entries(log_text):
        if entry.get("project") != project or entry.get("status", 200) < 300:
            continue
        job = names.get(str(entry.get("job")), str(entry.get("job")))
        detail = entry.get("detail")
        text = f"{entry.get('status')} {entry.get('outcome')}"
        text = f"{text}: {detail}" if detail else text
        (busy if entry.get("outcome") == Outcome.IN_PROGRESS else errors)[job] = text
    return {**busy, **errors}


def _log_entries(log_text: str) -> Iterator[dict[str, Any]]:
    """The function's JSON log lines."""
    for line in log_text.splitlines():
        if not line.startswith("{"):
            continue
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict):
                yield entry


def logged_outcomes(log_text: str, project: str) -> Counter[str]:
    """Outcomes of the function's JSON log lines for `project` (one line per delivery)."""
    return Counter(
        str(entry.get("outcome"))
        for entry in _log_entries(log_text)
        if entry.get("project") == project
    )


PROXY_TARGET = "proxy_scheduled_job"
# The proxied replay injects the faults of Scheduler's side only: nothing in the proxy
# honours X-Emulator-Fault (slow, kill), and its store is reached directly (no store faults).
PROXY_SKIPPED_FAULTS = (*TARGET_FAULTS, *STORE_FAULTS)
# What the fake downstream says when it refuses a start on purpose, per target kind.
REFUSAL_MESSAGES = {
    "workflow": "Permission 'workflows.executions.create' denied on resource",
    "run_job": "Permission 'run.jobs.runWithOverrides' denied on resource",
    "build_trigger": "User not authorized to perform this action (pubsub.topics.publish)",
}


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


def proxy_env(
    stack: Stack,
    *,
    firestore_host: str,
    scale: float,
    timing: StoreTiming,
    tables_dir: Path,
    api_base: str,
    credentials: Path,
    token_secret: str,
    collection: str | None = None,
) -> dict[str, str]:
    """The proxy's environment for `stack`, as infra/dedup_proxy.py sets it (its own
    database `<databaseName>-proxy`, its routes table, the token secret), but for its API
    base, the fake Google APIs, and its credentials, a key whose token endpoint is the
    fakes'. Its store is the Firestore emulator, directly."""
    env = function_env(
        stack, firestore_host=firestore_host, ledger=Path("/dev/null"), scale=scale,
        timing=timing, collection=collection,
    )
    for key in ("DEDUP_JOB", "DEMO_JOB_LOGIC", "DEMO_LEDGER", "DEMO_WORK_SECONDS"):
        env.pop(key, None)
    return {
        **env,
        "DEDUP_DATABASE": proxy_database_of(stack.database_name),
        # The Scheduler jobs' account only: the demo's watchdog delivers to the function.
        "DEDUP_ALLOWED_CALLERS": stack.invoker_email,
        **write_job_tables(tables_dir, proxy_routes=stack.proxy_routes()),
        "DEDUP_PROXY_API_BASE": api_base,
        # Real seconds, like the store timeout: the fakes answer in milliseconds, and a
        # start that timed out would be retried (a second start: dedup upstream narrows
        # that window but cannot close it, docs/proxy.md).
        "DEDUP_PROXY_TIMEOUT_SECONDS": f"{min(stack.proxy_timeout_seconds, 10.0):g}",
        TOKEN_SECRET_ENV: token_secret,
        "GOOGLE_APPLICATION_CREDENTIALS": str(credentials),
    }


class LocalProxy:
    """The kit's idempotent proxy served locally for `stack`'s proxied jobs, on fake
    Google APIs (local_stack.fake_google_apis, in this process): functions-framework on
    demo/served_function.py's proxy_scheduled_job (main.py's, on the replay's clock),
    WORKERS processes, its own database on the Firestore emulator.

    `refuse`: the fake refuses the start of the n-th run it sees of the first proxied
    job's target with 403, on every start request of that run (0: none).
    """

    def __init__(
        self,
        stack: Stack,
        firestore_host: str,
        *,
        scale: float,
        timing: StoreTiming,
        workdir: Path,
        workers: int = 2,
        threads: int = 8,
        collection: str | None = None,
        refuse: int = 0,
    ) -> None:
        self.stack = stack
        self.firestore_host = firestore_host
        self.scale = scale
        self.timing = timing
        self.workdir = workdir
        self.workers = workers
        self.threads = threads
        self.collection = collection or stack.collection
        self.refuse = refuse
        self.apis = FakeGoogleApis(token_names=_token_names(stack))
        self.port = free_port()
        self._server: FunctionServer | None = None
        self._apis_started = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def log_text(self) -> str:
        return self._server.log_text if self._server is not None else ""

    @property
    def database(self) -> str:
        return proxy_database_of(self.stack.database_name)

    def start(self) -> LocalProxy:
        try:
            self.apis.__enter__()
            self._apis_started = True
            first = next(iter(self.stack.active_proxied_jobs), None)
            if self.refuse and first is not None and first.proxy is not None:
                self.apis.strike_run(self.refuse, Behaviour(
                    status=403, message=f"{REFUSAL_MESSAGES.get(first.proxy.target, 'denied')}"
                    f" {first.proxy.resource} (make demo: refused on purpose)",
                ), resource=first.proxy.started_resource)
            env = proxy_env(
                self.stack, firestore_host=self.firestore_host, scale=self.scale,
                timing=self.timing, tables_dir=self.workdir / "proxy-tables",
                api_base=self.apis.url,
                credentials=service_account_file(
                    self.workdir / "proxy-adc", self.apis.token_uri, self.stack.project),
                token_secret=secrets.token_hex(32), collection=self.collection,
            )
            self._server = FunctionServer(
                env, port=self.port, workers=self.workers, threads=self.threads,
                target=PROXY_TARGET, source=SERVED_FUNCTION, extra_pythonpath=[REPO_ROOT],
            )
            self._server.start(timeout_seconds=60)
            warm_up(self.url, self.stack)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
        if self._apis_started:
            self.apis.__exit__(None, None, None)
            self._apis_started = False

    def __enter__(self) -> LocalProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _token_names(stack: Stack) -> dict[str, str]:
    """Where the fakes read the token, per target kind: the proxy's defaults, or the
    stack's `tokenName` (one per kind: the fakes read one name per kind)."""
    names = {"workflow": "dedup_token", "run_job": "DEDUP_TOKEN",
             "build_trigger": "_DEDUP_TOKEN"}
    for job in stack.proxied_jobs:
        if job.proxy is not None and job.proxy.token_name:
            names[job.proxy.target] = job.proxy.token_name
    return names


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
    previous = os.environ.get("FIRESTORE_EMULATOR_HOST")
    os.environ["FIRESTORE_EMULATOR_HOST"] = proxy.firestore_host
    try:
        from google.cloud import firestore

        client = firestore.Client(project=proxy.stack.project, database=proxy.database)
        stored = FirestoreRunStore(client, proxy.collection, 10.0).get(run_id)
    finally:
        if previous is None:
            os.environ.pop("FIRESTORE_EMULATOR_HOST", None)
        else:
            os.environ["FIRESTORE_EMULATOR_HOST"] = previous
    if stored is None:
        return "no record", None
    record = stored.record
    text = str(record.status.value if isinstance(record.status, RunStatus) else record.status)
    if record.permanent:
        text += " (permanent)"
    return text, record.error


def _replay_proxied_jobs(
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
            _save(options.logs_dir / "proxy.log", proxy.log_text)
        proxy.stop()


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
        with _firestore(options, log) as firestore_host:
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
                )
            try:
                if function is not None:
                    function.start()
                    log(
                        f"function serving on {function.url}, reaching its store through "
                        f"the store-fault proxy on {function.store_host}"
                    )
                    jobs = len(stack.active_jobs)
                    log(
                        f"replaying {options.ticks} scheduled runs of {jobs} "
                        f"job{'' if jobs == 1 else 's'} ({options.faults.describe()}) ..."
                    )
                    outcome = replay(function, stack, options, progress=progress)
                else:
                    log(f"Firestore emulator on {firestore_host}; no job of the stack runs "
                        "in the dedup function: not serving it")
                    outcome = unserved_outcome(stack, options, firestore_host, scale)
                outcome.nothing_to_run = idle
                if stack.active_proxied_jobs and not outcome.result.stopped_early:
                    outcome.proxied = _replay_proxied_jobs(
                        stack, options, firestore_host, outcome.timing, workdir, log,
                        progress)
                if function is not None and options.paths and not outcome.result.stopped_early:
                    log("replay finished; replaying the paths (DST changes, forced-run "
                        "choices, long store stalls) ...")
                    outcome.paths = run_paths(function, stack, options, replay)
                    outcome.overlap = run_overlap_paths(function.url, stack, function.ledger)
                log("replay finished; stopping everything ...")
            finally:
                if function is not None:
                    if options.logs_dir is not None:
                        _save(options.logs_dir / "function.log", function.log_text)
                    function.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    outcome.real_seconds = time.monotonic() - started
    return outcome


# -- make demo DEMO_ARGS=--keep: the Firestore emulator kept for make runs ----------------

KEEP = "--keep"


def kept_at(stack_file: Path, firestore_host: str) -> dict[str, datetime]:
    """Per job of the stack file with records (jobs[].name), the instant `make runs --at`
    reads its replayed runs at: the verdict of its latest recorded run due (its retry
    window + the watchdog's grace after it), as the demo's watchdog judges each job at the
    end of its own window; a later run, never replayed, is not judged yet."""
    from dedup.watchdog.due import verdict_due_at
    from operator_tools.runs import open_store, stack_config, watched_jobs  # the Pulumi program

    cfg = stack_config(str(stack_file))
    grace = float(cfg.watchdog.grace_seconds)
    documents: dict[int, list[dict[str, Any]]] = {}
    at: dict[str, datetime] = {}
    with _emulator_env(firestore_host):
        stores = open_store(cfg)
        for job in watched_jobs(cfg):
            store = stores.records(job)
            if id(store) not in documents:  # one read of each database's collection
                documents[id(store)] = [
                    snapshot.to_dict() or {}
                    for snapshot in store.client.collection(cfg.dedup.collection).stream()
                ]
            times = [d["schedule_time"] for d in documents[id(store)]
                     if d.get("job") == job.name and d.get("project") == cfg.project
                     and isinstance(d.get("schedule_time"), datetime)]
            if times:
                due = verdict_due_at(job, max(times), grace)
                whole = due.replace(microsecond=0)
                at[job.name.removeprefix(f"{cfg.name_prefix}-")] = (
                    whole if whole == due else whole + timedelta(seconds=1))
    return at


def kept_commands(stack_file: Path, firestore_host: str, at: dict[str, datetime]) -> str:
    """The `make runs` commands that read the kept records, one per job (each at the end
    of its own replayed window)."""
    from operator_tools.stack_files import display_path

    stack = display_path(stack_file)
    lines = [f"  FIRESTORE_EMULATOR_HOST={firestore_host} make runs STACK={stack} "
             f'RUNS_ARGS="--job {job} --at {when:%Y-%m-%dT%H:%M:%SZ}"'
             for job, when in sorted(at.items())]
    return "\n".join(lines or [f"  (no records of the jobs of {stack})"]) + "\n"


def main_keeping_firestore(
    argv: list[str],
    demo_main: Callable[[list[str]], int],
    *,
    out: Any = None,
    wait: Callable[[], None] | None = None,
) -> int:
    """`make demo DEMO_ARGS=--keep`: the demo (`demo_main`, demo.cli's) on a Firestore
    emulator started here and kept running after the report, until Ctrl-C (or SIGTERM),
    with the `make runs` commands that read its records (`--at`: the demo replays a window
    ahead of the clock). Without --keep, just the demo. With --firestore-host, the demo's
    records stay in that emulator: the commands are printed, and it returns."""
    import argparse
    import sys

    out = out or sys.stderr
    if "-h" in argv or "--help" in argv:
        try:
            return demo_main(argv)
        finally:
            print(f"\n{KEEP}: keep the Firestore emulator, with the demo's records, running "
                  "after the report until Ctrl-C, and print the `make runs` commands that "
                  "read them (make demo DEMO_ARGS=--keep)")
    if KEEP not in argv:
        return demo_main(argv)
    rest = [arg for arg in argv if arg != KEEP]
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--stack", default="dev")
    pre.add_argument("--firestore-host")
    pre.add_argument("--firestore-port", type=int)
    known, _ = pre.parse_known_args(rest)
    try:
        stack_file = resolve_stack(known.stack)
    except ValueError:
        return demo_main(rest)  # the demo says what is wrong with it
    if known.firestore_host:
        code = demo_main(rest)
        if code in (0, 1):
            out.write(f"\nThe demo's records are in the Firestore emulator on "
                      f"{known.firestore_host}. To read them:\n\n"
                      + kept_commands(stack_file, known.firestore_host,
                                      kept_at(stack_file, known.firestore_host)))
        return code
    out.write("starting the Firestore emulator to keep (gcloud emulators firestore start) ...\n")
    out.flush()
    emulator = FirestoreEmulator(port=known.firestore_port)
    code = 130  # until the demo has run
    try:
        try:
            emulator.start()
        except LocalStackError as exc:
            out.write(f"error: {exc}\n")
            return 2
        code = demo_main([*rest, "--firestore-host", emulator.host])
        if code not in (0, 1):
            return code
        at = kept_at(stack_file, emulator.host)
        out.write(f"\nKept the Firestore emulator on {emulator.host}, with the demo's records, "
                  "until Ctrl-C. In another shell:\n\n"
                  + kept_commands(stack_file, emulator.host, at))
        out.flush()
        (wait or _wait_forever)()
        return code
    except KeyboardInterrupt:
        out.write("stopped the kept Firestore emulator\n")
        return code if code in (0, 1) else 130
    finally:
        emulator.stop()


def _wait_forever() -> None:
    while True:
        time.sleep(3600)

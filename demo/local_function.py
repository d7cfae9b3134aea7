"""The kit's function served locally for a stack (LocalFunction): its environment as the
Pulumi program sets it (function_env), behind the store-fault proxy, with the demo's ledger
job, warmed up before anything is timed; and next to it, each runtime's function
(demo.local_runtimes), its own process on the same store path and ledger."""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import shutil
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dedup.settings import Settings
from demo.job_wrapper import OTHER_JOBS
from demo.local_runtimes import LocalRuntime
from demo.store_faults import StoreFaultInjector, StoreTiming, store_timing
from demo.watch import watchdog_caller, with_flaky_job
from local_stack import FunctionServer, StoreFaultProxy, free_port
from local_stack.deliveries import scheduler_headers
from local_stack.processes import REPO_ROOT
from scheduler_emulator.oidc import scheduler_token
from scheduler_emulator.records import format_schedule_time
from scheduler_emulator.stack import Stack

DEMO_JOB = "demo.job_wrapper:run"
# The ledger wrapper's map of deployed job ID -> the job's own logic (demo.job_wrapper).
DEMO_JOB_LOGIC = "DEMO_JOB_LOGIC"
SERVED_FUNCTION = REPO_ROOT / "demo" / "served_function.py"
# The warm-up's throw-away job (its own project too).
WARMUP_JOB = "warmup"
# What jobs DEMO_JOB_LOGIC does not name run: the warm-up's, and, on a function served for
# one stack, jobs of another (the tests' replays share one function).
OTHER_JOBS_LOGIC = "example_jobs.example:run"


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
        # A runtime's jobs run in its own function (LocalRuntime.environment), never here.
        DEMO_JOB_LOGIC: json.dumps({
            OTHER_JOBS: OTHER_JOBS_LOGIC,
            **{j.job_id: j.job_logic for j in with_flaky_job(stack).jobs if j.runtime is None},
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


class LocalFunction:
    """The kit's function served locally for `stack`, with the demo's ledger job, reaching
    the Firestore emulator only through a store-fault proxy (`store_faults()`, the hook
    that injects the emulator's store faults); and each of `runtimes` served as a function
    of its own (its own functions-framework process, at most its maxInstances workers),
    with the same ledger, the same store path, and its own database, job table, settings
    and secrets (`runtime_urls`: where the Scheduler emulator delivers their jobs).

    A context manager: starts the proxy and functions-framework (WORKERS processes, each
    its own process group member), warms them up, and stops all on exit. Several replays
    may share one: each counts only the ledger lines of its own stack's project.
    `store_faults`: size the lease for the store faults (demo.store_faults.store_timing);
    a replay that injects them needs it. The runtimes' `path:` secrets must be written
    before (demo.local_runtimes.secret_files_written).
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
        runtimes: tuple[LocalRuntime, ...] = (),
    ) -> None:
        self.stack = stack
        self.runtimes = runtimes
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
        self._runtime_servers: dict[str, FunctionServer] = {}
        self._tables: Path | None = None  # the runtimes' job tables, while they are served

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def store_host(self) -> str:
        """Where the function's Firestore client connects: the proxy."""
        return self.proxy.host

    @property
    def runtime_urls(self) -> dict[str, str]:
        """Each served runtime's function URL, by runtime name."""
        return {name: server.url for name, server in self._runtime_servers.items()}

    @property
    def log_text(self) -> str:
        """The function servers' output so far (their JSON log lines among it)."""
        return "".join(text for text in self.log_texts().values())

    def log_texts(self) -> dict[str, str]:
        """Each server's output: `function`, then `runtime-<name>` per runtime."""
        servers = {"function": self._server,
                   **{f"runtime-{n}": s for n, s in self._runtime_servers.items()}}
        return {name: server.log_text for name, server in servers.items() if server}

    def worker_pids(self) -> set[int]:
        servers = [self._server, *self._runtime_servers.values()]
        return {pid for server in servers if server is not None
                for pid in server.worker_pids()}

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
            for runtime in self.runtimes:
                self._start_runtime(runtime, env)
            warmer.join(30)
            for url in (self.url, *self.runtime_urls.values()):
                warm_up(url, self.stack)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_runtime(self, runtime: LocalRuntime, base: dict[str, str]) -> None:
        """A runtime's own function: the dedup function's served environment with the
        runtime's own (LocalRuntime.environment), as many workers as it may have instances
        (its maxInstances) up to WORKERS."""
        if self._tables is None:
            self._tables = Path(tempfile.mkdtemp(prefix="demo-runtime-tables-"))
        env = runtime.environment(base, tables_dir=self._tables / runtime.name, job=DEMO_JOB,
                                  job_logic_env=DEMO_JOB_LOGIC)
        server = FunctionServer(
            env, workers=runtime.workers(self.workers),
            threads=self.threads, source=SERVED_FUNCTION, extra_pythonpath=[REPO_ROOT],
        )
        self._runtime_servers[runtime.name] = server  # stopped by stop() if it fails
        server.start(timeout_seconds=60)

    def stop(self) -> None:
        if self._injector is not None:
            self._injector.close()
        for server in self._runtime_servers.values():
            server.stop()
        if self._server is not None:
            self._server.stop()
        self.proxy.stop()
        if self._tables is not None:
            shutil.rmtree(self._tables, ignore_errors=True)
            self._tables = None

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

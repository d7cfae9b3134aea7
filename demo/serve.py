"""`make serve STACK=dev`: the stack served locally until Ctrl-C, to rehearse day 2.

    python -m operator_tools serve [--stack STACK] [--every SECONDS] [--no-scheduler]
        [--miss JOB[:N]]

Starts the Firestore emulator (or reuses one: --firestore-host), serves the kit's
function (demo/local_function.py's LocalFunction, the demo's ledger job running each
job's logic), each runtime's own function (its demoSettings over its settings, its secrets
from the stack's local secrets file: demo/local_runtimes.py; a missing one stops it before
anything starts) and, for proxied jobs, the proxy against local fake Google APIs
(demo/local_proxy.py's LocalProxy), fires the
stack's jobs in real time with the Scheduler emulator, and runs the stack's watchdog in
this process on its schedule (`watchdog.schedule`, or every --every seconds): the
deployed watchdog's code (dedup.watchdog.tick), its job table from the stack's declarations
(infra.watchdog.watch_jobs, as `make plan` deploys it), its cursors and re-run requests in
its own database (`<databaseName>-watchdog`), delivering catch-ups and re-runs to the
served function with its own account's token, as deployed. Everything runs on the real
clock, so `make runs` and `make rerun`, pointed at the emulator with the environment
printed at start-up, read and write what the served stack does.

`--miss JOB[:N]` has the Scheduler emulator never deliver JOB's N-th fire after start-up
(default 2: the first is delivered, so the watchdog knows the job's first run and judges
the missed one; a run before it is not judged), as Cloud Scheduler sometimes fails to: the
watchdog reports it `missed`, and catches it up if the job has `catchUp`.

One difference from the deployed watchdog (ServedWatchStore): until a job's first record is
found, every tick judges the job over its whole lookback, so a record that appears after
the first tick for a run from before it (a re-run of a run that never ran) makes the runs
after it judged, as `make runs` shows them.

A tick can also be asked for at once: POST the printed WATCHDOG_URL (`make rerun ...
NOW=1 WATCHDOG_URL=...`); it answers as the deployed watchdog does (`checked`,
`problems`, `caught_up`, `reruns`).

Not served: the watchdog's deliveries to the proxy (the local proxy admits the Scheduler
jobs' account only), so a proxied job's runs are judged, but not caught up or re-run.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TextIO
from zoneinfo import ZoneInfo

from croniter import croniter
from google.cloud import firestore

from dedup.settings import Settings
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.backfills import (
    BackfillPacer,
    BackfillSettings,
    FirestoreBackfills,
    backfills_collection,
)
from dedup.watchdog.cursors import Cursor, FirestoreWatchStore
from dedup.watchdog.delivery import TargetAuth
from dedup.watchdog.due import WatchedJob, rfc3339
from dedup.watchdog.reruns import FirestoreRerunQueue, reruns_collection
from dedup.watchdog.settings import CURSOR_SUFFIX, WatchSettings, with_runtime_urls
from dedup.watchdog.tick import TickResult, Watchdog
from demo.local_function import LocalFunction, function_env
from demo.local_proxy import LocalProxy
from demo.local_runtimes import (
    LocalRuntime,
    LocalSecretsError,
    local_runtimes,
    remove_secret_files,
    team_code_warning,
    write_secret_files,
)
from demo.record_stores import emulator_env
from demo.store_faults import store_timing
from demo.watch import ReplayDeliverer, delivering_config
from infra.config import StackConfig
from infra.scheduler_rules import schedule_times
from local_stack import FirestoreEmulator, free_port
from scheduler_emulator.clock import RealClock
from scheduler_emulator.emulator import SchedulerEmulator
from scheduler_emulator.faults import MISSED, FaultPlan
from scheduler_emulator.oidc import scheduler_token
from scheduler_emulator.stack import Stack, load_stack, resolve_stack

# The Scheduler emulator fires this many runs per job at most (real time: years).
SCHEDULER_TICKS = 100_000
# --miss JOB: the fire never delivered, counted from start-up (the first one is delivered).
DEFAULT_MISSED_FIRE = 2


class ServedWatchStore(FirestoreWatchStore):
    """The deployed watchdog's cursors, but for one thing: until the watchdog has found a
    job's first recorded run, each tick judges the job from the start of its lookback, not
    from where the previous tick judged through. A rehearsal's first records often come
    after the watchdog's first tick for runs from before it (`make rerun` of a run that
    never ran, with --no-scheduler; runs delivered by hand): the deployed watchdog, having
    judged past them while the job had no record, would never judge the runs after them,
    which `make runs` calls missed. Reading a never-run job's whole lookback each tick is
    cheap for a local stack; the deployed watchdog does not (docs/operations.md)."""

    def get_cursors(self, jobs: Sequence[str]) -> dict[str, Cursor]:
        cursors = super().get_cursors(jobs)
        for cursor in cursors.values():
            if cursor.first_run is None:
                cursor.judged_through = None
        return cursors


@dataclass(frozen=True)
class MissedFires(FaultPlan):
    """The Scheduler emulator's fault plan for `--miss`: exactly the chosen fires, (job
    name, N: the N-th fire after start-up), are never delivered; no other fault."""

    misses: frozenset[tuple[str, int]] = frozenset()

    def hits(self, name: str, job: str, tick: int, worker: int = 0, attempt: int = 1) -> bool:
        return name == MISSED and (job, tick + 1) in self.misses


def check_misses(stack: Stack, misses: Collection[tuple[str, int]]) -> frozenset[
    tuple[str, int]
]:
    """The `--miss` fires, each of one of the stack's active jobs (else ValueError)."""
    names = {job.name for job in (*stack.active_jobs, *stack.active_proxied_jobs)}
    unknown = sorted({name for name, _ in misses} - names)
    if unknown:
        raise ValueError(f"--miss {', '.join(unknown)}: no such active job in the stack "
                         f"(jobs: {', '.join(sorted(names)) or 'none'})")
    return frozenset(misses)


def parse_miss(text: str) -> tuple[str, int]:
    """`--miss JOB[:N]`: the job's name and which fire after start-up (1 = the next)."""
    name, sep, number = text.partition(":")
    try:
        fire = int(number) if sep else DEFAULT_MISSED_FIRE
    except ValueError:
        fire = 0
    if not name or fire < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected JOB or JOB:N (N >= 1, the N-th fire after start-up)")
    return name, fire


class ServedStack:
    """The stack's function, runtimes, proxy, Scheduler and watchdog, served locally on
    the real clock against the Firestore emulator at `firestore_host`. A context manager;
    `tick()` runs one watchdog tick (at `now`, by default the real clock). `runtimes`: the
    stack's runtimes with their local secret values (default: local_runtimes(stack), which
    raises LocalSecretsError for a missing one)."""

    def __init__(
        self,
        stack: Stack,
        firestore_host: str,
        *,
        workdir: Path,
        scheduler: bool = True,
        misses: Collection[tuple[str, int]] = (),
        workers: int = 2,
        threads: int = 4,
        log: Callable[[str], None] = lambda line: None,
        runtimes: tuple[LocalRuntime, ...] | None = None,
    ) -> None:
        if stack.config is None:
            raise ValueError("make serve needs a stack file's config (load_stack)")
        self.misses = check_misses(stack, misses)
        self.runtimes = local_runtimes(stack) if runtimes is None else runtimes
        self.stack = stack
        self.cfg: StackConfig = stack.config
        self.firestore_host = firestore_host
        self.workdir = workdir
        self.scheduler = scheduler
        self.workers = workers
        self.threads = threads
        self.log = log
        self.function: LocalFunction | None = None
        self.proxy: LocalProxy | None = None
        self._emulators: list[SchedulerEmulator] = []
        self._clients: list[firestore.Client] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._watchdog: tuple[WatchSettings, FirestoreWatchStore, FirestoreRerunQueue] | None
        self._watchdog = None
        self._deliverer: ReplayDeliverer | None = None
        self._backfills: BackfillPacer | None = None  # built with the first tick
        self._secret_files: list[Path] = []  # what write_secret_files created, removed at stop

    # -- start and stop ------------------------------------------------------------------

    def start(self) -> ServedStack:
        self.workdir.mkdir(parents=True, exist_ok=True)  # the ledger's, the proxy's files
        try:
            self._secret_files = write_secret_files(self.runtimes)
            if self.stack.active_jobs:
                self.function = LocalFunction(
                    self.stack, self.firestore_host, scale=1.0,
                    ledger=self.workdir / "ledger.jsonl", workers=self.workers,
                    threads=self.threads, runtimes=self.runtimes,
                ).start()
                self.log(f"function serving on {self.function.url}")
                for runtime in self.runtimes:
                    self.log(f"runtime {runtime.name}: its own function serving on "
                             f"{self.function.runtime_urls[runtime.name]}, "
                             f"{runtime.describe()}")
            if self.stack.active_proxied_jobs:
                self.proxy = LocalProxy(
                    self.stack, self.firestore_host, scale=1.0,
                    timing=store_timing(self.stack, 1.0, False), workdir=self.workdir,
                ).start()
                self.log(f"proxy serving on {self.proxy.url} (fake Google APIs on "
                         f"{self.proxy.apis.url})")
            self._watchdog = self._build_watchdog()
            self._serve_ticks()
            if self.scheduler:
                self._start_scheduler()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for emulator in self._emulators:
            emulator.stop()  # its job threads are daemons, waiting for their next run
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for client in self._clients:
            client.close()  # type: ignore[no-untyped-call]
        self._clients.clear()
        if self.proxy is not None:
            self.proxy.stop()
        if self.function is not None:
            self.function.stop()
        remove_secret_files(self._secret_files)
        self._secret_files = []

    def __enter__(self) -> ServedStack:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- the watchdog --------------------------------------------------------------------

    def _client(self, database: str) -> firestore.Client:
        with emulator_env(self.firestore_host):
            client = firestore.Client(project=self.cfg.project, database=database)
        self._clients.append(client)
        return client

    def _build_watchdog(self) -> tuple[WatchSettings, FirestoreWatchStore, FirestoreRerunQueue]:
        """The deployed watchdog's settings and stores, where `make runs` reads them (its
        cursors through ServedWatchStore: a job without a first run judged over its lookback)."""
        from operator_tools.runs import watched_jobs  # imports the Pulumi program

        cfg, dedup = self.cfg, self.cfg.dedup
        timing = store_timing(self.stack, 1.0, False)
        store_settings = Settings.from_env(function_env(
            self.stack, firestore_host=self.firestore_host, ledger=self.workdir / "ledger",
            scale=1.0, timing=timing,
        ))
        timeout = store_settings.store_timeout_seconds
        runs = FirestoreRunStore(self._client(dedup.database_name), dedup.collection, timeout)
        own = FirestoreRunStore(self._client(dedup.watch_database_name), dedup.collection,
                                timeout) if cfg.watchdog.enabled else runs
        jobs: list[WatchedJob] = []
        by_database: dict[str, FirestoreRunStore] = {}
        runtime_urls = self.function.runtime_urls if self.function is not None else {}
        # A team's own service is not served here: its jobs are judged, never delivered
        # (their `url` is the real service's).
        team_jobs = {cfg.job_id(j) for j in cfg.jobs if j.service is not None}
        for job in with_runtime_urls(watched_jobs(cfg), runtime_urls):
            if job.database is not None:  # the proxy's, or a runtime's own records
                by_database.setdefault(job.database, FirestoreRunStore(
                    self._client(job.database), dedup.collection, timeout))
            if job.proxied:  # judged, not delivered (see above)
                job = replace(job, catch_up=False, reruns=False)
            if job.name in team_jobs:
                job = replace(job, catch_up=False, reruns=False, url=None)
            jobs.append(job)
        delivers = self.function is not None and delivering_config(self.stack) is not None
        if delivers:
            self._deliverer = ReplayDeliverer(cfg.watchdog_email)
        settings = WatchSettings(
            store_settings, tuple(jobs), float(cfg.watchdog.lookback_seconds),
            float(cfg.watchdog.grace_seconds),
            target_url=self.function.url if delivers and self.function else None,
            target_auth=TargetAuth.ID_TOKEN,
            backfill=BackfillSettings(cfg.watchdog.backfill_runs_per_tick,
                                      cfg.watchdog.backfill_in_flight),
        )
        store = ServedWatchStore(runs, dedup.collection + CURSOR_SUFFIX, by_database, own)
        return settings, store, FirestoreRerunQueue(own, reruns_collection(dedup.collection))

    def _pacer(self, settings: WatchSettings, reruns: FirestoreRerunQueue) -> BackfillPacer:
        """`make backfill`'s runs released as the deployed watchdog releases them."""
        if self._backfills is None:
            dedup = self.cfg.dedup
            own = FirestoreRunStore(self._client(
                dedup.watch_database_name if self.cfg.watchdog.enabled else dedup.database_name),
                dedup.collection, settings.store.store_timeout_seconds)
            self._backfills = BackfillPacer(
                settings.backfill, FirestoreBackfills(own, backfills_collection(dedup.collection)),
                reruns, settings.store.retention_seconds)
        return self._backfills

    def tick(self, now: datetime | None = None) -> TickResult:
        """One watchdog tick, as the deployed one's (one at a time)."""
        assert self._watchdog is not None, "start() first"
        settings, store, reruns = self._watchdog
        with self._lock:
            at = now or datetime.now(UTC)
            if self._deliverer is not None:
                self._deliverer.now = at
            result = Watchdog(settings, store, lambda: at, self._deliverer, reruns,
                              self._pacer(settings, reruns)).run_tick()
        for problem in result.problems:
            when = "-" if problem.schedule_time is None else rfc3339(problem.schedule_time)
            extra = f": {problem.error}" if problem.error else ""
            self.log(f"watchdog {problem.kind}: {problem.job} @ {when}{extra}")
        for delivered in [*result.caught_up, *result.reruns]:
            generation = f" generation {delivered.generation}" if delivered.generation else ""
            self.log(f"watchdog {delivered.kind}: {delivered.job} @ "
                     f"{rfc3339(delivered.schedule_time)}{generation}: {delivered.status}")
        self.log(f"watchdog tick at {rfc3339(at)}: {result.checked} runs checked, "
                 f"{len(result.problems)} problems")
        return result

    def _serve_ticks(self) -> None:
        """POST / runs a tick now and answers as the deployed watchdog (make rerun NOW=1)."""
        served = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                result = served.tick()
                body = json.dumps({
                    "checked": result.checked,
                    "problems": [p.to_json() for p in result.problems],
                    "caught_up": [d.to_json() for d in result.caught_up],
                    "reruns": [d.to_json() for d in result.reruns],
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def watchdog_url(self) -> str:
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}/"

    def next_tick(self, after: datetime, every_seconds: float | None = None) -> datetime:
        """The watchdog's next tick: its Scheduler job's cron, or every `every_seconds`."""
        if every_seconds:
            return after + timedelta(seconds=every_seconds)
        zone = self.cfg.watchdog.time_zone
        following: datetime = croniter(
            self.cfg.watchdog.schedule, after.astimezone(ZoneInfo(zone))).get_next(datetime)
        return following.astimezone(UTC)

    # -- the Scheduler -------------------------------------------------------------------

    def _start_scheduler(self) -> None:
        for url, jobs in ((self.function.url if self.function else None,
                           self.stack.active_jobs),
                          (self.proxy.url if self.proxy else None,
                           self.stack.active_proxied_jobs)):
            if url is None or not jobs:
                continue
            emulator = SchedulerEmulator(
                url, self.stack, jobs=jobs, ticks=SCHEDULER_TICKS, clock_factory=RealClock,
                # The function's emulator delivers each runtime's jobs to its own function.
                runtime_urls=self.function.runtime_urls if self.function else None,
                token=scheduler_token(url, self.stack.invoker_email), trace_deliveries=True,
                faults=MissedFires(misses=self.misses),
            )
            self._emulators.append(emulator)
            for job in jobs:
                for name, fire in sorted(self.misses):
                    if name == job.name:
                        when = next(itertools.islice(schedule_times(
                            job.schedule, job.time_zone, emulator.start), fire - 1, None))
                        self.log(f"Scheduler will not deliver {job.job_id} @ {rfc3339(when)} "
                                 f"(--miss {name}:{fire})")
            threading.Thread(target=_quietly(emulator.run), daemon=True).start()

    # -- what to tell the operator -------------------------------------------------------

    def environment(self) -> dict[str, str]:
        return {"FIRESTORE_EMULATOR_HOST": self.firestore_host,
                "WATCHDOG_URL": self.watchdog_url}


def _quietly(run: Callable[[], object]) -> Callable[[], None]:
    def target() -> None:
        with contextlib.suppress(Exception):
            run()

    return target


def instructions(served: ServedStack, stack_name: str) -> str:
    env = served.environment()
    job = next(iter(served.stack.active_jobs or served.stack.active_proxied_jobs), None)
    lines = [
        "Serving the stack locally until Ctrl-C. In another shell:",
        "",
        f"  export FIRESTORE_EMULATOR_HOST={env['FIRESTORE_EMULATOR_HOST']}",
        f"  make runs STACK={stack_name}",
    ]
    if job is not None:
        lines.append(
            f'  make rerun STACK={stack_name} JOB={job.name} TIME=<a schedule time from make '
            f'runs> REASON="rehearsal" NOW=1 WATCHDOG_URL={env["WATCHDOG_URL"]}')
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def _firestore(host: str | None, log: Callable[[str], None]) -> Iterator[str]:
    if host:
        yield host
        return
    log("starting the Firestore emulator (gcloud emulators firestore start) ...")
    emulator = FirestoreEmulator()
    try:
        emulator.start()
        yield emulator.host
    finally:
        emulator.stop()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None, *, out: TextIO = sys.stdout) -> int:
    parser = argparse.ArgumentParser(
        prog="scheduler-dedup serve",
        description="Serve a stack locally (function, proxy, "
        "Scheduler, watchdog) until Ctrl-C, for make runs and make rerun to rehearse on.")
    parser.add_argument("--stack", default="dev", help="stack name or stack file")
    parser.add_argument("--every", type=float, metavar="SECONDS",
                        help="tick the watchdog every SECONDS (default: watchdog.schedule)")
    parser.add_argument("--no-scheduler", action="store_true",
                        help="fire no scheduled runs (every run is then missed)")
    parser.add_argument("--miss", action="append", type=parse_miss, default=[],
                        metavar="JOB[:N]", help="Scheduler never delivers JOB's N-th fire "
                        f"after start-up (default {DEFAULT_MISSED_FIRE}); repeatable")
    parser.add_argument("--firestore-host", help="reuse a running Firestore emulator")
    args = parser.parse_args(argv)

    def log(line: str) -> None:
        out.write(f"[{datetime.now(UTC):%H:%M:%S}Z] {line}\n")
        out.flush()

    stack = load_stack(resolve_stack(args.stack))
    try:
        check_misses(stack, args.miss)
    except ValueError as exc:
        parser.error(str(exc))
    if (warning := team_code_warning(stack)) is not None:
        log(warning)
    try:  # every runtime's secret values, before anything starts
        runtimes = local_runtimes(stack)
    except LocalSecretsError as exc:
        out.write(f"error: {exc}\n")
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="scheduler-serve-"))
    stop = threading.Event()
    # Ctrl-C (SIGINT), SIGTERM and SIGHUP (its terminal closed) alike stop everything it
    # started (its children included) and remove the secret files it wrote.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    try:
        with _firestore(args.firestore_host, log) as host, ServedStack(
            stack, host, workdir=workdir, scheduler=not args.no_scheduler, misses=args.miss,
            log=log, runtimes=runtimes,
        ) as served:
            out.write(instructions(served, args.stack))
            out.flush()
            at = served.next_tick(datetime.now(UTC), args.every)
            while not stop.wait(max(0.0, (at - datetime.now(UTC)).total_seconds())):
                served.tick()
                at = served.next_tick(datetime.now(UTC), args.every)
    except KeyboardInterrupt:
        out.write("stopped\n")
    except LocalSecretsError as exc:  # a `path:` secret's file that cannot be written
        out.write(f"error: {exc}\n")
        return 2
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":  # the entry point it was: say where it went, and fail
    raise SystemExit("run `scheduler-dedup serve` (or the make target that calls it)")

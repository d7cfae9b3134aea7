"""`make bench BENCH_ARGS=--scale`: the kit at Cloud Scheduler's quota (1,000 jobs per region
by default, up to 5,000).

For each stack size (100, 1,000, 5,000 jobs by default), a stack generated from the fixture
dev stack (examples/stacks/Pulumi.dev.yaml: its three jobs repeated with their own names and
minutes, every tenth job proxied to a workflow) is

- planned and policy-checked exactly as `make plan` / `make policy-check` do it (the same
  commands, in a fresh process each, wall time: config validation, job-logic import, the
  program under mocks, the checks and the report);
- watched for one steady-state watchdog tick against the Firestore emulator: each job's
  cursor judged up to ten minutes ago, its runs due since then completed. Reported: the
  documents the tick read (cursors and records), its wall time, and the peak of Python
  memory it allocated (tracemalloc, in a second tick over an identical copy, so that the
  tracing does not slow the timed one).

The comparators, measured in the same run: the smallest stack's plan and policy check
(a ratio against the ratio of job counts shows whether time grows linearly), and reading
the same documents one by one instead of in batches (what the tick's batched reads save).
"""

from __future__ import annotations

import copy
import itertools
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import yaml
from google.cloud import firestore

from dedup.keys import RunKey
from dedup.settings import Settings
from dedup.store import RunRecord, RunStatus
from dedup.store.firestore import FirestoreRunStore, record_to_document
from dedup.watchdog.cursors import Cursor, FirestoreWatchStore
from dedup.watchdog.due import WatchedJob
from dedup.watchdog.settings import CURSOR_SUFFIX, WatchSettings
from dedup.watchdog.tick import Watchdog

REPO_ROOT: Final = Path(__file__).resolve().parent.parent
BASE_STACK: Final = REPO_ROOT / "examples" / "stacks" / "Pulumi.dev.yaml"
SCALES: Final = (100, 1000, 5000)
RUNTIME_SCALES: Final = ((1000, 50),)
"""(jobs, runtimes): stacks whose jobs run in that many runtimes (issue 35), each beside the
stack of as many jobs in the dedup function alone, its comparator."""
PROXIED_EVERY: Final = 10
"""Every tenth job goes through the proxy: its table, its database, its watch entries."""
TICK_INTERVAL: Final = timedelta(minutes=10)
"""The watchdog's default schedule: a steady-state tick judges ten minutes of runs."""
WRITE_BATCH: Final = 500  # Firestore's limit of writes per batch


# --- the stacks ----------------------------------------------------------------------------


def scaled_stack_config(
    jobs: int, base: Path = BASE_STACK, runtimes: int = 0
) -> dict[str, Any]:
    """The base stack's `config:` with `jobs` jobs: its own jobs repeated, each with its
    own name and minute (so the schedules differ), every PROXIED_EVERY-th one proxied to
    one of a few workflows of the stack's project; with `runtimes`, that many runtimes
    (`rt-00`, ...: each a setting, a secret and a bucket grant) sharing the other jobs."""
    config: dict[str, Any] = yaml.safe_load(base.read_text(encoding="utf-8"))["config"]
    templates = config["scheduler-dedup:jobs"]
    project, region = config["gcp:project"], config["gcp:region"]
    generated: list[dict[str, Any]] = []
    dealt = itertools.count()
    for index in range(jobs):
        job = copy.deepcopy(templates[index % len(templates)])
        job["name"] = f"{job['name']}-{index:04d}"
        fields = job["schedule"].split()
        if fields[0].isdigit():  # a fixed minute: spread the jobs over the hour
            fields[0] = str(index // len(templates) % 60)
        job["schedule"] = " ".join(fields)
        if index % PROXIED_EVERY == PROXIED_EVERY - 1:
            job.pop("jobLogic", None)
            job.pop("catchUp", None)  # the dev watchdog delivers to the dedup function only
            # Room for the proxy's start request and two store calls (config's own rule).
            job["attemptDeadlineSeconds"] = max(job.get("attemptDeadlineSeconds", 0), 120)
            job["proxy"] = {
                "target": "workflow",
                "resource": f"projects/{project}/locations/{region}/workflows/wf-{index % 7}",
            }
        elif runtimes:  # the jobs the dedup function would run, dealt out in turn
            job["runtime"] = runtime_name(next(dealt) % runtimes)
        generated.append(job)
    config["scheduler-dedup:jobs"] = generated
    if runtimes:
        config["scheduler-dedup:runtimes"] = [
            {"name": runtime_name(n), "settings": {"EXPORT_BUCKET": f"exports-{n:02d}"},
             "secrets": [{"secret": f"api-token-{n:02d}", "env": "API_TOKEN"}],
             "grants": [{"role": "roles/storage.objectCreator",
                         "bucket": f"{project}-exports-{n:02d}"}]}
            for n in range(runtimes)
        ]
    return config


def runtime_name(number: int) -> str:
    return f"rt-{number:02d}"


def write_scaled_stack(directory: Path, jobs: int, runtimes: int = 0) -> Path:
    """`Pulumi.scale<jobs>[rt<runtimes>].yaml` in `directory`: what `make plan STACK=...`
    would read."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"Pulumi.scale{jobs}{f'rt{runtimes}' if runtimes else ''}.yaml"
    path.write_text(yaml.safe_dump({"config": scaled_stack_config(jobs, runtimes=runtimes)},
                                   sort_keys=False))
    return path


# --- plan and policy check -----------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    wall: float
    cpu: float
    """User + system CPU of the command and its children: what other load on the machine
    does not inflate (the wall time is the target's figure)."""


def command_seconds(args: Sequence[str]) -> Timing:
    """Wall and CPU time of one command in a fresh process (as `make` runs it); it must
    succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"{' '.join(args)} failed ({result.returncode}): " + " | ".join(tail))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(elapsed, cpu)


def plan_seconds(stack_file: Path) -> Timing:
    return command_seconds(["-m", "operator_tools", "plan", str(stack_file)])


def policy_check_seconds(stack_file: Path) -> Timing:
    return command_seconds(
        ["-m", "operator_tools", "policy-check", "--stack-file", str(stack_file)])


# --- one watchdog tick ---------------------------------------------------------------------


@dataclass(frozen=True)
class TickFigures:
    jobs: int
    reads: int
    """Documents the tick read: every job's cursor and its runs due since the last tick."""
    seconds: float
    peak_mib: float
    """Peak of Python memory allocated during the tick (tracemalloc)."""
    one_by_one_seconds: float
    """The comparator: the same documents read one at a time."""
    problems: int


def watched_jobs_of(config: Mapping[str, Any]) -> tuple[WatchedJob, ...]:
    """The watchdog's job table for the stack, as infra writes it (operator_tools.runs)."""
    from infra.config import load_config
    from operator_tools.runs import watched_jobs

    return watched_jobs(load_config(config))


def _seed(
    client: firestore.Client, collection: str, settings: WatchSettings, now: datetime
) -> list[tuple[str | None, str]]:
    """Each job's cursor judged through its horizon of one tick ago, and its runs due since
    then completed. Returns (database, document path) of every document a tick reads."""
    store, grace = settings.store, settings.grace_seconds
    previous = now - TICK_INTERVAL
    cursors = client.collection(collection + CURSOR_SUFFIX)
    writes: list[tuple[str | None, Any, dict[str, Any]]] = []  # (database, reference, data)
    read: list[tuple[str | None, str]] = []
    clients: dict[str | None, firestore.Client] = {None: client}
    for job in settings.jobs:
        horizon = now - timedelta(seconds=job.retry_window_seconds + grace)
        judged = previous - timedelta(seconds=job.retry_window_seconds + grace)
        cursor = Cursor(judged_through=judged, watch_from=now - timedelta(days=1),
                        first_run=now - timedelta(days=1))
        writes.append((None, cursors.document(job.name), cursor.to_document(previous)))
        read.append((None, f"{collection}{CURSOR_SUFFIX}/{job.name}"))
        if job.database not in clients:
            clients[job.database] = firestore.Client(
                project=client.project, database=job.database)
        runs = clients[job.database]
        for t in job.schedule_times(judged, horizon):
            key = RunKey(store.project, store.location, job.name, t)
            record = RunRecord.claim(key, "a" * 32, 1, 60, t + timedelta(days=30), t)
            done = replace(record, status=RunStatus.COMPLETED, finished_at=t,
                           duration_seconds=0.1)
            writes.append((job.database, runs.collection(collection).document(key.run_id),
                           record_to_document(done)))
            read.append((job.database, f"{collection}/{key.run_id}"))
    for database, runs in clients.items():  # a batch writes to its own client's database
        mine = [(ref, data) for db, ref, data in writes if db == database]
        for start in range(0, len(mine), WRITE_BATCH):
            batch = runs.batch()
            for ref, data in mine[start:start + WRITE_BATCH]:
                batch.set(ref, data)
            batch.commit()
    return read


def _watchdog(
    client: firestore.Client, settings: WatchSettings, now: datetime
) -> Watchdog:
    store = settings.store
    runs = FirestoreRunStore(client, store.collection, store.store_timeout_seconds)
    by_database = {store.database: runs} | {
        database: FirestoreRunStore(
            firestore.Client(project=client.project, database=database),
            store.collection, store.store_timeout_seconds)
        for database in settings.other_databases
    }
    return Watchdog(
        settings, FirestoreWatchStore(runs, settings.cursor_collection, by_database),
        wall_clock=lambda: now,
    )


def tick_figures(
    config: Mapping[str, Any], project: str, location: str, collection: str
) -> TickFigures:
    """One steady-state tick for the stack's jobs on the emulator (FIRESTORE_EMULATOR_HOST),
    timed; the same tick again over a copy, traced for memory; and the comparator."""
    jobs = watched_jobs_of(config)
    client = firestore.Client(project=project)
    now = datetime.now(UTC).replace(microsecond=0)
    figures: dict[str, Any] = {}
    for run, traced in (("timed", False), ("traced", True)):
        settings = WatchSettings(
            Settings(project, location, collection=f"{collection}-{run}"), jobs,
            lookback_seconds=43200, grace_seconds=300,
        )
        documents = _seed(client, settings.store.collection, settings, now)
        watchdog = _watchdog(client, settings, now)
        if traced:
            tracemalloc.start()
        started = time.perf_counter()
        result = watchdog.run_tick()
        elapsed = time.perf_counter() - started
        if traced:
            figures["peak_mib"] = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
        else:
            figures.update(seconds=elapsed, reads=result.counts["reads"],
                           problems=len(result.problems), documents=documents)
    clients: dict[str | None, firestore.Client] = {None: client}
    started = time.perf_counter()
    for database, path in figures.pop("documents"):
        if database not in clients:
            clients[database] = firestore.Client(project=project, database=database)
        clients[database].document(path).get()
    one_by_one = time.perf_counter() - started
    return TickFigures(len(jobs), figures["reads"], figures["seconds"], figures["peak_mib"],
                       one_by_one, figures["problems"])


# --- the whole scenario --------------------------------------------------------------------


@dataclass(frozen=True)
class ScaleRow:
    jobs: int
    plan: Timing
    policy_check: Timing
    tick: TickFigures
    runtimes: int = 0
    """The runtimes its jobs run in (0: the dedup function alone)."""

    @property
    def label(self) -> str:
        return f"{self.jobs}/{self.runtimes}rt" if self.runtimes else str(self.jobs)


def run_scale(
    scales: Sequence[int], workdir: Path, project: str, location: str,
    runtime_scales: Sequence[tuple[int, int]] = RUNTIME_SCALES,
) -> list[ScaleRow]:
    """A row per stack size, then one per (jobs, runtimes) whose job count is among them
    (its comparator: the row of as many jobs without runtimes)."""
    rows: list[ScaleRow] = []
    counter = itertools.count()
    sizes = [(jobs, 0) for jobs in scales] + [
        (jobs, runtimes) for jobs, runtimes in runtime_scales if jobs in scales]
    for jobs, runtimes in sizes:
        stack_file = write_scaled_stack(workdir, jobs, runtimes)
        plan = plan_seconds(stack_file)
        policy = policy_check_seconds(stack_file)
        config = scaled_stack_config(jobs, runtimes=runtimes)
        tick = tick_figures(config, project, location, f"scale-{jobs}-{next(counter)}")
        row = ScaleRow(jobs, plan, policy, tick, runtimes)
        rows.append(row)
        print(f"  {row.label} jobs: plan {plan.wall:.1f} s, policy check {policy.wall:.1f} s, "
              f"tick {tick.seconds:.2f} s", file=sys.stderr)
    return rows


PLAN_TARGET_SECONDS: Final[Mapping[int, float]] = {1000: 10.0, 5000: 30.0}
"""Plan and policy check, each, by stack size (issue 41; issue 23 set 30 s at 1,000 jobs)."""
RUNTIMES_TARGET_SECONDS: Final = 30.0
"""Plan and policy check, each, of a stack with runtimes (issue 35: 1,000 jobs, 50 runtimes)."""
TICK_TARGET_SECONDS: Final = 10.0


def scale_table(rows: Sequence[ScaleRow]) -> str:
    """The figures, the comparators' ratios and the targets, as text."""
    base = rows[0]
    plain = {row.jobs: row for row in rows if not row.runtimes}
    lines = [
        f"{'jobs':>9}  {'plan s':>7}  {'cpu s':>6}  {'x base':>6}  {'policy s':>8}  "
        f"{'cpu s':>6}  {'x base':>6}  {'tick reads':>10}  {'tick s':>7}  {'peak MiB':>8}  "
        f"{'1-by-1 s':>8}  {'saved x':>7}",
    ]
    for row in rows:
        t = row.tick
        lines.append(
            f"{row.label:>9}  {row.plan.wall:>7.1f}  {row.plan.cpu:>6.1f}  "
            f"{row.plan.wall / base.plan.wall:>6.1f}  {row.policy_check.wall:>8.1f}  "
            f"{row.policy_check.cpu:>6.1f}  "
            f"{row.policy_check.wall / base.policy_check.wall:>6.1f}  {t.reads:>10}  "
            f"{t.seconds:>7.2f}  {t.peak_mib:>8.1f}  {t.one_by_one_seconds:>8.2f}  "
            f"{t.one_by_one_seconds / t.seconds:>7.1f}"
        )
    lines.append(
        f"(x base: wall time against the {base.jobs}-job stack, {row_ratio(rows)} the jobs; "
        "cpu: user + system, which other load does not inflate; 1-by-1: the tick's "
        "documents read one at a time, saved x: how much longer that takes than the tick)"
    )
    for row in rows:
        if row.runtimes:
            same = plain[row.jobs]
            ok = max(row.plan.wall, row.policy_check.wall) < RUNTIMES_TARGET_SECONDS
            lines.append(
                f"target: plan and policy check under {RUNTIMES_TARGET_SECONDS:.0f} s for "
                f"{row.jobs:,} jobs over {row.runtimes} runtimes: {'met' if ok else 'MISSED'} "
                f"(x the {row.jobs:,} jobs without runtimes: plan "
                f"{row.plan.wall / same.plan.wall:.2f}, policy check "
                f"{row.policy_check.wall / same.policy_check.wall:.2f})")
        elif (target := PLAN_TARGET_SECONDS.get(row.jobs)) is not None:
            ok = max(row.plan.wall, row.policy_check.wall) < target
            lines.append(f"target: plan and policy check under {target:.0f} s "
                         f"for {row.jobs:,} jobs: {'met' if ok else 'MISSED'}")
    slowest = max(rows, key=lambda r: r.tick.seconds)
    ok = slowest.tick.seconds < TICK_TARGET_SECONDS
    lines.append(f"target: a tick under {TICK_TARGET_SECONDS:.0f} s ({slowest.label} jobs: "
                 f"{slowest.tick.seconds:.2f} s): {'met' if ok else 'MISSED'}")
    return "\n".join(lines)


def row_ratio(rows: Sequence[ScaleRow]) -> str:
    return ", ".join(f"{r.jobs // rows[0].jobs}x" for r in rows if not r.runtimes)

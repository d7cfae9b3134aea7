"""What the demo replays: its options (DemoOptions, what `make demo`'s flags set) and a
path's (PathSpec, demo.paths)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from infra.config import JobSettings
from scheduler_emulator.emulator import DstFires, HeaderCase, JobNameStyle, TimeStyle
from scheduler_emulator.faults import DEFAULT_MIX, FaultPlan
from scheduler_emulator.stack import Stack

DEFAULT_TICKS = 20
# 1 s of schedule time = 20 ms: the dev stack's shortest deadline (30 s) lasts 0.6 s,
# well above the function's latency even on a busy 2-core machine.
DEFAULT_TIME_SCALE = 0.02


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
    # (scheduler_emulator.retries explains both readings).
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


@dataclass(frozen=True)
class PathSpec:
    """One path: a job, where its replay starts, how many ticks, which faults."""

    name: str
    job: JobSettings
    start: datetime
    ticks: int
    runs: int  # the business runs that must execute once each
    faults: FaultPlan = field(default_factory=FaultPlan)
    dst_fires: DstFires = "twice"

"""What a replay found: DemoOutcome (one replay against the served function, and the
whole demo's, with its scenes after it), ProxiedOutcome (the proxied jobs' replay) and its
RefusedRun, and PathResult (one path of demo.paths, with its verdict)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from demo.backfill import BackfillReport
from demo.extra_run import ExtraRunReport
from demo.ledger import LedgerCounts
from demo.local_runtimes import LocalRuntime
from demo.options import DemoOptions, PathSpec
from demo.overlap import OverlapResult
from demo.silence import SilenceReport
from demo.store_faults import StoreFaultRecord, StoreTiming
from demo.watch import WatchReport
from scheduler_emulator.faults import FaultPlan
from scheduler_emulator.records import EmulatorResult
from scheduler_emulator.report import JobResult, RunSummary
from scheduler_emulator.stack import Stack


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
    # demo.silence: a run missed during `make silence`'s silence, paged once after it.
    silence: SilenceReport | None = None
    # demo.extra_run: a run no business run explains (runsBeyondSchedule: page), paged once.
    extra_run: ExtraRunReport | None = None
    # The runtimes served (demo.local_runtimes), by name, each with its function's URL.
    runtimes: dict[str, tuple[LocalRuntime, str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every acknowledged run executed exactly once; no run executed twice; every job
        executed (a job that failed every attempt fails the demo); the watchdog (if run)
        found exactly the runs the demo expected."""
        watch_ok = self.watch is None or self.watch.ok
        paths_ok = all(path.ok for path in self.paths) and all(o.ok for o in self.overlap)
        proxied_ok = self.proxied is None or self.proxied.ok
        scenes_ok = all(scene is None or scene.ok
                        for scene in (self.backfill, self.silence, self.extra_run))
        return (bool(self.totals["all_ok"]) and not self.result.stopped_early and watch_ok
                and paths_ok and proxied_ok and scenes_ok and self.nothing_to_run is None)

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


@dataclass
class PathResult:
    spec: PathSpec
    outcome: DemoOutcome

    @property
    def executed(self) -> int:
        """Business runs (not forced) that executed, each counted once."""
        return sum(1 for s in self._scheduled if s.executions)

    @property
    def _scheduled(self) -> list[RunSummary]:
        return [s for s in self.outcome.summaries if s.scheduled and not s.forced]

    @property
    def ok(self) -> bool:
        return self.outcome.ok and self.executed == self.spec.runs

    @property
    def text(self) -> str:
        verdicts = sorted({s.verdict for s in self.outcome.summaries})
        mark = "ok" if self.ok else "FAIL"
        return (f"{self.spec.name}: {self.executed} of {self.spec.runs} business run(s) "
                f"executed once; {'; '.join(verdicts)}: {mark}")

    def to_json(self) -> dict[str, Any]:
        return {"path": self.spec.name, "runs": self.spec.runs, "executed": self.executed,
                "verdicts": sorted({s.verdict for s in self.outcome.summaries}),
                "ok": self.ok}

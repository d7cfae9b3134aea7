"""After the watchdog: a backfill of the runs a simulated outage missed, exactly once.

The outage: Scheduler delivered nothing for the OUTAGE_RUNS business runs of one replayed
job that follow the replay's last one (a job without catchUp, if the stack has one: the
watchdog would deliver a catchUp job's missed runs on its own). With the watchdog's
clock past their retry window + grace, they are `missed`, and `make backfill`'s code path
(operator_tools.backfill: plan_backfill, its dry run, queue_backfill) queues them, mode missing;
the same command asked again queues nothing. Then the watchdog's own code ticks (its
BackfillPacer, the stack's watchdog.backfillRunsPerTick and backfillInFlight) until the
backfill is finished, delivering to the served function on the replay's clock as
demo/watch.py does. The verdict: each missed run executed exactly once (the ledger's
commits, by run_id), and the backfill counted every run done.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from dedup.keys import RunKey
from dedup.settings import Settings
from dedup.watchdog.backfills import (
    FINISHED,
    BackfillPacer,
    BackfillSettings,
    FirestoreBackfills,
    backfills_collection,
)
from dedup.watchdog.due import rfc3339
from dedup.watchdog.reruns import FirestoreRerunQueue, reruns_collection
from dedup.watchdog.settings import WatchSettings
from dedup.watchdog.tick import Watchdog
from demo.ledger import commits_by_run_id
from demo.record_stores import RecordStores
from demo.scene_ticks import next_runs
from demo.watch import ReplayDeliverer, delivering_config, fixed_instant, watched_jobs_of
from scheduler_emulator.report import RunSummary
from scheduler_emulator.stack import Stack

OUTAGE_RUNS = 6
BACKFILL_REASON = "make demo: the runs of a simulated outage"
MAX_TICKS = 20


@dataclass
class BackfillReport:
    job: str
    outage: list[datetime]  # the missed runs' schedule times
    plan: str = ""  # the dry run's printout
    queued: str = ""  # what queuing it said
    asked_again: str = ""  # what the same command said the second time
    ticks: int = 0
    progress: dict[str, Any] = field(default_factory=dict)  # the last tick's
    executions: dict[datetime, int] = field(default_factory=dict)  # ledger commits per run
    error: str | None = None
    rate: BackfillSettings = field(default_factory=BackfillSettings)

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job, "outage": [rfc3339(t) for t in self.outage], "ok": self.ok,
            "ticks": self.ticks, "progress": self.progress, "error": self.error,
            "executions": {rfc3339(t): n for t, n in self.executions.items()},
            "runs_per_tick": self.rate.runs_per_tick, "in_flight": self.rate.in_flight,
        }

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.outage) and all(
            self.executions.get(t) == 1 for t in self.outage) and (
            self.progress.get("state") == FINISHED
            and self.progress.get("done") == len(self.outage)
            and self.asked_again.startswith("already queued"))

    def lines(self) -> list[str]:
        if self.error is not None:
            return [f"  backfill of {self.job}: {self.error}"]
        once = sum(1 for t in self.outage if self.executions.get(t) == 1)
        lines = [f"  {line}" for line in self.plan.rstrip().splitlines()]
        lines += [
            f"  {self.queued}",
            f"  asked again: {self.asked_again}",
            f"  the watchdog delivered it in {self.ticks} tick(s), at most "
            f"{self.rate.in_flight} run(s) in flight and {self.rate.runs_per_tick} a tick: "
            f"{self.progress.get('done', 0)} done, {self.progress.get('failed', 0)} failed, "
            f"{self.progress.get('refused', 0)} refused, {self.progress.get('state', '?')}",
            f"  exactly once: {once}/{len(self.outage)} missed run(s) executed once each"
            + ("" if self.ok else " -- NOT exactly once: "
               + ", ".join(f"{rfc3339(t)} x{self.executions.get(t, 0)}" for t in self.outage
                           if self.executions.get(t) != 1)),
        ]
        return lines


def run_backfill(
    stack: Stack,
    summaries: list[RunSummary],
    store_settings: Settings,
    firestore_host: str,
    grace_seconds: float,
    *,
    function_url: str,
    ledger: Path,
    client_project: str | None = None,
    runtime_urls: Mapping[str, str] | None = None,
) -> BackfillReport | None:
    """Backfill the outage after the replay of one job; None where the stack's watchdog
    delivers no re-runs (no backfill is possible). A runtime's job is read in its own
    database and delivered to its function (`runtime_urls`)."""
    from operator_tools.backfill import (  # the Pulumi program
        plan_backfill,
        print_plan,
        queue_backfill,
    )
    cfg = delivering_config(stack)
    if cfg is None:
        return None
    watched = watched_jobs_of(stack, runtime_urls)
    replayed: dict[str, datetime] = {}
    for s in summaries:
        if s.schedule_time is not None and not s.forced:
            replayed[s.job] = max(s.schedule_time, replayed.get(s.job, s.schedule_time))
    in_config = {job.name for job in cfg.jobs}
    candidates = [job for job in stack.active_jobs if job.name in replayed
                  and job.name in in_config and watched[job.name].reruns]
    if not candidates:
        return None
    job = min(candidates, key=lambda j: watched[j.name].catch_up)  # without catchUp first
    watched_job = watched[job.name]
    outage = next_runs(watched_job, replayed[job.name], OUTAGE_RUNS)
    report = BackfillReport(job.name, outage)
    due = timedelta(seconds=watched_job.retry_window_seconds + grace_seconds)
    now = outage[-1] + due + timedelta(seconds=1)
    if cfg.dedup.collection != store_settings.collection:  # the demo's own collection
        cfg = cfg.model_copy(update={"dedup": cfg.dedup.model_copy(
            update={"collection": store_settings.collection})})
    cfg = cfg.model_copy(update={"watchdog": cfg.watchdog.model_copy(
        update={"grace_seconds": int(grace_seconds)})})
    st = store_settings
    records = RecordStores(st, firestore_host, [watched_job], client_project)
    runs, stores = records.runs, records.run_stores()
    try:
        def planned() -> Any:
            return plan_backfill(
                cfg, stores, job_name=job.name, first_text=rfc3339(outage[0]),
                last_text=rfc3339(outage[-1]), reason=BACKFILL_REASON,
                requested_by="make demo", now=now)

        first = planned()
        printed = io.StringIO()
        print_plan(first, printed, dry_run=True)
        report.plan = printed.getvalue()
        report.queued = queue_backfill(cfg, stores, first, now)
        report.asked_again = queue_backfill(cfg, stores, planned(), now)
        settings = WatchSettings(
            store_settings, (watched_job,), lookback_seconds=(now - outage[0]).total_seconds()
            + 3600, grace_seconds=grace_seconds, target_url=function_url,
            backfill=BackfillSettings(cfg.watchdog.backfill_runs_per_tick,
                                      cfg.watchdog.backfill_in_flight),
        )
        report.rate = settings.backfill
        deliverer = ReplayDeliverer(cfg.watchdog_email)
        deliverer.now = now
        queue = FirestoreRerunQueue(runs, reruns_collection(st.collection))
        pacer = BackfillPacer(
            settings.backfill, FirestoreBackfills(runs, backfills_collection(st.collection)),
            queue, st.retention_seconds)
        store = records.watch_store(settings.cursor_collection)
        for report.ticks in range(1, MAX_TICKS + 1):
            result = Watchdog(settings, store, functools.partial(fixed_instant, now), deliverer,
                              queue, pacer).run_tick()
            report.progress = next((p for p in result.backfills if p["job"] == job.job_id),
                                   report.progress)
            if report.progress.get("state") == FINISHED:
                break
    except Exception as exc:  # reported, and the demo fails on it
        report.error = f"{type(exc).__name__}: {exc}"
    finally:
        records.close()
    commits = commits_by_run_id(ledger, stack.project)
    report.executions = {
        t: commits[RunKey(cfg.project, cfg.region, job.job_id, t).run_id] for t in outage}
    return report



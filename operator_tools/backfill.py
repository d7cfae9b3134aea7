"""`make backfill STACK=prod JOB=invoice-sync FROM=... TO=... [MODE=missing|failed|all]
[ORDER=reverse] [STOP_ON_FAILURE=1] [DRY_RUN=1] [REASON="..."]`: the runs of a range,
executed once more.

    python -m operator_tools backfill STACK --job NAME --from RFC3339 --to RFC3339
        [--mode missing|failed|all] [--order forward|reverse] [--stop-on-failure]
        [--dry-run] [--reason TEXT]
    python -m operator_tools backfill STACK --job NAME --status      (make backfill-status)
    python -m operator_tools backfill STACK --job NAME --cancel      (make backfill-cancel)

The range's runs are the job's business runs (dedup.business_runs, DST included, as the
watchdog computes them) whose key time is in [FROM, TO]; TO must not be in the future, and
the range may hold at most MAX_BACKFILL_RUNS of them. The mode picks which:

- `missing` (the default): no record of any generation, and its verdict is due (its retry
  window + the watchdog's grace has passed): the runs an outage lost;
- `failed`: the latest generation's record is `failed`;
- `all`: every run of the range (completed ones are re-run too).

`missing` and `failed` judge runs by their records, which the TTL policy deletes after
`retentionSeconds`: a range reaching back further is refused (a run without a record there
may have completed). `all` judges nothing and is not bounded so.

Each chosen run then passes `make rerun`'s checks (operator_tools.rerun.plan_rerun: none pending,
not in progress, not held by Scheduler's retry window, not re-run already unless CONFIRM=1)
and gets the generation `make rerun` would give it; a run that fails a check is skipped,
with why. `--dry-run` prints exactly the runs it would queue (and the skipped) and writes
nothing. Otherwise the plan is written in one commit to the watchdog's own database
(dedup/watchdog/backfills.py), and the watchdog releases its runs into the re-run queue a few at a
time: `make backfill-status` shows how far it got. With STOP_ON_FAILURE=1 it stops
releasing at the first run that fails (state `stopped`, naming that run; the runs already
in flight finish). A paused job can be backfilled: the watchdog delivers its runs as any
re-run, while Scheduler delivers nothing of its schedule. The same command asked again finds its
backfill (same job, range, mode and order) and queues nothing; a job has one active
backfill at a time.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO
from zoneinfo import ZoneInfo

from dedup.keys import RunKey
from dedup.store import RecordChanged, RecordExists, RunStatus, StoredRun, StoreError
from dedup.watchdog.backfills import (
    ACTIVE,
    ALL,
    CANCELLED,
    FAILED_RUNS,
    FORWARD,
    MAX_BACKFILL_RUNS,
    MISSING,
    MODES,
    ORDERS,
    REVERSE,
    Backfill,
    FirestoreBackfills,
    MalformedBackfill,
    PlannedRun,
    Stored,
    backfill_id,
    backfills_collection,
)
from dedup.watchdog.due import WatchedJob, verdict_due_at
from dedup.watchdog.reruns import RerunRequest
from infra.config import StackConfig
from operator_tools.rerun import (
    RerunRefused,
    confirmed,
    generations_of,
    local_and_utc,
    parse_time,
    plan_rerun,
    rerun_job,
    who_asks,
)
from operator_tools.runs import (
    RunsError,
    RunStores,
    job_records,
    open_store,
    stack_config,
    stack_job,
    store_failure,
    watched_jobs,
)


@dataclass(frozen=True)
class Chosen:
    """One run of the range the mode picked: queued as `generation`, or skipped (why)."""

    schedule_time: datetime
    before: str  # what its records said: "no record", "completed", "failed (gen 1)", ...
    generation: int | None = None
    skipped: str | None = None


@dataclass(frozen=True)
class Planned:
    backfill: Backfill
    chosen: tuple[Chosen, ...]  # in delivery order
    scheduled: int  # runs of the range
    existing: Stored[Backfill | MalformedBackfill] | None  # the job's backfill document
    zone: str = "Etc/UTC"  # the job's time zone, for printing
    runtime: str | None = None  # the runtime the job runs in (None: the default function)

    @property
    def queued(self) -> list[Chosen]:
        return [c for c in self.chosen if c.generation is not None]

    @property
    def skipped(self) -> list[Chosen]:
        return [c for c in self.chosen if c.generation is None]


def range_runs(job: WatchedJob, first: datetime, last: datetime) -> list[datetime]:
    """The key times of the job's business runs in [first, last], oldest first, at most
    MAX_BACKFILL_RUNS (RerunRefused beyond, naming where to split)."""
    slack = timedelta(hours=3)  # a key time's latest delivery is at most a DST change later
    times: list[datetime] = []
    for t in job.schedule_times(first - slack, last + slack):
        if t < first or t > last:
            continue
        times.append(t)
        if len(times) > MAX_BACKFILL_RUNS:
            zone = ZoneInfo(job.time_zone)
            raise RerunRefused(
                f"the range holds more than {MAX_BACKFILL_RUNS} scheduled runs of "
                f"{job.name} (the most one backfill queues): split it, e.g. FROM="
                f"{local_and_utc(first, zone)} TO={local_and_utc(times[-2], zone)}, then FROM="
                f"{local_and_utc(t, zone)} onwards")
    return times


def _state(found: dict[int, StoredRun]) -> str:
    if not found:
        return "no record"
    latest = max(found)
    status = str(found[latest].record.status)
    return status if latest == 0 else f"{status} (generation {latest})"


def plan_backfill(
    cfg: StackConfig, stores: RunStores, *, job_name: str, first_text: str, last_text: str,
    mode: str = MISSING, order: str = FORWARD, reason: str = "", requested_by: str = "",
    now: datetime | None = None, again: bool = False, dry_run: bool = False,
    stop_on_failure: bool = False,
) -> Planned:
    """Which runs of the range the backfill queues, as which generation, and which it
    skips; RerunRefused for a range or request it refuses as a whole."""
    now = now or datetime.now(UTC)
    if mode not in MODES:
        raise RerunRefused(f"MODE {mode!r} is not one of {', '.join(MODES)}: missing (no "
                           "record), failed (the latest generation failed) or all")
    if order not in ORDERS:
        raise RerunRefused(f"ORDER {order!r} is not one of {', '.join(ORDERS)}")
    job = rerun_job(cfg, job_name, reason or ("dry run" if dry_run else ""))
    settings = stack_job(cfg, job.name)
    first, last = parse_time(first_text), parse_time(last_text)
    zone = ZoneInfo(job.time_zone)
    if first > last:
        raise RerunRefused(f"FROM {local_and_utc(first, zone)} is after TO "
                           f"{local_and_utc(last, zone)}: swap them (ORDER=reverse delivers "
                           "the newest first)")
    if last > now:
        raise RerunRefused(f"TO {local_and_utc(last, zone)} is in the future: give TO at or "
                           f"before now ({local_and_utc(now, zone)}); only runs that were due "
                           "can be backfilled")
    retention = timedelta(seconds=cfg.dedup.retention_seconds)
    if mode != ALL and first < now - retention:
        raise RerunRefused(
            f"FROM {local_and_utc(first, zone)} is older than the records' retention "
            f"({cfg.dedup.retention_seconds} s): the TTL policy may have deleted the records "
            f"of runs before {local_and_utc(now - retention, zone)}, so MODE={mode} cannot tell "
            f"what became of them; give FROM at or after "
            f"{local_and_utc(now - retention, zone)}, or MODE=all to re-run every run of the "
            "range whatever its records say")
    times = range_runs(job, first, last)
    if not times:
        raise RerunRefused(f"job {job.name} ({job.schedule!r} in {job.time_zone}) has no "
                           f"scheduled run from {local_and_utc(first, zone)} to "
                           f"{local_and_utc(last, zone)}")
    backfills = FirestoreBackfills(stores.watch, backfills_collection(cfg.dedup.collection))
    existing = backfills.get(job.name)
    ident = backfill_id(cfg.project, cfg.region, job.name, first, last, mode, order)
    queue = stores.reruns()
    asked: dict[str, list[RerunRequest]] = {}
    for request in queue.for_job(job.name):
        asked.setdefault(request.base_run_id, []).append(request)
    base = {t: RunKey(cfg.project, cfg.region, job.name, t).run_id for t in times}
    through = {t: max((r.generation for r in asked.get(base[t], [])), default=-1)
               for t in times}
    found = generations_of(job_records(cfg, stores, settings), cfg.project, cfg.region,
                           job.name, through)
    grace = float(cfg.watchdog.grace_seconds)
    chosen: list[Chosen] = []
    for t in times:
        records = found[t]
        latest = records.get(max(records)) if records else None
        if mode == MISSING and (records or now < verdict_due_at(job, t, grace)):
            continue  # it ran, or Scheduler may still deliver it
        if mode == FAILED_RUNS and (
                latest is None or latest.record.status is not RunStatus.FAILED):
            continue
        try:
            plan = plan_rerun(job, t, asked.get(base[t], []), records, now=now,
                              grace_seconds=grace, again=again)
        except RerunRefused as refused:
            chosen.append(Chosen(t, _state(records), skipped=str(refused)))
            continue
        chosen.append(Chosen(t, _state(records), plan.generation))
    if order == REVERSE:
        chosen.reverse()
    queued = [c for c in chosen if c.generation is not None]
    backfill = Backfill(
        backfill_id=ident, project=cfg.project, location=cfg.region, job=job.name,
        first=first, last=last, mode=mode, order=order, reason=reason.strip(),
        requested_by=requested_by, requested_at=now, total=len(queued),
        stop_on_failure=stop_on_failure,
    )
    return Planned(backfill, tuple(chosen), len(times), existing, job.time_zone,
                   settings.runtime)


def queue_backfill(cfg: StackConfig, stores: RunStores, planned: Planned,
                   now: datetime) -> str:
    """Write the plan (one commit); what happened, one line. The same backfill already
    there is not written again; another one active for the job is refused."""
    backfill, existing = planned.backfill, planned.existing
    backfills = FirestoreBackfills(stores.watch, backfills_collection(cfg.dedup.collection))
    if isinstance(existing, Stored) and isinstance(existing.value, Backfill):
        current = existing.value
        if current.backfill_id == backfill.backfill_id and current.state == ACTIVE:
            return f"already queued: {status_line(current)}; nothing queued again"
        if current.state == ACTIVE:
            raise RerunRefused(
                f"job {backfill.job} has an active backfill already ({status_line(current)}): "
                "wait until it has finished (make backfill-status), or cancel it "
                "(make backfill-cancel)")
    if not planned.queued:
        return "nothing to queue"
    runs = [PlannedRun(c.schedule_time, c.generation) for c in planned.queued
            if c.generation is not None]
    try:
        backfills.create(backfill, runs, now, existing)
    except RecordExists:
        # Written a moment ago: by this command (its reply lost) or someone else.
        again = backfills.get(backfill.job)
        if again is not None and isinstance(again.value, Backfill) and (
                again.value.backfill_id == backfill.backfill_id):
            return f"queued: {status_line(again.value)}"
        raise RerunRefused(f"job {backfill.job}'s backfill was written a moment ago by "
                           "someone else: see make backfill-status") from None
    return f"queued: {status_line(backfill)}"


def status_line(backfill: Backfill) -> str:
    return (f"backfill {backfill.backfill_id[:12]} of {backfill.job} "
            f"{backfill.first.astimezone(UTC):%Y-%m-%dT%H:%MZ}.."
            f"{backfill.last.astimezone(UTC):%Y-%m-%dT%H:%MZ}, mode {backfill.mode}, "
            f"{backfill.order}{', stop on failure' if backfill.stop_on_failure else ''}: "
            f"{backfill.state}, {backfill.done} done, {backfill.failed} "
            f"failed, {backfill.refused} refused, {len(backfill.in_flight)} in flight, "
            f"{backfill.next}/{backfill.total} released")


def show_status(cfg: StackConfig, stores: RunStores, job_name: str, out: TextIO) -> int:
    [job] = watched_jobs(cfg, job_name)
    backfills = FirestoreBackfills(stores.watch, backfills_collection(cfg.dedup.collection))
    stored = backfills.get(job.name)
    if stored is None:
        out.write(f"{job.name}: no backfill\n")
        return 0
    if isinstance(stored.value, MalformedBackfill):
        out.write(f"{job.name}: the backfill document is no backfill ({stored.value.reason}); "
                  "the watchdog refuses it\n")
        return 1
    backfill = stored.value
    out.write(status_line(backfill) + "\n")
    if (runtime := cfg.runtime_of(stack_job(cfg, job.name))) is not None:
        out.write(f"  runs in runtime {runtime.name} (function "
                  f"{cfg.runtime_function_name(runtime)}, records in database "
                  f"{cfg.runtime_database(runtime)})\n")
    asked_at = f"{backfill.requested_at:%Y-%m-%d %H:%M}Z"
    out.write(f"  asked by {backfill.requested_by} at {asked_at}: {backfill.reason}\n")
    if backfill.stopped_at is not None:
        out.write(f"  stopped at its failed run {backfill.stopped_at:%Y-%m-%dT%H:%M:%S}Z: "
                  f"{backfill.last_error}; nothing after it was released. Once its cause "
                  "is fixed: make rerun TIME=<that run>, then make backfill again with "
                  "FROM=<the run after it> and the same TO and MODE\n")
    elif backfill.last_error:
        out.write(f"  last error: {backfill.last_error}\n")
    if backfill.finished_at is not None:
        out.write(f"  {backfill.state} at {backfill.finished_at:%Y-%m-%d %H:%M}Z\n")
    return 0


def cancel(cfg: StackConfig, stores: RunStores, job_name: str, now: datetime) -> str:
    [job] = watched_jobs(cfg, job_name)
    backfills = FirestoreBackfills(stores.watch, backfills_collection(cfg.dedup.collection))
    for _ in range(5):  # a tick may write it meanwhile: read again and retry
        stored = backfills.get(job.name)
        if stored is None or not isinstance(stored.value, Backfill) or (
                stored.value.state != ACTIVE):
            return f"{job.name}: no active backfill"
        stored.value.state = CANCELLED
        stored.value.finished_at = now
        try:
            backfills.update(stored.value, stored.version, now)
        except RecordChanged:
            continue
        return (f"cancelled: {status_line(stored.value)}; the runs in flight finish, no "
                "other is released")
    raise RerunRefused("the backfill kept changing under the cancel: ask again")


def print_plan(planned: Planned, out: TextIO, *, dry_run: bool) -> None:
    backfill = planned.backfill
    zone = ZoneInfo(planned.zone)
    out.write(
        f"{'dry run: ' if dry_run else ''}backfill of {backfill.job}"
        f"{f' (runtime {planned.runtime})' if planned.runtime else ''} from "
        f"{local_and_utc(backfill.first, zone)} to {local_and_utc(backfill.last, zone)}, mode "
        f"{backfill.mode}, {backfill.order}: {planned.scheduled} scheduled run(s), "
        f"{len(planned.queued)} to queue, {len(planned.skipped)} skipped\n")
    shown = planned.queued if dry_run else planned.queued[:5]
    for c in shown:
        out.write(f"  queue {local_and_utc(c.schedule_time, zone, 'seconds')} generation "
                  f"{c.generation} ({c.before})\n")
    if len(shown) < len(planned.queued):
        out.write(f"  ... and {len(planned.queued) - len(shown)} more (DRY_RUN=1 lists "
                  "them all)\n")
    for c in planned.skipped:
        out.write(f"  skip  {local_and_utc(c.schedule_time, zone, 'seconds')} ({c.before}): "
                  f"{c.skipped}\n")


def main(
    argv: Sequence[str] | None = None, *, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
    now: datetime | None = None, client_factory: Callable[..., Any] | None = None,
) -> int:
    parser = argparse.ArgumentParser(
        prog="scheduler-dedup backfill", description="Queue the runs of a range for one "
        "more execution each (the watchdog delivers them at a bounded rate, exactly once).")
    parser.add_argument("stack", help="stack name (Pulumi.<stack>.yaml) or stack file path")
    parser.add_argument("--job", required=True, help="the job (jobs[].name)")
    parser.add_argument("--from", dest="first", metavar="RFC3339",
                        help="the range's first schedule time, e.g. 2026-11-30T00:00:00+01:00")
    parser.add_argument("--to", dest="last", metavar="RFC3339",
                        help="the range's last schedule time (at or before now)")
    parser.add_argument("--mode", default=MISSING, help="missing (default), failed or all")
    parser.add_argument("--order", default=FORWARD, help="forward (default) or reverse")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the runs it would queue; write nothing")
    parser.add_argument("--reason", default="", help="why the runs must execute")
    parser.add_argument("--requested-by", default=os.environ.get("REQUESTED_BY"),
                        help="who asks (default: REQUESTED_BY, the ADC account, "
                        "git's user.email or $USER)")
    parser.add_argument("--again", action="store_true", default=confirmed(),
                        help="re-run runs that re-runs executed already (CONFIRM=1)")
    parser.add_argument("--stop-on-failure", action="store_true",
                        help="stop releasing runs at the first failed run (STOP_ON_FAILURE=1)")
    parser.add_argument("--status", action="store_true", help="show the job's backfill")
    parser.add_argument("--cancel", action="store_true", help="cancel the job's backfill")
    args = parser.parse_args(argv)
    import google.auth.exceptions

    cfg: StackConfig | None = None
    try:
        cfg = stack_config(args.stack)
        stores = open_store(cfg, client_factory)
        if args.status:
            return show_status(cfg, stores, args.job, out)
        if args.cancel:
            out.write(cancel(cfg, stores, args.job, now or datetime.now(UTC)) + "\n")
            return 0
        if not args.first or not args.last:
            raise RerunRefused("FROM and TO are required: the first and last schedule time "
                               "of the range, e.g. FROM=2026-11-30T00:00:00+01:00 "
                               "TO=2026-11-30T12:00:00+01:00")
        moment = now or datetime.now(UTC)
        planned = plan_backfill(
            cfg, stores, job_name=args.job, first_text=args.first, last_text=args.last,
            mode=args.mode, order=args.order, reason=args.reason,
            requested_by=who_asks(args.requested_by), now=moment, again=args.again,
            dry_run=args.dry_run, stop_on_failure=args.stop_on_failure,
        )
        print_plan(planned, out, dry_run=args.dry_run)
        if args.dry_run:
            out.write("dry run: nothing written\n")
            return 0
        out.write(queue_backfill(cfg, stores, planned, moment) + "\n")
        out.write(f"`make backfill-status STACK={args.stack} JOB={args.job}` shows its "
                  "progress; the watchdog releases its runs at each tick.\n")
        return 0
    except (RunsError, RerunRefused) as exc:
        err.write(f"make backfill: {exc}\n")
        return 2
    except (StoreError, google.auth.exceptions.GoogleAuthError) as exc:
        if cfg is None:
            raise
        err.write(store_failure("make backfill", "read or write the runs", cfg, exc))
        return 1


if __name__ == "__main__":
    from operator_tools import not_an_entry_point

    not_an_entry_point("backfill")

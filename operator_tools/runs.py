"""`make runs STACK=dev`: per job, the last N expected runs and what became of them.

    python -m operator_tools runs STACK [--last N] [--job NAME] [--at RFC3339]

STACK is a stack name (`Pulumi.<stack>.yaml`) or the path of a stack file. For every job
of the stack the expected runs come from its cron and time zone (DST included), exactly as
the watchdog computes them; their records are read by ID in one batch per job (no query,
no index) from the database of that job's records (StackConfig.records_database_of: the
dedup database, the proxy's own for a proxied job, its runtime's own for a job in a
runtime, which its heading names; the watchdog's cursors and the re-run requests from the
watchdog's own database, `<databaseName>-watchdog`), and each run gets the
watchdog's own verdict
(`dedup.watchdog.verdicts.classify_run`): ok, not_due, running, missed, failed, overlong (ok or
failed with `+ran_twice` when the record shows a second execution, dedup.watchdog.ran_twice),
malformed (a document that is no run record, its reason on a line under its row), or
before_first_run (the job's first recorded run, from the watchdog's cursor or else the
earliest record shown, is later: the watchdog does not judge it); never_ran when neither
exists (no record among the runs shown and no watchdog cursor); paused for a paused job's
runs without a record; `ok (generation N)` for a missed, failed or overlong run whose re-run
(`make rerun`, a backfill) completed: it executed, late. A failed run's last error (the
record's `error`) is printed on a line of its own under its row, as are a forced run kept
apart and the run's re-runs.
A problem verdict the watchdog judged during a silence (`make silence`, or a window the stack
config declares; function/dedup/watchdog/silences.py) reads `(silenced)`: logged, paging
nobody; a job silenced now says until when, by whom and why under its heading.

`--at` judges the runs as at another instant than now (the expected runs are the last N at
or before it, their verdicts as the watchdog would give them then): `make demo
DEMO_ARGS=--keep` replays a window ahead of the clock, and prints the `--at` that reads it.

Reads only. Firestore is the Firestore emulator when FIRESTORE_EMULATOR_HOST is set (the
demo), otherwise the stack's real database with Application Default Credentials.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO
from zoneinfo import ZoneInfo

from dedup.keys import RunKey
from dedup.settings import SettingsError
from dedup.store import MalformedRun, RunStatus, StoredRun, StoreError
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.due import WatchedJob, rfc3339, verdict_due_at
from dedup.watchdog.ran_twice import RAN_TWICE, second_execution
from dedup.watchdog.reruns import FirestoreRerunQueue, RerunRequest, reruns_collection
from dedup.watchdog.settings import CURSOR_SUFFIX, parse_watch_jobs
from dedup.watchdog.silences import (
    FirestoreSilences,
    OperatorSilence,
    SilenceBook,
    silences_collection,
)
from dedup.watchdog.verdicts import (
    BEFORE_FIRST_RUN,
    FAILED,
    FINE,
    MALFORMED,
    MISSED,
    NEVER_RAN,
    OVERLONG,
    classify_run,
    running_seconds,
)
from dedup.watchdog.windows import Window, parse_windows
from infra.config import ConfigError, JobSettings, StackConfig, load_config
from infra.watchdog import watch_jobs
from operator_tools.offline import load_stack_config, stack_names

DEFAULT_LAST = 10
ADC_HINT = (
    "run `gcloud auth application-default login` (and check the project and database "
    "exist), or set FIRESTORE_EMULATOR_HOST to read the Firestore emulator"
)
HEADERS = ("SCHEDULED (UTC)", "LOCAL", "STATUS", "ATTEMPTS", "DURATION", "VERDICT")


class RunsError(Exception):
    """A one-line reason `make runs` cannot show the runs."""


class RunStores:
    """The stack's records, where each kind lives: the dedup database (the dedup
    function's records), the watchdog's own database (`watch`: its cursors and the re-run
    requests, `<databaseName>-watchdog`; by default the dedup store, as the demo keeps
    them) and, for a job whose records are elsewhere (a proxied job: the proxy's own
    database; a job in a runtime: the runtime's own), a store on that database, opened on
    first use by `open_database`. Which database holds a job's records is the stack's
    answer (`job_records`: StackConfig.records_database_of)."""

    def __init__(
        self,
        dedup: FirestoreRunStore,
        open_database: Callable[[str], FirestoreRunStore] | None = None,
        watch: FirestoreRunStore | None = None,
    ) -> None:
        self.dedup = dedup
        self.watch = watch or dedup
        self._open = open_database or self._on_the_same_client
        self._opened: dict[str, FirestoreRunStore] = {}

    def reruns(self) -> FirestoreRerunQueue:
        """`make rerun`'s requests, in the watchdog's own database."""
        return FirestoreRerunQueue(self.watch, reruns_collection(self.dedup.collection))

    def records(self, job: WatchedJob) -> FirestoreRunStore:
        """Where `job`'s run records are, as its watchdog job table entry says (its
        `database`, written from StackConfig.records_database_of; the kit's tools ask
        `job_records`, which asks the stack itself)."""
        return self.in_database(job.database)

    def in_database(self, database: str | None) -> FirestoreRunStore:
        """The records of `database`; None: the dedup database's (`dedup`)."""
        if database is None:
            return self.dedup
        if database not in self._opened:
            self._opened[database] = self._open(database)
        return self._opened[database]

    def _on_the_same_client(self, database: str) -> FirestoreRunStore:
        """Same project (and ambient credentials or emulator) and collection as the dedup
        store, other database."""
        from google.cloud import firestore

        other = firestore.Client(project=self.dedup.client.project, database=database)
        return FirestoreRunStore(other, self.dedup.collection, self.dedup.timeout)


def stack_config(stack: str, directory: Path | None = None) -> StackConfig:
    """The validated config of a stack, by name or stack-file path."""
    try:
        values = (load_stack_config(stack) if directory is None
                  else load_stack_config(stack, directory))
    except FileNotFoundError:
        known = ", ".join(stack_names() if directory is None else stack_names(directory))
        raise RunsError(f"unknown stack {stack!r} (stacks: {known or 'none'})") from None
    except ValueError as exc:
        raise RunsError(f"stack {stack!r}: {exc}") from None
    try:
        return load_config(values)
    except ConfigError as exc:
        raise RunsError(f"stack {stack!r} has an invalid config: {exc}") from None


def watched_jobs(cfg: StackConfig, only: str | None = None) -> tuple[WatchedJob, ...]:
    """The stack's jobs as the watchdog sees them (its job table, deployed IDs)."""
    jobs = parse_watch_jobs(json.dumps(watch_jobs(cfg)))
    if only is None:
        return jobs
    wanted = {only, f"{cfg.name_prefix}-{only}"}  # jobs[].name or the deployed job ID
    chosen = tuple(job for job in jobs if job.name in wanted)
    if not chosen:
        names = ", ".join(job.name.removeprefix(f"{cfg.name_prefix}-") for job in jobs)
        raise RunsError(f"no job {only!r} in the stack (jobs: {names})")
    return chosen


def stack_job(cfg: StackConfig, job_id: str) -> JobSettings:
    """The stack file's job deployed as `job_id` (a WatchedJob's name)."""
    return next(j for j in cfg.jobs if cfg.job_id(j) == job_id)


def job_records(cfg: StackConfig, stores: RunStores, job: JobSettings) -> FirestoreRunStore:
    """The store of `job`'s run records: the database StackConfig.records_database_of
    names (the dedup database, the proxy's own, or the job's runtime's own: a record of
    the same run in any other database is not this job's)."""
    database = cfg.records_database_of(job)
    return stores.in_database(None if database == cfg.dedup.database_name else database)


def expected_runs(job: WatchedJob, now: datetime, last: int) -> list[datetime]:
    """The last `last` schedule times at or before `now`, newest first."""
    span = timedelta(hours=1)
    while True:
        times = list(job.schedule_times(now - span, now))
        if len(times) >= last or span > timedelta(days=800):
            return times[::-1][:last]
        span *= 4


def _duration(t: datetime, stored: StoredRun | None, now: datetime) -> str:
    if stored is None:
        return "-"
    record = stored.record
    if record.status is RunStatus.COMPLETED and record.duration_seconds is not None:
        return _seconds(record.duration_seconds)
    if record.status is RunStatus.FAILED and record.failed_at and record.claimed_at:
        return _seconds((record.failed_at - record.claimed_at).total_seconds())
    if record.status is RunStatus.IN_PROGRESS:
        return _seconds(running_seconds(t, stored, now)) + "+"
    return "-"


def _seconds(value: float) -> str:
    value = max(0.0, value)
    if value < 60:
        return f"{value:.1f}s"
    if value < 3600:
        return f"{int(value // 60)}m{int(value % 60):02d}s"
    return f"{int(value // 3600)}h{int(value % 3600 // 60):02d}m"


def job_table(
    job: WatchedJob, project: str, location: str,
    read: Mapping[str, StoredRun | MalformedRun], times: Sequence[datetime], now: datetime,
    grace_seconds: float, first_run: datetime | None,
) -> list[tuple[str, ...]]:
    zone = ZoneInfo(job.time_zone)
    ids = {t: RunKey(project, location, job.name, t).run_id for t in times}
    found = {r: stored for r, stored in read.items() if isinstance(stored, StoredRun)}
    if first_run is None:  # no watchdog cursor yet: the earliest record shown
        recorded = [t for t in times if ids[t] in found]
        first_run = min(recorded) if recorded else None
    rows: list[tuple[str, ...]] = []
    for t in times:
        if isinstance(read.get(ids[t]), MalformedRun):  # no record: the watchdog's verdict
            rows.append((t.strftime("%Y-%m-%d %H:%M:%SZ"),
                         t.astimezone(zone).strftime("%Y-%m-%d %H:%M %Z"),
                         MALFORMED, "-", "-", MALFORMED))
            continue
        stored = found.get(ids[t])
        verdict = "paused" if job.paused and stored is None else classify_run(
            job, t, stored, now, grace_seconds, first_run
        )
        if verdict == BEFORE_FIRST_RUN and first_run is None:
            verdict = NEVER_RAN  # no record of the job at all in what is shown
        if verdict in (FINE, FAILED) and second_execution(stored) is not None:
            verdict += f"+{RAN_TWICE}"  # the watchdog's ran_twice (dedup.watchdog.ran_twice)
        rows.append((
            t.strftime("%Y-%m-%d %H:%M:%SZ"),
            t.astimezone(zone).strftime("%Y-%m-%d %H:%M %Z"),
            # forced: a forced run that replaced it ("Run now", forcedRuns replaceNext)
            "-" if stored is None else str(stored.record.status) + (
                " (forced)" if stored.record.forced else ""),
            "-" if stored is None else str(stored.record.attempts),
            _duration(t, stored, now),
            verdict,
        ))
    return rows


def mark_silenced(
    rows: Sequence[tuple[str, ...]], job: WatchedJob, times: Sequence[datetime],
    grace_seconds: float, stack_windows: Sequence[Window],
    operator: Sequence[OperatorSilence],
) -> list[tuple[str, ...]]:
    """A problem verdict `(silenced)` where the watchdog judged it in a silence (at its
    verdict's due time): logged, paging nobody (function/dedup/watchdog/silences.py)."""
    marked: list[tuple[str, ...]] = []
    for row, t in zip(rows, times, strict=True):
        if row[-1].split("+")[0] in (MISSED, FAILED, OVERLONG) and SilenceBook(
                stack_windows, operator, verdict_due_at(job, t, grace_seconds)).of(job) is not None:
            row = (*row[:-1], f"{row[-1]} (silenced)")
        marked.append(row)
    return marked


def mark_rerun_completed(
    rows: Sequence[tuple[str, ...]], times: Sequence[datetime], completed: Mapping[datetime, int],
) -> list[tuple[str, ...]]:
    """A missed, failed or overlong run whose re-run completed reads `ok (generation N)`:
    it executed, late (its own record, in STATUS, stays as it ended; the generations are on
    the lines under it)."""
    marked: list[tuple[str, ...]] = []
    for row, t in zip(rows, times, strict=True):
        if row[-1].split("+")[0].split(" ")[0] in (MISSED, FAILED, OVERLONG) and t in completed:
            row = (*row[:-1], f"{FINE} (generation {completed[t]})")
        marked.append(row)
    return marked


def format_table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in [HEADERS, *rows]) for i in range(len(HEADERS))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in [HEADERS, *rows]]


def show_runs(
    cfg: StackConfig,
    stores: RunStores,
    *,
    last: int = DEFAULT_LAST,
    only: str | None = None,
    now: datetime | None = None,
    out: TextIO = sys.stdout,
) -> None:
    """Print, per job, its last `last` expected runs with record and watchdog verdict."""
    now = now or datetime.now(UTC)
    grace = float(cfg.watchdog.grace_seconds)
    jobs = watched_jobs(cfg, only)
    stack_jobs = {cfg.job_id(j): j for j in cfg.jobs}
    cursors = _first_runs(
        stores.watch, cfg.dedup.collection + CURSOR_SUFFIX, [j.name for j in jobs]
    )
    operator: list[OperatorSilence] = FirestoreSilences(
        stores.watch, silences_collection(cfg.dedup.collection)).read_all()[0] if (
        cfg.watchdog.enabled) else []
    # The stack's windows as the watchdog reads them (DEDUP_WATCH_SILENCES; a job's are in
    # its job table entry, `job.silences`).
    stack_windows = parse_windows([w.table_entry() for w in cfg.watchdog.silences],
                                  "watchdog.silences")
    out.write(f"project {cfg.project}, database {cfg.dedup.database_name}, collection "
              f"{cfg.dedup.collection}; now {now.strftime('%Y-%m-%d %H:%M:%SZ')}, watchdog "
              f"grace {grace:g}s\n")
    for job in jobs:
        times = expected_runs(job, now, last)
        ids = [RunKey(cfg.project, cfg.region, job.name, t).run_id for t in times]
        # Forced runs kept apart (forcedRuns separate) carry the time of the run they
        # preceded: read with it, shown under it.
        forced = {t: RunKey(cfg.project, cfg.region, job.name, t, forced=True).run_id
                  for t in times}
        settings = stack_jobs[job.name]
        database = cfg.records_database_of(settings)
        records = job_records(cfg, stores, settings)
        read = records.get_many([*ids, *forced.values()]) if ids else {}
        found = {r: stored for r, stored in read.items() if isinstance(stored, StoredRun)}
        paused = ", paused" if job.paused else ""
        # Named only where it is not the stack's default function and dedup database, so
        # a stack without proxy or runtimes reads as it always has.
        runtime = f", runtime {settings.runtime}" if settings.runtime else ""
        elsewhere = (f", records in database {database}"
                     if database != cfg.dedup.database_name else "")
        out.write(f"\n{job.name}  ({job.schedule}, {job.time_zone}, retry window "
                  f"{job.retry_window_seconds:g}s, attempt deadline "
                  f"{job.attempt_deadline_seconds:g}s{paused}{runtime}{elsewhere})\n")
        rows = job_table(job, cfg.project, cfg.region, read, times, now, grace,
                         cursors.get(job.name))
        rows = mark_silenced(rows, job, times, grace, stack_windows, operator)
        extra, completed = generation_lines(stores, job, times, now, records)
        rows = mark_rerun_completed(rows, times, completed)
        if (silence := SilenceBook(stack_windows, operator, now).of(job)) is not None:
            out.write(f"  silenced until {rfc3339(silence.until)} by {silence.by}: "
                      f"{silence.reason} (problems logged, nothing paged)\n")
        for t, run_id in forced.items():
            if (record := found.get(run_id)) is not None:
                extra.setdefault(t, []).insert(0, forced_line(record, t, now))
        for t, run_id in zip(times, ids, strict=True):
            if isinstance(unread := read.get(run_id), MalformedRun):
                extra.setdefault(t, []).insert(0, f"{unread}: not judged")
            if (line := error_line(found.get(run_id))) is not None:
                extra.setdefault(t, []).insert(0, line)  # the row's own, first
            if (line := overlap_line(found.get(run_id))) is not None:
                extra.setdefault(t, []).insert(0, line)
        header, *lines = format_table(rows)
        out.write(f"  {header}\n")
        for t, line in zip(times, lines, strict=True):
            out.write(f"  {line}\n")
            for more in extra.get(t, []):
                out.write(f"    {more}\n")


def error_line(stored: StoredRun | None) -> str | None:
    """The last error of a failed run, on a line of its own under its row (the record's
    `error`: one line of what the job raised, at most MAX_ERROR_CHARS characters)."""
    if stored is None or stored.record.status is not RunStatus.FAILED:
        return None
    record = stored.record
    final = ", permanent: no retry" if record.permanent else ""
    return (f"last error (attempt {record.attempts}{final}): "
            f"{record.error or '(none recorded)'}")


def overlap_line(stored: StoredRun | None) -> str | None:
    """Why the job's overlap policy kept a run from running: the run that held it off."""
    if stored is None:
        return None
    record = stored.record
    if record.status is RunStatus.SKIPPED:
        return f"skipped (overlap: forbid): run {record.blocked_by} of the job held a claim"
    if record.replaced_by is not None:
        return f"asked to stop (overlap: replace) for run {record.replaced_by}"
    return None


def forced_line(stored: StoredRun, t: datetime, now: datetime) -> str:
    """A forced run ("Run now") of the job before the run of `t`, kept apart from it."""
    record = stored.record
    error = f": {record.error}" if record.error else ""
    return (f"forced run (Run now, before this run): {record.status}, "
            f"{record.attempts} attempt(s), {_duration(t, stored, now)}{error}")


def generation_lines(
    stores: RunStores, job: WatchedJob, times: Sequence[datetime], now: datetime,
    records_of_job: FirestoreRunStore,
) -> tuple[dict[datetime, list[str]], dict[datetime, int]]:
    """Per run shown, one line per re-run request (`make rerun`): its generation, what
    became of it (its record in `records_of_job`, the job's records), who asked and why;
    and per run, its latest generation that completed, if one did."""
    shown = set(times)
    queue = stores.reruns()
    requests = [r for r in queue.for_job(job.name) if r.schedule_time in shown]
    records = (records_of_job.get_many([r.request_id for r in requests])
               if requests else {})
    lines: dict[datetime, list[str]] = {}
    completed: dict[datetime, int] = {}
    for request in requests:
        stored = records.get(request.request_id)
        lines.setdefault(request.schedule_time, []).append(
            _generation_line(request, stored, now)
        )
        if isinstance(stored, StoredRun) and stored.record.status is RunStatus.COMPLETED:
            completed[request.schedule_time] = max(
                request.generation, completed.get(request.schedule_time, 0))
    return lines, completed


def _generation_line(
    request: RerunRequest, stored: StoredRun | MalformedRun | None, now: datetime
) -> str:
    if isinstance(stored, MalformedRun):
        state = str(stored)
    elif stored is None:
        state = f"request {request.status}" + (
            f" ({request.outcome})" if request.outcome else ""
        )
    else:
        record = stored.record
        state = (f"{record.status}, {record.attempts} attempt(s), "
                 f"{_duration(request.schedule_time, stored, now)}")
        if record.status is RunStatus.FAILED:  # its last error, as under a run's row
            state += f" ({record.error or 'no error recorded'})"
    return (f"+ generation {request.generation}: {state}; asked by {request.requested_by} "
            f"at {request.requested_at:%Y-%m-%d %H:%MZ}: {request.reason}")


def _first_runs(runs: FirestoreRunStore, collection: str, jobs: Sequence[str]) -> dict[
    str, datetime
]:
    """The watchdog's record of each job's first run (its cursor), where it has one."""
    def op() -> dict[str, datetime]:
        refs = [runs.client.collection(collection).document(job) for job in jobs]
        snapshots: Any = runs.client.get_all(refs, retry=runs.retry, timeout=runs.timeout)
        first: dict[str, datetime] = {}
        for snapshot in snapshots:
            data = snapshot.to_dict() if snapshot.exists else None
            if data and isinstance(data.get("first_run"), datetime):
                first[snapshot.id] = data["first_run"]
        return first

    return runs.call(op) if jobs else {}


def open_store(cfg: StackConfig, client_factory: Callable[..., Any] | None = None) -> (
    RunStores
):
    """The stack's run records: the emulator if FIRESTORE_EMULATOR_HOST is set, else ADC."""
    import google.auth.exceptions
    from google.cloud import firestore

    factory = client_factory or firestore.Client

    def open_database(database: str) -> FirestoreRunStore:
        try:
            client = factory(project=cfg.project, database=database)
        except google.auth.exceptions.GoogleAuthError as exc:
            raise RunsError(
                f"no Google Cloud credentials ({first_line(exc)}): {ADC_HINT}"
            ) from None
        return FirestoreRunStore(client, cfg.dedup.collection, cfg.dedup.store_timeout_seconds)

    watch = open_database(cfg.dedup.watch_database_name) if cfg.watchdog.enabled else None
    return RunStores(open_database(cfg.dedup.database_name), open_database, watch)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def store_failure(
    command: str, action: str, cfg: StackConfig, exc: BaseException, hint: str = ""
) -> str:
    """The one line a command prints when Firestore failed it: what it could not do, in
    which of the stack's databases (the proxy's and the runtimes' too, where their jobs'
    records are), the error's first line and how to get access."""
    databases = [cfg.dedup.database_name]
    if cfg.proxied_jobs:
        databases.append(cfg.dedup.proxy_database_name)
    databases += [cfg.runtime_database(r) for r in cfg.runtimes  # those its jobs run in
                  if any(job.runtime == r.name for job in cfg.jobs)]
    if cfg.watchdog.enabled:  # the watchdog's cursors and the re-run requests
        databases.append(cfg.dedup.watch_database_name)
    names = [repr(d) for d in databases]
    where = f"database{'s' if len(names) > 1 else ''} " + (
        f"{', '.join(names[:-1])} and {names[-1]}" if len(names) > 1 else names[0])
    return (f"{command}: cannot {action} in {where} of project {cfg.project!r}: "
            f"{first_line(exc)}; {ADC_HINT}{hint}\n")


def instant(text: str) -> datetime:
    """--at: an RFC 3339 instant with its UTC offset (Z or +01:00)."""
    try:
        value = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an RFC 3339 time, e.g. 2026-11-30T09:15:00Z") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no UTC offset: add it, e.g. {text.strip()}Z")
    return value.astimezone(UTC)


def main(
    argv: Sequence[str] | None = None,
    *,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    now: datetime | None = None,
    client_factory: Callable[..., Any] | None = None,
) -> int:
    parser = argparse.ArgumentParser(
        prog="scheduler-dedup runs",
        description="The last expected runs of a stack's jobs, "
        "with their records and the watchdog's verdict.")
    parser.add_argument("stack", help="stack name (Pulumi.<stack>.yaml) or stack file path")
    parser.add_argument("--last", type=int, default=DEFAULT_LAST, metavar="N",
                        help=f"expected runs per job (default {DEFAULT_LAST})")
    parser.add_argument("--job", metavar="NAME", help="only this job (jobs[].name)")
    parser.add_argument("--at", type=instant, metavar="RFC3339",
                        help="judge the runs as at this instant (default: now), e.g. the end "
                        "of the window `make demo DEMO_ARGS=--keep` replayed")
    args = parser.parse_args(argv)
    if args.last < 1:
        parser.error("--last must be at least 1")
    import google.auth.exceptions

    try:
        cfg = stack_config(args.stack)
        stores = open_store(cfg, client_factory)
    except RunsError as exc:
        err.write(f"make runs: {exc}\n")
        return 2
    try:
        show_runs(cfg, stores, last=args.last, only=args.job, now=args.at or now, out=out)
    except RunsError as exc:
        err.write(f"make runs: {exc}\n")
        return 2
    except (StoreError, SettingsError, google.auth.exceptions.GoogleAuthError) as exc:
        err.write(store_failure("make runs", "read the runs", cfg, exc))
        return 1
    return 0


if __name__ == "__main__":
    from operator_tools import not_an_entry_point

    not_an_entry_point("runs")

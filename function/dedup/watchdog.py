"""The run watchdog: every expected run accounted for.

A run's ID is derived from (project, location, job, schedule time), and each job's cron and
time zone are known (DEDUP_WATCH_JOBS), so "did the run of 02:30 Berlin time happen?" is a
point lookup by ID: no query, no index. Each tick, for every job that is not paused:

- the schedule times whose verdict became due since the previous tick (schedule time +
  retry window + grace <= now), bounded by the lookback, are read by ID in batches and
  judged: no record -> `missed`; `failed` -> `failed`; `completed` -> fine; `in_progress`
  -> watched until it finishes, `overlong` once it has run longer than its attempt
  deadline + grace (reported once);
- runs before the job's first recorded run are not judged (the job did not exist yet); a
  job with no record at all is reported once as `never_ran`.

The watchdog reads run records only; it writes one cursor document per job in
`<collection>_watchdog` (the last judged schedule time, the in-progress runs it still
watches, the overlong runs already reported), so each problem is reported once. Problems
are logged before the cursor moves: a tick that fails halfway answers 500 and the retry may
report a problem a second time, never zero times.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from google.cloud import firestore

from dedup.firestore_store import FirestoreRunStore
from dedup.http import HttpReply, emit_log_line, refuse_caller
from dedup.keys import RunKey, lower_keys
from dedup.settings import Settings, SettingsError, number_setting
from dedup.store import RunStatus, StoredRun, StoreError, StoreUnavailable

JOBS_ENV = "DEDUP_WATCH_JOBS"
LOOKBACK_ENV = "DEDUP_WATCH_LOOKBACK_SECONDS"
GRACE_ENV = "DEDUP_WATCH_GRACE_SECONDS"
CURSOR_SUFFIX = "_watchdog"
DEFAULT_LOOKBACK_SECONDS = 2 * 24 * 3600.0
DEFAULT_GRACE_SECONDS = 300.0

MISSED, FAILED, OVERLONG, NEVER_RAN = "missed", "failed", "overlong", "never_ran"
# Verdicts that are not problems (classify_run; shown by `make runs`).
FINE, NOT_DUE, RUNNING, BEFORE_FIRST_RUN = "ok", "not_due", "running", "before_first_run"
PROBLEM_SEVERITY = {MISSED: "ERROR", FAILED: "ERROR", NEVER_RAN: "ERROR", OVERLONG: "WARNING"}
_JOB_KEYS = {
    "name", "schedule", "timeZone", "attemptDeadlineSeconds", "retryWindowSeconds", "paused",
}


@dataclass(frozen=True)
class WatchedJob:
    """One Scheduler job as the watchdog sees it (one entry of DEDUP_WATCH_JOBS)."""

    name: str  # the Scheduler job ID (X-CloudScheduler-JobName's last segment)
    schedule: str  # 5-field unix-cron
    time_zone: str = "Etc/UTC"
    attempt_deadline_seconds: float = 180.0
    retry_window_seconds: float = 0.0  # after the schedule time, retries may still come
    paused: bool = False

    def schedule_times(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """The scheduled instants in (after, until], aware UTC, as croniter yields them in
        the job's time zone (the same computation as the kit's Scheduler emulator)."""
        it = croniter(self.schedule, after.astimezone(ZoneInfo(self.time_zone)))
        while True:
            instant: datetime = it.get_next(datetime).astimezone(UTC)
            if instant > until:
                return
            yield instant


@dataclass(frozen=True)
class WatchSettings:
    store: Settings  # the DEDUP_* store settings, as the function reads them
    jobs: tuple[WatchedJob, ...]
    lookback_seconds: float = DEFAULT_LOOKBACK_SECONDS
    grace_seconds: float = DEFAULT_GRACE_SECONDS

    @property
    def cursor_collection(self) -> str:
        return self.store.collection + CURSOR_SUFFIX

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WatchSettings:
        env = os.environ if environ is None else environ
        store = Settings.from_env(env)
        lookback = number_setting(env, LOOKBACK_ENV, DEFAULT_LOOKBACK_SECONDS, minimum=60)
        grace = number_setting(env, GRACE_ENV, DEFAULT_GRACE_SECONDS, minimum=0)
        if lookback >= store.retention_seconds:
            # TTL deletes records after the retention: a run judged later would look missed.
            raise SettingsError(
                f"{LOOKBACK_ENV}={lookback:g} is not shorter than DEDUP_RETENTION_SECONDS="
                f"{store.retention_seconds:g}: records must outlive the watchdog's lookback"
            )
        jobs = parse_watch_jobs(env.get(JOBS_ENV, ""))
        return cls(store, jobs, lookback, grace)


def parse_watch_jobs(raw: str) -> tuple[WatchedJob, ...]:
    """DEDUP_WATCH_JOBS: a JSON list of {"name", "schedule", "timeZone",
    "attemptDeadlineSeconds", "retryWindowSeconds", "paused"}; only name and schedule are
    required. Any mistake stops the start-up with a message naming the variable."""
    if not raw.strip():
        raise SettingsError(
            f"{JOBS_ENV} is not set: set it to the stack's jobs as a JSON list, e.g. "
            '[{"name": "nightly-export", "schedule": "30 2 * * *", "timeZone": '
            '"Europe/Berlin", "attemptDeadlineSeconds": 180, "retryWindowSeconds": 3600, '
            '"paused": false}]'
        )
    try:
        entries = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{JOBS_ENV} is not valid JSON: {exc}") from None
    if not isinstance(entries, list):
        raise SettingsError(f"{JOBS_ENV} must be a JSON list of job objects")
    jobs: list[WatchedJob] = []
    for index, entry in enumerate(entries):
        where = f"{JOBS_ENV}[{index}]"
        if not isinstance(entry, dict):
            raise SettingsError(f"{where} must be a JSON object")
        unknown = sorted(set(entry) - _JOB_KEYS)
        if unknown:
            raise SettingsError(
                f"{where} has unknown keys {unknown}: allowed are {sorted(_JOB_KEYS)}"
            )
        name, schedule = entry.get("name"), entry.get("schedule")
        if not isinstance(name, str) or not name or "/" in name:
            raise SettingsError(f"{where}.name must be the Scheduler job ID (no '/')")
        if not isinstance(schedule, str) or len(schedule.split()) != 5 or not (
            croniter.is_valid(schedule)
        ):
            raise SettingsError(f"{where}.schedule {schedule!r} is not 5-field unix-cron")
        zone = entry.get("timeZone", "Etc/UTC")
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            raise SettingsError(f"{where}.timeZone {zone!r} is not an IANA time zone") from None
        deadline = _entry_seconds(entry, "attemptDeadlineSeconds", 180.0, where, positive=True)
        window = _entry_seconds(entry, "retryWindowSeconds", 0.0, where, positive=False)
        paused = entry.get("paused", False)
        if not isinstance(paused, bool):
            raise SettingsError(f"{where}.paused must be true or false")
        job = WatchedJob(name, schedule, zone, deadline, window, paused)
        jobs.append(job)
    names = [job.name for job in jobs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SettingsError(f"{JOBS_ENV} lists job(s) {duplicates} more than once")
    return tuple(jobs)


def _entry_seconds(
    entry: Mapping[str, Any], key: str, default: float, where: str, *, positive: bool
) -> float:
    value = entry.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
        value
    ) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise SettingsError(f"{where}.{key} must be a number of seconds {bound}")
    return float(value)


# -- the cursor ---------------------------------------------------------------------------

@dataclass
class Cursor:
    """Per job, in `<collection>_watchdog/<job name>`."""

    judged_through: datetime | None = None  # every run scheduled at or before is judged
    watch_from: datetime | None = None  # when the watchdog began watching the job
    first_run: datetime | None = None  # schedule time of the job's first recorded run
    never_ran_reported: bool = False
    # In-progress runs still watched (run_id -> schedule time), and the overlong ones
    # already reported (run_id -> schedule time); both pruned to the lookback.
    watching: dict[str, datetime] = field(default_factory=dict)
    overlong: dict[str, datetime] = field(default_factory=dict)

    def to_document(self, now: datetime) -> dict[str, Any]:
        return {
            "judged_through": self.judged_through,
            "watch_from": self.watch_from,
            "first_run": self.first_run,
            "never_ran_reported": self.never_ran_reported,
            "watching": dict(self.watching),
            "overlong": dict(self.overlong),
            "updated_at": now,
        }

    @classmethod
    def from_document(cls, data: Mapping[str, Any] | None) -> Cursor:
        if not data:
            return cls()
        return cls(
            judged_through=data.get("judged_through"),
            watch_from=data.get("watch_from"),
            first_run=data.get("first_run"),
            never_ran_reported=bool(data.get("never_ran_reported", False)),
            watching=dict(data.get("watching") or {}),
            overlong=dict(data.get("overlong") or {}),
        )


class WatchStore(Protocol):
    """What the watchdog needs: records by ID (read only) and its own cursor documents."""

    def get_many(self, run_ids: Sequence[str]) -> dict[str, StoredRun]:
        ...

    def get_cursors(self, jobs: Sequence[str]) -> dict[str, Cursor]:
        ...

    def put_cursor(self, job: str, cursor: Cursor, now: datetime) -> None:
        ...


# -- judging -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Problem:
    job: str
    schedule_time: datetime | None
    kind: str
    run_id: str | None = None
    attempts: int | None = None
    error: str | None = None
    running_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "job": self.job,
            "schedule_time": None if self.schedule_time is None else rfc3339(self.schedule_time),
            "kind": self.kind,
        }
        for name in ("run_id", "attempts", "error", "running_seconds"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        return body


def verdict_due_at(job: WatchedJob, schedule_time: datetime, grace_seconds: float) -> datetime:
    """When a run's verdict becomes due: its whole retry window + grace has passed."""
    return schedule_time + timedelta(seconds=job.retry_window_seconds + grace_seconds)


def running_seconds(schedule_time: datetime, stored: StoredRun, now: datetime) -> float:
    """How long an in-progress run has been running (since its claim, else its schedule)."""
    began = stored.record.claimed_at or schedule_time
    return (now - began).total_seconds()


def is_overlong(
    job: WatchedJob, schedule_time: datetime, stored: StoredRun, now: datetime,
    grace_seconds: float,
) -> bool:
    return running_seconds(schedule_time, stored, now) > (
        job.attempt_deadline_seconds + grace_seconds
    )


def classify_run(
    job: WatchedJob,
    schedule_time: datetime,
    stored: StoredRun | None,
    now: datetime,
    grace_seconds: float,
    first_run: datetime | None,
) -> str:
    """The watchdog's verdict on one run at `now`, as a tick judges it: `ok` (completed),
    `not_due` (still inside its retry window + grace), `before_first_run` (scheduled
    before the job's first recorded run), `missed`, `failed`, `running` or `overlong`
    (in progress beyond its attempt deadline + grace)."""
    due = verdict_due_at(job, schedule_time, grace_seconds) <= now
    if due and (first_run is None or schedule_time < first_run):
        return BEFORE_FIRST_RUN
    if stored is not None and stored.record.status is RunStatus.COMPLETED:
        return FINE
    if not due:
        return NOT_DUE
    if stored is None:
        return MISSED
    if stored.record.status is RunStatus.FAILED:
        return FAILED
    return OVERLONG if is_overlong(job, schedule_time, stored, now, grace_seconds) else RUNNING


@dataclass
class JobTick:
    checked: int = 0
    reads: int = 0
    problems: list[Problem] = field(default_factory=list)


def rfc3339(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Watchdog:
    """One tick over every job; `now` is the instance's wall clock (minutes of grace make
    its skew irrelevant)."""

    def __init__(
        self,
        settings: WatchSettings,
        store: WatchStore,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._settings = settings
        self._store = store
        self._now = wall_clock

    def tick(self) -> tuple[int, list[Problem], dict[str, int]]:
        """(runs judged, problems, counts) for every job; StoreUnavailable on an outage."""
        now = self._now()
        active = [job for job in self._settings.jobs if not job.paused]
        paused = [job for job in self._settings.jobs if job.paused]
        cursors = self._store.get_cursors([job.name for job in self._settings.jobs])
        counts = {"jobs": len(active), "paused": len(paused), "reads": len(cursors)}
        checked, problems = 0, []
        for job in paused:
            # Scheduler delivers nothing while paused: move the cursor past those runs, so
            # that resuming the job does not report them as missed.
            cursor = cursors.get(job.name, Cursor())
            cursor.judged_through = self._horizon(job, now)
            cursor.watch_from = cursor.watch_from or now
            self._store.put_cursor(job.name, cursor, now)
        for job in active:
            result = self._tick_job(job, cursors.get(job.name, Cursor()), now)
            checked += result.checked
            counts["reads"] += result.reads
            problems.extend(result.problems)
        return checked, problems, counts

    def _horizon(self, job: WatchedJob, now: datetime) -> datetime:
        """Runs scheduled at or before this have had their whole retry window + grace."""
        return now - timedelta(seconds=job.retry_window_seconds + self._settings.grace_seconds)

    def _tick_job(self, job: WatchedJob, cursor: Cursor, now: datetime) -> JobTick:
        grace = self._settings.grace_seconds
        lookback_start = now - timedelta(seconds=self._settings.lookback_seconds)
        horizon = self._horizon(job, now)
        if cursor.watch_from is None:
            cursor.watch_from = now  # the first tick that watches this job
        start = lookback_start
        if cursor.judged_through is not None and cursor.judged_through > start:
            start = cursor.judged_through
        due = list(job.schedule_times(start, horizon)) if horizon > start else []
        due_ids = {self._run_id(job, t): t for t in due}
        ids = list(due_ids)
        # Until the job's first run is known, the runs not yet due are read too: a job
        # created a moment ago has records only there, and is not `never_ran`.
        early: dict[str, datetime] = {}
        if cursor.first_run is None and not cursor.never_ran_reported:
            early = {
                self._run_id(job, t): t for t in job.schedule_times(max(start, horizon), now)
            }
            ids += list(early)
        watching = {r: t for r, t in cursor.watching.items() if t >= lookback_start}
        ids += [r for r in watching if r not in due_ids and r not in early]
        found = self._store.get_many(ids) if ids else {}
        tick = JobTick(reads=len(ids))

        if cursor.first_run is None:
            recorded = [t for r, t in [*due_ids.items(), *early.items()] if r in found]
            if recorded:
                cursor.first_run = min(recorded)
            elif any(t >= cursor.watch_from for t in due) and not cursor.never_ran_reported:
                # A run scheduled after the watchdog began watching the job is due, and
                # the job has no record at all: reported once.
                tick.problems.append(Problem(job.name, None, NEVER_RAN))
                cursor.never_ran_reported = True

        for run_id, t in due_ids.items():
            stored = found.get(run_id)
            verdict = classify_run(job, t, stored, now, grace, cursor.first_run)
            if verdict in (BEFORE_FIRST_RUN, NOT_DUE):
                continue  # before the job's first recorded run: it did not exist yet (a due
                # run is never not_due)
            tick.checked += 1
            if verdict == MISSED:
                tick.problems.append(Problem(job.name, t, MISSED, run_id))
            elif verdict == FAILED and stored is not None:
                tick.problems.append(self._failed(job, t, run_id, stored))
            elif verdict in (RUNNING, OVERLONG):
                watching[run_id] = t  # judged below, and at every tick until it ends

        for run_id, t in list(watching.items()):
            stored = found.get(run_id)
            if run_id not in due_ids:
                tick.checked += 1  # an in-progress run from an earlier tick, re-checked
            if stored is None or stored.record.status is RunStatus.COMPLETED:
                watching.pop(run_id)
            elif stored.record.status is RunStatus.FAILED:
                watching.pop(run_id)
                tick.problems.append(self._failed(job, t, run_id, stored))
            elif run_id not in cursor.overlong and is_overlong(job, t, stored, now, grace):
                tick.problems.append(Problem(
                    job.name, t, OVERLONG, run_id, stored.record.attempts,
                    running_seconds=round(running_seconds(t, stored, now), 1),
                ))
                cursor.overlong[run_id] = t

        cursor.watching = watching
        cursor.overlong = {r: t for r, t in cursor.overlong.items() if t >= lookback_start}
        if horizon > start:
            cursor.judged_through = horizon  # every run in (start, horizon] is judged
        self._store.put_cursor(job.name, cursor, now)
        return tick

    def _run_id(self, job: WatchedJob, instant: datetime) -> str:
        return RunKey(self._project, self._location, job.name, instant).run_id

    def _failed(self, job: WatchedJob, t: datetime, run_id: str, stored: StoredRun) -> Problem:
        record = stored.record
        return Problem(job.name, t, FAILED, run_id, record.attempts, record.error)

    @property
    def _project(self) -> str:
        return self._settings.store.project

    @property
    def _location(self) -> str:
        return self._settings.store.location


# -- Firestore ---------------------------------------------------------------------------------
class FirestoreWatchStore:
    """The watchdog's store: run records by ID through the RunStore (read only), and its own
    cursor documents, one per job, in `<collection>_watchdog` (the only thing it writes)."""

    def __init__(self, runs: FirestoreRunStore, cursor_collection: str) -> None:
        self._runs = runs
        self._cursors = runs.client.collection(cursor_collection)

    def get_many(self, run_ids: Sequence[str]) -> dict[str, StoredRun]:
        return self._runs.get_many(run_ids)

    def get_cursors(self, jobs: Sequence[str]) -> dict[str, Cursor]:
        def op() -> dict[str, Cursor]:
            refs = [self._cursors.document(job) for job in jobs]
            if not refs:
                return {}
            snapshots: Any = self._runs.client.get_all(
                refs, retry=self._runs.retry, timeout=self._runs.timeout
            )
            return {
                s.id: Cursor.from_document(s.to_dict()) for s in snapshots if s.exists
            }

        return self._runs.call(op)

    def put_cursor(self, job: str, cursor: Cursor, now: datetime) -> None:
        def op() -> None:
            self._cursors.document(job).set(
                cursor.to_document(now), retry=self._runs.retry, timeout=self._runs.timeout
            )

        self._runs.call(op)


def build_watchdog_handler(
    settings: WatchSettings,
    client: firestore.Client | None = None,
    emit: Callable[[Mapping[str, Any]], None] = emit_log_line,
    wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> WatchdogHandler:
    store = settings.store
    client = client or firestore.Client(project=store.project, database=store.database)
    runs = FirestoreRunStore(client, store.collection, store.store_timeout_seconds)
    watch_store = FirestoreWatchStore(runs, settings.cursor_collection)
    return WatchdogHandler(settings, Watchdog(settings, watch_store, wall_clock), emit)


def build_watchdog_handler_from_env(environ: Mapping[str, str] | None = None) -> WatchdogHandler:
    return build_watchdog_handler(WatchSettings.from_env(environ))


# -- HTTP ------------------------------------------------------------------------------------

class WatchdogHandler:
    """The `watch_scheduled_runs` entry point: the same caller check as the job functions,
    then one tick; 200 with the problems, 500 (retryable) if the store failed."""

    def __init__(
        self,
        settings: WatchSettings,
        watchdog: Watchdog,
        emit: Callable[[Mapping[str, Any]], None] = emit_log_line,
    ) -> None:
        self._settings = settings
        self._watchdog = watchdog
        self._emit = emit

    def handle(self, headers: Mapping[str, str], body: bytes) -> HttpReply:
        started = time.perf_counter()
        forbidden = refuse_caller(
            lower_keys(headers), self._settings.store.allowed_callers, self._emit, started
        )
        if forbidden is not None:
            return forbidden
        try:
            checked, problems, counts = self._watchdog.tick()
        except (StoreUnavailable, StoreError) as exc:
            detail = str(exc) or repr(exc)
            self._emit({
                "severity": "ERROR",
                "message": f"watchdog store_unavailable: {detail}",
                "component": "watchdog",
                "outcome": "store_unavailable",
                "status": 500,
                "latency_ms": _ms_since(started),
            })
            return HttpReply(500, {"error": "store_unavailable", "detail": detail})
        for problem in problems:
            when = "-" if problem.schedule_time is None else rfc3339(problem.schedule_time)
            self._emit({
                "severity": PROBLEM_SEVERITY[problem.kind],
                "message": f"watchdog {problem.kind}: {problem.job} @ {when}",
                "component": "watchdog",
                **problem.to_json(),
            })
        by_kind = {kind: 0 for kind in (MISSED, FAILED, OVERLONG, NEVER_RAN)}
        for problem in problems:
            by_kind[problem.kind] += 1
        self._emit({
            "severity": "INFO",
            "message": f"watchdog summary: {checked} runs checked, {len(problems)} problems",
            "component": "watchdog",
            "checked": checked,
            "problems": len(problems),
            **by_kind,
            **counts,
            "latency_ms": _ms_since(started),
        })
        return HttpReply(200, {"checked": checked, "problems": [p.to_json() for p in problems]})


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)

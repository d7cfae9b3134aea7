"""The run watchdog: every expected run accounted for.

A run's ID is derived from (project, location, job, schedule time), and each job's cron and
time zone are known (its job table, job_tables/watch_jobs.json), so "did the run of 02:30
Berlin time happen?" is a point lookup by ID: no query, no index. Each tick, for every job
that is not paused:

- the schedule times whose verdict became due since the previous tick (schedule time +
  retry window + grace <= now), bounded by the lookback, are read by ID in batches and
  judged: no record -> `missed`; `failed` -> `failed`; `completed` -> fine; `in_progress`
  -> watched until it finishes, `overlong` once it has run longer than its attempt
  deadline + grace (reported once);
- runs before the job's first recorded run are not judged (the job did not exist yet); a
  job with no record at all is reported once as `never_ran`.

A job's records are in the dedup function's database (DEDUP_DATABASE) unless its entry
names another `database`: a proxied job's, in the proxy's own database. The watchdog only
reads run records (the function it delivers to writes them). What it writes is in a
database of its own (DEDUP_WATCH_DATABASE, infra's `<databaseName>-watchdog`), which the
dedup function's account, running the team's job code, cannot write: one cursor document
per job in `<collection>_watchdog` (the last judged schedule time, the in-progress runs it
still watches, the overlong runs already reported), so each problem is reported once, and
the status of the re-run requests it delivers, from `<collection>_reruns` there. (Unset:
both in DEDUP_DATABASE, as the demo and older tests keep them.) Problems are logged before
the cursor moves: a tick that fails halfway answers 500 and the retry may report a problem
a second time, never zero times. A document it cannot read (a cursor or a request with a
field missing or of the wrong type, a cursor judged beyond now) is reported `malformed`,
naming it, and never trusted: the job is judged afresh over the lookback, the request is
refused; the other jobs are judged as ever, and the tick answers 200.

Two things it also delivers, when infra gives it a target (DEDUP_WATCH_TARGET_URL, and
DEDUP_WATCH_PROXY_URL for proxied jobs), through the one seam of dedup/watchdog/delivery.py: as
deployed, a Cloud Tasks task per run (dedup/watchdog/cloud_tasks.py: Cloud Run admits a task on an
internal-only URL, not a direct call from a function), judged by the run's record at the
next ticks; in the demo and tests, a direct POST, judged by the answer:
- catch-up: a `missed` run of a job with `catchUp`, scheduled within its
  `catchUpWithinSeconds`, is delivered to the job's function with its original schedule
  time: `caught_up` once delivered, `failed` when it ran late and the job raised, pending
  while it has not executed (no record, or a lapsed lease): delivered again at later ticks
  while inside its bound, `missed` with its last error once the bound is over;
- re-runs: the pending requests `make rerun` wrote in `<collection>_reruns`, each checked
  again as `make rerun` checks it (a job it watches with `reruns`, one of its scheduled
  times and not in the future, the next generation of the run, no other request of the
  run pending: else `refused`, with why, and never delivered), delivered with
  X-Dedup-Generation, marked done once the generation completed (failed when the job
  raised, or when no delivery executed it within RERUN_DELIVERY_WINDOW_SECONDS, with what
  is known of why); one for a run not completed waits (`waiting`) until Scheduler can no
  longer retry that run (its retry window + grace), so the two never overlap. Each
  delivery of a request is numbered (a queued task of its own, `<run_id>-<n>`), and none
  is handed over while the last may still be dispatching. A generation that settles on a
  record showing a second execution is reported `ran_twice`, in its job's streak;
- backfills (`make backfill`, dedup/watchdog/backfills.py): before the pending re-runs, each job's
  backfill releases its next runs into the re-run queue, at most
  DEDUP_WATCH_BACKFILL_RUNS_PER_TICK a tick and DEDUP_WATCH_BACKFILL_IN_FLIGHT at once,
  delivered and checked as re-runs are, by the backfill only (the pending pass leaves
  requests a backfill released to it).
The dedup protocol makes each run (each generation) execute at most once however often it
is delivered, by this watchdog, a concurrent tick, or Scheduler's own late retry.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import requests
from croniter import croniter
from google.api_core import exceptions as gexc
from google.cloud import firestore

from dedup.business_runs import DST_REPEATED, DST_SKIPPED, BusinessSchedule, business_schedule
from dedup.entry.http import HttpReply, emit_log_line, refuse_caller
from dedup.keys import FORCED_RUNS, FORCED_SEPARATE, RunKey, lower_keys
from dedup.settings import Settings, SettingsError, number_setting, read_table, table_path
from dedup.store import RunStatus, StoredRun, StoreError, StoreUnavailable
from dedup.store.firestore import GET_MANY_BATCH, FirestoreRunStore
from dedup.tables import WATCH_JOBS_TABLE
from dedup.watchdog.backfills import (
    BackfillPacer,
    BackfillSettings,
    FirestoreBackfills,
    backfills_collection,
)
from dedup.watchdog.cloud_tasks import CloudTasksDeliverer, TaskQueue
from dedup.watchdog.delivery import (
    QUEUED,
    TARGET_URL_ENV,
    DeliversRuns,
    DeliveryResult,
    HttpDeliverer,
    RunDelivery,
    TargetAuth,
    target_auth_setting,
)
from dedup.watchdog.incidents import (
    OPENED,
    MalformedStreak,
    Streak,
    Thresholds,
    Transition,
    judge_streaks,
    streaks_from_document,
)
from dedup.watchdog.ran_twice import RAN_TWICE, second_execution
from dedup.watchdog.reruns import (
    DONE,
    PENDING,
    REFUSED,
    FirestoreRerunQueue,
    MalformedDocument,
    MalformedRequest,
    RerunQueue,
    RerunRequest,
    reruns_collection,
    retries_may_execute,
)
from dedup.watchdog.reruns import (
    FAILED as RERUN_FAILED,
)

# The proxy's URL: where runs of the jobs marked `proxied` are delivered (the table is built
# before the proxy exists, so its URL comes with the environment).
PROXY_URL_ENV = "DEDUP_WATCH_PROXY_URL"
LOOKBACK_ENV = "DEDUP_WATCH_LOOKBACK_SECONDS"
GRACE_ENV = "DEDUP_WATCH_GRACE_SECONDS"
DELIVERY_TIMEOUT_ENV = "DEDUP_WATCH_DELIVERY_TIMEOUT_SECONDS"
# The watchdog's own database: its cursors and the re-run queue (infra/watchdog.py).
WATCH_DATABASE_ENV = "DEDUP_WATCH_DATABASE"
CURSOR_SUFFIX = "_watchdog"
DEFAULT_LOOKBACK_SECONDS = 2 * 24 * 3600.0
DEFAULT_GRACE_SECONDS = 300.0
DEFAULT_CATCH_UP_WITHIN_SECONDS = 6 * 3600.0
# Under the watchdog's own Scheduler attempt deadline (180 s): a delivery that takes longer
# keeps running on the function's side, and the next tick finds its record.
DEFAULT_DELIVERY_TIMEOUT_SECONDS = 150.0
# Deliveries of one tick run side by side (each waits for its job to run).
MAX_PARALLEL_DELIVERIES = 8
# Pending re-run requests delivered per tick (the rest wait for the next tick).
MAX_RERUNS_PER_TICK = 50
# How long after it was asked a re-run may still be delivered and executed (X-Dedup-Deliver-By);
# a request that reached no function by then ends `failed`, with why.
RERUN_DELIVERY_WINDOW_SECONDS = 6 * 3600.0
_Chunk = TypeVar("_Chunk")
_Result = TypeVar("_Result")
# Cursors read per BatchGetDocuments: 5,000 in one call outlasted the store timeout.
CURSOR_READ_BATCH = 300
# Batched reads and writes of one tick in flight side by side (each a round trip).
MAX_PARALLEL_BATCHES = 8
# Cursor writes per commit (Firestore's limit per batch): 5,000 jobs, 10 commits, not 5,000.
CURSOR_WRITE_BATCH = 500
# The deliveries queue's longest backoff between attempts (infra declares the queue's
# retryConfig.maxBackoff from it): a failure older than this plus an attempt got no retry.
QUEUE_MAX_BACKOFF_SECONDS = 300.0
# The rest of the queue's retryConfig (infra/watchdog.py DELIVERY_*; a test checks).
QUEUE_MAX_ATTEMPTS = 5
QUEUE_MIN_BACKOFF_SECONDS = 10.0
QUEUE_MAX_DOUBLINGS = 5

MISSED, FAILED, OVERLONG, NEVER_RAN = "missed", "failed", "overlong", "never_ran"
# A cursor or re-run request the watchdog cannot read: refused, reported, never trusted.
MALFORMED = "malformed"
# Verdicts that are not problems (classify_run; shown by `make runs`).
FINE, NOT_DUE, RUNNING, BEFORE_FIRST_RUN = "ok", "not_due", "running", "before_first_run"
# overlap: forbid (or replace): the run did not run, by the job's choice, because another
# run of the job held a live claim; counted in the tick's `skipped`, never `missed`.
SKIPPED = "skipped"
PROBLEM_SEVERITY = {
    MISSED: "ERROR", FAILED: "ERROR", NEVER_RAN: "ERROR", OVERLONG: "WARNING",
    MALFORMED: "ERROR", RAN_TWICE: "ERROR",
}
# Not a problem kind (no `kind` field, so no problem alert): a late run, delivered.
CAUGHT_UP = "caught_up"
CAUGHT_UP_SEVERITY = "WARNING"
RERUN = "rerun"
# A re-run's tick status while its run is not completed and Scheduler may still retry it.
RERUN_WAITING = "waiting"
JOB_FAILED = "failed"  # the function's outcome when the job raised (dedup.protocol.Outcome)
# ... and when it refused for good (a proxied start the target refused), answered 200.
JOB_FAILED_PERMANENT = "failed_permanent"
RAN_AND_FAILED = frozenset({JOB_FAILED, JOB_FAILED_PERMANENT})
_JOB_KEYS = {
    "name", "schedule", "timeZone", "attemptDeadlineSeconds", "retryWindowSeconds", "paused",
    "catchUp", "catchUpWithinSeconds", "body", "headers", "url", "database", "proxied",
    "dstRepeated", "dstSkipped", "reruns", "forcedRuns", "failureThreshold",
    "recoveryThreshold",
}
# Firestore database IDs (the same rule as infra's databaseName).
_DATABASE_ID = re.compile(r"[a-z][a-z0-9-]{2,61}[a-z0-9]")


@dataclass(frozen=True)
class WatchedJob:
    """One Scheduler job as the watchdog sees it (one entry of its job table)."""

    name: str  # the Scheduler job ID (X-CloudScheduler-JobName's last segment)
    schedule: str  # 5-field unix-cron
    time_zone: str = "Etc/UTC"
    attempt_deadline_seconds: float = 180.0
    retry_window_seconds: float = 0.0  # after the schedule time, retries may still come
    paused: bool = False
    # Catch-up: a missed run scheduled at most this long ago is delivered by the watchdog.
    catch_up: bool = False
    catch_up_within_seconds: float = DEFAULT_CATCH_UP_WITHIN_SECONDS
    # What a delivery by the watchdog sends (catch-up and re-runs), as the Scheduler job
    # does: its body, its headers, and its own target (the proxy's) if not the function's.
    body: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    url: str | None = None
    # Where its records are, if not in DEDUP_DATABASE (a proxied job: the proxy's database).
    database: str | None = None
    # Served by the proxy: delivered to DEDUP_WATCH_PROXY_URL unless it has its own `url`.
    proxied: bool = False

    # DST choices (dedup.business_runs; None: as BSD cron's -s), as the job's headers say.
    dst_repeated: str | None = None
    dst_skipped: str | None = None
    # The watchdog delivers `make rerun`'s requests for this job (infra sets it where
    # `make rerun` accepts them): a request for a job without it is refused.
    reruns: bool = False
    # Its forcedRuns (dedup.keys): `separate` forced runs are read next to the scheduled
    # runs they precede, and shown.
    forced_runs: str = FORCED_SEPARATE
    # How many bad runs in a row open an incident and good ones close it (dedup.watchdog.incidents).
    thresholds: Thresholds = field(default_factory=Thresholds)

    @property
    def business(self) -> BusinessSchedule:
        return business_schedule(self.schedule, self.time_zone, self.dst_repeated,
                                 self.dst_skipped)

    def schedule_times(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """The key times of the job's business runs whose latest delivery lies in (after,
        until], aware UTC (dedup.business_runs: the function keys deliveries the same way)."""
        for run in self.business.runs(after, until):
            yield run.key_time

    def latest_delivery(self, schedule_time: datetime) -> datetime:
        """The last instant Scheduler may deliver the run keyed `schedule_time` at (itself,
        but for a local time a DST change repeats or skips)."""
        return self.business.latest_delivery(schedule_time)

    def is_scheduled(self, instant: datetime) -> bool:
        """Whether `instant` is the key time of one of the job's business runs (what a
        re-run request must name: `make rerun` checks it, and so does the watchdog)."""
        latest = self.latest_delivery(instant)
        return instant in set(self.schedule_times(latest - timedelta(seconds=1), latest))


@dataclass(frozen=True)
class WatchSettings:
    store: Settings  # the DEDUP_* store settings, as the function reads them
    jobs: tuple[WatchedJob, ...]
    lookback_seconds: float = DEFAULT_LOOKBACK_SECONDS
    grace_seconds: float = DEFAULT_GRACE_SECONDS
    # DEDUP_WATCH_TARGET_URL: the dedup function, where the watchdog delivers catch-up
    # and re-runs (a job's own `url` wins); None: the watchdog delivers nothing.
    target_url: str | None = None
    target_auth: TargetAuth = TargetAuth.ID_TOKEN
    delivery_timeout_seconds: float = DEFAULT_DELIVERY_TIMEOUT_SECONDS
    # DEDUP_WATCH_QUEUE (+ _TASK_ACCOUNT): deliveries become Cloud Tasks HTTP tasks, the
    # path an internal-only function admits (dedup/watchdog/cloud_tasks.py); None: POSTed directly.
    queue: TaskQueue | None = None
    # DEDUP_WATCH_DATABASE: its own database (cursors, re-run queue), which job code cannot
    # write; None: both in DEDUP_DATABASE (the demo, tests).
    watch_database: str | None = None
    # DEDUP_WATCH_BACKFILL_*: how fast `make backfill`'s runs are released
    # (dedup/watchdog/backfills.py).
    backfill: BackfillSettings = field(default_factory=BackfillSettings)

    @property
    def cursor_collection(self) -> str:
        return self.store.collection + CURSOR_SUFFIX

    @property
    def other_databases(self) -> tuple[str, ...]:
        """The databases of records besides DEDUP_DATABASE that its jobs name."""
        named = {job.database for job in self.jobs if job.database is not None}
        return tuple(sorted(named - {self.store.database}))

    @property
    def reruns_collection(self) -> str:
        return reruns_collection(self.store.collection)

    @property
    def delivers(self) -> bool:
        """Whether this watchdog delivers runs (catch-up, re-runs): infra gave it a target."""
        return self.target_url is not None or any(job.url for job in self.jobs)

    def delivery_url(self, job: WatchedJob) -> str | None:
        return job.url or self.target_url

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
        jobs = load_watch_jobs(env)
        target_url = (env.get(TARGET_URL_ENV) or "").strip() or None
        if target_url is not None and not target_url.startswith(("https://", "http://")):
            raise SettingsError(
                f"{TARGET_URL_ENV}={target_url[:80]!r} is not a URL: set it to the dedup "
                "function's URL (https://...run.app)"
            )
        for job in jobs:
            if job.catch_up and target_url is None and job.url is None:
                raise SettingsError(
                    f"{WATCH_JOBS_TABLE}: job {job.name!r} has catchUp but no url, and "
                    f"{TARGET_URL_ENV} is not set: set {TARGET_URL_ENV} to the dedup "
                    "function's URL (or give the job its own url)"
                )
            if job.catch_up and job.catch_up_within_seconds >= lookback:
                raise SettingsError(
                    f"{WATCH_JOBS_TABLE}: job {job.name!r} catchUpWithinSeconds="
                    f"{job.catch_up_within_seconds:g} is not shorter than {LOOKBACK_ENV}="
                    f"{lookback:g}: a run is judged (and caught up) within the lookback only"
                )
        timeout = number_setting(
            env, DELIVERY_TIMEOUT_ENV, DEFAULT_DELIVERY_TIMEOUT_SECONDS, minimum=1
        )
        return cls(
            store, jobs, lookback, grace, target_url, target_auth_setting(env), timeout,
            TaskQueue.from_env(env), watch_database_setting(env, store, jobs),
            BackfillSettings.from_env(env),
        )


def watch_database_setting(
    env: Mapping[str, str], store: Settings, jobs: Sequence[WatchedJob]
) -> str | None:
    """DEDUP_WATCH_DATABASE: a Firestore database ID, none of the records' databases (the
    dedup function's account writes DEDUP_DATABASE; the proxy's, its own)."""
    raw = (env.get(WATCH_DATABASE_ENV) or "").strip()
    if not raw:
        return None
    if not _DATABASE_ID.fullmatch(raw):
        raise SettingsError(
            f"{WATCH_DATABASE_ENV}={raw[:80]!r} is not a Firestore database ID (4-63 "
            "lowercase letters, digits or hyphens): set it to the watchdog's own database"
        )
    records = {store.database} | {job.database for job in jobs if job.database is not None}
    if raw in records:
        raise SettingsError(
            f"{WATCH_DATABASE_ENV}={raw!r} is a database of run records, which other "
            "accounts write (job code, the proxy): give the watchdog a database of its own "
            "(e.g. '<databaseName>-watchdog')"
        )
    return raw


def load_watch_jobs(env: Mapping[str, str]) -> tuple[WatchedJob, ...]:
    """The watchdog's job table (shipped with its code, or in DEDUP_TABLES_DIR), with the
    proxied jobs' `url` from DEDUP_WATCH_PROXY_URL."""
    table = read_table(env, WATCH_JOBS_TABLE)
    jobs = parse_watch_jobs(*(table or ("", str(table_path(env, WATCH_JOBS_TABLE)))))
    proxy_url = (env.get(PROXY_URL_ENV) or "").strip() or None
    if proxy_url is None:
        return jobs
    if not proxy_url.startswith(("https://", "http://")):
        raise SettingsError(
            f"{PROXY_URL_ENV}={proxy_url[:80]!r} is not a URL: set it to the proxy's URL "
            "(https://...run.app)"
        )
    return tuple(
        replace(job, url=proxy_url) if job.proxied and job.url is None else job for job in jobs
    )


def parse_watch_jobs(raw: str, where: str = WATCH_JOBS_TABLE) -> tuple[WatchedJob, ...]:
    """The watchdog's job table: a JSON list of {"name", "schedule", "timeZone",
    "attemptDeadlineSeconds", "retryWindowSeconds", "paused"}; only name and schedule are
    required. Any mistake stops the start-up with a message naming the file (`where`)."""
    if not raw.strip():
        raise SettingsError(
            f"{where} is missing or empty: infra writes the stack's jobs there as a JSON list "
            "(set DEDUP_TABLES_DIR to read it from another directory), e.g. "
            '[{"name": "nightly-export", "schedule": "30 2 * * *", "timeZone": '
            '"Europe/Berlin", "attemptDeadlineSeconds": 180, "retryWindowSeconds": 3600, '
            '"paused": false}]'
        )
    try:
        entries = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(entries, list):
        raise SettingsError(f"{where} must be a JSON list of job objects")
    jobs: list[WatchedJob] = []
    table = where
    for index, entry in enumerate(entries):
        where = f"{table}[{index}]"
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
        catch_up = entry.get("catchUp", False)
        if not isinstance(catch_up, bool):
            raise SettingsError(f"{where}.catchUp must be true or false")
        proxied = entry.get("proxied", False)
        if not isinstance(proxied, bool):
            raise SettingsError(f"{where}.proxied must be true or false")
        within = _entry_seconds(
            entry, "catchUpWithinSeconds", DEFAULT_CATCH_UP_WITHIN_SECONDS, where, positive=True
        )
        body = entry.get("body")
        if body is not None and not isinstance(body, str):
            raise SettingsError(f"{where}.body must be the job's body as text (or absent)")
        headers = entry.get("headers", {})
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise SettingsError(f"{where}.headers must be a JSON object of text values")
        url = entry.get("url")
        if url is not None and (
            not isinstance(url, str) or not url.startswith(("https://", "http://"))
        ):
            raise SettingsError(f"{where}.url must be the job's target URL (https://...)")
        database = entry.get("database")
        if database is not None and (
            not isinstance(database, str) or not _DATABASE_ID.fullmatch(database)
        ):
            raise SettingsError(
                f"{where}.database {str(database)[:80]!r} is not a Firestore database ID: "
                "give the database of the job's records (4-63 lowercase letters, digits or "
                "hyphens), or leave it out for DEDUP_DATABASE's"
            )
        dst = {key: entry.get(key) for key in ("dstRepeated", "dstSkipped")}
        for key, allowed in (("dstRepeated", DST_REPEATED), ("dstSkipped", DST_SKIPPED)):
            if dst[key] is not None and dst[key] not in allowed:
                raise SettingsError(f"{where}.{key} {dst[key]!r} is not one of "
                                    f"{', '.join(allowed)} (or absent: as BSD cron's -s)")
        reruns = entry.get("reruns", False)
        if not isinstance(reruns, bool):
            raise SettingsError(f"{where}.reruns must be true or false")
        forced_runs = entry.get("forcedRuns", FORCED_SEPARATE)
        if forced_runs not in FORCED_RUNS:
            raise SettingsError(f"{where}.forcedRuns {forced_runs!r} is not one of "
                                f"{', '.join(FORCED_RUNS)}")
        try:
            thresholds = Thresholds(entry.get("failureThreshold", 1),
                                    entry.get("recoveryThreshold", 1))
        except ValueError as exc:
            raise SettingsError(f"{where}: {exc} (failureThreshold, recoveryThreshold)") from None
        job = WatchedJob(
            name, schedule, zone, deadline, window, paused, catch_up, within, body,
            tuple(sorted(headers.items())), url, database, proxied,
            dst["dstRepeated"], dst["dstSkipped"], reruns, forced_runs, thresholds,
        )
        jobs.append(job)
    # Counted once: names.count per name was quadratic (25 million steps for 5,000 jobs).
    duplicates = sorted(n for n, seen in Counter(job.name for job in jobs).items() if seen > 1)
    if duplicates:
        raise SettingsError(f"{table} lists job(s) {duplicates} more than once")
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
    # Catch-ups delivered but not executed yet (run_id -> PendingCatchUp): delivered again
    # while inside their bound, reported with their last error once it is over.
    catch_ups: dict[str, PendingCatchUp] = field(default_factory=dict)
    # The job's incident streaks by kind (dedup.watchdog.incidents): moved with the cursor, in one
    # guarded write, so a transition is made once.
    incidents: dict[str, Streak] = field(default_factory=dict)
    # Not stored: why the document read was no cursor (this one then starts afresh).
    malformed: str | None = None
    # Not stored: the document's version as read (None: there was none); its write is
    # guarded by it, so an overlapping tick cannot overwrite (nor repeat) this one's moves.
    version: datetime | None = None

    def to_document(self, now: datetime) -> dict[str, Any]:
        return {
            "judged_through": self.judged_through,
            "watch_from": self.watch_from,
            "first_run": self.first_run,
            "never_ran_reported": self.never_ran_reported,
            "watching": dict(self.watching),
            "overlong": dict(self.overlong),
            "catch_ups": {r: c.to_document() for r, c in self.catch_ups.items()},
            "incidents": {k: v.to_document() for k, v in self.incidents.items()},
            "updated_at": now,
        }

    @classmethod
    def from_document(cls, data: Mapping[str, Any] | None) -> Cursor:
        """The cursor a document holds; MalformedDocument if it is none (a field of the
        wrong type: the tick would fail on it, every tick)."""
        if not data:
            return cls()
        never_ran = data.get("never_ran_reported", False)
        if not isinstance(never_ran, bool):
            raise MalformedDocument(f"never_ran_reported is {_shown(never_ran)}, not a bool")
        catch_ups = _mapping(data, "catch_ups")
        try:
            incidents = streaks_from_document(data.get("incidents"))
        except MalformedStreak as exc:
            raise MalformedDocument(str(exc)) from None
        return cls(
            judged_through=_instant_or_none(data, "judged_through"),
            watch_from=_instant_or_none(data, "watch_from"),
            first_run=_instant_or_none(data, "first_run"),
            never_ran_reported=never_ran,
            watching=_instants(data, "watching"),
            overlong=_instants(data, "overlong"),
            catch_ups={
                str(r): PendingCatchUp.from_document(c, f"catch_ups.{r}")
                for r, c in catch_ups.items()
            },
            incidents=incidents,
        )

    @classmethod
    def refused(cls, why: str, version: datetime | None = None) -> Cursor:
        """A fresh cursor in place of a document that is none: the job is judged afresh
        (its open incidents are forgotten: a streak that goes on opens a new one)."""
        return cls(malformed=why, version=version)


def _shown(value: Any) -> str:
    return "missing" if value is None else f"{type(value).__name__} {str(value)[:60]!r}"


def _is_instant(value: Any) -> bool:
    return isinstance(value, datetime) and value.tzinfo is not None


def _instant_or_none(data: Mapping[str, Any], key: str) -> datetime | None:
    value = data.get(key)
    if value is not None and not _is_instant(value):
        raise MalformedDocument(f"{key} is {_shown(value)}, not a timestamp")
    return value


def _mapping(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise MalformedDocument(f"{key} is {_shown(value)}, not a map")
    return value


def _instants(data: Mapping[str, Any], key: str) -> dict[str, datetime]:
    found = dict(_mapping(data, key))
    for run_id, value in found.items():
        if not _is_instant(value):
            raise MalformedDocument(f"{key}.{run_id[:16]} is {_shown(value)}, not a timestamp")
    return found


@dataclass(frozen=True)
class PendingCatchUp:
    """A catch-up delivered `deliveries` times, the last at `delivered_at`, not executed yet
    (no record, or one whose lease lapsed: its instance stopped)."""

    deliveries: int
    delivered_at: datetime
    error: str | None = None  # what the last delivery answered, if it failed

    def to_document(self) -> dict[str, Any]:
        return {"deliveries": self.deliveries, "delivered_at": self.delivered_at,
                "error": self.error}

    @classmethod
    def from_document(cls, data: Any, where: str = "catch_up") -> PendingCatchUp:
        if not isinstance(data, Mapping):
            raise MalformedDocument(f"{where[:40]} is {_shown(data)}, not a map")
        deliveries = data.get("deliveries") or 1
        if isinstance(deliveries, bool) or not isinstance(deliveries, int) or deliveries < 1:
            raise MalformedDocument(f"{where[:40]}.deliveries is {_shown(deliveries)}")
        delivered_at, error = data.get("delivered_at"), data.get("error")
        if not isinstance(delivered_at, datetime) or delivered_at.tzinfo is None:
            raise MalformedDocument(f"{where[:40]}.delivered_at is {_shown(delivered_at)}, "
                                    "not a timestamp")
        if error is not None and not isinstance(error, str):
            raise MalformedDocument(f"{where[:40]}.error is {_shown(error)}, not text")
        return cls(deliveries, delivered_at, error)


class WatchStore(Protocol):
    """What the watchdog needs: records by ID (read only), in its own database or in the
    job's `database`, and its own cursor documents."""

    def get_many(
        self, run_ids: Sequence[str], database: str | None = None
    ) -> dict[str, StoredRun]:
        ...

    def get_cursors(self, jobs: Sequence[str]) -> dict[str, Cursor]:
        ...

    def put_cursors(self, cursors: Mapping[str, Cursor], now: datetime) -> None:
        """Write each job's cursor (job name -> cursor)."""
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
    document: str | None = None  # a malformed document's path (collection/ID)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "job": self.job,
            "schedule_time": None if self.schedule_time is None else rfc3339(self.schedule_time),
            "kind": self.kind,
        }
        for name in ("run_id", "attempts", "error", "running_seconds", "document"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        return body


def verdict_due_at(job: WatchedJob, schedule_time: datetime, grace_seconds: float) -> datetime:
    """When a run's verdict becomes due: the whole retry window + grace of its latest
    delivery has passed (a local time that happens twice may be delivered at either)."""
    return job.latest_delivery(schedule_time) + timedelta(
        seconds=job.retry_window_seconds + grace_seconds)


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
    before the job's first recorded run), `skipped` (overlap: another run of the job held
    it off), `missed`, `failed`, `running` or `overlong` (in progress beyond its attempt
    deadline + grace)."""
    due = verdict_due_at(job, schedule_time, grace_seconds) <= now
    if due and (first_run is None or schedule_time < first_run):
        return BEFORE_FIRST_RUN
    if stored is not None and stored.record.status is RunStatus.COMPLETED:
        return FINE
    if stored is not None and (stored.record.status is RunStatus.SKIPPED or (
            stored.record.replaced_by is not None
            and stored.record.status is RunStatus.FAILED)):
        return SKIPPED  # final as soon as it is written: never missed, never caught up
    if not due:
        return NOT_DUE
    if stored is None:
        return MISSED
    if stored.record.status is RunStatus.FAILED:
        return FAILED
    return OVERLONG if is_overlong(job, schedule_time, stored, now, grace_seconds) else RUNNING


@dataclass(frozen=True)
class Delivered:
    """A run the watchdog delivered this tick (catch-up or re-run), and the answer."""

    job: str
    schedule_time: datetime
    kind: str  # CAUGHT_UP or RERUN
    status: str  # the function's outcome (completed, duplicate, in_progress, ...) or error
    run_id: str
    generation: int = 0
    error: str | None = None
    requested_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "job": self.job, "schedule_time": rfc3339(self.schedule_time), "status": self.status,
        }
        if self.kind == RERUN:
            body["generation"] = self.generation
            body["requested_by"] = self.requested_by
        if self.error is not None:
            body["error"] = self.error
        return body


@dataclass(frozen=True)
class JobReads:
    """What judging one job reads, planned before the tick reads every job's records in a
    few batches (a read per job was a round trip each: over 10 s for 1,000 jobs)."""

    lookback_start: datetime
    horizon: datetime
    start: datetime
    due: list[datetime]
    due_ids: dict[str, datetime]
    early: dict[str, datetime]
    watching: dict[str, datetime]
    ids: list[str]


@dataclass(frozen=True)
class ForcedRun:
    """A forced run the tick saw: kept apart, or one that replaced the scheduled run."""

    job: str
    schedule_time: datetime  # the scheduled run's time it carries
    status: str  # its record's status
    replaced: bool  # forcedRuns replaceNext: it was the scheduled run, run early
    run_id: str

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "schedule_time": rfc3339(self.schedule_time),
                "status": self.status, "replaced_scheduled_run": self.replaced,
                "run_id": self.run_id}


@dataclass
class JobTick:
    checked: int = 0
    reads: int = 0
    skipped: int = 0  # runs the job's overlap policy skipped (not problems)
    problems: list[Problem] = field(default_factory=list)
    # Missed runs of a catchUp job, inside its bound: delivered before the cursor moves.
    to_catch_up: dict[str, datetime] = field(default_factory=dict)
    forced: list[ForcedRun] = field(default_factory=list)
    # Runs judged completed this tick (run_id -> schedule time): good runs for the streaks;
    # and runs already counted at an earlier tick (reported overlong), not counted again.
    good: dict[str, datetime] = field(default_factory=dict)
    counted: set[str] = field(default_factory=set)


@dataclass
class TickResult:
    checked: int
    problems: list[Problem]
    counts: dict[str, int]
    caught_up: list[Delivered] = field(default_factory=list)
    reruns: list[Delivered] = field(default_factory=list)
    forced: list[ForcedRun] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)
    overlapped: str | None = None  # why its cursors were not written (another tick's were)
    backfills: list[dict[str, Any]] = field(default_factory=list)  # each one's progress


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
        deliverer: DeliversRuns | None = None,
        reruns: RerunQueue | None = None,
        backfills: BackfillPacer | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._now = wall_clock
        # Catch-up and re-runs need both a deliverer and a target URL (settings.delivers).
        self._deliverer = deliverer if settings.delivers else None
        self._reruns = reruns if self._deliverer is not None else None
        self._backfills = backfills if self._reruns is not None else None
        # This tick's pending catch-ups (run_id -> job, schedule time), set before re-runs.
        self._catching_up: dict[str, tuple[WatchedJob, datetime]] = {}
        # Where a tick's incident transitions are logged, before its cursors are written
        # (WatchdogHandler sets it); None: only returned in the TickResult.
        self.announce: Callable[[Sequence[Transition]], None] | None = None
        # The re-run requests one delivery pass finished, written together at its end.
        self._finishing: list[tuple[RerunRequest, str, str]] = []
        # This tick's ran_twice problems of re-run and backfill generations (a request that
        # settled on a record showing a second execution): put into their job's streak.
        self._generation_problems: list[Problem] = []

    def tick(self) -> tuple[int, list[Problem], dict[str, int]]:
        """(runs judged, problems, counts) for every job; StoreUnavailable on an outage."""
        result = self.run_tick()
        return result.checked, result.problems, result.counts

    def run_tick(self) -> TickResult:
        """One tick: judge every job, deliver its catch-up runs and the pending re-runs."""
        now = self._now()
        active = [job for job in self._settings.jobs if not job.paused]
        paused = [job for job in self._settings.jobs if job.paused]
        cursors = self._store.get_cursors([job.name for job in self._settings.jobs])
        counts = {"jobs": len(active), "paused": len(paused), "reads": len(cursors)}
        checked, problems = 0, self._refuse_malformed_cursors(cursors, now)
        for job in paused:
            # Scheduler delivers nothing while paused: move the cursor past those runs, so
            # that resuming the job does not report them as missed.
            cursor = cursors.setdefault(job.name, Cursor())
            cursor.judged_through = self._horizon(job, now)
            cursor.watch_from = cursor.watch_from or now
        overlapped = None
        if paused:
            overlapped = self._put_cursors({job.name: cursors[job.name] for job in paused}, now)
        watched = [(job, cursors.get(job.name, Cursor())) for job in active]
        reads = [self._reads(job, cursor, now) for job, cursor in watched]
        found = self._read_all([job for job, _ in watched], reads)
        judged = [
            (job, cursor, self._judge_job(job, cursor, now, planned, found))
            for (job, cursor), planned in zip(watched, reads, strict=True)
        ]
        # Deliveries land before any cursor moves: a tick that fails halfway leaves the
        # runs to the retry, which delivers them again (the dedup protocol runs them once).
        caught_up = self._catch_up(judged, now)
        # A re-run waits while a catch-up of its run may still execute (a queued retry of
        # a delivery whose instance died): both could run otherwise.
        self._catching_up = {
            run_id: (job, cursor.watching[run_id])
            for job, cursor, _ in judged for run_id in cursor.catch_ups
            if run_id in cursor.watching
        }
        # Backfills first: they deliver their own requests, by ID; then the pending ones.
        self._generation_problems = []
        backfilled, backfills = self._advance_backfills(now, problems)
        reruns = self._deliver_reruns(now, problems)  # a store error here, too, leaves
        # every cursor as it was
        # A request delivered twice in one tick (one still waiting) is listed once, as it ended.
        reruns = list({d.run_id: d for d in [*backfilled, *reruns]}.values())
        ticks = {job.name: tick for job, _, tick in judged}
        for problem in self._generation_problems:  # reported, and counted in its streak
            if problem.job in ticks:
                ticks[problem.job].problems.append(problem)
            else:
                problems.append(problem)  # a paused job's: reported (its cursor stands)
        transitions = self._advance_streaks(judged, now)
        if transitions and self.announce is not None:
            # Logged before the cursors move: a tick that fails now repeats them at its
            # retry (the same incidents), never loses them.
            self.announce(transitions)
        overlapped = self._put_cursors(
            {job.name: cursor for job, cursor, _ in judged}, now) or overlapped
        forced: list[ForcedRun] = self._forced_before_missed(judged)
        counts["reads"] += len(forced)
        for _, _, result in judged:
            checked += result.checked
            counts["reads"] += result.reads
            counts["skipped"] = counts.get("skipped", 0) + result.skipped
            problems.extend(result.problems)
            forced.extend(result.forced)
        counts["forced"] = len(forced)
        counts["incidents_opened"] = sum(t.event == OPENED for t in transitions)
        counts["incidents_resolved"] = len(transitions) - counts["incidents_opened"]
        return TickResult(checked, problems, counts, caught_up, reruns, forced, transitions,
                          overlapped, backfills)

    def _put_cursors(self, cursors: Mapping[str, Cursor], now: datetime) -> str | None:
        """Write the cursors; why not, if another tick moved one since this tick read it.
        That tick judged from the same cursor (else its own guarded write would have failed)
        and reported the same problems and transitions, which this tick reports too (a
        problem twice, never zero times); its cursor stands, so a stale tick never rolls a
        later one back (and re-counts its runs into the streaks)."""
        try:
            self._store.put_cursors(cursors, now)
        except CursorMoved as exc:
            return str(exc)
        return None

    def _advance_streaks(
        self, judged: Sequence[tuple[WatchedJob, Cursor, JobTick]], now: datetime
    ) -> list[Transition]:
        """Each job's incident streaks moved by its verdicts of this tick (in its cursor,
        written with it); the incidents they opened or resolved."""
        made: list[Transition] = []
        # A re-run or backfill generation is counted when it settled (now), after the runs
        # this tick judged: a run scheduled days ago must not be resolved at once by them.
        settled = {p.run_id for p in self._generation_problems}
        for job, cursor, tick in judged:
            problems = [(now if p.run_id in settled else p.schedule_time, p.run_id, p.kind)
                        for p in tick.problems
                        if p.kind == RAN_TWICE or p.run_id not in tick.counted]
            good = {r: t for r, t in tick.good.items() if r not in tick.counted}
            cursor.incidents, transitions = judge_streaks(
                job.name, job.thresholds, cursor.incidents, problems, good, now)
            made += transitions
        return made

    def _advance_backfills(
        self, now: datetime, problems: list[Problem]
    ) -> tuple[list[Delivered], list[dict[str, Any]]]:
        """Release the next runs of each backfill (dedup/watchdog/backfills.py) into the re-run
        queue and deliver them as any pending re-run (the same checks and delivery)."""
        if self._backfills is None:
            return [], []
        delivered, progress = self._backfills.advance(
            [job.name for job in self._settings.jobs if job.reruns], now,
            lambda requests, of_runs: self._deliver_requests(requests, of_runs, now),
            self._asynchronous,
            lambda job, document, why: problems.append(
                Problem(job, None, MALFORMED, error=why, document=document)),
        )
        unique = {d.run_id: d for d in delivered}  # each round re-delivers what still waits
        return list(unique.values()), progress

    def _forced_before_missed(
        self, judged: Sequence[tuple[WatchedJob, Cursor, JobTick]]
    ) -> list[ForcedRun]:
        """The forced runs kept apart ("Run now", forcedRuns separate) that carry the time
        of a run this tick reports missed: read only for those (a read per due run would
        double every tick's reads), shown next to the missed run, never counted as it."""
        wanted = [
            (job, problem.schedule_time,
             RunKey(self._project, self._location, job.name, problem.schedule_time,
                    forced=True).run_id)
            for job, _, tick in judged if job.forced_runs == FORCED_SEPARATE
            for problem in tick.problems
            if problem.kind == MISSED and problem.schedule_time is not None
        ]
        found = self._records([(job, run_id) for job, _, run_id in wanted]) if wanted else {}
        return [ForcedRun(job.name, t, str(found[run_id].record.status), False, run_id)
                for job, t, run_id in wanted if run_id in found]

    def _refuse_malformed_cursors(
        self, cursors: dict[str, Cursor], now: datetime
    ) -> list[Problem]:
        """Each cursor document that is none (or judged beyond now, which would hide runs
        until then) is reported `malformed` and replaced by a fresh cursor: the job is
        judged afresh over the lookback (a problem reported twice, never zero times)."""
        problems: list[Problem] = []
        for job in self._settings.jobs:
            cursor = cursors.get(job.name)
            if cursor is None:
                continue
            why = cursor.malformed
            if why is None:
                late = [(k, v) for k, v in (("judged_through", cursor.judged_through),
                                            ("watch_from", cursor.watch_from)) if v and v > now]
                if late:
                    key, value = late[0]
                    why = f"{key} {rfc3339(value)} is after now ({rfc3339(now)})"
            if why is None:
                continue
            cursors[job.name] = Cursor(version=cursor.version)
            problems.append(Problem(
                job.name, None, MALFORMED,
                error=f"cursor refused, the job is judged afresh: {why}",
                document=f"{self._settings.cursor_collection}/{job.name}",
            ))
        return problems

    def _delivery(
        self, job: WatchedJob, t: datetime, generation: int = 0, number: int = 0,
        deliver_within_seconds: float | None = None,
    ) -> RunDelivery:
        url = self._settings.delivery_url(job)
        assert url is not None  # callers deliver only jobs that have one
        return RunDelivery(
            url, job.name, t, dict(job.headers), job.body, generation,
            min(job.attempt_deadline_seconds, self._settings.delivery_timeout_seconds),
            run_id=RunKey(
                self._project, self._location, job.name, t, generation=generation
            ).run_id,
            attempt_deadline_seconds=job.attempt_deadline_seconds,
            number=number,
            deliver_within_seconds=deliver_within_seconds,
        )

    @property
    def _asynchronous(self) -> bool:
        """Deliveries are handed to a queue (which retries them): outcomes are read later."""
        return self._deliverer is not None and self._deliverer.asynchronous

    def _deliver_all(self, deliveries: Sequence[RunDelivery]) -> list[DeliveryResult]:
        deliverer = self._deliverer
        if deliverer is None or not deliveries:
            return []
        workers = min(MAX_PARALLEL_DELIVERIES, len(deliveries))
        with ThreadPoolExecutor(workers, thread_name_prefix="watchdog-delivery") as pool:
            return list(pool.map(deliverer.deliver, deliveries))

    def _catch_up(
        self, judged: Sequence[tuple[WatchedJob, Cursor, JobTick]], now: datetime
    ) -> list[Delivered]:
        """Deliver the missed runs the judging set aside (again, for a pending one); each
        ends up `caught_up`, `failed` when it ran and the job raised, or pending: watched,
        and delivered again at a later tick until it executed or its bound is over."""
        wanted = [
            (job, cursor, tick, run_id, t)
            for job, cursor, tick in judged for run_id, t in tick.to_catch_up.items()
        ]
        results = self._deliver_all([
            self._delivery(
                job, t, number=_deliveries(cursor, run_id),
                # Not after its bound: then the watchdog reports it `missed`.
                deliver_within_seconds=(
                    t + timedelta(seconds=job.catch_up_within_seconds) - now).total_seconds(),
            )
            for job, cursor, _, run_id, t in wanted
        ])
        # No usable answer is not "not executed": the run may have landed while its reply
        # was lost or late. Its record says which, before anything is reported.
        unanswered = [
            (job, run_id) for (job, _, _, run_id, _), result in zip(wanted, results, strict=True)
            if not (result.executed or result.in_progress or result.queued
                    or result.status == JOB_FAILED)
        ]
        landed = self._records(unanswered)
        caught_up: list[Delivered] = []
        for (job, cursor, tick, run_id, t), result in zip(wanted, results, strict=True):
            stored = landed.get(run_id)
            status = stored.record.status if stored is not None else None
            if result.executed or status is RunStatus.COMPLETED:
                error = None if result.executed else (
                    f"no answer ({result.error or result.status}), but its record is completed")
                caught_up.append(Delivered(
                    job.name, t, CAUGHT_UP, "completed" if error else result.status, run_id,
                    error=error,
                ))
                if result.status == SKIPPED and status is not RunStatus.COMPLETED:
                    tick.skipped += 1  # overlap held it off for good: a skip is no recovery
                else:
                    tick.good[run_id] = t
                cursor.catch_ups.pop(run_id, None)
                cursor.watching.pop(run_id, None)
                continue
            if result.status in RAN_AND_FAILED or status is RunStatus.FAILED:
                # It ran late and the job raised: reported as the failed run it now is.
                why = result.error if result.status == JOB_FAILED else (
                    stored.record.error if stored is not None else result.error)
                error = f"caught up, then failed: {why}"
                tick.problems.append(Problem(job.name, t, FAILED, run_id, error=error))
                cursor.catch_ups.pop(run_id, None)
                cursor.watching.pop(run_id, None)
                continue
            # Not executed (yet): pending, watched from now on and judged at the next ticks
            # (queued: the queue delivers it; in_progress: it is being executed right now).
            cursor.watching[run_id] = t
            failed = not (result.queued or result.in_progress) and stored is None
            cursor.catch_ups[run_id] = PendingCatchUp(
                _deliveries(cursor, run_id) + 1, now,
                f"{result.error or result.status}" if failed else None,
            )
            if result.queued or failed:  # a queued one is logged as handed over
                caught_up.append(Delivered(
                    job.name, t, CAUGHT_UP, result.status, run_id, error=result.error))
        return caught_up

    def _records(self, runs: Sequence[tuple[WatchedJob, str]]) -> dict[str, StoredRun]:
        """The records of these runs, read in each job's database."""
        by_database: dict[str | None, list[str]] = {}
        for job, run_id in runs:
            by_database.setdefault(job.database, []).append(run_id)
        found: dict[str, StoredRun] = {}
        for database, run_ids in by_database.items():
            found.update(self._store.get_many(run_ids, database))
        return found

    def _deliver_reruns(self, now: datetime, problems: list[Problem]) -> list[Delivered]:
        """Deliver the pending re-run requests that pass `make rerun`'s checks again; mark
        done the executed, refused (with why) the others, and refuse and report (in
        `problems`) the documents that are no request."""
        if self._reruns is None:
            return []
        found = self._reruns.pending(MAX_RERUNS_PER_TICK)
        for malformed in [m for m in found if isinstance(m, MalformedRequest)]:
            self._reruns.refuse(malformed, now)
            problems.append(Problem(
                malformed.job or "-", None, MALFORMED,
                error=f"re-run request refused, never delivered: {malformed.reason}",
                document=f"{self._settings.reruns_collection}/{malformed.request_id}",
            ))
        pending = [r for r in found if isinstance(r, RerunRequest)]
        of_runs = self._reruns.for_runs([r.base_run_id for r in pending]) if pending else {}
        return self._deliver_requests(pending, of_runs, now)

    def _deliver_requests(
        self, pending: Sequence[RerunRequest], of_runs: Mapping[str, Sequence[RerunRequest]],
        now: datetime,
    ) -> list[Delivered]:
        """Deliver these pending requests (every request of their runs: `of_runs`, by base
        run_id) that pass the checks; their status written in one batch at the end."""
        assert self._reruns is not None
        jobs = {job.name: job for job in self._settings.jobs}
        delivered: list[Delivered] = []
        deliverable: list[tuple[RerunRequest, WatchedJob]] = []
        self._finishing = []
        for request in pending:
            job = jobs.get(request.job)
            why = self._rerun_refusal(request, job, of_runs.get(request.base_run_id, []), now)
            if why is not None or job is None:
                why = why or f"job {request.job!r} is not watched by this watchdog"
                self._finish(request, REFUSED, why)
                delivered.append(Delivered(
                    request.job, request.schedule_time, RERUN, REFUSED, request.request_id,
                    request.generation, why, request.requested_by,
                ))
            else:
                deliverable.append((request, job))
        deliverable = self._unsettled_reruns(deliverable, delivered, now)
        results = self._deliver_all([
            self._delivery(
                # Numbered per delivery, as catch-ups are: a queued task's name is refused
                # for about an hour after it ran (its 409s spent, a re-delivery would be
                # ALREADY_EXISTS, read as queued, and never reach the function).
                job, r.schedule_time, r.generation, number=r.deliveries,
                deliver_within_seconds=(_rerun_deliver_by(r) - now).total_seconds(),
            ) for r, job in deliverable
        ])
        noted: list[tuple[RerunRequest, str | None]] = []
        finished_direct: list[tuple[RerunRequest, WatchedJob]] = []
        for (request, job), result in zip(deliverable, results, strict=True):
            if result.executed:
                self._finish(request, DONE, result.status)
                finished_direct.append((request, job))
            elif result.status == JOB_FAILED:
                # The job ran and raised: the request is over (no retries every tick); a
                # new `make rerun` asks for the next generation. (Refused for good, 200
                # failed_permanent: finished by its record at the next tick, with its error.)
                self._finish(request, RERUN_FAILED, result.error or JOB_FAILED)
                finished_direct.append((request, job))
            else:
                noted.append((request, _delivery_error(result)))
            delivered.append(Delivered(
                request.job, request.schedule_time, RERUN, result.status, request.request_id,
                request.generation, result.error, request.requested_by,
            ))
        self._judge_generations(finished_direct, self._records(
            [(job, r.request_id) for r, job in finished_direct]) if finished_direct else {})
        self._reruns.finish_all(self._finishing, now)
        if noted:
            self._reruns.note_deliveries(noted, now)
        return delivered

    def _judge_generations(
        self, settled: Sequence[tuple[RerunRequest, WatchedJob]],
        records: Mapping[str, StoredRun],
    ) -> None:
        """ran_twice for re-run and backfill generations that settled this pass: judged on
        the generation's record, once (the request is finished in the same pass)."""
        for request, job in settled:
            stored = records.get(request.request_id)
            why = second_execution(stored)
            if why is not None and stored is not None:
                self._generation_problems.append(Problem(
                    job.name, request.schedule_time, RAN_TWICE, request.request_id,
                    stored.record.attempts, f"generation {request.generation}: {why}"))

    def _finish(self, request: RerunRequest, status: str, outcome: str) -> None:
        """Mark the request finished, with the others of this pass (one batched write)."""
        self._finishing.append((request, status, outcome))

    def _rerun_refusal(
        self, request: RerunRequest, job: WatchedJob | None,
        of_run: Sequence[RerunRequest], now: datetime,
    ) -> str | None:
        """Why a pending request is not delivered, checked as `make rerun` checks it before
        writing one (operator_tools/rerun.py); None if it passes."""
        if (request.project, request.location) != (self._project, self._location):
            return (f"it asks for project {request.project!r}, location {request.location!r}: "
                    f"this watchdog watches {self._project!r}, {self._location!r}")
        if job is None:
            return f"job {request.job!r} is not watched by this watchdog"
        if self._settings.delivery_url(job) is None:
            return f"this watchdog has no URL to deliver job {request.job!r} to"
        if not job.reruns:
            return (f"re-runs are not enabled for job {job.name!r} (watchdog.reruns in the "
                    "stack file, so that `make rerun` accepts them)")
        t = request.schedule_time
        if t > now:
            return f"{rfc3339(t)} is in the future: only a run that was due can be re-run"
        if not job.is_scheduled(t):
            return (f"{rfc3339(t)} is not a scheduled time of job {job.name} "
                    f"({job.schedule!r} in {job.time_zone})")
        others = [r for r in of_run if r.request_id != request.request_id]
        higher = max((r.generation for r in others), default=-1)
        if higher >= request.generation:
            return (f"generation {request.generation} is not the next of the run: it has a "
                    f"request for generation {higher} (`make rerun` numbers past them all)")
        waiting = [r.generation for r in others if r.status == PENDING]
        if waiting:
            return (f"another request of the run (generation {waiting[0]}) is pending: "
                    "`make rerun` asks for one at a time")
        return None

    def _unsettled_reruns(
        self,
        requests: Sequence[tuple[RerunRequest, WatchedJob]],
        delivered: list[Delivered],
        now: datetime,
    ) -> list[tuple[RerunRequest, WatchedJob]]:
        """The requests still to deliver. A generation whose record is completed is done
        without another delivery; one whose record is failed is failed once no queued
        attempt can follow (at once for direct deliveries); one still retried waits. So
        does a re-run (generation >= 1) of a run that is not completed while Scheduler may
        still retry that run (its retry window + grace): it could execute next to the
        retry. `make rerun` refuses those, but anyone may write to the requests."""
        assert self._reruns is not None
        base_ids = {r.request_id: replace(r.key, generation=0).run_id for r, _ in requests}
        records = self._records([
            (job, run_id) for request, job in requests
            for run_id in {request.request_id, base_ids[request.request_id]}
        ])
        unsettled: list[tuple[RerunRequest, WatchedJob]] = []
        settled: list[tuple[RerunRequest, WatchedJob]] = []
        for request, job in requests:
            stored = records.get(request.request_id)
            status = stored.record.status if stored is not None else None
            if stored is not None and status is RunStatus.COMPLETED:
                outcome = "completed"
                self._finish(request, DONE, outcome)
                settled.append((request, job))
            elif stored is not None and status is RunStatus.FAILED:
                # Final: the function answers a job failure 200 to the queue (no retry).
                outcome = JOB_FAILED
                self._finish(request, RERUN_FAILED, stored.record.error or outcome)
                settled.append((request, job))
            elif (waits_until := self._retried_until(job, request, records.get(
                    base_ids[request.request_id]), now)) is not None:
                # Stays pending, not refused: delivered at the first tick past the window.
                delivered.append(Delivered(
                    request.job, request.schedule_time, RERUN, RERUN_WAITING,
                    request.request_id, request.generation,
                    "the run is not completed and " + (
                        "a pending catch-up may still run it"
                        if base_ids[request.request_id] in self._catching_up
                        else "Scheduler may retry it") + f" until {rfc3339(waits_until)}",
                    request.requested_by,
                ))
                continue
            elif stored is None and now > _rerun_deliver_by(request) + timedelta(
                    seconds=self._queue_span_seconds(job) if self._asynchronous else 0):
                # Not executed while it could be (deliveries carry the bound, so none runs
                # it later): over, and said, not pending for good.
                why = self._never_executed(request)
                self._finish(request, RERUN_FAILED, why)
                delivered.append(Delivered(
                    request.job, request.schedule_time, RERUN, RERUN_FAILED,
                    request.request_id, request.generation, why, request.requested_by,
                ))
                continue
            elif self._still_queued(job, request, now):
                # Its last task may still be dispatching (the queue's attempts and
                # backoffs): not handed over again meanwhile (one task at a time).
                delivered.append(Delivered(
                    request.job, request.schedule_time, RERUN, QUEUED, request.request_id,
                    request.generation, None, request.requested_by,
                ))
                continue
            else:
                unsettled.append((request, job))
                continue
            delivered.append(Delivered(
                request.job, request.schedule_time, RERUN, outcome, request.request_id,
                request.generation, stored.record.error, request.requested_by,
            ))
        self._judge_generations(settled, records)
        return unsettled

    def _still_queued(self, job: WatchedJob, request: RerunRequest, now: datetime) -> bool:
        """Whether the request's last delivery was handed to the queue (no error) so
        recently that the queue may still be dispatching it."""
        return self._asynchronous and request.delivered_at is not None and (
            request.last_error is None) and (
            now - request.delivered_at).total_seconds() < self._queue_span_seconds(job)

    def _never_executed(self, request: RerunRequest) -> str:
        """Why a request that ran nothing within its window is over, as far as known."""
        within = (f"not executed within {RERUN_DELIVERY_WINDOW_SECONDS / 3600:g} h of "
                  f"being asked, delivered {request.deliveries} time(s)")
        if request.last_error is not None and request.last_error.startswith(HELD_OFF):
            return f"{within}: {request.last_error}"
        if self._asynchronous and request.deliveries and request.last_error is None:
            return (f"{within} through the queue, none executed it: each task's attempts "
                    f"were {HELD_OFF} by the function (another run of the job held it: "
                    "overlap) or reached no function; the queue's task logs tell which")
        if request.last_error is not None:
            return f"{within}: no delivery executed it, the last: {request.last_error}"
        return f"{within}: no delivery reached the function"

    def _retried_until(
        self, job: WatchedJob, request: RerunRequest, run: StoredRun | None, now: datetime
    ) -> datetime | None:
        """Until when Scheduler may still retry the run a re-run (generation >= 1) asks
        for, if that is after `now`: a retry could still execute the run and its retry
        window + grace has not passed (generation 0 is the run itself, deduplicated with
        those retries)."""
        until = verdict_due_at(job, request.schedule_time, self._settings.grace_seconds)
        base = replace(request.key, generation=0).run_id
        if base in self._catching_up:  # a pending catch-up: until its bound has passed
            _, t = self._catching_up[base]
            until = max(until, t + timedelta(seconds=job.catch_up_within_seconds + (
                self._queue_span_seconds(job) if self._asynchronous else 0)))
        held = request.generation > 0 and retries_may_execute(run) and now < until
        return until if held else None

    def _horizon(self, job: WatchedJob, now: datetime) -> datetime:
        """Runs scheduled at or before this have had their whole retry window + grace."""
        return now - timedelta(seconds=job.retry_window_seconds + self._settings.grace_seconds)

    def _read_all(
        self, jobs: Sequence[WatchedJob], reads: Sequence[JobReads]
    ) -> dict[str, StoredRun]:
        """Every job's records in one get_many per database (batched by the store)."""
        by_database: dict[str | None, list[str]] = {}
        for job, planned in zip(jobs, reads, strict=True):
            by_database.setdefault(job.database, []).extend(planned.ids)
        chunks = [
            (database, ids[start:start + GET_MANY_BATCH])
            for database, ids in by_database.items()
            for start in range(0, len(ids), GET_MANY_BATCH)
        ]
        found: dict[str, StoredRun] = {}
        for part in in_parallel(lambda c: self._store.get_many(c[1], c[0]), chunks):
            found.update(part)
        return found

    def _reads(self, job: WatchedJob, cursor: Cursor, now: datetime) -> JobReads:
        """The runs judging the job reads (run IDs are unique across jobs)."""
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
        return JobReads(lookback_start, horizon, start, due, due_ids, early, watching, ids)

    def _judge_job(
        self, job: WatchedJob, cursor: Cursor, now: datetime, reads: JobReads,
        found: Mapping[str, StoredRun],
    ) -> JobTick:
        """Judge the job's due runs from `found` (the tick's reads) and update its cursor
        (written by the caller)."""
        grace = self._settings.grace_seconds
        lookback_start, horizon, start = reads.lookback_start, reads.horizon, reads.start
        due, due_ids, early, watching = reads.due, reads.due_ids, reads.early, reads.watching
        tick = JobTick(reads=len(reads.ids))
        assert cursor.watch_from is not None  # _reads set it

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
            if stored is not None and stored.record.forced:
                tick.forced.append(ForcedRun(job.name, t, str(stored.record.status), True,
                                             run_id))
            verdict = classify_run(job, t, stored, now, grace, cursor.first_run)
            if verdict in (BEFORE_FIRST_RUN, NOT_DUE):
                continue  # before the job's first recorded run: it did not exist yet (a due
                # run is never not_due)
            tick.checked += 1
            tick.skipped += verdict == SKIPPED
            self._ran_twice(job, t, run_id, stored, tick)
            if verdict == FINE:
                tick.good[run_id] = t
            elif verdict == MISSED and self._catches_up(job, t, now):
                tick.to_catch_up[run_id] = t
            elif verdict == MISSED:
                tick.problems.append(Problem(job.name, t, MISSED, run_id))
            elif verdict == FAILED and stored is not None:
                tick.problems.append(self._failed(job, t, run_id, stored))
            elif verdict in (RUNNING, OVERLONG):
                watching[run_id] = t  # judged below, and at every tick until it ends

        for run_id, t in list(watching.items()):
            stored = found.get(run_id)
            if run_id not in due_ids:
                tick.checked += 1  # an in-progress run from an earlier tick, re-checked
            if run_id in cursor.overlong:
                tick.counted.add(run_id)  # its streak counted it when reported overlong
            pending = cursor.catch_ups.get(run_id)
            if pending is not None and (stored is None or (
                    stored.record.status is RunStatus.IN_PROGRESS and stored.lease_expired)):
                # A catch-up that has not executed: no record (never reached, or a 5xx that
                # wrote nothing), or its instance stopped mid-run (the lease lapsed).
                self._judge_pending(job, run_id, t, pending, stored, cursor, tick, now)
                continue
            if stored is None or stored.record.status in (RunStatus.COMPLETED,
                                                           RunStatus.SKIPPED):
                watching.pop(run_id)
                cursor.catch_ups.pop(run_id, None)
                if stored is not None:
                    if stored.record.status is RunStatus.COMPLETED:  # a skip is no recovery
                        tick.good[run_id] = t
                    self._ran_twice(job, t, run_id, stored, tick)
            elif stored.record.status is RunStatus.FAILED:
                watching.pop(run_id)
                cursor.catch_ups.pop(run_id, None)
                tick.problems.append(self._failed(job, t, run_id, stored))
                self._ran_twice(job, t, run_id, stored, tick)
            elif run_id not in cursor.overlong and is_overlong(job, t, stored, now, grace):
                tick.problems.append(Problem(
                    job.name, t, OVERLONG, run_id, stored.record.attempts,
                    running_seconds=round(running_seconds(t, stored, now), 1),
                ))
                cursor.overlong[run_id] = t

        cursor.watching = watching
        cursor.catch_ups = {r: c for r, c in cursor.catch_ups.items() if r in watching}
        cursor.overlong = {r: t for r, t in cursor.overlong.items() if t >= lookback_start}
        if horizon > start:
            cursor.judged_through = horizon  # every run in (start, horizon] is judged
        return tick

    def _judge_pending(
        self, job: WatchedJob, run_id: str, t: datetime, pending: PendingCatchUp,
        stored: StoredRun | None, cursor: Cursor, tick: JobTick, now: datetime,
    ) -> None:
        """A pending catch-up: left to the queue while it may still deliver it, delivered
        again while inside its bound, else reported `missed` with its last error."""
        if self._asynchronous and pending.error is None and (
                now - pending.delivered_at).total_seconds() < self._queue_span_seconds(job):
            return  # the queue may still be delivering it (none does after a failed hand-over)
        if self._catches_up(job, t, now):
            tick.to_catch_up[run_id] = t
            return
        if self._asynchronous and (now - t).total_seconds() < (
                job.catch_up_within_seconds + self._queue_span_seconds(job)):
            return  # a queued retry may still run it, until its bound after its ETA lapses
        cursor.watching.pop(run_id, None)
        cursor.catch_ups.pop(run_id, None)
        why = "its instance stopped mid-run (the lease lapsed)" if stored is not None else (
            pending.error or "no delivery reached the function")
        tick.problems.append(Problem(
            job.name, t, MISSED, run_id,
            error=f"delivered {pending.deliveries} time(s), never executed: {why}",
        ))

    def _queue_span_seconds(self, job: WatchedJob) -> float:
        """The longest a queued delivery can take, all its attempts and backoffs: until
        then a pending catch-up may still be executed by the queue."""
        backoffs = sum(
            min(QUEUE_MAX_BACKOFF_SECONDS,
                QUEUE_MIN_BACKOFF_SECONDS * float(2 ** min(i, QUEUE_MAX_DOUBLINGS)))
            for i in range(QUEUE_MAX_ATTEMPTS - 1)
        )
        attempts = QUEUE_MAX_ATTEMPTS * float(job.attempt_deadline_seconds)
        return attempts + backoffs + float(self._settings.grace_seconds)

    def _catches_up(self, job: WatchedJob, t: datetime, now: datetime) -> bool:
        return (
            job.catch_up
            and self._deliverer is not None
            and self._settings.delivery_url(job) is not None
            and (now - t).total_seconds() <= job.catch_up_within_seconds
        )

    def _run_id(self, job: WatchedJob, instant: datetime) -> str:
        return RunKey(self._project, self._location, job.name, instant).run_id

    @staticmethod
    def _ran_twice(
        job: WatchedJob, t: datetime, run_id: str, stored: StoredRun | None, tick: JobTick
    ) -> None:
        """A finished run whose record shows a second execution (dedup.watchdog.ran_twice): a
        problem of its own, judged once (when the run is judged finished)."""
        why = second_execution(stored)
        if why is not None and stored is not None:
            tick.problems.append(Problem(job.name, t, RAN_TWICE, run_id,
                                         stored.record.attempts, why))

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
    """The watchdog's store: run records by ID through the RunStore (read only), in
    DEDUP_DATABASE or the one a job names (`by_database`: a RunStore per database ID a job
    may name, DEDUP_DATABASE's included), and its own cursor documents, one per job, in
    `<collection>_watchdog` of its own database (`own`, DEDUP_WATCH_DATABASE's store; by
    default the records' store): the only thing it writes there besides the re-run
    requests' status."""

    def __init__(
        self,
        runs: FirestoreRunStore,
        cursor_collection: str,
        by_database: Mapping[str, FirestoreRunStore] | None = None,
        own: FirestoreRunStore | None = None,
    ) -> None:
        self._runs = runs
        self._own = own or runs
        self._by_database = dict(by_database or {})
        self._cursors = self._own.client.collection(cursor_collection)

    def get_many(
        self, run_ids: Sequence[str], database: str | None = None
    ) -> dict[str, StoredRun]:
        store = self._runs if database is None else self._by_database[database]
        return store.get_many(run_ids)

    def get_cursors(self, jobs: Sequence[str]) -> dict[str, Cursor]:
        def read(chunk: Sequence[str]) -> dict[str, Cursor]:
            def op() -> dict[str, Cursor]:
                refs = [self._cursors.document(job) for job in chunk]
                snapshots: Any = self._own.client.get_all(
                    refs, retry=self._own.retry, timeout=self._own.timeout
                )
                return {s.id: _cursor(s.to_dict(), s.update_time) for s in snapshots
                        if s.exists}

            return self._own.call(op)

        chunks = [jobs[i:i + CURSOR_READ_BATCH] for i in range(0, len(jobs), CURSOR_READ_BATCH)]
        found: dict[str, Cursor] = {}
        for part in in_parallel(read, chunks):
            found.update(part)
        return found

    def put_cursors(self, cursors: Mapping[str, Cursor], now: datetime) -> None:
        """Each cursor written only if its document is still as this tick read it (created
        if there was none): a tick that overlapped another (a Scheduler retry next to a slow
        tick) gets CursorMoved instead of overwriting the other's cursors and streaks (and
        writes nothing of that chunk: one commit per chunk, all or nothing)."""
        # Marks this write, so that a retry of a commit that landed knows it for its own.
        written_by = uuid.uuid4().hex

        def write(chunk: Sequence[tuple[str, Cursor]]) -> None:
            def op() -> None:
                batch = self._own.client.batch()
                for job, cursor in chunk:
                    ref = self._cursors.document(job)
                    document = {**cursor.to_document(now), WRITTEN_BY: written_by}
                    if cursor.version is None:
                        batch.create(ref, document)
                    else:
                        batch.update(ref, document, option=self._own.client.write_option(
                            last_update_time=cursor.version))
                try:
                    batch.commit(retry=self._own.retry, timeout=self._own.timeout)
                except (gexc.FailedPrecondition, gexc.AlreadyExists, gexc.NotFound) as exc:
                    if self._landed(chunk, written_by):
                        return  # our commit landed, its reply was lost: the retry met it
                    raise CursorMoved(
                        f"a cursor of jobs {[job for job, _ in chunk][:3]} changed since this "
                        f"tick read it (another tick wrote it): {exc}") from exc

            self._own.call(op)

        items = list(cursors.items())
        in_parallel(write, [items[i:i + CURSOR_WRITE_BATCH]
                            for i in range(0, len(items), CURSOR_WRITE_BATCH)])

    def _landed(self, chunk: Sequence[tuple[str, Cursor]], written_by: str) -> bool:
        """Whether every cursor of `chunk` is this write's own (its WRITTEN_BY mark): a
        commit that landed while its reply was lost, which the client's retry then found
        changed."""
        refs = [self._cursors.document(job) for job, _ in chunk]
        snapshots: Any = self._own.client.get_all(
            refs, retry=self._own.retry, timeout=self._own.timeout)
        marks = {s.id: (s.to_dict() or {}).get(WRITTEN_BY) for s in snapshots if s.exists}
        return all(marks.get(job) == written_by for job, _ in chunk)


WRITTEN_BY = "written_by"
"""A cursor document's mark of the write that made it (put_cursors)."""


class CursorMoved(StoreError):
    """A cursor's guarded write found the document changed: another tick moved it."""


def _cursor(data: Mapping[str, Any] | None, version: datetime | None = None) -> Cursor:
    try:
        return replace(Cursor.from_document(data), version=version)
    except MalformedDocument as exc:
        return Cursor.refused(str(exc), version)


def in_parallel(call: Callable[[_Chunk], _Result], chunks: Sequence[_Chunk]) -> list[_Result]:
    """`call` on each chunk, up to MAX_PARALLEL_BATCHES at a time (the first error raised,
    as a sequential loop would); one chunk runs here, with no thread."""
    if len(chunks) <= 1:
        return [call(chunk) for chunk in chunks]
    workers = min(MAX_PARALLEL_BATCHES, len(chunks))
    with ThreadPoolExecutor(workers, thread_name_prefix="watchdog-batch") as pool:
        return list(pool.map(call, chunks))


def build_watchdog_handler(
    settings: WatchSettings,
    client: firestore.Client | None = None,
    emit: Callable[[Mapping[str, Any]], None] = emit_log_line,
    wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> WatchdogHandler:
    store = settings.store
    client = client or firestore.Client(project=store.project, database=store.database)
    runs = FirestoreRunStore(client, store.collection, store.store_timeout_seconds)
    # A client per other database its jobs name (the proxy's), on the same project and
    # credentials (and emulator, in tests); a job may name its own database too.
    by_database = {store.database: runs} | {
        database: FirestoreRunStore(
            firestore.Client(project=client.project, database=database),
            store.collection, store.store_timeout_seconds,
        )
        for database in settings.other_databases
    }
    # Its cursors and the re-run queue: in its own database, which job code cannot write.
    own = runs if settings.watch_database is None else FirestoreRunStore(
        firestore.Client(project=client.project, database=settings.watch_database),
        store.collection, store.store_timeout_seconds,
    )
    watch_store = FirestoreWatchStore(runs, settings.cursor_collection, by_database, own)
    deliverer: DeliversRuns | None = None
    if settings.delivers:
        if settings.queue is None:
            deliverer = HttpDeliverer(settings.target_auth)
        else:  # DEDUP_WATCH_TARGET_AUTH=none: no credentials at all (a local fake's queue)
            plain = requests.Session() if settings.target_auth is TargetAuth.NONE else None
            deliverer = CloudTasksDeliverer(settings.queue, plain)
    reruns = FirestoreRerunQueue(own, settings.reruns_collection)
    backfills = BackfillPacer(
        settings.backfill, FirestoreBackfills(own, backfills_collection(store.collection)),
        reruns, store.retention_seconds,
    )
    watchdog = Watchdog(settings, watch_store, wall_clock, deliverer, reruns, backfills)
    return WatchdogHandler(settings, watchdog, emit)


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
        watchdog.announce = self._emit_transitions

    def _emit_transitions(self, transitions: Sequence[Transition]) -> None:
        """One `incident_opened` (ERROR) or `incident_resolved` (NOTICE) line each: what
        the incident alert policies count (infra/monitoring.py)."""
        for transition in transitions:
            self._emit({
                "severity": "ERROR" if transition.event == OPENED else "NOTICE",
                "message": transition.message,
                "component": "watchdog",
                **transition.to_json(),
            })

    def handle(self, headers: Mapping[str, str], body: bytes) -> HttpReply:
        started = time.perf_counter()
        forbidden = refuse_caller(
            lower_keys(headers), self._settings.store.allowed_callers, self._emit, started
        )
        if forbidden is not None:
            return forbidden
        try:
            result = self._watchdog.run_tick()
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
        checked, problems, counts = result.checked, result.problems, result.counts
        for delivered in [*result.caught_up, *result.reruns]:
            self._emit_delivered(delivered)
        for progress in result.backfills:
            self._emit({
                "severity": "INFO",
                "message": f"watchdog backfill: {progress['job']}: {progress['state']}, "
                f"{progress['done']} done, {progress['failed']} failed, "
                f"{progress['refused']} refused, {progress['in_flight']} in flight, "
                f"{progress['released']}/{progress['total']} released",
                "component": "watchdog",
                "outcome": "backfill",
                **progress,
            })
        for run in result.forced:
            how = "replaced the scheduled run" if run.replaced else "kept apart"
            self._emit({
                "severity": "INFO",
                "message": f"watchdog forced run ({how}): {run.job} @ "
                f"{rfc3339(run.schedule_time)}: {run.status}",
                "component": "watchdog",
                "kind": "forced",
                **run.to_json(),
            })
        for problem in problems:
            when = "-" if problem.schedule_time is None else rfc3339(problem.schedule_time)
            self._emit({
                "severity": PROBLEM_SEVERITY[problem.kind],
                "message": f"watchdog {problem.kind}: {problem.job} @ {when}",
                "component": "watchdog",
                **problem.to_json(),
            })
        if result.overlapped is not None:
            self._emit({
                "severity": "WARNING",
                "message": f"watchdog overlapped another tick: {result.overlapped}",
                "component": "watchdog",
                "outcome": "overlapped",
            })
        by_kind = {kind: 0 for kind in PROBLEM_SEVERITY}
        for problem in problems:
            by_kind[problem.kind] += 1
        self._emit({
            "severity": "INFO",
            "message": f"watchdog summary: {checked} runs checked, {len(problems)} problems",
            "component": "watchdog",
            "checked": checked,
            "problems": len(problems),
            **by_kind,
            CAUGHT_UP: len(result.caught_up),
            "reruns": len(result.reruns),
            **counts,
            "latency_ms": _ms_since(started),
        })
        reply: dict[str, Any] = {
            "checked": checked, "problems": [p.to_json() for p in problems],
        }
        if result.forced:
            reply["forced"] = [run.to_json() for run in result.forced]
        if result.transitions:
            reply["incidents"] = [t.to_json() for t in result.transitions]
        if result.overlapped is not None:
            reply["overlapped"] = result.overlapped
        if self._settings.delivers:  # a watchdog given a target delivers, and says what
            reply[CAUGHT_UP] = [d.to_json() for d in result.caught_up]
            reply["reruns"] = [d.to_json() for d in result.reruns]
        if result.backfills:
            reply["backfills"] = result.backfills
        return HttpReply(200, reply)

    def _emit_delivered(self, delivered: Delivered) -> None:
        """One line per delivery: caught_up is WARNING (a run was late); a re-run INFO
        once executed, WARNING while it could not be (it stays pending)."""
        when = rfc3339(delivered.schedule_time)
        if delivered.kind == CAUGHT_UP:
            severity, what = CAUGHT_UP_SEVERITY, f"watchdog caught_up: {delivered.job} @ {when}"
        else:
            ok = delivered.status in ("completed", "duplicate", QUEUED, RERUN_WAITING)
            severity = "INFO" if ok else "WARNING"
            what = (f"watchdog rerun: {delivered.job} @ {when} generation "
                    f"{delivered.generation}")
        self._emit({
            "severity": severity,
            "message": f"{what}: {delivered.status}",
            "component": "watchdog",
            # `outcome`, not `kind`: the problem metric counts lines with a `kind`.
            "outcome": delivered.kind,
            "run_id": delivered.run_id,
            **delivered.to_json(),
        })


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


def _deliveries(cursor: Cursor, run_id: str) -> int:
    """How often a pending catch-up was delivered (0: never): the next delivery's number."""
    pending = cursor.catch_ups.get(run_id)
    return pending.deliveries if pending is not None else 0


HELD_OFF = "held off (409)"


def _delivery_error(result: DeliveryResult) -> str | None:
    """What a delivery that executed nothing answered, kept on its request: None when it
    was handed to the queue (what came of it is read from the record)."""
    if result.queued:
        return None
    if result.in_progress or result.http_status == 409:
        return f"{HELD_OFF}: {result.error or 'another attempt or run of the job held it'}"
    return result.error or result.status


def _rerun_deliver_by(request: RerunRequest) -> datetime:
    return request.requested_at + timedelta(seconds=RERUN_DELIVERY_WINDOW_SECONDS)

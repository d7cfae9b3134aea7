"""The watchdog's settings: its DEDUP_WATCH_* environment and its job table.

`WatchSettings.from_env` reads the function's store settings (dedup.settings), the
watchdog's own (lookback, grace, delivery targets and timeout, queue, its own database,
backfill pace) and its job table (job_tables/watch_jobs.json, or DEDUP_TABLES_DIR's), each
entry a `WatchedJob` (dedup/watchdog/due.py). A job runs in the default (dedup) function, in
the proxy (`proxied`) or in a runtime's own function (`runtime`), and is delivered there:
DEDUP_WATCH_TARGET_URL, DEDUP_WATCH_PROXY_URL, DEDUP_WATCH_RUNTIME_URLS. Any mistake stops
the start-up with a message naming the variable or the table's entry.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dedup.beyond import BEYOND_OFF, BEYOND_SETTINGS
from dedup.business_runs import DST_REPEATED, DST_SKIPPED
from dedup.keys import FORCED_RUNS, FORCED_SEPARATE
from dedup.settings import Settings, SettingsError, number_setting, read_table, table_path
from dedup.tables import WATCH_JOBS_TABLE
from dedup.watchdog.backfills import BackfillSettings
from dedup.watchdog.cloud_tasks import TaskQueue
from dedup.watchdog.delivery import TARGET_URL_ENV, TargetAuth, target_auth_setting
from dedup.watchdog.due import DEFAULT_CATCH_UP_WITHIN_SECONDS, WatchedJob
from dedup.watchdog.incidents import Thresholds
from dedup.watchdog.reruns import reruns_collection
from dedup.watchdog.windows import Window, checked_schedule, parse_windows, silences_setting

# The proxy's URL: where runs of the jobs marked `proxied` are delivered (the table is built
# before the proxy exists, so its URL comes with the environment).
PROXY_URL_ENV = "DEDUP_WATCH_PROXY_URL"
# The runtimes' URLs, a JSON object {runtime name: its function's URL}: where runs of the jobs
# naming a `runtime` are delivered (set, like the proxy's, for the runtimes it delivers to).
RUNTIME_URLS_ENV = "DEDUP_WATCH_RUNTIME_URLS"
LOOKBACK_ENV = "DEDUP_WATCH_LOOKBACK_SECONDS"
GRACE_ENV = "DEDUP_WATCH_GRACE_SECONDS"
DELIVERY_TIMEOUT_ENV = "DEDUP_WATCH_DELIVERY_TIMEOUT_SECONDS"
# The watchdog's own database: its cursors and the re-run queue (infra/watchdog.py).
WATCH_DATABASE_ENV = "DEDUP_WATCH_DATABASE"
CURSOR_SUFFIX = "_watchdog"
DEFAULT_LOOKBACK_SECONDS = 2 * 24 * 3600.0
DEFAULT_GRACE_SECONDS = 300.0
# Under the watchdog's own Scheduler attempt deadline (180 s): a delivery that takes longer
# keeps running on the function's side, and the next tick finds its record.
DEFAULT_DELIVERY_TIMEOUT_SECONDS = 150.0
_JOB_KEYS = {
    "name", "schedule", "timeZone", "attemptDeadlineSeconds", "retryWindowSeconds", "paused",
    "catchUp", "catchUpWithinSeconds", "body", "headers", "url", "database", "proxied",
    "runtime", "dstRepeated", "dstSkipped", "reruns", "forcedRuns", "failureThreshold",
    "recoveryThreshold", "silences", "runsBeyondSchedule", "maxForcedRunsPerDay",
}
# Firestore database IDs (the same rule as infra's databaseName).
_DATABASE_ID = re.compile(r"[a-z][a-z0-9-]{2,61}[a-z0-9]")
# A runtime's name (the same rule as the stack file's runtimes[].name).
RUNTIME_NAME = re.compile(r"[a-z][a-z0-9-]*[a-z0-9]")


@dataclass(frozen=True)
class WatchSettings:
    store: Settings  # the DEDUP_* store settings, as the function reads them
    jobs: tuple[WatchedJob, ...]
    lookback_seconds: float = DEFAULT_LOOKBACK_SECONDS
    grace_seconds: float = DEFAULT_GRACE_SECONDS
    # DEDUP_WATCH_TARGET_URL: the dedup function, where the watchdog delivers catch-up
    # and re-runs (a job's own `url` wins: the proxy's, its runtime's, as load_watch_jobs
    # set them); None: it delivers no job of the default function.
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
    # DEDUP_WATCH_SILENCES: the stack's declared silence windows, of every job
    # (dedup/watchdog/silences.py; a job's own are its table entry's `silences`).
    silences: tuple[Window, ...] = ()

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
        if job.url is not None or job.runtime is not None:
            # A runtime's job runs in its own function only: the default one lacks its code.
            return job.url
        return self.target_url

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
            BackfillSettings.from_env(env), silences_setting(env),
        )


def watch_database_setting(
    env: Mapping[str, str], store: Settings, jobs: Sequence[WatchedJob]
) -> str | None:
    """DEDUP_WATCH_DATABASE: a Firestore database ID, none of the records' databases (the
    dedup function's account writes DEDUP_DATABASE; the proxy's and each runtime's, its own)."""
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
    proxied jobs' `url` from DEDUP_WATCH_PROXY_URL and the runtimes' jobs' from
    DEDUP_WATCH_RUNTIME_URLS (a job's own `url` wins)."""
    table = read_table(env, WATCH_JOBS_TABLE)
    jobs = parse_watch_jobs(*(table or ("", str(table_path(env, WATCH_JOBS_TABLE)))))
    jobs = with_runtime_urls(jobs, runtime_urls_setting(env))
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


def runtime_urls_setting(env: Mapping[str, str]) -> dict[str, str]:
    """DEDUP_WATCH_RUNTIME_URLS: {runtime name: its function's URL}; unset: {}. A runtime no
    job names is let be, as an unused DEDUP_WATCH_PROXY_URL is: it is never delivered to."""
    raw = (env.get(RUNTIME_URLS_ENV) or "").strip()
    if not raw:
        return {}
    try:
        urls = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _runtime_urls_error(f"is not valid JSON ({exc})") from None
    if not isinstance(urls, dict):
        raise _runtime_urls_error(f"is {raw[:80]!r}, not a JSON object")
    for name, url in urls.items():
        if not RUNTIME_NAME.fullmatch(name):
            raise _runtime_urls_error(
                f"names {name[:80]!r}, not a runtime name (lowercase letters, digits and "
                "hyphens, from a letter to a letter or digit)"
            )
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise _runtime_urls_error(f"gives runtime {name!r} {str(url)[:80]!r}, not a URL")
    return urls


def _runtime_urls_error(why: str) -> SettingsError:
    return SettingsError(
        f"{RUNTIME_URLS_ENV} {why}: set it to a JSON object of each runtime the watchdog "
        'delivers to and its function\'s URL, e.g. {"sync": "https://...run.app"}'
    )


def with_runtime_urls(
    jobs: tuple[WatchedJob, ...], urls: Mapping[str, str]
) -> tuple[WatchedJob, ...]:
    """Each runtime's job without its own `url` gets its runtime's from `urls`; one the
    watchdog delivers (catchUp or reruns) whose runtime has none stops the start-up."""
    lacking: dict[str, list[str]] = {}
    for job in jobs:
        if job.runtime is not None and job.url is None and job.runtime not in urls and (
                job.catch_up or job.reruns):
            lacking.setdefault(job.runtime, []).append(job.name)
    if lacking:
        runtime, names = min(lacking.items())
        raise _runtime_urls_error(
            f"has no URL for runtime(s) {sorted(lacking)}, whose jobs the watchdog delivers "
            f"(catchUp or reruns; {runtime!r}: {names[:3]}{' ...' if len(names) > 3 else ''})"
        )
    return tuple(
        replace(job, url=urls.get(job.runtime))
        if job.runtime is not None and job.url is None else job
        for job in jobs
    )


def parse_watch_jobs(raw: str, where: str = WATCH_JOBS_TABLE) -> tuple[WatchedJob, ...]:
    """The watchdog's job table: a JSON list of {"name", "schedule", "timeZone",
    "attemptDeadlineSeconds", "retryWindowSeconds", "paused", ...} (_JOB_KEYS); only name
    and schedule are required; a job of a runtime (`runtime`) names its `database` too.
    Any mistake stops the start-up with a message naming the file (`where`)."""
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
        name = entry.get("name")
        if not isinstance(name, str) or not name or "/" in name:
            raise SettingsError(f"{where}.name must be the Scheduler job ID (no '/')")
        schedule, zone = checked_schedule(entry, where)
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
        runtime = _entry_runtime(entry, where, proxied, database)
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
        beyond = entry.get("runsBeyondSchedule", BEYOND_OFF)
        if beyond not in BEYOND_SETTINGS:
            raise SettingsError(f"{where}.runsBeyondSchedule {beyond!r} is not one of "
                                f"{', '.join(BEYOND_SETTINGS)}")
        max_forced = entry.get("maxForcedRunsPerDay")
        if max_forced is not None and (isinstance(max_forced, bool) or not isinstance(
                max_forced, int) or max_forced < 0):
            raise SettingsError(f"{where}.maxForcedRunsPerDay {max_forced!r} is not a whole "
                                "number (0 or more), or absent")
        job = WatchedJob(
            name, schedule, zone, deadline, window, paused, catch_up, within, body,
            tuple(sorted(headers.items())), url, database, proxied, runtime,
            dst["dstRepeated"], dst["dstSkipped"], reruns, forced_runs, thresholds,
            parse_windows(entry.get("silences"), f"{where}.silences"),
            beyond, max_forced,
        )
        jobs.append(job)
    # Counted once: names.count per name was quadratic (25 million steps for 5,000 jobs).
    duplicates = sorted(n for n, seen in Counter(job.name for job in jobs).items() if seen > 1)
    if duplicates:
        raise SettingsError(f"{table} lists job(s) {duplicates} more than once")
    return tuple(jobs)


def _entry_runtime(
    entry: Mapping[str, Any], where: str, proxied: bool, database: str | None
) -> str | None:
    """The entry's `runtime`: a runtime name, with the runtime's own `database`; never on a
    proxied job (it runs in the proxy)."""
    runtime = entry.get("runtime")
    if runtime is None:
        return None
    if not isinstance(runtime, str) or not RUNTIME_NAME.fullmatch(runtime):
        raise SettingsError(
            f"{where}.runtime {str(runtime)[:80]!r} is not a runtime name (lowercase "
            "letters, digits and hyphens, from a letter to a letter or digit)"
        )
    if proxied:
        raise SettingsError(
            f"{where} is proxied and names runtime {runtime!r}: a proxied job runs in the "
            "proxy, never in a runtime; drop one of the two"
        )
    if database is None:
        raise SettingsError(
            f"{where} names runtime {runtime!r} but no database: a runtime's job has its "
            f"records in its runtime's own database; give it `database` "
            f"('<databaseName>-{runtime}')"
        )
    return runtime


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

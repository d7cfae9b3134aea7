"""When a watched job's runs are due: its schedule as the watchdog sees it.

A run's ID is derived from (project, location, job, schedule time), and each job's cron and
time zone are known (its job table, job_tables/watch_jobs.json: dedup/watchdog/settings.py
reads it), so "did the run of 02:30 Berlin time happen?" is a point lookup by ID: no
query, no index. `WatchedJob` is one entry of that table: its business runs
(dedup.business_runs: the function keys deliveries the same way), the latest instant each
may be delivered at, and whether an instant is one of them; `verdict_due_at` is when a
run's verdict becomes due (its retry window + grace after that latest delivery).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from dedup.beyond import BEYOND_OFF, BEYOND_PAGE
from dedup.business_runs import BusinessSchedule, business_schedule
from dedup.keys import FORCED_SEPARATE
from dedup.watchdog.incidents import Thresholds
from dedup.watchdog.windows import Window

DEFAULT_CATCH_UP_WITHIN_SECONDS = 6 * 3600.0


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
    # Where its records are, if not in DEDUP_DATABASE (a proxied job: the proxy's database;
    # a runtime's job: its runtime's, `<databaseName>-<runtime>`).
    database: str | None = None
    # Served by the proxy: delivered to DEDUP_WATCH_PROXY_URL unless it has its own `url`.
    proxied: bool = False
    # Runs in this runtime's own function: delivered to its URL in DEDUP_WATCH_RUNTIME_URLS
    # unless it has its own `url`, never to DEDUP_WATCH_TARGET_URL (the default function's).
    runtime: str | None = None

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
    # Its declared silence windows (dedup.watchdog.windows): problems logged, nothing paged.
    silences: tuple[Window, ...] = ()
    # Runs beyond the schedule (dedup/watchdog/beyond.py): off, log or page; and how many
    # forced runs within 24 hours are fine (None: not counted).
    runs_beyond_schedule: str = BEYOND_OFF
    max_forced_runs_per_day: int | None = None

    @property
    def beyond_pages(self) -> bool:
        """Its runs beyond the schedule count in an incident streak (which pages)."""
        return self.runs_beyond_schedule == BEYOND_PAGE

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


def verdict_due_at(job: WatchedJob, schedule_time: datetime, grace_seconds: float) -> datetime:
    """When a run's verdict becomes due: the whole retry window + grace of its latest
    delivery has passed (a local time that happens twice may be delivered at either)."""
    return job.latest_delivery(schedule_time) + timedelta(
        seconds=job.retry_window_seconds + grace_seconds)


def rfc3339(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

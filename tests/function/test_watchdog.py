"""The run watchdog against the real Firestore emulator: each verdict, DST, a job every
minute over two days, alerting once, catch-up bounded by the lookback, store outages."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore

from dedup.cache import CompletedRunCache
from dedup.claim import Claim
from dedup.keys import RunKey
from dedup.outcomes import Outcome
from dedup.protocol import Deduplicator
from dedup.run_context import RunContext
from dedup.settings import Settings, SettingsError
from dedup.store import MalformedRun, RunRecord, RunStatus, StoredRun, StoreUnavailable
from dedup.store.firestore import GET_MANY_BATCH, FirestoreRunStore, record_to_document
from dedup.tables import SOURCE_ROOT, TABLES_DIR
from dedup.watchdog.cursors import Cursor, FirestoreWatchStore
from dedup.watchdog.due import WatchedJob
from dedup.watchdog.settings import PROXY_URL_ENV, WatchSettings
from dedup.watchdog.tick import Watchdog, WatchdogHandler, build_watchdog_handler
from local_stack.deliveries import LOCATION, PROJECT, bearer
from local_stack.tables import write_job_tables

pytestmark = pytest.mark.usefixtures("firestore_emulator")

NOW = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)
TEN_MINUTES = WatchedJob(
    "every-ten", "*/10 * * * *", "Etc/UTC", attempt_deadline_seconds=180,
    retry_window_seconds=600,
)
INVOKER = f"watchdog-invoker@{PROJECT}.iam.gserviceaccount.com"


@dataclass
class Watch:
    """A watchdog over one test collection, with a clock the test moves."""

    collection: str
    jobs: Sequence[WatchedJob]
    now: datetime = NOW
    lookback_seconds: float = 2 * 86400
    grace_seconds: float = 300
    allowed_callers: frozenset[str] = frozenset()
    logs: list[Mapping[str, Any]] = field(default_factory=list)

    def settings(self) -> WatchSettings:
        store = Settings(
            project=PROJECT, location=LOCATION, collection=self.collection,
            store_timeout_seconds=5, allowed_callers=self.allowed_callers,
        )
        return WatchSettings(store, tuple(self.jobs), self.lookback_seconds, self.grace_seconds)

    def handler(self) -> WatchdogHandler:
        return build_watchdog_handler(
            self.settings(), firestore.Client(project=PROJECT), self.logs.append,
            wall_clock=lambda: self.now,
        )

    def tick(self, at: datetime | None = None) -> tuple[int, dict[str, Any]]:
        if at is not None:
            self.now = at
        self.logs.clear()
        reply = self.handler().handle({}, b"")
        return reply.status, dict(reply.body)

    def summary(self) -> Mapping[str, Any]:
        [line] = [e for e in self.logs if str(e["message"]).startswith("watchdog summary")]
        return line


def problems(body: Mapping[str, Any]) -> list[tuple[str, str, str | None]]:
    return sorted((p["kind"], p["job"], p["schedule_time"]) for p in body["problems"])


def z(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def at(hour: int, minute: int, day: int = 16, month: int = 10) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=UTC)


class Runs:
    """Records written by the real protocol, with its wall clock set to the run's time."""

    def __init__(self, collection: str, database: str | None = None) -> None:
        self.client = firestore.Client(project=PROJECT, database=database)
        self.collection = collection
        self.store = FirestoreRunStore(self.client, collection, timeout_seconds=5)

    def _dedup(self, clock: datetime) -> Deduplicator:
        return Deduplicator(
            # Records outlive the tests' 2026-10 clock whatever the emulator's date.
            self.store, lease_seconds=60, retention_seconds=3650 * 86400,
            cache=CompletedRunCache(0, 3600), wall_clock=lambda: clock,
        )

    def completed(self, job: str, *times: datetime) -> None:
        for t in times:
            delivery = self._dedup(t).run(RunKey(PROJECT, LOCATION, job, t), _ok, b"", {})
            assert delivery.outcome is Outcome.COMPLETED

    def failed(self, job: str, t: datetime, retries: int = 1) -> None:
        for _ in range(retries):
            delivery = self._dedup(t).run(RunKey(PROJECT, LOCATION, job, t), _boom, b"", {})
            assert delivery.outcome is Outcome.FAILED

    def in_progress(self, job: str, t: datetime, claimed_at: datetime) -> None:
        claim = self._dedup(claimed_at).claim(RunKey(PROJECT, LOCATION, job, t))
        assert isinstance(claim, Claim)  # claimed, never finished (no heartbeat either)

    def finish(self, job: str, t: datetime) -> None:
        """Complete an in-progress run as its own attempt would (guarded by its version)."""
        run_id = RunKey(PROJECT, LOCATION, job, t).run_id
        stored = self.store.get(run_id)
        assert stored is not None
        done = replace(stored.record, status=RunStatus.COMPLETED, finished_at=NOW)
        self.store.replace(run_id, done, stored.version)

    def bulk_completed(self, job: str, times: Iterable[datetime]) -> None:
        """Many completed records in batched writes (the 2-day, every-minute volume)."""
        batch = self.client.batch()
        pending = 0
        for t in times:
            key = RunKey(PROJECT, LOCATION, job, t)
            record = replace(
                RunRecord.claim(key, "a" * 32, 1, 60, t + timedelta(days=30), t),
                status=RunStatus.COMPLETED, finished_at=t, duration_seconds=0.1,
            )
            batch.set(self.client.collection(self.collection).document(key.run_id),
                      record_to_document(record))
            pending += 1
            if pending == 500:
                batch.commit()
                batch, pending = self.client.batch(), 0
        if pending:
            batch.commit()


def _ok(context: RunContext) -> str:
    return "ok"


def _boom(context: RunContext) -> None:
    raise RuntimeError("ledger locked\nby another process")


def every(start: datetime, end: datetime, step: timedelta) -> list[datetime]:
    times, t = [], start
    while t <= end:
        times.append(t)
        t += step
    return times


# -- the verdicts ---------------------------------------------------------------------------

def test_each_kind_of_run_is_judged_and_each_problem_reported_once(
    collection_name: str,
) -> None:
    runs = Runs(collection_name)
    job = TEN_MINUTES.name
    # Nothing before 10:00: the job did not exist yet (not reported).
    runs.completed(job, at(10, 0))
    runs.failed(job, at(10, 10), retries=2)  # failed through its retries
    # 10:20: no record at all -> missed
    runs.in_progress(job, at(10, 30), claimed_at=at(10, 30))  # stuck for 90 min -> overlong
    runs.completed(job, *every(at(10, 40), at(11, 30), timedelta(minutes=10)))
    runs.in_progress(job, at(11, 40), claimed_at=at(11, 55))  # a late retry, 5 min in: fine
    # 11:50 and 12:00: inside their retry window (+ grace): not judged yet
    paused = WatchedJob("paused-job", "* * * * *", paused=True)
    watch = Watch(collection_name, [TEN_MINUTES, paused])

    status, body = watch.tick()
    assert status == 200
    assert problems(body) == [
        ("failed", job, "2026-10-16T10:10:00Z"),
        ("missed", job, "2026-10-16T10:20:00Z"),
        ("overlong", job, "2026-10-16T10:30:00Z"),
    ]
    assert body["checked"] == 11  # 10:00 .. 11:40
    [failed] = [p for p in body["problems"] if p["kind"] == "failed"]
    assert failed["attempts"] == 2
    assert failed["error"] == "RuntimeError: ledger locked by another process"
    [overlong] = [p for p in body["problems"] if p["kind"] == "overlong"]
    assert overlong["running_seconds"] == 90 * 60
    lines = [e for e in watch.logs if "kind" in e]  # problem lines (incident lines apart)
    assert sorted((e["severity"], e["kind"]) for e in lines) == [
        ("ERROR", "failed"), ("ERROR", "missed"), ("WARNING", "overlong"),
    ]
    summary = watch.summary()
    assert summary["severity"] == "INFO"
    assert (summary["checked"], summary["problems"], summary["missed"], summary["failed"],
            summary["overlong"], summary["never_ran"], summary["paused"]) == (11, 3, 1, 1, 1, 0, 1)

    # The same tick again: nothing new (each problem is reported once); only the watched
    # in-progress runs are read again.
    status, body = watch.tick()
    assert (status, body["problems"]) == (200, [])
    assert body["checked"] == 2

    # 10 minutes on: 11:50 became due (no record: missed); 11:40 is now 15 min in: overlong.
    runs.completed(job, at(12, 0))
    status, body = watch.tick(at(12, 10))
    assert problems(body) == [
        ("missed", job, "2026-10-16T11:50:00Z"),
        ("overlong", job, "2026-10-16T11:40:00Z"),
    ]
    # The stuck run finishes: it is no longer watched; nothing more to report.
    runs.finish(job, at(10, 30))
    runs.finish(job, at(11, 40))
    status, body = watch.tick(at(12, 11))
    assert (status, body["problems"], body["checked"]) == (200, [], 2)
    status, body = watch.tick(at(12, 12))
    assert (status, body["problems"], body["checked"]) == (200, [], 0)


def test_a_proxied_job_is_judged_by_the_records_in_its_own_database(
    collection_name: str,
) -> None:
    """A job whose entry names a `database` (a proxied job: the proxy's own) is judged by
    the records there only: a record of the same run in the watchdog's database (where the
    dedup function's job code could write one) neither hides a missed run nor counts."""
    proxy_database = f"proxy-{collection_name[-8:]}"
    in_proxy_db, in_dedup_db = Runs(collection_name, proxy_database), Runs(collection_name)
    proxied = replace(TEN_MINUTES, name="proxied", database=proxy_database)
    in_proxy_db.completed("proxied", at(11, 0), at(11, 10), at(11, 30))
    in_dedup_db.completed("proxied", at(11, 20))  # not where the proxy keeps its records
    in_dedup_db.completed(TEN_MINUTES.name, at(11, 0), at(11, 10), at(11, 30))
    in_proxy_db.completed(TEN_MINUTES.name, at(11, 20))  # nor for a dedup function's job
    watch = Watch(collection_name, [TEN_MINUTES, proxied], now=at(11, 50))
    assert watch.settings().other_databases == (proxy_database,)

    status, body = watch.tick()
    assert status == 200
    assert problems(body) == [
        ("missed", TEN_MINUTES.name, "2026-10-16T11:20:00Z"),
        ("missed", "proxied", "2026-10-16T11:20:00Z"),
    ]
    assert body["checked"] == 8


def test_a_job_naming_the_watchdogs_own_database_is_read_there(collection_name: str) -> None:
    """A job table entry may name DEDUP_DATABASE itself: the records are read there (not a
    failing tick for a database it opened no client for)."""
    own = f"own-{collection_name[-8:]}"
    runs = Runs(collection_name, own)
    named = replace(TEN_MINUTES, database=own)
    runs.completed(named.name, at(11, 0), at(11, 10), at(11, 30))
    watch = Watch(collection_name, [named], now=at(11, 50))
    settings = replace(watch.settings(), store=replace(watch.settings().store, database=own))
    assert settings.other_databases == ()
    handler = build_watchdog_handler(
        settings, firestore.Client(project=PROJECT, database=own), watch.logs.append,
        wall_clock=lambda: watch.now,
    )
    reply = handler.handle({}, b"")
    assert reply.status == 200
    assert problems(dict(reply.body)) == [("missed", named.name, "2026-10-16T11:20:00Z")]


def test_an_in_progress_run_that_then_fails_is_reported_failed(collection_name: str) -> None:
    runs = Runs(collection_name)
    job = TEN_MINUTES.name
    runs.completed(job, at(11, 0), at(11, 20), at(11, 30))
    runs.in_progress(job, at(11, 10), claimed_at=at(11, 40))  # retried late, still running
    watch = Watch(collection_name, [TEN_MINUTES])
    status, body = watch.tick(at(11, 45))
    assert (status, body["problems"], body["checked"]) == (200, [], 4)
    # That attempt fails (the function marks it failed); the retry window is over.
    run_id = RunKey(PROJECT, LOCATION, job, at(11, 10)).run_id
    stored = runs.store.get(run_id)
    assert stored is not None
    runs.store.replace(run_id, replace(
        stored.record, status=RunStatus.FAILED, failed_at=at(11, 44), error="TimeoutError",
    ), stored.version)
    status, body = watch.tick(at(11, 50))
    assert problems(body) == [("failed", job, "2026-10-16T11:10:00Z")]


def test_a_job_without_any_record_is_reported_once_as_never_ran(collection_name: str) -> None:
    hourly = WatchedJob("hourly", "0 * * * *", retry_window_seconds=0)
    watch = Watch(collection_name, [hourly])
    # The first tick that watches the job: its earlier runs predate the watch (and maybe
    # the job): not reported.
    status, body = watch.tick(at(9, 30))
    assert (status, body) == (200, {"checked": 0, "problems": []})
    status, body = watch.tick(at(10, 30))  # 10:00 was due, and the job never ran at all
    assert body["problems"] == [{"job": "hourly", "schedule_time": None, "kind": "never_ran"}]
    assert [e["severity"] for e in watch.logs if e.get("kind") == "never_ran"] == ["ERROR"]
    status, body = watch.tick(at(11, 30))
    assert (status, body["problems"]) == (200, [])  # reported once
    # It runs at last: judged from its first recorded run on.
    Runs(collection_name).completed("hourly", at(12, 0))
    status, body = watch.tick(at(13, 30))
    assert problems(body) == [("missed", "hourly", "2026-10-16T13:00:00Z")]


def test_a_new_job_is_judged_from_its_first_run_not_before(collection_name: str) -> None:
    watch = Watch(collection_name, [TEN_MINUTES])
    # Created at 11:48; its first run (11:50) is recorded but not due yet; the earlier
    # schedule times in the lookback have no record: the job did not exist.
    Runs(collection_name).completed(TEN_MINUTES.name, at(11, 50), at(12, 0))
    status, body = watch.tick(at(12, 0))
    assert (status, body) == (200, {"checked": 0, "problems": []})
    status, body = watch.tick(at(12, 20))
    assert (status, body) == (200, {"checked": 2, "problems": []})  # 11:50, 12:00 fine


def test_paused_jobs_are_not_judged_and_resuming_does_not_report_the_pause(
    collection_name: str,
) -> None:
    runs = Runs(collection_name)
    job = WatchedJob("pausable", "*/10 * * * *", retry_window_seconds=0)
    runs.completed(job.name, at(10, 0), at(10, 10))
    Watch(collection_name, [job]).tick(at(10, 20))
    status, body = Watch(collection_name, [replace(job, paused=True)]).tick(at(12, 0))
    assert (status, body) == (200, {"checked": 0, "problems": []})
    runs.completed(job.name, at(12, 0))  # resumed (a new deploy) at 11:58
    status, body = Watch(collection_name, [job]).tick(at(12, 10))
    assert (status, body) == (200, {"checked": 1, "problems": []})


# -- schedules -------------------------------------------------------------------------------

BERLIN_0230 = WatchedJob("berlin", "30 2 * * *", "Europe/Berlin", retry_window_seconds=0)
BERLIN_0230_EACH = replace(BERLIN_0230, dst_repeated="each")
# The business runs of 02:30 Berlin (dedup.business_runs), as the function keys them:
# - spring (2026-03-29, 02:00 CET -> 03:00 CEST): 02:30 does not exist; by default (a job
#   at fixed hours, as BSD cron -s) it runs at the change, 03:00 CEST = 01:00Z;
# - autumn (2026-10-25, 03:00 CEST -> 02:00 CET): 02:30 happens twice, 00:30Z (CEST) and
#   01:30Z (CET): one run by default (keyed 00:30Z; a delivery at 01:30Z is that run), two
#   under dstRepeated each.
SPRING = [
    datetime(2026, 3, 28, 1, 30, tzinfo=UTC),
    datetime(2026, 3, 29, 1, 0, tzinfo=UTC),
    datetime(2026, 3, 30, 0, 30, tzinfo=UTC),
    datetime(2026, 3, 31, 0, 30, tzinfo=UTC),
]
AUTUMN = [
    datetime(2026, 10, 24, 0, 30, tzinfo=UTC),
    datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
    datetime(2026, 10, 26, 1, 30, tzinfo=UTC),
]
AUTUMN_EACH = sorted([*AUTUMN, datetime(2026, 10, 25, 1, 30, tzinfo=UTC)])


def test_schedule_times_across_the_berlin_dst_changes() -> None:
    assert list(BERLIN_0230.schedule_times(at(12, 0, 27, 3), at(12, 0, 31, 3))) == SPRING
    assert list(BERLIN_0230.schedule_times(at(12, 0, 23, 10), at(12, 0, 26, 10))) == AUTUMN
    assert list(BERLIN_0230_EACH.schedule_times(
        at(12, 0, 23, 10), at(12, 0, 26, 10))) == AUTUMN_EACH


@pytest.mark.parametrize(("job", "times", "absent"), [
    (BERLIN_0230, SPRING, 1), (BERLIN_0230, AUTUMN, 1), (BERLIN_0230_EACH, AUTUMN_EACH, 1),
    (BERLIN_0230_EACH, AUTUMN_EACH, 2),
])
def test_the_watchdog_expects_exactly_the_dst_runs(
    collection_name: str, job: WatchedJob, times: list[datetime], absent: int
) -> None:
    runs = Runs(collection_name)
    runs.completed(job.name, *(t for i, t in enumerate(times) if i != absent))
    watch = Watch(collection_name, [job], lookback_seconds=6 * 86400)
    status, body = watch.tick(times[-1] + timedelta(hours=1))
    assert status == 200
    assert problems(body) == [("missed", "berlin", z(times[absent]))]
    assert body["checked"] == len(times)  # from the first recorded run: no extra, none lost


def test_a_job_every_minute_over_two_days(collection_name: str) -> None:
    minutely = WatchedJob("minutely", "* * * * *", retry_window_seconds=0)
    start = NOW - timedelta(days=2) + timedelta(minutes=10)
    times = every(start, NOW, timedelta(minutes=1))
    gone = {times[100], times[1500], times[-10]}
    Runs(collection_name).bulk_completed("minutely", (t for t in times if t not in gone))
    watch = Watch(collection_name, [minutely])
    status, body = watch.tick()
    assert status == 200
    assert problems(body) == sorted(("missed", "minutely", z(t)) for t in gone)
    due = [t for t in times if t <= NOW - timedelta(seconds=300)]
    assert body["checked"] == len(due)
    # The next tick, 10 minutes on, reads only the 10 runs that became due (and 1 cursor).
    Runs(collection_name).bulk_completed("minutely", every(
        NOW + timedelta(minutes=1), NOW + timedelta(minutes=10), timedelta(minutes=1)))
    status, body = watch.tick(NOW + timedelta(minutes=10))
    assert (status, body) == (200, {"checked": 10, "problems": []})
    assert watch.summary()["reads"] == 10 + 1


def test_reads_per_tick_for_ten_jobs_every_minute(collection_name: str) -> None:
    jobs = [WatchedJob(f"job-{i}", "* * * * *", retry_window_seconds=0) for i in range(10)]
    runs = Runs(collection_name)
    for job in jobs:
        runs.bulk_completed(job.name, every(NOW - timedelta(minutes=30), NOW + timedelta(
            minutes=30), timedelta(minutes=1)))
    watch = Watch(collection_name, jobs)
    watch.tick()  # the first tick finds each job's first run
    status, body = watch.tick(NOW + timedelta(minutes=10))  # one 10-minute period later
    assert (status, body) == (200, {"checked": 100, "problems": []})
    # 10 runs became due per job, plus one cursor document per job.
    assert watch.summary()["reads"] == 10 * 10 + 10


def test_catch_up_after_a_watchdog_outage_is_bounded_by_the_lookback(
    collection_name: str,
) -> None:
    hourly = WatchedJob("hourly", "0 * * * *", retry_window_seconds=0)
    times = every(NOW - timedelta(days=6), NOW, timedelta(hours=1))
    gone = {NOW - timedelta(days=4), NOW - timedelta(hours=12)}
    Runs(collection_name).bulk_completed("hourly", (t for t in times if t not in gone))
    watch = Watch(collection_name, [hourly], lookback_seconds=86400)
    watch.tick(NOW - timedelta(days=5))  # then the watchdog is down for 5 days
    status, body = watch.tick(NOW)
    assert status == 200
    # Only the last day is judged: the run missed 4 days ago is beyond the lookback.
    assert problems(body) == [("missed", "hourly", z(NOW - timedelta(hours=12)))]
    assert body["checked"] == 23  # hourly in (now - 1 day, now - 5 min]
    assert watch.summary()["reads"] == 23 + 1


# -- faults and the HTTP face --------------------------------------------------------------

@dataclass
class BrokenStore:
    """The real watch store, with record reads failing as in an outage."""

    inner: FirestoreWatchStore

    def get_many(
        self, run_ids: Sequence[str], database: str | None = None
    ) -> dict[str, StoredRun]:
        raise StoreUnavailable("Firestore did not answer within 5s")

    def get_cursors(self, jobs: Sequence[str]) -> dict[str, Cursor]:
        return dict(self.inner.get_cursors(jobs))

    def put_cursors(self, cursors: Mapping[str, Cursor], now: datetime) -> dict[str, datetime]:
        return self.inner.put_cursors(cursors, now)

    def clear_outboxes(self, versions: Mapping[str, datetime]) -> None:
        self.inner.clear_outboxes(versions)


def test_a_store_outage_is_a_500_and_the_retry_reports_what_it_hid(
    collection_name: str,
) -> None:
    runs = Runs(collection_name)
    runs.completed(TEN_MINUTES.name, at(11, 0))  # 11:10 missed
    watch = Watch(collection_name, [TEN_MINUTES])
    real = FirestoreWatchStore(runs.store, watch.settings().cursor_collection)
    broken = WatchdogHandler(
        watch.settings(), Watchdog(watch.settings(), BrokenStore(real), lambda: NOW),
        watch.logs.append,
    )
    reply = broken.handle({}, b"")
    assert reply.status == 500 and reply.body["error"] == "store_unavailable"
    [line] = watch.logs
    assert line["severity"] == "ERROR" and line["outcome"] == "store_unavailable"
    status, body = watch.tick()  # the retry, with the store back
    assert status == 200
    assert problems(body) == [
        ("missed", TEN_MINUTES.name, "2026-10-16T11:10:00Z"),
        ("missed", TEN_MINUTES.name, "2026-10-16T11:20:00Z"),
        ("missed", TEN_MINUTES.name, "2026-10-16T11:30:00Z"),
        ("missed", TEN_MINUTES.name, "2026-10-16T11:40:00Z"),
    ]


def test_the_watchdog_serves_only_the_allowed_callers(collection_name: str) -> None:
    watch = Watch(collection_name, [TEN_MINUTES], allowed_callers=frozenset({INVOKER}))
    reply = watch.handler().handle({"Authorization": bearer("someone@example.com")}, b"")
    assert reply.status == 403
    assert [e["outcome"] for e in watch.logs] == ["forbidden"]
    reply = watch.handler().handle({"Authorization": bearer(INVOKER)}, b"")
    assert reply.status == 200


# -- settings ------------------------------------------------------------------------------

BASE_ENV = {"DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": LOCATION}
JOB_ENTRY = {
    "name": "nightly-export", "schedule": "30 2 * * *", "timeZone": "Europe/Berlin",
    "attemptDeadlineSeconds": 180, "retryWindowSeconds": 3600, "paused": False,
}


def test_settings_from_the_environment_and_the_job_table(tmp_path: Path) -> None:
    settings = WatchSettings.from_env({
        **BASE_ENV, "DEDUP_COLLECTION": "runs",
        **write_job_tables(tmp_path / "a", watch_jobs=[JOB_ENTRY]),
    })
    assert settings.jobs == (WatchedJob(
        "nightly-export", "30 2 * * *", "Europe/Berlin", 180.0, 3600.0, False),)
    assert (settings.lookback_seconds, settings.grace_seconds) == (172800.0, 300.0)
    assert settings.cursor_collection == "runs_watchdog"
    minimal = WatchSettings.from_env({
        **BASE_ENV, **write_job_tables(
            tmp_path / "b", watch_jobs='[{"name": "j", "schedule": "* * * * *"}]'),
        "DEDUP_WATCH_LOOKBACK_SECONDS": "3600", "DEDUP_WATCH_GRACE_SECONDS": "60",
    })
    assert minimal.jobs == (WatchedJob("j", "* * * * *", "Etc/UTC", 180.0, 0.0, False),)
    assert (minimal.lookback_seconds, minimal.grace_seconds) == (3600.0, 60.0)


def test_proxied_jobs_are_delivered_to_the_proxy_url(tmp_path: Path) -> None:
    """The table is built before the proxy exists: a proxied job's `url` is
    DEDUP_WATCH_PROXY_URL's; a job's own `url` wins; the others have none."""
    table = [
        {**JOB_ENTRY, "name": "direct"},
        {**JOB_ENTRY, "name": "proxied", "proxied": True, "database": "proxy-db"},
        {**JOB_ENTRY, "name": "own", "proxied": True, "url": "https://own.example"},
    ]
    env = {**BASE_ENV, **write_job_tables(tmp_path, watch_jobs=table)}
    proxy = "https://proxy-abc-ew.a.run.app"
    jobs = {j.name: j for j in WatchSettings.from_env({**env, PROXY_URL_ENV: proxy}).jobs}
    assert (jobs["direct"].url, jobs["proxied"].url, jobs["own"].url) == (
        None, proxy, "https://own.example")
    assert jobs["proxied"].proxied and not jobs["direct"].proxied
    without = {j.name: j for j in WatchSettings.from_env(env).jobs}
    assert without["proxied"].url is None
    with pytest.raises(SettingsError, match=f"{PROXY_URL_ENV}='proxy' is not a URL"):
        WatchSettings.from_env({**env, PROXY_URL_ENV: "proxy"})


def test_the_table_is_read_from_the_source_root_without_dedup_tables_dir() -> None:
    """Deployed, no DEDUP_TABLES_DIR: the table shipped in the archive, job_tables/ beside
    main.py (this checkout has none: infra writes it into each archive)."""
    assert not (SOURCE_ROOT / TABLES_DIR).exists()
    with pytest.raises(SettingsError, match=rf"{re.escape(str(SOURCE_ROOT / TABLES_DIR))}"):
        WatchSettings.from_env(BASE_ENV)


def test_a_tables_dir_that_is_not_a_directory_stops_the_start_up(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"DEDUP_TABLES_DIR=.* is not a directory"):
        WatchSettings.from_env({**BASE_ENV, "DEDUP_TABLES_DIR": str(tmp_path / "nope")})


@pytest.mark.parametrize(("table", "env", "names"), [
    (None, {}, "watch_jobs.json is missing or empty"),
    ("{", {}, "watch_jobs.json is not valid JSON"),
    ("{}", {}, "watch_jobs.json must be a JSON list"),
    ([{**JOB_ENTRY, "schedule": "every 5 minutes"}], {}, r"watch_jobs.json\[0\].schedule"),
    ([{**JOB_ENTRY, "timeZone": "Mars/Olympus"}], {}, r"watch_jobs.json\[0\].timeZone"),
    ([{**JOB_ENTRY, "retryWindow": 1}], {}, r"watch_jobs.json\[0\] has unknown keys"),
    ([{**JOB_ENTRY, "attemptDeadlineSeconds": 0}], {},
     r"watch_jobs.json\[0\].attemptDeadlineSeconds"),
    ([{**JOB_ENTRY, "paused": "no"}], {}, r"watch_jobs.json\[0\].paused"),
    ([{**JOB_ENTRY, "proxied": 1}], {}, r"watch_jobs.json\[0\].proxied"),
    ([JOB_ENTRY, JOB_ENTRY], {}, r"watch_jobs.json lists job\(s\) \['nightly-export'\] more"),
    ([{**JOB_ENTRY, "database": "(default)"}], {},
     r"watch_jobs.json\[0\].database '\(default\)' is not a Firestore database ID"),
    ([], {"DEDUP_WATCH_LOOKBACK_SECONDS": "soon"}, "DEDUP_WATCH_LOOKBACK_SECONDS"),
    ([], {"DEDUP_WATCH_GRACE_SECONDS": "-1"}, "DEDUP_WATCH_GRACE_SECONDS"),
    ([], {"DEDUP_WATCH_LOOKBACK_SECONDS": "604800"},
     "DEDUP_WATCH_LOOKBACK_SECONDS=604800 is not shorter than DEDUP_RETENTION_SECONDS"),
])
def test_bad_settings_stop_the_start_up_naming_the_variable_or_file(
    tmp_path: Path, table: object, env: dict[str, str], names: str
) -> None:
    tables = write_job_tables(tmp_path, watch_jobs=table)  # None: no table at all
    with pytest.raises(SettingsError, match=names):
        WatchSettings.from_env({**BASE_ENV, **tables, **env})


class CountingStore:
    """The Firestore watch store, counting its calls and the largest batch of each."""

    def __init__(self, inner: FirestoreWatchStore) -> None:
        self.inner = inner
        self.calls: dict[str, list[int]] = {
            "get_many": [], "get_cursors": [], "put_cursors": [], "clear_outboxes": []}

    def get_many(
        self, run_ids: Sequence[str], database: str | None = None
    ) -> Mapping[str, StoredRun | MalformedRun]:
        self.calls["get_many"].append(len(run_ids))
        return self.inner.get_many(run_ids, database)

    def get_cursors(self, jobs: Sequence[str]) -> dict[str, Cursor]:
        self.calls["get_cursors"].append(len(jobs))
        return self.inner.get_cursors(jobs)

    def put_cursors(self, cursors: Mapping[str, Cursor], now: datetime) -> dict[str, datetime]:
        self.calls["put_cursors"].append(len(cursors))
        return self.inner.put_cursors(cursors, now)

    def clear_outboxes(self, versions: Mapping[str, datetime]) -> None:
        self.calls["clear_outboxes"].append(len(versions))
        self.inner.clear_outboxes(versions)


def test_a_tick_over_many_jobs_reads_and_writes_in_batches(collection_name: str) -> None:
    """700 jobs: the records of all of them in a few get_many calls of at most one batch
    each, the cursors read and written in batches (one call per job took a round trip each:
    5,000 jobs did not fit the store timeout); the verdicts are those of job-by-job reads,
    and the next tick starts from the cursors written."""
    jobs = [replace(TEN_MINUTES, name=f"many-{i:03d}") for i in range(700)]
    runs = Runs(collection_name)
    runs.bulk_completed(jobs[0].name, [at(11, 0), at(11, 10), at(11, 20), at(11, 30)])
    watch = Watch(collection_name, jobs, now=at(11, 45), lookback_seconds=3600)
    settings = watch.settings()
    client = firestore.Client(project=PROJECT)
    inner = FirestoreWatchStore(
        FirestoreRunStore(client, collection_name, 5), settings.cursor_collection)
    store = CountingStore(inner)
    result = Watchdog(settings, store, wall_clock=lambda: watch.now).run_tick()
    read = sum(store.calls["get_many"])
    assert read >= 700 * 3  # each job's due runs, and its early ones until its first run
    # One database: full batches but the last, not one call per job.
    assert len(store.calls["get_many"]) == -(-read // GET_MANY_BATCH)
    assert max(store.calls["get_many"]) <= GET_MANY_BATCH
    assert store.calls["get_cursors"] == [700] and store.calls["put_cursors"] == [700]
    # The first job ran: its runs are fine; every other job's are missed (or before its
    # first run: never_ran once due runs pass the watch start).
    assert result.counts["reads"] == read  # no cursor yet: found cursors count as reads
    assert all(p.job != jobs[0].name for p in result.problems)
    assert len(inner.get_cursors([j.name for j in jobs])) == 700

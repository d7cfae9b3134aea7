"""Schedule edits judged right (dedup/watchdog/schedule_edits.py), against the Firestore
emulator and a served function the watchdog catches up to: a job's schedule, or its time
zone, changes between two ticks (the watchdog's table before and after a deploy) while
Scheduler switched somewhere between them. Runs of the old schedule are not reported
missed once it is no longer in force, the new schedule's runs before the switch are
neither reported missed nor caught up, a run of the old one that was in force and did not
run is reported (never delivered under the new one), and the new one's runs after the
edit are judged and caught up as ever.

The timeline, in units `u` of the schedule (2 minutes, or an hour for the time zone edit),
from `base`: the old schedule fires at base + k·u, the new one at base + (k + ½)·u.
tick 1 at 3u + u/4 (A, the old table); the old schedule's run at 4u does not run, the one
at 5u does; Scheduler switches between 5u and 5½u; the new one's runs at 5½u, 6½u, 7½u
run; tick 2 at 8u + u/4 (E, the new table); the new one's run at 8½u does not run; tick 3
at 9u + u/4."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore

from dedup.settings import Settings
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.cursors import Cursor, FirestoreWatchStore
from dedup.watchdog.deliveries import CAUGHT_UP
from dedup.watchdog.delivery import HttpDeliverer, TargetAuth
from dedup.watchdog.due import WatchedJob
from dedup.watchdog.reruns import MalformedDocument
from dedup.watchdog.schedule_edits import (
    PastSchedule,
    ScheduleHistory,
    due_times,
    edit_windows,
    note_table,
    schedule_key,
    unsure,
)
from dedup.watchdog.settings import WatchSettings
from dedup.watchdog.tick import Watchdog, WatchdogHandler
from local_stack import FunctionServer
from local_stack.deliveries import LOCATION, PROJECT, function_env
from local_stack.processes import REPO_ROOT
from local_stack.steered_job import read_ledger
from tests.function.test_watchdog import Runs

pytestmark = pytest.mark.usefixtures("firestore_emulator")


@dataclasses.dataclass(frozen=True)
class Edit:
    unit: timedelta
    old: tuple[str, str]  # (cron, time zone)
    new: tuple[str, str]


EDITS = {
    # Even minutes to odd minutes.
    "schedule": Edit(timedelta(minutes=2), ("*/2 * * * *", "Etc/UTC"),
                     ("1-59/2 * * * *", "Etc/UTC")),
    # On the hour in UTC to on the hour in Kolkata (UTC+05:30): half past in UTC.
    "time_zone": Edit(timedelta(hours=1), ("0 * * * *", "Etc/UTC"),
                      ("0 * * * *", "Asia/Kolkata")),
}


@pytest.fixture(scope="module")
def served(firestore_emulator: Any, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[FunctionServer, str, Path]]:
    collection = f"edits_{uuid.uuid4().hex[:12]}"
    ledger = tmp_path_factory.mktemp("edits") / "ledger.jsonl"
    with FunctionServer(function_env(collection, ledger), workers=1, threads=4,
                        extra_pythonpath=[REPO_ROOT]) as server:
        yield server, collection, ledger


def watched(name: str, schedule: tuple[str, str], unit: timedelta, catch_up: bool
            ) -> WatchedJob:
    cron, zone = schedule
    return WatchedJob(
        name, cron, zone, attempt_deadline_seconds=30, retry_window_seconds=0,
        catch_up=catch_up, catch_up_within_seconds=(20 * unit).total_seconds(),
        headers=(("Content-Type", "application/json"), ("X-Dedup-Location", LOCATION),
                 ("X-Dedup-Project", PROJECT), ("X-Dedup-Schedule", cron),
                 ("X-Dedup-Time-Zone", zone)),
    )


def tick(job: WatchedJob, collection: str, url: str, now: datetime, grace: timedelta
         ) -> dict[str, Any]:
    """One tick of a fresh watchdog whose table holds `job`, at `now`."""
    store = Settings(project=PROJECT, location=LOCATION, collection=collection,
                     store_timeout_seconds=5)
    settings = WatchSettings(store, (job,), lookback_seconds=12 * 3600,
                             grace_seconds=grace.total_seconds(), target_url=url,
                             target_auth=TargetAuth.NONE, delivery_timeout_seconds=20)
    runs = FirestoreRunStore(firestore.Client(project=PROJECT), collection, 5)
    watchdog = Watchdog(settings, FirestoreWatchStore(runs, settings.cursor_collection),
                        lambda: now, HttpDeliverer(TargetAuth.NONE))
    reply = WatchdogHandler(settings, watchdog, lambda line: None).handle({}, b"")
    assert reply.status == 200, reply.body
    return dict(reply.body)


def z(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("catch_up", [False, True], ids=["no-catch-up", "catch-up"])
@pytest.mark.parametrize("edit", list(EDITS), ids=list(EDITS))
def test_a_schedule_edit_reports_no_false_missed_run_and_catches_up_no_extra_run(
    served: tuple[FunctionServer, str, Path], edit: str, catch_up: bool,
) -> None:
    server, collection, ledger = served
    u = EDITS[edit].unit
    name = f"edited-{uuid.uuid4().hex[:6]}"
    old = watched(name, EDITS[edit].old, u, catch_up)
    new = watched(name, EDITS[edit].new, u, catch_up)
    # Real past instants (the served function never takes a catch-up for a forced run).
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    base = now - timedelta(minutes=now.minute % 2) - 12 * u
    if u == timedelta(hours=1):
        base = base.replace(minute=0)

    def at(units: float) -> datetime:
        return base + units * u

    assert old.is_scheduled(at(1)) and new.is_scheduled(at(1.5)), "the timeline's units"
    runs = Runs(collection)
    runs.completed(name, at(1), at(2), at(3))
    grace, late = u / 8, u / 4

    first = tick(old, collection, server.url, at(3) + late, grace)
    assert first["problems"] == []

    # The old schedule's run at 4u did not run, the one at 5u did; Scheduler switched;
    # the new schedule's runs from 5½u ran.
    runs.completed(name, at(5), at(5.5), at(6.5), at(7.5))
    second = tick(new, collection, server.url, at(8) + late, grace)
    # 4u: the old schedule was in force (its run at 5u ran): missed, and never caught up
    # under the new schedule. 6u, 7u, 8u (the old one's, after the switch) and 3½u, 4½u
    # (the new one's, before it): no problem, nothing delivered.
    assert [(p["kind"], p["schedule_time"]) for p in second["problems"]] == [
        ("missed", z(at(4)))]
    assert second.get(CAUGHT_UP, []) == []

    third = tick(new, collection, server.url, at(9) + late, grace)
    if catch_up:  # the new schedule's missed run at 8½u: caught up, as any
        assert third["problems"] == []
        assert [(c["schedule_time"], c["status"]) for c in third[CAUGHT_UP]] == [
            (z(at(8.5)), "completed")]
    else:
        assert [(p["kind"], p["schedule_time"]) for p in third["problems"]] == [
            ("missed", z(at(8.5)))]
        assert third.get(CAUGHT_UP, []) == []
    executed = [e["schedule_time"] for e in read_ledger(str(ledger)) if e["job"] == name]
    assert executed == ([at(8.5).isoformat()] if catch_up else [])

    # Later ticks judge the new schedule alone: no run of the old one is reported again.
    runs.completed(name, at(9.5))
    fourth = tick(new, collection, server.url, at(9.5) + late, grace)
    assert fourth["problems"] == [] and fourth.get(CAUGHT_UP, []) == []


T0 = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)


def test_an_edit_is_recorded_once_and_each_schedule_judges_its_own_runs() -> None:
    hourly = WatchedJob("job", "0 * * * *")
    half_past = dataclasses.replace(hourly, schedule="30 * * * *")
    history = ScheduleHistory()
    note_table(hourly, history, T0, T0 - timedelta(days=2))
    assert (history.key, history.past) == (schedule_key(hourly), [])
    seen_old = T0 + timedelta(hours=1)
    note_table(hourly, history, seen_old, T0)
    edited = T0 + timedelta(hours=4)
    note_table(half_past, history, edited, T0)
    note_table(half_past, history, edited + timedelta(hours=1), T0)  # no second edit
    assert history.past == [PastSchedule(schedule_key(hourly), None, edited)]
    assert history.since == seen_old
    times = due_times(half_past, history, T0, T0 + timedelta(hours=6))
    hours = [T0 + timedelta(hours=h) for h in range(7)]
    # The old schedule up to the edit, the new one after the last tick that saw the old.
    assert times == sorted({*hours[1:5], *(h + timedelta(minutes=30) for h in hours[1:6])})
    (window,) = edit_windows(half_past, history, T0)
    assert window.old_only == frozenset(hours[2:5])
    # An old run in the window is unsure unless a later old run ran; a new one unless an
    # earlier (or the same) new run did.
    assert unsure(hours[2], [window], set()) and not unsure(hours[2], [window], {hours[3]})
    new_runs = sorted(window.new_only)
    assert unsure(new_runs[0], [window], {new_runs[1]})
    assert not unsure(new_runs[1], [window], {new_runs[0]})
    assert not unsure(hours[1], [window], set())  # before the window: judged as ever
    # Once its runs are all before the lookback, the past schedule is forgotten.
    note_table(half_past, history, edited + timedelta(days=3), edited + timedelta(days=1))
    assert history.past == []


@pytest.mark.parametrize("schedules", [
    "text", {"key": "not json"}, {"past": [{"key": "[]"}]},
    {"past": [{"key": json.dumps(["0 * * * *", "Etc/UTC", None, None])}]},  # no until
    {"seen_at": "yesterday"},
])
def test_a_cursor_with_schedules_it_cannot_read_is_refused(schedules: object) -> None:
    with pytest.raises(MalformedDocument):
        Cursor.from_document({"schedules": schedules})
    assert Cursor.from_document({}).schedules == ScheduleHistory()  # an older cursor

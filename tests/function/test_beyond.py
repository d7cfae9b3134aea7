"""Runs beyond the schedule, piece by piece: what the function notes (dedup/beyond.py), how
a tick judges the notes (dedup/watchdog/beyond.py), the `beyond_schedule` streak, and the
settings that ask for it (the stack config, the watchdog's job table). End to end, served:
test_beyond_served.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from dedup.beyond import FORCED, UNSCHEDULED, BeyondNote, is_business_run, why_beyond
from dedup.business_runs import business_schedule
from dedup.keys import RunKey
from dedup.settings import SettingsError
from dedup.watchdog.beyond import judge_notes, notes_of
from dedup.watchdog.due import WatchedJob
from dedup.watchdog.incidents import BEYOND_SCHEDULE, OPENED, RESOLVED, Thresholds, judge_streaks
from dedup.watchdog.settings import parse_watch_jobs
from infra.config import ConfigError, load_config
from infra.watchdog import watch_jobs

HOURLY = business_schedule("0 * * * *", "Etc/UTC")
BERLIN_DAILY = business_schedule("30 2 * * *", "Europe/Berlin", "once")
AT = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)


def key(at: datetime, **kw: object) -> RunKey:
    return RunKey("p-roject", "europe-west1", "job", at, **kw)  # type: ignore[arg-type]


def test_the_function_notes_only_runs_no_business_run_explains() -> None:
    assert why_beyond(key(AT), HOURLY) is None
    assert why_beyond(key(AT + timedelta(minutes=30)), HOURLY) == UNSCHEDULED
    assert why_beyond(key(AT + timedelta(hours=1), forced=True), HOURLY) == FORCED
    assert why_beyond(key(AT, early=True), HOURLY) == FORCED  # forcedRuns: replaceNext
    # A re-run's generation, or a delivery carrying no schedule: nothing to judge by.
    assert why_beyond(key(AT + timedelta(minutes=30), generation=1), HOURLY) is None
    assert why_beyond(key(AT + timedelta(minutes=30)), None) is None


def test_both_readings_of_a_repeated_local_time_are_the_business_run() -> None:
    # 2026-10-25 02:30 Berlin happens twice: 00:30Z (CEST) and 01:30Z (CET); `once`.
    first, second = (datetime(2026, 10, 25, h, 30, tzinfo=UTC) for h in (0, 1))
    assert is_business_run(BERLIN_DAILY, first) and is_business_run(BERLIN_DAILY, second)
    assert not is_business_run(BERLIN_DAILY, datetime(2026, 10, 25, 2, 30, tzinfo=UTC))


def note(at: datetime, why: str, arrived: datetime, run_id: str | None = None) -> BeyondNote:
    return BeyondNote(run_id or f"{why}-{at:%H%M}", at, why, arrived)


def test_unscheduled_runs_are_reported_once_and_the_watchdogs_schedule_explains_an_edit() -> None:
    job = WatchedJob("job", "0 * * * *", runs_beyond_schedule="log")
    odd = note(AT + timedelta(minutes=30), UNSCHEDULED, AT + timedelta(minutes=30))
    # Noted unscheduled by the schedule its delivery carried, but on the hour: a business
    # run of the schedule the watchdog's table holds (the job's schedule was edited).
    edited = note(AT + timedelta(hours=1), UNSCHEDULED, AT + timedelta(hours=1))
    seen: dict[str, datetime] = {}
    problems = judge_notes(job, seen, {n.run_id: n for n in (odd, edited)})
    assert [(p.kind, p.run_id, p.schedule_time) for p in problems] == [
        ("unexplained_run", odd.run_id, odd.schedule_time)]
    assert set(seen) == {odd.run_id, edited.run_id}
    assert judge_notes(job, seen, {odd.run_id: odd}) == []  # judged once


def test_forced_runs_beyond_the_daily_number_are_each_reported() -> None:
    job = WatchedJob("job", "0 * * * *", runs_beyond_schedule="page", max_forced_runs_per_day=2)
    forced = [note(AT + timedelta(hours=h + 1), FORCED, AT + timedelta(hours=h))
              for h in (0, 1, 2, 30)]  # three within 24 hours, then one a day later
    problems = judge_notes(job, {}, {n.run_id: n for n in forced})
    assert [(p.kind, p.run_id) for p in problems] == [("too_many_forced_runs", forced[2].run_id)]
    unlimited = WatchedJob("job", "0 * * * *", runs_beyond_schedule="page")
    assert judge_notes(unlimited, {}, {n.run_id: n for n in forced}) == []


def test_a_ledger_entry_that_is_no_note_is_left_out() -> None:
    good = note(AT, FORCED, AT, "r1")
    notes = notes_of([{"runs": {"r1": good.to_document(), "r2": {"why": "forced"},
                                "r3": "text"}}, {"runs": "not a map"}])
    assert notes == {"r1": good}


def test_the_beyond_schedule_incident_pages_once_while_extra_runs_go_on() -> None:
    thresholds = Thresholds(1, 2)
    hour = [AT + timedelta(hours=h) for h in range(6)]
    streaks, made = judge_streaks("job", thresholds, {}, [
        (hour[0] + timedelta(minutes=30), "x0", "unexplained_run")], {"r1": hour[1]}, AT)
    assert [(t.kind, t.event) for t in made] == [(BEYOND_SCHEDULE, OPENED)]
    # The next tick: another extra run between good ones: still open, no new page.
    streaks, made = judge_streaks("job", thresholds, streaks, [
        (hour[1] + timedelta(minutes=30), "x1", "unexplained_run")], {"r2": hour[2]}, AT)
    assert made == [] and streaks[BEYOND_SCHEDULE].open
    # Ticks without one: two good runs in a row close it.
    streaks, made = judge_streaks("job", thresholds, streaks, [], {"r3": hour[3]}, AT)
    assert made == []
    streaks, made = judge_streaks("job", thresholds, streaks, [], {"r4": hour[4]}, AT)
    assert [(t.kind, t.event) for t in made] == [(BEYOND_SCHEDULE, RESOLVED)]


def test_a_job_that_never_had_one_keeps_no_beyond_streak() -> None:
    streaks, _ = judge_streaks("job", Thresholds(), {}, [], {"r1": AT}, AT)
    assert BEYOND_SCHEDULE not in streaks


def test_the_job_table_carries_the_setting_and_refuses_a_wrong_one() -> None:
    entry = {"name": "job", "schedule": "0 * * * *", "runsBeyondSchedule": "page",
             "maxForcedRunsPerDay": 3}
    (job,) = parse_watch_jobs(json.dumps([entry]))
    assert (job.runs_beyond_schedule, job.max_forced_runs_per_day, job.beyond_pages) == (
        "page", 3, True)
    with pytest.raises(SettingsError, match="runsBeyondSchedule 'loud'"):
        parse_watch_jobs(json.dumps([{**entry, "runsBeyondSchedule": "loud"}]))
    with pytest.raises(SettingsError, match="maxForcedRunsPerDay"):
        parse_watch_jobs(json.dumps([{**entry, "maxForcedRunsPerDay": "3"}]))


def stack(**job: object) -> dict[str, object]:
    return {"gcp:project": "acme-scheduler-test", "gcp:region": "europe-west1",
            "scheduler-dedup:jobs": [{"name": "hourly", "schedule": "0 * * * *", **job}]}


def test_the_stack_config_reaches_the_watchdogs_table() -> None:
    (entry,) = watch_jobs(load_config(stack(runsBeyondSchedule="log", maxForcedRunsPerDay=2)))
    assert (entry["runsBeyondSchedule"], entry["maxForcedRunsPerDay"]) == ("log", 2)
    (plain,) = watch_jobs(load_config(stack()))
    assert "runsBeyondSchedule" not in plain  # off: the table as before


@pytest.mark.parametrize(("job", "named"), [
    ({"runsBeyondSchedule": "loud"}, "runsBeyondSchedule"),
    ({"maxForcedRunsPerDay": 2}, "maxForcedRunsPerDay"),  # runsBeyondSchedule off
    ({"runsBeyondSchedule": "log", "maxForcedRunsPerDay": 0}, "maxForcedRunsPerDay"),
])
def test_a_wrong_setting_is_a_config_error_naming_it(job: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(stack(**job))
    assert named in str(caught.value) and "Fix:" in str(caught.value)

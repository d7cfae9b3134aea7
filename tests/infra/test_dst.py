"""The DST part of infra.scheduler_rules: which cron schedules run into a DST change, and
the advisory `make plan` and the policy pack print for them."""

from __future__ import annotations

import copy
import dataclasses
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from infra import scheduler_rules
from infra.config import load_config
from infra.scheduler_rules import (
    GAP,
    REPEAT,
    DstHazard,
    ScheduleError,
    dst_advisory,
    dst_hazards,
    offset_changes,
)
from operator_tools.plan import dst_advisories, render
from operator_tools.stack_files import load_stack_config
from policies import offline_check
from tests.infra.helpers import StackUnderTest
from tests.stacks import fixture_stack_file

# 2027: Europe/Berlin springs forward on 28 March (02:00 -> 03:00) and falls back on
# 31 October (03:00 -> 02:00); both at 01:00 UTC.
YEAR_START = datetime(2027, 1, 1, tzinfo=UTC)
YEAR_END = datetime(2028, 1, 1, tzinfo=UTC)
SPRING, AUTUMN = date(2027, 3, 28), date(2027, 10, 31)


def summary(hazards: list[DstHazard]) -> list[tuple[date, time, str]]:
    return [(h.date, h.local_time, h.kind) for h in hazards]


def test_offset_changes_are_found_to_the_second() -> None:
    changes = list(offset_changes(ZoneInfo("Europe/Berlin"), YEAR_START, YEAR_END))
    assert [(c.at, c.before, c.after, c.kind) for c in changes] == [
        (datetime(2027, 3, 28, 1, 0, tzinfo=UTC), timedelta(hours=1), timedelta(hours=2), GAP),
        (datetime(2027, 10, 31, 1, 0, tzinfo=UTC), timedelta(hours=2), timedelta(hours=1),
         REPEAT),
    ]
    assert [c.window for c in changes] == [
        (datetime(2027, 3, 28, 2, 0), datetime(2027, 3, 28, 3, 0)),
        (datetime(2027, 10, 31, 2, 0), datetime(2027, 10, 31, 3, 0)),
    ]
    assert list(offset_changes(ZoneInfo("Etc/UTC"), YEAR_START, YEAR_END)) == []


@pytest.mark.parametrize(("cron", "expected"), [
    # Hourly: 02:07 is skipped in spring and lived twice in autumn.
    ("7 * * * *", [(SPRING, time(2, 7), GAP), (AUTUMN, time(2, 7), REPEAT)]),
    ("30 2 * * *", [(SPRING, time(2, 30), GAP), (AUTUMN, time(2, 30), REPEAT)]),
    # 02:00 is the first minute of both windows; 03:00 is outside both.
    ("0 2 * * *", [(SPRING, time(2, 0), GAP), (AUTUMN, time(2, 0), REPEAT)]),
    ("0 3 * * *", []),
    ("0 12 * * *", []),
    ("59 1 * * *", []),
    # Both changes fall on a Sunday: a weekday job never meets them.
    ("30 2 * * 1-5", []),
    ("30 2 * * 0", [(SPRING, time(2, 30), GAP), (AUTUMN, time(2, 30), REPEAT)]),
    # Only in March.
    ("30 2 * 3 *", [(SPRING, time(2, 30), GAP)]),
])
def test_berlin_schedules(cron: str, expected: list[tuple[date, time, str]]) -> None:
    assert summary(dst_hazards(cron, "Europe/Berlin", YEAR_START, YEAR_END)) == expected


@pytest.mark.parametrize("cron", ["* * * * *", "7 * * * *", "30 2 * * *"])
def test_utc_jobs_never_meet_a_change(cron: str) -> None:
    assert dst_hazards(cron, "Etc/UTC", YEAR_START, YEAR_END) == []


def test_every_minute_reports_each_minute_of_both_windows_without_walking_the_year(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """525,600 ticks a year: only the two windows' ticks may be asked of croniter."""
    asked: list[datetime] = []

    class CountingCroniter(croniter):  # type: ignore[misc]  # croniter is untyped
        def get_next(self, *args: Any, **kwargs: Any) -> Any:
            tick = super().get_next(*args, **kwargs)
            asked.append(tick)
            return tick

    monkeypatch.setattr(scheduler_rules, "croniter", CountingCroniter)
    hazards = dst_hazards("* * * * *", "Europe/Berlin", YEAR_START, YEAR_END)
    assert len(hazards) == 120
    assert [h.kind for h in hazards] == [GAP] * 60 + [REPEAT] * 60
    assert hazards[0].local_time == time(2, 0) and hazards[59].local_time == time(2, 59)
    assert {h.date for h in hazards} == {SPRING, AUTUMN}
    assert len(asked) == 122  # each window's 60 ticks, and the first one past it


def test_half_hour_changes_and_a_window_across_midnight() -> None:
    # Lord Howe Island moves its clocks by 30 minutes: 02:00 -> 02:30 on 3 October 2027,
    # 02:00 -> 01:30 on 4 April 2027.
    lord_howe = dst_hazards("15,45 1,2 * * *", "Australia/Lord_Howe", YEAR_START, YEAR_END)
    assert summary(lord_howe) == [
        (date(2027, 4, 4), time(1, 45), REPEAT),
        (date(2027, 10, 3), time(2, 15), GAP),
    ]
    # Santiago falls back at midnight (00:00 -> 23:00 the day before) and springs forward
    # at midnight (00:00 -> 01:00).
    santiago = dst_hazards("30 23,0 * * *", "America/Santiago", YEAR_START, YEAR_END)
    assert summary(santiago) == [
        (date(2027, 4, 3), time(23, 30), REPEAT),
        (date(2027, 9, 5), time(0, 30), GAP),
    ]
    [repeat, _] = santiago
    assert (repeat.window_start, repeat.window_end) == (
        datetime(2027, 4, 3, 23, 0), datetime(2027, 4, 4, 0, 0))


def test_only_changes_inside_the_period_count() -> None:
    after_spring = datetime(2027, 3, 28, 1, 0, 1, tzinfo=UTC)
    assert summary(dst_hazards("30 2 * * *", "Europe/Berlin", after_spring, YEAR_END)) == [
        (AUTUMN, time(2, 30), REPEAT)]
    spring_change = datetime(2027, 3, 28, 1, 0, tzinfo=UTC)  # the end is excluded
    assert dst_hazards("30 2 * * *", "Europe/Berlin", YEAR_START, spring_change) == []


@pytest.mark.parametrize(("cron", "zone"), [
    ("every 5 minutes", "Europe/Berlin"), ("30 2 * * *", "CEST"), ("0 0 3 * * *", "Etc/UTC"),
])
def test_a_schedule_scheduler_refuses_is_an_error(cron: str, zone: str) -> None:
    with pytest.raises(ScheduleError):
        dst_hazards(cron, zone, YEAR_START, YEAR_END)


def test_the_advisory_names_the_dates_and_the_fix() -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    advisory = dst_advisory("30 2 * * *", "Europe/Berlin", now)
    assert advisory is not None
    assert "on 2027-03-28 02:30 does not exist (clocks skip 02:00-03:00)" in advisory
    assert "on 2027-10-31 02:30 occurs twice (clocks repeat 02:00-03:00)" in advisory
    assert "dstRepeated and dstSkipped" in advisory and "use timeZone Etc/UTC" in advisory
    assert dst_advisory("0 12 * * *", "Europe/Berlin", now) is None
    assert dst_advisory("30 2 * * *", "Etc/UTC", now) is None
    # A year from `now`: from April 2027 the next spring change is 2028's.
    later = dst_advisory("30 2 * * *", "Europe/Berlin", datetime(2027, 4, 1, tzinfo=UTC))
    assert later is not None and "2028-03-26 02:30 does not exist" in later
    assert "2027-03-28" not in later
    every_minute = dst_advisory("* * * * *", "Europe/Berlin", now)
    assert every_minute is not None
    assert "on 2027-03-28 02:00 ... 02:59 (60 times) do not exist" in every_minute


def test_plan_lists_the_dst_advisories_of_exactly_the_jobs_that_meet_a_change(
    stack_runs: dict[str, StackUnderTest],
) -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    dev = stack_runs["dev"].run
    # dev: hourly-sync at minute 7 and nightly-report at 02:30, both Europe/Berlin; its
    # heartbeat is UTC.
    assert [name for name, _ in dst_advisories(dev, now)] == [
        "job-hourly-sync-job", "job-nightly-report-job"]
    text = render(dev, now)
    advisories = text.split("\nAdvisories:\n", 1)[1].splitlines()
    assert len(advisories) == 2
    assert advisories[0].startswith("  [advisory] job-hourly-sync-job: schedule '7 * * * *' ")
    assert "2027-03-28 02:07 does not exist" in advisories[0]
    # prod's Berlin and New York jobs run outside the change windows.
    assert dst_advisories(stack_runs["prod"].run, now) == []
    assert "Advisories:" not in render(stack_runs["prod"].run, now)


def test_the_advisory_leaves_out_the_changes_whose_behaviour_the_team_chose(
    stack_runs: dict[str, StackUnderTest],
) -> None:
    """dstRepeated chosen (per job or for the stack): no word of the repeated times;
    dstSkipped chosen: none of the skipped ones; both: no advisory for the job at all, in
    `make plan` and `make policy-check` alike (issue 38)."""
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    values = copy.deepcopy(load_stack_config(fixture_stack_file("dev")))
    for job in values["scheduler-dedup:jobs"]:
        if job["name"] == "hourly-sync":
            job["dstRepeated"] = "once"
    values["scheduler-dedup:dstSkipped"] = "shift"
    chosen = load_config(values).dst_chosen_by_job_id()
    assert chosen == {"sched-dedup-dev-heartbeat": {"gap"},
                      "sched-dedup-dev-hourly-sync": {"gap", "repeat"},
                      "sched-dedup-dev-nightly-report": {"gap"}}
    assert load_config(load_stack_config(fixture_stack_file("dev"))).dst_chosen_by_job_id() == {
        job_id: frozenset() for job_id in chosen}

    # The same resources as declared (the choices change headers, not what is advised on).
    dev = dataclasses.replace(stack_runs["dev"].run, dst_chosen=chosen)
    advised = dict(dst_advisories(dev, now))
    assert list(advised) == ["job-nightly-report-job"]
    assert "2027-10-31 02:30" in advised["job-nightly-report-job"]
    assert "does not exist" not in advised["job-nightly-report-job"]

    violations = [v for v in offline_check.check_declared(dev.resources, dst_chosen=chosen)
                  if v.policy == "scheduler-job-dst-change"]
    assert [str(v.urn).rsplit("::", 1)[1] for v in violations] == ["job-nightly-report-job"]
    assert "occurs twice" in violations[0].message  # the year from now: the next autumn
    assert "does not exist" not in violations[0].message
    # Nothing chosen: every job that meets a change, as before.
    unchosen = offline_check.check_declared(dev.resources)
    assert len([v for v in unchosen if v.policy == "scheduler-job-dst-change"]) == 2

"""Business runs (dedup.business_runs): one run per scheduled local time, whatever Cloud
Scheduler does when the clocks change.

Over every offset change of the next ten years in every time zone the kit's fixtures use
(and Lord Howe's half-hour change), for daily jobs inside the change window, hourly and
every-15-minutes jobs, with Scheduler firing a repeated local time once or twice: every
firing names a business run (never an instant of its own, which would run twice), the
runs the watchdog expects are exactly the ones the team scheduled, and the kit's defaults
are BSD cron's `-s`."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from dedup.business_runs import (
    EACH,
    ONCE,
    SHIFT,
    SKIP,
    BusinessRun,
    BusinessSchedule,
    SkippedTime,
    default_dst,
    runs_by_the_clock,
)
from infra.scheduler_rules import GAP, OffsetChange, offset_changes, schedule_times

# Every zone with DST in the kit's stack fixtures and example stacks, and one whose change
# is 30 minutes.
ZONES = ("Europe/Berlin", "Europe/London", "Europe/Amsterdam", "America/New_York",
         "America/Los_Angeles", "US/Central", "Australia/Lord_Howe")
TEN_YEARS = (datetime(2027, 1, 1, tzinfo=UTC), datetime(2037, 1, 1, tzinfo=UTC))


def changes() -> Iterator[tuple[str, OffsetChange]]:
    for zone in ZONES:
        for change in offset_changes(ZoneInfo(zone), *TEN_YEARS):
            yield zone, change


CHANGES = list(changes())


def firings(schedule: str, zone: str, start: datetime, end: datetime,
            fires: str) -> list[datetime]:
    """When a Scheduler that reads the schedule as croniter does fires ("twice": both
    instants of a repeated local time; "once": the first), in [start, end)."""
    out: list[datetime] = []
    previous = None
    for instant in schedule_times(schedule, zone, start):
        if instant >= end:
            return out
        wall = instant.replace(tzinfo=None)
        if not (fires == "once" and wall == previous):
            out.append(instant.astimezone(UTC))
        previous = wall
    return out


def window_schedules(change: OffsetChange) -> list[str]:
    """Daily at the first minute of the change's window and inside it; hourly at its
    minute; every 15 minutes."""
    start, end = change.window
    inside = start + (end - start) / 2
    return [f"{start.minute} {start.hour} * * *", f"{inside.minute} {inside.hour} * * *",
            f"{inside.minute} * * * *", "*/15 * * * *"]


def test_the_fixtures_meet_both_kinds_of_change_every_year() -> None:
    kinds = Counter((zone, c.kind) for zone, c in CHANGES)
    assert set(kinds) == {(zone, kind) for zone in ZONES for kind in ("gap", "repeat")}
    assert all(n == 10 for n in kinds.values())  # one spring and one autumn a year


def test_defaults_follow_bsd_cron_s() -> None:
    assert [runs_by_the_clock(s) for s in (
        "30 1 * * *", "0,30 2 * * *", "30 * * * *", "*/15 * * * *", "0 */2 * * *",
        "15 2 * * 1-5")] == [False, False, True, True, True, False]
    assert default_dst("30 1 * * *") == (ONCE, SHIFT)
    assert default_dst("30 * * * *") == (EACH, SKIP)


@pytest.mark.parametrize(("zone", "change"), CHANGES,
                         ids=[f"{z}-{c.at:%Y-%m-%d}" for z, c in CHANGES])
def test_every_firing_names_one_business_run_and_every_run_is_expected(
    zone: str, change: OffsetChange
) -> None:
    start, end = change.at - timedelta(hours=14), change.at + timedelta(hours=14)
    for schedule, fires in itertools.product(window_schedules(change), ("once", "twice")):
        business = BusinessSchedule(schedule, zone)
        expected = list(business.runs(start - timedelta(hours=6), end + timedelta(hours=6)))
        keys = [run.key_time for run in expected]
        assert len(keys) == len(set(keys)), (schedule, "two runs share a key")
        ran: set[datetime] = set()
        for instant in firings(schedule, zone, start, end, fires):
            run = business.run_named(instant)
            if isinstance(run, SkippedTime):
                continue  # dstSkipped skip: answered 200, nothing runs
            # The function keys the delivery by this: a key no expected run has would run
            # as a run of its own, a double.
            key = run.key_time if run is not None else instant
            assert key in keys, (schedule, instant)
            assert run is None or instant in run.deliveries
            ran.add(key)
        in_range = {r.key_time for r in expected if start < r.due < end}
        if fires == "twice" or business.repeated == ONCE:
            # Scheduler's firings reach every run; under `each` with Scheduler firing once,
            # the second instant of a repeated time is left to the watchdog (missed).
            assert in_range <= ran | {r.key_time for r in expected if r.due >= end}, schedule
        per_day = Counter(r.local.date() for r in expected if start <= r.due < end)
        if not runs_by_the_clock(schedule):
            # At fixed hours: once a day, neither skipped nor doubled.
            assert set(per_day.values()) == {1}, (schedule, per_day)


@pytest.mark.parametrize(("zone", "change"), CHANGES,
                         ids=[f"{z}-{c.at:%Y-%m-%d}" for z, c in CHANGES])
def test_a_job_by_the_clock_runs_at_every_real_instant_of_its_minute(
    zone: str, change: OffsetChange
) -> None:
    """`30 * * * *` runs in both 01:30s of autumn and not in spring's missing hour: as
    many runs as there are instants with that local minute (23, 24 or 25 a day)."""
    start, end = change.at - timedelta(hours=12), change.at + timedelta(hours=12)
    inside = change.window[0] + (change.window[1] - change.window[0]) / 2
    schedule = f"{inside.minute} * * * *"
    runs = list(BusinessSchedule(schedule, zone).runs(start, end))
    real = [start + timedelta(minutes=m) for m in range(1, 24 * 60 + 1)]
    wanted = [t for t in real if t.astimezone(ZoneInfo(zone)).minute == inside.minute]
    assert [r.key_time for r in runs] == wanted


@pytest.mark.parametrize(("repeated", "skipped"), [(ONCE, SHIFT), (EACH, SKIP),
                                                    (ONCE, SKIP), (EACH, SHIFT)])
def test_explicit_choices_override_the_defaults(repeated: str, skipped: str) -> None:
    """A daily 01:30 Europe/London job: 2027-03-28 has no 01:30, 2027-10-31 has two."""
    business = BusinessSchedule("30 1 * * *", "Europe/London", repeated, skipped)
    spring = list(business.runs(datetime(2027, 3, 27, 12, tzinfo=UTC),
                                datetime(2027, 3, 28, 12, tzinfo=UTC)))
    autumn = list(business.runs(datetime(2027, 10, 30, 12, tzinfo=UTC),
                                datetime(2027, 10, 31, 12, tzinfo=UTC)))
    change = datetime(2027, 3, 28, 1, 0, tzinfo=UTC)  # 01:00 GMT -> 02:00 BST
    assert [r.key_time for r in spring] == ([change] if skipped == SHIFT else [])
    first, second = (datetime(2027, 10, 31, h, 30, tzinfo=UTC) for h in (0, 1))
    assert [r.key_time for r in autumn] == ([first] if repeated == ONCE else [first, second])
    named = business.run_named(second)
    assert isinstance(named, BusinessRun)
    assert named.key_time == (first if repeated == ONCE else second)
    # The watchdog waits for the latest instant Scheduler might deliver it at.
    assert business.latest_delivery(first) == (second if repeated == ONCE else first)
    gap_reading = business.run_named(datetime(2027, 3, 28, 0, 30, tzinfo=UTC))
    assert isinstance(gap_reading, SkippedTime if skipped == SKIP else BusinessRun)


def test_a_skipped_time_is_keyed_by_an_instant_no_other_run_uses() -> None:
    """`0,30 2 * * *` in Berlin's spring gap (02:00-03:00): both shift to the change at
    01:00Z; each keeps an instant of its own, and none is a real run's."""
    business = BusinessSchedule("0,30 2,3 * * *", "Europe/Berlin")
    day = list(business.runs(datetime(2027, 3, 27, 12, tzinfo=UTC),
                             datetime(2027, 3, 28, 12, tzinfo=UTC)))
    assert [(r.local.strftime("%H:%M"), r.key_time.strftime("%H:%MZ"), r.due.strftime(
        "%H:%MZ")) for r in day] == [
        ("02:00", "00:00Z", "01:00Z"), ("02:30", "00:30Z", "01:00Z"),
        ("03:00", "01:00Z", "01:00Z"), ("03:30", "01:30Z", "01:30Z")]


def test_far_from_a_change_an_instant_is_its_own_run_without_walking_the_schedule() -> None:
    business = BusinessSchedule("* * * * *", "Europe/Berlin")
    instant = datetime(2027, 6, 1, 12, 0, 7, tzinfo=UTC)  # not even on the schedule
    assert business.run_named(instant) is None
    assert business.key_time(instant) == instant == business.latest_delivery(instant)


@pytest.mark.parametrize(("field", "value"), [("dst_repeated", "twice"),
                                              ("dst_skipped", "later")])
def test_a_choice_outside_the_list_is_refused_naming_it(field: str, value: str) -> None:
    with pytest.raises(ValueError, match=f"{value!r} is not one of"):
        BusinessSchedule("30 1 * * *", "Europe/London", **{field: value})
    with pytest.raises(ValueError, match="5-field"):
        BusinessSchedule("30 1 * * * *", "Europe/London")


def test_gap_kind_is_what_the_scan_calls_it() -> None:
    kinds = {c.kind for _, c in CHANGES}
    assert GAP in kinds

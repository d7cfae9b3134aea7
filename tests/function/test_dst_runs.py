"""One run per business time, through the handler against the real Firestore emulator, and
the watchdog over the records it leaves (issue: "Twice on the day the clocks go back").

A daily 01:30 Europe/London job: on 2026-10-25 01:30 happens twice (00:30Z BST, 01:30Z
GMT); on 2026-03-29 it does not happen (01:00 GMT -> 02:00 BST at 01:00Z). Whatever
Scheduler fires (once, at either instant, or twice), the job runs once, and the watchdog
expects one run; a job by the clock (`30 * * * *`) runs at both 01:30s. Before business
runs, the second 01:30 executed the export again, and the watchdog expected both."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dedup.keys import RunKey, format_instant
from dedup.watchdog.due import WatchedJob
from infra.scheduled_job import (
    HEADER_DST_REPEATED,
    HEADER_DST_SKIPPED,
    HEADER_FORCED_RUNS,
    HEADER_SCHEDULE,
    HEADER_TIME_ZONE,
)
from local_stack.deliveries import LOCATION, PROJECT, in_process_function, scheduler_headers
from local_stack.steered_job import read_ledger
from tests.function.test_watchdog import Watch, problems

pytestmark = pytest.mark.usefixtures("firestore_emulator")

JOB = "nightly-export"
LONDON = "Europe/London"
FIRST, SECOND = (datetime(2026, 10, 25, h, 30, tzinfo=UTC) for h in (0, 1))
SPRING_CHANGE = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)


def headers(at: datetime, schedule: str = "30 1 * * *", **choices: str) -> dict[str, str]:
    """What the kit's Scheduler job sends (infra.scheduled_job.job_headers)."""
    names = {"repeated": HEADER_DST_REPEATED, "skipped": HEADER_DST_SKIPPED,
             "forced": HEADER_FORCED_RUNS}
    return {
        **scheduler_headers(JOB, format_instant(at)),
        HEADER_SCHEDULE: schedule, HEADER_TIME_ZONE: LONDON,
        **{names[k]: v for k, v in choices.items()},
    }


def executions(ledger: Path) -> list[str]:
    return [e["schedule_time"] for e in read_ledger(str(ledger))]


@pytest.mark.parametrize("order", [(FIRST, SECOND), (SECOND, FIRST)])
def test_the_repeated_0130_runs_once_whichever_instant_comes_first(
    collection_name: str, ledger: Path, order: tuple[datetime, datetime]
) -> None:
    function = in_process_function(collection_name)
    key = RunKey(PROJECT, LOCATION, JOB, FIRST)
    replies = [function.deliver(headers(at)) for at in order]
    assert [(status, body["outcome"], body["run_id"]) for status, body in replies] == [
        (200, "completed", key.run_id), (200, "duplicate", key.run_id)]
    assert executions(ledger) == [FIRST.isoformat()]  # keyed by the first instant


def test_under_each_the_repeated_0130_runs_twice(collection_name: str, ledger: Path) -> None:
    function = in_process_function(collection_name)
    for at in (FIRST, SECOND):
        status, body = function.deliver(headers(at, repeated="each"))
        assert (status, body["outcome"]) == (200, "completed")
    assert executions(ledger) == [FIRST.isoformat(), SECOND.isoformat()]


def test_a_job_by_the_clock_runs_in_both_0130s(collection_name: str, ledger: Path) -> None:
    function = in_process_function(collection_name)
    for at in (FIRST, SECOND):
        status, body = function.deliver(headers(at, "30 * * * *"))
        assert (status, body["outcome"]) == (200, "completed")
    assert executions(ledger) == [FIRST.isoformat(), SECOND.isoformat()]


@pytest.mark.parametrize("reading", [SPRING_CHANGE, SPRING_CHANGE - timedelta(minutes=30),
                                     SPRING_CHANGE + timedelta(minutes=30)])
def test_the_missing_0130_runs_once_at_the_change_whatever_instant_names_it(
    collection_name: str, ledger: Path, reading: datetime
) -> None:
    """croniter (and so the emulator) fires it at the change; the wall time read with the
    offset before or after it names the same run."""
    function = in_process_function(collection_name)
    status, body = function.deliver(headers(reading))
    assert (status, body["outcome"]) == (200, "completed")
    for other in (SPRING_CHANGE, SPRING_CHANGE - timedelta(minutes=30)):
        status, again = function.deliver(headers(other))
        assert (status, again["outcome"], again["run_id"]) == (200, "duplicate", body["run_id"])
    assert executions(ledger) == [SPRING_CHANGE.isoformat()]


def test_under_skip_the_missing_time_runs_nothing(collection_name: str, ledger: Path) -> None:
    function = in_process_function(collection_name)
    status, body = function.deliver(headers(SPRING_CHANGE, skipped="skip"))
    assert (status, body["outcome"]) == (200, "dst_skipped")
    assert "does not exist" in body["detail"]
    assert executions(ledger) == []
    [line] = function.logs
    assert (line["outcome"], line["severity"]) == ("dst_skipped", "INFO")


@pytest.mark.parametrize(("name", "value"), [
    (HEADER_SCHEDULE, "every 5 minutes"), (HEADER_TIME_ZONE, "Mars/Olympus"),
    (HEADER_DST_REPEATED, "twice"), (HEADER_FORCED_RUNS, "sometimes"),
    ("X-Dedup-Attempt-Deadline", "3 minutes"), ("X-Dedup-Attempt-Deadline", "0"),
])
def test_a_malformed_business_header_is_a_400_that_runs_nothing(
    collection_name: str, ledger: Path, name: str, value: str
) -> None:
    function = in_process_function(collection_name)
    status, body = function.deliver({**headers(FIRST), name: value})
    assert status == 400 and name in body["error"]
    assert executions(ledger) == []


@pytest.mark.parametrize("fired", [(FIRST,), (SECOND,), (FIRST, SECOND)])
def test_the_watchdog_expects_one_run_whatever_scheduler_fired(
    collection_name: str, ledger: Path, fired: tuple[datetime, ...]
) -> None:
    function = in_process_function(collection_name)
    function.deliver(headers(FIRST - timedelta(days=1)))  # the job's first recorded run
    job = WatchedJob(JOB, "30 1 * * *", LONDON, retry_window_seconds=600)
    watch = Watch(collection_name, [job], lookback_seconds=3 * 86400)
    # Past the first 01:30's retry window + grace, before the second: not missed yet (the
    # run may still come at 01:30Z).
    status, body = watch.tick(FIRST + timedelta(minutes=30))
    assert (status, problems(body)) == (200, [])
    for at in fired:
        function.deliver(headers(at))
    status, body = watch.tick(SECOND + timedelta(hours=2))
    assert (status, problems(body)) == (200, [])
    assert body["checked"] == 1  # the repeated 01:30 counted once (the 24th: the last tick)
    assert executions(ledger) == [(FIRST - timedelta(days=1)).isoformat(), FIRST.isoformat()]


def test_the_watchdog_reports_the_repeated_0130_missed_once_when_neither_came(
    collection_name: str, ledger: Path
) -> None:
    function = in_process_function(collection_name)
    function.deliver(headers(FIRST - timedelta(days=1)))
    job = WatchedJob(JOB, "30 1 * * *", LONDON, retry_window_seconds=600)
    watch = Watch(collection_name, [job], lookback_seconds=3 * 86400)
    status, body = watch.tick(SECOND + timedelta(hours=2))
    assert (status, problems(body)) == (200, [("missed", JOB, "2026-10-25T00:30:00Z")])

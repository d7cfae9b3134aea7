"""The demo's silence and extra-run reports: a missed run paged during its silence, or not
paged exactly once after it, and an extra run not reported `unexplained_run` or not paged
exactly once, fail their section and RESULT."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dedup.beyond import UNEXPLAINED_RUN
from dedup.watchdog.incidents import BEYOND_SCHEDULE, FAILING, OPENED
from dedup.watchdog.verdicts import MISSED, Problem
from demo.extra_run import ExtraRunReport
from demo.scene_ticks import SceneTick
from demo.silence import SilenceReport

RAN = datetime(2026, 12, 7, 1, 30, tzinfo=UTC)
MISSED_AT = RAN + timedelta(days=1)
UNTIL = MISSED_AT + timedelta(hours=1, minutes=20)
JOB = "sched-dedup-dev-nightly-report"


def opened(kind: str) -> dict[str, Any]:
    return {"event": OPENED, "incident_kind": kind, "message": f"watchdog incident opened: {kind}"}


def missed_line(*, silenced: bool) -> dict[str, Any]:
    line: dict[str, Any] = {"kind": MISSED, "job": JOB, "schedule_time": "2026-12-08T01:30:00Z"}
    return {**line, "silenced": True} if silenced else line


def silence(*, during: list[dict[str, Any]], after: int, again: int = 0,
            executions: int = 1) -> SilenceReport:
    problem = Problem(JOB, MISSED_AT, MISSED, "r")
    return SilenceReport(
        "nightly-report", set_line="silenced until ...", until=UNTIL, ran=RAN,
        ran_answer="200 completed", ran_executions=executions, missed=MISSED_AT,
        following=MISSED_AT + timedelta(days=1), following_executions=1,
        during=SceneTick(UNTIL - timedelta(minutes=10), [problem], during),
        after=SceneTick(UNTIL + timedelta(seconds=1), [], [opened(FAILING)] * after),
        again=SceneTick(UNTIL + timedelta(seconds=2), [], [opened(FAILING)] * again),
    )


def test_a_missed_run_logged_silenced_then_paged_once_passes() -> None:
    report = silence(during=[missed_line(silenced=True)], after=1)
    assert report.ok
    lines = report.lines()
    assert lines[1] == ("  nightly-report @ 2026-12-07T01:30:00Z, during the silence: 200 "
                        "completed, executed once (runs run as ever); the run after the "
                        "missed one, @ 2026-12-09T01:30:00Z: executed once")
    assert lines[2].startswith("  nightly-report @ 2026-12-08T01:30:00Z, never delivered "
                               "(missed): the tick at ")
    assert lines[2].endswith("logged it `silenced`, 0 incident_opened (no page)")
    assert "1 incident_opened (watchdog incident opened: failing); the tick after it: 0" in (
        lines[3])
    assert lines[-1] == "  paged once, after the window: the incident still open then"
    assert report.to_json()["ok"] is True


@pytest.mark.parametrize("during, after, again", [
    ([missed_line(silenced=True), opened(FAILING)], 1, 0),  # paged during the silence
    ([missed_line(silenced=False)], 1, 0),  # logged, but not marked silenced
    ([missed_line(silenced=True)], 0, 0),  # never paged after the window
    ([missed_line(silenced=True)], 2, 0),  # paged twice
    ([missed_line(silenced=True)], 1, 1),  # paged again at the next tick
])
def test_a_page_during_the_silence_or_not_exactly_one_after_fails(
    during: list[dict[str, Any]], after: int, again: int,
) -> None:
    report = silence(during=during, after=after, again=again)
    assert not report.ok
    assert report.lines()[-1].startswith("  FAIL:")


def test_the_run_during_the_silence_must_execute_once() -> None:
    assert not silence(during=[missed_line(silenced=True)], after=1, executions=0).ok


AT = datetime(2026, 12, 6, 14, 26, tzinfo=UTC)


def extra(*, problems: list[Problem], pages: list[dict[str, Any]], again: int = 0,
          executions: int = 1) -> ExtraRunReport:
    return ExtraRunReport(
        "heartbeat", "'*/5 * * * *' Etc/UTC", "'26 14 6 12 *' Etc/UTC", True, AT,
        "200 completed", executions,
        first=SceneTick(AT + timedelta(minutes=1), problems, pages),
        again=SceneTick(AT + timedelta(minutes=1, seconds=1), [], [opened(BEYOND_SCHEDULE)]
                        * again),
    )


UNEXPLAINED = Problem("sched-dedup-dev-heartbeat", AT, UNEXPLAINED_RUN, "r")


def test_an_extra_run_reported_unexplained_and_paged_once_passes() -> None:
    report = extra(problems=[UNEXPLAINED], pages=[opened(BEYOND_SCHEDULE)])
    assert report.ok
    lines = report.lines()
    assert lines[0] == (
        "  a second Scheduler job ('26 14 6 12 *' Etc/UTC) sends heartbeat's headers: "
        "heartbeat @ 2026-12-06T14:26:00Z, no run of its schedule '*/5 * * * *' Etc/UTC: 200 "
        "completed, executed once")
    assert lines[1].endswith(": unexplained_run @ 2026-12-06T14:26:00Z, 1 incident_opened "
                             "(beyond_schedule)")
    assert "runsBeyondSchedule: page (set by the demo on its copy of the stack)" in lines[1]
    assert lines[-1] == "  reported unexplained_run and paged once"
    assert report.to_json()["unexplained_run"] == ["2026-12-06T14:26:00Z"]


@pytest.mark.parametrize("problems, pages, again, executions", [
    ([], [opened(BEYOND_SCHEDULE)], 0, 1),  # not reported
    ([UNEXPLAINED], [], 0, 1),  # reported, never paged
    ([UNEXPLAINED], [opened(BEYOND_SCHEDULE)] * 2, 0, 1),  # paged twice
    ([UNEXPLAINED], [opened(FAILING)], 0, 1),  # another incident paged, not its own
    ([UNEXPLAINED], [opened(BEYOND_SCHEDULE)], 1, 1),  # paged again at the next tick
    ([UNEXPLAINED], [opened(BEYOND_SCHEDULE)], 0, 2),  # executed twice
])
def test_an_extra_run_not_reported_or_not_paged_exactly_once_fails(
    problems: list[Problem], pages: list[dict[str, Any]], again: int, executions: int,
) -> None:
    report = extra(problems=problems, pages=pages, again=again, executions=executions)
    assert not report.ok
    assert report.lines()[-1].startswith("  FAIL:")

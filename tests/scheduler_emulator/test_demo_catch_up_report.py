"""The demo's catch-up and re-run report: a run caught up or re-run that did not execute
exactly once (or whose original record is gone) fails the watchdog section and RESULT."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from demo.report import caught_up_line, rerun_line, watch_lines
from demo.watch import EXPECT_CAUGHT_UP, CaughtUp, Rerun, WatchReport

WHEN = datetime(2026, 12, 1, 4, 7, tzinfo=UTC)


def report(caught_up: list[CaughtUp], rerun: Rerun | None) -> WatchReport:
    return WatchReport(300, {}, 20, [], [], delivers=True, caught_up=caught_up, rerun=rerun)


def rerun(executions: int = 1, *, kept: bool = True, recorded: bool = True) -> Rerun:
    return Rerun("heartbeat", WHEN, 1, "completed", executions, kept, recorded)


def test_a_run_caught_up_and_a_run_re_run_once_pass() -> None:
    caught = CaughtUp("hourly-sync", WHEN, "completed", 1, EXPECT_CAUGHT_UP)
    watch = report([caught], rerun())
    assert watch.ok
    lines = watch_lines(watch)
    assert "  caught up: hourly-sync @ 2026-12-01T04:07:00Z: executed once" in lines
    assert (
        "  re-run: heartbeat @ 2026-12-01T04:07:00Z: generation 1 executed once, original "
        "record kept" in lines
    )


@pytest.mark.parametrize("executions", [0, 2])
def test_a_catch_up_not_executed_exactly_once_fails(executions: int) -> None:
    caught = CaughtUp("hourly-sync", WHEN, "completed", executions, EXPECT_CAUGHT_UP)
    assert not report([caught], rerun()).ok
    assert caught_up_line(caught).endswith(": FAIL")


def test_an_unexpected_catch_up_fails() -> None:
    caught = CaughtUp("heartbeat", WHEN, "completed", 1, None)
    assert not report([caught], rerun()).ok
    assert "UNEXPECTED" in caught_up_line(caught)


@pytest.mark.parametrize(
    ("bad", "shown"),
    [
        (rerun(0), "generation 1 never executed"),
        (rerun(2), "generation 1 EXECUTED 2 TIMES"),
        (rerun(kept=False), "original record NOT KEPT"),
        (rerun(recorded=False), "generation 1 NOT RECORDED completed"),
    ],
)
def test_a_re_run_not_executed_once_or_losing_the_original_fails(bad: Rerun, shown: str) -> None:
    assert not report([], bad).ok
    line = rerun_line(bad)
    assert shown in line and line.endswith(": FAIL")


def test_a_refused_re_run_fails() -> None:
    refused = Rerun("heartbeat", WHEN, 0, "refused: no", 0, False, False)
    assert not report([], refused).ok
    assert rerun_line(refused) == "  re-run: heartbeat @ 2026-12-01T04:07:00Z: FAIL: refused: no"

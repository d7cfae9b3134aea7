"""The demo's backfill report: a missed run of the outage not executed exactly once, or a
backfill not finished or queued twice, fails the backfill section and RESULT."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from demo.backfill import BackfillReport

OUTAGE = [datetime(2026, 12, 2, 3, 0, tzinfo=UTC) + timedelta(minutes=5 * k) for k in range(3)]


def report(executions: list[int], *, state: str = "finished", again: str = "already queued: "
           "backfill b of j; nothing queued again") -> BackfillReport:
    return BackfillReport(
        "heartbeat", OUTAGE, plan="dry run: backfill of heartbeat\n", queued="queued: ...",
        asked_again=again, ticks=1,
        progress={"state": state, "done": sum(1 for n in executions if n), "failed": 0,
                  "refused": 0},
        executions=dict(zip(OUTAGE, executions, strict=True)),
    )


def test_each_missed_run_executed_once_passes() -> None:
    done = report([1, 1, 1])
    assert done.ok
    assert done.lines()[-1] == "  exactly once: 3/3 missed run(s) executed once each"


@pytest.mark.parametrize("executions", [[1, 0, 1], [1, 2, 1]])
def test_a_run_not_executed_exactly_once_fails(executions: list[int]) -> None:
    bad = report(executions)
    assert not bad.ok
    assert "NOT exactly once: 2026-12-02T03:05:00Z x" in bad.lines()[-1]


def test_a_backfill_not_finished_or_queued_twice_fails() -> None:
    assert not report([1, 1, 1], state="active").ok
    assert not report([1, 1, 1], again="queued: backfill b of j").ok

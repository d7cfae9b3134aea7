"""The report's verdicts (including the ones a correct run never shows), the stack
loader, the command line, and the demo job's side of the fault header."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from demo import ledger_job
from scheduler_emulator.cli import main as emulator_main
from scheduler_emulator.emulator import Delivery, EmulatorResult, RunResult
from scheduler_emulator.faults import fault_header
from scheduler_emulator.report import (
    DUPLICATED,
    EXACTLY_ONCE,
    EXHAUSTED,
    MISSING,
    answer_text,
    answers_text,
    format_table,
    reply_outcome,
    summarise,
    totals,
)
from scheduler_emulator.stack import StackError, load_stack, parse_stack_config
from tests.scheduler_emulator.target import RecordingTarget

REPO = Path(__file__).resolve().parents[2]
T1 = datetime(2026, 10, 16, 1, 0, tzinfo=UTC)
T2 = datetime(2026, 10, 17, 1, 0, tzinfo=UTC)


def delivery(when: datetime | None, status: int | None, **kw: object) -> Delivery:
    d = Delivery(
        job="j",
        tick=0,
        schedule_time=when,
        kind="scheduled",
        worker=0,
        attempt=1,
        copy=0,
        sent_at=when or T1,
        status=status,
    )
    for key, value in kw.items():
        setattr(d, key, value)
    return d


def result_of(*runs: RunResult) -> EmulatorResult:
    return EmulatorResult(list(runs), "http://x/", 2, T1, 0.0)


def run_of(when: datetime, *deliveries: Delivery, tick: int = 0) -> RunResult:
    acked = any(d.acknowledged for d in deliveries)
    return RunResult(
        "j",
        tick,
        when,
        "scheduled",
        1,
        list(deliveries),
        acked,
        "acknowledged" if acked else "retryCount used up",
    )


def test_verdicts_flag_a_duplicate_and_a_missing_execution() -> None:
    result = result_of(
        run_of(T1, delivery(T1, 200)),
        run_of(T2, delivery(T2, 500), delivery(T2, 500), tick=1),
    )
    key1, key2 = ("j", T1), ("j", T2)
    good = summarise(result, {key1: 1, key2: 0})
    assert [s.verdict for s in good] == [EXACTLY_ONCE, EXHAUSTED]
    assert totals(good)["all_ok"]
    twice = summarise(result, {key1: 2, key2: 0})
    assert twice[0].verdict == DUPLICATED and not totals(twice)["all_ok"]
    never = summarise(result, {key1: 0, key2: 0})
    assert never[0].verdict == MISSING and not totals(never)["all_ok"]
    # A run that ran out of retries may have executed once, never twice.
    exhausted_twice = summarise(result, {key1: 1, key2: 2})
    assert exhausted_twice[1].verdict == DUPLICATED


def test_a_manual_run_is_folded_into_the_run_it_is_stamped_with() -> None:
    manual = RunResult("j", 0, T2, "manual", 1, [delivery(T2, 200)], True, "acknowledged")
    result = result_of(run_of(T1, delivery(T1, 200)), manual, run_of(T2, delivery(T2, 200), tick=1))
    summaries = summarise(result, {("j", T1): 1, ("j", T2): 1})
    assert len(summaries) == 2
    assert summaries[1].tick == 1 and len(summaries[1].deliveries) == 2
    assert summaries[1].faults == ("manual",)


def test_table_lists_replies_in_order_and_marks_exhausted_runs() -> None:
    result = result_of(
        run_of(
            T1,
            delivery(T1, None, error="deadline exceeded"),
            delivery(T1, 409),
            delivery(T1, 409),
            delivery(T1, 200),
        ),
        run_of(T2, delivery(T2, 200, ack_lost=True), tick=1),
    )
    lines = format_table(summarise(result, {("j", T1): 1, ("j", T2): 1}))
    assert any("timeout 409x2 200" in line and "exactly once" in line for line in lines)
    assert any(
        "200 lost" in line and "retries exhausted (retryCount used up)" in line for line in lines
    )


def test_the_demo_job_reads_the_fault_header_the_emulator_writes() -> None:
    assert ledger_job._fault({"x-emulator-fault": fault_header(1.5, False) or ""}) == (1.5, False)
    assert ledger_job._fault({"x-emulator-fault": fault_header(None, True) or ""}) == (None, True)
    assert ledger_job._fault({}) == (None, False)


def test_dev_stack_file_loads_through_the_kits_validator() -> None:
    stack = load_stack(REPO / "Pulumi.dev.yaml")
    assert stack.project and stack.region and stack.jobs
    for job in stack.jobs:
        assert job.attempt_deadline_seconds >= 15
        if job.body is not None:
            assert job.content_type == "application/json"
            json.loads(job.body)


def test_proxied_jobs_are_not_replayed_locally() -> None:
    """prod's daily-report job calls the idempotent proxy (a Google Cloud API target)."""
    names = {job.name for job in load_stack(REPO / "Pulumi.prod.yaml").jobs}
    assert "daily-report" not in names
    assert names  # the dedup function's own jobs still are


def test_stack_errors_name_the_file_and_key(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="not found"):
        load_stack(tmp_path / "Pulumi.nope.yaml")
    bad = {
        "gcp:project": "acme-dev-1",
        "gcp:region": "europe-west1",
        "scheduler-dedup:jobs": [{"name": "x", "schedule": "every 5 minutes"}],
    }
    with pytest.raises(StackError, match=r"scheduler-dedup:jobs\[0\]\.schedule"):
        parse_stack_config(bad, source="Pulumi.bad.yaml")


def write_stack(path: Path) -> Path:
    config = {
        "config": {
            "gcp:project": "acme-cli-test",
            "gcp:region": "europe-west1",
            "scheduler-dedup:jobs": [
                {"name": "a", "schedule": "*/5 * * * *", "attemptDeadlineSeconds": 15},
                {
                    "name": "b",
                    "schedule": "0 * * * *",
                    "attemptDeadlineSeconds": 15,
                    "retry": {"retryCount": 1, "minBackoffSeconds": 1},
                },
            ],
        }
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_cli_replays_a_stack_and_reports_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = write_stack(tmp_path / "Pulumi.cli.yaml")
    target = RecordingTarget(
        lambda r: (500 if r.header("X-CloudScheduler-JobName") == "b" else 200, 0.0)
    )
    with target.serving():
        code = emulator_main(
            [
                "--target",
                target.url,
                "--stack",
                str(stack),
                "--ticks",
                "3",
                "--start",
                "2026-10-16T00:00:00Z",
                "--json",
            ]
        )
    out = json.loads(capsys.readouterr().out)
    assert code == 1  # job b ran out of retries
    assert out["totals"]["scheduled_runs"] == 6 and out["totals"]["exhausted_runs"] == 3
    assert len(target.received) == 3 + 3 * 2
    assert {r["verdict"] for r in out["runs"] if r["job"] == "a"} == {"acknowledged"}


def test_cli_text_report_and_job_filter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = write_stack(tmp_path / "Pulumi.cli.yaml")
    target = RecordingTarget()
    with target.serving():
        code = emulator_main(
            [
                "--target",
                target.url,
                "--stack",
                str(stack),
                "--ticks",
                "2",
                "--job",
                "a",
                "--fault",
                "duplicate=1",
                "--start",
                "2026-10-16T00:00:00Z",
            ]
        )
    out = capsys.readouterr().out
    assert code == 0
    assert "job a" in out and "job b" not in out
    assert "2026-10-16T00:05:00Z" in out and "200x2" in out
    assert len(target.received) == 4


def test_cli_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        emulator_main(
            ["--target", "http://127.0.0.1:9/", "--stack", str(tmp_path / "missing.yaml")]
        )
        == 2
    )
    assert "not found" in capsys.readouterr().err
    stack = write_stack(tmp_path / "Pulumi.cli.yaml")
    assert (
        emulator_main(
            ["--target", "http://127.0.0.1:9/", "--stack", str(stack), "--fault", "bogus=1"]
        )
        == 2
    )
    assert "unknown fault 'bogus'" in capsys.readouterr().err


def test_an_unreachable_target_is_a_failed_attempt(tmp_path: Path) -> None:
    from scheduler_emulator import SchedulerEmulator

    stack = load_stack(write_stack(tmp_path / "Pulumi.cli.yaml")).only(["b"])
    result = SchedulerEmulator("http://127.0.0.1:9/", stack, ticks=1, time_scale=0.001).run()
    assert [d.reply for d in result.runs[0].deliveries] == ["dropped", "dropped"]
    assert result.runs[0].deliveries[0].error


def test_emulator_stop_ends_a_replay_early() -> None:
    from scheduler_emulator import SchedulerEmulator
    from scheduler_emulator.stack import Job, Stack

    stack = Stack("acme-stop-test", "europe-west1", (Job("j", "* * * * *"),))
    target = RecordingTarget()
    with target.serving():
        emulator = SchedulerEmulator(target.url, stack, ticks=100_000, time_scale=0.001)
        threading.Timer(0.3, emulator.stop).start()
        result = emulator.run()
    assert result.stopped_early and 0 < len(result.runs) < 100_000


def answered(when: datetime, status: int | None, outcome: str, **kw: object) -> Delivery:
    """A delivery the kit's function answered with `outcome`, as its JSON reply says."""
    return delivery(when, status, reply_body=f'{{"outcome":"{outcome}","run_id":"x"}}', **kw)


def test_a_runs_answers_read_in_order_with_the_first_timed() -> None:
    outage = summarise(
        result_of(
            run_of(
                T1,
                answered(T1, 500, "store_unavailable", real_seconds=1.23),
                answered(T1, 500, "store_unavailable", copy=1),
                answered(T1, 200, "completed", attempt=2, sent_at=T1 + timedelta(seconds=40)),
            )
        )
    )[0]
    assert answers_text(outage) == (
        "500 store_unavailable after 1.2 s, then 500 store_unavailable (the same attempt "
        "delivered twice), 200 completed on retry 1"
    )
    late = summarise(
        result_of(
            run_of(
                T1,
                answered(
                    T1, None, "completed", error="deadline exceeded", late_status=200,
                    real_seconds=1.52,
                ),
            )
        )
    )[0]
    assert answers_text(late) == (
        "no answer within the deadline (200 completed after 1.5 s, late)"
    )
    # A stalled claim: Scheduler gave up on it, and on two retries turned away meanwhile.
    stalled = summarise(
        result_of(
            run_of(
                T1,
                answered(T1, None, "completed", error="deadline exceeded", late_status=200,
                         real_seconds=1.5),
                *(
                    answered(T1, None, "in_progress", error="deadline exceeded",
                             late_status=409, attempt=n, sent_at=T1 + timedelta(seconds=n))
                    for n in (2, 3)
                ),
                answered(T1, 200, "duplicate", attempt=4, sent_at=T1 + timedelta(seconds=9)),
            )
        )
    )[0]
    assert answers_text(stalled) == (
        "no answer within the deadline (200 completed after 1.5 s, late), then timeout "
        "(409 in_progress, late) on retries 1-2, 200 duplicate on retry 3"
    )
    lost = answered(T1, 200, "completed", ack_lost=True, real_seconds=1.5)
    assert answer_text(lost, timed=True) == "200 completed after 1.5 s (lost on the way back)"
    assert reply_outcome(delivery(T1, 200)) is None  # a target that names no outcome
    assert answer_text(delivery(T1, None, error="ConnectionResetError")) == "connection dropped"


def test_runs_held_up_by_another_runs_store_fault_are_listed_in_parentheses() -> None:
    struck = run_of(T1, delivery(T1, 200, faults=("store-stall",)))
    struck.faults = ("store-stall",)
    summaries = summarise(
        result_of(struck, run_of(T2, delivery(T2, None, error="deadline exceeded"), tick=1)),
        {("j", T1): 1, ("j", T2): 1},
    )
    summaries[1].exposed_to = ("store-stall",)
    assert summaries[0].fault_text == "store-stall"
    assert summaries[1].fault_text == "(store-stall)"
    lines = format_table(summaries)
    assert any("(store-stall)" in line and "retries exhausted" in line for line in lines)
    # The faults column widens for long lists, and a space always separates the result.
    summaries[1].exposed_to = ("store-stall", "store-outage")
    summaries[1].runs[0].faults = ("concurrent", "duplicate", "lost-ack")
    row = next(line for line in format_table(summaries) if "(store-outage)" in line)
    assert "concurrent,duplicate,lost-ack,(store-stall),(store-outage)  retries" in row


def test_cli_refuses_store_faults_it_cannot_inject(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = write_stack(tmp_path / "Pulumi.cli.yaml")
    target = RecordingTarget()
    with target.serving():
        code = emulator_main(
            ["--target", target.url, "--stack", str(stack), "--fault", "store-outage=0.2"]
        )
    err = capsys.readouterr().err
    assert code == 2 and target.received == []  # refused before anything was sent
    assert "store-outage" in err and "python -m demo" in err

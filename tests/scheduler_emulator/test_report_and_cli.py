"""The report's verdicts (including the ones a correct run never shows), the stack
loader, the command line, and the demo job's side of the fault header."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from demo import job_wrapper
from demo.report import retry_text
from infra.scheduler_rules import RetrySettings
from scheduler_emulator.cli import main as emulator_main
from scheduler_emulator.faults import fault_header
from scheduler_emulator.records import Delivery, EmulatorResult, RunResult
from scheduler_emulator.report import (
    DUPLICATED,
    EXACTLY_ONCE,
    EXHAUSTED,
    FORCED_ONCE,
    FORCED_TOOK_NEXT,
    MISSING,
    answer_text,
    answers_text,
    format_table,
    job_result_json,
    job_results,
    reply_outcome,
    summarise,
    totals,
)
from scheduler_emulator.stack import StackError, load_stack, parse_stack_config, resolve_stack
from tests.scheduler_emulator.target import RecordingTarget
from tests.stacks import FIXTURE_STACKS_DIR, fixture_stack_file

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
    key1, key2 = ("j", T1, False), ("j", T2, False)
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


def forced_replay() -> EmulatorResult:
    """A scheduled run at T1, a forced run stamped T2 (the next tick), the T2 tick."""
    forced = RunResult(
        "j", 0, T2, "manual", 1, [delivery(T2, 200, kind="manual")], True, "acknowledged",
        faults=("manual-overlap",),
    )
    return result_of(run_of(T1, delivery(T1, 200)), forced, run_of(T2, delivery(T2, 200), tick=1))


def test_a_forced_run_is_a_run_of_its_own_next_to_the_one_it_is_stamped_with() -> None:
    counts = {("j", T1, False): 1, ("j", T2, True): 1, ("j", T2, False): 1}
    summaries = summarise(forced_replay(), counts)
    assert [(s.tick, s.forced) for s in summaries] == [(0, False), (1, False), (1, True)]
    forced = summaries[2]
    assert forced.faults == ("manual-overlap",) and len(forced.deliveries) == 1
    assert forced.verdict == FORCED_ONCE == "forced run, executed once, next scheduled run " \
        "unaffected"
    assert forced.ok and totals(summaries)["all_ok"]
    assert totals(summaries)["forced_runs"] == 1 and totals(summaries)["scheduled_runs"] == 2


def test_a_forced_run_executed_twice_or_in_place_of_the_next_run_fails() -> None:
    twice = summarise(
        forced_replay(), {("j", T1, False): 1, ("j", T2, True): 2, ("j", T2, False): 1}
    )
    assert twice[2].verdict == DUPLICATED and not totals(twice)["all_ok"]
    # Keyed as the scheduled run (the function before forced runs had their own key): the
    # forced delivery executed the T2 run early, the T2 delivery was answered "duplicate".
    took = summarise(
        forced_replay(), {("j", T1, False): 1, ("j", T2, True): 0, ("j", T2, False): 1}
    )
    assert took[2].verdict == FORCED_TOOK_NEXT and not took[2].ok
    assert not totals(took)["all_ok"]
    # Acknowledged, and neither it nor the scheduled run of its time executed.
    lost = summarise(
        forced_replay(), {("j", T1, False): 1, ("j", T2, True): 0, ("j", T2, False): 0}
    )
    assert lost[2].verdict == MISSING and lost[1].verdict == MISSING


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
    lines = format_table(summarise(result, {("j", T1, False): 1, ("j", T2, False): 1}))
    assert any("timeout 409x2 200" in line and "exactly once" in line for line in lines)
    assert any(
        "200 lost" in line and "retries exhausted (retryCount used up)" in line for line in lines
    )


def test_the_demo_header_shows_a_never_retried_job_as_no_retries() -> None:
    """`retry: none` has retryCount 0 and no maxRetryDuration: its backoff never applies."""
    heartbeat = load_stack(fixture_stack_file("dev")).job("heartbeat")
    assert retry_text(heartbeat.retry) == "no retries"
    # retryCount 0 with a maxRetryDuration still retries (for that long): shown as such.
    timed = RetrySettings(max_retry_duration_seconds=60, min_backoff_seconds=10)
    assert retry_text(timed) == "retryCount 0, maxRetryDuration 60s, backoff 10-3600s x5 doublings"
    hourly = load_stack(fixture_stack_file("dev")).job("hourly-sync")
    assert retry_text(hourly.retry).startswith("retryCount 3, maxRetryDuration 600s, backoff ")


def test_the_demo_job_reads_the_fault_header_the_emulator_writes() -> None:
    assert job_wrapper._fault({"x-emulator-fault": fault_header(1.5, False) or ""}) == (1.5, False)
    assert job_wrapper._fault({"x-emulator-fault": fault_header(None, True) or ""}) == (None, True)
    assert job_wrapper._fault({}) == (None, False)


def test_dev_stack_file_loads_through_the_kits_validator() -> None:
    stack = load_stack(fixture_stack_file("dev"))
    assert stack.project and stack.region and stack.jobs
    for job in stack.jobs:
        assert job.attempt_deadline_seconds >= 15
        # The deployed ID carries the stack's prefix; the headers are the job's httpTarget.
        assert job.job_id == f"{stack.name_prefix}-{job.name}"
        headers = dict(job.http_headers)
        assert headers["Content-Type"] == "application/json"
        assert headers["X-Dedup-Project"] == stack.project
        if job.body is not None:
            json.loads(job.body)


def test_a_stack_is_chosen_by_name_or_path(tmp_path: Path) -> None:
    places = (FIXTURE_STACKS_DIR,)
    assert resolve_stack("prod", places) == fixture_stack_file("prod")
    assert resolve_stack(str(fixture_stack_file("dev")), places) == fixture_stack_file("dev")
    with pytest.raises(StackError) as unknown:
        resolve_stack("staging", places)
    assert str(unknown.value).startswith("stack 'staging' (no Pulumi.staging.yaml) not found")
    assert "stacks: dev, prod" in str(unknown.value)
    with pytest.raises(StackError, match=r"stack file .*nope\.yaml not found; stacks: dev"):
        resolve_stack(str(tmp_path / "nope.yaml"), places)


def test_proxied_jobs_are_not_replayed_locally() -> None:
    """prod's daily-report job calls the idempotent proxy (a Google Cloud API target)."""
    names = {job.name for job in load_stack(fixture_stack_file("prod")).jobs}
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
    failing = "projects/acme-cli-test/locations/europe-west1/jobs/scheduler-dedup-b"
    target = RecordingTarget(
        lambda r: (500 if r.header("X-CloudScheduler-JobName") == failing else 200, 0.0)
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
    # Per job, a result: b failed every attempt, with its last error.
    jobs = {j["job"]: j for j in out["jobs"]}
    assert jobs["a"]["ok"] and jobs["a"]["result"].startswith("PASS")
    assert not jobs["b"]["ok"] and jobs["b"]["problem"] == "failed every attempt"
    assert jobs["b"]["last_error"] == "500 test"  # the target named its outcome "test"
    assert out["totals"]["failed_jobs"] == ["b"]
    assert out["dst"] == []  # both jobs in UTC


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
    assert "replayed 2 ticks of 1 job against" in out  # "1 job", not "1 jobs"
    assert "  result: PASS: 2 run(s), 2 acknowledged" in out
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


def test_a_stack_file_that_is_not_yaml_is_one_line_naming_where_and_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The emulator reads stack files with operator_tools.stack_files, as `make plan` does: the same
    one-line error (file:line:column, what, fix), not a multi-line PyYAML dump."""
    broken = tmp_path / "Pulumi.broken.yaml"
    broken.write_text("config:\n  gcp:project: acme-x\n   gcp:region: europe-west1\n")
    code = emulator_main(["--target", "http://127.0.0.1:9/", "--stack", str(broken)])
    err = capsys.readouterr().err
    assert code == 2
    [line] = err.strip().splitlines()
    assert f"{broken}:3:" in line and "not valid YAML" in line and "Fix: " in line
    with pytest.raises(StackError, match=r"Pulumi\.broken\.yaml:3:\d+: not valid YAML"):
        load_stack(broken)


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
    # A stalled claim: Scheduler hung up at the deadline, twice more on retries meanwhile.
    stalled = summarise(
        result_of(
            run_of(
                T1,
                delivery(T1, None, error="deadline exceeded", real_seconds=1.5),
                *(
                    delivery(T1, None, error="deadline exceeded", attempt=n,
                             sent_at=T1 + timedelta(seconds=n))
                    for n in (2, 3)
                ),
                answered(T1, 200, "duplicate", attempt=4, sent_at=T1 + timedelta(seconds=9)),
            )
        )
    )[0]
    assert answers_text(stalled) == (
        "no answer within the deadline (connection closed), then timeout on retries 1-2, "
        "200 duplicate on retry 3"
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
        {("j", T1, False): 1, ("j", T2, False): 1},
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
    # The widest entry sets the column for every row: the results line up.
    rows = [line for line in format_table(summaries) if "2026-10-1" in line]
    assert len({row.index("retries exhausted") if "retries" in row else row.index("exactly")
                for row in rows}) == 1


def test_a_job_that_never_executed_fails_whatever_its_runs_verdicts() -> None:
    # Every attempt of every run failed (a jobLogic that raises, or cannot be imported):
    # each run is "retries exhausted", which alone would pass for at most once.
    result = result_of(
        run_of(T1, answered(T1, 500, "failed"), answered(T1, 500, "failed", attempt=2)),
        run_of(T2, answered(T2, 500, "failed"), tick=1),
    )
    summaries = summarise(result, {("j", T1, False): 0, ("j", T2, False): 0})
    assert all(s.verdict == EXHAUSTED and s.ok for s in summaries)
    errors = {"j": "500 failed: ModuleNotFoundError(\"No module named 'jobs.nope'\")"}
    [job] = job_results(summaries, errors)
    assert not job.ok and job.problem == "never executed: every attempt failed"
    assert job.text.startswith("FAIL: never executed: every attempt failed (2 run(s)")
    assert "last error: 500 failed: ModuleNotFoundError" in job.text
    assert not totals(summaries, errors)["all_ok"]
    assert totals(summaries, errors)["failed_jobs"] == ["j"]
    # As `make demo --json` reports it (its real run: test_demo_command.py, in text).
    reported = job_result_json(job)
    assert (reported["ok"], reported["problem"]) == (False, "never executed: every attempt failed")
    assert "No module named 'jobs.nope'" in reported["last_error"]
    assert any(line.startswith("  result: FAIL: never executed") for line in
               format_table(summaries, results=[job]))
    # Without the target's log, the last failed attempt's answer is the error.
    assert job_results(summaries)[0].last_error == "500 failed"


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
    assert "store-outage" in err and "make demo" in err


def test_cli_retry_cut_off_switch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Every 5 minutes, always 500, retries 60-120 s apart for 5 retries (about 8 minutes).
    stack = tmp_path / "Pulumi.retrying.yaml"
    stack.write_text(yaml.safe_dump({"config": {
        "gcp:project": "acme-cli-test",
        "gcp:region": "europe-west1",
        "scheduler-dedup:jobs": [{
            "name": "r", "schedule": "*/5 * * * *", "attemptDeadlineSeconds": 15,
            "retry": {"retryCount": 5, "minBackoffSeconds": 60, "maxBackoffSeconds": 120},
        }],
    }}))
    reasons = {}
    for switch in ("--retries-stop-at-next-run", "--no-retries-stop-at-next-run"):
        target = RecordingTarget(lambda r: (500, 0.0))
        with target.serving():
            emulator_main([
                "--target", target.url, "--stack", str(stack), "--ticks", "2", "--json",
                "--start", "2026-10-16T00:00:00Z", "--time-scale", "0.0005", switch,
            ])
        out = json.loads(capsys.readouterr().out)
        reasons[switch] = [run["stop_reason"] for run in out["runs"]]
    # On: each run's retries end at the next tick, which is delivered.
    assert reasons["--retries-stop-at-next-run"] == ["next scheduled time reached"] * 2
    # Off: the first run's retries go on through 00:10, which Scheduler skips.
    assert reasons["--no-retries-stop-at-next-run"] == [
        "retryCount used up", "skipped: the job was still being retried at this time",
    ]


def test_cli_names_dst_ticks_in_text_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = tmp_path / "Pulumi.berlin.yaml"
    stack.write_text(yaml.safe_dump({"config": {
        "gcp:project": "acme-cli-test",
        "gcp:region": "europe-west1",
        "scheduler-dedup:jobs": [
            {"name": "h", "schedule": "7 * * * *", "timeZone": "Europe/Berlin"},
        ],
    }}))
    common = ["--stack", str(stack), "--ticks", "3", "--start", "2027-03-27T23:30:00Z"]
    target = RecordingTarget()
    with target.serving():
        assert emulator_main(["--target", target.url, *common]) == 0
        text = capsys.readouterr().out
        assert emulator_main(["--target", target.url, *common, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
    assert "DST: job h: 2027-03-28 02:07 does not exist in Europe/Berlin (gap)" in text
    assert out["dst"] == [{"job": "h", "time_zone": "Europe/Berlin", "date": "2027-03-28",
                           "local_time": "02:07", "kind": "gap"}]


def test_a_job_killed_mid_run_still_reports_why_it_fails() -> None:
    # The last run's first attempt died mid-job (kill) holding the run's lease, and every
    # retry came within it: answered 409 in_progress. That says another attempt held the
    # run, not why the job fails: the earlier run's 500 does.
    result = result_of(
        run_of(T1, answered(T1, 500, "failed"), answered(T1, 500, "failed", attempt=2)),
        run_of(T2, delivery(T2, None, error="ConnectionResetError"),
               answered(T2, 409, "in_progress", attempt=2,
                        sent_at=T2 + timedelta(seconds=5)), tick=1),
    )
    summaries = summarise(result, {("j", T1, False): 0, ("j", T2, False): 0})
    [job] = job_results(summaries)
    assert job.last_error == "500 failed"
    # A job that was only ever answered 409 in_progress has that as its last error.
    only_held = summarise(result_of(result.runs[1]), {("j", T2, False): 0})
    assert job_results(only_held)[0].last_error == "409 in_progress"

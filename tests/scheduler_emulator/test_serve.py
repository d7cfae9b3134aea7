"""`make serve` (demo.serve): the stack served locally, on the real clock, with its
watchdog ticking; a missed run driven to its catch-up and a run to its re-run, read back
by `make runs` and asked for by `make rerun` as an operator would. The day-2 rehearsal
end to end: the Scheduler emulator in real time missing a fire (`--miss`) and a flaky job
failing through its retries, the watchdog catching the first up and, once the fix is
served, `make rerun` executing the second once more, in a new generation."""

from __future__ import annotations

import contextlib
import io
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from dedup.keys import RunKey
from demo.ledger import commits_by_run_id
from demo.serve import MissedFires, ServedStack, instructions, main, parse_miss
from local_stack.deliveries import scheduler_headers
from operator_tools import rerun, runs
from scheduler_emulator.oidc import scheduler_token
from scheduler_emulator.stack import load_stack
from tests.waiting import let_time_pass, wait_until

pytestmark = pytest.mark.usefixtures("firestore_emulator")

PROJECT = "dedup-kit-serve"
REGION = "europe-west1"
PREFIX = "sched-serve"
JOB = "five-minutely"
JOB_ID = f"{PREFIX}-{JOB}"


def write_stack(tmp_path: Path, name: str, collection: str, **settings: Any) -> Path:
    """A stack file of the served test project: `settings` (kit keys without the
    namespace) over its common ones."""
    config = {
        "gcp:project": PROJECT,
        "gcp:region": REGION,
        "scheduler-dedup:namePrefix": PREFIX,
        "scheduler-dedup:databaseName": "sched-serve-runs",
        "scheduler-dedup:collection": collection,
        "scheduler-dedup:deleteProtection": False,
        **{f"scheduler-dedup:{key}": value for key, value in settings.items()},
    }
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": config}), encoding="utf-8")
    return path


def stack_file(tmp_path: Path, collection: str) -> Path:
    return write_stack(tmp_path, "serve-test", collection, watchdog={"reruns": True}, jobs=[
        {"name": JOB, "schedule": "*/5 * * * *", "timeZone": "Etc/UTC",
         "attemptDeadlineSeconds": 60, "retry": {"retryCount": 0},
         "catchUp": True, "catchUpWithinSeconds": 3600},
    ])


def z(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_make_serve_catches_a_missed_run_up_and_delivers_a_rerun(
    tmp_path: Path, collection_name: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CONFIRM", raising=False)
    path = stack_file(tmp_path, collection_name)
    stack = load_stack(path)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    first = now - timedelta(minutes=now.minute % 5 + 20)  # delivered by "Scheduler"
    missed = first + timedelta(minutes=5)  # never delivered: caught up by the watchdog
    host = os.environ["FIRESTORE_EMULATOR_HOST"]
    lines: list[str] = []
    with ServedStack(stack, host, workdir=tmp_path / "serve", scheduler=False, workers=1,
                     log=lines.append) as served:
        assert served.function is not None
        told = instructions(served, str(path))
        assert f"export FIRESTORE_EMULATOR_HOST={host}" in told
        assert f"WATCHDOG_URL={served.watchdog_url}" in told
        url = served.function.url
        reply = requests.post(url, headers=scheduler_headers(
            f"projects/{PROJECT}/locations/{REGION}/jobs/{JOB_ID}", z(first),
            project=PROJECT, location=REGION,
            authorization=f"Bearer {scheduler_token(url, stack.invoker_email)}",
        ), data=b"{}", timeout=30)
        assert reply.json()["outcome"] == "completed", served.function.log_text[-3000:]

        result = served.tick()
        caught = {d.schedule_time: d.status for d in result.caught_up}
        assert caught.get(missed) == "completed", (caught, lines)
        assert f"watchdog caught_up: {JOB_ID} @ {z(missed)}: completed" in lines

        code, out, err = run_main(str(path), "--job", JOB, "--last", "8")
        assert (code, err) == (0, "")
        row = next(line for line in out.splitlines()
                   if line.startswith(f"  {missed:%Y-%m-%d %H:%M:%S}Z"))
        assert row.split()[5] == "completed" and row.split()[-1] == "ok", out

        # `make rerun ... NOW=1 WATCHDOG_URL=...`: delivered by the served watchdog at once.
        code, out, err = rerun_main(str(path), "--job", JOB, "--time", z(first), "--reason",
                                    "rehearsal", "--now", served.watchdog_url)
        assert (code, err) == (0, "")
        assert out.splitlines()[-1] == (f"tick now: the watchdog delivered 1 re-run(s): "
                                        f"{JOB_ID} @ {z(first)} generation 1: completed")
        # A second one asks first.
        code, _, err = rerun_main(str(path), "--job", JOB, "--time", z(first), "--reason",
                                  "again")
        assert code == 2 and "has been re-run already: generation 1 completed" in err
        code, out, _ = run_main(str(path), "--job", JOB, "--last", "8")
        assert "    + generation 1: completed, 1 attempt(s)" in out


# The stack's body for JOB: the flaky job never fails it. (An empty body would take the
# job's default, failEvery 7: a run on a multiple of 7 minutes, which `now` picks one
# time in seven, would fail.)
NEVER_FAILS = b'{"failEvery": 100000000}'


def deliver(served: ServedStack, stack: Any, when: datetime, body: bytes = NEVER_FAILS) -> str:
    """One run of JOB delivered by hand, as Scheduler would: the function's outcome."""
    assert served.function is not None
    url = served.function.url
    reply = requests.post(url, headers=scheduler_headers(
        f"projects/{PROJECT}/locations/{REGION}/jobs/{JOB_ID}", z(when),
        project=PROJECT, location=REGION,
        authorization=f"Bearer {scheduler_token(url, stack.invoker_email)}",
    ), data=body, timeout=30)
    outcome: str = reply.json()["outcome"]
    return outcome


def test_make_serve_judges_runs_from_before_its_first_tick_and_shows_a_completed_rerun(
    tmp_path: Path, collection_name: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The watchdog ticks once with no record (its first tick); then a job's first records
    appear for runs from before that tick (delivered late, as a re-run of a run that never
    ran is): the next tick judges the runs after the first one, as `make runs` shows them
    (missed, failed), rather than leaving them unjudged. A failed run whose re-run
    completed reads `ok (generation 1)`, and the re-run's requester is git's user.email
    when REQUESTED_BY is unset."""
    monkeypatch.delenv("CONFIRM", raising=False)
    monkeypatch.delenv("REQUESTED_BY", raising=False)
    git_config = tmp_path / "gitconfig"
    git_config.write_text("[user]\n\temail = rehearsal@example.com\n", encoding="utf-8")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(git_config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.chdir(tmp_path)  # no repository here: the global setting answers
    # The flaky example job: fails only a run whose body says failEvery 1 (the one
    # delivered by hand below); the stack's body, which re-runs get, never fails.
    path = write_stack(tmp_path, "serve-first", collection_name,
                       watchdog={"reruns": True, "graceSeconds": 5}, jobs=[
        {"name": JOB, "schedule": "*/5 * * * *", "timeZone": "Etc/UTC",
         "attemptDeadlineSeconds": 60, "retry": {"retryCount": 0},
         "jobLogic": "example_jobs.flaky:run", "body": {"failEvery": 100_000_000}},
    ])
    stack = load_stack(path)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    first = now - timedelta(minutes=now.minute % 5 + 20)
    missed, failed = first + timedelta(minutes=5), first + timedelta(minutes=10)
    lines: list[str] = []
    with ServedStack(stack, os.environ["FIRESTORE_EMULATOR_HOST"], workdir=tmp_path / "serve",
                     scheduler=False, workers=1, log=lines.append) as served:
        assert served.tick().problems == []  # the first tick: no record of the job yet
        assert deliver(served, stack, first) == "completed"
        assert deliver(served, stack, failed, b'{"failEvery": 1}') == "failed"
        code, out, err = run_main(str(path), "--job", JOB, "--last", "8")
        assert (code, err) == (0, "")
        assert row(out, missed)[-1] == "missed" and row(out, failed)[-1] == "failed", out

        judged = {(p.schedule_time, p.kind) for p in served.tick().problems}
        assert {(missed, "missed"), (failed, "failed")} <= judged, lines

        code, out, err = rerun_main(str(path), "--job", JOB, "--time", z(failed), "--reason",
                                    "rehearsal", "--now", served.watchdog_url)
        assert (code, err) == (0, ""), out
        assert out.splitlines()[-1] == (f"tick now: the watchdog delivered 1 re-run(s): "
                                        f"{JOB_ID} @ {z(failed)} generation 1: completed")
        code, out, err = run_main(str(path), "--job", JOB, "--last", "8")
        assert row(out, failed)[5] == "failed", out  # its own record, as it ended
        assert " ".join(row(out, failed)[-3:]) == "ok (generation 1)", out
        assert row(out, missed)[-1] == "missed", out  # not re-run: still missed
        (rerun_line,) = [line for line in lines_under(out, failed) if "generation 1" in line]
        assert "asked by rehearsal@example.com at " in rerun_line, rerun_line


def test_the_requester_is_user_when_git_has_no_email(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("REQUESTED_BY", raising=False)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "none"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("USER", "ops")
    assert rerun.who_asks(None) == "ops"
    assert rerun.who_asks(" sre@example.com ") == "sre@example.com"
    monkeypatch.delenv("USER")
    assert rerun.who_asks(None) == "unknown"


SYNC, EXPORT = "sync", "export"
SYNC_ID, EXPORT_ID = f"{PREFIX}-{SYNC}", f"{PREFIX}-{EXPORT}"


def day2_stack_file(tmp_path: Path, collection: str, export_logic: str, name: str) -> Path:
    """Two jobs every minute: `sync` (catchUp, no retries) and `export`, the flaky example
    job failing every run (failEvery 1) with one quick retry; or, once "fixed", the same
    job with `export_logic`."""
    return write_stack(
        tmp_path, name, collection, watchdog={"reruns": True, "graceSeconds": 5}, jobs=[
            {"name": SYNC, "schedule": "* * * * *", "timeZone": "Etc/UTC",
             "attemptDeadlineSeconds": 15, "retry": {"retryCount": 0},
             "catchUp": True, "catchUpWithinSeconds": 600},
            {"name": EXPORT, "schedule": "* * * * *", "timeZone": "Etc/UTC",
             "attemptDeadlineSeconds": 15,
             "retry": {"retryCount": 1, "minBackoffSeconds": 1, "maxBackoffSeconds": 1},
             "body": {"failEvery": 1}, "jobLogic": export_logic},
        ])


def table(out: str, job_id: str) -> str:
    """`make runs`' table of one job (the deployed job ID heads it)."""
    start = out.index(f"\n{job_id}  (")
    end = out.find("\n\n", start + 1)
    return out[start:] if end < 0 else out[start:end]


def row(out: str, when: datetime) -> list[str]:
    """`make runs`' row of the run scheduled at `when`, split: [5] status, [-1] verdict."""
    line = next(line for line in out.splitlines()
                if line.startswith(f"  {when:%Y-%m-%d %H:%M:%S}Z"))
    return line.split()


def lines_under(out: str, when: datetime) -> list[str]:
    """The lines `make runs` prints under the run's row (its error, its generations)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith(f"  {when:%Y-%m-%d %H:%M:%S}Z"))
    under = []
    for line in lines[start + 1:]:
        if not line.startswith("    "):
            break
        under.append(line.strip())
    return under


def test_make_serve_rehearses_a_missed_run_caught_up_and_a_failed_run_rerun(
    tmp_path: Path, collection_name: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Scheduler, in real time, never delivers sync's next fire and delivers export's,
    which fails through its retry: `make runs` shows one missed, the other failed with its
    error; the watchdog's tick catches the missed run up (executed once, by the ledger and
    its record); the fix served, `make rerun NOW=1` has the watchdog deliver export's run
    again and `make runs` shows it completed in generation 1, the failed record kept."""
    monkeypatch.delenv("CONFIRM", raising=False)
    broken = day2_stack_file(tmp_path, collection_name, "example_jobs.flaky:run", "day2")
    fixed = day2_stack_file(tmp_path, collection_name, "example_jobs.example:run", "day2-fix")
    stack = load_stack(broken)
    host = os.environ["FIRESTORE_EMULATOR_HOST"]
    lines: list[str] = []
    with ServedStack(stack, host, workdir=tmp_path / "serve", misses=[(SYNC, 1)], workers=1,
                     log=lines.append) as served:
        assert served.function is not None
        # The Scheduler emulator's first fire is the next minute; sync's earlier run (its
        # first record: the watchdog judges a job from it on) is delivered by hand.
        said = next(line for line in lines if line.startswith("Scheduler will not deliver"))
        fire = datetime.fromisoformat(said.split(" @ ")[1].split()[0])
        assert said == f"Scheduler will not deliver {SYNC_ID} @ {z(fire)} (--miss {SYNC}:1)"
        first = fire - timedelta(minutes=1)
        assert first <= datetime.now(UTC) < fire
        url = served.function.url
        reply = requests.post(url, headers=scheduler_headers(
            f"projects/{PROJECT}/locations/{REGION}/jobs/{SYNC_ID}", z(first),
            project=PROJECT, location=REGION,
            authorization=f"Bearer {scheduler_token(url, stack.invoker_email)}",
        ), data=b"{}", timeout=30)
        assert reply.json()["outcome"] == "completed", served.function.log_text[-3000:]

        # Both verdicts due: export's retry window (2 x 15 s + 1 s) + the 5 s grace.
        let_time_pass((fire + timedelta(seconds=37) - datetime.now(UTC)).total_seconds(),
                      "both runs' verdicts fall due (a later look judges them alike)")

        def judged() -> str | None:  # export's retry is Scheduler's, late on a slow host
            code, out, err = run_main(str(broken), "--last", "3")
            assert (code, err) == (0, ""), out
            with contextlib.suppress(StopIteration):
                if row(table(out, EXPORT_ID), fire)[5:7] == ["failed", "2"]:
                    return out
            return None

        out = wait_until(judged, what="export's run to have failed both its attempts")
        missed = table(out, SYNC_ID)
        assert row(missed, first)[5] == "completed", out
        assert row(missed, fire)[5] == "-" and row(missed, fire)[-1] == "missed", out
        failed = table(out, EXPORT_ID)
        assert row(failed, fire)[5:7] == ["failed", "2"] and row(failed, fire)[-1] == "failed"
        assert lines_under(failed, fire) == ["last error (attempt 2): RuntimeError: flaky: "
                                             "this run fails on every attempt (failEvery 1)"]

        result = served.tick()
        assert [(d.job, d.schedule_time, d.status) for d in result.caught_up] == [
            (SYNC_ID, fire, "completed")], lines
        assert (EXPORT_ID, fire, "failed") in [
            (p.job, p.schedule_time, p.kind) for p in result.problems]
        assert f"watchdog caught_up: {SYNC_ID} @ {z(fire)}: completed" in lines
        code, out, err = run_main(str(broken), "--job", SYNC, "--last", "3")
        assert row(out, fire)[5:7] == ["completed", "1"] and row(out, fire)[-1] == "ok", out
    caught_id = RunKey(PROJECT, REGION, SYNC_ID, fire).run_id
    failed_id = RunKey(PROJECT, REGION, EXPORT_ID, fire).run_id
    commits = commits_by_run_id(tmp_path / "serve" / "ledger.jsonl", PROJECT)
    assert (commits[caught_id], commits[failed_id]) == (1, 0), commits

    # The fix deployed: `make serve` again on the same emulator, with the fixed job logic.
    with ServedStack(load_stack(fixed), host, workdir=tmp_path / "fixed", scheduler=False,
                     workers=1, log=lines.append) as served:
        code, out, err = rerun_main(str(fixed), "--job", EXPORT, "--time", z(fire),
                                    "--reason", "fixed the export", "--now",
                                    served.watchdog_url)
        assert (code, err) == (0, ""), out
        assert "latest before: failed" in out
        assert out.splitlines()[-1] == (f"tick now: the watchdog delivered 1 re-run(s): "
                                        f"{EXPORT_ID} @ {z(fire)} generation 1: completed")
        generation_id = re.search(r"\(run_id (\S+)\)", out)
        assert generation_id is not None
        code, out, err = run_main(str(fixed), "--job", EXPORT, "--last", "3")
        assert (code, err) == (0, "")
        assert row(out, fire)[5] == "failed", out  # generation 0's record, as it ended
        under = lines_under(out, fire)
        assert under[0].startswith("last error (attempt 2): RuntimeError: flaky:"), under
        assert under[1].startswith(
            "+ generation 1: completed, 1 attempt(s), "), under
        assert under[1].endswith(": fixed the export"), under
    commits = commits_by_run_id(tmp_path / "fixed" / "ledger.jsonl", PROJECT)
    assert commits[generation_id.group(1)] == 1, commits


def test_miss_chooses_fires_of_the_stacks_jobs(
    tmp_path: Path, collection_name: str, capsys: pytest.CaptureFixture[str],
) -> None:
    assert parse_miss("sync") == ("sync", 2) and parse_miss("sync:1") == ("sync", 1)
    plan = MissedFires(misses=frozenset({("sync", 1)}))
    assert plan.hits("missed", "sync", 0) and not plan.hits("missed", "sync", 1)
    assert not plan.hits("missed", "export", 0) and not plan.hits("lost-ack", "sync", 0)
    path = day2_stack_file(tmp_path, collection_name, "example_jobs.flaky:run", "miss")
    for bad, why in (("sync:0", "expected JOB or JOB:N"), ("nope", "--miss nope: no such")):
        with pytest.raises(SystemExit):
            main(["--stack", str(path), "--miss", bad])
        assert why in capsys.readouterr().err


def run_main(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return runs.main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def rerun_main(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return rerun.main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()

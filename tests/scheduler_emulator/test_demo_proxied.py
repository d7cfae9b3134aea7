"""`make demo` with proxied jobs: the idempotent proxy served by functions-framework
against local fake Google APIs (local_stack/fake_google_apis.py), replayed by the Scheduler
emulator with the same exactly-once verdict: a run's executions are the starts the fake
received under its run ID; one run's start is refused (403) on purpose, and must be
answered 200 failed_permanent, recorded failed (permanent), and start nothing. A stack whose
own jobs have nothing to run locally fails the demo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from demo.local_proxy import LocalProxy
from demo.options import DemoOptions
from demo.proxied import replay_proxied
from demo.report import render
from demo.report_json import outcome_json
from demo.run import run_demo
from demo.store_faults import store_timing
from local_stack import FirestoreEmulator
from local_stack.fake_google_apis import Behaviour
from scheduler_emulator.faults import FaultPlan
from scheduler_emulator.report import DUPLICATED, FAILED_PERMANENT, reply_outcome
from scheduler_emulator.stack import load_stack
from tests.stacks import fixture_stack_file

RETRY = {"retryCount": 3, "minBackoffSeconds": 5, "maxBackoffSeconds": 10, "maxDoublings": 1}
PROXIED = ("export-workflow", "export-run-job", "export-build")


def proxied_stack(
    directory: Path, *, paused: bool = False, config: dict[str, Any] | None = None
) -> Path:
    """A stack file of proxied jobs only, one per target kind, in a project of its own (the
    session's emulator is shared); `paused`: a paused dedup job and paused proxied jobs."""
    project = f"acme-px-{uuid.uuid4().hex[:8]}"
    where = f"projects/{project}/locations/europe-west1"
    jobs: list[dict[str, Any]] = [
        {"name": "export-workflow", "schedule": "*/10 * * * *",
         "proxy": {"target": "workflow", "resource": f"{where}/workflows/nightly-export"},
         "body": {"report": "daily"}},
        {"name": "export-run-job", "schedule": "*/15 * * * *",
         "proxy": {"target": "run_job", "resource": f"{where}/jobs/export-job"}},
        {"name": "export-build", "schedule": "0 * * * *",
         "proxy": {"target": "build_trigger", "resource": f"{where}/triggers/release-trigger"}},
    ]
    if paused:
        jobs = [jobs[0], {"name": "sync", "schedule": "*/5 * * * *"}]
    for job in jobs:
        job.update(attemptDeadlineSeconds=60, retry=RETRY, paused=paused)
    path = directory / f"Pulumi.{project}.yaml"
    path.write_text(json.dumps({"config": {
        "gcp:project": project, "gcp:region": "europe-west1", "scheduler-dedup:jobs": jobs,
        **(config or {}),
    }}))
    return path


def test_a_proxied_only_stack_starts_every_run_once_downstream_and_reports_the_refusal(
    firestore_emulator: FirestoreEmulator, tmp_path: Path
) -> None:
    # Scheduler's faults that deliver a run twice or force one; the fake refuses the second
    # run it sees of the first job (export-workflow) with 403 on every start.
    faults = FaultPlan.parse(
        ["duplicate=0.3", "concurrent=0.3", "lost-ack=0.3", "manual=0.3"], seed=3)
    outcome = run_demo(DemoOptions(
        stack_path=proxied_stack(tmp_path), jobs=PROXIED, ticks=3, faults=faults,
        firestore_host=firestore_emulator.host, paths=False,
    ))
    assert outcome.ok
    assert not outcome.function_url  # no job runs in the dedup function: not served
    proxied = outcome.proxied
    assert proxied is not None and proxied.unattributed_starts == 0
    runs = proxied.summaries
    assert {s.job for s in runs} == set(PROXIED)
    [refused] = [s for s in runs if s.refused is not None]
    assert (refused.job, refused.refused, refused.executions) == ("export-workflow", 403, 0)
    answered = [reply_outcome(d) for d in refused.deliveries if d.status == 200]
    assert answered and set(answered) == {FAILED_PERMANENT}
    r = proxied.refused
    assert r is not None and r.ok and r.record == "failed (permanent)"
    assert r.error is not None and "HTTP 403 PERMISSION_DENIED" in r.error
    others = [s for s in runs if s is not refused and s.deliveries]
    assert others and all(s.executions == 1 and s.ok for s in others), others
    assert any(s.forced for s in others)  # a forced run: a run of its own, started once
    assert sum(proxied.outcomes.values()) >= len(others)  # the proxy's own log lines

    text = render(outcome)
    assert any(line.startswith("proxied jobs: the idempotent proxy") for line in text)
    assert any(line.startswith("  refused: export-workflow @ ") and "failed (permanent)" in line
               and line.endswith("nothing started: as it must") for line in text)
    assert any("refused-403" in line and "start refused downstream (403): failed "
               "(permanent), nothing started" in line for line in text)
    assert text[-1].startswith("RESULT: PASS: proxied jobs: every acknowledged run started "
                               "exactly once downstream")
    assert "1 start refused downstream (403), answered 200 failed_permanent" in text[-1]
    report = outcome_json(outcome)
    assert report["ok"] and report["proxied"]["refused"]["record"] == "failed (permanent)"
    assert [run["refused"] for run in report["proxied"]["runs"]].count(403) == 1


def test_a_run_started_twice_downstream_fails_the_verdict(
    firestore_emulator: FirestoreEmulator, tmp_path: Path
) -> None:
    # The fake starts the first run's execution but answers after the proxy's 1 s timeout:
    # the proxy cannot know it started, releases its claim and answers 500; Scheduler's
    # retry starts a second execution (the window dedup upstream cannot close,
    # docs/proxy.md). The fake counts both starts under the run's ID: executed twice.
    stack = load_stack(proxied_stack(tmp_path, config={"scheduler-dedup:proxyTimeoutSeconds": 1}))
    stack = stack.only(["export-run-job"])
    options = DemoOptions(stack=stack, ticks=2, faults=FaultPlan())
    timing = store_timing(stack, options.time_scale, False)
    with LocalProxy(stack, firestore_emulator.host, scale=options.time_scale, timing=timing,
                    workdir=tmp_path, workers=1) as proxy:
        proxy.apis.strike_run(1, Behaviour(delay=1.5), times=1)
        proxied = replay_proxied(proxy, stack, options)
    first, second = proxied.summaries
    assert first.replies()["500"] == 1 and first.acknowledged
    assert (first.executions, first.verdict, first.ok) == (2, DUPLICATED, False)
    assert (second.executions, second.ok) == (1, True)
    assert not proxied.ok and proxied.totals["failed_jobs"] == ["export-run-job"]


def demo(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m operator_tools demo` in `checkout`, a clone of the kit."""
    return subprocess.run(
        [sys.executable, "-m", "operator_tools", "demo", *args], cwd=checkout,
        env=dict(os.environ),
        capture_output=True, text=True, timeout=120, check=False,
    )


def test_a_stack_with_nothing_to_run_locally_fails_the_demo(
    firestore_emulator: FirestoreEmulator, tmp_path: Path, kit_checkout: Path
) -> None:
    # Its only jobs, a proxied one and a dedup one, are paused: nothing of the stack runs,
    # which must not pass for "every run exactly once".
    stack = proxied_stack(tmp_path, paused=True)
    done = demo(kit_checkout, "--stack", str(stack), "--job", "export-workflow", "--job", "sync",
                "--ticks", "2", "--no-paths", "--firestore-host", firestore_emulator.host)
    assert done.returncode == 1, done.stderr
    last = done.stdout.rstrip().splitlines()[-1]
    assert last == (f"RESULT: FAIL: nothing to run locally: every job of {stack} is paused "
                    "(sync, export-workflow)"), done.stdout


def test_the_stack_keeps_proxied_jobs_apart_with_their_routes() -> None:
    # prod's daily-report job calls the proxy: not among the dedup function's jobs, but
    # among the proxied ones, with the route the proxy's job table gives it.
    stack = load_stack(fixture_stack_file("prod"))
    assert "daily-report" not in {job.name for job in stack.jobs}
    [job] = stack.proxied_jobs
    assert job.name == "daily-report" and job.proxy is not None
    assert stack.proxy_routes() == {job.job_id: {
        "target": "workflow",
        "resource": "projects/acme-scheduler-prod/locations/europe-west1/workflows/daily-report",
    }}
    assert stack.job("daily-report") is job and stack.only(["daily-report"]).jobs == ()

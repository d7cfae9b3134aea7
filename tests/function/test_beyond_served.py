"""Runs beyond the schedule, end to end: a stack's config, the Scheduler emulator delivering
its jobs and a second Scheduler job sending one job's headers at times of its own, the
dedup function and the watchdog served as Cloud Run serves them, the real Firestore
emulator. The extra executions are reported `unexplained_run`, and page once (one
`beyond_schedule` incident) for the job whose runsBeyondSchedule is `page`; forced runs
beyond maxForcedRunsPerDay are reported `too_many_forced_runs`."""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from dedup.keys import RunKey
from infra.config import load_config
from infra.watchdog import watch_jobs
from local_stack import FunctionServer
from local_stack.deliveries import LOCATION, PROJECT, bearer, function_env
from local_stack.processes import REPO_ROOT
from local_stack.steered_job import read_ledger
from local_stack.tables import job_tables_env
from scheduler_emulator.emulator import SchedulerEmulator
from scheduler_emulator.stack import from_stack_config
from tests.function.test_watchdog import INVOKER

pytestmark = pytest.mark.usefixtures("firestore_emulator")

EVERY_TWO_MINUTES = "*/2 * * * *"
SECOND_SCHEDULER_JOB = "1-59/2 * * * *"  # the same job's headers, at times of its own
TICK = {"Authorization": bearer(INVOKER)}


def stack_config(suffix: str) -> dict[str, Any]:
    job = {"schedule": EVERY_TWO_MINUTES, "timeZone": "Etc/UTC", "retry": "none",
           "attemptDeadlineSeconds": 180}
    return {
        "gcp:project": PROJECT,
        "gcp:region": LOCATION,
        "scheduler-dedup:jobs": [
            {**job, "name": f"paged-{suffix}", "runsBeyondSchedule": "page",
             "maxForcedRunsPerDay": 1},
            {**job, "name": f"logged-{suffix}", "runsBeyondSchedule": "log"},
        ],
    }


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[FunctionServer, FunctionServer, Any, Path]]:
    collection = f"beyond_{uuid.uuid4().hex[:10]}"
    ledger = tmp_path / "ledger.jsonl"
    cfg = load_config(stack_config(uuid.uuid4().hex[:6]))
    function = FunctionServer(function_env(collection, ledger), workers=1, threads=4,
                              extra_pythonpath=[REPO_ROOT])
    watchdog_env = {
        "DEDUP_PROJECT": PROJECT,
        "DEDUP_LOCATION": LOCATION,
        "DEDUP_COLLECTION": collection,
        "DEDUP_STORE_TIMEOUT_SECONDS": "5",
        # The readiness probe (no token) is refused: the first tick is the test's.
        "DEDUP_ALLOWED_CALLERS": INVOKER,
        **job_tables_env(watch_jobs=watch_jobs(cfg)),
        "DEDUP_WATCH_LOOKBACK_SECONDS": "3600",
        "DEDUP_WATCH_GRACE_SECONDS": "0",
        "FIRESTORE_EMULATOR_HOST": os.environ["FIRESTORE_EMULATOR_HOST"],
        "GOOGLE_CLOUD_PROJECT": PROJECT,
    }
    watchdog = FunctionServer(watchdog_env, target="watch_scheduled_runs")
    with function, watchdog:
        yield function, watchdog, cfg, ledger


def watchdog_lines(server: FunctionServer) -> list[dict[str, Any]]:
    return [json.loads(line) for line in server.log_text.splitlines()
            if line.startswith("{") and '"watchdog' in line]


def test_an_extra_execution_under_another_scheduler_job_is_reported_and_pages_once(
    served: tuple[FunctionServer, FunctionServer, Any, Path],
) -> None:
    function, watchdog, cfg, ledger = served
    stack = from_stack_config(cfg)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    upcoming = now - timedelta(minutes=now.minute % 2)  # the last business run's time
    start = upcoming - timedelta(minutes=8)
    jobs = list(stack.jobs)
    # Each job fires every two minutes (the last 4 minutes before the last business run's
    # time, so none is due unrun); a second Scheduler job for each: the same ID and
    # headers (X-Dedup-Schedule says every two minutes), fired at the odd minutes.
    extra = [dataclasses.replace(job, schedule=SECOND_SCHEDULER_JOB) for job in jobs]
    emulator = SchedulerEmulator(function.url, stack, jobs=[*jobs, *extra], ticks=3,
                                 start=start, time_scale=0.02)
    result = emulator.run()
    assert all(r.acknowledged for r in result.runs), [
        (d.status, d.error, d.reply_body) for r in result.runs for d in r.deliveries]
    by_job = {job.job_id: emulator.schedule(job)[:3] for job in jobs}
    extra_times = {job.job_id: emulator.schedule(job)[:3] for job in extra}
    executed = {(e["job"], e["schedule_time"]) for e in read_ledger(str(ledger))}
    for job_id, times in [*by_job.items(), *extra_times.items()]:
        assert {(job_id, t.isoformat()) for t in times} <= executed  # both ran (once each)
    paged, logged = (job.job_id for job in jobs)

    # Two forced runs of the paged job ("Run now" twice, an hour apart in schedule time):
    # the second is beyond maxForcedRunsPerDay 1.
    forced_ids = []
    for hours in (1, 2):
        at = upcoming + timedelta(hours=hours)
        reply = requests.post(function.url, headers=emulator.headers(jobs[0], at),
                              timeout=30)
        assert (reply.status_code, reply.json()["trigger"]) == (200, "forced"), reply.text
        forced_ids.append(RunKey(PROJECT, LOCATION, paged, at, forced=True).run_id)

    first = requests.post(watchdog.url, headers=TICK, timeout=60)
    assert first.status_code == 200, first.text
    body = first.json()
    beyond = sorted((p["job"], p["kind"], p["schedule_time"], p["run_id"])
                    for p in body["problems"]
                    if p["kind"] in ("unexplained_run", "too_many_forced_runs"))
    expected = sorted(
        [(job_id, "unexplained_run", t.strftime("%Y-%m-%dT%H:%M:%SZ"),
          RunKey(PROJECT, LOCATION, job_id, t).run_id)
         for job_id, times in extra_times.items() for t in times]
        + [(paged, "too_many_forced_runs",
            (upcoming + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ"), forced_ids[1])])
    assert beyond == expected
    # The scheduled runs are not among them, nor reported missed.
    assert not [p for p in body["problems"] if p["kind"] == "missed"], body["problems"]
    opened = [i for i in body.get("incidents", []) if i["event"] == "incident_opened"]
    assert [(i["job"], i["incident_kind"]) for i in opened] == [(paged, "beyond_schedule")]

    second = requests.post(watchdog.url, headers=TICK, timeout=60)
    assert second.status_code == 200, second.text
    assert not [p for p in second.json()["problems"]
                if p["kind"] in ("unexplained_run", "too_many_forced_runs")]
    assert "incidents" not in second.json()

    lines = watchdog_lines(watchdog)
    assert sorted((e["job"], e["kind"]) for e in lines if e.get("kind") in (
        "unexplained_run", "too_many_forced_runs")) == sorted((j, k) for j, k, _, _ in expected)
    pages = [e for e in lines if e.get("event") == "incident_opened"]
    assert [(e["job"], e["incident_kind"]) for e in pages] == [(paged, "beyond_schedule")]
    assert logged not in {e["job"] for e in pages}

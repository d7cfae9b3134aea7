"""The FastAPI example (examples/own-service/fastapi/) served by uvicorn (local_stack's
ServiceServer) against the real Firestore emulator, with a lease of a few seconds: an async
job three leases long keeps its claim by heartbeat while the event loop keeps answering
other requests, and a job whose claim is taken from it sees claim_lost and stops. What both
example apps share is test_served_examples.py's."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from google.cloud import firestore

from local_stack import ServiceServer
from local_stack.deliveries import LOCATION, PROJECT, scheduler_headers
from local_stack.processes import REPO_ROOT
from tests.waiting import PATIENCE_SECONDS, wait_until

pytestmark = pytest.mark.usefixtures("firestore_emulator")

APP_DIR = REPO_ROOT / "examples" / "own-service" / "fastapi"
LEASE_SECONDS = 3.0
JOB_SECONDS = 3 * LEASE_SECONDS
# Between two probes of the running scene (health checks, duplicate deliveries).
PROBE_EVERY = 0.1
# How often Scheduler-like duplicates arrive while the job runs.
DUPLICATE_EVERY = 0.5


@dataclass
class Served:
    url: str
    collection: str
    executions: Path

    def deliver(self, schedule_time: str, body: dict[str, Any] | None = None
                ) -> requests.Response:
        return requests.post(f"{self.url}/tasks/export",
                             headers=scheduler_headers(schedule_time=schedule_time),
                             data=json.dumps(body or {}), timeout=PATIENCE_SECONDS)

    def executions_of(self, schedule_time: str) -> list[dict[str, Any]]:
        if not self.executions.exists():
            return []
        lines = [json.loads(line) for line in self.executions.read_text().splitlines()]
        return [line for line in lines
                if datetime.fromisoformat(line["schedule_time"])
                == datetime.fromisoformat(schedule_time)]

    def record(self, run_id: str) -> Any:
        """The run's record (a DocumentSnapshot)."""
        return firestore.Client(project=PROJECT).collection(self.collection).document(
            run_id).get()


@pytest.fixture(scope="module")
def served(firestore_emulator: Any, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Served]:
    """One server for the module; each test delivers runs of its own schedule times."""
    collection = f"runs_asgi_{int(time.time() * 1000)}"
    executions = tmp_path_factory.mktemp("asgi") / "executions.jsonl"
    env = {
        "DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": LOCATION, "DEDUP_COLLECTION": collection,
        "DEDUP_LEASE_SECONDS": str(LEASE_SECONDS), "DEDUP_STORE_TIMEOUT_SECONDS": "2",
        "EXECUTIONS_FILE": str(executions), "JOB_SECONDS": str(JOB_SECONDS),
        "GOOGLE_CLOUD_PROJECT": PROJECT,
    }
    with ServiceServer(APP_DIR, "uvicorn", env) as server:
        yield Served(server.url, collection, executions)


@dataclass
class Scene:
    """What the test saw while the long delivery ran."""

    health_latencies: list[float] = field(default_factory=list)
    health_failures: list[str] = field(default_factory=list)
    duplicates: list[tuple[float, int]] = field(default_factory=list)  # (sent at, status)
    record_versions: set[datetime] = field(default_factory=set)


def watch_until_done(served: Served, first: Future[requests.Response], run_id: str,
                     schedule_time: str, started: float) -> Scene:
    """Until the first delivery is answered: probe /healthz, send a duplicate every
    DUPLICATE_EVERY, and note each version of the run's record (a renewal moves it)."""
    scene = Scene()
    last_duplicate = 0.0
    while not first.done():
        sent = time.monotonic()
        try:
            health = requests.get(f"{served.url}/healthz", timeout=PATIENCE_SECONDS)
            if health.status_code != 200:
                scene.health_failures.append(f"{health.status_code}: {health.text}")
        except requests.RequestException as exc:
            scene.health_failures.append(repr(exc))
        scene.health_latencies.append(time.monotonic() - sent)
        if time.monotonic() - last_duplicate >= DUPLICATE_EVERY and not first.done():
            last_duplicate = time.monotonic()
            status = served.deliver(schedule_time).status_code
            scene.duplicates.append((last_duplicate - started, status))
        snapshot = served.record(run_id)
        if snapshot.exists and (snapshot.to_dict() or {}).get("status") == "in_progress":
            scene.record_versions.add(snapshot.update_time)
        wait([first], timeout=PROBE_EVERY)  # pacing: returns at once when the job ends
    return scene


def started_run_id(served: Served, schedule_time: str,
                   first: Future[requests.Response]) -> str:
    """The run's ID once its job has started (its first execution line)."""
    def started() -> str | None:
        assert not first.done(), f"answered before its job started: {first.result().text}"
        lines = served.executions_of(schedule_time)
        return lines[0]["run_id"] if lines else None

    return wait_until(started, what="the long job to start")


def test_an_async_job_longer_than_the_lease_keeps_its_claim_and_the_loop_serves(
    served: Served,
) -> None:
    schedule_time = "2026-10-16T12:00:00Z"
    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        first = pool.submit(served.deliver, schedule_time)
        run_id = started_run_id(served, schedule_time, first)
        job_started = time.monotonic() - started
        scene = watch_until_done(served, first, run_id, schedule_time, started)
        answered = first.result()
        job_seconds = time.monotonic() - started - job_started

    assert answered.status_code == 200, answered.text
    assert answered.json()["outcome"] == "completed"
    assert answered.json()["result"]["attempt"] == 1
    # Every duplicate during the job was refused with a 409, also those sent after the
    # claim's first lease had lapsed: its renewals kept it.
    assert scene.duplicates, "no duplicate was sent during the job"
    assert {status for _, status in scene.duplicates} == {409}, scene.duplicates
    after_lease = [at for at, _ in scene.duplicates if at > job_started + LEASE_SECONDS]
    assert after_lease, f"no duplicate came after the first lease: {scene.duplicates}"
    # Renewals seen in the store: the record's version moved while it was in progress.
    assert len(scene.record_versions) >= 2, scene.record_versions
    # The loop was never blocked: every probe answered, each far quicker than the job.
    assert scene.health_failures == []
    assert len(scene.health_latencies) >= 5, scene.health_latencies
    assert max(scene.health_latencies) < JOB_SECONDS / 3, scene.health_latencies
    # One execution; the record completed by its first attempt; a retry runs nothing.
    assert len(served.executions_of(schedule_time)) == 1
    stored = served.record(run_id).to_dict() or {}
    assert (stored["status"], stored["attempts"]) == ("completed", 1)
    assert stored["duration_seconds"] >= JOB_SECONDS  # the job did run three leases long
    retry = served.deliver(schedule_time)
    assert (retry.status_code, retry.json()["outcome"]) == (200, "duplicate")
    assert len(served.executions_of(schedule_time)) == 1
    print(f"\nasgi served: job {job_seconds:.1f} s, {len(scene.record_versions)} record "
          f"versions while in progress, {len(scene.duplicates)} duplicates all 409, "
          f"{len(scene.health_latencies)} /healthz probes, max "
          f"{max(scene.health_latencies) * 1000:.0f} ms, median "
          f"{sorted(scene.health_latencies)[len(scene.health_latencies) // 2] * 1000:.0f} ms")


def test_a_job_whose_claim_is_taken_sees_claim_lost_and_stops(served: Served) -> None:
    schedule_time = "2026-10-16T13:00:00Z"
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(served.deliver, schedule_time)
        run_id = started_run_id(served, schedule_time, first)
        # Another attempt takes the run over (as after a lapsed lease): the holder's next
        # renewal finds the record no longer its own.
        document = firestore.Client(project=PROJECT).collection(served.collection).document(
            run_id)
        document.update({"attempt_id": "a-rival-attempt"})
        answered = first.result(timeout=PATIENCE_SECONDS)
    # The job saw claim_lost between two steps and raised; its claim is not released over
    # the rival's record.
    assert answered.status_code == 500, answered.text
    assert answered.json()["outcome"] == "failed"
    stored = served.record(run_id).to_dict() or {}
    assert stored["attempt_id"] == "a-rival-attempt"
    assert stored["status"] == "in_progress"
    assert len(served.executions_of(schedule_time)) == 1

"""Scheduler hangs up at its attempt deadline while a guarded ASGI job still runs: served by
uvicorn (ASGI spec 2.3, where Starlette's StreamingResponse watches receive() for the
client's disconnect and cancels its generator), against the real Firestore emulator. The
job must not hear the hang-up: it runs to its end, and its whole answer is the run's
result; a cut-off answer would be recorded completed and every retry answered duplicate."""

from __future__ import annotations

import json
import socket
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore

from local_stack import ServiceServer
from local_stack.deliveries import LOCATION, PROJECT, scheduler_headers
from tests.waiting import let_time_pass, wait_until

pytestmark = pytest.mark.usefixtures("firestore_emulator")

# A FastAPI service whose guarded job streams its answer: a first part, then (its work)
# waiting for GO_FILE, then the rest; each step a line in STEPS_FILE.
STREAMING_APP = textwrap.dedent('''
    import asyncio, os
    from pathlib import Path
    from fastapi import FastAPI, Request
    from fastapi.responses import StreamingResponse
    from dedup.adapters.asgi import DedupMiddleware, current_run

    app = FastAPI()
    app.add_middleware(DedupMiddleware, paths=["/tasks/export"])

    def step(name):
        with open(os.environ["STEPS_FILE"], "a") as steps:
            steps.write(name + "\\n")

    @app.get("/")
    async def root():
        return {"status": "ok"}

    @app.post("/tasks/export")
    async def export(request: Request):
        current_run(request)
        async def parts():
            yield b'{"part": 1'
            step("started")
            while not Path(os.environ["GO_FILE"]).exists():
                await asyncio.sleep(0.02)
            step("finished")
            yield b', "rest": 2}'
        return StreamingResponse(parts(), media_type="application/json")
''')
# Long enough for uvicorn to have passed the closed connection on, had it reached the app.
HANG_UP_SETTLES_SECONDS = 1.0


@dataclass
class Served:
    server: ServiceServer
    collection: str
    steps_file: Path
    go_file: Path

    def steps(self) -> list[str]:
        return self.steps_file.read_text().split() if self.steps_file.exists() else []

    def records(self) -> list[dict[str, Any]]:
        documents = firestore.Client(project=PROJECT).collection(self.collection).stream()
        return [snapshot.to_dict() or {} for snapshot in documents]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    (tmp_path / "main.py").write_text(STREAMING_APP)
    collection = f"runs_hangup_{int(time.time() * 1000)}"
    env = {
        "DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": LOCATION, "DEDUP_COLLECTION": collection,
        "DEDUP_STORE_TIMEOUT_SECONDS": "5", "GOOGLE_CLOUD_PROJECT": PROJECT,
        "STEPS_FILE": str(tmp_path / "steps"), "GO_FILE": str(tmp_path / "go"),
    }
    with ServiceServer(tmp_path, "uvicorn", env) as server:
        yield Served(server, collection, tmp_path / "steps", tmp_path / "go")


def deliver_and_hang_up(served: Served, headers: dict[str, str]) -> None:
    """A delivery whose client leaves once the job has started (Scheduler's deadline)."""
    request = ["POST /tasks/export HTTP/1.1", "Host: 127.0.0.1", "Content-Length: 2",
               *(f"{name}: {value}" for name, value in headers.items())]
    with socket.create_connection(("127.0.0.1", served.server.port)) as client:
        client.sendall(("\r\n".join(request) + "\r\n\r\n{}").encode())
        wait_until(lambda: "started" in served.steps(), what="the job to start")


def test_a_job_runs_to_its_end_when_scheduler_hangs_up(served: Served) -> None:
    deliver_and_hang_up(served, scheduler_headers("hang-up", "2026-10-16T12:00:00Z"))
    let_time_pass(HANG_UP_SETTLES_SECONDS, "nothing may happen to the job after the hang-up")
    # The job is still at work and the run still claimed: nothing recorded it done.
    assert served.steps() == ["started"]
    assert [record["status"] for record in served.records()] == ["in_progress"]

    served.go_file.touch()  # the job's work ends
    (record,) = wait_until(
        lambda: [r for r in served.records() if r["status"] != "in_progress"] or None,
        what="the run to be recorded")
    assert served.steps() == ["started", "finished"]
    assert record["status"] == "completed", record
    assert json.loads(record["result_json"]) == {"part": 1, "rest": 2}

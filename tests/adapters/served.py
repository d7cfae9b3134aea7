"""The own-service examples (examples/own-service/<app>/main.py, each exposing `app` with
POST /tasks/export guarded by the protocol) served as a team serves them: a real HTTP
server in a subprocess (werkzeug's for Flask, uvicorn for FastAPI), the real Firestore
emulator. tests/adapters/test_served_examples.py runs them with this checkout's dedup;
test_install_bounds.py runs the same tests with the protocol's wheel installed into fresh
virtualenvs (their python given as `python`, nothing of the checkout on its path).

What the examples share, so one test fits both: EXECUTIONS_FILE (one JSON line per
execution: run_id, schedule_time, attempt), JOB_SECONDS (how long each execution works),
FAIL_FILE (while it exists, an execution fails after its line)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from local_stack import ServiceServer
from local_stack.deliveries import LOCATION, PROJECT
from local_stack.processes import REPO_ROOT

EXAMPLES_DIR = REPO_ROOT / "examples" / "own-service"
# Each example app, and the server a team runs it with.
SERVERS = {"flask": "werkzeug", "fastapi": "uvicorn"}
TASK_PATH = "/tasks/export"
RECORDS_DATABASE = "own-service-runs"
EXAMPLE_PYTHON_ENV = "DEDUP_EXAMPLE_PYTHON"
"""An interpreter whose environment installed the protocol (and the apps' frameworks): the
served tests run the apps with it instead of this one and this checkout's function/."""


@dataclass
class ServedExample:
    app: str
    server: ServiceServer
    executions_file: Path
    fail_file: Path
    collection: str

    @property
    def url(self) -> str:
        return self.server.url + TASK_PATH

    def post(self, headers: Mapping[str, str], body: bytes = b"{}") -> requests.Response:
        return requests.post(self.url, headers=dict(headers), data=body, timeout=60)

    def executions(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """The lines the app's job wrote, of one run or of all."""
        if not self.executions_file.exists():
            return []
        lines = [json.loads(line) for line in
                 self.executions_file.read_text(encoding="utf-8").splitlines() if line]
        return [line for line in lines if run_id is None or line["run_id"] == run_id]


@contextmanager
def served_example(app: str, collection: str, folder: Path, python: Path | None = None,
                   **env: str) -> Iterator[ServedExample]:
    """`app` served on a free port with the DEDUP_* settings of the kit's test function
    (its project and location, `collection`), its files in `folder`; `python` None: this
    interpreter, with this checkout's function/ on its path."""
    executions, fail_file = folder / f"{app}-executions.jsonl", folder / f"{app}-fail"
    settings = {
        "DEDUP_PROJECT": PROJECT,
        "DEDUP_LOCATION": LOCATION,
        # A named database, as the kit's stacks give their records.
        "DEDUP_DATABASE": RECORDS_DATABASE,
        "DEDUP_COLLECTION": collection,
        "DEDUP_STORE_TIMEOUT_SECONDS": "5",
        "FIRESTORE_EMULATOR_HOST": os.environ["FIRESTORE_EMULATOR_HOST"],
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        "EXECUTIONS_FILE": str(executions),
        "FAIL_FILE": str(fail_file),
        **env,
    }
    server = ServiceServer(EXAMPLES_DIR / app, SERVERS[app], settings, python=python,
                           pythonpath=None if python is None else [])
    with server:
        yield ServedExample(app, server, executions, fail_file, collection)


def example_python() -> Path | None:
    """The interpreter EXAMPLE_PYTHON_ENV names, or None (this one, with the checkout)."""
    named = os.environ.get(EXAMPLE_PYTHON_ENV)
    return Path(named) if named else None

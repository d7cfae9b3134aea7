"""DEDUP_ALLOWED_CALLERS on the served function (functions-framework, the real Firestore
emulator): only the listed accounts run jobs; any other caller gets a 403, writes nothing,
and does not keep the real delivery of that run from executing once.

Tokens are built as Cloud Run forwards them after verifying them:
`header.payload.SIGNATURE_REMOVED_BY_GOOGLE`. One server serves every case.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from dedup.keys import RunKey, parse_schedule_time
from local_stack import FunctionServer
from local_stack.deliveries import (
    INVOKER,
    LOCATION,
    PROJECT,
    bearer,
    function_env,
    scheduler_headers,
)
from local_stack.processes import REPO_ROOT
from local_stack.steered_job import read_ledger

pytestmark = pytest.mark.usefixtures("firestore_emulator")

SECOND = f"watchdog-invoker@{PROJECT}.iam.gserviceaccount.com"
OTHER = f"ci-deployer@{PROJECT}.iam.gserviceaccount.com"
SCHEDULE = "2026-10-16T12:00:00Z"


class Served:
    def __init__(self, server: FunctionServer, collection: str, ledger: Path) -> None:
        self.server = server
        self.collection = collection
        self.ledger = ledger
        self.client = firestore.Client(project=PROJECT)

    def post(self, job: str, authorization: str | None, **extra: str) -> requests.Response:
        headers = {**scheduler_headers(job, SCHEDULE, authorization=authorization), **extra}
        return requests.post(
            self.server.url, headers=headers, data=json.dumps({"result": job}), timeout=30
        )

    def records(self, job: str) -> list[dict[str, Any]]:
        """Every record of the job in the collection (by its ID and by a query)."""
        run_id = RunKey(PROJECT, LOCATION, job, parse_schedule_time(SCHEDULE)).run_id
        collection = self.client.collection(self.collection)
        snapshots: list[Any] = [collection.document(run_id).get()]
        snapshots += collection.where(filter=FieldFilter("job", "==", job)).stream()
        return [dict(s.to_dict()) for s in snapshots if s.exists]

    def executions(self, job: str) -> list[dict[str, Any]]:
        return [e for e in read_ledger(str(self.ledger)) if e["job"] == job]

    def forbidden_lines(self) -> list[dict[str, Any]]:
        lines = []
        for line in self.server.log_text.splitlines():
            if line.startswith("{") and '"outcome":"forbidden"' in line:
                lines.append(json.loads(line))
        return lines


@pytest.fixture(scope="module")
def served(
    firestore_emulator: object, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    collection = f"callers_{uuid.uuid4().hex[:12]}"
    ledger = tmp_path_factory.mktemp("callers") / "ledger.jsonl"
    # Several accounts, with the spaces the setting tolerates.
    env = function_env(collection, ledger, DEDUP_ALLOWED_CALLERS=f" {INVOKER} , {SECOND} ")
    with FunctionServer(env, workers=2, threads=4, extra_pythonpath=[REPO_ROOT]) as server:
        yield Served(server, collection, ledger)


@pytest.mark.parametrize("account", [INVOKER, SECOND], ids=["first", "second"])
def test_each_allowed_account_runs_the_job_once(served: Served, account: str) -> None:
    job = f"allowed-{account.split('@')[0]}"
    reply = served.post(job, bearer(account))
    assert reply.status_code == 200, reply.text
    assert (reply.json()["outcome"], reply.json()["result"]["echo"]) == ("completed", job)
    again = served.post(job, bearer(account))
    assert (again.status_code, again.json()["outcome"]) == (200, "duplicate")
    assert len(served.executions(job)) == 1
    [record] = {r["attempt_id"]: r for r in served.records(job)}.values()
    assert record["status"] == "completed"


REFUSED: dict[str, tuple[dict[str, str | None], str, str]] = {
    # case: (headers, the 403's reason, the caller logged)
    "another account": (
        {"Authorization": bearer(OTHER)},
        f"caller '{OTHER}' is not one of the accounts this function serves "
        "(DEDUP_ALLOWED_CALLERS)",
        OTHER,
    ),
    "no Authorization header": (
        {"Authorization": None},
        "no OIDC token (Authorization: Bearer): this function serves only its Scheduler "
        "jobs' service accounts",
        "no token",
    ),
    "not a JWT": (
        {"Authorization": "Bearer test-token"},
        "the Authorization bearer token is not a JWT: a JWT has three dot-separated segments",
        "not a JWT",
    ),
    "not a Bearer token": (
        {"Authorization": "Basic dXNlcjpwYXNz"},
        "the Authorization header is not a Bearer token",
        "not a JWT",
    ),
    "a token without email": (
        {"Authorization": bearer(None)},
        "the Authorization token has no email claim",
        "no email claim",
    ),
    "an allowed e-mail beside the token Cloud Run checked": (
        {"X-Serverless-Authorization": bearer(OTHER), "Authorization": bearer(INVOKER)},
        f"caller '{OTHER}' is not one of the accounts this function serves "
        "(DEDUP_ALLOWED_CALLERS)",
        OTHER,
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_refused_caller_writes_nothing_and_the_run_still_executes_once(
    served: Served, case: str
) -> None:
    headers, reason, caller = REFUSED[case]
    job = "refused-" + "-".join(case.split()[:4]).replace("'", "")
    before = len(served.forbidden_lines())
    authorization = headers["Authorization"]
    extra = {k: v for k, v in headers.items() if k != "Authorization" and v is not None}

    refused = served.post(job, authorization, **extra)
    assert (refused.status_code, refused.json()) == (403, {"error": reason})
    # Nothing read, nothing written, the job did not run.
    assert served.records(job) == []
    assert served.executions(job) == []
    # One WARNING line: who, and why; nothing else of the request.
    lines = served.forbidden_lines()
    assert len(lines) == before + 1
    line = lines[-1]
    assert set(line) == {"severity", "message", "outcome", "status", "caller", "latency_ms",
                         "kit_version"}
    assert (line["severity"], line["status"], line["caller"]) == ("WARNING", 403, caller)
    assert line["message"] == f"forbidden caller: {reason}"
    assert job not in json.dumps(line) and "SIGNATURE_REMOVED" not in json.dumps(line)

    # The Scheduler's own delivery of the same run is not answered "duplicate": it runs.
    delivered = served.post(job, bearer(INVOKER))
    assert (delivered.status_code, delivered.json()["outcome"]) == (200, "completed")
    again = served.post(job, bearer(INVOKER))
    assert (again.status_code, again.json()["outcome"]) == (200, "duplicate")
    assert len(served.executions(job)) == 1

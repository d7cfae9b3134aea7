"""With routes, the dedup function imports the routes' job logic alone: a default job logic
(DEDUP_JOB) that no route names is never imported, so a fork that deleted example_jobs/example.py
starts; a job without a route is refused retryably. Without routes, DEDUP_JOB runs every job.
Against the real Firestore emulator (the refused run's record is the store's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from local_stack.deliveries import TEST_JOB, in_process_function, scheduler_headers

pytestmark = pytest.mark.usefixtures("firestore_emulator")

ROUTED = "sched-dedup-dev-nightly-report"
DELETED_DEFAULT = "jobs.deleted_example:run"


def executions(ledger: Path) -> list[str]:
    if not ledger.exists():
        return []
    return [json.loads(line)["job"] for line in ledger.read_text().splitlines()]


def test_a_default_no_route_names_is_not_imported(collection_name: str, ledger: Path) -> None:
    # Built at all: importing DEDUP_JOB would fail (no module jobs.deleted_example).
    function = in_process_function(
        collection_name, default_job=DELETED_DEFAULT, job_routes={ROUTED: TEST_JOB}
    )
    status, reply = function.deliver(scheduler_headers(ROUTED))
    assert (status, reply["outcome"]) == (200, "completed")

    status, reply = function.deliver(scheduler_headers("sched-dedup-dev-unknown"))
    assert (status, reply["outcome"]) == (500, "failed")  # retryable: Scheduler retries
    [line] = [e for e in function.logs if e.get("job") == "sched-dedup-dev-unknown"]
    assert "is not in this function's routes (job_routes.json)" in line["detail"]
    assert executions(ledger) == [ROUTED]


def test_without_routes_the_default_runs_every_job(collection_name: str, ledger: Path) -> None:
    function = in_process_function(collection_name, default_job=TEST_JOB, job_routes={})
    status, reply = function.deliver(scheduler_headers("sched-dedup-dev-anything"))
    assert (status, reply["outcome"]) == (200, "completed")
    assert executions(ledger) == ["sched-dedup-dev-anything"]

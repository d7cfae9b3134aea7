"""Forced runs against the function as Cloud Run serves it (functions-framework processes,
concurrent HTTP deliveries, the real Firestore emulator), with a 2 s margin so that the
scheduled delivery of a forced run's time can be waited for. One served function for the
module: each test delivers a job of its own and reads the ledger's lines of that job."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests

from dedup.keys import RunKey, format_instant
from local_stack import FunctionServer
from local_stack.deliveries import LOCATION, PROJECT, function_env, scheduler_headers
from local_stack.processes import REPO_ROOT
from local_stack.steered_job import read_ledger
from tests.waiting import let_time_pass

pytestmark = pytest.mark.usefixtures("firestore_emulator")

JOB = "nightly-export"
MARGIN_SECONDS = 2.0
# How far ahead "Run now" is pressed: the next tick, a few seconds away, so the test can
# wait for the scheduled delivery of that same time. The forced burst must be over before
# the tick is within the margin: 8 s for it, on a loaded machine too.
AHEAD_SECONDS = 10.0


@pytest.fixture(scope="module")
def module_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("forced") / "ledger.jsonl"


@pytest.fixture(scope="module")
def server(firestore_emulator: object, module_ledger: Path) -> Iterator[FunctionServer]:
    env = function_env(
        f"runs_{uuid.uuid4().hex[:12]}", module_ledger,
        DEDUP_FORCED_RUN_MARGIN_SECONDS=f"{MARGIN_SECONDS:g}",
    )
    with FunctionServer(env, workers=2, threads=8, extra_pythonpath=[REPO_ROOT]) as served:
        yield served


@pytest.fixture
def job() -> str:
    """The test's own job: its runs and ledger lines are its own."""
    return f"{JOB}-{uuid.uuid4().hex[:6]}"


def executed(ledger: Path, job: str) -> list[dict[str, object]]:
    """The ledger's executions of `job`, in order."""
    return [e for e in read_ledger(str(ledger)) if e["job"] == job]


def burst(url: str, headers: dict[str, str], body: dict[str, object], n: int
          ) -> list[requests.Response]:
    """`n` concurrent deliveries of the same headers (Scheduler's retries, duplicates)."""
    data = json.dumps(body)
    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(
            lambda _: requests.post(url, headers=headers, data=data, timeout=30), range(n)))


def settle(url: str, headers: dict[str, str], replies: list[requests.Response]) -> None:
    """Every reply is a 200 or a 409 (another attempt running); one more delivery after the
    burst is the duplicate of the one execution."""
    statuses = Counter(r.status_code for r in replies)
    assert set(statuses) <= {200, 409} and statuses[200] >= 1, statuses
    after = requests.post(url, headers=headers, data="{}", timeout=30)
    assert (after.status_code, after.json()["outcome"]) == (200, "duplicate")


def test_a_forced_run_executes_once_and_its_scheduled_run_once_more_at_its_time(
    server: FunctionServer, module_ledger: Path, job: str
) -> None:
    tick = (datetime.now(UTC) + timedelta(seconds=AHEAD_SECONDS)).replace(microsecond=0)
    headers = scheduler_headers(job, format_instant(tick))
    forced_id = RunKey(PROJECT, LOCATION, job, tick, forced=True).run_id
    scheduled_id = RunKey(PROJECT, LOCATION, job, tick).run_id

    # "Run now": the delivery and its concurrent duplicates and retries, all well ahead of
    # the tick by the function's clock.
    forced = burst(server.url, headers, {"sleep": 0.3, "result": "forced"}, 8)
    settle(server.url, headers, forced)
    assert {(r.json()["run_id"], r.json()["trigger"]) for r in forced} == {(forced_id, "forced")}
    assert datetime.now(UTC) < tick - timedelta(seconds=MARGIN_SECONDS), "test host too slow"
    assert [e["run_id"] for e in executed(module_ledger, job)] == [forced_id]

    # The tick arrives: Scheduler delivers the scheduled run of that time (same headers),
    # with its duplicates. It was not consumed by the forced run: it executes, once.
    let_time_pass((tick - datetime.now(UTC)).total_seconds(),
                  "the tick arrives (a later delivery is a retry: scheduled all the same)")
    scheduled = burst(server.url, headers, {"sleep": 0.3, "result": "scheduled"}, 8)
    settle(server.url, headers, scheduled)
    assert {(r.json()["run_id"], r.json()["trigger"]) for r in scheduled} == {
        (scheduled_id, "scheduled")}
    assert {r.json()["result"]["echo"] for r in scheduled if r.status_code == 200} == {
        "scheduled"}

    executions = [(e["run_id"], e["forced"], e["schedule_time"])
                  for e in executed(module_ledger, job)]
    assert executions == [
        (forced_id, True, tick.isoformat()), (scheduled_id, False, tick.isoformat())]


@pytest.mark.parametrize("ahead_seconds", [-60.0, 0.0, MARGIN_SECONDS / 2])
def test_a_scheduled_delivery_on_time_is_never_a_forced_run(
    server: FunctionServer, module_ledger: Path, job: str, ahead_seconds: float
) -> None:
    """Late (a retry), on time, or early by less than the margin (clock skew)."""
    when = datetime.now(UTC) + timedelta(seconds=ahead_seconds)
    headers = scheduler_headers(job, format_instant(when))
    replies = burst(server.url, headers, {"result": "on time"}, 4)
    settle(server.url, headers, replies)
    scheduled_id = RunKey(PROJECT, LOCATION, job, when).run_id
    assert {(r.json()["run_id"], r.json()["trigger"]) for r in replies} == {
        (scheduled_id, "scheduled")}
    assert [(e["run_id"], e["forced"]) for e in executed(module_ledger, job)] == [
        (scheduled_id, False)]

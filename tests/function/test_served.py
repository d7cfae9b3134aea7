"""The function as Cloud Run serves it: functions-framework (gunicorn) processes, real
concurrent HTTP requests, the real Firestore emulator."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from google.cloud import firestore

from local_stack import FunctionServer
from local_stack.deliveries import PROJECT, function_env, scheduler_headers
from local_stack.processes import REPO_ROOT
from local_stack.steered_job import read_ledger
from tests.waiting import wait_until

pytestmark = pytest.mark.usefixtures("firestore_emulator")

# The served function imports the test job (local_stack.steered_job) from the repository root.
TESTS_IMPORTABLE = [REPO_ROOT]


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.jsonl"


@pytest.fixture
def server(collection_name: str, ledger: Path) -> Iterator[FunctionServer]:
    with FunctionServer(
        function_env(collection_name, ledger),
        workers=4,
        threads=16,
        extra_pythonpath=TESTS_IMPORTABLE,
    ) as served:
        yield served


def post(url: str, headers: dict[str, str], body: dict[str, object]) -> requests.Response:
    return requests.post(url, headers=headers, data=json.dumps(body), timeout=30)


def test_fifty_concurrent_deliveries_run_the_job_exactly_once(
    server: FunctionServer, ledger: Path
) -> None:
    headers = scheduler_headers()
    with ThreadPoolExecutor(max_workers=50) as pool:
        replies = list(pool.map(
            lambda _: post(server.url, headers, {"sleep": 0.5, "result": "once"}), range(50)))
    statuses = Counter(r.status_code for r in replies)
    assert set(statuses) <= {200, 409}, statuses
    assert statuses[200] >= 1
    executions = read_ledger(str(ledger))
    assert len(executions) == 1
    # Every 200 reports the one result; a retry after the burst is a duplicate.
    assert {r.json()["result"]["echo"] for r in replies if r.status_code == 200} == {"once"}
    after = post(server.url, headers, {})
    assert (after.status_code, after.json()["outcome"]) == (200, "duplicate")
    assert len(read_ledger(str(ledger))) == 1


def test_malformed_delivery_over_http_is_a_400(server: FunctionServer) -> None:
    reply = requests.get(server.url, timeout=10)
    assert reply.status_code == 400
    assert reply.json() == {"error": "missing X-CloudScheduler-JobName header"}


def lease_lapses_at(collection_name: str) -> datetime:
    """When the one claimed run's lease lapses by the store's clock: its record's version
    (update_time, which each renewal moves) plus its lease."""
    (lapse,) = [snapshot.update_time + timedelta(seconds=data["lease_seconds"])
                for snapshot in firestore.Client(project=PROJECT).collection(
                    collection_name).stream()
                if "lease_seconds" in (data := snapshot.to_dict() or {})]
    assert isinstance(lapse, datetime)
    return lapse


def test_crashed_attempt_is_taken_over_only_after_its_lease_expires(
    collection_name: str, ledger: Path
) -> None:
    lease = 6.0
    env = function_env(collection_name, ledger, DEDUP_LEASE_SECONDS=str(lease))
    headers = scheduler_headers()
    # The taker is up before the crash: its start-up (seconds on a loaded machine) must not
    # eat the lease, or its first request could already come after the lapse and the test
    # would never see the refusals it is about.
    with FunctionServer(env, workers=1, extra_pythonpath=TESTS_IMPORTABLE) as second:
        first = FunctionServer(env, workers=1, extra_pythonpath=TESTS_IMPORTABLE).start()
        try:
            with ThreadPoolExecutor(max_workers=1) as pool:
                pending = pool.submit(post, first.url, headers, {"sleep": 60})
                wait_until(lambda: len(read_ledger(str(ledger))) == 1,
                           what="the first instance's job to start")
                os.killpg(first.process.pid, signal.SIGKILL)  # type: ignore[union-attr]
                with pytest.raises(requests.ConnectionError):
                    pending.result()
            # Timed against the store's own record, not a mark taken after the fact: the
            # dead holder renewed nothing after the kill, so this is when its lease lapses.
            lapses_at = lease_lapses_at(collection_name)
            # (sent, answered, status) by the wall clock, which the emulator shares.
            answers: list[tuple[datetime, datetime, int]] = []
            replies: list[requests.Response] = []

            def retried() -> bool:  # Scheduler's retry, every 0.25 s until it is let in
                sent = datetime.now(UTC)
                replies.append(post(second.url, headers, {"result": "taken over"}))
                answers.append((sent, datetime.now(UTC), replies[-1].status_code))
                return replies[-1].status_code != 409

            wait_until(retried, timeout=lease + 60, poll=0.25,
                       what="the taker to take the lapsed claim over")
            reply = replies[-1]
        finally:
            first.stop()
    assert answers[0][0] < lapses_at, "the host was too slow to ask inside the lease"
    _, answered, status = answers[-1]
    assert status == 200 and reply.json()["result"]["echo"] == "taken over"
    assert answered >= lapses_at
    # Every request the taker had its answer to while the lease ran was refused. (Judged by
    # the answer, not the send: one sent just before the lapse may be judged after it.)
    assert all(s == 409 for _, answered, s in answers if answered < lapses_at)
    assert len(answers) > 1 and all(s == 409 for _, _, s in answers[:-1])
    assert [e["attempt"] for e in read_ledger(str(ledger))] == [1, 2]

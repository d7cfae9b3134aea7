"""The proxy as Cloud Run serves it: functions-framework with several worker processes,
real concurrent HTTP deliveries, the Firestore emulator, the fake Google APIs, and
Application Default Credentials (a service-account key whose token endpoint is the fake)."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from google.cloud import firestore

from local_stack import FunctionServer, LocalStackError
from local_stack.deliveries import PROJECT, scheduler_headers
from local_stack.tables import write_job_tables
from tests.function.test_body_limits import post_declaring
from tests.proxy.fake_apis import RUN_JOB, WORKFLOW, Behaviour, FakeGoogleApis, StartRequest
from tests.proxy.support import (
    JOBS,
    KINDS,
    proxy_env,
    run_id,
    service_account_file,
    started_name,
    token_for,
)

PROXY_TIMEOUT = 2.0


@pytest.fixture(scope="module")
def apis() -> Iterator[FakeGoogleApis]:
    with FakeGoogleApis() as fake:
        yield fake


@pytest.fixture(scope="module")
def collection() -> str:
    return f"proxy_served_{int(time.time() * 1000)}"


@pytest.fixture(scope="module")
def server(
    firestore_emulator: object,
    apis: FakeGoogleApis,
    collection: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[FunctionServer]:
    key = service_account_file(tmp_path_factory.mktemp("adc"), apis.token_uri)
    env = proxy_env(collection, apis.url, key, DEDUP_PROXY_TIMEOUT_SECONDS=str(PROXY_TIMEOUT))
    with FunctionServer(env, workers=4, threads=8, target="proxy_scheduled_job") as served:
        yield served


def post(server: FunctionServer, job: str, schedule: str, timeout: float = 30) -> requests.Response:
    return requests.post(
        server.url, headers=scheduler_headers(job, schedule), data=b'{"report": "daily"}',
        timeout=timeout,
    )


def for_run(apis: FakeGoogleApis, job: str, schedule: str) -> list[StartRequest]:
    token = token_for(job, schedule)
    return [r for r in apis.received() if r.token == token]


def test_concurrent_deliveries_start_exactly_one_execution_per_api(
    server: FunctionServer, apis: FakeGoogleApis
) -> None:
    schedule = "2026-10-16T01:00:00Z"
    apis.script(*[Behaviour(delay=0.5)] * 3)  # slow starts: the burst overlaps them
    deliveries = [JOBS[KINDS[i % 3]] for i in range(60)]
    with ThreadPoolExecutor(max_workers=30) as pool:
        replies = list(pool.map(lambda job: (job, post(server, job, schedule)), deliveries))
    statuses = Counter(reply.status_code for _, reply in replies)
    assert set(statuses) <= {200, 409}, statuses
    for kind in KINDS:
        job = JOBS[kind]
        [start] = for_run(apis, job, schedule)
        assert start.kind == kind
        assert start.headers["authorization"].startswith("Bearer fake-token-")  # ADC
        names = {started_name(r.json()["result"]) for j, r in replies
                 if j == job and r.status_code == 200}
        assert names == {start.execution}
        after = post(server, job, schedule)  # a later retry: replayed, nothing started
        assert (after.status_code, after.json()["outcome"]) == (200, "duplicate")
        assert started_name(after.json()["result"]) == start.execution
        assert len(for_run(apis, job, schedule)) == 1
    assert apis.token_requests >= 1 and apis.bad_paths == []


def test_a_lost_proxy_reply_then_a_retry_starts_nothing_new(
    server: FunctionServer, apis: FakeGoogleApis
) -> None:
    schedule = "2026-10-16T02:00:00Z"
    job = JOBS[WORKFLOW]
    apis.script(Behaviour(delay=1.5))
    with pytest.raises(requests.ReadTimeout):  # Scheduler gives up: the reply is lost
        post(server, job, schedule, timeout=0.5)
    answers = []
    while True:  # Scheduler's retries
        reply = post(server, job, schedule)
        answers.append(reply.status_code)
        if reply.status_code != 409:
            break
        assert len(answers) < 100
        time.sleep(0.1)
    assert reply.status_code == 200 and reply.json()["outcome"] in ("duplicate", "completed")
    [start] = for_run(apis, job, schedule)
    assert reply.json()["result"]["execution"] == start.execution
    assert set(answers[:-1]) <= {409}


@pytest.mark.parametrize(
    ("failure", "schedule"),
    [
        pytest.param(Behaviour(status=503), "2026-10-16T03:01:00Z", id="503"),
        pytest.param(Behaviour(status=429), "2026-10-16T03:02:00Z", id="429"),
        pytest.param(Behaviour(status=503, delay=PROXY_TIMEOUT + 1), "2026-10-16T03:03:00Z",
                     id="timeout"),
    ],
)
def test_a_retryable_downstream_failure_leads_to_one_successful_start_after_the_retry(
    failure: Behaviour, schedule: str, server: FunctionServer, apis: FakeGoogleApis
) -> None:
    job = JOBS[RUN_JOB]
    apis.script(failure)
    first = post(server, job, schedule)
    assert (first.status_code, first.json()["outcome"]) == (500, "failed")
    retry = post(server, job, schedule)
    assert (retry.status_code, retry.json()["outcome"]) == (200, "completed")
    seen = for_run(apis, job, schedule)
    assert len(seen) == 2 and all(r.token == token_for(job, schedule) for r in seen)
    # Nothing started on the failed attempt: the retry's start is the only execution.
    assert [r.execution for r in seen if r.execution] == [retry.json()["result"]["execution"]]
    again = post(server, job, schedule)
    assert (again.status_code, again.json()["outcome"]) == (200, "duplicate")
    assert len(for_run(apis, job, schedule)) == 2


def test_a_non_retryable_downstream_failure_keeps_the_record_and_scheduler_stops(
    server: FunctionServer, apis: FakeGoogleApis, collection: str
) -> None:
    schedule = "2026-10-16T04:00:00Z"
    job = JOBS[WORKFLOW]
    apis.script(Behaviour(status=403))
    first = post(server, job, schedule)
    assert (first.status_code, first.json()["outcome"]) == (200, "completed")
    error = first.json()["result"]["error"]
    assert error == {"status": 403, "reason": "HTTP 403 PERMISSION_DENIED: scripted failure",
                     "retryable": False}
    snapshot: Any = (
        firestore.Client(project=PROJECT).collection(collection)
        .document(run_id(job, schedule)).get()
    )
    assert snapshot.to_dict()["status"] == "completed"
    for _ in range(3):
        again = post(server, job, schedule)
        assert (again.status_code, again.json()["outcome"]) == (200, "duplicate")
        assert again.json()["result"]["error"] == error
    assert len(for_run(apis, job, schedule)) == 1
    lines = [json.loads(line) for line in server.log_text.splitlines() if line.startswith("{")]
    [rejected] = [e for e in lines if e.get("component") == "proxy"
                  and e.get("run_id") == run_id(job, schedule)]
    assert rejected["severity"] == "ERROR" and rejected["downstream_status"] == 403
    assert "rejected the start request: HTTP 403 PERMISSION_DENIED" in rejected["message"]


def test_served_proxy_refuses_to_start_without_a_target(
    firestore_emulator: object, tmp_path: Path, apis: FakeGoogleApis
) -> None:
    env = proxy_env("unused", apis.url, service_account_file(tmp_path, apis.token_uri))
    env.update(write_job_tables(tmp_path / "no-routes"))  # no proxy_routes.json, no target
    with pytest.raises(LocalStackError) as raised:
        FunctionServer(env, workers=1, target="proxy_scheduled_job").start(timeout_seconds=20)
    assert "the proxy has no target" in str(raised.value)


def test_a_huge_body_is_a_413_before_anything_is_claimed_or_started(
    server: FunctionServer, apis: FakeGoogleApis, collection: str
) -> None:
    """The body cap (DEDUP_MAX_BODY_BYTES, default 1 MiB) guards the proxy's entry point."""
    job, schedule = JOBS[WORKFLOW], "2026-10-16T05:00:00Z"
    status, body = post_declaring(
        server.url, scheduler_headers(job, schedule), 32 * 1024 * 1024, b"[{}," * 1000
    )
    assert status == 413 and "over 1048576 bytes" in body
    assert for_run(apis, job, schedule) == []
    snapshot: Any = (
        firestore.Client(project=PROJECT).collection(collection)
        .document(run_id(job, schedule)).get()
    )
    assert not snapshot.exists

"""The proxy as Cloud Run serves it: functions-framework with several worker processes,
real concurrent HTTP deliveries, the Firestore emulator, the fake Google APIs, and
Application Default Credentials (a service-account key whose token endpoint is the fake)."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from google.cloud import firestore

from dedup.keys import RunKey
from dedup.proxy.tokens import mint_token
from dedup.store import RunStatus
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.due import WatchedJob
from dedup.watchdog.reruns import DONE as RERUN_DONE
from dedup.watchdog.reruns import FAILED as RERUN_FAILED
from dedup.watchdog.reruns import FirestoreRerunQueue, RerunRequest, reruns_collection
from local_stack import FunctionServer, LocalStackError
from local_stack.deliveries import LOCATION, PROJECT, scheduler_headers
from local_stack.fake_google_apis import (
    GOOGLE_STATUS,
    RUN_JOB,
    WORKFLOW,
    Behaviour,
    FakeGoogleApis,
    StartRequest,
)
from local_stack.tables import write_job_tables
from tests.function.test_body_limits import post_declaring
from tests.function.test_catch_up import JOB_HEADERS, Watch, z
from tests.proxy.support import (
    JOBS,
    KINDS,
    TOKEN_SECRET,
    proxy_env,
    run_id,
    service_account_file,
    started_name,
    token_for,
)
from tests.waiting import wait_until

# Well above the fake APIs' scripted delays (1.5 s at most, bar the timeout case): a
# start that takes 1.5 s plus a loaded machine's latency must not time out.
PROXY_TIMEOUT = 4.0


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
    replies: list[requests.Response] = []

    def answered() -> bool:  # Scheduler's retries: 409 while the first attempt runs
        replies.append(post(server, job, schedule))
        answers.append(replies[-1].status_code)
        return replies[-1].status_code != 409

    wait_until(answered, what="an answer other than 409", poll=0.1)
    reply = replies[-1]
    assert reply.status_code == 200 and reply.json()["outcome"] in ("duplicate", "completed")
    [start] = for_run(apis, job, schedule)
    assert reply.json()["result"]["execution"] == start.execution
    assert set(answers[:-1]) <= {409}


@pytest.mark.parametrize(
    ("failure", "schedule"),
    [
        pytest.param(Behaviour(status=503), "2026-10-16T03:01:00Z", id="503"),
        pytest.param(Behaviour(status=429), "2026-10-16T03:02:00Z", id="429"),
        pytest.param(Behaviour(status=503, delay=PROXY_TIMEOUT + 2), "2026-10-16T03:03:00Z",
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


# Ten minutes apart: each one is after the runs the watchdog's cursor of its job has
# already judged (two cases per job).
REFUSED_RUNS = [
    pytest.param(kind, status, 10 * n, id=f"{kind}-{status}")
    for n, (kind, status) in enumerate(
        (kind, status) for kind in KINDS for status in (403, 404)
    )
]


@pytest.mark.parametrize(("kind", "status", "minute"), REFUSED_RUNS)
def test_a_refused_start_is_reported_failed_and_a_refused_rerun_ends_failed(
    kind: str, status: int, minute: int,
    server: FunctionServer, apis: FakeGoogleApis, collection: str,
) -> None:
    """Scheduler gets 200 and stops; the record is failed and permanent, so the watchdog
    reports the run `failed` (its problem alert), later deliveries start nothing, a
    re-run refused again ends `failed` (not done), and once the cause is fixed the next
    re-run starts the downstream once."""
    job = JOBS[kind]
    t = datetime(2026, 10, 16, 6, minute, tzinfo=UTC)
    schedule = z(t)
    reason = f"HTTP {status} {GOOGLE_STATUS[status]}: scripted failure"
    error_line = f"{kind} refused the start request: {reason}"
    apis.script(Behaviour(status=status))
    first = post(server, job, schedule)
    assert (first.status_code, first.json()["outcome"]) == (200, "failed_permanent")
    assert first.json()["result"]["error"] == {
        "status": status, "reason": reason, "retryable": False}
    runs = FirestoreRunStore(firestore.Client(project=PROJECT), collection, 5)
    stored = runs.get(run_id(job, schedule))
    assert stored is not None
    assert (stored.record.status, stored.record.permanent, stored.record.error) == (
        RunStatus.FAILED, True, error_line)
    for _ in range(3):  # Scheduler's late retries and duplicates, on any worker
        again = post(server, job, schedule)
        assert (again.status_code, again.json()["outcome"]) == (200, "failed_permanent")
        assert again.json()["error"] == error_line
    assert len(for_run(apis, job, schedule)) == 1
    lines = [json.loads(line) for line in server.log_text.splitlines() if line.startswith("{")]
    [rejected] = [e for e in lines if e.get("component") == "proxy"
                  and e.get("run_id") == run_id(job, schedule)]
    assert rejected["severity"] == "ERROR" and rejected["downstream_status"] == status
    assert f"rejected the start request: {reason}" in rejected["message"]

    watched = WatchedJob(
        job, f"{minute} 6 * * *", "Etc/UTC", attempt_deadline_seconds=60,
        retry_window_seconds=0, headers=JOB_HEADERS, reruns=True,
    )
    watch = Watch(collection, [watched], server.url, now=t + timedelta(minutes=5))
    body = watch.tick()
    assert [(p["kind"], p["job"], p["schedule_time"], p["error"]) for p in body["problems"]] == [
        ("failed", job, schedule, error_line)]
    [line] = [e for e in watch.logs if e.get("kind") == "failed"]
    assert line["severity"] == "ERROR"  # counted by the watchdog-problem alert's metric

    # `make rerun` while the grant is still missing: refused again, the request ends failed.
    queue = FirestoreRerunQueue(runs, reruns_collection(collection))
    queue.create(rerun_request(job, t, 1))
    apis.script(Behaviour(status=status))
    outcomes = [r["status"] for _ in range(2) for r in watch.tick()["reruns"]]
    assert outcomes == ["failed_permanent", "failed"]
    assert watch.tick()["reruns"] == []
    [asked] = [r for r in queue.for_job(job) if r.generation == 1 and r.schedule_time == t]
    assert (asked.status, asked.outcome) == (RERUN_FAILED, error_line)
    assert len(starts_of(apis, job, t, 1)) == 1
    rerun_record = runs.get(asked.request_id)
    assert rerun_record is not None
    assert (rerun_record.record.status, rerun_record.record.permanent) == (RunStatus.FAILED, True)

    # The grant fixed: the next generation starts the downstream, once.
    queue.create(rerun_request(job, t, 2))
    assert [r["status"] for r in watch.tick()["reruns"]] == ["completed"]
    [fixed] = [r for r in queue.for_job(job) if r.generation == 2 and r.schedule_time == t]
    assert fixed.status == RERUN_DONE
    [started] = starts_of(apis, job, t, 2)
    assert started.execution is not None


def test_a_caught_up_run_whose_start_is_refused_is_reported_failed_once_not_missed(
    server: FunctionServer, apis: FakeGoogleApis, collection: str,
) -> None:
    """The watchdog's catch-up is a later delivery like any: refused, the run is `failed`
    (permanent), reported once as failed, and the next ticks deliver and start nothing."""
    job = JOBS[RUN_JOB]
    earlier, t = datetime(2026, 10, 16, 7, 0, tzinfo=UTC), datetime(2026, 10, 16, 7, 30, tzinfo=UTC)
    assert post(server, job, z(earlier)).json()["outcome"] == "completed"  # its first run
    watched = WatchedJob(
        job, "0,30 7 * * *", "Etc/UTC", attempt_deadline_seconds=60, retry_window_seconds=0,
        catch_up=True, catch_up_within_seconds=1800, headers=JOB_HEADERS,
    )
    watch = Watch(collection, [watched], server.url, now=t + timedelta(minutes=5))
    apis.script(Behaviour(status=403))
    body = watch.tick()
    assert [(p["kind"], p["schedule_time"]) for p in body["problems"]] == [("failed", z(t))]
    assert "refused the start request: HTTP 403" in body["problems"][0]["error"]
    for minutes in (6, 15):
        watch.now = t + timedelta(minutes=minutes)
        assert watch.tick()["problems"] == []
    assert len(for_run(apis, job, z(t))) == 1
    stored = FirestoreRunStore(firestore.Client(project=PROJECT), collection, 5).get(
        run_id(job, z(t)))
    assert stored is not None
    assert (stored.record.status, stored.record.permanent) == (RunStatus.FAILED, True)


def rerun_request(job: str, t: datetime, generation: int) -> RerunRequest:
    """What `make rerun` writes (operator_tools/rerun.py) for one generation of a run."""
    return RerunRequest(
        project=PROJECT, location=LOCATION, job=job, schedule_time=t, generation=generation,
        requested_by="alice@example.com", reason="grant fixed", requested_at=t,
        expire_at=t + timedelta(days=3650),
    )


def starts_of(apis: FakeGoogleApis, job: str, t: datetime, generation: int) -> list[StartRequest]:
    token = mint_token(
        TOKEN_SECRET.encode(), RunKey(PROJECT, LOCATION, job, t, generation=generation).run_id
    )
    return [r for r in apis.received() if r.token == token]


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

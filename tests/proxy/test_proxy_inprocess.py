"""The proxy in this process against the Firestore emulator and the fake Google APIs:
exact requests, Firestore RPC counts, failure handling, concurrent instances."""

from __future__ import annotations

import base64
import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from local_stack import free_port
from local_stack.deliveries import INVOKER, PROJECT, InProcessFunction, bearer, scheduler_headers
from local_stack.fake_google_apis import (
    BUILD_TRIGGER,
    GOOGLE_STATUS,
    RUN_JOB,
    WORKFLOW,
    Behaviour,
    FakeGoogleApis,
)
from tests.proxy.support import (
    BUILD_TOPIC,
    JOBS,
    KINDS,
    SCHEDULE,
    STARTED_RESOURCES,
    in_process_proxy,
    run_id,
    started_name,
    token_for,
)

pytestmark = pytest.mark.usefixtures("firestore_emulator")


@pytest.fixture
def proxy(
    firestore_emulator: object, collection_name: str, fake: FakeGoogleApis
) -> InProcessFunction:
    return in_process_proxy(collection_name, fake.url, timeout_seconds=1.0)


def record(proxy: InProcessFunction, collection: str, job: str) -> dict[str, Any] | None:
    snapshot: Any = proxy.client.collection(collection).document(run_id(job)).get()
    return snapshot.to_dict() if snapshot.exists else None


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_starts_one_execution_with_the_token_in_two_rpcs_and_replays_its_name(
    kind: str, proxy: InProcessFunction, fake: FakeGoogleApis, collection_name: str
) -> None:
    job = JOBS[kind]
    headers = scheduler_headers(job, SCHEDULE)
    status, body = proxy.deliver(headers, b'{"report": "daily"}')
    assert (status, body["outcome"]) == (200, "completed")
    [start] = fake.received()
    assert (start.kind, start.resource, start.token) == (kind, STARTED_RESOURCES[kind],
                                                         token_for(job))
    assert started_name(body["result"]) == start.execution
    assert body["result"]["token"] == token_for(job)
    assert proxy.rpcs.counts == Counter({"commit": 2})  # create, then complete
    stored = record(proxy, collection_name, job)
    assert stored is not None and stored["status"] == "completed"
    assert started_name(json.loads(stored["result_json"])) == start.execution

    proxy.rpcs.reset()
    status, again = proxy.deliver(headers)  # this instance remembers: no RPC
    assert (status, again["outcome"], again["result"]) == (200, "duplicate", body["result"])
    assert proxy.rpcs.total == 0
    other = in_process_proxy(collection_name, fake.url)  # another instance: reads the record
    status, replay = other.deliver(headers)
    assert (status, replay["outcome"], replay["result"]) == (200, "duplicate", body["result"])
    assert other.rpcs.counts == Counter({"commit": 1, "batch_get_documents": 1})
    assert len(fake.received()) == 1


def test_start_request_bodies_on_the_wire(proxy: InProcessFunction, fake: FakeGoogleApis) -> None:
    for kind in KINDS:
        proxy.deliver(scheduler_headers(JOBS[kind], SCHEDULE), b'{"report": "daily"}')
    by_kind = {r.kind: r for r in fake.received()}
    argument = json.loads(by_kind[WORKFLOW].body["argument"])
    assert argument == {"dedup_token": token_for(JOBS[WORKFLOW]), "job": JOBS[WORKFLOW],
                        "schedule_time": "2026-10-16T12:00:00.000000Z",
                        "payload": {"report": "daily"}}
    assert by_kind[RUN_JOB].body == {"overrides": {"containerOverrides": [{"env": [
        {"name": "DEDUP_TOKEN", "value": token_for(JOBS[RUN_JOB])},
        {"name": "DEDUP_SCHEDULE_TIME", "value": "2026-10-16T12:00:00.000000Z"}]}]}}
    [message] = by_kind[BUILD_TRIGGER].body["messages"]
    assert json.loads(base64.b64decode(message["data"])) == {
        "_DEDUP_TOKEN": token_for(JOBS[BUILD_TRIGGER]), "job": JOBS[BUILD_TRIGGER],
        "schedule_time": "2026-10-16T12:00:00.000000Z"}
    assert by_kind[BUILD_TRIGGER].resource == BUILD_TOPIC
    assert all(r.headers["content-type"] == "application/json" for r in fake.received())


def test_concurrent_deliveries_to_several_instances_start_one_execution_per_api(
    collection_name: str, fake: FakeGoogleApis
) -> None:
    instances = [in_process_proxy(collection_name, fake.url) for _ in range(4)]
    fake.script(*[Behaviour(delay=0.3)] * 3)  # slow starts: duplicates arrive meanwhile
    deliveries = [(instances[i % 4], JOBS[KINDS[i % 3]]) for i in range(48)]
    with ThreadPoolExecutor(max_workers=24) as pool:
        replies = list(pool.map(
            lambda d: (d[1], *d[0].deliver(scheduler_headers(d[1], SCHEDULE))), deliveries))
    assert {status for _, status, _ in replies} <= {200, 409}
    for kind in KINDS:
        [start] = fake.received(kind)
        assert start.token == token_for(JOBS[kind])
        names = {
            started_name(b["result"]) for job, s, b in replies if job == JOBS[kind] and s == 200
        }
        assert names == {start.execution}


RETRYABLE = [
    pytest.param(Behaviour(status=503), 1, id="503"),
    pytest.param(Behaviour(status=500), 1, id="500"),
    pytest.param(Behaviour(status=429), 1, id="429"),
    pytest.param(Behaviour(status=408), 1, id="408"),
    pytest.param(Behaviour(status=409), 1, id="409-aborted"),
    # The API started the execution but its answer never came back within the timeout.
    pytest.param(Behaviour(delay=2.0), 2, id="timeout-after-start"),
    pytest.param(Behaviour(drop=True, starts=True), 2, id="dropped-after-start"),
    pytest.param(Behaviour(drop=True, starts=False), 1, id="dropped-before-start"),
]


@pytest.mark.parametrize(("failure", "executions"), RETRYABLE)
def test_retryable_failure_releases_the_claim_and_the_retry_starts_once(
    failure: Behaviour, executions: int,
    proxy: InProcessFunction, fake: FakeGoogleApis, collection_name: str,
) -> None:
    job = JOBS[WORKFLOW]
    headers = scheduler_headers(job, SCHEDULE)
    fake.script(failure)
    status, body = proxy.deliver(headers)
    assert (status, body["outcome"]) == (500, "failed")
    kept = record(proxy, collection_name, job)  # kept as failed: the retry runs at once
    assert kept is not None and kept["status"] == "failed" and kept["attempts"] == 1
    assert kept["error"] and kept["failed_at"] is not None
    [warning] = [e for e in proxy.logs if e.get("component") == "proxy"]
    assert warning["severity"] == "WARNING" and warning["retryable"] is True
    assert "Scheduler retries" in warning["message"]

    status, body = proxy.deliver(headers)
    assert (status, body["outcome"]) == (200, "completed")
    requests_seen = fake.received()
    assert len(requests_seen) == 2
    assert {r.token for r in requests_seen} == {token_for(job)}  # the retry carries the token
    assert body["result"]["execution"] == requests_seen[1].execution is not None
    # An execution whose answer was lost also started: same token, so the downstream
    # helper (tests/proxy/test_idempotency.py, test_example.py) makes it a no-op.
    assert len(fake.started()) == executions


REFUSALS = [
    pytest.param(kind, status, id=f"{kind}-{status}") for kind in KINDS for status in (403, 404)
]


@pytest.mark.parametrize(("kind", "status"), REFUSALS)
def test_a_refused_start_is_a_permanent_failure_answered_200_and_never_started_again(
    kind: str, status: int,
    proxy: InProcessFunction, fake: FakeGoogleApis, collection_name: str,
) -> None:
    """A 403/404 cannot succeed on a retry: 200 so Scheduler stops, but the record says
    `failed` (permanent, with the status and reason), so the run is not counted as done;
    every later delivery (a late retry, a duplicate, another instance) replays the failure
    and starts nothing."""
    job = JOBS[kind]
    headers = scheduler_headers(job, SCHEDULE)
    fake.script(Behaviour(status=status))
    reply_status, body = proxy.deliver(headers)
    reason = f"HTTP {status} {GOOGLE_STATUS[status]}: scripted failure"
    assert (reply_status, body["outcome"]) == (200, "failed_permanent")
    assert body["error"] == f"{kind} refused the start request: {reason}"
    error = body["result"]["error"]
    assert error == {"status": status, "reason": reason, "retryable": False}
    stored = record(proxy, collection_name, job)
    assert stored is not None
    assert (stored["status"], stored["permanent"], stored["attempts"]) == ("failed", True, 1)
    assert stored["error"] == body["error"] and "\n" not in stored["error"]
    assert stored["failed_at"] is not None and stored["finished_at"] is None
    assert json.loads(stored["result_json"])["error"] == error
    [line] = [e for e in proxy.logs if e.get("component") == "proxy"]
    assert line["severity"] == "ERROR" and line["downstream_status"] == status
    assert "rejected the start request" in line["message"]
    assert "recorded failed (permanent)" in line["message"]
    [delivery] = [e for e in proxy.logs if e.get("outcome") == "failed_permanent"]
    assert (delivery["severity"], delivery["status"]) == ("ERROR", 200)

    # The same instance and another one: replayed from the record, nothing started.
    for instance in (proxy, in_process_proxy(collection_name, fake.url)):
        again = instance.deliver(headers)
        assert again == (200, {
            "outcome": "failed_permanent", "run_id": run_id(job), "trigger": "scheduled",
            "result": body["result"], "error": body["error"],
        })
    assert len(fake.received()) == 1
    kept = record(proxy, collection_name, job)
    assert kept is not None and (kept["status"], kept["attempts"]) == ("failed", 1)


@pytest.mark.parametrize(("status", "google_status"), [(400, None), (409, "ALREADY_EXISTS")])
def test_every_other_final_4xx_is_a_permanent_failure_too(
    status: int, google_status: str | None,
    proxy: InProcessFunction, fake: FakeGoogleApis, collection_name: str,
) -> None:
    # A 409 ALREADY_EXISTS is final, unlike 409 ABORTED (a concurrency conflict).
    job = JOBS[RUN_JOB]
    fake.script(Behaviour(status=status, google_status=google_status))
    reply_status, body = proxy.deliver(scheduler_headers(job, SCHEDULE))
    assert (reply_status, body["outcome"]) == (200, "failed_permanent")
    assert body["result"]["error"]["status"] == status
    stored = record(proxy, collection_name, job)
    assert stored is not None and (stored["status"], stored["permanent"]) == ("failed", True)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("status", [429, 500, 503])
def test_a_transient_refusal_stays_retryable_not_permanent(
    kind: str, status: int,
    proxy: InProcessFunction, fake: FakeGoogleApis, collection_name: str,
) -> None:
    job = JOBS[kind]
    headers = scheduler_headers(job, SCHEDULE)
    fake.script(Behaviour(status=status))
    reply_status, body = proxy.deliver(headers)
    assert (reply_status, body["outcome"]) == (500, "failed")
    kept = record(proxy, collection_name, job)
    assert kept is not None and (kept["status"], kept["permanent"]) == ("failed", False)
    reply_status, body = proxy.deliver(headers)  # the retry takes it over and starts it
    assert (reply_status, body["outcome"]) == (200, "completed")
    assert len(fake.received()) == 2 and len(fake.started()) == 1
    done = record(proxy, collection_name, job)
    assert done is not None and (done["status"], done["permanent"]) == ("completed", False)


def test_unreachable_api_is_retryable(collection_name: str) -> None:
    proxy = in_process_proxy(collection_name, f"http://127.0.0.1:{free_port()}")
    status, body = proxy.deliver(scheduler_headers(JOBS[BUILD_TRIGGER], SCHEDULE))
    assert (status, body["outcome"]) == (500, "failed")
    [line] = [e for e in proxy.logs if e.get("component") == "proxy"]
    assert "cannot reach build_trigger API" in line["reason"]
    kept = record(proxy, collection_name, JOBS[BUILD_TRIGGER])
    assert kept is not None and kept["status"] == "failed"
    assert "cannot reach build_trigger API" in kept["error"]


def test_a_job_without_a_route_is_a_permanent_failure_and_nothing_starts(
    proxy: InProcessFunction, fake: FakeGoogleApis, collection_name: str
) -> None:
    status, body = proxy.deliver(scheduler_headers("unrouted-job", SCHEDULE))
    assert (status, body["outcome"]) == (200, "failed_permanent")
    assert "no downstream target for job 'unrouted-job'" in body["result"]["error"]["reason"]
    assert fake.received() == []
    stored = record(proxy, collection_name, "unrouted-job")
    assert stored is not None and (stored["status"], stored["permanent"]) == ("failed", True)


@pytest.mark.parametrize("kind", KINDS)
def test_a_body_nested_too_deep_for_json_is_a_400_that_claims_and_starts_nothing(
    kind: str, proxy: InProcessFunction, fake: FakeGoogleApis, collection_name: str
) -> None:
    """json.loads raises RecursionError (not ValueError) on deep nesting: refused before
    the claim, so nothing is recorded, nothing starts and the reply says what to fix."""
    job = JOBS[kind]
    deep = b"[" * 100_000 + b"]" * 100_000
    status, body = proxy.deliver(scheduler_headers(job, SCHEDULE), deep)
    assert status == 400
    assert "nested too deeply" in body["error"] and "\n" not in body["error"]
    assert fake.received() == []
    assert record(proxy, collection_name, job) is None
    [line] = [e for e in proxy.logs if e.get("outcome") == "rejected"]
    assert line["severity"] == "WARNING" and "nested too deeply" in line["message"]
    # A body that is not JSON at all is still passed on as text.
    status, body = proxy.deliver(scheduler_headers(job, SCHEDULE), b"[[[ not json")
    assert (status, body["outcome"]) == (200, "completed")


def test_the_proxy_serves_only_its_allowed_callers(
    firestore_emulator: object, collection_name: str, fake: FakeGoogleApis
) -> None:
    """proxy_scheduled_job goes through the same handler: a refused caller starts nothing
    and writes nothing; the allowed account then starts the run's one execution."""
    proxy = in_process_proxy(collection_name, fake.url, allowed_callers=frozenset({INVOKER}))
    job = JOBS[WORKFLOW]
    other = f"ci-deployer@{PROJECT}.iam.gserviceaccount.com"
    for authorization in (None, "Bearer test-token", bearer(None), bearer(other)):
        status, body = proxy.deliver(scheduler_headers(job, SCHEDULE, authorization=authorization))
        assert status == 403, body
        assert set(body) == {"error"}
    assert fake.received() == []
    assert record(proxy, collection_name, job) is None
    assert [line["caller"] for line in proxy.logs] == [
        "no token", "not a JWT", "no email claim", other
    ]
    status, body = proxy.deliver(scheduler_headers(job, SCHEDULE, authorization=bearer(INVOKER)))
    assert (status, body["outcome"]) == (200, "completed")
    assert len(fake.received()) == 1

"""The watchdog's deliveries through Cloud Tasks, end to end against a local fake of its API.

Cloud Run admits a Cloud Tasks HTTP task from the same project on an internal-only
function's run.app URL, not a POST from another function without VPC egress: the deployed
watchdog hands each catch-up and re-run to a queue (dedup/watchdog/cloud_tasks.py). Here the fake
(tests/function/fake_cloud_tasks.py, checked with Google's own CloudTasksClient) dispatches
the tasks to the served function with OIDC tokens of the watchdog's account, against the
real Firestore emulator; the watchdog runs in-process on a clock the test sets.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import requests
from google.api_core import exceptions
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import tasks_v2

from dedup.settings import SettingsError
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.cloud_tasks import CloudTasksDeliverer, TaskQueue, task_of
from dedup.watchdog.deliveries import CAUGHT_UP, QUEUE_MAX_ATTEMPTS, QUEUE_MAX_BACKOFF_SECONDS
from dedup.watchdog.delivery import QUEUED, RunDelivery
from dedup.watchdog.rerun_deliveries import RERUN_DELIVERY_WINDOW_SECONDS
from dedup.watchdog.reruns import DONE, FirestoreRerunQueue, RerunRequest, reruns_collection
from local_stack import FunctionServer, free_port
from local_stack.deliveries import INVOKER, LOCATION, PROJECT, bearer, function_env
from local_stack.processes import REPO_ROOT
from scheduler_emulator.oidc import forwarded_token, oidc_claims
from tests.function.fake_cloud_tasks import FakeCloudTasks, QueueRetry, decoded_body
from tests.function.test_catch_up import (
    JOB_HEADERS,
    SLOW_BODY,
    Served,
    Watch,
    minutely,
    recent_minutes,
    served_watchdog_setup,
    z,
)
from tests.function.test_watchdog import Runs

pytestmark = pytest.mark.usefixtures("firestore_emulator")

QUEUE = f"projects/{PROJECT}/locations/{LOCATION}/queues/scheduler-dedup-deliveries"
WATCHDOG = f"scheduler-dedup-watchdog@{PROJECT}.iam.gserviceaccount.com"
TASK_KEY = "test-task-key-0123456789abcdef0123456789"  # DEDUP_WATCH_TASK_KEY


def mint(account: str, audience: str) -> str:
    """The token Cloud Tasks would attach (oidcToken), as the local stack forwards them."""
    return forwarded_token(oidc_claims(account, audience))


@pytest.fixture(scope="module")
def served(firestore_emulator: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The dedup function, serving the invoker and the watchdog's account only."""
    collection = f"runs_{uuid.uuid4().hex[:12]}"
    ledger = tmp_path_factory.mktemp("cloud-tasks") / "ledger.jsonl"
    env = function_env(collection, ledger, DEDUP_ALLOWED_CALLERS=f"{INVOKER},{WATCHDOG}")
    with FunctionServer(env, workers=2, threads=8, extra_pythonpath=[REPO_ROOT]) as server:
        yield Served(server, collection, ledger)


@pytest.fixture
def fake() -> Iterator[FakeCloudTasks]:
    with FakeCloudTasks(QUEUE, mint, QueueRetry(max_attempts=3)) as tasks:
        yield tasks


def queued_deliverer(fake: FakeCloudTasks, **kwargs: Any) -> CloudTasksDeliverer:
    """The watchdog's deliverer on the fake's queue (no credentials)."""
    return CloudTasksDeliverer(
        TaskQueue(QUEUE, WATCHDOG, TASK_KEY, fake.url), requests.Session(), **kwargs)


def queued_watch(served: Served, fake: FakeCloudTasks, job: Any, now: datetime) -> Watch:
    deliverer = queued_deliverer(fake)
    return Watch(served.collection, [job], served.server.url, now=now, deliverer=deliverer)


# -- the fake speaks the API, as Google's own client reads it -------------------------------
def test_googles_client_creates_a_task_and_meets_already_exists_on_the_same_name(
    fake: FakeCloudTasks,
) -> None:
    client = tasks_v2.CloudTasksClient(
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        transport="rest",
        client_options=ClientOptions(api_endpoint=fake.url),
    )
    nobody = f"http://127.0.0.1:{free_port()}/"
    task = tasks_v2.Task(
        name=f"{QUEUE}/tasks/{uuid.uuid4().hex}",
        http_request=tasks_v2.HttpRequest(
            url=nobody, http_method=tasks_v2.HttpMethod.POST, body=b"{}",
            oidc_token=tasks_v2.OidcToken(service_account_email=WATCHDOG),
        ),
    )
    created = client.create_task(parent=QUEUE, task=task)
    assert created.name == task.name
    with pytest.raises(exceptions.Conflict, match="existed too recently"):
        client.create_task(parent=QUEUE, task=task)
    with pytest.raises(exceptions.NotFound):
        client.create_task(parent=QUEUE.replace("deliveries", "other"), task=task)
    # GetTask: BASIC (the default) omits the body, FULL shows it; a task due later waits.
    later = tasks_v2.Task(task, name=f"{QUEUE}/tasks/{uuid.uuid4().hex}",
                          schedule_time=datetime.now(UTC) + timedelta(days=1))
    client.create_task(parent=QUEUE, task=later)
    basic = client.get_task(name=later.name)
    full = client.get_task(request=tasks_v2.GetTaskRequest(
        name=later.name, response_view=tasks_v2.Task.View.FULL))
    assert (basic.view, basic.http_request.url, basic.http_request.body) == (
        tasks_v2.Task.View.BASIC, nobody, b"")
    assert (full.view, full.http_request.body) == (tasks_v2.Task.View.FULL, b"{}")
    assert full.http_request.oidc_token.service_account_email == WATCHDOG
    fake.wait_until_settled()
    assert fake.tasks[task.name].statuses == [None, None, None]  # retried, then given up
    with pytest.raises(exceptions.NotFound):  # deleted once done; its name still taken
        client.get_task(name=task.name)
    assert fake.tasks[later.name].statuses == []  # not due


def test_an_unknown_field_or_a_bad_deadline_is_invalid_argument(fake: FakeCloudTasks) -> None:
    url = f"{fake.url}/v2/{QUEUE}/tasks"
    good = task_of(TaskQueue(QUEUE, WATCHDOG, TASK_KEY), _delivery("http://127.0.0.1:1/"))
    unknown = requests.post(url, json={"task": {**good, "retries": 3}}, timeout=5)
    assert (unknown.status_code, unknown.json()["error"]["status"]) == (400, "INVALID_ARGUMENT")
    early = requests.post(url, json={"task": {**good, "dispatchDeadline": "5s"}}, timeout=5)
    assert early.status_code == 400 and "15 seconds" in early.json()["error"]["message"]
    assert fake.tasks == {}


def _delivery(url: str, **changes: Any) -> RunDelivery:
    delivery = RunDelivery(
        url, "nightly", datetime(2026, 11, 30, 9, 15, tzinfo=UTC), dict(JOB_HEADERS),
        '{"x": 1}', generation=2, run_id="ab" * 32, attempt_deadline_seconds=600,
    )
    return replace(delivery, **changes)


def test_the_task_is_what_the_api_accepts_with_the_runs_headers_and_a_clamped_deadline() -> None:
    queue = TaskQueue(QUEUE, WATCHDOG, TASK_KEY)
    task = tasks_v2.Task.from_json(
        json.dumps(task_of(queue, _delivery("https://f-abc-ew.a.run.app"))),
        ignore_unknown_fields=False,
    )
    # The run, the delivery's number, and a MAC only the key's holder computes.
    assert re.fullmatch(rf"{QUEUE}/tasks/{'ab' * 32}-0-[0-9a-f]{{32}}", task.name)
    other_key = replace(queue, key="another-key-0123456789abcdef0123456789")
    names = {queue.task_name(_delivery("https://x"), choice) for choice in range(3)}
    names |= {queue.task_name(_delivery("https://x", number=1)),
              other_key.task_name(_delivery("https://x"))}
    assert len(names) == 5 and task.name in names
    assert task.dispatch_deadline.total_seconds() == 600
    http = task.http_request
    assert (http.url, http.http_method, http.body) == (
        "https://f-abc-ew.a.run.app", tasks_v2.HttpMethod.POST, b'{"x": 1}')
    assert (http.oidc_token.service_account_email, http.oidc_token.audience) == (
        WATCHDOG, "https://f-abc-ew.a.run.app")
    assert http.headers["X-CloudScheduler-JobName"] == "nightly"
    assert http.headers["X-CloudScheduler-ScheduleTime"] == "2026-11-30T09:15:00.000000Z"
    assert http.headers["X-Dedup-Generation"] == "2"
    assert "User-Agent" not in http.headers  # Cloud Tasks replaces it
    for seconds, expected in ((5, 15), (3600, 1800)):
        clamped = task_of(queue, _delivery("https://x", attempt_deadline_seconds=seconds))
        assert clamped["dispatchDeadline"] == f"{expected}s"
    with pytest.raises(ValueError, match="run_id"):
        task_of(queue, _delivery("https://x", run_id=""))


@pytest.mark.parametrize(("env", "message"), [
    ({"DEDUP_WATCH_QUEUE": "my-queue", "DEDUP_WATCH_TASK_ACCOUNT": WATCHDOG},
     "is not a queue name"),
    ({"DEDUP_WATCH_QUEUE": QUEUE}, "DEDUP_WATCH_TASK_ACCOUNT=''"),
    ({"DEDUP_WATCH_QUEUE": QUEUE, "DEDUP_WATCH_TASK_ACCOUNT": WATCHDOG},
     "DEDUP_WATCH_TASK_KEY has 0 characters"),
    ({"DEDUP_WATCH_QUEUE": QUEUE, "DEDUP_WATCH_TASK_ACCOUNT": WATCHDOG,
      "DEDUP_WATCH_TASK_KEY": "short"}, "DEDUP_WATCH_TASK_KEY has 5 characters"),
])
def test_bad_queue_settings_stop_the_start_up_naming_the_variable(
    env: dict[str, str], message: str,
) -> None:
    with pytest.raises(SettingsError, match=message):
        TaskQueue.from_env(env)
    assert TaskQueue.from_env({}) is None
    assert TaskQueue.from_env(
        {"DEDUP_WATCH_QUEUE": QUEUE, "DEDUP_WATCH_TASK_ACCOUNT": WATCHDOG,
         "DEDUP_WATCH_TASK_KEY": TASK_KEY}
    ) == TaskQueue(QUEUE, WATCHDOG, TASK_KEY)
    assert TASK_KEY not in repr(TaskQueue(QUEUE, WATCHDOG, TASK_KEY))


# -- catch-up through the queue -------------------------------------------------------------
def test_a_missed_run_is_caught_up_through_the_queue_once(
    served: Served, fake: FakeCloudTasks,
) -> None:
    job = minutely(f"queued-{uuid.uuid4().hex[:6]}")
    now, times = recent_minutes(4)
    Runs(served.collection).completed(job.name, *(t for t in times if t != times[1]))
    watch = queued_watch(served, fake, job, now)
    first = watch.tick()
    assert first["problems"] == []
    assert [(c["schedule_time"], c["status"]) for c in first[CAUGHT_UP]] == [
        (z(times[1]), QUEUED)]
    watch.tick()  # before or after it landed: the same task (ALREADY_EXISTS), or nothing
    fake.wait_until_settled()
    [task] = fake.tasks.values()
    assert task.succeeded and json.loads(decoded_body(task)) == json.loads(SLOW_BODY)
    assert [e["schedule_time"] for e in served.executions(job.name)] == [times[1].isoformat()]
    later = watch.tick()
    assert (later["problems"], later[CAUGHT_UP]) == ([], [])
    assert len(fake.tasks) == 1 and len(served.executions(job.name)) == 1


def test_a_lost_create_reply_is_asked_again_and_is_still_one_task(
    served: Served, fake: FakeCloudTasks,
) -> None:
    job = minutely(f"lost-{uuid.uuid4().hex[:6]}")
    now, times = recent_minutes(3)
    Runs(served.collection).completed(job.name, *(t for t in times if t != times[1]))
    fake.drop_create_replies = 1
    watch = queued_watch(served, fake, job, now)
    body = watch.tick()
    assert body["problems"] == [] and body[CAUGHT_UP][0]["status"] == QUEUED
    [name] = fake.tasks
    assert fake.create_calls == [(name, None), (name, 409)]  # created unseen, then found
    assert fake.get_calls == [(name, "FULL", 200)]  # read back: the watchdog's own
    fake.wait_until_settled()
    assert len(served.executions(job.name)) == 1


def test_a_failing_caught_up_run_runs_once_and_is_reported_failed(
    served: Served, fake: FakeCloudTasks,
) -> None:
    """The function answers a job failure 200 to Cloud Tasks: the queue does not retry the
    job beyond the job's own policy; the watchdog reads the failed record and reports it."""
    job = replace(minutely(f"fails-{uuid.uuid4().hex[:6]}"), body=json.dumps({"fail": True}))
    now, times = recent_minutes(3)
    Runs(served.collection).completed(job.name, *(t for t in times if t != times[1]))
    watch = queued_watch(served, fake, job, now)
    assert watch.tick()["problems"] == []
    fake.wait_until_settled()
    [task] = fake.tasks.values()
    assert task.statuses == [200]  # ran once, the job raised, the queue is done with it
    [problem] = watch.tick()["problems"]
    assert (problem["kind"], problem["schedule_time"]) == ("failed", z(times[1]))
    assert watch.tick()["problems"] == []  # once
    assert len(served.executions(job.name)) == 1


def test_a_queued_delivery_after_its_bound_runs_nothing(
    served: Served, fake: FakeCloudTasks,
) -> None:
    """A paused or backlogged queue may deliver late: after X-Dedup-Deliver-By (the bound
    after which the watchdog reports the run) the function answers 200 expired."""
    job = f"late-{uuid.uuid4().hex[:6]}"
    _, times = recent_minutes(1)
    late = _delivery(served.server.url, job_id=job, schedule_time=times[0],
                     body=SLOW_BODY, generation=0, attempt_deadline_seconds=60,
                     deliver_within_seconds=0)  # any lateness after its ETA is too late
    deliverer = queued_deliverer(fake)
    assert deliverer.deliver(late).status == QUEUED
    fake.wait_until_settled()
    [task] = fake.tasks.values()
    assert task.statuses == [200]
    assert served.executions(job) == []
    on_time = replace(late, run_id="cd" * 32, deliver_within_seconds=300)
    assert deliverer.deliver(on_time).status == QUEUED
    fake.wait_until_settled()
    assert [e["schedule_time"] for e in served.executions(job)] == [times[0].isoformat()]


def test_a_bad_deliver_within_header_is_a_400_naming_it(served: Served) -> None:
    headers = {**dict(JOB_HEADERS), "X-CloudScheduler-JobName": "x",
               "X-CloudScheduler-ScheduleTime": "2026-10-16T12:00:00Z",
               "X-Dedup-Deliver-Within": "tomorrow", "Authorization": bearer(INVOKER)}
    reply = requests.post(served.server.url, headers=headers, data=b"{}", timeout=30)
    assert reply.status_code == 400
    assert reply.json()["error"] == (
        "X-Dedup-Deliver-Within 'tomorrow' is not a number of seconds (0 or more)")


def test_a_catch_up_that_never_reaches_the_function_is_missed_after_its_bound(
    served: Served, fake: FakeCloudTasks,
) -> None:
    job = minutely(f"down-{uuid.uuid4().hex[:6]}", within=240)
    now, times = recent_minutes(3)
    Runs(served.collection).completed(job.name, times[0], times[2])
    nobody = f"http://127.0.0.1:{free_port()}/"  # the function is unreachable
    watch = queued_watch(served, fake, job, now)
    watch.url = nobody
    assert watch.tick()["problems"] == []
    fake.wait_until_settled()
    assert watch.tick()["problems"] == []  # handed again (the same task): still inside
    assert len(fake.tasks) == 1
    watch.now = now + timedelta(
        seconds=240 + QUEUE_MAX_BACKOFF_SECONDS + job.attempt_deadline_seconds + 31)
    # (the minutes after `now` are due by then too: only the caught-up run's is looked at)
    [problem] = [p for p in watch.tick()["problems"] if p["schedule_time"] == z(times[1])]
    assert problem["kind"] == "missed"
    assert "never executed: no delivery reached the function" in problem["error"]
    assert [p for p in watch.tick()["problems"] if p["schedule_time"] == z(times[1])] == []
    assert served.executions(job.name) == []


def test_a_queued_catch_up_whose_task_gave_up_is_delivered_again_as_a_new_task(
    served: Served, fake: FakeCloudTasks,
) -> None:
    """The first task used its attempts on an unreachable function; once the queue can no
    longer deliver it, the next tick inside the bound hands over a task of a new name (the
    old one is refused for about an hour), which executes the run once."""
    job = minutely(f"again-{uuid.uuid4().hex[:6]}", within=3600)
    now, times = recent_minutes(3)
    Runs(served.collection).completed(job.name, times[0], times[2])
    watch = queued_watch(served, fake, job, now)
    watch.url = f"http://127.0.0.1:{free_port()}/"  # unreachable for the first task
    assert watch.tick()["problems"] == []
    fake.wait_until_settled()
    watch.url = served.server.url  # reachable again
    assert watch.tick()["problems"] == [] and len(fake.tasks) == 1  # the queue's turn
    [original] = fake.tasks
    span = (QUEUE_MAX_ATTEMPTS * job.attempt_deadline_seconds + 150 + watch.grace_seconds)
    watch.now = now + timedelta(seconds=span + 1)
    body = watch.tick()
    assert [p for p in body["problems"] if p["schedule_time"] == z(times[1])] == []
    fake.wait_until_settled()
    # (the minutes after `now` are due by then too, and caught up: only this run's tasks)
    run = original.rsplit("-", 2)[0]
    again = sorted(name for name in fake.tasks if name.startswith(f"{run}-"))
    assert [name.rsplit("-", 2)[1] for name in again] == ["0", "1"]  # delivery numbers
    assert fake.tasks[again[0]].statuses == [None] * 3
    assert fake.tasks[again[1]].statuses == [200]
    executed = [e["schedule_time"] for e in served.executions(job.name)]
    assert executed.count(times[1].isoformat()) == 1


# -- re-runs through the queue ---------------------------------------------------------------
class AskedRerun(NamedTuple):
    job: Any
    now: datetime
    times: list[datetime]
    queue: FirestoreRerunQueue
    request: RerunRequest


def asked_rerun(served: Served, name: str, reason: str) -> AskedRerun:
    """A job `name-<random>` whose last two minutes completed, and a re-run of the first of
    them asked (generation 1, as `make rerun` writes it) in the served function's store."""
    job = replace(minutely(f"{name}-{uuid.uuid4().hex[:6]}", catch_up=False), reruns=True)
    now, times = recent_minutes(2)
    Runs(served.collection).completed(job.name, *times)
    store = FirestoreRunStore(_client(), served.collection, 5)
    queue = FirestoreRerunQueue(store, reruns_collection(served.collection))
    request = RerunRequest(PROJECT, LOCATION, job.name, times[0], 1, "ops@example.com",
                           reason, now)
    queue.create(request)
    return AskedRerun(job, now, times, queue, request)


def test_a_rerun_through_the_queue_is_done_by_its_record_without_a_second_task(
    served: Served, fake: FakeCloudTasks, tmp_path: Path,
) -> None:
    job, now, times, queue, _ = asked_rerun(served, "rerun", "fixed the export")
    watch = queued_watch(served, fake, job, now)
    first = watch.tick()
    assert [(r["generation"], r["status"]) for r in first["reruns"]] == [(1, QUEUED)]
    fake.wait_until_settled()
    assert [e["schedule_time"] for e in served.executions(job.name)] == [times[0].isoformat()]
    second = watch.tick()
    assert [(r["generation"], r["status"]) for r in second["reruns"]] == [(1, "completed")]
    assert [r.status for r in queue.for_job(job.name)] == [DONE]
    assert watch.tick()["reruns"] == [] and len(fake.tasks) == 1


def test_a_rerun_that_never_reaches_the_function_ends_failed_with_why(
    served: Served, fake: FakeCloudTasks,
) -> None:
    """Not pending for good: past its delivery window (and the queue's retries) the request
    is finished failed, and said; its deliveries carried the bound, so none runs later."""
    job, now, _, queue, _ = asked_rerun(served, "lost-rerun", "fixed")
    watch = queued_watch(served, fake, job, now)
    watch.url = f"http://127.0.0.1:{free_port()}/"  # its tasks never reach the function
    assert [r["status"] for r in watch.tick()["reruns"]] == [QUEUED]
    fake.wait_until_settled()
    watch.now = now + timedelta(seconds=RERUN_DELIVERY_WINDOW_SECONDS + 3600)
    [ended] = watch.tick()["reruns"]
    # Said as far as known: the queue took it, and nothing executed it (a 409 hold-off or
    # no function: the watchdog cannot see the attempts' answers, the queue's logs can).
    assert ended["status"] == "failed" and "none executed it" in ended["error"]
    assert "reached no function" in ended["error"] and "delivered 1 time(s)" in ended["error"]
    [request] = queue.for_job(job.name)
    assert request.status == "failed"
    assert watch.tick()["reruns"] == []


class _HeldOff(BaseHTTPRequestHandler):
    """A function that holds every delivery off (overlap wait: another run holds the job)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"outcome": "in_progress"}).encode()
        self.send_response(409)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_rerun_held_off_by_409s_is_delivered_again_under_a_new_task_name(
    served: Served, fake: FakeCloudTasks,
) -> None:
    """The queue's attempts all answered 409: once they are over, the next delivery is a
    task of its own (`<run_id>-1`), not ALREADY_EXISTS read as queued for an hour, and it
    executes the generation once the job is free; no new task while the first may run."""
    job, now, times, queue, request = asked_rerun(served, "held-rerun", "fixed")
    held = ThreadingHTTPServer(("127.0.0.1", 0), _HeldOff)
    threading.Thread(target=held.serve_forever, daemon=True).start()
    try:
        watch = queued_watch(served, fake, job, now)
        watch.url = f"http://127.0.0.1:{held.server_address[1]}/"
        assert [r["status"] for r in watch.tick()["reruns"]] == [QUEUED]
        fake.wait_until_settled()
        [first] = fake.tasks.values()
        assert f"/tasks/{request.request_id}-0-" in first.name
        assert first.statuses == [409] * 3 and not first.succeeded
        # While its attempts may still be running (the queue's span: 8 min here), not
        # handed over again.
        watch.now = now + timedelta(minutes=5)
        assert [r["status"] for r in watch.tick()["reruns"]] == [QUEUED]
        assert len(fake.tasks) == 1
        [asked] = queue.for_job(job.name)
        assert (asked.status, asked.deliveries, asked.last_error) == ("pending", 1, None)
        # Past the queue's span: a second task, named apart, reaches the freed function.
        watch.url = served.server.url
        watch.now = now + timedelta(hours=1)
        assert [r["status"] for r in watch.tick()["reruns"]] == [QUEUED]
        fake.wait_until_settled()
        assert sorted(t.rsplit("/", 1)[-1].rsplit("-", 1)[0] for t in fake.tasks) == [
            f"{request.request_id}-0", f"{request.request_id}-1"]
        assert [(r["generation"], r["status"]) for r in watch.tick()["reruns"]] == [
            (1, "completed")]
        assert [r.status for r in queue.for_job(job.name)] == [DONE]
        assert [e["generation"] for e in served.executions(job.name)
                if e["schedule_time"] == times[0].isoformat()] == [1]
    finally:
        held.shutdown()
        held.server_close()


def _client() -> Any:
    from google.cloud import firestore

    return firestore.Client(project=PROJECT)



def test_the_served_watchdog_hands_its_runs_to_the_queue_its_environment_names(
    served: Served, fake: FakeCloudTasks,
) -> None:
    """functions-framework --target watch_scheduled_runs with DEDUP_WATCH_QUEUE and
    DEDUP_WATCH_TASK_ACCOUNT as infra sets them (the endpoint: the fake, on loopback)."""
    job, times, env = served_watchdog_setup(
        served, DEDUP_WATCH_QUEUE=QUEUE, DEDUP_WATCH_TASK_ACCOUNT=WATCHDOG,
        DEDUP_WATCH_TASK_KEY=TASK_KEY, DEDUP_WATCH_TASKS_ENDPOINT=fake.url,
    )
    with FunctionServer(env, target="watch_scheduled_runs") as watchdog:
        reply = requests.post(watchdog.url, headers={"Authorization": bearer(INVOKER)},
                              timeout=60)
        assert reply.status_code == 200, reply.text
        assert [(c["schedule_time"], c["status"]) for c in reply.json()[CAUGHT_UP]] == [
            (z(times[1]), QUEUED)]
    fake.wait_until_settled()
    [task] = fake.tasks.values()
    assert task.statuses == [200]  # the function took the watchdog's token from the queue
    assert [e["schedule_time"] for e in served.executions(job.name)] == [times[1].isoformat()]


@pytest.mark.parametrize("endpoint", [
    "https://collector.example.net", "http://cloudtasks.googleapis.com",
])
def test_the_tasks_endpoint_is_googleapis_or_loopback_only(endpoint: str) -> None:
    """Another host would receive the watchdog's access token."""
    with pytest.raises(SettingsError, match="DEDUP_WATCH_TASKS_ENDPOINT"):
        TaskQueue.from_env({"DEDUP_WATCH_QUEUE": QUEUE, "DEDUP_WATCH_TASK_ACCOUNT": WATCHDOG,
                            "DEDUP_WATCH_TASK_KEY": TASK_KEY,
                            "DEDUP_WATCH_TASKS_ENDPOINT": endpoint})

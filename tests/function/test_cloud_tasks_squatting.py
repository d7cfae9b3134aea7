"""Delivery that cannot be squatted (issue 36): tasks others create on the deliveries queue
never stand in for the watchdog's own.

Anyone who may create tasks in the project (job code whose account holds
roles/cloudtasks.enqueuer, say) could create the names the watchdog used to give its
tasks (`<run_id>`, `<run_id>-<n>`), scheduled weeks ahead: the watchdog read the
ALREADY_EXISTS answer as "queued", and the catch-up or re-run never ran. Its names now
carry a MAC under a key only the watchdog holds (dedup/watchdog/cloud_tasks.py), and a
name that exists is believed only once GetTask shows the watchdog's own task. Here, end
to end: the dedup function served (its ledger counts executions), the real Firestore
emulator, the Cloud Tasks fake (tests/function/fake_cloud_tasks.py, answering a pre-created
name as the API does), the attacker's tasks created through the API, due in three weeks.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests

from dedup.keys import RunKey
from dedup.watchdog.cloud_tasks import FOREIGN_TASK, TaskQueue
from dedup.watchdog.deliveries import CAUGHT_UP
from dedup.watchdog.delivery import ERROR, QUEUED, RunDelivery
from dedup.watchdog.reruns import DONE
from local_stack import FunctionServer
from local_stack.deliveries import INVOKER, LOCATION, PROJECT, bearer
from tests.function.fake_cloud_tasks import FakeCloudTasks, QueueRetry
from tests.function.test_catch_up import (
    JOB_HEADERS,
    SLOW_BODY,
    Served,
    minutely,
    recent_minutes,
    served_watchdog_setup,
    z,
)
from tests.function.test_cloud_tasks_delivery import (
    QUEUE,
    TASK_KEY,
    WATCHDOG,
    asked_rerun,
    mint,
    queued_deliverer,
    queued_watch,
)
from tests.function.test_cloud_tasks_delivery import (  # the served function, a fixture
    served as served,
)
from tests.function.test_watchdog import Runs

pytestmark = pytest.mark.usefixtures("firestore_emulator")

ATTACKER = f"job-code@{PROJECT}.iam.gserviceaccount.com"  # an enqueuer on the queue
ATTACKER_URL = "https://collector.example.net/"
WEEKS_AHEAD = timedelta(weeks=3)


@pytest.fixture
def fake() -> Iterator[FakeCloudTasks]:
    with FakeCloudTasks(QUEUE, mint, QueueRetry(max_attempts=3)) as tasks:
        yield tasks


def squat(
    fake: FakeCloudTasks, task_id: str, *, url: str = ATTACKER_URL, account: str = ATTACKER,
    headers: Mapping[str, str] | None = None, body: str = "{}",
) -> str:
    """Create task `task_id` as an attacker would (CreateTask over REST), due in weeks."""
    name = f"{QUEUE}/tasks/{task_id}"
    due = (datetime.now(UTC) + WEEKS_AHEAD).strftime("%Y-%m-%dT%H:%M:%SZ")
    reply = requests.post(f"{fake.url}/v2/{QUEUE}/tasks", json={"task": {
        "name": name, "scheduleTime": due,
        "httpRequest": {
            "url": url, "httpMethod": "POST", "headers": dict(headers or {}),
            "body": base64.b64encode(body.encode()).decode(),
            "oidcToken": {"serviceAccountEmail": account, "audience": url},
        },
    }}, timeout=10)
    assert reply.status_code == 200, reply.text
    return name


def todays_names(run_id: str) -> list[str]:
    """The names the watchdog gave a run's tasks before its key: `<run_id>`, `<run_id>-<n>`."""
    return [run_id, *(f"{run_id}-{n}" for n in range(1, 4))]


def arbitrary_names(run_id: str) -> list[str]:
    return [uuid.uuid4().hex for _ in range(20)]


def foreign_lines(logs: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [line for line in logs if line.get("kind") == FOREIGN_TASK]


# -- names nobody else can predict -----------------------------------------------------------
@pytest.mark.parametrize("names", [todays_names, arbitrary_names])
def test_a_catch_up_runs_once_whatever_tasks_were_created_ahead_of_it(
    served: Served, fake: FakeCloudTasks, names: Any,
) -> None:
    """The served watchdog (functions-framework, its environment as infra sets it) catches
    up a missed run although its old names, or any others, were taken weeks ahead."""
    job, times, env = served_watchdog_setup(
        served, DEDUP_WATCH_QUEUE=QUEUE, DEDUP_WATCH_TASK_ACCOUNT=WATCHDOG,
        DEDUP_WATCH_TASK_KEY=TASK_KEY, DEDUP_WATCH_TASKS_ENDPOINT=fake.url,
    )
    run_id = RunKey(PROJECT, LOCATION, job.name, times[1]).run_id
    squatted = [squat(fake, task_id) for task_id in names(run_id)]
    with FunctionServer(env, target="watch_scheduled_runs") as watchdog:
        reply = requests.post(watchdog.url, headers={"Authorization": bearer(INVOKER)},
                              timeout=60)
    assert reply.status_code == 200, reply.text
    assert [(c["schedule_time"], c["status"]) for c in reply.json()[CAUGHT_UP]] == [
        (z(times[1]), QUEUED)]
    fake.wait_until_settled()
    assert [e["schedule_time"] for e in served.executions(job.name)] == [times[1].isoformat()]
    assert all(fake.tasks[name].statuses == [] for name in squatted)  # due in weeks
    [own] = [t for n, t in fake.tasks.items() if n not in squatted]
    assert own.statuses == [200] and own.name.startswith(f"{QUEUE}/tasks/{run_id}-0-")


def test_a_rerun_runs_once_although_its_old_names_were_taken_ahead_of_it(
    served: Served, fake: FakeCloudTasks,
) -> None:
    job, now, _, queue, request = asked_rerun(served, "rerun-squat", "fixed the export")
    squatted = [squat(fake, task_id) for task_id in todays_names(request.request_id)]
    watch = queued_watch(served, fake, job, now)
    assert [(r["generation"], r["status"]) for r in watch.tick()["reruns"]] == [(1, QUEUED)]
    fake.wait_until_settled()
    assert [(r["generation"], r["status"]) for r in watch.tick()["reruns"]] == [
        (1, "completed")]
    assert [r.status for r in queue.for_job(job.name)] == [DONE]
    assert [e["generation"] for e in served.executions(job.name)] == [1]
    assert all(fake.tasks[name].statuses == [] for name in squatted)
    assert foreign_lines(watch.logs) == []  # its own names were never taken


# -- a name that exists is believed once read back as the watchdog's own -----------------
def _own_name(run_id: str, choice: int = 0) -> str:
    """A name of the watchdog's (as one who holds the key, or saw it, would know it)."""
    delivery = RunDelivery("https://x", "x", datetime.now(UTC), {}, run_id=run_id)
    return TaskQueue(QUEUE, WATCHDOG, TASK_KEY).task_name(delivery, choice)


@pytest.mark.parametrize(("squatter", "differs"), [
    ("its own target and token", ["url", "oidcToken.serviceAccountEmail",
                                  "oidcToken.audience", "body", "headers"]),
    ("the watchdog's target and token, another run, weeks ahead",
     ["headers x-cloudscheduler-jobname, x-cloudscheduler-scheduletime", "scheduleTime"]),
])
def test_a_task_under_the_watchdogs_name_that_is_not_its_own_is_an_error_and_bypassed(
    served: Served, fake: FakeCloudTasks, squatter: str, differs: list[str],
) -> None:
    """The name leaked (the key, or a name seen listing the queue): the task found under it
    is read back (GetTask FULL), named in an ERROR line with what differs, and the run is
    delivered under the next name, executing once."""
    job = minutely(f"squat-{uuid.uuid4().hex[:6]}")
    now, times = recent_minutes(3)
    Runs(served.collection).completed(job.name, times[0], times[2])
    run_id = RunKey(PROJECT, LOCATION, job.name, times[1]).run_id
    name = _own_name(run_id).rsplit("/", 1)[-1]
    if squatter == "its own target and token":
        squatted = squat(fake, name)
    else:  # needs actAs on the watchdog's account, which the pack guards; still refused
        other = {**dict(JOB_HEADERS), "X-CloudScheduler-JobName": "payroll",
                 "X-CloudScheduler-ScheduleTime": "2026-01-01T00:00:00.000000Z"}
        squatted = squat(fake, name, url=served.server.url, account=WATCHDOG,
                         headers=other, body=SLOW_BODY)
    watch = queued_watch(served, fake, job, now)
    watch.deliverer = queued_deliverer(fake, emit=watch.logs.append)
    assert [(c["schedule_time"], c["status"]) for c in watch.tick()[CAUGHT_UP]] == [
        (z(times[1]), QUEUED)]
    [line] = foreign_lines(watch.logs)
    assert line["severity"] == "ERROR" and line["task"] == squatted
    assert line["job"] == job.name and line["run_id"] == run_id
    assert squatted in line["message"] and "delivered under the next name" in line["message"]
    for what in differs:
        assert any(d.startswith(what) for d in line["differs"]), (what, line["differs"])
    fake.wait_until_settled()
    assert [e["schedule_time"] for e in served.executions(job.name)] == [times[1].isoformat()]
    assert fake.tasks[squatted].statuses == []
    assert fake.tasks[_own_name(run_id, 1)].statuses == [200]
    # Handed over again (a tick retried a minute later, its Deliver-Within a minute
    # shorter): the squatter's name reported again, the watchdog's own found and believed:
    # no third task, no second execution.
    retried = RunDelivery(
        served.server.url, job.name, times[1], dict(JOB_HEADERS), SLOW_BODY, run_id=run_id,
        attempt_deadline_seconds=job.attempt_deadline_seconds,
        deliver_within_seconds=job.catch_up_within_seconds - 180,
    )
    again = queued_deliverer(fake, emit=watch.logs.append).deliver(retried)
    assert again.status == QUEUED and len(foreign_lines(watch.logs)) == 2
    assert len(fake.tasks) == 2 and len(served.executions(job.name)) == 1


def test_a_name_that_ran_and_was_deleted_stays_queued_as_before(
    served: Served, fake: FakeCloudTasks,
) -> None:
    """The watchdog's own task ran (deleted, its name kept about an hour): CreateTask
    answers ALREADY_EXISTS, GetTask NOT_FOUND, and the delivery is QUEUED as it always was
    (only the watchdog can have made that name): the record tells at the next tick."""
    job = minutely(f"tomb-{uuid.uuid4().hex[:6]}")
    _, times = recent_minutes(2)
    delivery = RunDelivery(
        served.server.url, job.name, times[0], dict(JOB_HEADERS), SLOW_BODY,
        run_id=RunKey(PROJECT, LOCATION, job.name, times[0]).run_id,
        attempt_deadline_seconds=60, deliver_within_seconds=600,
    )
    logs: list[Mapping[str, Any]] = []
    deliverer = queued_deliverer(fake, emit=logs.append)
    assert deliverer.deliver(delivery).status == QUEUED
    fake.wait_until_settled()
    [name] = fake.tasks
    assert deliverer.deliver(delivery).status == QUEUED
    assert fake.create_calls[-1] == (name, 409) and fake.get_calls == [(name, "FULL", 404)]
    assert logs == [] and len(fake.tasks) == 1
    assert len(served.executions(job.name)) == 1


def test_a_name_that_exists_but_cannot_be_read_back_is_no_delivery(
    fake: FakeCloudTasks,
) -> None:
    """Not believed unseen: an ERROR delivery (the next tick hands the run over again,
    under its next number), and nothing reported as queued."""
    nobody = "http://127.0.0.1:9/"
    delivery = RunDelivery(nobody, "x", datetime.now(UTC) - timedelta(minutes=1),
                           dict(JOB_HEADERS), "{}", run_id="cd" * 32,
                           attempt_deadline_seconds=60)
    squatted = squat(fake, _own_name(delivery.run_id).rsplit("/", 1)[-1], url=nobody)
    fake.refuse_gets = 1
    result = queued_deliverer(fake).deliver(delivery)
    assert result.status == ERROR and result.http_status is None
    assert f"task {squatted} exists and could not be read back" in (result.error or "")
    assert "PERMISSION_DENIED" in (result.error or "") and list(fake.tasks) == [squatted]


def test_every_name_taken_by_foreign_tasks_is_an_error_naming_them(
    fake: FakeCloudTasks,
) -> None:
    nobody = "http://127.0.0.1:9/"
    delivery = RunDelivery(nobody, "x", datetime.now(UTC), dict(JOB_HEADERS), "{}",
                           run_id="ef" * 32, attempt_deadline_seconds=60)
    from dedup.watchdog.cloud_tasks import NAME_CHOICES

    squatted = [squat(fake, _own_name(delivery.run_id, c).rsplit("/", 1)[-1], url=nobody)
                for c in range(NAME_CHOICES)]
    logs: list[Mapping[str, Any]] = []
    result = queued_deliverer(fake, emit=logs.append).deliver(delivery)
    assert result.status == ERROR and "the task key may have leaked" in (result.error or "")
    assert [line["task"] for line in logs] == squatted
    assert "no name left: not delivered" in json.dumps(logs[-1])


def _client() -> Any:
    from google.cloud import firestore

    return firestore.Client(project=PROJECT)

"""The watchdog's deliveries through a Cloud Tasks queue: the path Cloud Run admits.

The dedup function (and the proxy) are internal-only. Cloud Run counts a request from
another Cloud Run service as internal only when it leaves through a VPC network, but a
Cloud Tasks HTTP task from the same project is internal on the `run.app` URL ("Restrict
network ingress for Cloud Run",
https://cloud.google.com/run/docs/securing/ingress#internal-services). So the watchdog does
not POST a catch-up or a re-run itself: it creates one HTTP task per run and generation
(CreateTask, https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues.tasks/create)
carrying the run's Scheduler headers, its body and an OIDC token of the watchdog's own
account for the target URL, and Cloud Tasks delivers it with the queue's retries.

The task is named after the run_id of its generation: "If a task's ID is identical to that
of an existing task or a task that was deleted or executed recently then the call will fail
with ALREADY_EXISTS" (for about an hour after it ran), so a tick retried, two ticks side by
side, or a lost CreateTask reply followed by another CreateTask make one task: both answers
are QUEUED. After that hour a new task is one more delivery, which the dedup protocol
answers `duplicate` once the run has completed.

Plain REST over `requests` with google-auth's AuthorizedSession (both already in the
function for Firestore): no google-cloud-tasks in the deployed function (cold start).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import requests

from dedup.proxy.targets import api_base_setting
from dedup.settings import SettingsError
from dedup.watchdog.delivery import (
    ERROR,
    QUEUED,
    DeliveryResult,
    RunDelivery,
    brief_error,
    json_or_none,
)

QUEUE_ENV = "DEDUP_WATCH_QUEUE"
TASK_ACCOUNT_ENV = "DEDUP_WATCH_TASK_ACCOUNT"
TASKS_ENDPOINT_ENV = "DEDUP_WATCH_TASKS_ENDPOINT"  # the API's root; tests point it at a fake
DEFAULT_TASKS_ENDPOINT = "https://cloudtasks.googleapis.com"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
# HttpRequest.dispatch_deadline: "For HTTP tasks, the default is 10 minutes. The deadline
# must be in the interval [15 seconds, 30 minutes]" (google.cloud.tasks.v2.Task).
MIN_DISPATCH_DEADLINE_SECONDS = 15
MAX_DISPATCH_DEADLINE_SECONDS = 1800
CREATE_TIMEOUT_SECONDS = 30.0
CREATE_ATTEMPTS = 2  # a lost reply or a transient error is asked again at once (one task)
_TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
# Cloud Tasks sets these itself ("will be ignored or replaced", HttpRequest.headers).
_REPLACED_HEADERS = frozenset({"host", "content-length", "user-agent"})
_QUEUE_NAME = re.compile(r"projects/[^/]+/locations/[^/]+/queues/[A-Za-z0-9-]{1,100}")


@dataclass(frozen=True)
class TaskQueue:
    """Where the watchdog's tasks go, and whose OIDC token they carry."""

    name: str  # projects/P/locations/L/queues/Q
    service_account_email: str  # the watchdog's own account (it holds actAs on itself only)
    endpoint: str = DEFAULT_TASKS_ENDPOINT

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TaskQueue | None:
        """DEDUP_WATCH_QUEUE and DEDUP_WATCH_TASK_ACCOUNT, both or neither; None: the
        watchdog POSTs its deliveries itself (the demo, tests)."""
        name = (env.get(QUEUE_ENV) or "").strip()
        account = (env.get(TASK_ACCOUNT_ENV) or "").strip()
        if not name and not account:
            return None
        if not _QUEUE_NAME.fullmatch(name):
            raise SettingsError(
                f"{QUEUE_ENV}={name[:120]!r} is not a queue name: set it to "
                "projects/PROJECT/locations/LOCATION/queues/QUEUE (infra sets it with "
                f"{TASK_ACCOUNT_ENV})"
            )
        if "@" not in account:
            raise SettingsError(
                f"{TASK_ACCOUNT_ENV}={account[:120]!r} is not a service account e-mail: set "
                "it to the account whose OIDC token the tasks carry (the watchdog's own)"
            )
        # Never another host: it would receive the watchdog's access token.
        endpoint = api_base_setting(env.get(TASKS_ENDPOINT_ENV), TASKS_ENDPOINT_ENV)
        return cls(name, account, endpoint or DEFAULT_TASKS_ENDPOINT)

    def task_name(self, delivery: RunDelivery) -> str:
        if not delivery.run_id:
            raise ValueError("a queued delivery needs its run_id (the task's name)")
        suffix = f"-{delivery.number}" if delivery.number else ""
        return f"{self.name}/tasks/{delivery.run_id}{suffix}"


def task_of(queue: TaskQueue, delivery: RunDelivery) -> dict[str, Any]:
    """The Task JSON (REST, camelCase) for one delivery."""
    deadline = min(
        MAX_DISPATCH_DEADLINE_SECONDS,
        max(MIN_DISPATCH_DEADLINE_SECONDS, round(delivery.attempt_deadline_seconds)),
    )
    headers = {
        k: v for k, v in delivery.request_headers().items()
        if k.lower() not in _REPLACED_HEADERS
    }
    return {
        "name": queue.task_name(delivery),
        "dispatchDeadline": f"{deadline}s",
        "httpRequest": {
            "url": delivery.url,
            "httpMethod": "POST",
            "headers": headers,
            "body": base64.b64encode((delivery.body or "").encode()).decode(),
            "oidcToken": {
                "serviceAccountEmail": queue.service_account_email,
                "audience": delivery.url,
            },
        },
    }


def authorized_session() -> requests.Session:
    """A session with the runtime's credentials (the metadata server on Cloud Run)."""
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    session: requests.Session = AuthorizedSession(credentials)  # type: ignore[no-untyped-call]
    return session


class CloudTasksDeliverer:
    """Creates one named HTTP task per delivery; QUEUED once the task exists."""

    asynchronous = True

    def __init__(self, queue: TaskQueue, session: requests.Session | None = None) -> None:
        self._queue = queue
        self._session = session if session is not None else authorized_session()

    def deliver(self, delivery: RunDelivery) -> DeliveryResult:
        url = f"{self._queue.endpoint}/v2/{self._queue.name}/tasks"
        request = {"task": task_of(self._queue, delivery)}
        for attempt in range(CREATE_ATTEMPTS):
            last = attempt + 1 == CREATE_ATTEMPTS
            try:
                reply = self._session.post(url, json=request, timeout=CREATE_TIMEOUT_SECONDS)
            except requests.RequestException as exc:
                # The task may have been created while the reply was lost: the same
                # CreateTask again answers ALREADY_EXISTS for it, which is QUEUED too.
                if last:
                    return DeliveryResult(ERROR, error=f"CreateTask failed: {brief_error(exc)}")
                continue
            if reply.status_code not in _TRANSIENT_STATUSES or last:
                break
        if reply.ok:
            return DeliveryResult(QUEUED, reply.status_code)
        body = json_or_none(reply)
        error = body.get("error") if isinstance(body, dict) else None
        status = error.get("status") if isinstance(error, dict) else None
        if reply.status_code == 409 or status == "ALREADY_EXISTS":
            return DeliveryResult(QUEUED, reply.status_code)  # this run's task exists
        message = error.get("message") if isinstance(error, dict) else reply.text[:200]
        return DeliveryResult(
            ERROR, reply.status_code,
            f"CreateTask in {self._queue.name}: HTTP {reply.status_code} {status or ''}: "
            f"{message}".replace("  ", " "),
        )

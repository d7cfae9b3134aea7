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

The task's name is one per run, generation and delivery number: "If a task's ID is
identical to that of an existing task or a task that was deleted or executed recently then
the call will fail with ALREADY_EXISTS" (for about an hour after it ran), so a tick
retried, two ticks side by side, or a lost CreateTask reply followed by another CreateTask
make one task. After that hour a new task is one more delivery, which the dedup protocol
answers `duplicate` once the run has completed.

Nobody else can take that name first (issue 36, "delivery that cannot be squatted"):
- The name is `<run_id>-<number>-<mac>`, mac = HMAC-SHA256 under a key only the watchdog
  holds (DEDUP_WATCH_TASK_KEY) of the run_id, the delivery number and the choice (below),
  cut to 128 bits. The run_id is readable (operators find a run's tasks) and leads (a hashed
  prefix, as Cloud Tasks advises for task IDs); the mac makes it unpredictable. The key is
  random (infra/watchdog.py: pulumi-random, like the proxy's token secret), kept in Secret
  Manager (`<namePrefix>-watchdog-task-key`) and read by Cloud Run into the watchdog's
  environment only: job code runs as other accounts in other functions, and the stack file
  (public to the team) never holds it. A key derived from the watchdog's identity instead
  (signBlob of its account) would change with Google's key rotation, and with it the names
  a retried tick must find again.
- ALREADY_EXISTS is believed only after the task is read back (GetTask, responseView FULL:
  the BASIC view omits the body) and found to be the watchdog's own: its URL, method,
  headers and body the delivery's, its OIDC token of the task account for the delivery's
  URL, and scheduled no later than a retry's backoff. Anything else is logged ERROR
  ("watchdog foreign_task", naming the task and what differs) and the delivery is created
  under the next choice of name, up to NAME_CHOICES: the run is still delivered, and the dedup
  protocol makes it execute once. A read-back that fails is an ERROR delivery (handed over
  again at the next tick, by the next number), never QUEUED unseen.
- A name that exists but GetTask answers NOT_FOUND is a task that ran or gave up within
  the hour (a tombstone): as before, QUEUED; the run's record tells at the next ticks, and
  its next delivery has the next number. Only the watchdog can have made that name.

Plain REST over `requests` with google-auth's AuthorizedSession (both already in the
function for Firestore): no google-cloud-tasks in the deployed function (cold start).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import requests

from dedup.entry.http import emit_log_line
from dedup.proxy.targets import api_base_setting
from dedup.settings import SettingsError
from dedup.watchdog.delivery import (
    ERROR,
    QUEUED,
    DeliveryResult,
    RunDelivery,
    audience_of,
    brief_error,
    json_or_none,
)

QUEUE_ENV = "DEDUP_WATCH_QUEUE"
TASK_ACCOUNT_ENV = "DEDUP_WATCH_TASK_ACCOUNT"
TASK_KEY_ENV = "DEDUP_WATCH_TASK_KEY"  # a secret environment variable (infra/watchdog.py)
MIN_TASK_KEY_CHARS = 32
TASKS_ENDPOINT_ENV = "DEDUP_WATCH_TASKS_ENDPOINT"  # the API's root; tests point it at a fake
DEFAULT_TASKS_ENDPOINT = "https://cloudtasks.googleapis.com"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
# HttpRequest.dispatch_deadline: "For HTTP tasks, the default is 10 minutes. The deadline
# must be in the interval [15 seconds, 30 minutes]" (google.cloud.tasks.v2.Task).
MIN_DISPATCH_DEADLINE_SECONDS = 15
MAX_DISPATCH_DEADLINE_SECONDS = 1800
CREATE_TIMEOUT_SECONDS = 30.0
CREATE_ATTEMPTS = 2  # a lost reply or a transient error is asked again at once (one task)
# Names tried for one delivery while the earlier ones are taken by tasks not the watchdog's.
NAME_CHOICES = 4
MAC_HEX_CHARS = 32  # 128 bits of HMAC-SHA256: no guessing
# A task of the watchdog's is scheduled at its creation, or at its next retry (the queue's
# maxBackoff, 300 s: deliveries.QUEUE_MAX_BACKOFF_SECONDS) plus clock skew: one due later
# (a squatter's, weeks ahead) delivers nothing in time.
MAX_SCHEDULED_AHEAD_SECONDS = 600.0
FOREIGN_TASK = "foreign_task"
_TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
# Cloud Tasks sets these itself ("will be ignored or replaced", HttpRequest.headers).
_REPLACED_HEADERS = frozenset({"host", "content-length", "user-agent"})
# Computed at each hand-over (a bound relative to the task's ETA): a retried tick asks a
# second later for the same task. It can only make a delivery run nothing, and a task
# carrying the watchdog's token needs actAs on its account, which only the watchdog holds.
_VARYING_HEADERS = frozenset({"x-dedup-deliver-within"})
_QUEUE_NAME = re.compile(r"projects/[^/]+/locations/[^/]+/queues/[A-Za-z0-9-]{1,100}")


@dataclass(frozen=True)
class TaskQueue:
    """Where the watchdog's tasks go, whose OIDC token they carry, and the key that names
    them."""

    name: str  # projects/P/locations/L/queues/Q
    service_account_email: str  # the watchdog's own account (it holds actAs on itself only)
    key: str = field(repr=False)  # DEDUP_WATCH_TASK_KEY: task names nobody else can predict
    endpoint: str = DEFAULT_TASKS_ENDPOINT

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TaskQueue | None:
        """DEDUP_WATCH_QUEUE and DEDUP_WATCH_TASK_ACCOUNT, both or neither, and with them
        DEDUP_WATCH_TASK_KEY; None: the watchdog POSTs its deliveries itself (the demo,
        tests)."""
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
        key = (env.get(TASK_KEY_ENV) or "").strip()
        if len(key) < MIN_TASK_KEY_CHARS:  # never the value itself in the message
            raise SettingsError(
                f"{TASK_KEY_ENV} has {len(key)} characters, fewer than {MIN_TASK_KEY_CHARS}: "
                "infra sets it from the watchdog's task-key secret (a guessable key lets "
                "anyone who may create tasks take the watchdog's task names first)"
            )
        # Never another host: it would receive the watchdog's access token.
        endpoint = api_base_setting(env.get(TASKS_ENDPOINT_ENV), TASKS_ENDPOINT_ENV)
        return cls(name, account, key, endpoint or DEFAULT_TASKS_ENDPOINT)

    def task_name(self, delivery: RunDelivery, choice: int = 0) -> str:
        """`<run_id>-<number>-<mac>`: the `choice`-th name of this delivery."""
        if not delivery.run_id:
            raise ValueError("a queued delivery needs its run_id (the task's name)")
        message = f"{delivery.run_id}/{delivery.number}/{choice}".encode()
        mac = hmac.new(self.key.encode(), message, hashlib.sha256).hexdigest()[:MAC_HEX_CHARS]
        return f"{self.name}/tasks/{delivery.run_id}-{delivery.number}-{mac}"


def task_of(queue: TaskQueue, delivery: RunDelivery, choice: int = 0) -> dict[str, Any]:
    """The Task JSON (REST, camelCase) for one delivery, under its `choice`-th name."""
    deadline = min(
        MAX_DISPATCH_DEADLINE_SECONDS,
        max(MIN_DISPATCH_DEADLINE_SECONDS, round(delivery.attempt_deadline_seconds)),
    )
    headers = {
        k: v for k, v in delivery.request_headers().items()
        if k.lower() not in _REPLACED_HEADERS
    }
    return {
        "name": queue.task_name(delivery, choice),
        "dispatchDeadline": f"{deadline}s",
        "httpRequest": {
            "url": delivery.url,
            "httpMethod": "POST",
            "headers": headers,
            "body": base64.b64encode((delivery.body or "").encode()).decode(),
            "oidcToken": {
                "serviceAccountEmail": queue.service_account_email,
                "audience": audience_of(delivery.url),
            },
        },
    }


def foreign_fields(found: Mapping[str, Any], ours: Mapping[str, Any], now: float) -> list[str]:
    """How the task `found` (GetTask, FULL view) differs from the task the watchdog asked
    for (`ours`, task_of): empty when it is the watchdog's own delivery."""
    differs: list[str] = []
    got, want = _mapping(found.get("httpRequest")), _mapping(ours["httpRequest"])
    for what in ("url", "httpMethod"):
        if got.get(what) != want[what]:
            differs.append(f"{what} {_shown(got.get(what))} (the delivery's: {want[what]!r})")
    token, own = _mapping(got.get("oidcToken")), want["oidcToken"]
    email = token.get("serviceAccountEmail")
    if not isinstance(email, str) or email.lower() != own["serviceAccountEmail"].lower():
        differs.append(f"oidcToken.serviceAccountEmail {_shown(email)} (the watchdog's: "
                       f"{own['serviceAccountEmail']!r})")
    if token.get("audience") != own["audience"]:
        differs.append(f"oidcToken.audience {_shown(token.get('audience'))} (the "
                       f"delivery's: {own['audience']!r})")
    if "body" not in got:
        differs.append("body not shown (not the FULL view)")
    elif _decoded(got.get("body")) != _decoded(want["body"]):
        differs.append("body is not the delivery's")
    headers = _headers(got.get("headers"))
    wanted = _headers(want["headers"])
    for varies in _VARYING_HEADERS:
        headers.pop(varies, None)
        wanted.pop(varies, None)
    if "content-type" not in wanted:
        headers.pop("content-type", None)  # Cloud Tasks sets one for a body
    if headers != wanted:
        names = sorted(n for n in headers.keys() | wanted.keys()
                       if headers.get(n) != wanted.get(n))
        differs.append(f"headers {', '.join(names)} are not the delivery's")
    scheduled = _seconds(found.get("scheduleTime"))
    if scheduled is not None and scheduled > now + MAX_SCHEDULED_AHEAD_SECONDS:
        differs.append(f"scheduleTime {found.get('scheduleTime')}, not now")
    return differs


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _shown(value: Any) -> str:
    return repr(value)[:200] if value is not None else "absent"


def _decoded(value: Any) -> bytes | None:
    try:
        return base64.b64decode(value or "", validate=True)
    except (TypeError, ValueError):
        return None


def _headers(value: Any) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in _mapping(value).items()
            if str(k).lower() not in _REPLACED_HEADERS}


def _seconds(timestamp: Any) -> float | None:
    """An RFC 3339 timestamp (Cloud Tasks' JSON: `2026-12-06T10:00:00.123456Z`), in epoch
    seconds; None if absent or unreadable."""
    if not isinstance(timestamp, str):
        return None
    text = re.sub(r"(\.\d{6})\d+", r"\1", timestamp.replace("Z", "+00:00"))
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def authorized_session() -> requests.Session:
    """A session with the runtime's credentials (the metadata server on Cloud Run)."""
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    session: requests.Session = AuthorizedSession(credentials)  # type: ignore[no-untyped-call]
    return session


@dataclass(frozen=True)
class _Answer:
    """One API call's answer: the reply, or why there was none."""

    reply: requests.Response | None
    error: str | None = None

    @property
    def status(self) -> str | None:
        body = json_or_none(self.reply) if self.reply is not None else None
        error = body.get("error") if isinstance(body, dict) else None
        status = error.get("status") if isinstance(error, dict) else None
        return status if isinstance(status, str) else None

    def describe(self, what: str) -> str:
        if self.reply is None:
            return f"{what} failed: {self.error}"
        body = json_or_none(self.reply)
        error = body.get("error") if isinstance(body, dict) else None
        message = error.get("message") if isinstance(error, dict) else self.reply.text[:200]
        return (f"{what}: HTTP {self.reply.status_code} {self.status or ''}: "
                f"{message}").replace("  ", " ")


class CloudTasksDeliverer:
    """Creates one named HTTP task per delivery; QUEUED once the task exists and is the
    watchdog's own."""

    asynchronous = True

    def __init__(
        self, queue: TaskQueue, session: requests.Session | None = None,
        emit: Callable[[Mapping[str, Any]], None] = emit_log_line,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._queue = queue
        self._session = session if session is not None else authorized_session()
        self._emit = emit
        self._clock = clock

    def deliver(self, delivery: RunDelivery) -> DeliveryResult:
        url = f"{self._queue.endpoint}/v2/{self._queue.name}/tasks"
        foreign: list[str] = []
        for choice in range(NAME_CHOICES):
            task = task_of(self._queue, delivery, choice)
            # The task may have been created while a reply was lost: the same CreateTask
            # again answers ALREADY_EXISTS for it, read back below.
            created = self._call("post", url, json={"task": task})
            if created.reply is None:
                return DeliveryResult(ERROR, error=created.describe("CreateTask"))
            reply = created.reply
            if reply.ok:
                return DeliveryResult(QUEUED, reply.status_code)
            if reply.status_code != 409 and created.status != "ALREADY_EXISTS":
                return DeliveryResult(ERROR, reply.status_code,
                                      created.describe(f"CreateTask in {self._queue.name}"))
            read = self._call(
                "get", f"{self._queue.endpoint}/v2/{task['name']}",
                params={"responseView": "FULL"},
            )
            if read.reply is not None and (
                    read.reply.status_code == 404 or read.status == "NOT_FOUND"):
                # Ran or gave up within the hour: a name only the watchdog can have made.
                return DeliveryResult(QUEUED, reply.status_code)
            if read.reply is None or not read.reply.ok:
                return DeliveryResult(  # (no http_status: the 409 was the API's)
                    ERROR, error=f"task {task['name']} exists and could not be read back "
                    f"to check it is the watchdog's own: {read.describe('GetTask')}",
                )
            found = json_or_none(read.reply)
            differs = foreign_fields(_mapping(found), task, self._clock())
            if not differs:
                return DeliveryResult(QUEUED, reply.status_code)  # this run's task exists
            foreign.append(task["name"])
            self._report_foreign(delivery, task["name"], differs, choice)
        return DeliveryResult(
            ERROR, error=f"every name of this delivery is taken by a task not the watchdog's "
            f"own ({', '.join(foreign)}): the task key may have leaked",
        )

    def _report_foreign(
        self, delivery: RunDelivery, name: str, differs: list[str], choice: int
    ) -> None:
        then = ("delivered under the next name" if choice + 1 < NAME_CHOICES
                else "no name left: not delivered")
        self._emit({
            "severity": "ERROR",
            "component": "watchdog",  # counted with its problems, by job and kind
            "message": f"watchdog {FOREIGN_TASK}: task {name} exists and is not the "
            f"watchdog's own ({'; '.join(differs)}): {then}",
            "kind": FOREIGN_TASK,
            "task": name,
            "differs": differs,
            "job": delivery.job_id,
            "run_id": delivery.run_id,
        })

    def _call(self, method: str, url: str, **kwargs: Any) -> _Answer:
        """One API call, asked again at once after a lost reply or a transient error."""
        answer = _Answer(None, "not called")
        for _ in range(CREATE_ATTEMPTS):
            try:
                reply = self._session.request(
                    method, url, timeout=CREATE_TIMEOUT_SECONDS, **kwargs)
            except requests.RequestException as exc:
                answer = _Answer(None, brief_error(exc))
                continue
            answer = _Answer(reply)
            if reply.status_code not in _TRANSIENT_STATUSES:
                break
        return answer

"""A local Cloud Tasks for the watchdog's deliveries: CreateTask (REST v2) and dispatch.

One threaded HTTP server on 127.0.0.1 answers `POST /v2/{queue}/tasks` the way the API
does: the request is parsed with Google's own type (`google.cloud.tasks_v2.CreateTaskRequest`,
unknown fields refused), an unknown queue is 404 NOT_FOUND, a bad task 400 INVALID_ARGUMENT,
and a task whose name exists or ran within the de-duplication window 409 ALREADY_EXISTS
(https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues.tasks/create).
The answer is the created Task as JSON, so Google's own client (CloudTasksClient over REST)
can drive it too. Each created task is dispatched on a thread of its own: an HTTP POST of
its url, headers and body with an OIDC token for its audience (minted by `mint_token`),
retried on any non-2xx or no answer within the dispatch deadline, with the queue's
exponential backoff, up to max_attempts. `drop_create_replies` creates tasks but closes the
connection before answering (a lost reply); `refuse_gets` answers GetTask 403.

A task with a scheduleTime in the future waits (it is not dispatched while the test runs:
a squatter's task scheduled weeks ahead). `GET /v2/{task name}` is GetTask
(https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues.tasks/get):
"After a task is successfully executed or has exhausted its retry attempts, the task is
deleted. A GetTask request for a deleted task returns a NOT_FOUND error", while its name
still answers CreateTask ALREADY_EXISTS (about an hour: here, for the fake's lifetime).
`responseView`: "By default response_view is BASIC" and "the basic view omits fields which
can be large or can contain sensitive data" (Task.View BASIC: the body); FULL returns all
(google.cloud.tasks.v2 GetTaskRequest.response_view, Task.View).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs

import requests
from google.cloud import tasks_v2

from local_stack.loopback import LoopbackServer
from tests.waiting import let_time_pass

TokenMinter = Callable[[str, str], str]  # (service account e-mail, audience) -> token
_TASK_ID = re.compile(r"[A-Za-z0-9_-]{1,500}")
_PATH = re.compile(r"/v2/(projects/[^/]+/locations/[^/]+/queues/[^/]+)/tasks")
_TASK_PATH = re.compile(r"/v2/(projects/[^/]+/locations/[^/]+/queues/[^/]+/tasks/[^/]+)")
_VIEWS = {"VIEW_UNSPECIFIED": "BASIC", "0": "BASIC", "BASIC": "BASIC", "1": "BASIC",
          "FULL": "FULL", "2": "FULL"}  # google.cloud.tasks.v2.Task.View, by name and number
MAX_HEADER_BYTES = 80 * 1000  # "The size of the headers must be less than 80KB."


@dataclass(frozen=True)
class QueueRetry:
    """The queue's retryConfig, in seconds (a test scales the backoff down)."""

    max_attempts: int = 3
    min_backoff: float = 0.05
    max_backoff: float = 0.2


@dataclass
class FakeTask:
    name: str
    task: tasks_v2.Task
    eta: float = field(default_factory=time.time)  # X-CloudTasks-TaskETA: its scheduleTime
    statuses: list[int | None] = field(default_factory=list)  # per attempt; None: no answer
    done: threading.Event = field(default_factory=threading.Event)  # deleted (name kept)
    waiting: bool = False  # scheduled in the future: not dispatched while the test runs

    @property
    def succeeded(self) -> bool:
        return bool(self.statuses) and self.statuses[-1] is not None and (
            200 <= (self.statuses[-1] or 0) < 300)


class FakeCloudTasks(LoopbackServer):
    def __init__(
        self, queue: str, mint_token: TokenMinter, retry: QueueRetry | None = None,
    ) -> None:
        self.queue = queue
        self._mint = mint_token
        self._retry = retry or QueueRetry()
        self.tasks: dict[str, FakeTask] = {}
        self.create_calls: list[tuple[str, int | None]] = []  # (task name, status answered)
        self.get_calls: list[tuple[str, str, int]] = []  # (task name, view, status answered)
        self.drop_create_replies = 0
        self.refuse_gets = 0  # the next GetTask calls answer 403 PERMISSION_DENIED
        self._lock = threading.Lock()
        super().__init__()

    def wait_until_settled(self, timeout: float = 30.0) -> None:
        """Every task created so far has succeeded or used its attempts."""
        deadline = time.monotonic() + timeout
        for task in [t for t in list(self.tasks.values()) if not t.waiting]:
            if not task.done.wait(max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"task {task.name} still dispatching after {timeout}s")

    # -- CreateTask ------------------------------------------------------------------------
    def _create(self, parent: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if parent != self.queue:
            return 404, _error(404, "NOT_FOUND", f"Queue does not exist: {parent}")
        try:
            request = tasks_v2.CreateTaskRequest.from_json(
                json.dumps({"parent": parent, **body}), ignore_unknown_fields=False
            )
        except Exception as exc:  # proto-plus/json_format: unknown field, bad value
            return 400, _error(400, "INVALID_ARGUMENT", f"Invalid JSON payload: {exc}")
        task = request.task
        problem = _task_problem(parent, task)
        if problem is not None:
            return 400, _error(400, "INVALID_ARGUMENT", problem)
        with self._lock:
            if task.name in self.tasks:  # exists, or ran within the window (~1 hour)
                return 409, _error(
                    409, "ALREADY_EXISTS", "The task cannot be created because a task with "
                    "this name existed too recently.",
                )
            now = time.time()
            scheduled = task.schedule_time.timestamp() if "schedule_time" in task else now
            if "schedule_time" not in task:  # "If not set ... dispatched immediately"
                task.schedule_time = datetime.fromtimestamp(now, UTC)
            task.create_time = datetime.fromtimestamp(now, UTC)
            created = FakeTask(task.name, task, eta=scheduled, waiting=scheduled > now + 1)
            self.tasks[task.name] = created
        if not created.waiting:
            threading.Thread(target=self._dispatch, args=(created,), daemon=True).start()
        return 200, _task_json(task, full=False)

    # -- GetTask ---------------------------------------------------------------------------
    def _get(self, name: str, view: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            found = self.tasks.get(name)
            refused = self.refuse_gets > 0
            self.refuse_gets -= refused
        if refused:
            return 403, _error(403, "PERMISSION_DENIED", "The principal lacks IAM permission "
                               "cloudtasks.tasks.get for the resource.")
        if not name.startswith(f"{self.queue}/tasks/"):
            return 404, _error(404, "NOT_FOUND", f"Queue does not exist: {name}")
        if found is None or found.done.is_set():  # never created, or ran / gave up: deleted
            return 404, _error(404, "NOT_FOUND", "The task no longer exists, though a task "
                               "with this name existed recently.")
        # By name or number (Google's client sends `$alt=json;enum-encoding=int`);
        # "VIEW_UNSPECIFIED: Unspecified. Defaults to BASIC."
        chosen = _VIEWS.get(view or "BASIC")
        if chosen is None:
            return 400, _error(400, "INVALID_ARGUMENT", f"Invalid value for responseView: {view}")
        return 200, _task_json(found.task, full=chosen == "FULL")

    def _dispatch(self, fake: FakeTask) -> None:
        http = fake.task.http_request
        deadline = fake.task.dispatch_deadline.total_seconds() or 600.0
        task_id = fake.name.rsplit("/", 1)[-1]
        for attempt in range(self._retry.max_attempts):
            headers = {
                **dict(http.headers),
                "User-Agent": "Google-Cloud-Tasks",
                "X-CloudTasks-QueueName": self.queue.rsplit("/", 1)[-1],
                "X-CloudTasks-TaskName": task_id,
                "X-CloudTasks-TaskRetryCount": str(attempt),
                "X-CloudTasks-TaskETA": f"{fake.eta:.6f}",
                "Authorization": "Bearer " + self._mint(
                    http.oidc_token.service_account_email,
                    http.oidc_token.audience or http.url,
                ),
            }
            try:
                reply = requests.post(http.url, headers=headers, data=http.body,
                                      timeout=deadline)
                fake.statuses.append(reply.status_code)
                if reply.ok:
                    break
            except requests.RequestException:
                fake.statuses.append(None)
            backoff = min(self._retry.max_backoff, self._retry.min_backoff * 2 ** attempt)
            if attempt + 1 < self._retry.max_attempts:
                let_time_pass(backoff, "the queue's backoff before its next attempt")
        fake.done.set()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                match = _TASK_PATH.fullmatch(path)
                if match is None:
                    self._answer(404, _error(404, "NOT_FOUND", f"no method at {self.path}"))
                    return
                view = (parse_qs(query).get("responseView") or [""])[0]
                status, answer = fake._get(match.group(1), view)
                with fake._lock:
                    fake.get_calls.append((match.group(1), view or "BASIC", status))
                self._answer(status, answer)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                match = _PATH.fullmatch(self.path.split("?", 1)[0])
                if match is None:
                    self._answer(404, _error(404, "NOT_FOUND", f"no method at {self.path}"))
                    return
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self._answer(400, _error(400, "INVALID_ARGUMENT", "body is not JSON"))
                    return
                status, answer = fake._create(match.group(1), body)
                name = str(body.get("task", {}).get("name", ""))
                with fake._lock:
                    dropped = fake.drop_create_replies > 0 and status == 200
                    if dropped:
                        fake.drop_create_replies -= 1
                    fake.create_calls.append((name, None if dropped else status))
                if dropped:
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(2)  # created, and the reply lost
                    self.close_connection = True
                    return
                self._answer(status, answer)

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _task_problem(parent: str, task: tasks_v2.Task) -> str | None:
    """What the API refuses in a task that its type accepts (documented in tasks_v2.Task
    and HttpRequest)."""
    prefix = f"{parent}/tasks/"
    if task.name and not (task.name.startswith(prefix)
                          and _TASK_ID.fullmatch(task.name[len(prefix):])):
        return f"Task name must be {prefix}TASK_ID with TASK_ID [A-Za-z0-9_-]{{1,500}}"
    http = task.http_request
    if not http.url.startswith(("http://", "https://")):
        return "HttpRequest.url must be an http(s) URL"
    deadline = task.dispatch_deadline.total_seconds()
    if deadline and not 15 <= deadline <= 1800:
        return "dispatch_deadline must be in the interval [15 seconds, 30 minutes]"
    if not http.oidc_token.service_account_email:
        return "the kit's tasks carry an OIDC token (oidcToken.serviceAccountEmail)"
    reserved = [k for k in http.headers if k.lower().startswith(("x-google-", "x-appengine-"))]
    if reserved:
        return f"headers {reserved} are for Google use only (HttpRequest.headers)"
    size = sum(len(k) + len(v) for k, v in http.headers.items())
    if size >= MAX_HEADER_BYTES:
        return f"The size of the headers must be less than 80KB (got {size} bytes)"
    if http.body and http.http_method not in (
        tasks_v2.HttpMethod.POST, tasks_v2.HttpMethod.PUT, tasks_v2.HttpMethod.PATCH
    ):
        return "A request body is allowed only if the HTTP method is POST, PUT, or PATCH"
    return None


def _task_json(task: tasks_v2.Task, *, full: bool) -> dict[str, Any]:
    """The Task as the API returns it in the FULL view or the BASIC one (no body)."""
    shown: dict[str, Any] = json.loads(  # enums by name, as the REST API answers
        tasks_v2.Task.to_json(task, use_integers_for_enums=False))
    if not full:
        shown.get("httpRequest", {}).pop("body", None)
    shown["view"] = "FULL" if full else "BASIC"
    return shown


def _error(code: int, status: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "status": status, "message": message}}


def decoded_body(task: FakeTask) -> str:
    return bytes(task.task.http_request.body).decode()

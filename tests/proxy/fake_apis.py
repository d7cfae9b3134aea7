"""A local stand-in for the Google Cloud APIs the proxy calls, on 127.0.0.1.

One threaded HTTP server answers the three start methods with the real paths and
response shapes (Workflows executions.create, Cloud Run v2 jobs.run, and Pub/Sub
topics.publish to the topic a Cloud Build trigger listens to) plus an OAuth token
endpoint for service-account credentials. It records every request, and can be
scripted to fail with a status, answer slowly (past the proxy's timeout: a lost reply),
or drop the connection; `starts` says whether the
scripted request still started an execution (a slow or dropped answer usually has).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import re
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

WORKFLOW = "workflow"
RUN_JOB = "run_job"
BUILD_TRIGGER = "build_trigger"

_PATHS = [
    (WORKFLOW, re.compile(r"/v1/(projects/[^/]+/locations/[^/]+/workflows/[^/:]+)/executions")),
    (RUN_JOB, re.compile(r"/v2/(projects/[^/]+/locations/[^/]+/jobs/[^/:]+):run")),
    # A build trigger starts on a message to its topic: the resource seen is the topic.
    (BUILD_TRIGGER, re.compile(r"/v1/(projects/[^/]+/topics/[^/:]+):publish")),
]
# Google's error status for each HTTP status the fake answers with (unless scripted).
GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
    404: "NOT_FOUND", 408: "DEADLINE_EXCEEDED", 409: "ABORTED", 429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED",
}


@dataclass(frozen=True)
class Behaviour:
    """How the fake answers one start request."""

    status: int = 200
    delay: float = 0.0  # seconds before answering
    starts: bool | None = None  # did an execution start? default: a 2xx status
    drop: bool = False  # close the connection instead of answering
    google_status: str | None = None  # the error's status; default by HTTP status

    @property
    def started(self) -> bool:
        return (200 <= self.status < 300) if self.starts is None else self.starts


@dataclass
class StartRequest:
    kind: str
    resource: str
    headers: dict[str, str]
    body: Any
    token: str | None
    behaviour: Behaviour
    execution: str | None = None  # set when the request started an execution
    answered: int | None = None  # the status written back (None: dropped or client gone)
    received_at: float = field(default_factory=time.monotonic)


def token_of(kind: str, body: Any, names: dict[str, str]) -> str | None:
    """Where the proxy put the token, read the way the downstream would read it."""
    try:
        if kind == WORKFLOW:
            return json.loads(body["argument"]).get(names[WORKFLOW])  # type: ignore[no-any-return]
        if kind == RUN_JOB:
            for container in body["overrides"]["containerOverrides"]:
                for env in container.get("env", []):
                    if env["name"] == names[RUN_JOB]:
                        return env["value"]  # type: ignore[no-any-return]
            return None
        (message,) = body["messages"]
        data = json.loads(base64.b64decode(message["data"], validate=True))
        return data.get(names[BUILD_TRIGGER])  # type: ignore[no-any-return]
    except (KeyError, TypeError, ValueError):
        return None


class FakeGoogleApis:
    def __init__(self, token_names: dict[str, str] | None = None) -> None:
        self.token_names = token_names or {
            WORKFLOW: "dedup_token", RUN_JOB: "DEDUP_TOKEN", BUILD_TRIGGER: "_DEDUP_TOKEN",
        }
        self.requests: list[StartRequest] = []
        self.token_requests = 0
        self.bad_paths: list[str] = []
        # Called in the server thread when an execution starts, before the answer is sent
        # (e.g. to run the workflow's downstream step).
        self.on_start: Callable[[StartRequest], None] | None = None
        self._script: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._counter = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def token_uri(self) -> str:
        return f"{self.url}/token"

    def script(self, *behaviours: Behaviour) -> None:
        """The next start requests (of any kind) get these answers, in order."""
        with self._lock:
            self._script.extend(behaviours)

    def started(self, kind: str | None = None) -> list[StartRequest]:
        with self._lock:
            return [r for r in self.requests if r.execution and kind in (None, r.kind)]

    def received(self, kind: str | None = None) -> list[StartRequest]:
        with self._lock:
            return [r for r in self.requests if kind in (None, r.kind)]

    def __enter__(self) -> FakeGoogleApis:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- the server side -----------------------------------------------------------------

    def _next(self) -> Behaviour:
        with self._lock:
            return self._script.popleft() if self._script else Behaviour()

    def _record(self, request: StartRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _start(self, request: StartRequest) -> dict[str, Any]:
        n = next(self._counter)
        if request.kind == BUILD_TRIGGER:
            # What the trigger then starts is not the publisher's to see: the message ID.
            request.execution = str(10**15 + n)
            return {"messageIds": [request.execution]}
        project, location = request.resource.split("/")[1], request.resource.split("/")[3]
        if request.kind == WORKFLOW:
            request.execution = f"{request.resource}/executions/{uuid.uuid4()}"
            return {
                "name": request.execution, "state": "ACTIVE",
                "argument": request.body.get("argument"), "workflowRevisionId": "000001-fake",
            }
        operation = f"projects/{project}/locations/{location}/operations/{uuid.uuid4()}"
        job = request.resource.rsplit("/", 1)[1]
        request.execution = f"{request.resource}/executions/{job}-{n:05d}"
        return {
            "name": operation,
            "metadata": {
                "@type": "type.googleapis.com/google.cloud.run.v2.Execution",
                "name": request.execution, "job": job,
            },
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if self.path == "/token":
                    with fake._lock:
                        fake.token_requests += 1
                    self._answer(200, {"access_token": f"fake-token-{uuid.uuid4().hex[:8]}",
                                       "expires_in": 3600, "token_type": "Bearer"})
                    return
                routed = _route(self.path)
                if routed is None:
                    with fake._lock:
                        fake.bad_paths.append(self.path)
                    self._answer(404, _error(Behaviour(404), f"no such method: POST {self.path}"))
                    return
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self._answer(400, _error(Behaviour(400), "request body is not JSON"))
                    return
                kind, resource = routed
                behaviour = fake._next()
                request = StartRequest(
                    kind=kind, resource=resource,
                    headers={k.lower(): v for k, v in self.headers.items()}, body=body,
                    token=token_of(kind, body, fake.token_names), behaviour=behaviour,
                )
                fake._record(request)
                answer: tuple[int, Any] = (behaviour.status, None)
                if behaviour.started:
                    payload = fake._start(request)
                    if fake.on_start is not None:
                        fake.on_start(request)
                    answer = (behaviour.status, payload)
                if not 200 <= behaviour.status < 300:
                    answer = (behaviour.status, _error(behaviour, "scripted failure"))
                time.sleep(behaviour.delay)
                if behaviour.drop:
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                try:
                    self._answer(*answer)
                    request.answered = answer[0]
                except OSError:
                    self.close_connection = True  # the client gave up waiting

        return Handler


def _route(path: str) -> tuple[str, str] | None:
    """(kind, resource) of a start method's path."""
    for kind, pattern in _PATHS:
        match = pattern.fullmatch(path)
        if match:
            return kind, match.group(1)
    return None


def _error(behaviour: Behaviour, message: str) -> dict[str, Any]:
    status = behaviour.google_status or GOOGLE_STATUS.get(behaviour.status, "UNKNOWN")
    return {"error": {"code": behaviour.status, "message": message, "status": status}}

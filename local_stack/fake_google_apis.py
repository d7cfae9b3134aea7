"""A local stand-in for the Google Cloud APIs the proxy calls, on 127.0.0.1.

One threaded HTTP server answers the three start methods with the real paths and
response shapes (Workflows executions.create, Cloud Run v2 jobs.run, and Pub/Sub
topics.publish to the topic a Cloud Build trigger listens to) plus an OAuth token
endpoint for service-account credentials (`service_account_file` writes a key whose token
endpoint is the fake, so Application Default Credentials work offline). It records every
request, and can be scripted to fail with a status, answer slowly (past the proxy's
timeout: a lost reply), or drop the connection; `starts` says whether the scripted
request still started an execution (a slow or dropped answer usually has).

Runs are told apart by the token the proxy sends (`<run_id>.<HMAC>`, read where the
downstream reads it): `starts_per_run` counts the executions each run started, so a run
started twice downstream shows as two, and `strike_run` makes the n-th run the fake sees
fail (e.g. 403 on every start of it: a refused start), whatever order runs come in.

Used by the proxy's tests (tests/proxy/) and by `make demo`, which serves the proxy
against it (demo/local_proxy.py).
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
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from local_stack.loopback import LoopbackServer

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
    message: str = "scripted failure"  # the error's message

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


def run_id_of(token: str | None) -> str | None:
    """The run ID a proxy token names (`<run_id>.<HMAC>`), or None without a token."""
    return token.split(".", 1)[0] if token else None


@dataclass
class _Strike:
    """`strike_run`: the n-th run seen (of `resource`, if set) gets `behaviour`."""

    nth: int
    behaviour: Behaviour
    resource: str | None
    times: int | None  # start requests of that run answered so; None: every one
    run_id: str | None = None  # the run struck, once seen
    used: int = 0


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


class FakeGoogleApis(LoopbackServer):
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
        self._strikes: list[_Strike] = []
        self._runs_seen: dict[str | None, list[str]] = {}
        self._lock = threading.Lock()
        self._counter = itertools.count(1)
        super().__init__()

    @property
    def token_uri(self) -> str:
        return f"{self.url}/token"

    def script(self, *behaviours: Behaviour) -> None:
        """The next start requests (of any kind) get these answers, in order."""
        with self._lock:
            self._script.extend(behaviours)

    def strike_run(
        self,
        nth: int,
        behaviour: Behaviour,
        *,
        resource: str | None = None,
        times: int | None = None,
    ) -> None:
        """The `nth` distinct run (1 = the first, by the token's run ID) whose start reaches
        the fake (for `resource`, if given: the resource a start names, a build trigger's
        topic) gets `behaviour`: on every start request of that run, or its first `times`.
        E.g. Behaviour(403) refuses that run for good; Behaviour(503), times=1, fails its
        first start only (a retryable error: the retry starts it)."""
        if nth < 1:
            raise ValueError("nth counts from 1")
        with self._lock:
            self._strikes.append(_Strike(nth, behaviour, resource, times))

    def struck_runs(self) -> dict[str, Behaviour]:
        """Run ID -> the behaviour `strike_run` gave it, for each run struck so far."""
        with self._lock:
            return {s.run_id: s.behaviour for s in self._strikes if s.run_id is not None}

    def starts_per_run(self, kind: str | None = None) -> Counter[str]:
        """Run ID (from the token) -> how many executions its start requests started."""
        with self._lock:
            return Counter(
                run_id for r in self.requests
                if r.execution and kind in (None, r.kind)
                and (run_id := run_id_of(r.token)) is not None
            )

    def started(self, kind: str | None = None) -> list[StartRequest]:
        with self._lock:
            return [r for r in self.requests if r.execution and kind in (None, r.kind)]

    def received(self, kind: str | None = None) -> list[StartRequest]:
        with self._lock:
            return [r for r in self.requests if kind in (None, r.kind)]

    # -- the server side -----------------------------------------------------------------

    def _next(self, resource: str, token: str | None) -> Behaviour:
        with self._lock:
            struck = self._strike(resource, run_id_of(token))
            if struck is not None:
                return struck
            return self._script.popleft() if self._script else Behaviour()

    def _strike(self, resource: str, run_id: str | None) -> Behaviour | None:
        """Under the lock: the behaviour `strike_run` gives this start, if any."""
        if run_id is None or not self._strikes:
            return None
        for key in {None, resource}:
            seen = self._runs_seen.setdefault(key, [])
            if run_id not in seen:
                seen.append(run_id)
        for strike in self._strikes:
            if strike.run_id is None and strike.resource in (None, resource):
                seen = self._runs_seen[strike.resource]
                if len(seen) >= strike.nth and seen[strike.nth - 1] == run_id:
                    strike.run_id = run_id
            if strike.run_id == run_id and (strike.times is None or strike.used < strike.times):
                strike.used += 1
                return strike.behaviour
        return None

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
                token = token_of(kind, body, fake.token_names)
                behaviour = fake._next(resource, token)
                request = StartRequest(
                    kind=kind, resource=resource,
                    headers={k.lower(): v for k, v in self.headers.items()}, body=body,
                    token=token, behaviour=behaviour,
                )
                fake._record(request)
                answer: tuple[int, Any] = (behaviour.status, None)
                if behaviour.started:
                    payload = fake._start(request)
                    if fake.on_start is not None:
                        fake.on_start(request)
                    answer = (behaviour.status, payload)
                if not 200 <= behaviour.status < 300:
                    answer = (behaviour.status, _error(behaviour, behaviour.message))
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


def service_account_file(directory: Path, token_uri: str, project: str) -> Path:
    """A service-account key whose token endpoint is the fake (`FakeGoogleApis.token_uri`):
    with GOOGLE_APPLICATION_CREDENTIALS naming it, Application Default Credentials (what
    the proxy authenticates with) fetch their access tokens from the fake, offline."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "proxy-sa.json"
    path.write_text(json.dumps({
        "type": "service_account",
        "project_id": project,
        "private_key_id": "fake-key-id",
        "private_key": pem,
        "client_email": f"scheduler-proxy@{project}.iam.gserviceaccount.com",
        "client_id": "100000000000000000001",
        "token_uri": token_uri,
    }))
    return path

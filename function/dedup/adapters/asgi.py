"""DedupMiddleware: the protocol around any ASGI app (FastAPI, Starlette), in pure ASGI.

    app.add_middleware(DedupMiddleware, paths=["/tasks/export"])

Its settings are the kit function's DEDUP_* environment (ServiceGuard, built at the app's
start-up). A POST to a guarded path is one delivery: its body is read (over
DEDUP_MAX_BODY_BYTES: the kit's 413), then the protocol answers it (ServiceGuard's
handler: the kit's exact answers and one log line per delivery) on a worker thread of the
middleware's own, because its Firestore calls block. When the protocol runs the job, the
job is the wrapped app itself, called for the request on the event loop with the body
given back to it: a 2xx is the run's success (its body the run's result, by
guard.app_answer: parsed when its content type says JSON, else text), anything else
or an exception a failure (the claim released, 500, so the retry runs at once; a non-2xx
with guard.PERMANENT_FAILURE_HEADER, or PermanentFailure raised, a permanent one). The
client gets the protocol's answer, as JSON, never the app's own response.

The job never hears the client leave: Scheduler hangs up at its attempt deadline while the
job runs on, and a response that watches receive() for http.disconnect (Starlette's
StreamingResponse and FileResponse under ASGI spec < 2.4) would otherwise cancel its own
generator and return as if done. After the body, the app's receive() waits until its
response has ended. A response that never sends its last body message (more_body False)
is no success: the run fails, released. The app is not offered the server's other ways to
answer (pathsend, zerocopysend, trailers), so a FileResponse comes as body messages too.

Guarded paths are route paths, as the app's router matches them: the scope's path less its
root_path (uvicorn --root-path, a Starlette Mount), as Starlette's get_route_path.

The endpoint finds its RunContext in the scope, `scope["state"]["dedup_run"]`: Starlette's
and FastAPI's `request.state.dedup_run`, or `current_run(request)`; what it logs names the
run (the run's log fields, dedup/logs.py, reach its coroutine). A long async job checks
`run.claim_lost.is_set()` between its steps (it never blocks): the shared heartbeat thread
(dedup/heartbeat.py) renews the claim while the job awaits, and sets it once the claim is
lost.

Each guarded delivery holds one of the middleware's worker threads until it is answered,
a run for as long as its job runs (the thread waits for the job's coroutine on the loop):
`max_concurrent_runs` (default DEFAULT_MAX_CONCURRENT_RUNS, 16) deliveries are in the
protocol at once; more, duplicates too, have their body read (bounded) and then wait for
a free thread before anything is claimed. Raise it for a service whose guarded jobs run
long at the same time:
`app.add_middleware(DedupMiddleware, paths=[...], max_concurrent_runs=64)`. The event loop
never waits on them: every other request is served meanwhile.

Other paths and methods, and lifespan and websocket scopes, pass through untouched (the
lifespan startup once the guard is built, when it was not given).
"""

from __future__ import annotations

import asyncio
import contextvars
import io
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from dedup.adapters.guard import AppFailed, ServiceGuard, app_answer, shared_guard
from dedup.entry.http import HttpReply
from dedup.run_context import RunContext

# The ASGI types (as Starlette spells them), declared here so no framework is imported.
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Where the endpoint finds its run: scope["state"][RUN_STATE_KEY] (request.state.dedup_run).
RUN_STATE_KEY = "dedup_run"
# Deliveries whose jobs run at once in one process (one worker thread each). Scheduler
# rarely sends one instance more than a few at a time; raise it for a service guarding
# many jobs that run long at the same times.
DEFAULT_MAX_CONCURRENT_RUNS = 16
_JSON_HEADERS = [(b"content-type", b"application/json")]
# The server's ways to answer other than http.response.body (a file by path, trailers), not
# offered to the app for a guarded delivery: its answer is collected, body and all.
_RESPONSE_EXTENSIONS = frozenset({"http.response.pathsend", "http.response.zerocopysend",
                                  "http.response.trailers"})


class HasScope(Protocol):
    """A Starlette/FastAPI Request (or WebSocket, or anything carrying an ASGI scope)."""

    @property
    def scope(self) -> Mapping[str, Any]: ...


def current_run(request: HasScope) -> RunContext:
    """The RunContext of the guarded delivery `request` is running for (FastAPI:
    `run = current_run(request)` in an endpoint taking `request: Request`)."""
    run = request.scope.get("state", {}).get(RUN_STATE_KEY)
    if not isinstance(run, RunContext):
        raise LookupError(
            f"no dedup run in this request: {request.scope.get('method')} "
            f"{request.scope.get('path')} is not a path DedupMiddleware guards")
    return run


class DedupMiddleware:
    """Guard `paths` (POST) of `app` with the protocol. `guard`: None (the usual) takes the
    process's shared_guard(), from the DEDUP_* environment, built at the app's start-up
    (its lifespan startup: a bad setting fails the start-up, as it does the kit's
    function), or at the first guarded request under a server without lifespan."""

    def __init__(
        self, app: ASGIApp, paths: Iterable[str],
        guard: ServiceGuard | None = None,
        max_concurrent_runs: int = DEFAULT_MAX_CONCURRENT_RUNS,
    ) -> None:
        self.app = app
        self.paths = frozenset(paths)
        # Not built here: Starlette builds its middleware inside the server's lifespan call,
        # and uvicorn's default lifespan ("auto") takes an exception there for an app
        # without lifespan, serves on, and every request of the app then fails.
        self._guard = guard
        if max_concurrent_runs < 1:
            raise ValueError(f"max_concurrent_runs={max_concurrent_runs} must be at least 1")
        # Not the loop's default executor (a handful of threads, shared with anything else
        # that calls asyncio.to_thread): a delivery holds its thread for its job's length.
        self._runs = ThreadPoolExecutor(max_concurrent_runs, "dedup-run")

    @property
    def guard(self) -> ServiceGuard:
        if self._guard is None:
            self._guard = shared_guard()  # built once per process (its own lock)
        return self._guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" and self._guard is None:
            await self._start_up(scope, receive, send)
            return
        if (scope["type"] != "http" or scope.get("method") != "POST"
                or route_path(scope) not in self.paths):
            await self.app(scope, receive, send)
            return
        if self._guard is None:  # no lifespan: built now, off the loop (it may read files)
            await asyncio.get_running_loop().run_in_executor(self._runs, lambda: self.guard)
        body = await self._read_body(scope, receive)
        if body is None:
            return  # the client left before sending its body: no one to answer
        if isinstance(body, HttpReply):
            await _send_reply(send, body, close=True)  # refused unread: close the connection
            return
        loop = asyncio.get_running_loop()
        headers = _headers_of(scope)

        def run_app(run: RunContext) -> Any:
            """The job, on the protocol's worker thread: the app on the loop, awaited here."""
            call = self._call_app(scope, body, receive, run)
            return asyncio.run_coroutine_threadsafe(call, loop).result()

        handler = self.guard.handler(run_app)
        context = contextvars.copy_context()  # the request's contextvars, as to_thread does
        reply = await loop.run_in_executor(
            self._runs, context.run, handler.handle, headers, body)
        await _send_reply(send, reply)

    async def _start_up(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The lifespan scope: build the guard when the server says startup, or tell it the
        start-up failed (uvicorn then exits, naming the setting); then the app's lifespan,
        with the startup message given back to it."""
        startup = await receive()
        if startup["type"] == "lifespan.startup":
            try:
                await asyncio.get_running_loop().run_in_executor(self._runs, lambda: self.guard)
            except Exception as exc:
                await send({"type": "lifespan.startup.failed",
                            "message": f"dedup: {type(exc).__name__}: {exc}"})
                return
        given_back = False

        async def replay() -> Message:
            nonlocal given_back
            if not given_back:
                given_back = True
                return startup
            return await receive()

        await self.app(scope, replay, send)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | HttpReply | None:
        """The body (at most the cap and one byte read), or the kit's 413 for one over the
        cap (a declared Content-Length over it: unread), or None if the client left."""
        cap = self.guard.settings.max_body_bytes
        declared = _content_length(scope)
        received = bytearray()
        if declared is None or declared <= cap:
            while len(received) <= cap:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                received += message.get("body", b"")
                if not message.get("more_body", False):
                    break
        # The guard's own check, so the 413 and its log line are the kit's.
        return self.guard.read_body(declared, io.BytesIO(bytes(received)))

    async def _call_app(
        self, scope: Scope, body: bytes, receive: Receive, run: RunContext
    ) -> Any:
        """Run the app for the request with `run` in its scope; its 2xx body is the result."""
        state = {**scope.get("state", {}), RUN_STATE_KEY: run}
        given_back = False
        response = _CollectedResponse()

        async def replay() -> Message:
            nonlocal given_back
            if not given_back:
                given_back = True
                return {"type": "http.request", "body": body, "more_body": False}
            # Never the client's disconnect (Scheduler hanging up must not stop the job):
            # the connection ends, for the app, once its own response has.
            await response.ended.wait()
            return {"type": "http.disconnect"}

        extensions = {name: value for name, value in (scope.get("extensions") or {}).items()
                      if name not in _RESPONSE_EXTENSIONS}
        await self.app({**scope, "state": state, "extensions": extensions}, replay,
                       response.send)
        return response.result()


class _CollectedResponse:
    """The app's response to a guarded delivery, kept (the client gets the protocol's)."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.body = bytearray()
        # Set by the response's last body message (more_body False): the answer is whole.
        self.ended = asyncio.Event()

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            self.headers = {bytes(name).decode("latin-1").lower(): bytes(value).decode("latin-1")
                            for name, value in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            self.body += message.get("body", b"")
            if not message.get("more_body", False):
                self.ended.set()

    def result(self) -> Any:
        """A whole answer as the run's result, by guard.app_answer's rule; one the app never
        gave, or a 2xx cut before its end, fails the run (AppFailed: released)."""
        if self.status is None:
            raise AppFailed("the app returned without answering the delivery")
        result = app_answer(self.status, self.headers, bytes(self.body), "the app")
        if not self.ended.is_set():
            raise AppFailed(f"the app's {self.status} answer stopped before its end "
                            f"({len(self.body)} bytes sent): the job did not finish")
        return result


def route_path(scope: Scope) -> str:
    """The path the app's router matches: the scope's path less its root_path (which ASGI
    servers and Starlette's Mount include in it), as Starlette's get_route_path."""
    path = str(scope.get("path", ""))
    root_path = str(scope.get("root_path") or "")
    if not root_path or not path.startswith(root_path):
        return path
    if path == root_path:
        return ""
    return path[len(root_path):] if path[len(root_path)] == "/" else path


def _headers_of(scope: Scope) -> dict[str, str]:
    """The request's headers by name (a repeated one joined with commas, as HTTP reads it)."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", []):
        name, value = bytes(raw_name).decode("latin-1"), bytes(raw_value).decode("latin-1")
        headers[name] = f"{headers[name]},{value}" if name in headers else value
    return headers


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if bytes(name).lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses a malformed one before the app sees it
    return None


async def _send_reply(send: Send, reply: HttpReply, close: bool = False) -> None:
    text = reply.json_text.encode()
    headers = [*_JSON_HEADERS, (b"content-length", str(len(text)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": text, "more_body": False})

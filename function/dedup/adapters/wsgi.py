"""The protocol in a WSGI service: `deduplicated`, a decorator for a Flask view, and
`DedupWsgiMiddleware`, a wrapper for any WSGI app (docs/own-service.md).

Both answer as the kit's function does (ServiceGuard, guard.py): the delivery's reply as
JSON with its status, one log line. Flask is imported only when a Flask decorator is used,
so a plain WSGI service imports this module without it.

Flask (the view takes the run; what it returns is the run's result, replayed to duplicates):

    @app.post("/tasks/export")
    @deduplicated                # or @deduplicated(guard=my_guard)
    def export(run: RunContext) -> dict[str, Any]: ...

Any WSGI app (a POST to a guarded path runs the protocol; its job calls the app, which
finds the run in environ["dedup.run"]; a 2xx answer completes the run with the app's body
as its result, by guard.app_answer: parsed when its content type says JSON, else
text; any other answer, or an exception, fails it: released, 500, and Scheduler's retry
runs it again; a non-2xx answer with guard.PERMANENT_FAILURE_HEADER fails it for good):

    app = DedupWsgiMiddleware(app, paths=["/tasks/export"])

Paths are matched on PATH_INFO, the path within the app (a server or dispatcher mounting
it under a prefix puts that in SCRIPT_NAME), so a route's own path is what is listed.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from types import TracebackType
from typing import TYPE_CHECKING, Any, overload

from dedup.adapters.guard import ServiceGuard, app_answer, shared_guard
from dedup.entry.http import HttpReply, ReadsBytes
from dedup.run_context import Job, RunContext

if TYPE_CHECKING:
    import flask

RUN_ENVIRON_KEY = "dedup.run"
"""Where the wrapped app finds the RunContext of the run its request executes."""

_JSON = "application/json"

ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None] | None
StartResponse = Callable[..., Callable[[bytes], object]]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
View = Callable[[RunContext], Any]


# -- one delivery, from a WSGI environ (Flask's and functions-framework's requests too) -----


def environ_headers(environ: Mapping[str, Any]) -> dict[str, str]:
    """A request's headers as WSGI gives them (HTTP_X_FOO, CONTENT_TYPE) back as names."""
    headers = {key[5:].replace("_", "-"): str(value) for key, value in environ.items()
               if key.startswith("HTTP_")}
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            headers[key.replace("_", "-")] = str(environ[key])
    return headers


def declared_length(environ: Mapping[str, Any]) -> int | None:
    """CONTENT_LENGTH as a number; None for a body that ends on its own (chunked: the
    server says wsgi.input_terminated). Without either there is no body (PEP 3333: never
    read past CONTENT_LENGTH), and a malformed one counts as none."""
    raw = str(environ.get("CONTENT_LENGTH") or "").strip()
    if raw.isdigit():
        return int(raw)
    return None if environ.get("wsgi.input_terminated") else 0


class _Limited:
    """At most `left` bytes of `stream`: a server may hand over its socket as wsgi.input,
    where reading past the body would wait for the client's next request."""

    def __init__(self, stream: ReadsBytes, left: int | None) -> None:
        self._stream, self._left = stream, left

    def read(self, size: int = -1, /) -> bytes:
        if self._left is None:
            return self._stream.read(size)
        wanted = self._left if size < 0 else min(size, self._left)
        chunk = self._stream.read(wanted) if wanted else b""
        self._left -= len(chunk)
        return chunk


def answer(guard: ServiceGuard, job: Job, environ: dict[str, Any]) -> tuple[HttpReply, bool]:
    """The reply to one delivery of `job`, and whether its body was read: a body over
    DEDUP_MAX_BODY_BYTES is refused (413) unread, before anything else. A body read is put
    back in `environ` (wsgi.input), so the job reads it as it would have (flask.request's
    get_json(), a wrapped app's own parsing), as well as from the run (RunContext.body)."""
    length = declared_length(environ)
    read = guard.read_body(length, _Limited(environ["wsgi.input"], length))
    if isinstance(read, HttpReply):
        return read, False
    environ["wsgi.input"] = io.BytesIO(read)
    environ["CONTENT_LENGTH"] = str(len(read))
    return guard.handler(job).handle(environ_headers(environ), read), True


# -- Flask and functions-framework: a flask.Request in, a flask.Response out ------------


def flask_response(reply: HttpReply, *, body_read: bool = True,
                   headers: Mapping[str, str] | None = None) -> flask.Response:
    """`reply` as JSON with its status. One sent without reading the request's body (a 413)
    is streamed and closes the connection: functions-framework reads the whole request
    after any other reply (its `read_request` hook), which would buffer the body."""
    import flask

    text = reply.json_text.encode()
    if body_read:
        return flask.Response(text, reply.status, dict(headers or {}), mimetype=_JSON)
    return flask.Response(iter([text]), reply.status, {
        "Content-Type": _JSON, **(headers or {}), "Content-Length": str(len(text)),
        "Connection": "close",
    })


def answer_flask_request(guard: ServiceGuard, job: Job, request: flask.Request) -> flask.Response:
    """One delivery of `job` in a Flask request (a view's, or the one functions-framework
    passes): its headers and bounded body through the protocol, the reply as JSON."""
    reply, body_read = answer(guard, job, request.environ)
    return flask_response(reply, body_read=body_read)


@overload
def deduplicated(view: View, /) -> Callable[..., flask.Response]: ...


@overload
def deduplicated(
    *, guard: ServiceGuard | None = None
) -> Callable[[View], Callable[..., flask.Response]]: ...


def deduplicated(
    view: View | None = None, /, *, guard: ServiceGuard | None = None
) -> Callable[..., flask.Response] | Callable[[View], Callable[..., flask.Response]]:
    """A Flask view that takes the run (RunContext) and returns its result, run once per
    scheduled run. The guard is the process's (shared_guard, from the DEDUP_* environment)
    unless given, and is built when the view is decorated: a bad setting fails start-up.
    URL variables of the route reach the view as keyword arguments, after the run. The
    body is read (bounded) before the view runs and put back for it: nothing before the
    view (a before_request hook) may read it first."""

    def decorate(function: View) -> Callable[..., flask.Response]:
        service = guard or shared_guard()

        @functools.wraps(function)
        def view_function(**url_values: Any) -> flask.Response:
            import flask

            job: Job = (functools.partial(function, **url_values) if url_values else function)
            return answer_flask_request(service, job, flask.request)

        return view_function

    return decorate if view is None else decorate(view)


# -- any WSGI app ------------------------------------------------------------------------


class _Collected:
    """What the wrapped app answered: status line, headers, body."""

    def __init__(self) -> None:
        self.status = ""
        self.headers: list[tuple[str, str]] = []
        self.chunks: list[bytes] = []

    def start_response(self, status: str, headers: list[tuple[str, str]],
                       exc_info: ExcInfo = None) -> Callable[[bytes], object]:
        self.status, self.headers = status, headers
        return self.chunks.append

    @property
    def code(self) -> int:
        return int(self.status.split(" ", 1)[0] or 0)

    def header_values(self) -> dict[str, str]:
        return {name.lower(): value for name, value in self.headers}


class DedupWsgiMiddleware:
    """`app`, with each POST to one of `paths` run once per scheduled run (the module's
    docstring); every other request reaches `app` untouched."""

    def __init__(self, app: WsgiApp, paths: Iterable[str],
                 guard: ServiceGuard | None = None) -> None:
        self.app = app
        self.paths = frozenset(paths)
        # Built with the app (at start-up): a bad DEDUP_* setting fails it, not a request.
        self.guard = guard or shared_guard()

    def __call__(self, environ: dict[str, Any],
                 start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "POST" or environ.get("PATH_INFO") not in self.paths:
            return self.app(environ, start_response)
        reply, _ = answer(self.guard, functools.partial(self._run_app, environ), environ)
        text = reply.json_text.encode()
        start_response(f"{reply.status} {_reason(reply.status)}", [
            ("Content-Type", _JSON), ("Content-Length", str(len(text)))])
        return [text]

    def _run_app(self, environ: Mapping[str, Any], run: RunContext) -> Any:
        """The job: the wrapped app given the request (its body put back by `answer`, the
        run in environ[RUN_ENVIRON_KEY]); its 2xx body is the result, anything else fails."""
        request = {**environ, RUN_ENVIRON_KEY: run}
        collected = _Collected()
        answered = self.app(request, collected.start_response)
        try:
            collected.chunks.extend(answered)
        finally:
            close = getattr(answered, "close", None)
            if close is not None:
                close()
        return app_answer(collected.code, collected.header_values(), b"".join(collected.chunks),
                          str(environ.get("PATH_INFO")))


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""

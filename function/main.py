"""Cloud Run functions entry points: thin by design; the protocol lives in dedup/.

- handle_scheduled_job: runs the job logic (its job table's routes; DEDUP_JOB when there
  are no routes: dedup/job_logic.py scheduled_jobs) once per run.
- proxy_scheduled_job: starts a Workflows / Cloud Run job / Cloud Build execution once
  per run, with a token of the run (its dedup key and an HMAC: dedup/proxy/tokens.py) as
  idempotency token (DEDUP_PROXY_*, DEDUP_TOKEN_SECRET).
- watch_scheduled_runs: the run watchdog (dedup/watchdog/tick.py): reports missed, failed and
  overlong runs of the jobs in its job table; reads run records, writes only its own
  cursor documents (`<DEDUP_COLLECTION>_watchdog`) and re-run requests' status; when given
  DEDUP_WATCH_TARGET_URL, delivers catch-up runs and re-runs (dedup/watchdog/delivery.py). A tick
  runs on POST only (what its Scheduler job sends); any other method (a probe's GET) gets
  a 405 and reads nothing.

Every entry point first refuses a body over DEDUP_MAX_BODY_BYTES (default 1 MiB) with a
413, before reading the rest of it (dedup/entry/http.py read_bounded_body).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol

import flask
import functions_framework

from dedup.adapters.wsgi import flask_response
from dedup.entry.app import build_handler_from_env, build_proxy_handler_from_env
from dedup.entry.http import (
    BodyTooLarge,
    HttpReply,
    emit_log_line,
    read_bounded_body,
    refuse_body,
    refuse_method,
)
from dedup.logs import configure_logging
from dedup.settings import max_body_bytes_setting


class _Handler(Protocol):
    def handle(self, headers: Mapping[str, str], body: bytes) -> HttpReply: ...


def _build_watchdog() -> _Handler:
    # Imported here: croniter is loaded only by the watchdog's instances (cold start).
    from dedup.watchdog.tick import build_watchdog_handler_from_env

    return build_watchdog_handler_from_env()


_BUILDERS: dict[str, Callable[[], _Handler]] = {
    "handle_scheduled_job": build_handler_from_env,
    "proxy_scheduled_job": build_proxy_handler_from_env,
    "watch_scheduled_runs": _build_watchdog,
}
_handlers: dict[str, _Handler] = {}
_lock = threading.Lock()


def _handler(target: str) -> _Handler:
    handler = _handlers.get(target)
    if handler is None:
        with _lock:
            handler = _handlers.get(target)
            if handler is None:
                handler = _handlers[target] = _BUILDERS[target]()
    return handler


# Job code's `logging` output, as JSON lines Cloud Logging reads as structured entries,
# each with its run's fields (dedup/logs.py); the same line format as the request log.
configure_logging(emit_log_line)

# Built once per instance, at start-up: a bad DEDUP_* setting fails the deploy, not requests.
# functions-framework sets FUNCTION_TARGET (from --target) before importing this module.
_target = os.environ.get("FUNCTION_TARGET", "")
_handler(_target if _target in _BUILDERS else "handle_scheduled_job")
_max_body_bytes = max_body_bytes_setting(os.environ)


_JSON = {"Content-Type": "application/json"}


_Reply = tuple[str, int, dict[str, str]] | flask.Response


def _unread_body_reply(reply: HttpReply, headers: Mapping[str, str] | None = None) -> _Reply:
    """A refusal sent without reading the request's body (adapters/wsgi.py says why it is
    streamed and closes the connection), as a team's functions-framework function sends it."""
    return flask_response(reply, body_read=False, headers=headers)


def _serve(target: str, request: flask.Request) -> _Reply:
    # The body cap comes first, for every entry point: an oversized body is refused before
    # it is read in full, parsed or written anywhere.
    try:
        body = read_bounded_body(request.content_length, request.stream, _max_body_bytes)
    except BodyTooLarge as exc:
        return _unread_body_reply(refuse_body(str(exc), emit_log_line, time.perf_counter()))
    reply = _handler(target).handle(dict(request.headers), body)
    return reply.json_text, reply.status, _JSON


@functions_framework.http
def handle_scheduled_job(request: flask.Request) -> _Reply:
    return _serve("handle_scheduled_job", request)


@functions_framework.http
def proxy_scheduled_job(request: flask.Request) -> _Reply:
    return _serve("proxy_scheduled_job", request)


_WATCHDOG_METHOD = "POST"


@functions_framework.http
def watch_scheduled_runs(request: flask.Request) -> _Reply:
    # A tick reads every watched job's records and may deliver runs: only the watchdog's
    # Scheduler job (a POST) starts one, never a probe or a browser's GET, HEAD or OPTIONS.
    if request.method != _WATCHDOG_METHOD:
        started = time.perf_counter()
        refused = refuse_method(request.method, _WATCHDOG_METHOD, emit_log_line, started)
        return _unread_body_reply(refused, {"Allow": _WATCHDOG_METHOD})
    return _serve("watch_scheduled_runs", request)

"""Cloud Run functions entry points: thin by design; the protocol lives in dedup/.

- handle_scheduled_job: runs the job logic (DEDUP_JOB / DEDUP_JOB_ROUTES) once per run.
- proxy_scheduled_job: starts a Workflows / Cloud Run job / Cloud Build execution once
  per run, with the run's dedup key as idempotency token (DEDUP_PROXY_*).
- watch_scheduled_runs: the run watchdog (dedup/watchdog.py): reports missed, failed and
  overlong runs of the jobs in DEDUP_WATCH_JOBS; reads run records, writes only its own
  cursor documents (`<DEDUP_COLLECTION>_watchdog`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from typing import Protocol

import flask
import functions_framework

from dedup.app import build_handler_from_env, build_proxy_handler_from_env
from dedup.http import HttpReply


class _Handler(Protocol):
    def handle(self, headers: Mapping[str, str], body: bytes) -> HttpReply: ...


def _build_watchdog() -> _Handler:
    # Imported here: croniter is loaded only by the watchdog's instances (cold start).
    from dedup.watchdog import build_watchdog_handler_from_env

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


# Built once per instance, at start-up: a bad DEDUP_* setting fails the deploy, not requests.
# functions-framework sets FUNCTION_TARGET (from --target) before importing this module.
_target = os.environ.get("FUNCTION_TARGET", "")
_handler(_target if _target in _BUILDERS else "handle_scheduled_job")


def _serve(target: str, request: flask.Request) -> tuple[str, int, dict[str, str]]:
    reply = _handler(target).handle(dict(request.headers), request.get_data())
    return reply.json_text, reply.status, {"Content-Type": "application/json"}


@functions_framework.http
def handle_scheduled_job(request: flask.Request) -> tuple[str, int, dict[str, str]]:
    return _serve("handle_scheduled_job", request)


@functions_framework.http
def proxy_scheduled_job(request: flask.Request) -> tuple[str, int, dict[str, str]]:
    return _serve("proxy_scheduled_job", request)


@functions_framework.http
def watch_scheduled_runs(request: flask.Request) -> tuple[str, int, dict[str, str]]:
    return _serve("watch_scheduled_runs", request)

"""Cloud Run functions entry points: thin by design; the protocol lives in dedup/.

- handle_scheduled_job: runs the job logic (DEDUP_JOB / DEDUP_JOB_ROUTES) once per run.
- proxy_scheduled_job: starts a Workflows / Cloud Run job / Cloud Build execution once
  per run, with the run's dedup key as idempotency token (DEDUP_PROXY_*).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import flask
import functions_framework

from dedup.app import build_handler_from_env, build_proxy_handler_from_env
from dedup.http import DedupHandler

_BUILDERS: dict[str, Callable[[], DedupHandler]] = {
    "handle_scheduled_job": build_handler_from_env,
    "proxy_scheduled_job": build_proxy_handler_from_env,
}
_handlers: dict[str, DedupHandler] = {}
_lock = threading.Lock()


def _handler(target: str) -> DedupHandler:
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

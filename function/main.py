"""Cloud Run functions entry point: thin by design; the protocol lives in dedup/."""

from __future__ import annotations

import flask
import functions_framework

from dedup.app import build_handler_from_env

# Built once per instance, at start-up: a bad DEDUP_* setting fails the deploy, not requests.
_handler = build_handler_from_env()


@functions_framework.http
def handle_scheduled_job(request: flask.Request) -> tuple[str, int, dict[str, str]]:
    reply = _handler.handle(dict(request.headers), request.get_data())
    return reply.json_text, reply.status, {"Content-Type": "application/json"}

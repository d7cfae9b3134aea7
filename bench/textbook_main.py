"""functions-framework entry point of the comparator, the twin of function/main.py:
`functions-framework --source bench/textbook_main.py --target handle_scheduled_job`."""

from __future__ import annotations

import flask
import functions_framework

from bench.textbook import build_textbook_handler_from_env

_handler = build_textbook_handler_from_env()


@functions_framework.http
def handle_scheduled_job(request: flask.Request) -> tuple[str, int, dict[str, str]]:
    reply = _handler.handle(dict(request.headers), request.get_data())
    return reply.json_text, reply.status, {"Content-Type": "application/json"}

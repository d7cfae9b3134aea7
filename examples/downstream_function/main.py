"""Example downstream Cloud Run function, called by examples/workflow.yaml.

It receives the idempotency token that the kit's proxy gave the workflow and performs
its state-changing step at most once per token, however often Workflows retries the
call or the proxy's retry starts a second execution: the kit's helper claims the token
atomically in Firestore first (dedup.idempotency, same store and record format as the
Scheduler dedup).

Request: POST {"dedup_token": "<token>", "payload": {...}}
Replies: 200 {"outcome": "applied" | "already_applied", "result": ...}
         409 {"outcome": "in_progress"}  (another attempt holds the token: retry later)
         400 {"error": "..."}            (no or malformed token: retrying cannot help)
         500 {"outcome": "failed" | "store_unavailable"}  (nothing recorded: retry)

Settings: the kit's DEDUP_PROJECT, DEDUP_LOCATION, DEDUP_DATABASE, DEDUP_COLLECTION,
DEDUP_LEASE_SECONDS, ... (see the kit's README); EXAMPLE_LEDGER: file the example's
"state change" appends to (stands in for your database write, payment or e-mail).
Serve locally: functions-framework --target apply_daily_report (with `dedup` importable).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import flask
import functions_framework

from dedup.idempotency import IdempotencyGuard, StepInProgress, validate_token
from dedup.protocol import RunContext
from dedup.store import StoreUnavailable

log = logging.getLogger(__name__)

STEP = "apply-daily-report"
# Built at start-up: a bad DEDUP_* setting fails the deploy, not requests.
guard = IdempotencyGuard.from_env(step=STEP)


def apply_report(token: str, payload: Any, context: RunContext) -> dict[str, Any]:
    """The state-changing step: replace with yours. Runs once per token."""
    entry = {"token": token, "payload": payload, "attempt": context.attempt}
    ledger = os.environ.get("EXAMPLE_LEDGER")
    if ledger:
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode())
        finally:
            os.close(fd)
    log.info("applied report for token %s", token)
    report = payload.get("report") if isinstance(payload, dict) else None
    return {"applied": True, "report": report}


def handle(body: Any) -> tuple[dict[str, Any], int]:
    """One call, framework-free: (reply body, status)."""
    if not isinstance(body, dict):
        return {"error": "the body must be a JSON object with a dedup_token"}, 400
    try:
        token = validate_token(body.get("dedup_token"))
    except ValueError as exc:
        return {"error": str(exc)}, 400
    payload = body.get("payload")
    try:
        outcome = guard.run_once(token, lambda context: apply_report(token, payload, context))
    except StepInProgress:
        return {"outcome": "in_progress"}, 409
    except StoreUnavailable:
        log.exception("Firestore unavailable for token %s", token)
        return {"outcome": "store_unavailable"}, 500
    except Exception:
        log.exception("step %s failed for token %s (released: a retry runs it)", STEP, token)
        return {"outcome": "failed"}, 500
    return {
        "outcome": "applied" if outcome.ran else "already_applied",
        "result": outcome.result,
    }, 200


@functions_framework.http
def apply_daily_report(request: flask.Request) -> tuple[str, int, dict[str, str]]:
    body, status = handle(request.get_json(silent=True))
    return json.dumps(body), status, {"Content-Type": "application/json"}

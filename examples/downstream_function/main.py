"""Example downstream Cloud Run function, called by examples/workflow.yaml.

It receives the idempotency token that the kit's proxy gave the workflow and performs
its state-changing step at most once per token, however often Workflows retries the
call or the proxy's retry starts a second execution: the kit's helper claims the token
atomically in Firestore first (dedup.idempotency, same store and record format as the
Scheduler dedup).

Request: POST {"dedup_token": "<token>", "payload": {...}}
Replies: 200 {"outcome": "applied" | "already_applied", "result": ...}
         409 {"outcome": "in_progress"}  (another attempt holds the token: retry later)
         400 {"error": "..."}            (no or malformed token, or a body that is not a
                                          JSON object: retrying cannot help)
         403 {"error": "..."}            (a token the proxy did not mint: forged)
         413 {"error": "..."}            (a body over EXAMPLE_MAX_BODY_BYTES, default 64 KiB)
         500 {"outcome": "failed" | "store_unavailable"}  (nothing recorded: retry)

Settings: the kit's DEDUP_PROJECT, DEDUP_LOCATION, DEDUP_DATABASE, DEDUP_COLLECTION,
DEDUP_LEASE_SECONDS, ... (see the kit's README); DEDUP_TOKEN_SECRET, the proxy's token
secret (mount the stack's `<namePrefix>-token-secret` as this environment variable; the
stack grants its accessor role to the accounts in `tokenSecretReaders`); DEDUP_DATABASE
should be a database of the downstream's own (see docs/security.md); EXAMPLE_LEDGER: file
the example's "state change" appends to (stands in for your database write, payment or e-mail).
Serve locally: functions-framework --target apply_daily_report (with `dedup` importable).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import flask
import functions_framework

from dedup.entry.http import BodyTooLarge, read_bounded_body
from dedup.idempotency import ForgedToken, IdempotencyGuard, StepInProgress
from dedup.protocol import RunContext
from dedup.store import StoreUnavailable

log = logging.getLogger(__name__)

STEP = "apply-daily-report"
# Built at start-up: a bad DEDUP_* setting fails the deploy, not requests.
guard = IdempotencyGuard.from_env(step=STEP)
# The workflow posts a token and a Scheduler job's small payload: refuse anything larger
# unread, so one oversized request cannot exhaust the instance.
MAX_BODY_BYTES = int(os.environ.get("EXAMPLE_MAX_BODY_BYTES") or 64 * 1024)


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
        token = guard.check_token(body.get("dedup_token"))
    except ForgedToken as exc:
        log.warning("refused a forged token: %s", exc)
        return {"error": str(exc)}, 403
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


def parse_body(raw: bytes) -> Any:
    """The JSON body, or None if it is not JSON (or nests too deeply to parse)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


@functions_framework.http
def apply_daily_report(request: flask.Request) -> tuple[str, int, dict[str, str]]:
    try:
        raw = read_bounded_body(request.content_length, request.stream, MAX_BODY_BYTES)
    except BodyTooLarge:
        reply: tuple[dict[str, Any], int] = (
            {"error": f"request body over {MAX_BODY_BYTES} bytes (EXAMPLE_MAX_BODY_BYTES)"}, 413
        )
    else:
        reply = handle(parse_body(raw))
    return json.dumps(reply[0]), reply[1], {"Content-Type": "application/json"}

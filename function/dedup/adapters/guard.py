"""ServiceGuard: what every adapter shares, with no web framework in it.

One per process (the adapters build it once, from the DEDUP_* environment, at start-up: a
bad setting fails the start-up, as it does the kit's function): the settings, one Firestore
client, one Deduplicator (its completed-run cache and the shared heartbeat) and the ledger
of runs beyond the schedule. Each guarded job gets a DedupHandler of its own over them, so
every adapter gives the same answers: 400 for missing or malformed Scheduler headers
(nothing written), 403 for a caller not in DEDUP_ALLOWED_CALLERS (or, with
DEDUP_VERIFY_TOKEN_AUDIENCE, whose token does not verify: 500 when Google's certificates
cannot be fetched), 200 for a completed
duplicate (with its stored result), 409 while another attempt holds the claim, 500 when the
job failed (its claim released: the retry runs at once) or the store is unavailable, 413
for a body over DEDUP_MAX_BODY_BYTES; and one structured log line per delivery.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from google.cloud import firestore

from dedup.entry.app import beyond_ledger, build_deduplicator
from dedup.entry.http import (
    BodyTooLarge,
    DedupHandler,
    HttpReply,
    ReadsBytes,
    emit_log_line,
    read_bounded_body,
    refuse_body,
)
from dedup.job_logic import JobRegistry
from dedup.run_context import Job, PermanentFailure
from dedup.settings import Settings

Emit = Callable[[Mapping[str, Any]], None]

PERMANENT_FAILURE_HEADER = "X-Dedup-Permanent-Failure"
"""A wrapped app's non-2xx answer carrying this header (its value: the reason) fails the
run for good (PermanentFailure: recorded failed and permanent, answered 200, no retry), as
raising PermanentFailure does in a Flask view or an ASGI endpoint: the middlewares cannot
see an exception the app's framework turned into its own error page."""


class AppFailed(Exception):
    """A wrapped app answered a guarded delivery with a status other than 2xx (or not at
    all, or cut short): the run failed (released, so Scheduler's retry runs it), as if its
    job had raised."""


def app_answer_result(body: bytes, content_type: str) -> Any:
    """A wrapped app's answer as the run's result, one rule for every middleware: no body
    None; a JSON content type parsed (text as is when it does not parse); any other text
    as is."""
    if not body:
        return None
    text = body.decode("utf-8", errors="replace")
    if "json" in content_type.lower():
        try:
            return json.loads(text)
        except ValueError:
            pass  # recorded as the text it is
    return text


def app_answer(status: int, headers: Mapping[str, str], body: bytes, what: str) -> Any:
    """What a wrapped app's answer (`headers` by lower-case name) makes of the run, one
    rule for every middleware: a 2xx its result (app_answer_result); a non-2xx with
    PERMANENT_FAILURE_HEADER PermanentFailure (its value the reason, the body the result);
    any other AppFailed. `what` names the answer in the failure's message."""
    result = app_answer_result(body, headers.get("content-type", ""))
    if 200 <= status < 300:
        return result
    reason = headers.get(PERMANENT_FAILURE_HEADER.lower())
    if reason is not None:
        raise PermanentFailure(reason.strip() or f"the app answered {status}", result=result)
    raise AppFailed(f"{what} answered {status}: {str(result)[:200]}")


class ServiceGuard:
    """The protocol of one service process; `handler(job)` guards one job with it."""

    def __init__(
        self,
        settings: Settings,
        client: firestore.Client | None = None,
        emit: Emit = emit_log_line,
    ) -> None:
        self.settings = settings
        self.client = client or firestore.Client(project=settings.project,
                                                 database=settings.database)
        self.emit = emit
        self._deduplicator = build_deduplicator(settings, self.client)
        self._beyond = beyond_ledger(settings, self.client)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, client: firestore.Client | None = None,
        emit: Emit = emit_log_line,
    ) -> ServiceGuard:
        """From the same DEDUP_* settings as the kit's function (dedup/settings.py)."""
        env = os.environ if environ is None else environ
        return cls(Settings.from_env(env), client, emit)

    def handler(self, job: Job) -> DedupHandler:
        """`job` (a callable taking the RunContext) guarded: run once per run."""
        return DedupHandler(self.settings, self._deduplicator, JobRegistry(job, {}),
                            self.emit, beyond=self._beyond)

    def read_body(self, declared_length: int | None, stream: ReadsBytes) -> bytes | HttpReply:
        """The request body, or the 413 (and its log line) for one over the cap."""
        try:
            return read_bounded_body(declared_length, stream, self.settings.max_body_bytes)
        except BodyTooLarge as exc:
            return refuse_body(str(exc), self.emit, time.perf_counter())


_shared: ServiceGuard | None = None
_shared_lock = threading.Lock()


def shared_guard() -> ServiceGuard:
    """The process's guard from the environment, built on first use and then kept: every
    guarded route of a service shares its client, cache and heartbeat."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = ServiceGuard.from_env()
        return _shared

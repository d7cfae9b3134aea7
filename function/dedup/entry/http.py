"""One delivery in, one reply and one structured log line out. No web framework here:
main.py adapts functions-framework's request to `DedupHandler.handle`, for every entry
point (handle_scheduled_job, proxy_scheduled_job), so each passes the caller check."""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from dedup.beyond import NotesRuns, why_beyond
from dedup.business_runs import BusinessSchedule, SkippedTime
from dedup.entry.callers import check_caller
from dedup.job_logic import JobRegistry
from dedup.keys import (
    FORCED_REFUSE,
    FORCED_REPLACE_NEXT,
    BadDelivery,
    DeliveryHeaders,
    RunKey,
    delivered_late,
    format_instant,
    is_forced_run,
    lower_keys,
    parse_delivery,
)
from dedup.outcomes import Delivery, Outcome, encode_result, summarize_error
from dedup.overlap import effective_policy
from dedup.run_context import Job, PermanentFailure, RunContext
from dedup.settings import MAX_BODY_BYTES_ENV, MissingScheduleTime, Settings
from dedup.store import StoreError
from dedup.version import __version__ as KIT_VERSION

# The name its log lines carried before the move (jsonPayload.logger): queries keep matching.
log = logging.getLogger("dedup.http")

# 409 (not 503) while another attempt runs: App Engine targets retry a 503 without
# counting it, and Scheduler treats any non-2xx as a failed attempt to retry.
STATUS = {
    Outcome.COMPLETED: 200,
    Outcome.DUPLICATE: 200,
    Outcome.COMPLETED_UNRECORDED: 200,
    Outcome.CLAIM_LOST: 200,
    Outcome.UNKEYED: 200,
    # A permanent failure: a retry could not succeed, so Scheduler must stop; the record
    # says `failed`, which the watchdog reports.
    Outcome.FAILED_PERMANENT: 200,
    # overlap: forbid: another run of the job held a live claim; recorded skipped, final.
    Outcome.SKIPPED: 200,
    Outcome.IN_PROGRESS: 409,
    Outcome.FAILED: 500,
    Outcome.STORE_UNAVAILABLE: 500,
}
SEVERITY = {
    Outcome.COMPLETED: "INFO",
    Outcome.DUPLICATE: "INFO",
    Outcome.IN_PROGRESS: "INFO",
    Outcome.SKIPPED: "INFO",
    Outcome.UNKEYED: "WARNING",
    Outcome.CLAIM_LOST: "WARNING",
    Outcome.FAILED: "ERROR",
    Outcome.FAILED_PERMANENT: "ERROR",
    Outcome.STORE_UNAVAILABLE: "ERROR",
    Outcome.COMPLETED_UNRECORDED: "ERROR",
}
# Two answers come before the protocol, read and write nothing, and are not Outcomes;
# both are logged WARNING with their own `outcome` label:
# - 403 "forbidden": DEDUP_ALLOWED_CALLERS is set and the caller's OIDC token is missing,
#   not a JWT, has no `email` claim or one not in the list (callers.py), or (with
#   DEDUP_VERIFY_TOKEN_AUDIENCE) is not a valid Google ID token for it. Checked first.
# - 400 "rejected": the Scheduler headers are missing or malformed (keys.py).
FORBIDDEN_STATUS = 403
FORBIDDEN_OUTCOME = "forbidden"
# - 500 "certs_unavailable": DEDUP_VERIFY_TOKEN_AUDIENCE is set and Google's certificates
#   cannot be fetched (id_tokens.py): nothing verified, nothing claimed. 500, not 503,
#   although no claim is held yet: the library answers 503 nowhere (App Engine retries a
#   503 without counting it), so one rule holds without exceptions; Scheduler retries a
#   500 like any failed attempt.
CERTS_UNAVAILABLE_STATUS = 500
CERTS_UNAVAILABLE_OUTCOME = "certs_unavailable"
REJECTED_STATUS = 400
REJECTED_OUTCOME = "rejected"
# A run beyond the schedule (dedup/beyond.py) whose note the store refused: logged ERROR,
# as `event` (an `outcome` would count it as one more delivery in the deliveries metric).
BEYOND_UNNOTED_EVENT = "beyond_unnoted"
# - 200 "expired": a watchdog's queued delivery (catch-up, re-run) arriving later than its
#   X-Dedup-Deliver-Within (a queue that was paused or backlogged): by then the watchdog
#   has reported the run, so it must not run now; 200 so the queue stops.
EXPIRED_STATUS = 200
EXPIRED_OUTCOME = "expired"
# - 200 "dst_skipped": a delivery for a local time the zone skipped, of a job with
#   `dstSkipped: skip` (dedup.business_runs): that day has no such run; nothing runs.
DST_SKIPPED_STATUS = 200
DST_SKIPPED_OUTCOME = "dst_skipped"
# Cloud Tasks marks its deliveries with X-CloudTasks-TaskName (it sets the X-CloudTasks-*
# headers itself). A job that raised is answered 200 to it, not 500: the queue would
# retry the job beyond the job's own retry policy; the watchdog reads the failed record
# and reports it (whether a run is delivered again is its decision).
CLOUD_TASKS_HEADER = "x-cloudtasks-taskname"
# A third comes before everything, even the caller check (main.py, every entry point):
# - 413 "too_large": the body is over DEDUP_MAX_BODY_BYTES; refused unread.
TOO_LARGE_STATUS = 413
TOO_LARGE_OUTCOME = "too_large"
# And, for the watchdog only (main.py), before the body is read:
# - 405 "method_not_allowed": a method other than POST (a health probe's GET) runs no tick.
METHOD_NOT_ALLOWED_STATUS = 405
METHOD_NOT_ALLOWED_OUTCOME = "method_not_allowed"

_stdout_lock = threading.Lock()


def emit_log_line(entry: Mapping[str, Any]) -> None:
    """Cloud Logging parses one JSON object per stdout line (`severity`, `message`, ...).
    Every line names the kit's version (`kit_version`, dedup/version.py): each entry point's
    lines and job code's `logging` output (dedup/logs.py) are all written here."""
    line = json.dumps({**entry, "kit_version": KIT_VERSION}, default=str, separators=(",", ":"))
    with _stdout_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


@dataclass(frozen=True)
class HttpReply:
    status: int
    body: Mapping[str, Any]

    @property
    def json_text(self) -> str:
        return json.dumps(self.body, separators=(",", ":"))


class BodyTooLarge(Exception):
    """The request body is over the cap; the message is the 413's one-line reason."""


class ReadsBytes(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def read_bounded_body(declared_length: int | None, stream: ReadsBytes, cap: int) -> bytes:
    """The body, read only if it fits in `cap` bytes: a declared Content-Length over the cap
    is refused unread; without one (chunked), at most cap + 1 bytes are read to tell."""
    too_large = (
        f"request body over {cap} bytes ({MAX_BODY_BYTES_ENV}): send a smaller body, or "
        f"raise {MAX_BODY_BYTES_ENV} if the job really needs it"
    )
    if declared_length is not None and declared_length > cap:
        raise BodyTooLarge(too_large.replace("over", f"of {declared_length} bytes, over", 1))
    chunks: list[bytes] = []
    received = 0
    while received <= cap:
        chunk = stream.read(cap + 1 - received)
        if not chunk:
            break
        chunks.append(chunk)
        received += len(chunk)
    if received > cap:
        raise BodyTooLarge(too_large)
    return b"".join(chunks)


def refuse_body(
    reason: str, emit: Callable[[Mapping[str, Any]], None], started: float
) -> HttpReply:
    """The 413 for a body over the cap, and its one WARNING line (nothing of the body)."""
    emit({
        "severity": "WARNING",
        "message": f"refused request: {reason}",
        "outcome": TOO_LARGE_OUTCOME,
        "status": TOO_LARGE_STATUS,
        "latency_ms": _ms_since(started),
    })
    return HttpReply(TOO_LARGE_STATUS, {"error": reason})


def refuse_method(
    method: str, allowed: str, emit: Callable[[Mapping[str, Any]], None], started: float
) -> HttpReply:
    """The 405 for a method the entry point does not serve, and its one WARNING line."""
    reason = f"method {method} not allowed: only {allowed} runs this entry point"
    emit({
        "severity": "WARNING",
        "message": f"refused request: {reason}",
        "outcome": METHOD_NOT_ALLOWED_OUTCOME,
        "status": METHOD_NOT_ALLOWED_STATUS,
        "latency_ms": _ms_since(started),
    })
    return HttpReply(METHOD_NOT_ALLOWED_STATUS, {"error": reason})


class RunsDeliveries(Protocol):
    """What the handler needs of a protocol: Deduplicator (or the benchmark's comparator)."""

    def run(
        self, key: RunKey, job: Job, body: bytes, headers: Mapping[str, str],
        answer_within: float | None = None, overlap: str = "allow",
        business: BusinessSchedule | None = None,
    ) -> Delivery:
        ...


def refuse_caller(
    lowered: Mapping[str, str], allowed: frozenset[str],
    emit: Callable[[Mapping[str, Any]], None], started: float,
    verify_audience: str | None = None,
) -> HttpReply | None:
    """Every entry point's first step: a 403 (and one WARNING line) for a caller not in
    DEDUP_ALLOWED_CALLERS, before anything is read or written; None to go on. With
    `verify_audience` (DEDUP_VERIFY_TOKEN_AUDIENCE) the token is verified first, and a 500
    (one ERROR line) answers when Google's certificates cannot be fetched."""
    if not allowed:
        return None
    if verify_audience is None:
        refusal = check_caller(lowered, allowed)
    else:
        from dedup.entry.id_tokens import CertsUnavailable  # only when set (cold start)

        try:
            refusal = check_caller(lowered, allowed, verify_audience)
        except CertsUnavailable as exc:
            emit({
                "severity": "ERROR",
                "message": f"caller not checked: Google's certificates are unavailable "
                           f"({exc}); answered {CERTS_UNAVAILABLE_STATUS} before anything "
                           "was claimed, so Scheduler retries",
                "outcome": CERTS_UNAVAILABLE_OUTCOME,
                "status": CERTS_UNAVAILABLE_STATUS,
                "latency_ms": _ms_since(started),
            })
            return HttpReply(CERTS_UNAVAILABLE_STATUS, {"error": CERTS_UNAVAILABLE_OUTCOME})
    if refusal is None:
        return None
    # Who, and why: nothing else of the request (no headers, body or token).
    emit({
        "severity": "WARNING",
        "message": f"forbidden caller: {refusal.reason}",
        "outcome": FORBIDDEN_OUTCOME,
        "status": FORBIDDEN_STATUS,
        "caller": refusal.caller,
        "latency_ms": _ms_since(started),
    })
    return HttpReply(FORBIDDEN_STATUS, {"error": refusal.reason})


class DedupHandler:
    def __init__(
        self,
        settings: Settings,
        deduplicator: RunsDeliveries,
        jobs: JobRegistry,
        emit: Callable[[Mapping[str, Any]], None] = emit_log_line,
        check_body: Callable[[bytes], str | None] | None = None,
        beyond: NotesRuns | None = None,
    ) -> None:
        self._settings = settings
        # Where a run beyond the schedule (unscheduled, forced) is noted for the watchdog
        # (dedup/beyond.py); None: not noted.
        self._beyond = beyond
        self._dedup = deduplicator
        self._jobs = jobs
        self._emit = emit
        # Entry points that parse the body (the proxy) refuse one they cannot parse safely
        # with a 400 (check_body's reason) before anything is claimed.
        self._check_body = check_body

    def _answer_within(self, parsed: DeliveryHeaders) -> float | None:
        """How long an unknown claim may be resolved: the job's attempt deadline (its
        X-Dedup-Attempt-Deadline) less one store budget to answer in; None without it."""
        if parsed.attempt_deadline_seconds is None:
            return None
        return max(0.0, parsed.attempt_deadline_seconds - self._settings.store_timeout_seconds)

    def _run_key(self, parsed: DeliveryHeaders) -> RunKey | SkippedTime:
        """The run a delivery is (dedup.business_runs), by its job's forcedRuns choice."""
        assert parsed.schedule_time is not None
        # A schedule time ahead of this instance's clock is a forced run ("Run now"),
        # which Scheduler sends with the job's next scheduled time.
        forced = is_forced_run(
            parsed.schedule_time, datetime.now(UTC), self._settings.forced_run_margin_seconds)
        if forced and parsed.forced_runs == FORCED_REFUSE:
            raise BadDelivery(
                "a forced run (its schedule time is ahead of now: 'Run now' or `gcloud "
                "scheduler jobs run`) and the job has forcedRuns: refuse; nothing runs "
                "(set forcedRuns to separate or replaceNext to allow them)")
        named = parsed.business.run_named(parsed.schedule_time) if parsed.business else None
        if isinstance(named, SkippedTime) and not forced:
            return named
        at = parsed.schedule_time if named is None or isinstance(named, SkippedTime) else (
            named.key_time)
        # replaceNext: the forced run is the upcoming scheduled run, run now (its scheduled
        # delivery is then a duplicate); separate: keyed apart, the scheduled run still runs.
        early = forced and parsed.forced_runs == FORCED_REPLACE_NEXT
        return RunKey(parsed.project, parsed.location, parsed.job_id, at, forced and not early,
                      parsed.generation, early)

    def handle(self, headers: Mapping[str, str], body: bytes) -> HttpReply:
        started = time.perf_counter()
        lowered = lower_keys(headers)
        forbidden = refuse_caller(lowered, self._settings.allowed_callers, self._emit, started,
                                  self._settings.verify_token_audience)
        if forbidden is not None:
            return forbidden
        try:
            parsed = parse_delivery(lowered, self._settings.project, self._settings.location)
            if parsed.schedule_time is None and (
                self._settings.missing_schedule_time is MissingScheduleTime.REJECT
            ):
                raise BadDelivery(
                    "missing X-CloudScheduler-ScheduleTime header (use a unix-cron schedule; "
                    "set DEDUP_MISSING_SCHEDULE_TIME=run to run such deliveries without dedup)"
                )
            body_problem = self._check_body(body) if self._check_body else None
            if body_problem is not None:
                raise BadDelivery(body_problem)
            late = delivered_late(lowered, datetime.now(UTC))
            key = None if parsed.schedule_time is None else self._run_key(parsed)
        except BadDelivery as exc:
            reason = str(exc)
            self._emit({
                "severity": "WARNING",
                "message": f"rejected delivery: {reason}",
                "outcome": REJECTED_OUTCOME,
                "status": REJECTED_STATUS,
                "job": lowered.get("x-cloudscheduler-jobname"),
                "latency_ms": _ms_since(started),
            })
            return HttpReply(REJECTED_STATUS, {"error": reason})

        if late is not None:
            reason = (f"delivered {late:.0f} s after its X-Dedup-Deliver-Within: the "
                      "watchdog has reported this run; nothing runs")
            self._emit({
                "severity": "WARNING",
                "message": f"expired delivery: {reason}",
                "outcome": EXPIRED_OUTCOME,
                "status": EXPIRED_STATUS,
                "job": parsed.job_id,
                "latency_ms": _ms_since(started),
            })
            return HttpReply(EXPIRED_STATUS, {"outcome": EXPIRED_OUTCOME, "error": reason})
        if isinstance(key, SkippedTime):
            reason = (f"{key.local:%Y-%m-%d %H:%M} does not exist in the job's time zone "
                      "(a DST change skips it) and the job has dstSkipped: skip; nothing runs")
            self._emit({
                "severity": "INFO",
                "message": f"{parsed.job_id}: {reason}",
                "outcome": DST_SKIPPED_OUTCOME,
                "status": DST_SKIPPED_STATUS,
                "job": parsed.job_id,
                "latency_ms": _ms_since(started),
            })
            return HttpReply(DST_SKIPPED_STATUS, {"outcome": DST_SKIPPED_OUTCOME,
                                                  "detail": reason})
        job = self._jobs.for_job(parsed.job_id)
        if key is None:
            key = RunKey(parsed.project, parsed.location, parsed.job_id, datetime.now(UTC))
            delivery = _run_without_dedup(key, job, body, lowered)
        else:
            self._note_beyond(key, parsed)
            try:
                delivery = self._dedup.run(
                    key, job, body, lowered, self._answer_within(parsed),
                    effective_policy(parsed.overlap, lowered), parsed.business)
            except Exception as exc:  # a bug or an unexpected store error: retryable
                log.exception("unexpected error for run %s", key.run_id)
                delivery = Delivery(Outcome.STORE_UNAVAILABLE, key.run_id, detail=repr(exc))

        status = STATUS[delivery.outcome]
        if delivery.outcome is Outcome.FAILED and CLOUD_TASKS_HEADER in lowered:
            status = 200  # the queue must not retry the job (see CLOUD_TASKS_HEADER)
        self._emit({
            "severity": SEVERITY[delivery.outcome],
            "message": f"{key.job_id} @ {format_instant(key.schedule_time)}: "
            f"{delivery.outcome.value}" + (" (forced run)" if key.forced else "")
            + (" (forced run, replacing the scheduled run)" if key.early else "")
            + (f" (re-run, generation {key.generation})" if key.generation else ""),
            "run_id": delivery.run_id,
            "trigger": key.trigger,
            "generation": key.generation,
            "job": key.job_id,
            "schedule_time": format_instant(key.schedule_time),
            "project": key.project,
            "location": key.location,
            "attempt_id": delivery.attempt_id,
            "attempt": delivery.attempt,
            "outcome": delivery.outcome.value,
            "status": status,
            "from_cache": delivery.from_cache,
            "detail": delivery.detail,
            "duration_seconds": delivery.duration_seconds,
            "latency_ms": _ms_since(started),
        })
        reply: dict[str, Any] = {
            "outcome": delivery.outcome.value, "run_id": delivery.run_id, "trigger": key.trigger,
        }
        if key.generation:
            reply["generation"] = key.generation  # a re-run's (the run itself: no key)
        if delivery.result_json is not None:
            reply["result"] = json.loads(delivery.result_json)
        if delivery.outcome is Outcome.FAILED_PERMANENT:
            reply["error"] = delivery.detail  # why it failed for good, in one line
        if delivery.outcome is Outcome.SKIPPED:
            reply["detail"] = delivery.detail  # the run of the job that held it off
        return HttpReply(status, reply)


    def _note_beyond(self, key: RunKey, parsed: DeliveryHeaders) -> None:
        """Note a run beyond the schedule before it runs (dedup/beyond.py). A note that
        cannot be written does not stop the run: it is logged ERROR instead, naming it."""
        why = None if self._beyond is None else why_beyond(key, parsed.business)
        if why is None or self._beyond is None:
            return
        try:
            self._beyond.note(key, why, datetime.now(UTC))
        except StoreError as exc:
            self._emit({
                "severity": "ERROR",
                "message": f"{key.job_id} @ {format_instant(key.schedule_time)}: a run beyond "
                f"the schedule ({why}) could not be noted for the watchdog: {exc}",
                "event": BEYOND_UNNOTED_EVENT,
                "run_id": key.run_id,
                "job": key.job_id,
                "why": why,
            })


def _run_without_dedup(
    key: RunKey, job: Callable[[RunContext], Any], body: bytes, headers: Mapping[str, str]
) -> Delivery:
    """DEDUP_MISSING_SCHEDULE_TIME=run: no key to dedup on, so every delivery runs."""
    attempt_id = uuid.uuid4().hex
    run_id = hashlib.sha256(f"unkeyed:{attempt_id}".encode()).hexdigest()
    context = RunContext(
        run_id=run_id, job_name=key.job_id, schedule_time=key.schedule_time,
        attempt_id=attempt_id, attempt=1, project=key.project, location=key.location,
        body=body, headers=headers, deduplicated=False,
    )
    try:
        result = job(context)
    except PermanentFailure as failure:
        result_json, _ = encode_result(failure.result)
        return Delivery(
            Outcome.FAILED_PERMANENT, run_id, attempt_id, 1, result_json,
            summarize_error(str(failure)),
        )
    except Exception as exc:
        log.exception("job %s failed (unkeyed delivery)", key.job_id)
        return Delivery(Outcome.FAILED, run_id, attempt_id, 1, detail=repr(exc))
    result_json, note = encode_result(result)
    return Delivery(Outcome.UNKEYED, run_id, attempt_id, 1, result_json, note)


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)

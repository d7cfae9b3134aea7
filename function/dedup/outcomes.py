"""What one delivery came to (Outcome, Delivery: the reply and the log line say it), and
how a job's result and error are kept for it (encode_result, summarize_error): what the
protocol, the HTTP handler and the benchmark's comparator share."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dedup.store import MAX_ERROR_CHARS

# Results are replayed to duplicates from the record; keep them well under Firestore's
# 1 MiB document limit. A larger result is dropped (the run still counts as completed).
MAX_RESULT_BYTES = 16 * 1024


class Outcome(StrEnum):
    COMPLETED = "completed"  # this attempt ran the job and recorded it
    DUPLICATE = "duplicate"  # the run had completed: not run again
    IN_PROGRESS = "in_progress"  # another attempt holds a live lease
    FAILED = "failed"  # the job raised; the record is marked failed, a retry runs at once
    # The job raised PermanentFailure, or the run's record is such a failure: nothing ran
    # and nothing will; answered 200 (a retry could not succeed) with the failure replayed.
    FAILED_PERMANENT = "failed_permanent"
    STORE_UNAVAILABLE = "store_unavailable"  # could not claim: nothing ran
    # The job ran, but recording it failed for longer than the lease (store outage) or
    # failed otherwise: answered as done so that Scheduler does not run it again.
    COMPLETED_UNRECORDED = "completed_unrecorded"
    CLAIM_LOST = "claim_lost"
    UNKEYED = "unkeyed"  # no schedule time and the setting says run without dedup
    # overlap: forbid: another run of the job held a live claim, so this one did not run
    # (recorded `skipped`, final); also a run replaced by a newer one (overlap: replace).
    SKIPPED = "skipped"


@dataclass(frozen=True)
class Delivery:
    """What happened to one delivery, for the reply and the log line."""

    outcome: Outcome
    run_id: str
    attempt_id: str | None = None
    attempt: int | None = None
    result_json: str | None = None
    detail: str | None = None
    from_cache: bool = False
    duration_seconds: float | None = None  # how long this attempt's job ran (if it ran)


def summarize_error(error: str) -> str:
    """A failed record's `error`: one line (whitespace runs collapsed), at most
    MAX_ERROR_CHARS characters."""
    line = " ".join(error.split())
    if len(line) > MAX_ERROR_CHARS:
        line = line[: MAX_ERROR_CHARS - 1] + "…"
    return line


def encode_result(result: Any) -> tuple[str | None, str | None]:
    """The job's result as JSON for the record, or (None, why it was dropped). Never
    raises: it runs after the job, when an exception would turn into a second run."""
    if result is None:
        return None, None
    try:
        text = json.dumps(result, separators=(",", ":"), sort_keys=True)
        json.loads(text)  # replayed to duplicates by parsing it: it must parse back
    except Exception as exc:  # TypeError, ValueError, RecursionError (deep nesting), ...
        return None, f"result dropped: not JSON-serialisable ({type(exc).__name__}: {exc})"
    if len(text.encode()) > MAX_RESULT_BYTES:
        return None, f"result dropped: larger than {MAX_RESULT_BYTES} bytes"
    return text, None

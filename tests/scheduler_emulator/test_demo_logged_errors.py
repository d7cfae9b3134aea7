"""The demo's per-job last error, read from the function's log (demo.function_log.logged_errors)."""

from __future__ import annotations

import json

from demo.function_log import logged_errors


def line(job: str, status: int, outcome: str, detail: str | None = None) -> str:
    entry = {"project": "acme", "job": job, "status": status, "outcome": outcome}
    if detail is not None:
        entry["detail"] = detail
    return json.dumps(entry)


NAMES = {"scheduler-dedup-broken": "broken"}
IMPORT_ERROR = "ModuleNotFoundError(\"No module named 'jobs.no_such_module'\")"


def test_a_run_held_by_a_killed_attempt_does_not_hide_the_import_error() -> None:
    # `make demo --fault kill=0.5:1 --ticks 4` on a job whose module is missing: the last
    # run's first attempt was killed mid-job, and its retries, all within the lease, were
    # answered 409 in_progress. The demo said "last error: 409 in_progress".
    log = "\n".join([
        line("scheduler-dedup-broken", 500, "failed", IMPORT_ERROR),
        line("scheduler-dedup-broken", 200, "completed"),
        "not json",
        line("scheduler-dedup-broken", 409, "in_progress"),
        line("scheduler-dedup-broken", 409, "in_progress"),
    ])
    assert logged_errors(log, "acme", NAMES) == {"broken": f"500 failed: {IMPORT_ERROR}"}


def test_the_last_other_error_wins_and_409_alone_is_still_told() -> None:
    log = "\n".join([
        line("scheduler-dedup-broken", 500, "failed", IMPORT_ERROR),
        line("scheduler-dedup-broken", 500, "store_unavailable"),
        line("scheduler-dedup-busy", 409, "in_progress"),
        line("scheduler-dedup-broken", 409, "in_progress"),
        json.dumps({"project": "other", "job": "x", "status": 500, "outcome": "failed"}),
    ])
    assert logged_errors(log, "acme", NAMES) == {
        "broken": "500 store_unavailable",
        "scheduler-dedup-busy": "409 in_progress",
    }

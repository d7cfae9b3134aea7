"""A served function's log (the dedup function's or the proxy's): what it answered, read
from its JSON log lines, and the log kept for `--logs`."""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dedup.protocol import Outcome


def logged_errors(log_text: str, project: str, names: dict[str, str]) -> dict[str, str]:
    """Per job (the stack's name), the last error the function logged for it: its
    outcome and detail, e.g. "500 failed: KeyError('customer')". A 409 in_progress only
    says that another attempt held the run (one killed mid-job, say, whose retries all
    came within its lease): it is the job's last error only if the job has no other."""
    errors: dict[str, str] = {}
    busy: dict[str, str] = {}
    for entry in _log_entries(log_text):
        if entry.get("project") != project or entry.get("status", 200) < 300:
            continue
        job = names.get(str(entry.get("job")), str(entry.get("job")))
        detail = entry.get("detail")
        text = f"{entry.get('status')} {entry.get('outcome')}"
        text = f"{text}: {detail}" if detail else text
        (busy if entry.get("outcome") == Outcome.IN_PROGRESS else errors)[job] = text
    return {**busy, **errors}


def _log_entries(log_text: str) -> Iterator[dict[str, Any]]:
    """The function's JSON log lines."""
    for line in log_text.splitlines():
        if not line.startswith("{"):
            continue
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict):
                yield entry


def logged_outcomes(log_text: str, project: str) -> Counter[str]:
    """Outcomes of the function's JSON log lines for `project` (one line per delivery)."""
    return Counter(
        str(entry.get("outcome"))
        for entry in _log_entries(log_text)
        if entry.get("project") == project
    )


def save_log(path: Path, text: str) -> None:
    """Keep a process's log in the --logs directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")

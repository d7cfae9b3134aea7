"""Reading the demo job's ledger: how many times each run's job logic really executed."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any


@dataclass
class LedgerCounts:
    """Executions (commits) and starts per (job, schedule instant), for one project."""

    executions: Counter[tuple[str, datetime]] = field(default_factory=Counter)
    starts: Counter[tuple[str, datetime]] = field(default_factory=Counter)
    # Runs without a schedule time (missingScheduleTime=run), per emulator delivery id.
    unscheduled: Counter[str] = field(default_factory=Counter)
    pids: set[int] = field(default_factory=set)


def read_ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as ledger:
        return [json.loads(line) for line in ledger if line.strip()]


def count(path: Path, project: str | None = None) -> LedgerCounts:
    counts = LedgerCounts()
    for entry in read_ledger(path):
        if project is not None and entry.get("project") != project:
            continue
        counts.pids.add(int(entry["pid"]))
        if not entry.get("deduplicated", True):
            if entry["event"] == "commit":
                counts.unscheduled[str(entry.get("delivery"))] += 1
            continue
        key = (str(entry["job"]), datetime.fromisoformat(entry["schedule_time"]))
        if entry["event"] == "commit":
            counts.executions[key] += 1
        elif entry["event"] == "start":
            counts.starts[key] += 1
    return counts

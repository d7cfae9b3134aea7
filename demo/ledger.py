"""Reading the demo job's ledger: how many times each run's job logic really executed."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from scheduler_emulator.report import ExecutionKey


@dataclass
class LedgerCounts:
    """Executions (commits) and starts per (job, schedule instant, forced), for one
    project; `forced`: on behalf of a forced run's delivery."""

    executions: Counter[ExecutionKey] = field(default_factory=Counter)
    starts: Counter[ExecutionKey] = field(default_factory=Counter)
    # Runs without a schedule time (missingScheduleTime=run), per emulator delivery id.
    unscheduled: Counter[str] = field(default_factory=Counter)
    pids: set[int] = field(default_factory=set)
    # Job logic started and not (yet) ended, per process: running, or killed with it.
    open_starts: Counter[int] = field(default_factory=Counter)
    # Executions whose key (the function's RunContext.forced) is not the kind of delivery
    # they ran for: a forced run's retry taken as the scheduled run once its time came (or
    # a function that keys forced runs as scheduled ones), per job.
    forced_mismatch: Counter[str] = field(default_factory=Counter)


def read_ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as ledger:
        return [json.loads(line) for line in ledger if line.strip()]


def delivery_kind(delivery_id: str | None) -> str | None:
    """The run kind in an emulator delivery id (Delivery.id: job/tick/kind/...)."""
    if not delivery_id:
        return None
    parts = delivery_id.split("/")
    return parts[2] if len(parts) > 2 else None


def count(
    path: Path, project: str | None = None, job_names: Mapping[str, str] | None = None
) -> LedgerCounts:
    """`job_names`: deployed job ID -> the stack's job name (the ledger has the ID the
    function received; the report lists the stack's names)."""
    counts = LedgerCounts()
    names = job_names or {}
    for entry in read_ledger(path):
        if project is not None and entry.get("project") != project:
            continue
        pid = int(entry["pid"])
        counts.pids.add(pid)
        event = entry["event"]
        if event == "start":
            counts.open_starts[pid] += 1
        elif event == "end":
            counts.open_starts[pid] -= 1
        if not entry.get("deduplicated", True):
            if event == "commit":
                counts.unscheduled[str(entry.get("delivery"))] += 1
            continue
        job = names.get(str(entry["job"]), str(entry["job"]))
        # The run it executed, as the function keyed it (a forced run is a run of its own).
        forced = bool(entry.get("forced"))
        key = (job, datetime.fromisoformat(entry["schedule_time"]), forced)
        if event == "commit":
            counts.executions[key] += 1
            kind = delivery_kind(entry.get("delivery"))
            if kind is not None and (kind == "manual") != forced:
                counts.forced_mismatch[job] += 1
        elif event == "start":
            counts.starts[key] += 1
    return counts


def commits_by_run_id(path: Path, project: str) -> Counter[str]:
    """Executions (commits) per run_id, for one project: a re-run's generation has a run_id
    of its own, which `count` (keyed by schedule time) does not tell from the run's."""
    return Counter(
        str(entry["run_id"])
        for entry in read_ledger(path)
        if entry.get("project") == project and entry["event"] == "commit"
        and entry.get("deduplicated", True)
    )

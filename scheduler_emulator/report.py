"""Per-run summaries of an emulator replay, as text or JSON.

A scheduled run is identified by (job, schedule time); a forced manual run that carries
the next scheduled time is folded into that run, since the function sees the same key.
Manual runs without a schedule time are listed on their own. When the caller can count
how often the job logic really executed (the demo's ledger), each run gets a verdict.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from scheduler_emulator.emulator import (
    Delivery,
    EmulatorResult,
    RunResult,
    format_schedule_time,
)

# Verdicts
EXACTLY_ONCE = "exactly once"
EXHAUSTED = "retries exhausted"
DUPLICATED = "EXECUTED MORE THAN ONCE"
MISSING = "ACKNOWLEDGED BUT NEVER EXECUTED"
ACKNOWLEDGED = "acknowledged"
UNSCHEDULED = "no schedule time"


@dataclass
class RunSummary:
    job: str
    tick: int
    schedule_time: datetime | None
    runs: list[RunResult] = field(default_factory=list)
    executions: int | None = None  # job logic executions that completed (ledger)
    starts: int | None = None  # job logic starts, including killed ones

    @property
    def deliveries(self) -> list[Delivery]:
        out = [d for run in self.runs for d in run.deliveries]
        return sorted(out, key=lambda d: (d.sent_at, d.worker, d.copy))

    @property
    def acknowledged(self) -> bool:
        return any(run.acknowledged for run in self.runs)

    @property
    def scheduled(self) -> bool:
        return self.schedule_time is not None

    @property
    def faults(self) -> tuple[str, ...]:
        faults = {f for run in self.runs for f in run.faults}
        faults.update(run.kind for run in self.runs if run.kind != "scheduled")
        return tuple(sorted(faults))

    @property
    def stop_reason(self) -> str:
        return "; ".join(sorted({r.stop_reason for r in self.runs if r.stop_reason}))

    def replies(self) -> Counter[str]:
        return Counter(d.reply for d in self.deliveries)

    def reply_text(self) -> str:
        """Replies in order of first appearance, e.g. 'timeout 409x2 200'."""
        counts = self.replies()
        seen: list[str] = []
        for d in self.deliveries:
            if d.reply not in seen:
                seen.append(d.reply)
        return " ".join(r if counts[r] == 1 else f"{r}x{counts[r]}" for r in seen)

    @property
    def verdict(self) -> str:
        if not self.scheduled:
            return UNSCHEDULED
        if self.executions is None:
            return ACKNOWLEDGED if self.acknowledged else EXHAUSTED
        if self.executions > 1:
            return DUPLICATED
        if self.acknowledged:
            return EXACTLY_ONCE if self.executions == 1 else MISSING
        return EXHAUSTED

    @property
    def ok(self) -> bool:
        """Exactly once if acknowledged; at most once if the retries ran out."""
        return self.verdict in (EXACTLY_ONCE, EXHAUSTED, UNSCHEDULED, ACKNOWLEDGED)


def summarise(
    result: EmulatorResult,
    executions: Mapping[tuple[str, datetime], int] | None = None,
    starts: Mapping[tuple[str, datetime], int] | None = None,
    unscheduled_executions: Mapping[str, int] | None = None,
) -> list[RunSummary]:
    """Group deliveries per run key; attach execution counts if given.

    `executions` / `starts` map (job, schedule instant) to counts; `unscheduled_executions`
    maps a delivery id to executions of runs that had no schedule time.
    """
    by_key: dict[tuple[str, datetime], RunSummary] = {}
    out: list[RunSummary] = []
    for run in result.runs:
        if run.schedule_time is None:
            summary = RunSummary(run.job, run.tick, None, [run])
            if unscheduled_executions is not None:
                ids = {d.id for d in run.deliveries}
                summary.executions = sum(unscheduled_executions.get(i, 0) for i in ids)
            out.append(summary)
            continue
        key = (run.job, run.schedule_time)
        found = by_key.get(key)
        if found is None:
            tick = run.tick if run.kind == "scheduled" else run.tick + 1
            found = by_key[key] = RunSummary(run.job, tick, run.schedule_time)
            out.append(found)
        found.runs.append(run)
    if executions is not None:
        for key, summary in by_key.items():
            summary.executions = executions.get(key, 0)
            summary.starts = starts.get(key, 0) if starts is not None else None
    order: dict[str, int] = {}
    for run in result.runs:
        order.setdefault(run.job, len(order))
    out.sort(key=lambda s: (order[s.job], s.tick, s.schedule_time is None))
    return out


def totals(summaries: list[RunSummary]) -> dict[str, Any]:
    scheduled = [s for s in summaries if s.scheduled]
    replies: Counter[str] = Counter()
    for s in summaries:
        replies.update(s.replies())
    verdicts = Counter(s.verdict for s in summaries)
    executions = [s.executions for s in summaries if s.executions is not None]
    return {
        "scheduled_runs": len(scheduled),
        "manual_runs_without_schedule_time": len(summaries) - len(scheduled),
        "deliveries": sum(replies.values()),
        "replies": dict(sorted(replies.items())),
        "acknowledged_runs": sum(1 for s in scheduled if s.acknowledged),
        "exhausted_runs": sum(1 for s in scheduled if not s.acknowledged),
        "executions": sum(executions) if executions else None,
        "verdicts": dict(sorted(verdicts.items())),
        "all_ok": all(s.ok for s in summaries),
    }


def summary_json(s: RunSummary) -> dict[str, Any]:
    return {
        "job": s.job,
        "tick": s.tick,
        "schedule_time": format_schedule_time(s.schedule_time) if s.schedule_time else None,
        "acknowledged": s.acknowledged,
        "executions": s.executions,
        "job_starts": s.starts,
        "verdict": s.verdict,
        "ok": s.ok,
        "faults": list(s.faults),
        "stop_reason": s.stop_reason,
        "replies": dict(sorted(s.replies().items())),
        "deliveries": [
            {
                "kind": d.kind,
                "worker": d.worker,
                "attempt": d.attempt,
                "duplicate": d.copy == 1,
                "sent_at": d.sent_at.isoformat(),
                "reply": d.reply,
                "status": d.status,
                "late_status": d.late_status,
                "error": d.error,
                "real_ms": round(d.real_seconds * 1000, 1),
                "faults": list(d.faults),
            }
            for d in s.deliveries
        ],
    }


def format_table(summaries: list[RunSummary], show_all: bool = True) -> list[str]:
    """Text lines: one block per job, one line per run."""
    lines: list[str] = []
    current = None
    with_exec = any(s.executions is not None for s in summaries)
    for s in summaries:
        if s.job != current:
            current = s.job
            lines.append("")
            lines.append(f"job {s.job}")
            head = f"  {'schedule time (UTC)':<22}{'deliv':>6}  {'replies':<26}"
            if with_exec:
                head += f"{'exec':>4}  "
            head += f"{'faults':<28}result"
            lines.append(head)
        if not show_all and not s.faults and s.ok and s.verdict != EXHAUSTED:
            continue
        when = format_schedule_time(s.schedule_time) if s.schedule_time else "(manual, no time)"
        replies = s.reply_text()
        if len(replies) > 26:
            replies = replies[:23] + "..."
        line = f"  {when:<22}{len(s.deliveries):>6}  {replies:<26}"
        if with_exec:
            line += f"{'-' if s.executions is None else s.executions:>4}  "
        verdict = s.verdict
        if verdict == EXHAUSTED and s.stop_reason:
            verdict = f"{verdict} ({s.stop_reason})"
        line += f"{','.join(s.faults) or '-':<28}{verdict}"
        lines.append(line)
    return lines

"""Per-run summaries of an emulator replay, as text or JSON.

A scheduled run is identified by (job, schedule time); a forced manual run that carries
the next scheduled time is folded into that run, since the function sees the same key.
Manual runs without a schedule time are listed on their own. When the caller can count
how often the job logic really executed (the demo's ledger), each run gets a verdict.
A store fault holds up every delivery in flight, not only the run it was injected for:
the caller may note such bystanders in `exposed_to`, listed in parentheses.
"""

from __future__ import annotations

import re
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
from scheduler_emulator.faults import MISSED

# Verdicts
EXACTLY_ONCE = "exactly once"
EXHAUSTED = "retries exhausted"
DUPLICATED = "EXECUTED MORE THAN ONCE"
MISSING = "ACKNOWLEDGED BUT NEVER EXECUTED"
ACKNOWLEDGED = "acknowledged"
UNSCHEDULED = "no schedule time"
NOT_DELIVERED = "never delivered (missed)"  # the `missed` fault: Scheduler sent nothing


@dataclass
class RunSummary:
    job: str
    tick: int
    schedule_time: datetime | None
    runs: list[RunResult] = field(default_factory=list)
    executions: int | None = None  # job logic executions that completed (ledger)
    starts: int | None = None  # job logic starts, including killed ones
    # Faults injected for other runs that this run's deliveries were in flight during.
    exposed_to: tuple[str, ...] = ()

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
    def fault_text(self) -> str:
        """E.g. 'duplicate,store-stall' or 'lost-ack,(store-outage)'; '-' for none."""
        shown = [*self.faults, *(f"({f})" for f in self.exposed_to if f not in self.faults)]
        return ",".join(shown) or "-"

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
    def missed(self) -> bool:
        """Struck by the `missed` fault, and no delivery of its key came from elsewhere
        (a forced manual run that carries this schedule time would be one)."""
        return not self.deliveries and any(MISSED in run.faults for run in self.runs)

    @property
    def verdict(self) -> str:
        if not self.scheduled:
            return UNSCHEDULED
        if self.missed and not self.executions:
            return NOT_DELIVERED
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
        return self.verdict in (
            EXACTLY_ONCE, EXHAUSTED, UNSCHEDULED, ACKNOWLEDGED, NOT_DELIVERED
        )


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
        "exposed_to": list(s.exposed_to),
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
                "outcome": reply_outcome(d),
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
    # Wide enough for the longest list of faults, with a space before the result.
    width = max([28, *(len(s.fault_text) + 2 for s in summaries)])
    for s in summaries:
        if s.job != current:
            current = s.job
            lines.append("")
            lines.append(f"job {s.job}")
            head = f"  {'schedule time (UTC)':<22}{'deliv':>6}  {'replies':<26}"
            if with_exec:
                head += f"{'exec':>4}  "
            head += f"{'faults':<{width}}result"
            lines.append(head)
        quiet = not s.faults and not s.exposed_to
        if not show_all and quiet and s.ok and s.verdict != EXHAUSTED:
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
        line += f"{s.fault_text:<{width}}{verdict}"
        lines.append(line)
    return lines


# The kit's function names its outcome in its JSON reply: {"outcome": "completed", ...}.
# A pattern, not json.loads: the body is kept to its first 500 characters.
_OUTCOME = re.compile(r'"outcome"\s*:\s*"([A-Za-z_]+)"')


def reply_outcome(d: Delivery) -> str | None:
    """The outcome the target named in its reply (in time or late), if it named one."""
    found = _OUTCOME.search(d.reply_body)
    return found.group(1) if found else None


def answer_text(d: Delivery, *, timed: bool = False) -> str:
    """What one delivery was answered: '200 completed' ('... after 1.6 s' if `timed`),
    '500 store_unavailable', 'timeout (200 completed, late)', 'connection dropped'."""
    outcome = reply_outcome(d)
    took = f" after {d.real_seconds:.1f} s" if timed else ""
    if d.status is not None:
        text = f"{d.status} {outcome}" if outcome else str(d.status)
        return f"{text}{took}" + (" (lost on the way back)" if d.ack_lost else "")
    if d.error == "deadline exceeded":
        if d.late_status is None:
            return "no answer within the deadline" if timed else "timeout"
        late = f"{d.late_status} {outcome}" if outcome else str(d.late_status)
        if timed:
            return f"no answer within the deadline ({late}{took}, late)"
        return f"timeout ({late}, late)"
    return "connection dropped" if d.error else "no answer"


def answers_text(s: RunSummary, limit: int = 4) -> str:
    """What a run's deliveries were answered, in order, the first one timed: e.g.
    '500 store_unavailable after 2.0 s, then 200 completed on retry 1'."""
    deliveries = s.deliveries
    if not deliveries:
        return "not delivered"
    first, rest = deliveries[0], deliveries[1:]
    later: list[tuple[str, list[Delivery]]] = []  # consecutive retries answered alike
    for d in rest:
        text = answer_text(d)
        if later and later[-1][0] == text and _is_retry(d) and _is_retry(later[-1][1][-1]):
            later[-1][1].append(d)
        else:
            later.append((text, [d]))
    shown = [f"{text} {_which(group)}" for text, group in later[:limit]]
    if len(later) > limit:
        shown.append(f"{sum(len(g) for _, g in later[limit:])} more")
    text = answer_text(first, timed=True)
    return f"{text}, then {', '.join(shown)}" if shown else text


def _is_retry(d: Delivery) -> bool:
    return d.copy == 0 and d.worker == 0 and d.kind == "scheduled" and d.attempt > 1


def _which(group: list[Delivery]) -> str:
    """Which deliveries of the run these are, as Scheduler would tell them apart."""
    d = group[0]
    if len(group) > 1:  # consecutive retries (_is_retry)
        return f"on retries {d.attempt - 1}-{group[-1].attempt - 1}"
    if d.copy:
        return "(the same attempt delivered twice)"
    where = f"on retry {d.attempt - 1}" if d.attempt > 1 else "on the first attempt"
    if d.kind != "scheduled":
        where += f" of the {d.kind} run"
    return f"{where} of worker {d.worker + 1}" if d.worker else where

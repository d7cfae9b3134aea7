"""Per-run summaries of an emulator replay, as text or JSON.

A scheduled run is identified by (job, schedule time). A forced run ("Run now", the
manual and manual-overlap faults) carries the next scheduled time but is a run of its
own, as the function keys it: it is listed on its own line, and its verdict also checks
that the scheduled run of that time still executed. Manual runs without a schedule time
are listed on their own. When the caller can count how often the job logic really
executed, and on behalf of which delivery (the demo's ledger), each run gets a verdict.
A store fault holds up every delivery in flight, not only the run it was injected for:
the caller may note such bystanders in `exposed_to`, listed in parentheses.

Per job, a result: a job that never executed, or whose every attempt failed, fails the
replay whatever its runs' verdicts (a broken jobLogic must not pass for "at most once").
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dedup.keys import FORCED_REFUSE, FORCED_REPLACE_NEXT, FORCED_SEPARATE
from scheduler_emulator.faults import MISSED
from scheduler_emulator.records import (
    DEADLINE_EXCEEDED,
    SKIPPED,
    Delivery,
    EmulatorResult,
    RunResult,
    format_schedule_time,
)

# Executions are counted per (job, schedule instant, forced): a forced run and the
# scheduled run of the same time are two runs.
ExecutionKey = tuple[str, datetime, bool]

# Verdicts
EXACTLY_ONCE = "exactly once"
EXHAUSTED = "retries exhausted"
DUPLICATED = "EXECUTED MORE THAN ONCE"
MISSING = "ACKNOWLEDGED BUT NEVER EXECUTED"
ACKNOWLEDGED = "acknowledged"
UNSCHEDULED = "no schedule time"
NOT_DELIVERED = "never delivered (missed)"  # the `missed` fault: Scheduler sent nothing
SKIPPED_RUN = "skipped (the job was still retrying)"  # retries ran through this tick
FORCED_ONCE = "forced run, executed once, next scheduled run unaffected"
FORCED_ACKNOWLEDGED = "forced run, acknowledged"
FORCED_TOOK_NEXT = "FORCED RUN TOOK THE SCHEDULED RUN'S PLACE"
# forcedRuns replaceNext / refuse: what the job asked for.
FORCED_REPLACED_NEXT = "forced run, executed once as the next scheduled run (replaceNext)"
FORCED_REFUSED = "forced run, refused (forcedRuns refuse), nothing ran"
# A proxied run whose start the downstream refused (e.g. 403): the proxy must answer 200
# (Scheduler stops) with outcome failed_permanent, record the run failed, start nothing.
REFUSED_START = "start refused downstream ({status}): failed (permanent), nothing started"
REFUSED_RETRIED = "REFUSED START NOT ANSWERED 200 failed_permanent (Scheduler retried it)"
REFUSED_COUNTED_DONE = "REFUSED START ANSWERED AS DONE"
REFUSED_BUT_STARTED = "REFUSED START STARTED ANYWAY"
# The outcome a proxy's reply names for a refused start (dedup.run_context PermanentFailure).
FAILED_PERMANENT = "failed_permanent"


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
    # A forced run: it carries `schedule_time`, the time of the scheduled run `scheduled_run`.
    forced: bool = False
    scheduled_run: RunSummary | None = None
    forced_runs: str = FORCED_SEPARATE  # the job's forcedRuns (dedup.keys)
    # A proxied run whose start the downstream refused: the status it answered (the
    # demo's fake Google APIs, on purpose); None: not refused.
    refused: int | None = None

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
        # A forced run's own fault (manual, manual-overlap, manual-bare) is among them.
        return tuple(sorted({f for run in self.runs for f in run.faults}))

    @property
    def fault_text(self) -> str:
        """E.g. 'duplicate,store-stall' or 'lost-ack,(store-outage)'; '-' for none."""
        shown = [*self.faults, *(f"({f})" for f in self.exposed_to if f not in self.faults)]
        if self.refused is not None:
            shown.append(f"refused-{self.refused}")  # the downstream's, on purpose
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
        """Struck by the `missed` fault: nothing was delivered for it."""
        return not self.deliveries and any(MISSED in run.faults for run in self.runs)

    @property
    def skipped(self) -> bool:
        """Skipped by Scheduler: the job was still being retried at its time."""
        return not self.deliveries and any(run.stop_reason == SKIPPED for run in self.runs)

    @property
    def verdict(self) -> str:
        if not self.scheduled:
            return UNSCHEDULED
        if self.refused is not None:
            return self._refused_verdict()
        if self.forced:
            return self._forced_verdict()
        if self.missed and not self.executions:
            return NOT_DELIVERED
        if self.executions is not None and self.executions > 1:
            return DUPLICATED
        if self.skipped:
            # Executed at most once, by a forced run's retry taken for it once its time came.
            return SKIPPED_RUN
        if self.executions is None:
            return ACKNOWLEDGED if self.acknowledged else EXHAUSTED
        if self.executions > 1:
            return DUPLICATED
        if self.acknowledged:
            return EXACTLY_ONCE if self.executions == 1 else MISSING
        return EXHAUSTED

    def _refused_verdict(self) -> str:
        """A refused start: answered 200 failed_permanent (every 2xx), nothing started."""
        if self.executions:
            return DUPLICATED if self.executions > 1 else REFUSED_BUT_STARTED
        if not self.acknowledged:
            return REFUSED_RETRIED
        answered = [reply_outcome(d) for d in self.deliveries
                    if d.status is not None and 200 <= d.status < 300]
        if any(outcome != FAILED_PERMANENT for outcome in answered):
            return REFUSED_COUNTED_DONE
        return REFUSED_START.format(status=self.refused)

    @property
    def refused_ok(self) -> bool:
        """A refused start handled as it must be (REFUSED_START)."""
        return self.refused is not None and self.verdict == REFUSED_START.format(
            status=self.refused)

    def _forced_verdict(self) -> str:
        if self.executions is not None and self.executions > 1:
            return DUPLICATED
        if self.forced_runs == FORCED_REFUSE and not self.executions and not self.acknowledged:
            return FORCED_REFUSED  # 400 to every attempt, nothing ran: as configured
        if not self.acknowledged:
            return EXHAUSTED
        if self.executions is None:
            return FORCED_ACKNOWLEDGED
        if self.executions == 1:
            return FORCED_ONCE
        following = self.scheduled_run
        if following is not None and following.executions:
            # Acknowledged, yet its own key never executed, while the scheduled run of its
            # time did: the forced run was keyed as that run and executed it early (its
            # scheduled delivery was then answered as a duplicate): forcedRuns replaceNext.
            return FORCED_REPLACED_NEXT if self.forced_runs == FORCED_REPLACE_NEXT else (
                FORCED_TOOK_NEXT)
        return MISSING

    @property
    def ok(self) -> bool:
        """Exactly once if acknowledged; at most once if the retries ran out; a refused
        start answered 200 failed_permanent with nothing started."""
        if self.refused is not None:
            return self.refused_ok
        return self.verdict in (
            EXACTLY_ONCE, EXHAUSTED, UNSCHEDULED, ACKNOWLEDGED, NOT_DELIVERED, SKIPPED_RUN,
            FORCED_ONCE, FORCED_ACKNOWLEDGED, FORCED_REPLACED_NEXT, FORCED_REFUSED,
        )

    @property
    def last_failure(self) -> Delivery | None:
        """The last attempt that was not acknowledged, if any."""
        failed = [d for d in self.deliveries if d.copy == 0 and not d.acknowledged]
        return failed[-1] if failed else None


def summarise(
    result: EmulatorResult,
    executions: Mapping[ExecutionKey, int] | None = None,
    starts: Mapping[ExecutionKey, int] | None = None,
    unscheduled_executions: Mapping[str, int] | None = None,
) -> list[RunSummary]:
    """Group deliveries per run key; attach execution counts if given.

    `executions` / `starts` map (job, schedule instant, forced) to counts, where forced
    says the execution was on behalf of a forced run's delivery; `unscheduled_executions`
    maps a delivery id to executions of runs that had no schedule time.
    """
    by_key: dict[ExecutionKey, RunSummary] = {}
    out: list[RunSummary] = []
    jobs = {job.name: job for job in result.jobs}
    for run in result.runs:
        if run.schedule_time is None:
            summary = RunSummary(run.job, run.tick, None, [run])
            if unscheduled_executions is not None:
                ids = {d.id for d in run.deliveries}
                summary.executions = sum(unscheduled_executions.get(i, 0) for i in ids)
            out.append(summary)
            continue
        forced = run.kind != "scheduled"
        job = jobs.get(run.job)
        # One business run per local time (dedup.business_runs): both instants of a local
        # time that happens twice are one run under dstRepeated once, as the function keys
        # them; executions are counted under that key.
        # (In UTC: the job's zoned times of a repeated local time compare equal.)
        at = run.schedule_time.astimezone(UTC)
        when = job.business.key_time(at) if job is not None else at
        key = (run.job, when, forced)
        found = by_key.get(key)
        if found is None:
            # A forced run is listed with the tick whose time it carries (the next one).
            tick = run.tick + 1 if forced else run.tick
            found = by_key[key] = RunSummary(
                run.job, tick, when, forced=forced,
                forced_runs=job.forced_runs if job is not None else FORCED_SEPARATE)
            out.append(found)
        found.runs.append(run)
    for (name, when, forced), summary in by_key.items():
        if forced:
            summary.scheduled_run = by_key.get((name, when, False))
    if executions is not None:
        for key, summary in by_key.items():
            summary.executions = executions.get(key, 0)
            summary.starts = starts.get(key, 0) if starts is not None else None
    order: dict[str, int] = {}
    for run in result.runs:
        order.setdefault(run.job, len(order))
    out.sort(key=lambda s: (order[s.job], s.tick, s.schedule_time is None, s.forced))
    return out


@dataclass
class JobResult:
    """One job over the whole replay: did it ever execute, did any attempt succeed?"""

    job: str
    runs: int  # runs delivered (scheduled or forced, with at least one delivery)
    acknowledged: int
    executed: int | None  # runs whose job logic completed; None: not counted
    runs_ok: bool  # no run's verdict failed
    last_error: str | None  # what the last failed attempt was answered (or the target's log)

    @property
    def problem(self) -> str | None:
        """Why the job as a whole is broken (whatever its runs' verdicts), or None."""
        if not self.runs:
            return None  # nothing was delivered (every run missed): nothing to judge
        if self.executed == 0:
            if self.acknowledged:
                return "never executed, though runs were acknowledged"
            return "never executed: every attempt failed"
        if self.executed is None and not self.acknowledged:
            # Executions not counted: no 2xx at all is all there is to tell by. (Counted,
            # a job that executed is not broken, even if every 2xx was lost on the way.)
            return "failed every attempt"
        return None

    @property
    def ok(self) -> bool:
        return self.problem is None and self.runs_ok

    @property
    def text(self) -> str:
        """E.g. 'PASS: 20 run(s), 20 acknowledged, 20 executed' or 'FAIL: never executed:
        every attempt failed (... last error: 500 failed: KeyError('x'))'."""
        executed = "" if self.executed is None else f", {self.executed} executed"
        counts = f"{self.runs} run(s), {self.acknowledged} acknowledged{executed}"
        error = f"; last error: {_shortened(self.last_error)}" if self.last_error else ""
        problem = self.problem or (None if self.runs_ok else "a run failed its verdict (above)")
        if problem is None:
            return f"PASS: {counts}{error}"
        return f"FAIL: {problem} ({counts}{error})"


def _shortened(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def job_results(
    summaries: list[RunSummary], errors: Mapping[str, str] | None = None
) -> list[JobResult]:
    """Per job, in table order. `errors`: the last error per job as the target logged it
    (e.g. the demo function's log); else the answer to the job's last failed attempt."""
    jobs: dict[str, list[RunSummary]] = {}
    for s in summaries:
        jobs.setdefault(s.job, []).append(s)
    out = []
    for job, runs in jobs.items():
        delivered = [s for s in runs if s.deliveries]
        counted = [s.executions for s in delivered if s.executions is not None]
        failures = [d for s in delivered if (d := s.last_failure) is not None]
        failures.sort(key=lambda d: d.sent_at)
        last_error = (errors or {}).get(job)
        if last_error is None and failures:
            # A 409 in_progress tells only that another attempt held the run (e.g. one
            # killed mid-job): the last other answer says why the job fails, if there is one.
            telling = [d for d in failures if not _held_elsewhere(d)]
            last_error = answer_text((telling or failures)[-1])
        out.append(JobResult(
            job=job,
            runs=len(delivered),
            acknowledged=sum(1 for s in delivered if s.acknowledged),
            executed=sum(1 for n in counted if n) if len(counted) == len(delivered) else None,
            runs_ok=all(s.ok for s in runs),
            last_error=last_error,
        ))
    return out


def _held_elsewhere(d: Delivery) -> bool:
    return d.status == 409 and reply_outcome(d) == "in_progress"


def job_result_json(r: JobResult) -> dict[str, Any]:
    return {
        "job": r.job,
        "ok": r.ok,
        "result": r.text,
        "problem": r.problem,
        "runs": r.runs,
        "acknowledged": r.acknowledged,
        "executed": r.executed,
        "last_error": r.last_error,
    }


def totals(
    summaries: list[RunSummary], errors: Mapping[str, str] | None = None
) -> dict[str, Any]:
    scheduled = [s for s in summaries if s.scheduled and not s.forced]
    replies: Counter[str] = Counter()
    for s in summaries:
        replies.update(s.replies())
    verdicts = Counter(s.verdict for s in summaries)
    executions = [s.executions for s in summaries if s.executions is not None]
    jobs = job_results(summaries, errors)
    return {
        "scheduled_runs": len(scheduled),
        "forced_runs": sum(1 for s in summaries if s.forced),
        "manual_runs_without_schedule_time": sum(1 for s in summaries if not s.scheduled),
        "deliveries": sum(replies.values()),
        "replies": dict(sorted(replies.items())),
        "acknowledged_runs": sum(1 for s in scheduled if s.acknowledged),
        "exhausted_runs": sum(1 for s in scheduled if not s.acknowledged),
        "executions": sum(executions) if executions else None,
        "verdicts": dict(sorted(verdicts.items())),
        "failed_jobs": [r.job for r in jobs if not r.ok],
        "all_ok": all(s.ok for s in summaries) and all(r.ok for r in jobs),
    }


def summary_json(s: RunSummary) -> dict[str, Any]:
    return {
        "job": s.job,
        "tick": s.tick,
        "schedule_time": format_schedule_time(s.schedule_time) if s.schedule_time else None,
        "acknowledged": s.acknowledged,
        "executions": s.executions,
        "job_starts": s.starts,
        "forced": s.forced,
        "refused": s.refused,
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
                "error": d.error,
                "redirects": list(d.redirects),
                "outcome": reply_outcome(d),
                "real_ms": round(d.real_seconds * 1000, 1),
                "faults": list(d.faults),
            }
            for d in s.deliveries
        ],
    }


def format_table(
    summaries: list[RunSummary],
    show_all: bool = True,
    results: list[JobResult] | None = None,
) -> list[str]:
    """Text lines: one block per job, one line per run, then the job's result."""
    lines: list[str] = []
    with_exec = any(s.executions is not None for s in summaries)
    by_job = {r.job: r for r in (results if results is not None else job_results(summaries))}
    # The faults column is as wide as its longest entry, and always followed by a gap.
    width = max([len("faults"), *(len(s.fault_text) for s in summaries)]) + 2
    jobs: dict[str, list[RunSummary]] = {}
    for s in summaries:
        jobs.setdefault(s.job, []).append(s)
    for job, runs in jobs.items():
        lines.append("")
        lines.append(f"job {job}")
        head = f"  {'schedule time (UTC)':<22}{'deliv':>6}  {'replies':<26}"
        if with_exec:
            head += f"{'exec':>4}  "
        head += f"{'faults':<{width}}result"
        lines.append(head)
        for s in runs:
            quiet = not s.faults and not s.exposed_to and s.refused is None
            if not show_all and quiet and s.ok and s.verdict != EXHAUSTED:
                continue
            when = (
                format_schedule_time(s.schedule_time) if s.schedule_time else "(manual, no time)"
            )
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
        result = by_job.get(job)
        if result is not None:
            lines.append(f"  result: {result.text}")
    return lines


# The kit's function names its outcome in its JSON reply: {"outcome": "completed", ...}.
# A pattern, not json.loads: the body is kept to its first 500 characters.
_OUTCOME = re.compile(r'"outcome"\s*:\s*"([A-Za-z_]+)"')


def reply_outcome(d: Delivery) -> str | None:
    """The outcome the target named in its reply, if it named one."""
    found = _OUTCOME.search(d.reply_body)
    return found.group(1) if found else None


def answer_text(d: Delivery, *, timed: bool = False) -> str:
    """What one delivery was answered: '200 completed' ('... after 1.6 s' if `timed`),
    '500 store_unavailable', 'timeout' (no answer within the deadline: Scheduler closed
    the connection), 'connection dropped'."""
    outcome = reply_outcome(d)
    took = f" after {d.real_seconds:.1f} s" if timed else ""
    if d.status is not None:
        text = f"{d.status} {outcome}" if outcome else str(d.status)
        return f"{text}{took}" + (" (lost on the way back)" if d.ack_lost else "")
    if d.error == DEADLINE_EXCEEDED:
        return "no answer within the deadline (connection closed)" if timed else "timeout"
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

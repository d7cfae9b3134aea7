"""`python -m operator_tools demo` (what `make demo` runs)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

from demo.run import (
    DEFAULT_TICKS,
    DEFAULT_TIME_SCALE,
    DemoOptions,
    DemoOutcome,
    ProxiedOutcome,
    run_demo,
)
from demo.store_faults import StoreFaultRecord, struck_run
from demo.watch import (
    EXPECT_EXHAUSTED,
    EXPECT_FAILED,
    EXPECT_MISSED,
    CaughtUp,
    Rerun,
    WatchReport,
)
from infra.scheduler_rules import RetrySettings, fast_failure_retry_span_seconds
from local_stack import LocalStackError
from scheduler_emulator.cli import add_replay_arguments, fault_plan, progress_printer
from scheduler_emulator.emulator import format_schedule_time
from scheduler_emulator.faults import KILL, SLOW, STORE_FAULTS, STORE_OUTAGE, FaultSpecError
from scheduler_emulator.report import (
    DUPLICATED,
    EXHAUSTED,
    FORCED_ONCE,
    FORCED_TOOK_NEXT,
    MISSING,
    answers_text,
    format_table,
    job_result_json,
    summary_json,
)
from scheduler_emulator.stack import StackError


def retry_text(retry: RetrySettings) -> str:
    """A job's retry settings in the header: its retryConfig, or "no retries"."""
    if not retry.retry_count and not retry.max_retry_duration_seconds:
        return "no retries"  # `retry: none`: its backoff settings never apply
    text = f"retryCount {retry.retry_count}"
    if retry.max_retry_duration_seconds:
        text += f", maxRetryDuration {retry.max_retry_duration_seconds:g}s"
    return text + (
        f", backoff {retry.min_backoff_seconds:g}-{retry.max_backoff_seconds:g}s "
        f"x{retry.max_doublings} doublings"
    )


def render(outcome: DemoOutcome, show_all: bool = True) -> list[str]:
    """The human report: setup, one line per run, totals, and the verdict line."""
    o = outcome.options
    t = outcome.totals
    st = outcome.timing
    proxied = len(outcome.stack.active_proxied_jobs)
    jobs = len(outcome.stack.active_jobs) + proxied
    served = bool(outcome.function_url)
    lines = [
        f"stack {outcome.stack.source}: project {outcome.stack.project}, "
        f"region {outcome.stack.region}, {jobs} job{'' if jobs == 1 else 's'}"
        + (f" ({proxied} proxied)" if proxied else "")
        + f" x {outcome.result.ticks} scheduled runs",
        f"function {outcome.function_url} ({o.workers} worker processes), Firestore emulator "
        f"{outcome.firestore_host} behind a store-fault proxy on {outcome.store_host}"
        if served else f"function: not served (no job of the stack runs in it), Firestore "
        f"emulator {outcome.firestore_host}",
        "time: "
        + (
            "real time"
            if o.real_time
            else f"simulated, 1 s of schedule time = {outcome.scale * 1000:g} ms "
            "(deadlines and backoff scaled alike)"
        ),
        f"store (real seconds): the {'function' if served else 'proxy'}'s store timeout "
        f"{st.store_timeout:g} s, lease "
        f"{st.lease:g} s"
        + (f"; store-stall holds the store's replies {st.stall:g} s, "
           f"store-outage cuts it off for {st.outage:g} s (for up to "
           f"{st.away(STORE_OUTAGE):g} s with gRPC's reconnect backoff)" if served else ""),
        f"faults: {o.faults.describe()} (seed "
        + ", ".join(sorted({str(f.seed) for f in o.faults.faults}) or ["-"])
        + ")",
        "retries: "
        + (
            "stop at the job's next scheduled time (--retries-stop-at-next-run)"
            if o.retries_stop_at_next_run
            else "go on until retryCount and maxRetryDuration are both used up; a tick "
            "that comes meanwhile is skipped (--no-retries-stop-at-next-run)"
        ),
    ]
    for job in (*outcome.stack.active_jobs, *outcome.stack.active_proxied_jobs):
        lines.append(
            f"  {job.name} (job ID {job.job_id}): '{job.schedule}' {job.time_zone}, "
            f"deadline {job.attempt_deadline_seconds:g}s, {retry_text(job.retry)}"
            + (f"; proxy: {job.proxy.target} {job.proxy.resource}" if job.proxy else "")
        )
    if outcome.nothing_to_run:
        lines.append(f"  {outcome.nothing_to_run}")
    lines += format_table(outcome.summaries, show_all=show_all, results=outcome.jobs)
    if outcome.result.dst:
        lines += ["", *(note.text for note in outcome.result.dst)]
    struck = store_fault_lines(outcome)
    if struck:
        lines += [
            "",
            "store faults: what the function answered to the run each was injected for "
            "(in parentheses in the table: runs with a delivery in flight meanwhile)",
            *struck,
        ]
    explained = notes(outcome)
    if explained:
        lines += ["", "notes:"] + [f"  - {note}" for note in explained]
    if outcome.watch is not None:
        lines += ["", *watch_lines(outcome.watch)]
    if outcome.backfill is not None:
        lines += ["", "backfill (demo/backfill.py: the runs of a simulated outage after the "
                  "replay, make backfill MODE=missing):", *outcome.backfill.lines()]
    if outcome.proxied is not None:
        lines += ["", *proxied_lines(outcome.proxied, show_all)]
    if outcome.paths:
        lines += ["", "paths (demo/paths.py: each replayed on purpose, from a fixed date):",
                  *(f"  {path.text}" for path in outcome.paths),
                  *(f"  {result.text}" for result in outcome.overlap)]
    replies = ", ".join(f"{k} x{v}" for k, v in t["replies"].items())
    answered = ", ".join(f"{k} x{v}" for k, v in sorted(outcome.function_outcomes.items()))
    if served:
        lines += [
            "",
            f"{t['scheduled_runs']} scheduled runs, {t['deliveries']} deliveries ({replies}), "
            f"{t['executions']} job executions; {outcome.workers_replaced} killed worker "
            f"process(es) replaced by gunicorn; {outcome.real_seconds:.1f} s",
            f"function outcomes (its log): {answered or 'none'}",
            f"store faults injected: {outcome.store_summary}",
        ]
    else:
        lines += ["", f"{outcome.real_seconds:.1f} s"]
    lines.append(verdict_line(outcome))
    return lines


def proxied_lines(proxied: ProxiedOutcome, show_all: bool = True) -> list[str]:
    """The proxied jobs' section: the proxy, the fakes, one table per job, the refusal."""
    skipped = proxied.skipped_faults
    lines = [
        f"proxied jobs: the idempotent proxy (main.py's proxy_scheduled_job, served by "
        f"functions-framework) on {proxied.proxy_url}, starting executions on fake Google "
        f"APIs on {proxied.apis_url} (Workflows, Cloud Run jobs, Pub/Sub for build "
        "triggers); exec: the starts the fake API received for the run, by the run ID in "
        "the proxy's token",
        f"  faults: {proxied.faults.describe()}"
        + (f"; not injected into proxied runs: {', '.join(skipped)} (nothing in the proxy "
           "honours slow or kill; it reaches its store directly)" if skipped else "")
        + ("; the downstream refuses one run's start (403)"
           if proxied.refused is not None else ""),
    ]
    lines += format_table(proxied.summaries, show_all=show_all, results=proxied.jobs)
    r = proxied.refused
    if r is not None:
        when = _when(r.schedule_time)
        [s] = [s for s in proxied.summaries if s.refused is not None]
        answered = answers_text(s)
        verdict = "as it must" if r.ok and s.ok else "FAIL"
        error = f", error {r.error[:160]!r}" if r.error else ""
        lines += [
            "",
            f"  refused: {r.job} @ {when}{' (forced run)' if r.forced else ''}: the fake "
            f"answered {r.status} to every start; the proxy answered {answered}; its record "
            f"{r.record}{error}; nothing started: {verdict}",
        ]
    if proxied.unattributed_starts:
        lines.append(
            f"  UNATTRIBUTED: {proxied.unattributed_starts} start(s) under a run ID of no "
            "replayed run: FAIL"
        )
    answered = ", ".join(f"{k} x{v}" for k, v in sorted(proxied.outcomes.items()))
    t = proxied.totals
    lines.append(
        f"  {t['scheduled_runs']} scheduled runs, {t['deliveries']} deliveries, "
        f"{t['executions'] or 0} downstream starts; proxy outcomes (its log): "
        f"{answered or 'none'}; {proxied.real_seconds:.1f} s"
    )
    return lines


def proxied_verdict(proxied: ProxiedOutcome) -> str:
    """The proxied part of the RESULT line."""
    scheduled = [s for s in proxied.summaries if s.scheduled and not s.forced]
    refused = [s for s in proxied.summaries if s.refused is not None]
    acked = [s for s in scheduled if s.acknowledged and s.refused is None]
    text = (f"proxied jobs: every acknowledged run started exactly once downstream "
            f"({len(acked)}/{len(acked)})")
    forced = [s for s in proxied.summaries if s.forced and s.refused is None]
    if forced:
        text += f", {len(forced)} forced run(s)"
    if refused:
        text += (f"; {len(refused)} start refused downstream ({refused[0].refused}), answered "
                 "200 failed_permanent and recorded failed (permanent), as injected")
    return text


def store_fault_answers(outcome: DemoOutcome) -> list[tuple[StoreFaultRecord, str]]:
    """Each store fault injected, with what the function answered to the deliveries of
    the run it was injected for."""
    answers = []
    for record in outcome.store_faults:
        s = struck_run(record, outcome.summaries)
        answers.append((record, answers_text(s) if s is not None else "not delivered"))
    return answers


def store_fault_lines(outcome: DemoOutcome) -> list[str]:
    """One line per store fault: its run, and what the function answered to it."""
    return [
        f"  {record.name:<13} {record.job} @ {_when(record.schedule_time)}: {answered}"
        for record, answered in store_fault_answers(outcome)
    ]


def _when(schedule_time: datetime | None) -> str:
    return format_schedule_time(schedule_time) if schedule_time else "(no schedule time)"


def notes(outcome: DemoOutcome) -> list[str]:
    """Why each run that ran out of retries did, in the stack's own terms: one note each."""
    out: list[str] = []
    timing = outcome.timing
    for s in outcome.summaries:
        if s.verdict != EXHAUSTED or s.schedule_time is None:
            continue
        job = outcome.stack.job(s.job)
        attempts = [d for d in s.deliveries if d.copy == 0]
        last = attempts[-1].reply if attempts else "nothing"
        deadline_ms = job.attempt_deadline_seconds * outcome.scale * 1000
        store = [f for f in STORE_FAULTS if f in s.faults or f in s.exposed_to]
        why = ""
        # A slow attempt outlives its deadline by design, and a killed one may too (it
        # waits for its process's other jobs to finish recording before it dies).
        if "timeout" in s.replies() and SLOW not in s.faults and KILL not in s.faults:
            if store:
                why = (
                    f"{' and '.join(store).capitalize()} held an attempt past its deadline "
                    f"(scaled to {deadline_ms:g} ms, less than the function's unscaled "
                    f"{timing.store_timeout:g} s store timeout)."
                )
            else:
                why = (
                    f"An attempt got no answer within the deadline, scaled to "
                    f"{deadline_ms:g} ms, though no slow fault was injected: this machine is "
                    "busy; a larger --time-scale gives the function more real time."
                )
        if s.executions:
            result = (
                f"Executed once, but Scheduler never saw a 2xx (last attempt's reply: "
                f"{last}; {s.stop_reason}). No duplicate: a later delivery of this run "
                "would get 200 'duplicate'."
            )
        elif KILL in s.faults:
            lease = timing.lease / outcome.scale  # in schedule seconds, like the retries
            window = fast_failure_retry_span_seconds(job.retry)
            result = (
                f"The instance was killed mid-job; its claim holds the run until the lease "
                f"expires ({timing.lease:g} s, {lease:g} s of schedule time), but the job's "
                f"retries, answered 409 at once, end after ~{window:g} s. Not executed. To "
                "recover from a crashed instance, retry for longer than the lease "
                "(maxRetryDurationSeconds >= leaseSeconds)."
            )
        else:
            result = f"Every delivery failed ({s.reply_text()}; {s.stop_reason}); not executed."
        note = f"{why} {result}".strip()
        out.append(f"{s.job} {format_schedule_time(s.schedule_time)}: {note[0].lower()}{note[1:]}")
    return out


def watch_lines(watch: WatchReport) -> list[str]:
    """The watchdog section: its findings, each matched against what the demo expected."""
    lines = [
        f"watchdog: one tick per job at the end of its window (last replayed run + retry "
        f"window + {watch.grace_seconds:g} s grace"
        + ("; a job with catchUp once each of its runs is due" if watch.delivers else "")
        + f"), on the Firestore emulator directly; {watch.checked} runs judged, "
        f"{len(watch.findings)} finding(s)",
    ]
    for f in watch.findings:
        p = f.problem
        when = _when(p.schedule_time)
        detail = ""
        if p.attempts is not None:
            detail += f", {p.attempts} attempt(s)"
        if p.error:
            detail += f", error {p.error[:80]!r}"
        verdict = f"matches {f.expected}" if f.expected else "UNEXPECTED: no fault explains it"
        lines.append(f"  {p.kind:<9} {p.job} @ {when}{detail}: {verdict}")
    for job, instant, why in watch.unreported:
        lines.append(f"  NOT REPORTED {job} @ {_when(instant)}: expected ({why})")
    for job, instant, why in watch.not_judged:
        lines.append(f"  (missed    {job} @ {_when(instant)}: {why})")
    unexpected = sum(1 for f in watch.findings if f.expected is None) + sum(
        1 for c in watch.caught_up if c.expected is None
    )
    matched = not watch.unreported and not unexpected
    lines.append(
        f"  injected: {watch.count(EXPECT_MISSED)} missed and {watch.count(EXPECT_FAILED)} "
        f"failed run(s) reported, {len(watch.caught_up)} caught up; "
        f"{watch.count(EXPECT_EXHAUSTED)} accounted for (retries exhausted, never "
        f"completed); {unexpected} unexpected, {len(watch.unreported)} not reported: "
        f"{'exactly the expected runs' if matched else 'MISMATCH'}"
    )
    if watch.delivers:
        lines += [
            "",
            "catch-up and re-run: the watchdog delivers to the served function (as deployed: "
            "an ID token of its own account), on the replay's clock",
            *(caught_up_line(c) for c in watch.caught_up),
        ]
        if not watch.caught_up:
            lines.append("  caught up: none (no missed run of a job with catchUp)")
        if (killed := watch.killed_catch_up) is not None:
            lines.append(f"  (the catch-up of {killed[0]} @ {_when(killed[1])}: its first "
                         "delivery's instance was killed mid-job; delivered again once its "
                         "lease lapsed)")
        lines.append(rerun_line(watch.rerun))
        if (held := watch.held_rerun) is not None:
            mark = "refused, as it must" if held.ok else "FAIL: accepted"
            lines.append(f"  re-run asked during Scheduler's retries: {held.job} @ "
                         f"{_when(held.schedule_time)} (failed), asked 1 s after its time: "
                         f"{mark} ({held.message[:160]})")
    return lines


def _times(n: int) -> str:
    return {0: "never executed", 1: "executed once"}.get(n, f"EXECUTED {n} TIMES")


def caught_up_line(c: CaughtUp) -> str:
    """`caught up: <job> @ <time>: executed once` (the ledger's count, replay included)."""
    line = f"  caught up: {c.job} @ {_when(c.schedule_time)}: {_times(c.executions)}"
    if c.status != "completed":
        line += f" (the function answered {c.status})"
    if c.expected is None:
        line += ": UNEXPECTED: the demo expected no catch-up of this run"
    return line if c.ok or c.expected is None else line + ": FAIL"


def rerun_line(r: Rerun | None) -> str:
    """`re-run: <job> @ <time>: generation 1 executed once, original record kept`."""
    if r is None:
        return "  re-run: none (no completed run to re-run)"
    line = f"  re-run: {r.job} @ {_when(r.schedule_time)}: "
    if r.status.startswith("refused"):
        return line + f"FAIL: {r.status}"
    line += f"generation {r.generation} {_times(r.executions)}, original record " + (
        "kept" if r.original_kept else "NOT KEPT"
    )
    if not r.recorded:
        line += f", generation {r.generation} NOT RECORDED completed ({r.status})"
    return line if r.ok else line + ": FAIL"


def verdict_line(outcome: DemoOutcome) -> str:
    t = outcome.totals
    scheduled = [s for s in outcome.summaries if s.scheduled and not s.forced]
    forced = [s for s in outcome.summaries if s.forced]
    failed_jobs = [r for r in outcome.jobs if not r.ok]
    acked = [s for s in scheduled if s.acknowledged]
    exhausted = [s for s in scheduled if s.verdict == EXHAUSTED]
    twice = [s for s in outcome.summaries if s.verdict == DUPLICATED]
    never = [s for s in outcome.summaries if s.verdict == MISSING]
    took_place = [s for s in forced if s.verdict == FORCED_TOOK_NEXT]
    if outcome.result.stopped_early:
        return "RESULT: interrupted before every run was delivered"
    if outcome.nothing_to_run:
        return f"RESULT: FAIL: {outcome.nothing_to_run}"
    proxied = outcome.proxied
    if proxied is not None and proxied.result.stopped_early:
        return "RESULT: interrupted before every proxied run was delivered"
    if t["all_ok"] and proxied is not None and not proxied.ok:
        problems = [f"proxied job {r.job} {r.problem}" for r in proxied.jobs if r.problem]
        twice = [s for s in proxied.summaries if s.verdict == DUPLICATED]
        if twice:
            problems.append(f"{len(twice)} proxied run(s) started more than once downstream")
        bad = [s for s in proxied.summaries if not s.ok and s.verdict != DUPLICATED]
        if bad:
            problems.append(f"{len(bad)} proxied run(s) failed their verdict")
        if proxied.refused is not None and not proxied.refused.ok:
            problems.append(f"the refused run's record is {proxied.refused.record}, not "
                            "failed (permanent)")
        if proxied.unattributed_starts:
            problems.append(f"{proxied.unattributed_starts} downstream start(s) of no "
                            "replayed run")
        return "RESULT: FAIL: " + "; ".join(problems) + " (see the proxied jobs section)"
    failed_overlap = [result for result in outcome.overlap if not result.ok]
    if t["all_ok"] and failed_overlap:
        return ("RESULT: FAIL: overlap " + ", ".join(r.policy for r in failed_overlap)
                + ": a run executed twice, two runs overlapped, or a run neither ran nor was "
                "skipped (see the paths section)")
    failed_paths = [path for path in outcome.paths if not path.ok]
    if t["all_ok"] and failed_paths:
        return ("RESULT: FAIL: path(s) " + "; ".join(p.spec.name for p in failed_paths)
                + " did not execute each business run exactly once (see the paths section)")
    watch = outcome.watch
    if t["all_ok"] and watch is not None and not watch.ok:
        return (
            "RESULT: FAIL: the watchdog's findings differ from the injected missed and failed "
            "runs, or a run it caught up or re-ran did not execute exactly once (see the "
            "watchdog section)"
        )
    backfill = outcome.backfill
    if t["all_ok"] and backfill is not None and not backfill.ok:
        return ("RESULT: FAIL: the backfill of the simulated outage did not execute each "
                "missed run exactly once (see the backfill section)")
    if t["all_ok"] and not outcome.summaries and proxied is not None:
        return f"RESULT: PASS: {proxied_verdict(proxied)}" + (
            f"; {len(outcome.paths)} path(s) (DST changes, forced-run choices, long store "
            "stalls): each business run executed once" if outcome.paths else "")
    if t["all_ok"]:
        line = (
            f"RESULT: PASS: every run whose retries were not exhausted executed exactly "
            f"once ({len(acked)}/{len(acked)})"
        )
        if exhausted:
            ran = sum(1 for s in exhausted if s.executions)
            line += (
                f"; {len(exhausted)} run(s) exhausted their retries (executed once: {ran}, "
                f"never: {len(exhausted) - ran}; listed above as 'retries exhausted')"
            )
        if forced:
            once = sum(1 for s in forced if s.verdict == FORCED_ONCE)
            line += (
                f"; {len(forced)} forced run(s) ({once} executed once, every next scheduled "
                "run unaffected)"
            )
        skipped = sum(1 for s in scheduled if s.skipped)
        if skipped:
            line += f"; {skipped} tick(s) skipped while the job was still retrying"
        if watch is not None:
            line += (
                f"; the watchdog found exactly the {watch.count(EXPECT_MISSED)} missed and "
                f"{watch.count(EXPECT_FAILED)} failed run(s) injected"
            )
            if watch.count(EXPECT_EXHAUSTED):
                line += f" (and {watch.count(EXPECT_EXHAUSTED)} exhausted run(s) accounted for)"
            if watch.caught_up:
                line += f"; {len(watch.caught_up)} missed run(s) caught up, each executed once"
            if watch.rerun is not None:
                line += "; 1 completed run re-run once (generation 1), its record kept"
        if backfill is not None:
            line += (f"; a backfill of {len(backfill.outage)} run(s) an outage missed: each "
                     "executed exactly once")
        if outcome.paths:
            line += (f"; {len(outcome.paths)} path(s) (DST changes, forced-run choices, long "
                     "store stalls): each business run executed once")
        if outcome.overlap:
            line += ("; a job longer than its period under overlap "
                     + " and ".join(r.policy for r in outcome.overlap)
                     + ": each run executed once or was skipped, never two at once")
        if proxied is not None:
            line += f"; {proxied_verdict(proxied)}"
        return line
    problems = [f"job {r.job} {r.problem}" for r in failed_jobs if r.problem]
    if twice:
        problems.append(f"{len(twice)} run(s) executed more than once")
    if never:
        problems.append(f"{len(never)} acknowledged run(s) never executed")
    if took_place:
        problems.append(
            f"{len(took_place)} forced run(s) executed in place of the next scheduled run"
        )
    return "RESULT: FAIL: " + "; ".join(problems) + " (see above)"


def outcome_json(outcome: DemoOutcome) -> dict[str, Any]:
    o = outcome.options
    return {
        "ok": outcome.ok,
        "stack": outcome.stack.source,
        "project": outcome.stack.project,
        "ticks": outcome.result.ticks,
        "time_scale": None if o.real_time else o.time_scale,
        "faults": {f.name: {"rate": f.rate, "seed": f.seed} for f in o.faults.faults},
        "workers": o.workers,
        "workers_replaced": outcome.workers_replaced,
        "real_seconds": round(outcome.real_seconds, 2),
        "retries_stop_at_next_run": o.retries_stop_at_next_run,
        "totals": outcome.totals,
        "jobs": [job_result_json(r) for r in outcome.jobs],
        "dst": [note.to_json() for note in outcome.result.dst],
        "function_outcomes": dict(sorted(outcome.function_outcomes.items())),
        "store": store_json(outcome),
        "runs": [summary_json(s) for s in outcome.summaries],
        "watchdog": watch_json(outcome.watch) if outcome.watch is not None else None,
        "backfill": outcome.backfill.to_json() if outcome.backfill is not None else None,
        "paths": [path.to_json() for path in outcome.paths],
        "overlap": [result.to_json() for result in outcome.overlap],
        "nothing_to_run": outcome.nothing_to_run,
        "proxied": proxied_json(outcome.proxied) if outcome.proxied is not None else None,
    }


def proxied_json(proxied: ProxiedOutcome) -> dict[str, Any]:
    r = proxied.refused
    return {
        "ok": proxied.ok,
        "proxy_url": proxied.proxy_url,
        "fake_apis_url": proxied.apis_url,
        "faults": {f.name: {"rate": f.rate, "seed": f.seed} for f in proxied.faults.faults},
        "totals": proxied.totals,
        "jobs": [job_result_json(j) for j in proxied.jobs],
        "runs": [summary_json(s) for s in proxied.summaries],
        "outcomes": dict(sorted(proxied.outcomes.items())),
        "unattributed_starts": proxied.unattributed_starts,
        "refused": None if r is None else {
            "job": r.job, "schedule_time": _when(r.schedule_time), "forced": r.forced,
            "status": r.status, "record": r.record, "error": r.error, "ok": r.ok,
        },
        "real_seconds": round(proxied.real_seconds, 2),
    }


def watch_json(watch: WatchReport) -> dict[str, Any]:
    return {
        "ok": watch.ok,
        "checked": watch.checked,
        "grace_seconds": watch.grace_seconds,
        "now": {job: _when(now) for job, now in watch.now.items()},
        "findings": [
            {**f.problem.to_json(), "expected": f.expected} for f in watch.findings
        ],
        "not_reported": [
            {"job": job, "schedule_time": _when(when), "expected": why}
            for job, when, why in watch.unreported
        ],
        "not_judged": [
            {"job": job, "schedule_time": _when(when), "why": why}
            for job, when, why in watch.not_judged
        ],
        "delivers": watch.delivers,
        "caught_up": [
            {"job": c.job, "schedule_time": _when(c.schedule_time), "status": c.status,
             "executions": c.executions, "expected": c.expected, "ok": c.ok}
            for c in watch.caught_up
        ],
        "rerun": None if (r := watch.rerun) is None else {
            "job": r.job, "schedule_time": _when(r.schedule_time), "generation": r.generation,
            "status": r.status, "executions": r.executions, "original_kept": r.original_kept,
            "recorded": r.recorded, "ok": r.ok,
        },
        "killed_catch_up": None if (k := watch.killed_catch_up) is None else {
            "job": k[0], "schedule_time": _when(k[1])},
        "held_rerun": None if (h := watch.held_rerun) is None else {
            "job": h.job, "schedule_time": _when(h.schedule_time), "refused": h.refused,
            "message": h.message, "ok": h.ok,
        },
    }


def store_json(outcome: DemoOutcome) -> dict[str, Any]:
    st = outcome.timing
    faults = [
        {
            "fault": record.name,
            "job": record.job,
            "schedule_time": _when(record.schedule_time),
            "seconds": record.fault.duration,
            "answered": answered,
        }
        for record, answered in store_fault_answers(outcome)
    ]
    return {
        "proxy": outcome.store_host,
        "store_timeout_seconds": st.store_timeout,
        "lease_seconds": st.lease,
        "stall_seconds": st.stall,
        "outage_seconds": st.outage,
        "injected": faults,
        "summary": outcome.store_summary,
    }


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def command(argv: Sequence[str]) -> int:
    """`python -m operator_tools demo` (make demo): the demo; with --keep, its Firestore
    emulator outlives the report, for make runs to read (demo.run.main_keeping_firestore)."""
    from demo.run import main_keeping_firestore  # demo.run imports this module

    return main_keeping_firestore(list(argv), main)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scheduler-dedup demo",
        description="Run the kit's main job locally: the Firestore emulator, the kit's "
        "function served by functions-framework, and the local Cloud Scheduler emulator "
        "replaying the stack's jobs with injected faults. Reports per scheduled run the "
        "deliveries, the replies and how often the job really executed. Exit status 0 "
        "when every run whose retries were not exhausted executed exactly once (and none "
        "twice), 1 otherwise, 2 on a setup or usage error, 130 if interrupted.",
    )
    add_replay_arguments(parser, default_ticks=DEFAULT_TICKS)
    parser.set_defaults(time_scale=DEFAULT_TIME_SCALE)
    parser.add_argument("--workers", type=int, default=4, help="function worker processes")
    parser.add_argument("--threads", type=int, default=8, help="threads per worker process")
    parser.add_argument("--firestore-port", type=int, default=None, help="default: a free port")
    parser.add_argument("--function-port", type=int, default=None, help="default: a free port")
    parser.add_argument(
        "--firestore-host",
        default=None,
        metavar="HOST:PORT",
        help="use this running Firestore emulator instead of starting one",
    )
    parser.add_argument(
        "--only-notable",
        action="store_true",
        help="list only runs with a fault or an unusual outcome",
    )
    parser.add_argument(
        "--logs", type=Path, default=None, metavar="DIR", help="keep the ledger and logs in DIR"
    )
    parser.add_argument(
        "--no-paths", action="store_true",
        help="skip the paths replayed after the main replay (demo/paths.py: DST changes, "
        "forced-run choices, long store stalls)",
    )
    parser.add_argument(
        "--no-proxied-job", action="store_true",
        help="do not add the demo's proxied job (proxied-export, a workflow started through "
        "the idempotent proxy on fake Google APIs) to a stack without proxied jobs",
    )
    parser.add_argument(
        "--no-refused-start", action="store_true",
        help="do not have the fake Google APIs refuse (403) one proxied run's start",
    )
    args = parser.parse_args(argv)
    try:
        options = DemoOptions(
            stack_path=args.stack,
            jobs=tuple(args.job),
            ticks=args.ticks,
            start=args.start,
            time_scale=args.time_scale,
            real_time=args.real_time,
            faults=fault_plan(args, default_mix=True),
            workers=args.workers,
            threads=args.threads,
            firestore_host=args.firestore_host,
            firestore_port=args.firestore_port,
            function_port=args.function_port,
            header_case=args.header_case,
            time_style=args.schedule_time_style,
            job_name_style=args.job_name_style,
            retries_stop_at_next_run=args.retries_stop_at_next_run,
            dst_fires=args.dst_fires,
            paths=not args.no_paths,
            proxied_job=not args.no_proxied_job,
            refuse_proxied_run=0 if args.no_refused_start else DemoOptions.refuse_proxied_run,
            logs_dir=args.logs,
        )
    except FaultSpecError as exc:
        parser.error(str(exc))

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    # Ctrl-C stops it even when started with SIGINT ignored (a background job of a
    # non-interactive shell: Python then keeps SIG_IGN instead of raising KeyboardInterrupt).
    signal.signal(signal.SIGINT, _terminate)
    try:
        outcome = run_demo(options, status=log, progress=progress_printer(sys.stderr))
    except (StackError, LocalStackError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "\ninterrupted: stopped the function server and the Firestore emulator", file=sys.stderr
        )
        return 130
    if args.json:
        json.dump(outcome_json(outcome), sys.stdout, indent=2)
        print()
    else:
        print("\n".join(render(outcome, show_all=not args.only_notable)))
    return 0 if outcome.ok else 1

"""`make demo DEMO_ARGS=--json`: the demo's outcome as JSON (outcome_json)."""

from __future__ import annotations

from typing import Any

from demo.outcome import DemoOutcome, ProxiedOutcome
from demo.report import store_fault_answers, when_text
from demo.watch import WatchReport
from scheduler_emulator.report import job_result_json, summary_json


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
        "runtimes": [{**runtime.to_json(), "url": url}
                     for runtime, url in outcome.runtimes.values()],
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
        "silence": outcome.silence.to_json() if outcome.silence is not None else None,
        "extra_run": outcome.extra_run.to_json() if outcome.extra_run is not None else None,
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
            "job": r.job, "schedule_time": when_text(r.schedule_time), "forced": r.forced,
            "status": r.status, "record": r.record, "error": r.error, "ok": r.ok,
        },
        "real_seconds": round(proxied.real_seconds, 2),
    }


def watch_json(watch: WatchReport) -> dict[str, Any]:
    return {
        "ok": watch.ok,
        "checked": watch.checked,
        "grace_seconds": watch.grace_seconds,
        "now": {job: when_text(now) for job, now in watch.now.items()},
        "findings": [
            {**f.problem.to_json(), "expected": f.expected} for f in watch.findings
        ],
        "not_reported": [
            {"job": job, "schedule_time": when_text(when), "expected": why}
            for job, when, why in watch.unreported
        ],
        "not_judged": [
            {"job": job, "schedule_time": when_text(when), "why": why}
            for job, when, why in watch.not_judged
        ],
        "delivers": watch.delivers,
        "caught_up": [
            {"job": c.job, "schedule_time": when_text(c.schedule_time), "status": c.status,
             "executions": c.executions, "expected": c.expected, "ok": c.ok}
            for c in watch.caught_up
        ],
        "rerun": None if (r := watch.rerun) is None else {
            "job": r.job, "schedule_time": when_text(r.schedule_time), "generation": r.generation,
            "status": r.status, "executions": r.executions, "original_kept": r.original_kept,
            "recorded": r.recorded, "ok": r.ok,
        },
        "killed_catch_up": None if (k := watch.killed_catch_up) is None else {
            "job": k[0], "schedule_time": when_text(k[1])},
        "held_rerun": None if (h := watch.held_rerun) is None else {
            "job": h.job, "schedule_time": when_text(h.schedule_time), "refused": h.refused,
            "message": h.message, "ok": h.ok,
        },
    }


def store_json(outcome: DemoOutcome) -> dict[str, Any]:
    st = outcome.timing
    faults = [
        {
            "fault": record.name,
            "job": record.job,
            "schedule_time": when_text(record.schedule_time),
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

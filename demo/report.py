"""`make demo`'s report, for a person: the setup, one line per run, the store faults and
the notes on runs that ran out of retries, the watchdog's, backfill's, proxied jobs' and
paths' sections, the totals, and the RESULT line (demo.verdict)."""

from __future__ import annotations

from datetime import datetime

from demo.outcome import DemoOutcome, ProxiedOutcome
from demo.store_faults import StoreFaultRecord, struck_run
from demo.verdict import verdict_line
from demo.watch import EXPECT_EXHAUSTED, EXPECT_FAILED, EXPECT_MISSED, CaughtUp, Rerun, WatchReport
from infra.scheduler_rules import RetrySettings, fast_failure_retry_span_seconds
from scheduler_emulator.faults import KILL, SLOW, STORE_FAULTS, STORE_OUTAGE
from scheduler_emulator.records import format_schedule_time
from scheduler_emulator.report import EXHAUSTED, answers_text, format_table


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
        *(f"runtime {name}: its own function {url} ({runtime.workers(o.workers)} worker "
          f"process{'' if runtime.workers(o.workers) == 1 else 'es'}), {runtime.describe()}"
          for name, (runtime, url) in outcome.runtimes.items()),
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
    if outcome.silence is not None:
        lines += ["", "silence (demo/silence.py: make silence's code path over one job, a run "
                  "missed during it, the watchdog on the replay's clock):",
                  *outcome.silence.lines()]
    if outcome.extra_run is not None:
        lines += ["", "extra run (demo/extra_run.py: a delivery at a time no business run "
                  "has, the watchdog on the replay's clock):", *outcome.extra_run.lines()]
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
        when = when_text(r.schedule_time)
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
        f"  {record.name:<13} {record.job} @ {when_text(record.schedule_time)}: {answered}"
        for record, answered in store_fault_answers(outcome)
    ]


def when_text(schedule_time: datetime | None) -> str:
    """A run's schedule time in the report."""
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
        when = when_text(p.schedule_time)
        detail = ""
        if p.attempts is not None:
            detail += f", {p.attempts} attempt(s)"
        if p.error:
            detail += f", error {p.error[:80]!r}"
        verdict = f"matches {f.expected}" if f.expected else "UNEXPECTED: no fault explains it"
        lines.append(f"  {p.kind:<9} {p.job} @ {when}{detail}: {verdict}")
    for job, instant, why in watch.unreported:
        lines.append(f"  NOT REPORTED {job} @ {when_text(instant)}: expected ({why})")
    for job, instant, why in watch.not_judged:
        lines.append(f"  (missed    {job} @ {when_text(instant)}: {why})")
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
            lines.append(f"  (the catch-up of {killed[0]} @ {when_text(killed[1])}: its first "
                         "delivery's instance was killed mid-job; delivered again once its "
                         "lease lapsed)")
        lines.append(rerun_line(watch.rerun))
        if (held := watch.held_rerun) is not None:
            mark = "refused, as it must" if held.ok else "FAIL: accepted"
            lines.append(f"  re-run asked during Scheduler's retries: {held.job} @ "
                         f"{when_text(held.schedule_time)} (failed), asked 1 s after its time: "
                         f"{mark} ({held.message[:160]})")
    return lines


def _times(n: int) -> str:
    return {0: "never executed", 1: "executed once"}.get(n, f"EXECUTED {n} TIMES")


def caught_up_line(c: CaughtUp) -> str:
    """`caught up: <job> @ <time>: executed once` (the ledger's count, replay included)."""
    line = f"  caught up: {c.job} @ {when_text(c.schedule_time)}: {_times(c.executions)}"
    if c.status != "completed":
        line += f" (the function answered {c.status})"
    if c.expected is None:
        line += ": UNEXPECTED: the demo expected no catch-up of this run"
    return line if c.ok or c.expected is None else line + ": FAIL"


def rerun_line(r: Rerun | None) -> str:
    """`re-run: <job> @ <time>: generation 1 executed once, original record kept`."""
    if r is None:
        return "  re-run: none (no completed run to re-run)"
    line = f"  re-run: {r.job} @ {when_text(r.schedule_time)}: "
    if r.status.startswith("refused"):
        return line + f"FAIL: {r.status}"
    line += f"generation {r.generation} {_times(r.executions)}, original record " + (
        "kept" if r.original_kept else "NOT KEPT"
    )
    if not r.recorded:
        line += f", generation {r.generation} NOT RECORDED completed ({r.status})"
    return line if r.ok else line + ": FAIL"

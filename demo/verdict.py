"""`make demo`'s RESULT line: PASS when every acknowledged run executed exactly once (and
every scene after the replay found what it must), else FAIL with what went wrong."""

from __future__ import annotations

from demo.outcome import DemoOutcome, ProxiedOutcome
from demo.watch import EXPECT_EXHAUSTED, EXPECT_FAILED, EXPECT_MISSED
from scheduler_emulator.report import (
    DUPLICATED,
    EXHAUSTED,
    FORCED_ONCE,
    FORCED_TOOK_NEXT,
    MISSING,
)


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
    silence = outcome.silence
    if t["all_ok"] and silence is not None and not silence.ok:
        return ("RESULT: FAIL: the run missed during a silence paged during it, or did not "
                "page exactly once after it (see the silence section)")
    extra = outcome.extra_run
    if t["all_ok"] and extra is not None and not extra.ok:
        return ("RESULT: FAIL: the extra run was not reported unexplained_run and paged "
                "exactly once (see the extra run section)")
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
        if silence is not None:
            line += ("; a run missed during a silence logged silenced, paged once after "
                     "it")
        if extra is not None:
            line += "; an extra run reported unexplained_run, paged once"
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

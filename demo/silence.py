"""After the backfill: a silence (`make silence`) over one job, a run missed during it.

`make silence`'s code path (operator_tools.silence: plan_silence, then the silence written
where the watchdog reads it) silences one job of the stack (one without catchUp, which
would deliver its missed run itself; preferably not the backfill's), from just before its
next run until a little after the run that follows is due. During the silence Scheduler
delivers the first of the two (it runs, as ever: executed once) and never the second (a
missed run). The watchdog's own code then ticks on the demo's clock: once the second run
is due, in the silence (its `missed` line is logged, marked `silenced`, and nothing pages:
no `incident_opened`, the incident is held), once just after the window (the incident,
still open, pages: one `incident_opened`), and once more (nothing pages again). Any other
count fails the demo. Then Scheduler delivers the job's next run as ever (a later scene on
the job finds it completed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from dedup.settings import Settings
from dedup.watchdog.due import WatchedJob, rfc3339
from dedup.watchdog.verdicts import MISSED
from dedup.watchdog.windows import MAX_DURATION_SECONDS
from demo.local_function import LocalFunction
from demo.scene_ticks import (
    SceneTick,
    SceneWatchdog,
    answered,
    deliver_first_run,
    executions,
    last_replayed,
    next_runs,
    shown_executions,
    shown_when,
)
from demo.watch import watched_jobs_of
from scheduler_emulator.report import RunSummary
from scheduler_emulator.stack import Job, Stack

SILENCE_REASON = "planned maintenance (a demo scene)"
REQUESTED_BY = "make demo"
# How long the silence lasts past the missed run's verdict (at most half the job's period).
WINDOW_PAST_VERDICT = timedelta(minutes=10)


@dataclass
class SilenceReport:
    job: str
    set_line: str = ""  # what `make silence` says it set
    until: datetime | None = None
    ran: datetime | None = None  # the run delivered during the silence
    ran_answer: str = ""
    ran_executions: int = 0
    missed: datetime | None = None  # the run Scheduler never delivered, during the silence
    # The run after it, delivered as ever (so a later scene on the job finds it completed).
    following: datetime | None = None
    following_executions: int = 0
    during: SceneTick | None = None  # the tick that judged it, in the silence
    after: SceneTick | None = None  # the first tick after the window
    again: SceneTick | None = None  # one more
    error: str | None = None

    @property
    def silenced_missed(self) -> list[dict[str, Any]]:
        """The missed run's problem lines logged during the silence, marked silenced."""
        if self.during is None:
            return []
        return [line for line in self.during.lines
                if line.get("kind") == MISSED and line.get("silenced")]

    @property
    def ok(self) -> bool:
        return (self.error is None and self.ran_executions == 1
                and self.following_executions == 1
                and self.during is not None and self.after is not None
                and self.again is not None and len(self.silenced_missed) == 1
                and not self.during.pages and len(self.after.pages) == 1
                and not self.again.pages)

    def lines(self) -> list[str]:
        if self.error is not None:
            return [f"  silence of {self.job}: FAIL: {self.error}"]
        assert self.during is not None and self.after is not None and self.again is not None
        lines = [
            f"  make silence JOB={self.job} UNTIL={rfc3339(self.until) if self.until else '?'}"
            f" REASON=\"{SILENCE_REASON}\": {self.set_line}",
            f"  {self.job} @ {shown_when(self.ran)}, during the silence: {self.ran_answer}, "
            f"{shown_executions(self.ran_executions)} (runs run as ever); the run after the missed "
            f"one, @ {shown_when(self.following)}: {shown_executions(self.following_executions)}",
        ]
        silenced = self.silenced_missed
        lines.append(
            f"  {self.job} @ {shown_when(self.missed)}, never delivered (missed): the tick at "
            f"{shown_when(self.during.now)} logged it "
            + ("`silenced`" if silenced else "NOT SILENCED")
            + f", {len(self.during.pages)} incident_opened (no page"
            + ("" if not self.during.pages else ": PAGED DURING THE SILENCE") + ")")
        paged = self.after.pages
        lines.append(
            f"  after the window, the tick at {shown_when(self.after.now)}: {len(paged)} "
            "incident_opened"
            + (f" ({paged[0].get('message', '')})" if len(paged) == 1 else "")
            + f"; the tick after it: {len(self.again.pages)}")
        lines.append(
            "  paged once, after the window: the incident still open then"
            if self.ok else "  FAIL: the silenced missed run must page nothing during the "
            "silence, then exactly once after it")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job, "ok": self.ok, "error": self.error,
            "until": rfc3339(self.until) if self.until else None,
            "ran": shown_when(self.ran), "ran_executions": self.ran_executions,
            "missed": shown_when(self.missed), "following": shown_when(self.following),
            "following_executions": self.following_executions,
            "silenced_lines": len(self.silenced_missed),
            "during": self.during.to_json() if self.during else None,
            "after": self.after.to_json() if self.after else None,
            "again": self.again.to_json() if self.again else None,
        }



def silence_job(stack: Stack, summaries: Sequence[RunSummary],
                watched: Mapping[str, WatchedJob], avoid: Sequence[str] = ()) -> Job | None:
    """The job the scene silences: a replayed job of the stack's config (`make silence`
    names one), without catchUp, preferably not one of `avoid`, nor a runtime's."""
    cfg = stack.config
    if cfg is None or not cfg.watchdog.enabled:
        return None  # `make silence` refuses a stack without a watchdog
    in_config = {job.name for job in cfg.jobs}
    replayed = last_replayed(summaries)
    candidates = [job for job in stack.active_jobs if job.name in in_config
                  and job.name in replayed and not watched[job.name].catch_up]
    if not candidates:
        return None
    return min(candidates, key=lambda j: (j.name in avoid, j.runtime is not None))


def run_silence(
    function: LocalFunction,
    stack: Stack,
    summaries: Sequence[RunSummary],
    store_settings: Settings,
    grace_seconds: float,
    *,
    avoid: Sequence[str] = (),
) -> SilenceReport | None:
    """The scene; None where the stack has no job it can silence (no watchdog, every job
    catchUp, or none that runs twice within `make silence`'s longest silence)."""
    from operator_tools.silence import describe, plan_silence, silences_of  # the Pulumi program

    watched = watched_jobs_of(stack, function.runtime_urls)
    job = silence_job(stack, summaries, watched, avoid)
    cfg = stack.config
    if job is None or cfg is None:
        return None
    if cfg.dedup.collection != store_settings.collection:  # the demo's own collection
        cfg = cfg.model_copy(update={"dedup": cfg.dedup.model_copy(
            update={"collection": store_settings.collection})})
    report = SilenceReport(job.name)
    watchdog = SceneWatchdog(store_settings, function.firestore_host, watched[job.name],
                             grace_seconds, function.stack.project)
    try:
        judged = watchdog.judged_through() or last_replayed(summaries)[job.name]
        runs = next_runs(watched[job.name], judged, 3)
        due = timedelta(seconds=watchdog.due_seconds())
        if len(runs) < 3:
            return None
        ran, missed, following = runs
        asked_at = ran - timedelta(minutes=1)
        # The window ends after the missed run's verdict, before the following run's.
        report.until = missed + due + min(WINDOW_PAST_VERDICT, (following - missed) / 2)
        if (report.until - asked_at).total_seconds() > MAX_DURATION_SECONDS:
            return None
        silence = plan_silence(cfg, job=job.name, until_text=rfc3339(report.until),
                               reason=SILENCE_REASON, requested_by=REQUESTED_BY, now=asked_at)
        silences_of(cfg, watchdog.records.run_stores()).put(silence)
        report.set_line = describe(silence)
        # Scheduler delivers the first run, and never the second (missed).
        delivered = deliver_first_run(function, stack, job, ran - timedelta(seconds=1))
        report.ran, report.missed = delivered.schedule_time, missed
        report.ran_answer = answered(delivered)
        report.ran_executions = executions(function, stack, job, ran)
        since = asked_at
        report.during = watchdog.tick(missed + due + timedelta(seconds=1), since)
        report.after = watchdog.tick(report.until + timedelta(seconds=1), since)
        report.again = watchdog.tick(report.until + timedelta(seconds=2), since)
        # The run after the missed one, delivered as ever (not yet due at these ticks).
        delivered = deliver_first_run(function, stack, job, following - timedelta(seconds=1))
        report.following = delivered.schedule_time
        report.following_executions = executions(function, stack, job, following)
    except Exception as exc:  # reported, and the demo fails on it
        report.error = f"{type(exc).__name__}: {exc}"
    finally:
        watchdog.close()
    return report

"""After the replay: the run watchdog over the simulated window, checked against the faults.

The demo runs the watchdog's own code (dedup.watchdog.Watchdog, one tick) in-process
against the demo's store: the Firestore emulator directly, not through the fault proxy.
Its jobs are the replayed jobs under their deployed IDs (`<namePrefix>-<name>`, the ID the
function receives and keys its records by), its project and location the function's.
Each job gets its own "now": its last replayed schedule time + its retry window + the
grace, so every replayed run's verdict is due and no run after the replay (never
delivered, since the replay ended) is judged. A fresh cursor per job (the demo's cursors
are deleted first), and a lookback that starts just before the replay's first run.

What the findings must be, from what the demo knows on its own (the faults it injected,
the flaky job's rule, the emulator's deliveries and the ledger), never from the store:
- a run the `missed` fault struck (nothing delivered for its schedule time), or one
  Scheduler skipped because the job was still being retried then (retries not stopped at
  the next run): `missed`, unless it comes before the job's first recorded run (the
  watchdog judges a job from its first recorded run on: before it, the job did not exist
  yet), then nothing;
- a run of the flaky job whose rule makes it fail, and whose last answer was the
  function's `failed`: `failed`;
- a run that ran out of retries without its job logic completing for another reason (an
  instance killed and its claim outliving the retries, a store outage on a job without
  retries): if reported, then as `missed` (no record), `failed` or `overlong` (a claim
  never released), according to what its record holds; the demo lists these as accounted
  for, not injected. (Not required to be reported: a claim's time is the function's wall
  clock, the schedule times simulated, so whether an abandoned claim already counts as
  overlong at the simulated "now" depends on where the replay's window lies);
- every other run (its job logic completed once): nothing. Forced runs ("Run now") are no
  scheduled runs: the watchdog does not judge them.
Any finding outside these, or an injected missed or failed run not found, fails the demo.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from google.cloud import firestore

from dedup.firestore_store import FirestoreRunStore
from dedup.settings import Settings
from dedup.watchdog import (
    DEFAULT_GRACE_SECONDS,
    FAILED,
    MISSED,
    OVERLONG,
    FirestoreWatchStore,
    Problem,
    Watchdog,
    WatchedJob,
    WatchSettings,
)
from infra.config import JobSettings
from infra.scheduler_rules import retry_window_seconds
from jobs.flaky import fail_every, fails
from scheduler_emulator.report import RunSummary, reply_outcome
from scheduler_emulator.stack import Job, Stack, job_from_settings

FLAKY_LOGIC = "jobs.flaky:run"
# Declared like a stack file's job, so it is delivered as the Pulumi program would
# declare it (headers, body, `<namePrefix>-<name>` ID).
FLAKY_SETTINGS = JobSettings.model_validate({
    "name": "flaky-export",
    "schedule": "*/10 * * * *",
    "timeZone": "Etc/UTC",
    "attemptDeadlineSeconds": 60,
    # Quick retries (10 s, then 20 s): a failing run is given up within ~4 minutes.
    "retry": {
        "retryCount": 2, "minBackoffSeconds": 10, "maxBackoffSeconds": 20, "maxDoublings": 1,
    },
    "body": {"failEvery": 7},
    "jobLogic": FLAKY_LOGIC,
})

# Expectations
EXPECT_MISSED = "injected: missed"
EXPECT_SKIPPED = "skipped by Scheduler: the job was still being retried"
EXPECT_FAILED = "injected: the flaky job fails this run"
EXPECT_EXHAUSTED = "accounted: retries exhausted, job never completed"
NOT_JUDGED = "not judged: before the job's first recorded run"
# The kinds of finding each expectation admits.
KINDS = {
    EXPECT_MISSED: (MISSED,),
    EXPECT_SKIPPED: (MISSED,),
    EXPECT_FAILED: (FAILED,),
    EXPECT_EXHAUSTED: (MISSED, FAILED, OVERLONG),
}


def flaky_job(stack: Stack) -> Job:
    """The demo's flaky job, as `stack` would deploy it."""
    return job_from_settings(
        FLAKY_SETTINGS, project=stack.project, region=stack.region, name_prefix=stack.name_prefix
    )


def with_flaky_job(stack: Stack) -> Stack:
    """The stack plus the demo's flaky job (unless it has a job of that name already)."""
    if any(job.name == FLAKY_SETTINGS.name for job in stack.jobs):
        return stack
    return replace(stack, jobs=(*stack.jobs, flaky_job(stack)))


@dataclass
class Finding:
    problem: Problem
    expected: str | None  # why the demo expected it; None: it did not


@dataclass
class WatchReport:
    grace_seconds: float
    now: dict[str, datetime]  # per job: the watchdog's "now"
    checked: int
    findings: list[Finding]
    # Runs the demo expected a finding for, that the watchdog did not report.
    unreported: list[tuple[str, datetime, str]]
    # Runs not judged by design (a missed run before the job's first recorded run).
    not_judged: list[tuple[str, datetime, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.unreported and all(f.expected is not None for f in self.findings)

    def count(self, expectation: str) -> int:
        return sum(1 for f in self.findings if f.expected == expectation)


@contextlib.contextmanager
def _emulator_env(host: str) -> Iterator[None]:
    """The Firestore client reads FIRESTORE_EMULATOR_HOST when it is built."""
    previous = os.environ.get("FIRESTORE_EMULATOR_HOST")
    os.environ["FIRESTORE_EMULATOR_HOST"] = host
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("FIRESTORE_EMULATOR_HOST", None)
        else:
            os.environ["FIRESTORE_EMULATOR_HOST"] = previous


def _fixed(instant: datetime) -> datetime:
    return instant


def watched_job(job: Job) -> WatchedJob:
    """The job as DEDUP_WATCH_JOBS lists it (infra.watchdog.watch_jobs)."""
    return WatchedJob(
        name=job.job_id,
        schedule=job.schedule,
        time_zone=job.time_zone,
        attempt_deadline_seconds=job.attempt_deadline_seconds,
        retry_window_seconds=retry_window_seconds(job.attempt_deadline_seconds, job.retry),
        paused=job.paused,
    )


def expectations(
    stack: Stack, summaries: list[RunSummary]
) -> tuple[dict[tuple[str, datetime], str], list[tuple[str, datetime, str]]]:
    """(run key -> why a finding is expected, runs not judged by design)."""
    expected: dict[tuple[str, datetime], str] = {}
    not_judged: list[tuple[str, datetime, str]] = []
    scheduled = [s for s in summaries if s.schedule_time is not None and not s.forced]
    first_recorded: dict[str, datetime] = {}
    for s in scheduled:
        assert s.schedule_time is not None
        if s.starts:  # the job logic started: the run's claim, so its record, exists
            known = first_recorded.get(s.job)
            if known is None or s.schedule_time < known:
                first_recorded[s.job] = s.schedule_time
    for s in scheduled:
        assert s.schedule_time is not None
        key = (s.job, s.schedule_time)
        if s.executions:
            continue  # completed: the watchdog finds it fine
        first = first_recorded.get(s.job)
        if s.missed or s.skipped:
            if first is None or s.schedule_time < first:
                not_judged.append((s.job, s.schedule_time, NOT_JUDGED))
            else:
                expected[key] = EXPECT_MISSED if s.missed else EXPECT_SKIPPED
            continue
        job = stack.job(s.job)
        if job.job_logic == FLAKY_LOGIC and fails(s.schedule_time, fail_every(job.body)):
            outcomes = [o for o in (reply_outcome(d) for d in s.deliveries) if o]
            if outcomes and outcomes[-1] == "failed":
                expected[key] = EXPECT_FAILED
                continue
        if not s.acknowledged:
            expected[key] = EXPECT_EXHAUSTED
    return expected, not_judged


def run_watchdog(
    stack: Stack,
    summaries: list[RunSummary],
    store_settings: Settings,
    firestore_host: str,
    started: datetime,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    client_project: str | None = None,
) -> WatchReport:
    """One watchdog tick per replayed job, its "now" at the end of its window.

    `client_project`: the project of the function's Firestore client, where it differs
    from the run keys' (a served function replaying several stacks' projects)."""
    expected, not_judged = expectations(stack, summaries)
    last: dict[str, datetime] = {}
    for s in summaries:
        if s.schedule_time is not None and (s.job not in last or s.schedule_time > last[s.job]):
            last[s.job] = s.schedule_time
    st = store_settings
    with _emulator_env(firestore_host):
        client = firestore.Client(project=client_project or st.project, database=st.database)
    runs = FirestoreRunStore(client, st.collection, st.store_timeout_seconds)
    cursor_collection = store_settings.collection + "_watchdog"
    findings: list[Finding] = []
    found: set[tuple[str, datetime]] = set()
    names = {job.job_id: job.name for job in stack.jobs}  # the watchdog knows deployed IDs
    nows: dict[str, datetime] = {}
    checked = 0
    try:
        for job in stack.active_jobs:
            if job.name not in last:
                continue
            watched = watched_job(job)
            now = last[job.name] + timedelta(
                seconds=watched.retry_window_seconds + grace_seconds
            )
            nows[job.name] = now
            # The lookback starts just before the replay's first run: earlier runs (of an
            # earlier replay on a reused emulator) are none of this replay's business.
            lookback = (now - started).total_seconds() + 1
            settings = WatchSettings(store_settings, (watched,), lookback, grace_seconds)
            client.collection(cursor_collection).document(job.job_id).delete()  # fresh cursor
            store = FirestoreWatchStore(runs, cursor_collection)
            watchdog = Watchdog(settings, store, functools.partial(_fixed, now))
            tick_checked, problems, _ = watchdog.tick()
            checked += tick_checked
            for problem in problems:
                job_name = names.get(problem.job, problem.job)
                key = (job_name, problem.schedule_time) if problem.schedule_time else None
                why = expected.get(key) if key else None
                if why is not None and problem.kind not in KINDS[why]:
                    why = None  # a finding on the right run, but of the wrong kind
                findings.append(Finding(problem, why))
                if key is not None and why is not None:
                    found.add(key)
    finally:
        client.close()  # type: ignore[no-untyped-call]
    unreported = [
        (job, when, why) for (job, when), why in sorted(expected.items())
        if (job, when) not in found and job in nows and why != EXPECT_EXHAUSTED
    ]
    findings.sort(key=lambda f: (f.problem.job, f.problem.schedule_time or started))
    return WatchReport(grace_seconds, nows, checked, findings, unreported, not_judged)

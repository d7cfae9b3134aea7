"""After the replay: the run watchdog over the simulated window, checked against the faults.

The demo runs the watchdog's own code (dedup.watchdog.tick.Watchdog, one tick) in-process
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

Catch-up and re-runs, where the stack's watchdog delivers runs (a job with `catchUp`, or
`watchdog.reruns`: infra then gives it the function's URL, and the function admits its
account): the watchdog gets the jobs exactly as infra lists them (its job table), and
delivers to the served function with an OIDC-shaped token of the watchdog's account, as
deployed, and the replay's clock (X-Emulator-Now: the tick's "now", as the emulator sends
its own; on the real clock a schedule time ahead of it would look forced). A job with
`catchUp` is ticked as its Scheduler-driven watchdog would be: once each of its runs'
verdict is due (its retry window + the grace after it), so each missed run is judged, and
caught up, within `catchUpWithinSeconds`. A run the `missed` fault struck (or Scheduler
skipped) of such a job is then expected `caught_up`, and the ledger must show it executed
exactly once. Then one completed run is re-run through `make rerun`'s code path
(operator_tools.rerun.request_rerun) and one more watchdog tick: its generation 1 must execute
exactly once (the ledger, by the generation's run_id) and the run's original record stay.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

from dedup.keys import RunKey
from dedup.settings import Settings
from dedup.store import RunStatus, StoredRun
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.deliveries import CAUGHT_UP, Delivered
from dedup.watchdog.delivery import DeliveryResult, HttpDeliverer, RunDelivery, TargetAuth
from dedup.watchdog.due import WatchedJob, rfc3339
from dedup.watchdog.ran_twice import RAN_TWICE
from dedup.watchdog.reruns import FirestoreRerunQueue, RerunQueue, reruns_collection
from dedup.watchdog.settings import DEFAULT_GRACE_SECONDS, WatchSettings, with_runtime_urls
from dedup.watchdog.tick import TickResult, Watchdog
from dedup.watchdog.verdicts import FAILED, MISSED, OVERLONG, Problem
from demo.ledger import commits_by_run_id
from demo.record_stores import RecordStores
from example_jobs.flaky import fail_every, fails
from infra.config import JobSettings, StackConfig, with_stack_defaults
from infra.scheduler_rules import retry_window_seconds
from scheduler_emulator.emulator import CLOCK_HEADER
from scheduler_emulator.faults import FAULT_HEADER, KILL
from scheduler_emulator.oidc import scheduler_token
from scheduler_emulator.report import RunSummary, reply_outcome
from scheduler_emulator.stack import Job, Stack, job_from_settings

FLAKY_LOGIC = "example_jobs.flaky:run"
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
EXPECT_CAUGHT_UP = "injected: missed, and the job has catchUp"
# A run whose job started more often than it committed (an attempt killed mid-job) and was
# finished by a later attempt: its record shows the takeover, which is the watchdog's
# ran_twice (it cannot tell a crash from a completion that went unrecorded).
EXPECT_TAKEN_OVER = "injected: an attempt was killed mid-job, a later one executed the run"
# A run delivered more than once that executed once: a slow attempt (a stalled store, a
# loaded machine) may have let its claim lapse before its job started, and the retry that
# took it over shows as ran_twice too (the watchdog cannot tell; docs/operations.md).
EXPECT_LAPSED = "a retry took over a claim that lapsed (ran_twice cannot tell if it ran)"
NOT_JUDGED = "not judged: before the job's first recorded run"
# The kinds of finding each expectation admits (a caught-up run is no problem, but is
# matched like one: CAUGHT_UP). An exhausted run without a record is missed, so caught up
# if its job has catchUp.
KINDS = {
    EXPECT_MISSED: (MISSED,),
    EXPECT_SKIPPED: (MISSED,),
    EXPECT_FAILED: (FAILED,),
    EXPECT_EXHAUSTED: (MISSED, FAILED, OVERLONG, CAUGHT_UP),
    EXPECT_CAUGHT_UP: (CAUGHT_UP,),
    EXPECT_TAKEN_OVER: (RAN_TWICE,),
    EXPECT_LAPSED: (RAN_TWICE,),
}
RERUN_REASON = "make demo: re-run one completed run"
RERUN_REQUESTED_BY = "make demo"


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
class CaughtUp:
    """A missed run the watchdog delivered (catch-up), and what the ledger says of it."""

    job: str  # the stack's job name
    schedule_time: datetime
    status: str  # the function's answer to the watchdog's delivery
    executions: int  # the run's job logic commits in the ledger, replay and catch-up
    expected: str | None  # why the demo expected it; None: it did not

    @property
    def ok(self) -> bool:
        return self.expected is not None and self.executions == 1


@dataclass
class Rerun:
    """The completed run the demo re-ran through `make rerun`'s code path."""

    job: str
    schedule_time: datetime
    generation: int
    status: str  # the function's answer to the watchdog's delivery of it
    executions: int  # the generation's job logic commits in the ledger
    original_kept: bool  # the run's own record still there, completed
    recorded: bool  # the generation's own record, completed

    @property
    def ok(self) -> bool:
        return self.executions == 1 and self.original_kept and self.recorded


@dataclass
class HeldRerun:
    """A re-run asked while Scheduler may still retry the run: the flaky job's failed run,
    asked one second after its schedule time through `make rerun`'s code path. It must be
    refused, naming when it becomes possible (a re-run then could execute next to a retry
    that takes the run itself over)."""

    job: str
    schedule_time: datetime
    refused: bool
    message: str

    @property
    def ok(self) -> bool:
        return self.refused and "ask again at or after" in self.message


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
    # Where the stack's watchdog delivers runs: what it caught up, and the re-run (None:
    # it delivers nothing; or no completed run to re-run).
    delivers: bool = False
    caught_up: list[CaughtUp] = field(default_factory=list)
    rerun: Rerun | None = None
    held_rerun: HeldRerun | None = None
    # The catch-up whose first delivery's instance was killed mid-job (job, time).
    killed_catch_up: tuple[str, datetime] | None = None

    @property
    def ok(self) -> bool:
        return (
            not self.unreported
            and all(f.expected is not None for f in self.findings)
            and all(c.ok for c in self.caught_up)
            and (self.rerun is None or self.rerun.ok)
            and (self.held_rerun is None or self.held_rerun.ok)
        )

    def count(self, expectation: str) -> int:
        return sum(1 for f in self.findings if f.expected == expectation)


def fixed_instant(instant: datetime) -> datetime:
    """The watchdog's clock in the demo (bound to a tick's "now" with functools.partial)."""
    return instant


def watched_job(job: Job) -> WatchedJob:
    """The job as the watchdog's job table lists it (infra.watchdog.watch_jobs), from the
    emulator's view of it."""
    return WatchedJob(
        name=job.job_id,
        schedule=job.schedule,
        time_zone=job.time_zone,
        attempt_deadline_seconds=job.attempt_deadline_seconds,
        retry_window_seconds=retry_window_seconds(job.attempt_deadline_seconds, job.retry),
        paused=job.paused,
    )


def watched_jobs_of(
    stack: Stack, runtime_urls: Mapping[str, str] | None = None
) -> dict[str, WatchedJob]:
    """Per active job (the stack's name): the job as the deployed watchdog gets it. A job
    of the stack's config: infra's own job table entry (with catchUp, body and
    headers where the watchdog delivers; a runtime's job with its database, and its URL
    from `runtime_urls`, the served runtimes', as DEDUP_WATCH_RUNTIME_URLS gives it);
    another (the demo's flaky job): watched_job."""
    infra_jobs: dict[str, WatchedJob] = {}
    if stack.config is not None:
        from operator_tools.runs import watched_jobs  # imports the Pulumi program: only when needed

        jobs = watched_jobs(stack.config)
        if runtime_urls:
            jobs = with_runtime_urls(jobs, runtime_urls)
        infra_jobs = {w.name: w for w in jobs}
    return {
        job.name: infra_jobs.get(job.job_id) or watched_job(job) for job in stack.active_jobs
    }


def delivering_config(stack: Stack) -> StackConfig | None:
    """The stack's config if its watchdog delivers runs (a job with catchUp, or
    watchdog.reruns) to the dedup function or to a runtime's, else None."""
    cfg = stack.config
    if cfg is None:
        return None
    functions = (None, *(runtime.name for runtime in cfg.runtimes))
    return cfg if any(cfg.watchdog_delivers_to(runtime=f) for f in functions) else None


def watchdog_caller(stack: Stack) -> str | None:
    """The watchdog's account, where the dedup function admits it (as infra sets
    DEDUP_ALLOWED_CALLERS): when the watchdog delivers runs to it."""
    cfg = stack.config
    return cfg.watchdog_email if cfg is not None and cfg.watchdog_delivers_to() else None


class ReplayDeliverer:
    """The watchdog's HttpDeliverer as deployed (an ID token of its own account: here the
    OIDC-shaped token the emulator sends, of the watchdog's account), on the replay's
    clock: X-Emulator-Now is the tick's "now" (demo/served_function.py)."""

    asynchronous = False  # POSTs and reads the answer (deployed, the watchdog queues)

    def __init__(self, watchdog_email: str, *, kill_first_catch_up: bool = False) -> None:
        self._http = HttpDeliverer(
            TargetAuth.ID_TOKEN, fetch_token=lambda url: scheduler_token(url, watchdog_email)
        )
        self.now: datetime | None = None
        # The first catch-up's instance is killed mid-job (the demo job's `kill` fault):
        # the watchdog must deliver it again once its lease lapses, and it runs once.
        self._kill_next = kill_first_catch_up
        self.killed: tuple[str, datetime] | None = None

    def deliver(self, delivery: RunDelivery) -> DeliveryResult:
        assert self.now is not None, "set the tick's now before the tick"
        headers = {**delivery.headers, CLOCK_HEADER: self.now.isoformat()}
        if self._kill_next and delivery.generation == 0:
            self._kill_next = False
            self.killed = (delivery.job_id, delivery.schedule_time)
            headers[FAULT_HEADER] = KILL
        return self._http.deliver(replace(delivery, headers=headers))


def expectations(
    stack: Stack, summaries: list[RunSummary], catching_up: frozenset[str] = frozenset()
) -> tuple[dict[tuple[str, datetime], str], list[tuple[str, datetime, str]]]:
    """(run key -> why a finding is expected, runs not judged by design); `catching_up`:
    the jobs whose missed runs the watchdog catches up."""
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
            if (s.starts or 0) > s.executions:
                expected[key] = EXPECT_TAKEN_OVER
            elif len(s.deliveries) > 1:
                expected[key] = EXPECT_LAPSED
            continue  # completed: the watchdog finds it fine
        first = first_recorded.get(s.job)
        if s.missed or s.skipped:
            if first is None or s.schedule_time < first:
                not_judged.append((s.job, s.schedule_time, NOT_JUDGED))
            elif s.job in catching_up:
                expected[key] = EXPECT_CAUGHT_UP
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
    *,
    function_url: str | None = None,
    ledger: Path | None = None,
    lease_seconds: float | None = None,
    runtime_urls: Mapping[str, str] | None = None,
) -> WatchReport:
    """One watchdog tick per replayed job, its "now" at the end of its window; where the
    stack's watchdog delivers runs (and `function_url`, the served function, and `ledger`,
    its ledger, are given): a tick once each run of a catchUp job is due, then a re-run.
    A runtime's job is judged from its own database and delivered to its function
    (`runtime_urls`).

    `client_project`: the project of the function's Firestore client, where it differs
    from the run keys' (a served function replaying several stacks' projects)."""
    cfg = delivering_config(stack) if function_url is not None and ledger is not None else None
    watched = watched_jobs_of(stack, runtime_urls)
    catching_up = frozenset(n for n, w in watched.items() if cfg is not None and w.catch_up)
    expected, not_judged = expectations(stack, summaries, catching_up)
    times: dict[str, set[datetime]] = {}
    for s in summaries:
        if s.schedule_time is not None:
            times.setdefault(s.job, set()).add(s.schedule_time)
    st = store_settings
    stores = RecordStores(st, firestore_host, watched.values(), client_project)
    client = stores.client
    cursor_collection = store_settings.collection + "_watchdog"
    store = stores.watch_store(cursor_collection)
    deliverer = ReplayDeliverer(
        cfg.watchdog_email, kill_first_catch_up=lease_seconds is not None
    ) if cfg is not None else None
    report = WatchReport(grace_seconds, {}, 0, [], [], not_judged, delivers=cfg is not None)
    found: set[tuple[str, datetime]] = set()
    names = {job.job_id: job.name for job in stack.jobs}  # the watchdog knows deployed IDs
    caught_up: list[tuple[Delivered, str | None]] = []

    def tick(job: WatchedJob, now: datetime, reruns: RerunQueue | None = None) -> TickResult:
        # The lookback starts just before the replay's first run: earlier runs (of an
        # earlier replay on a reused emulator) are none of this replay's business.
        lookback = (now - started).total_seconds() + 1
        settings = WatchSettings(
            store_settings, (job,), lookback, grace_seconds,
            target_url=function_url if deliverer is not None else None,
            target_auth=TargetAuth.ID_TOKEN,
        )
        if deliverer is not None:
            deliverer.now = now
        watchdog = Watchdog(settings, store, functools.partial(fixed_instant, now), deliverer,
                            reruns)
        result = watchdog.run_tick()
        report.checked += result.checked
        for problem in result.problems:
            key, why = _matched(expected, names, problem.job, problem.schedule_time, problem.kind)
            report.findings.append(Finding(problem, why))
            if key is not None and why is not None:
                found.add(key)
        for delivered in result.caught_up:
            key, why = _matched(expected, names, delivered.job, delivered.schedule_time, CAUGHT_UP)
            caught_up.append((delivered, why))
            if key is not None and why is not None:
                found.add(key)
        return result

    try:
        for job in stack.active_jobs:
            if job.name not in times:
                continue
            due = timedelta(seconds=watched[job.name].retry_window_seconds + grace_seconds)
            now = max(times[job.name]) + due
            report.now[job.name] = now
            client.collection(cursor_collection).document(job.job_id).delete()  # fresh cursor
            # A catchUp job is ticked once each run's verdict is due, as its watchdog
            # (every few minutes) would: each missed run is caught up within its bound.
            ticks = sorted({t + due for t in times[job.name]}) if job.name in catching_up else [
                now
            ]
            for at in ticks:
                tick(watched[job.name], at)
                if deliverer is not None and deliverer.killed is not None and (
                        report.killed_catch_up is None) and lease_seconds is not None:
                    # Its instance died mid-job: the claim holds until its lease lapses
                    # (the store's clock, real seconds); the next tick delivers it again.
                    report.killed_catch_up = (job.name, deliverer.killed[1])
                    time.sleep(lease_seconds + 1)
                    tick(watched[job.name], at)
        if cfg is not None and ledger is not None:
            report.rerun = _rerun_one(
                cfg, stack, summaries, stores, st.collection, watched, report.now, tick, ledger
            )
            report.held_rerun = _held_rerun(cfg, summaries, stores.runs, st.collection)
    finally:
        stores.close()
    if ledger is not None and caught_up:
        commits = commits_by_run_id(ledger, stack.project)
        report.caught_up = [
            CaughtUp(names.get(d.job, d.job), d.schedule_time, d.status, commits[d.run_id], why)
            for d, why in caught_up
        ]
    report.unreported = [
        (job, when, why) for (job, when), why in sorted(expected.items())
        if (job, when) not in found and job in report.now
        # admitted, not required: a job that started and raised was retried (no takeover)
        and why not in (EXPECT_EXHAUSTED, EXPECT_TAKEN_OVER, EXPECT_LAPSED)
    ]
    report.findings.sort(key=lambda f: (f.problem.job, f.problem.schedule_time or started))
    return report


def _matched(
    expected: dict[tuple[str, datetime], str],
    names: dict[str, str],
    job_id: str,
    schedule_time: datetime | None,
    kind: str,
) -> tuple[tuple[str, datetime] | None, str | None]:
    """(the run's key, why the demo expected this finding on it, or None)."""
    key = (names.get(job_id, job_id), schedule_time) if schedule_time else None
    why = expected.get(key) if key else None
    if why is not None and kind not in KINDS[why]:
        why = None  # a finding on the right run, but of the wrong kind
    return key, why


def _held_rerun(
    cfg: StackConfig, summaries: list[RunSummary], runs: FirestoreRunStore, collection: str,
) -> HeldRerun | None:
    """Ask a re-run of the flaky job's first failed run one second after its time, while
    Scheduler may still retry it; None if no run of it failed."""
    from operator_tools.rerun import RerunRefused, request_rerun  # imports the Pulumi program
    from operator_tools.runs import RunStores

    failed = sorted(s.schedule_time for s in summaries if s.job == FLAKY_SETTINGS.name
                    and s.schedule_time is not None and not s.forced and not s.executions
                    and s.deliveries)
    if not failed:
        return None
    t = failed[0]
    flaky = FLAKY_SETTINGS.model_copy(update=with_stack_defaults(FLAKY_SETTINGS, cfg.dedup))
    dedup = cfg.dedup.model_copy(update={"collection": collection})
    watchdog = cfg.watchdog.model_copy(update={"reruns": True})
    asked = cfg.model_copy(update={"jobs": (*cfg.jobs, flaky), "dedup": dedup,
                                   "watchdog": watchdog})
    try:
        request_rerun(asked, RunStores(runs), job_name=FLAKY_SETTINGS.name,
                      time_text=rfc3339(t), reason=RERUN_REASON,
                      requested_by=RERUN_REQUESTED_BY, now=t + timedelta(seconds=1))
    except RerunRefused as exc:
        return HeldRerun(FLAKY_SETTINGS.name, t, True, str(exc))
    return HeldRerun(FLAKY_SETTINGS.name, t, False, "accepted while Scheduler may retry it")


def _rerun_one(
    cfg: StackConfig,
    stack: Stack,
    summaries: list[RunSummary],
    stores: RecordStores,
    collection: str,
    watched: dict[str, WatchedJob],
    nows: dict[str, datetime],
    tick: Callable[[WatchedJob, datetime, RerunQueue | None], TickResult],
    ledger: Path,
) -> Rerun | None:
    """Re-run the first completed run of a job the watchdog re-runs (its `reruns`)
    through `make rerun`'s code path, then one tick of its job's watchdog; None if no
    such run completed."""
    from operator_tools.rerun import RerunRefused, request_rerun  # imports the Pulumi program

    in_config = {job.name for job in cfg.jobs}
    completed = sorted(
        (s for s in summaries if s.schedule_time is not None and not s.forced
         and s.executions == 1 and s.acknowledged and s.job in in_config and s.job in nows
         and watched[s.job].reruns),
        key=lambda s: (s.schedule_time, s.job),
    )
    if not completed:
        return None
    run = completed[0]
    assert run.schedule_time is not None
    job, now = watched[run.job], nows[run.job]
    if cfg.dedup.collection != collection:  # the demo's own collection (--collection)
        dedup = cfg.dedup.model_copy(update={"collection": collection})
        cfg = cfg.model_copy(update={"dedup": dedup})
    base = RunKey(cfg.project, cfg.region, job.name, run.schedule_time)
    try:
        requested = request_rerun(
            cfg, stores.run_stores(), job_name=run.job, time_text=rfc3339(run.schedule_time),
            reason=RERUN_REASON, requested_by=RERUN_REQUESTED_BY, now=now,
        )
    except RerunRefused as exc:
        return Rerun(run.job, run.schedule_time, 0, f"refused: {exc}", 0, False, False)
    request = requested.request
    result = tick(job, now, FirestoreRerunQueue(stores.runs, reruns_collection(collection)))
    answers = [d.status for d in result.reruns if d.run_id == request.request_id]
    records = stores.of(job).get_many([base.run_id, request.request_id])
    original, again = records.get(base.run_id), records.get(request.request_id)
    return Rerun(
        run.job,
        run.schedule_time,
        request.generation,
        answers[-1] if answers else "not delivered",
        commits_by_run_id(ledger, stack.project)[request.request_id],
        original_kept=isinstance(original, StoredRun)
        and original.record.status is RunStatus.COMPLETED,
        recorded=isinstance(again, StoredRun) and again.record.status is RunStatus.COMPLETED,
    )

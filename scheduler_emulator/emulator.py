"""A local Cloud Scheduler: delivers a stack's jobs over HTTP the way Scheduler does.

For each job and scheduled time it sends an HTTP request with Scheduler's headers and the
job's own httpTarget headers and body, follows redirects (a few hops), waits at most the
job's attempt deadline for a reply and then closes the connection, as Scheduler cancels
the request (the target may keep running; the attempt counts as failed, deadline
exceeded), treats any 2xx as success and anything else as a failed attempt, and retries
with the job's retry config: the wait follows `scheduler_rules.backoff_seconds`, retries
continue until both `retryCount` and `maxRetryDuration` are used up (0 = no duration
limit). All timing goes through an injectable `Clock`. Google documents the end of a
run's retries two ways, so both are a switch (`retries_stop_at_next_run`; retries.py says
which is which).

What it sends and records is records.py's (Delivery, RunResult, EmulatorResult); each
request is an http_call.HttpCall.

Faults of the target's store (store-stall, store-outage) are beyond its reach: whoever
runs it and its store passes a `store_faults` hook, called just before a struck attempt
is sent (see faults.py).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Literal

from infra.scheduler_rules import backoff_seconds, dst_hazards, schedule_times
from scheduler_emulator.clock import Clock, ScaledClock
from scheduler_emulator.faults import (
    CONCURRENT,
    DUPLICATE,
    FAULT_HEADER,
    KILL,
    LOST_ACK,
    MANUAL,
    MANUAL_BARE,
    MANUAL_OVERLAP,
    MISSED,
    SLOW,
    STORE_OUTAGE,
    STORE_STALL,
    FaultPlan,
    StoreFaultsUnsupported,
    fault_header,
)
from scheduler_emulator.http_call import HttpCall
from scheduler_emulator.oidc import scheduler_token
from scheduler_emulator.records import (
    NEVER_DELIVERED,
    SKIPPED,
    Delivery,
    DstNote,
    EmulatorResult,
    Progress,
    RunKind,
    RunResult,
    StoreFaultHook,
    format_schedule_time,
)
from scheduler_emulator.retries import retry_refusal
from scheduler_emulator.stack import Job, Stack

USER_AGENT = "Google-Cloud-Scheduler"
# Not sent by Scheduler: only with trace_deliveries, so a test target can tell which
# delivery executed the job, and (CLOCK_HEADER) the simulated instant it was sent at, the
# served function's "now" in the demo (demo/served_function.py).
DELIVERY_HEADER = "X-Emulator-Delivery"
CLOCK_HEADER = "X-Emulator-Now"
HeaderCase = Literal["canonical", "lower"]
# How the schedule time is spelled: with the job's own UTC offset (what Scheduler sends,
# e.g. 2026-03-29T03:30:00+02:00 for Europe/Berlin), in UTC with Z (the same instant, as
# other clients spell it), or alternating per attempt (one instant, two spellings).
TimeStyle = Literal["offset", "utc", "mixed"]
# X-CloudScheduler-JobName: the deployed job's full name projects/P/locations/L/jobs/ID
# (the default), or its bare ID.
JobNameStyle = Literal["full", "id"]
# A local time the autumn DST change repeats: fired at both its instants (croniter's reading,
# the default) or at the first only. What Cloud Scheduler does is not documented; the kit
# must run it as the job's dstRepeated says either way.
DstFires = Literal["twice", "once"]


class SchedulerEmulator:
    """Replays `ticks` scheduled runs of each job against the function it runs in:
    `target_url` (the dedup function's), or, for a job of a runtime (`Job.runtime`), that
    runtime's URL in `runtime_urls`, each with an OIDC token for its own URL and the same
    identity, the invoker account, as the deployed jobs' (url_of). Without `runtime_urls`
    every job goes to `target_url` (one HTTP target, the command line's --target).

    `clock_factory` makes one clock per job (jobs run side by side, like independent
    Scheduler jobs; each job's runs are sequential). Default: simulated time from
    `start`, durations scaled by `time_scale` real seconds per simulated second.
    `store_faults` injects the plan's store faults; a plan with store faults and no hook
    is refused (StoreFaultsUnsupported), since the emulator cannot apply them itself.
    """

    def __init__(
        self,
        target_url: str,
        stack: Stack,
        *,
        jobs: Sequence[Job] | None = None,
        runtime_urls: Mapping[str, str] | None = None,
        ticks: int = 10,
        start: datetime | None = None,
        time_scale: float = 0.02,
        clock_factory: Callable[[], Clock] | None = None,
        faults: FaultPlan | None = None,
        token: str | None = None,
        header_case: HeaderCase = "canonical",
        time_style: TimeStyle = "offset",
        job_name_style: JobNameStyle = "full",
        retries_stop_at_next_run: bool = False,
        dst_fires: DstFires = "twice",
        trace_deliveries: bool = False,
        progress: Callable[[Progress], None] | None = None,
        store_faults: StoreFaultHook | None = None,
    ) -> None:
        if ticks < 1:
            raise ValueError("ticks must be >= 1")
        plan = faults or FaultPlan()
        if plan.store_faults and store_faults is None:
            raise StoreFaultsUnsupported(plan.store_faults)
        self.target_url = target_url
        self.stack = stack
        self.jobs = tuple(jobs if jobs is not None else stack.active_jobs)
        self.runtime_urls = None if runtime_urls is None else dict(runtime_urls)
        unserved = sorted({f"{job.name} (runtime {job.runtime})" for job in self.jobs
                           if job.runtime and self.runtime_urls is not None
                           and job.runtime not in self.runtime_urls})
        if unserved:
            raise ValueError(f"no URL for the runtime of job(s) {', '.join(unserved)}: "
                             "serve each runtime and give its URL in runtime_urls")
        self.ticks = ticks
        self.start = (start or datetime.now(UTC).replace(second=0, microsecond=0)).astimezone(UTC)
        self.clock_factory = clock_factory or (lambda: ScaledClock(self.start, time_scale))
        self.faults = plan
        self.store_faults = store_faults
        invoker = (stack.invoker_email
                   or f"scheduler-invoker@{stack.project}.iam.gserviceaccount.com")
        self.token = token or scheduler_token(target_url, invoker)
        # Each runtime's function gets a token for its own URL (the audience), as deployed.
        self._tokens = {url: scheduler_token(url, invoker)
                        for url in (self.runtime_urls or {}).values() if url != target_url}
        self.header_case = header_case
        self.time_style = time_style
        self.job_name_style = job_name_style
        self.retries_stop_at_next_run = retries_stop_at_next_run
        self.trace_deliveries = trace_deliveries
        self.dst_fires = dst_fires
        self.progress = progress
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._results: list[RunResult] = []
        self._calls: list[HttpCall] = []
        self._errors: list[BaseException] = []

    # -- what Scheduler sends -------------------------------------------------------

    def schedule(self, job: Job) -> list[datetime]:
        """The job's first `ticks + 1` scheduled times after `start` (the last bounds
        the retries of the last tick)."""
        return list(itertools.islice(self._fire_times(job), self.ticks + 1))

    def _fire_times(self, job: Job) -> Iterator[datetime]:
        """When Scheduler fires the job: where croniter puts each time ("twice": both
        instants of a local time the autumn change repeats), or ("once") only the first."""
        times = schedule_times(job.schedule, job.time_zone, self.start)
        previous: datetime | None = None
        for instant in times:
            wall = instant.replace(tzinfo=None)
            if self.dst_fires == "once" and wall == previous:
                continue  # the repeated local time's second instant: not fired
            previous = wall
            yield instant

    def dst_notes(self) -> list[DstNote]:
        """The ticks of this replay that fall on a DST change's ambiguous local times."""
        notes = []
        for job in self.jobs:
            last = self.schedule(job)[self.ticks - 1]
            end = last + timedelta(seconds=1)  # the last tick included
            hazards = dst_hazards(job.schedule, job.time_zone, self.start, end)
            notes += [DstNote(job.name, job.time_zone, h) for h in hazards]
        return notes

    def url_of(self, job: Job) -> str:
        """Where `job` is delivered: its runtime's function, or the dedup function's."""
        if job.runtime and self.runtime_urls is not None:
            return self.runtime_urls[job.runtime]
        return self.target_url

    def job_name(self, job: Job) -> str:
        """X-CloudScheduler-JobName: the deployed job's name (its ID carries the stack's
        namePrefix), in full or as the bare ID."""
        if self.job_name_style == "id":
            return job.job_id
        return f"projects/{self.stack.project}/locations/{self.stack.region}/jobs/{job.job_id}"

    def headers(
        self,
        job: Job,
        schedule_time: datetime | None,
        fault: str | None = None,
        delivery: str | None = None,
        attempt: int = 1,
        sent_at: datetime | None = None,
    ) -> dict[str, str]:
        """The request headers Scheduler sends for `job`: its own, then the job's httpTarget
        headers as declared (plus a fault request and a delivery id, if any)."""
        headers = {
            "X-CloudScheduler": "true",
            "X-CloudScheduler-JobName": self.job_name(job),
            "User-Agent": USER_AGENT,
            "Authorization": f"Bearer {self._tokens.get(self.url_of(job), self.token)}",
        }
        headers.update(job.http_headers)
        declared = {name.lower() for name in headers}
        if job.body and "content-type" not in declared:
            # Scheduler's default for a body without a declared Content-Type.
            headers["Content-Type"] = "application/octet-stream"
        if schedule_time is not None:
            style = self.time_style
            if style == "mixed":
                style = "offset" if attempt % 2 else "utc"
            headers["X-CloudScheduler-ScheduleTime"] = format_schedule_time(
                schedule_time, style, job.time_zone
            )
        if fault:
            headers[FAULT_HEADER] = fault
        if delivery and self.trace_deliveries:
            headers[DELIVERY_HEADER] = delivery
            if sent_at is not None:
                headers[CLOCK_HEADER] = sent_at.astimezone(UTC).isoformat()
        if self.header_case == "lower":
            headers = {k.lower(): v for k, v in headers.items()}
        return headers

    # -- running ----------------------------------------------------------------------

    def stop(self) -> None:
        """Ask every job to stop after its current attempt."""
        self.stop_event.set()

    def run(self) -> EmulatorResult:
        started_real = time.monotonic()
        self._total = self.ticks * len(self.jobs)
        threads = [
            threading.Thread(
                target=self._job_thread, args=(job,), name=f"job-{job.name}", daemon=True
            )
            for job in self.jobs
        ]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
        except BaseException:
            self.stop()
            raise
        self.wait_for_stragglers()
        if self._errors:
            # A job thread died (a store-fault hook that failed, a bug): its runs are
            # missing, so no report may be drawn from this replay.
            raise self._errors[0]
        order = {job.name: i for i, job in enumerate(self.jobs)}
        kinds = {"scheduled": 0, "manual": 1, "manual-bare": 2}
        runs = sorted(self._results, key=lambda r: (order[r.job], r.tick, kinds[r.kind]))
        return EmulatorResult(
            runs=runs,
            target_url=self.target_url,
            ticks=self.ticks,
            started=self.start,
            real_seconds=time.monotonic() - started_real,
            stopped_early=self.stop_event.is_set(),
            dst=self.dst_notes(),
            jobs=self.jobs,
        )

    def wait_for_stragglers(self, limit: float = 5.0) -> None:
        """Wait (bounded) for the request threads to end: each one ends at its reply or,
        at the latest, when its connection is closed at the deadline. (What a target does
        after Scheduler hung up is the target's business: the demo waits for its job.)"""
        with self._lock:
            calls = list(self._calls)
        deadline = time.monotonic() + limit
        for call in calls:
            call.done.wait(max(deadline - time.monotonic(), 0.0))

    def _job_thread(self, job: Job) -> None:
        try:
            self._run_job(job)
        except BaseException as exc:
            with self._lock:
                self._errors.append(exc)
            self.stop()  # the other jobs stop too: the replay is void

    def _run_job(self, job: Job) -> None:
        clock = self.clock_factory()
        times = self._fire_times(job)
        following = next(times)
        for tick in range(self.ticks):
            if self.stop_event.is_set():
                return
            scheduled, following = following, next(times)
            if not self.retries_stop_at_next_run and tick > 0 and clock.now() > scheduled:
                # An earlier run of the job was still being retried at this tick's time.
                self._record(RunResult(
                    job.name, tick, scheduled, "scheduled", 0, stop_reason=SKIPPED,
                ))
                continue
            clock.advance_to(scheduled)
            more = tick + 1 < self.ticks  # a forced run needs its next tick replayed
            overlap = None
            if more and self.faults.hits(MANUAL_OVERLAP, job.name, tick):
                overlap = _ForcedRun(self, job, tick, following, clock)
            if self.faults.hits(MISSED, job.name, tick):
                # Scheduler never delivers this run: no attempt, no retry.
                self._record(RunResult(
                    job.name, tick, scheduled, "scheduled", 0,
                    stop_reason=NEVER_DELIVERED, faults=(MISSED,),
                ))
            else:
                workers = 2 if self.faults.hits(CONCURRENT, job.name, tick) else 1
                self._record(
                    self.deliver_run(job, tick, scheduled, following, clock, workers,
                                     overlap=overlap)
                )
            if overlap is not None:
                overlap.fire()  # if the run gave it no moment (e.g. missed), now
                overlap.join()
            if more and not self.stop_event.is_set():
                # A forced run between this tick and the next: Scheduler stamps it with
                # the next scheduled time (or, for some clients, with no time at all).
                if self.faults.hits(MANUAL, job.name, tick):
                    self._record(
                        self.deliver_run(job, tick, following, following, clock, 1, "manual")
                    )
                if self.faults.hits(MANUAL_BARE, job.name, tick):
                    self._record(
                        self.deliver_run(job, tick, None, following, clock, 1, "manual-bare")
                    )

    def _record(self, result: RunResult) -> None:
        with self._lock:
            self._results.append(result)
            scheduled = [r for r in self._results if r.kind == "scheduled"]
            progress = Progress(
                runs_done=len(scheduled),
                runs_total=self._total,
                deliveries=sum(len(r.deliveries) for r in self._results),
                acknowledged=sum(1 for r in scheduled if r.acknowledged),
                exhausted=sum(1 for r in scheduled if not r.acknowledged),
            )
        if self.progress is not None:
            self.progress(progress)

    def deliver_run(
        self,
        job: Job,
        tick: int,
        schedule_time: datetime | None,
        next_time: datetime,
        clock: Clock,
        workers: int = 1,
        kind: RunKind = "scheduled",
        *,
        overlap: _ForcedRun | None = None,
        forced_fault: str = MANUAL,
    ) -> RunResult:
        """Deliver one run until acknowledged or out of retries, by `workers` workers.
        `overlap`: a forced run that worker 0 fires during its first attempt or backoff."""
        result = RunResult(job.name, tick, schedule_time, kind, workers)
        if workers == 1:
            outcomes = [
                self._worker(job, tick, schedule_time, next_time, clock, 0, kind, result, overlap)
            ]
        else:
            outcomes = [("", False)] * workers
            threads = []
            for w in range(workers):

                def work(w: int = w) -> None:
                    outcomes[w] = self._worker(
                        job, tick, schedule_time, next_time, clock, w, kind, result,
                        overlap if w == 0 else None,
                    )

                threads.append(threading.Thread(target=work, daemon=True))
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        result.acknowledged = any(ok for _, ok in outcomes)
        result.stop_reason = "; ".join(sorted({reason for reason, _ in outcomes}))
        faults = {f for d in result.deliveries for f in d.faults}
        if workers > 1:
            faults.add(CONCURRENT)
        if kind == "manual":
            faults.add(forced_fault)
        elif kind == "manual-bare":
            faults.add(MANUAL_BARE)
        result.faults = tuple(sorted(faults))
        result.deliveries.sort(key=lambda d: (d.sent_at, d.worker, d.copy))
        return result

    def _worker(
        self,
        job: Job,
        tick: int,
        schedule_time: datetime | None,
        next_time: datetime,
        clock: Clock,
        worker: int,
        kind: RunKind,
        result: RunResult,
        overlap: _ForcedRun | None = None,
    ) -> tuple[str, bool]:
        first_attempt = clock.now()
        retries = 0
        cut_off = next_time if self.retries_stop_at_next_run else None
        while True:
            attempt = retries + 1
            deliveries = self._attempt(
                job, tick, schedule_time, clock, worker, attempt, kind, overlap
            )
            with self._lock:
                result.deliveries.extend(deliveries)
            if deliveries[0].acknowledged:
                return "acknowledged", True
            if self.stop_event.is_set():
                return "emulator stopped", False
            wait = backoff_seconds(job.retry, retries)
            reason = retry_refusal(
                job.retry, retries, first_attempt, clock.now() + timedelta(seconds=wait), cut_off
            )
            if reason:
                return reason, False
            if overlap is not None and overlap.phase == "backoff":
                overlap.fire()
            clock.sleep(wait)
            retries += 1

    def _attempt(
        self,
        job: Job,
        tick: int,
        schedule_time: datetime | None,
        clock: Clock,
        worker: int,
        attempt: int,
        kind: RunKind,
        overlap: _ForcedRun | None = None,
    ) -> list[Delivery]:
        name = job.name
        first = kind == "scheduled" and worker == 0 and attempt == 1
        kill = first and self.faults.hits(KILL, name, tick)
        slow = first and not kill and self.faults.hits(SLOW, name, tick)
        # A killed attempt's reply is lost whatever its store does: no store fault for it.
        store = self._store_fault(name, tick) if first and not kill else None
        deadline = job.attempt_deadline_seconds
        slow_real = clock.real_seconds(deadline * self.faults.slow_factor) if slow else None
        lost_ack = self.faults.hits(LOST_ACK, name, tick, worker, attempt)
        duplicate = self.faults.hits(DUPLICATE, name, tick, worker, attempt)
        tags = [f for f, on in ((KILL, kill), (SLOW, slow), (DUPLICATE, duplicate)) if on]
        if store is not None:
            tags.append(store)
        fault = fault_header(slow_real, kill)
        sent_at = clock.now()
        # The socket never outlives the deadline by much: the connection is closed then.
        socket_timeout = clock.real_seconds(deadline) + 5.0
        calls = []
        for copy in range(2 if duplicate else 1):
            delivery = Delivery(
                job=name,
                tick=tick,
                schedule_time=schedule_time,
                kind=kind,
                worker=worker,
                attempt=attempt,
                copy=copy,
                sent_at=sent_at,
                faults=tuple(tags),
            )
            calls.append(HttpCall(delivery))
        if store is not None and self.store_faults is not None:
            asked = time.monotonic()
            self.store_faults(store, calls[0].delivery)
            # The hook may have waited for the store to settle from an earlier fault: a
            # wait of the emulator's, which Scheduler would not make, so it must use up
            # none of this run's retries nor the time before the next tick.
            clock.exclude(time.monotonic() - asked)
        with self._lock:
            self._calls.extend(calls)
        for call in calls:
            headers = self.headers(job, schedule_time, fault, call.delivery.id, attempt, sent_at)
            call.start(self.url_of(job), job.http_method, headers, job.body, socket_timeout)
        if overlap is not None and overlap.phase == "attempt" and attempt == 1:
            # "Run now" while this attempt is in flight: once its request is out, so the
            # forced run can never overtake it on the way to the target.
            calls[0].sent.wait(socket_timeout)
            overlap.fire()
        primary = calls[0]
        if not clock.wait(primary.done, deadline):
            for call in calls:
                call.abandon()
        delivery = primary.delivery
        if delivery.acknowledged and lost_ack:
            # The target answered 2xx, but the answer never reached Scheduler.
            delivery.ack_lost = True
            delivery.faults = (*delivery.faults, LOST_ACK)
        return [call.delivery for call in calls]

    def _store_fault(self, job: str, tick: int) -> str | None:
        """The store fault striking this run's first attempt, if any (an outage if both)."""
        for name in (STORE_OUTAGE, STORE_STALL):
            if self.faults.hits(name, job, tick):
                return name
        return None


class _ForcedRun:
    """A forced run ("Run now") pressed while a scheduled run is still being delivered
    (the manual-overlap fault): it carries the next scheduled time, like every forced run,
    and is delivered in its own thread, with its own retries, alongside the scheduled run.

    Its moment is drawn per run: during the scheduled run's first attempt (in flight), or
    during its first backoff wait; a run that never waits gets it once it is over."""

    def __init__(
        self, emulator: SchedulerEmulator, job: Job, tick: int, next_time: datetime, clock: Clock
    ) -> None:
        self.emulator = emulator
        self.job = job
        self.tick = tick
        self.next_time = next_time
        self.clock = clock
        self.phase = emulator.faults.overlap_phase(job.name, tick)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def fire(self) -> None:
        """Deliver the forced run now (once; later calls do nothing)."""
        with self._lock:
            if self._thread is not None or self.emulator.stop_event.is_set():
                return
            self._thread = threading.Thread(
                target=self._deliver, name=f"forced-{self.job.name}-{self.tick}", daemon=True
            )
            self._thread.start()

    def join(self) -> None:
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()

    def _deliver(self) -> None:
        emulator = self.emulator
        try:
            emulator._record(emulator.deliver_run(
                self.job, self.tick, self.next_time, self.next_time, self.clock, 1, "manual",
                forced_fault=MANUAL_OVERLAP,
            ))
        except BaseException as exc:
            with emulator._lock:
                emulator._errors.append(exc)
            emulator.stop()

"""A local Cloud Scheduler: delivers a stack's jobs over HTTP the way Scheduler does.

For each job and scheduled time it sends an HTTP request with Scheduler's headers, waits
at most the job's attempt deadline for a reply (a slower target keeps running; its late
reply is recorded but does not count), treats any 2xx as success and anything else as a
failed attempt, and retries with the job's retry config: the wait follows
`scheduler_rules.backoff_seconds`, retries continue until both `retryCount` and
`maxRetryDuration` are used up (0 = no duration limit), and never start at or after the
job's next scheduled time. All timing goes through an injectable `Clock`.

Faults of the target's store (store-stall, store-outage) are beyond its reach: whoever
runs it and its store passes a `store_faults` hook, called just before a struck attempt
is sent (see faults.py).
"""

from __future__ import annotations

import base64
import http.client
import itertools
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal
from urllib.parse import urlsplit

from infra.scheduler_rules import RetrySettings, backoff_seconds, schedule_times
from scheduler_emulator.clock import Clock, ScaledClock
from scheduler_emulator.faults import (
    CONCURRENT,
    DUPLICATE,
    FAULT_HEADER,
    KILL,
    LOST_ACK,
    MANUAL,
    MANUAL_BARE,
    MISSED,
    SLOW,
    STORE_OUTAGE,
    STORE_STALL,
    FaultPlan,
    StoreFaultsUnsupported,
    fault_header,
)
from scheduler_emulator.stack import Job, Stack

USER_AGENT = "Google-Cloud-Scheduler"
# The stop reason of a run the `missed` fault struck.
NEVER_DELIVERED = "never delivered (missed)"
# Not sent by Scheduler: only with trace_deliveries, so a test target can tell which
# delivery executed the job.
DELIVERY_HEADER = "X-Emulator-Delivery"
RunKind = Literal["scheduled", "manual", "manual-bare"]
HeaderCase = Literal["canonical", "lower"]
# How the schedule time is spelled: UTC with Z (what Scheduler sends), with the job's own
# UTC offset (the same instant, as some deliveries show it), or alternating per attempt.
TimeStyle = Literal["utc", "offset", "mixed"]


def format_schedule_time(when: datetime, style: str = "utc") -> str:
    """RFC 3339 to the second: in UTC with a Z, as Scheduler sends it, or (style "offset")
    in the instant's own zone with its UTC offset, e.g. 2026-10-16T03:00:00+02:00."""
    if style == "offset":
        return when.replace(microsecond=0).isoformat()
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fake_oidc_token(audience: str, email: str) -> str:
    """A token shaped as Cloud Run forwards Scheduler's OIDC token to the container once
    it has verified it: the signature replaced by SIGNATURE_REMOVED_BY_GOOGLE. Nothing
    local verifies it; the function reads its `email` claim (DEDUP_ALLOWED_CALLERS)."""

    def part(obj: object) -> str:
        raw = json.dumps(obj, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    now = int(time.time())
    claims = {
        "aud": audience,
        "email": email,
        "email_verified": True,
        "iss": "https://accounts.google.com",
        "iat": now,
        "exp": now + 3600,
        "sub": "local-scheduler-emulator",
    }
    header = {"alg": "RS256", "kid": "local-scheduler-emulator", "typ": "JWT"}
    return f"{part(header)}.{part(claims)}.SIGNATURE_REMOVED_BY_GOOGLE"


@dataclass
class Delivery:
    """One HTTP request sent to the target (an attempt, or the duplicate of one)."""

    job: str
    tick: int
    schedule_time: datetime | None  # instant in the header; None: no header was sent
    kind: RunKind
    worker: int
    attempt: int  # 1-based, per worker
    copy: int  # 0: the attempt itself; 1: a duplicate delivery of it
    sent_at: datetime  # simulated time
    faults: tuple[str, ...] = ()
    status: int | None = None  # reply within the deadline
    error: str | None = None  # "deadline exceeded" or the connection error
    late_status: int | None = None  # reply that arrived after the deadline
    ack_lost: bool = False  # a 2xx that the lost-ack fault discarded
    reply_body: str = ""  # the reply's body (first 500 characters), in time or late
    real_seconds: float = 0.0  # from sending the request to its reply (or error)
    sent_real: float | None = None  # time.monotonic() when the request was sent

    @property
    def id(self) -> str:
        """Unique per delivery; sent as X-Emulator-Delivery when tracing deliveries."""
        when = format_schedule_time(self.schedule_time) if self.schedule_time else "none"
        return (
            f"{self.job}/{self.tick}/{self.kind}/{when}/w{self.worker}/a{self.attempt}/c{self.copy}"
        )

    @property
    def acknowledged(self) -> bool:
        """Did Scheduler see a 2xx for this attempt?"""
        return (
            self.copy == 0
            and self.status is not None
            and 200 <= self.status < 300
            and not self.ack_lost
        )

    @property
    def reply(self) -> str:
        """Short label: "200", "409", "500", "timeout", "dropped", "200 lost"."""
        if self.status is not None:
            return f"{self.status} lost" if self.ack_lost else str(self.status)
        if self.error == "deadline exceeded":
            return "timeout"
        if self.error is None:
            return "pending"
        return "dropped"


# Called with a store fault's name (faults.STORE_FAULTS) and the attempt it strikes, just
# before that attempt is sent; it may block until the store can take the fault.
StoreFaultHook = Callable[[str, Delivery], None]


@dataclass
class RunResult:
    """All deliveries of one run (a scheduled tick, or a forced manual run)."""

    job: str
    tick: int
    schedule_time: datetime | None
    kind: RunKind
    workers: int
    deliveries: list[Delivery] = field(default_factory=list)
    acknowledged: bool = False
    stop_reason: str = ""
    faults: tuple[str, ...] = ()


@dataclass
class Progress:
    runs_done: int
    runs_total: int
    deliveries: int
    acknowledged: int
    exhausted: int


@dataclass
class EmulatorResult:
    runs: list[RunResult]
    target_url: str
    ticks: int
    started: datetime
    real_seconds: float
    stopped_early: bool = False


class _Call:
    """An HTTP request in its own thread, so the emulator can stop waiting for it."""

    def __init__(self, delivery: Delivery) -> None:
        self.delivery = delivery
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._abandoned = False
        self.thread: threading.Thread | None = None

    def start(
        self,
        url: str,
        method: str,
        headers: dict[str, str],
        body: bytes | None,
        socket_timeout: float,
    ) -> None:
        self.thread = threading.Thread(
            target=self._run,
            args=(url, method, headers, body, socket_timeout),
            name=f"delivery-{self.delivery.job}-{self.delivery.tick}",
            daemon=True,
        )
        self.thread.start()

    def abandon(self) -> bool:
        """Stop waiting (deadline passed). False if the reply came in at the same moment."""
        with self._lock:
            if self.done.is_set():
                return False
            self._abandoned = True
            self.delivery.error = "deadline exceeded"
            return True

    def _run(
        self,
        url: str,
        method: str,
        headers: dict[str, str],
        body: bytes | None,
        socket_timeout: float,
    ) -> None:
        started = time.monotonic()
        with self._lock:
            self.delivery.sent_real = started
        status: int | None = None
        text = ""
        error: str | None = None
        try:
            status, text = _http_request(url, method, headers, body, socket_timeout)
        except (OSError, http.client.HTTPException) as exc:
            error = f"{type(exc).__name__}: {exc}".strip()
        with self._lock:
            d = self.delivery
            d.real_seconds = time.monotonic() - started
            # Kept for late replies too: what the target answered after the deadline
            # explains a timeout (e.g. a store fault made it slow).
            d.reply_body = text
            if self._abandoned:
                d.late_status = status
            else:
                d.status = status
                d.error = error
            self.done.set()


def _http_request(
    url: str, method: str, headers: dict[str, str], body: bytes | None, timeout: float
) -> tuple[int, str]:
    parts = urlsplit(url)
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.netloc, timeout=timeout)
    else:
        conn = http.client.HTTPConnection(parts.netloc, timeout=timeout)
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        return response.status, data[:500].decode("utf-8", "replace")
    finally:
        conn.close()


class SchedulerEmulator:
    """Replays `ticks` scheduled runs of each job against `target_url`.

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
        ticks: int = 10,
        start: datetime | None = None,
        time_scale: float = 0.02,
        clock_factory: Callable[[], Clock] | None = None,
        faults: FaultPlan | None = None,
        token: str | None = None,
        header_case: HeaderCase = "canonical",
        time_style: TimeStyle = "utc",
        full_job_name: bool = False,
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
        self.ticks = ticks
        self.start = (start or datetime.now(UTC).replace(second=0, microsecond=0)).astimezone(UTC)
        self.clock_factory = clock_factory or (lambda: ScaledClock(self.start, time_scale))
        self.faults = plan
        self.store_faults = store_faults
        self.token = token or fake_oidc_token(
            target_url,
            stack.invoker_email or f"scheduler-invoker@{stack.project}.iam.gserviceaccount.com",
        )
        self.header_case = header_case
        self.time_style = time_style
        self.full_job_name = full_job_name
        self.trace_deliveries = trace_deliveries
        self.progress = progress
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._results: list[RunResult] = []
        self._calls: list[_Call] = []
        self._max_wait_real = 0.0
        self._errors: list[BaseException] = []

    # -- what Scheduler sends -------------------------------------------------------

    def schedule(self, job: Job) -> list[datetime]:
        """The job's first `ticks + 1` scheduled times after `start` (the last bounds
        the retries of the last tick)."""
        times = schedule_times(job.schedule, job.time_zone, self.start)
        return list(itertools.islice(times, self.ticks + 1))

    def headers(
        self,
        job: Job,
        schedule_time: datetime | None,
        fault: str | None = None,
        delivery: str | None = None,
        attempt: int = 1,
    ) -> dict[str, str]:
        """The request headers Scheduler sends for `job` (plus a fault request, if any)."""
        name = job.name
        if self.full_job_name:
            name = f"projects/{self.stack.project}/locations/{self.stack.region}/jobs/{job.name}"
        headers = {
            "X-CloudScheduler": "true",
            "X-CloudScheduler-JobName": name,
            "User-Agent": USER_AGENT,
            "X-Dedup-Project": self.stack.project,
            "X-Dedup-Location": self.stack.region,
            "Content-Type": job.content_type or "application/octet-stream",
            "Authorization": f"Bearer {self.token}",
        }
        if schedule_time is not None:
            style = self.time_style
            if style == "mixed":
                style = "utc" if attempt % 2 else "offset"
            headers["X-CloudScheduler-ScheduleTime"] = format_schedule_time(schedule_time, style)
        if fault:
            headers[FAULT_HEADER] = fault
        if delivery and self.trace_deliveries:
            headers[DELIVERY_HEADER] = delivery
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
        )

    def wait_for_stragglers(self, limit: float | None = None) -> None:
        """Wait (bounded) for requests Scheduler stopped waiting for, so late replies
        and the job executions behind them are complete before anyone counts them."""
        with self._lock:
            calls = list(self._calls)
            bound = limit if limit is not None else self._max_wait_real + 5.0
        deadline = time.monotonic() + bound
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
        times = schedule_times(job.schedule, job.time_zone, self.start)
        following = next(times)
        for tick in range(self.ticks):
            if self.stop_event.is_set():
                return
            scheduled, following = following, next(times)
            clock.advance_to(scheduled)
            if self.faults.hits(MISSED, job.name, tick):
                # Scheduler never delivers this run: no attempt, no retry.
                self._record(RunResult(
                    job.name, tick, scheduled, "scheduled", 0,
                    stop_reason=NEVER_DELIVERED, faults=(MISSED,),
                ))
            else:
                workers = 2 if self.faults.hits(CONCURRENT, job.name, tick) else 1
                self._record(self.deliver_run(job, tick, scheduled, following, clock, workers))
            if tick + 1 < self.ticks and not self.stop_event.is_set():
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
    ) -> RunResult:
        """Deliver one run until acknowledged or out of retries, by `workers` workers."""
        result = RunResult(job.name, tick, schedule_time, kind, workers)
        if workers == 1:
            outcomes = [self._worker(job, tick, schedule_time, next_time, clock, 0, kind, result)]
        else:
            outcomes = [("", False)] * workers
            threads = []
            for w in range(workers):

                def work(w: int = w) -> None:
                    outcomes[w] = self._worker(
                        job, tick, schedule_time, next_time, clock, w, kind, result
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
            faults.add(MANUAL)
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
    ) -> tuple[str, bool]:
        first_attempt = clock.now()
        retries = 0
        while True:
            attempt = retries + 1
            deliveries = self._attempt(job, tick, schedule_time, clock, worker, attempt, kind)
            with self._lock:
                result.deliveries.extend(deliveries)
            if deliveries[0].acknowledged:
                return "acknowledged", True
            if self.stop_event.is_set():
                return "emulator stopped", False
            wait = backoff_seconds(job.retry, retries)
            reason = retry_refusal(
                job.retry, retries, first_attempt, clock.now() + timedelta(seconds=wait), next_time
            )
            if reason:
                return reason, False
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
        deadline_real = clock.real_seconds(deadline)
        socket_timeout = deadline_real + (slow_real or 0.0) + 30.0
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
            calls.append(_Call(delivery))
        if store is not None and self.store_faults is not None:
            asked = time.monotonic()
            self.store_faults(store, calls[0].delivery)
            # The hook may have waited for the store to settle from an earlier fault: a
            # wait of the emulator's, which Scheduler would not make, so it must use up
            # none of this run's retries nor the time before the next tick.
            clock.exclude(time.monotonic() - asked)
        with self._lock:
            self._calls.extend(calls)
            self._max_wait_real = max(self._max_wait_real, deadline_real + (slow_real or 0.0))
        for call in calls:
            headers = self.headers(job, schedule_time, fault, call.delivery.id, attempt)
            call.start(self.target_url, job.http_method, headers, job.body, socket_timeout)
        primary = calls[0]
        if not clock.wait(primary.done, deadline):
            primary.abandon()
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


def retry_refusal(
    retry: RetrySettings,
    retries_done: int,
    first_attempt: datetime,
    next_attempt: datetime,
    next_scheduled: datetime,
) -> str | None:
    """Why Scheduler would not make the retry starting at `next_attempt`, or None.

    Scheduler retries until both retryCount and maxRetryDuration (measured from the first
    attempt; 0 = no limit) are used up, and never past the next scheduled time.
    """
    if next_attempt >= next_scheduled:
        return "next scheduled time reached"
    count_left = retries_done < retry.retry_count
    duration = retry.max_retry_duration_seconds
    duration_left = duration > 0 and (next_attempt - first_attempt).total_seconds() <= duration
    if count_left or duration_left:
        return None
    if retry.retry_count == 0 and duration <= 0:
        return "no retries configured"
    if duration > 0:
        return "retryCount and maxRetryDuration used up"
    return "retryCount used up"

"""One seed's world: the stack drawn from it, and its run from start to a quiet end.

A seed draws 1-3 jobs (schedule, time zone, overlap, forcedRuns, DST choices, catch-up,
incident thresholds, Scheduler's retry policy, how the job body behaves), 2-3 instances,
the store's fault schedule (a base rate of failed, lost-reply and stalled RPCs, and
outages), how often actors are killed, duplicate deliveries, "Run now" presses, and the
watchdog's ticks; apart, so that older seeds keep their worlds, backfills and silences
(declared windows and `make silence`, draw_silences). `run_world` runs it on the
scheduler and returns what happened (simulation/record.py) for the invariants
(simulation/invariants.py).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from dedup.keys import RunKey, format_instant
from dedup.settings import Settings
from dedup.watchdog.due import WatchedJob
from dedup.watchdog.incidents import Thresholds
from dedup.watchdog.settings import WatchSettings
from simulation.actors import (
    JOB_NAME,
    SCHEDULE_TIME,
    Deliveries,
    Instance,
    JobBehaviour,
    RetryPolicy,
    StalledCommits,
    accepted,
)
from simulation.clock import SimClock, patched_kit
from simulation.firestore_fake import FakeFirestore, Fate, Rpc
from simulation.operators import ask_backfill, ask_rerun, ask_silence
from simulation.record import Line, Recorder
from simulation.scheduler import Scheduler
from simulation.watch import QueuedDeliveries, build_watchdog

PROJECT, LOCATION = "sim-project", "europe-west1"
DATABASE = "(default)"
OVERLAPS = ("allow", "forbid", "wait", "replace")
FORCED = ("separate", "replaceNext", "refuse")
# DST change days (UTC instant of the change) in two zones: spring and autumn.
DST_DAYS = (
    ("Europe/Berlin", datetime(2026, 3, 29, 1, tzinfo=UTC)),
    ("Europe/Berlin", datetime(2026, 10, 25, 1, tzinfo=UTC)),
    ("America/New_York", datetime(2026, 3, 8, 7, tzinfo=UTC)),
    ("America/New_York", datetime(2026, 11, 1, 6, tzinfo=UTC)),
)
UTC_SCHEDULES = ("*/15 * * * *", "0 * * * *", "*/10 * * * *", "*/20 * * * *")
# In the name of a "Run now" delivery's actors (the invariants tell its writes by it).
FORCED_DELIVERY = " run-now@"
LOCAL_SCHEDULE = "*/30 0-4 * * *"  # local times around both changes, in the DST zone


@dataclass(frozen=True)
class JobSpec:
    name: str
    schedule: str
    time_zone: str
    overlap: str
    forced_runs: str
    dst_repeated: str | None
    dst_skipped: str | None
    catch_up: bool
    thresholds: tuple[int, int]
    retry: RetryPolicy
    behaviour: JobBehaviour
    # Its declared silence windows, as infra/watchdog.py writes them in its table entry.
    silences: tuple[dict[str, str], ...] = ()

    def headers(self) -> dict[str, str]:
        """What the kit's Scheduler job sends (infra/scheduled_job.py job_headers)."""
        headers = {
            "X-Dedup-Project": PROJECT, "X-Dedup-Location": LOCATION,
            "X-Dedup-Schedule": self.schedule, "X-Dedup-Time-Zone": self.time_zone,
            "X-Dedup-Forced-Runs": self.forced_runs,
            "X-Dedup-Attempt-Deadline": str(int(self.retry.attempt_deadline)),
            "Content-Type": "application/json",
        }
        if self.dst_repeated:
            headers["X-Dedup-Dst-Repeated"] = self.dst_repeated
        if self.dst_skipped:
            headers["X-Dedup-Dst-Skipped"] = self.dst_skipped
        if self.overlap != "allow":
            headers["X-Dedup-Overlap"] = self.overlap
        return headers

    def watched(self) -> WatchedJob:
        """The job's entry in the watchdog's table (infra writes it from the same config)."""
        return WatchedJob(**accepted(
            WatchedJob, name=self.name, schedule=self.schedule, time_zone=self.time_zone,
            attempt_deadline_seconds=self.retry.attempt_deadline,
            retry_window_seconds=self.retry.window(), catch_up=self.catch_up,
            catch_up_within_seconds=3600.0, body="{}",
            headers=tuple(sorted(self.headers().items())),
            dst_repeated=self.dst_repeated, dst_skipped=self.dst_skipped, reruns=True,
            forced_runs=self.forced_runs,
            thresholds=Thresholds(*self.thresholds),
            silences=declared_windows(self.silences, f"{self.name}.silences")))


def declared_windows(entries: tuple[dict[str, str], ...], where: str) -> tuple[Any, ...]:
    """Windows as the watchdog reads them from its job table or DEDUP_WATCH_SILENCES
    (none on a kit without silences)."""
    if not entries:
        return ()
    try:
        from dedup.watchdog.windows import parse_windows
    except ImportError:
        return ()
    return tuple(parse_windows(list(entries), where))


@dataclass(frozen=True)
class SilenceSpec:
    """A silence of a job (None: of the stack): a window declared in the stack config
    (the job's table entry, or DEDUP_WATCH_SILENCES), or `make silence` run at `begin`
    until `until`, lifted by `make silence-remove` at `removed_at` (seconds)."""

    job: str | None
    declared: bool
    begin: float
    until: float
    removed_at: float | None = None

    def entry(self, start: datetime) -> dict[str, str]:
        """The declared window as infra writes it (infra/config/silences.py)."""
        return {"start": format_instant(start + timedelta(seconds=self.begin)),
                "end": format_instant(start + timedelta(seconds=self.until)),
                "reason": "simulated maintenance"}

    def describe(self) -> str:
        what = "window" if self.declared else "make silence"
        lifted = "" if self.removed_at is None else f" removed at {self.removed_at:.0f}s"
        return f"{what} of {self.job or 'the stack'} {self.begin:.0f}-{self.until:.0f}s{lifted}"


@dataclass(frozen=True)
class WorldSpec:
    seed: int
    start: datetime
    span: float  # seconds during which Scheduler fires the jobs
    jobs: tuple[JobSpec, ...]
    instances: int
    lease: float
    store_timeout: float
    kill_rate: float
    fault_rate: float
    outages: tuple[tuple[float, float, float], ...]  # (from, until, rate) seconds
    stall_max: float
    duplicate_chance: float
    presses: tuple[tuple[str, float], ...]  # "Run now": job, when
    reruns: tuple[tuple[str, float], ...]  # `make rerun` of the job's latest run, when
    backfills: tuple[tuple[str, float], ...]  # `make backfill` of the job's last hours, when
    tick_every: float
    grace: float
    double_tick_chance: float
    tick_retry: RetryPolicy
    task_retry: RetryPolicy
    task_fault_chance: float
    calm_at: float  # no fault, no kill from here on
    end: float  # the watchdog's last tick is before this
    silences: tuple[SilenceSpec, ...] = ()  # drawn apart (draw_silences)

    def describe(self) -> str:
        jobs = "; ".join(
            f"{j.name} '{j.schedule}' {j.time_zone} overlap={j.overlap} "
            f"forcedRuns={j.forced_runs} dst={j.dst_repeated}/{j.dst_skipped} "
            f"catchUp={j.catch_up} thresholds={j.thresholds} retries={j.retry.retry_count}"
            for j in self.jobs)
        return (f"seed {self.seed}: start {self.start:%Y-%m-%d %H:%M}Z span {self.span:.0f}s, "
                f"{self.instances} instances, lease {self.lease:g}s, kill {self.kill_rate:.3f}, "
                f"faults {self.fault_rate:.3f} outages {len(self.outages)}, presses "
                f"{len(self.presses)}, reruns {len(self.reruns)}, backfills "
                f"{len(self.backfills)}; jobs: {jobs}"
                + "".join(f"; {silence.describe()}" for silence in self.silences))


def draw_world(seed: int) -> WorldSpec:
    rng = random.Random(f"world/{seed}")
    dst = rng.random() < 0.3
    if dst:
        zone, change = rng.choice(DST_DAYS)
        start = change - timedelta(hours=rng.uniform(1.5, 3))
    else:
        zone = "Etc/UTC"
        start = datetime(2026, 6, 10, 8, tzinfo=UTC) + timedelta(
            days=rng.randrange(30), minutes=rng.randrange(60))
    start = start.replace(second=0, microsecond=0)
    span = rng.uniform(2, 4) * 3600
    lease = rng.choice((30.0, 60.0, 120.0))
    jobs = []
    for index in range(rng.choice((1, 1, 2, 2, 3))):
        local = dst and index == 0
        deadline = float(rng.choice((30, 60, 180)))
        retry = RetryPolicy(rng.choice((0, 1, 2, 3, 5)), float(rng.choice((5, 10, 30))),
                            float(rng.choice((60, 300))), rng.choice((0, 2, 5)), deadline)
        behaviour = JobBehaviour(0.5, rng.choice((5.0, 20.0, 60.0, 400.0, 900.0)),
                                 rng.choice((0.0, 0.05, 0.2)), rng.choice((0.0, 0.1, 0.3)))
        jobs.append(JobSpec(
            f"job-{index}", LOCAL_SCHEDULE if local else rng.choice(UTC_SCHEDULES),
            zone if local else "Etc/UTC", rng.choice(OVERLAPS), rng.choice(FORCED),
            rng.choice((None, "once", "each")) if local else None,
            rng.choice((None, "shift", "skip")) if local else None,
            rng.random() < 0.4, (rng.randint(1, 3), rng.randint(1, 2)), retry, behaviour))
    outages = []
    for _ in range(rng.choice((0, 0, 1, 2))):
        begin = rng.uniform(0, span)
        outages.append((begin, begin + rng.uniform(5, 300), rng.uniform(0.3, 1.0)))
    presses = tuple(_press_time(rng, rng.choice(jobs), start, span)
                    for _ in range(rng.choice((0, 1, 2, 3))))
    reruns = tuple((rng.choice(jobs).name, rng.uniform(0.3 * span, span))
                   for _ in range(rng.choice((0, 0, 1, 3))))
    more = random.Random(f"world/{seed}/backfills")  # its own draws: older seeds stay
    backfills = tuple((more.choice(jobs).name, more.uniform(0.4 * span, span))
                      for _ in range(more.choice((0, 0, 0, 1, 2))))
    tick_every = 300.0
    grace = float(rng.choice((60, 120, 300)))
    tick_retry = RetryPolicy(3, 10.0, 60.0, 2, 180.0)
    task_retry = RetryPolicy(4, 10.0, 120.0, 3, 180.0)
    longest = max(j.retry.window() for j in jobs)
    calm_at = span + longest + 2 * lease
    end = calm_at + longest + grace + task_retry.window() + 4 * tick_every
    silences = draw_silences(seed, jobs, span)
    jobs = [dataclasses.replace(job, silences=tuple(
        s.entry(start) for s in silences if s.declared and s.job == job.name))
        for job in jobs]
    return WorldSpec(
        seed, start, span, tuple(jobs), rng.choice((2, 3)), lease, 10.0,
        rng.choice((0.0, 0.001, 0.003, 0.01)), rng.choice((0.0, 0.01, 0.03, 0.08)),
        tuple(outages), lease * rng.uniform(0.2, 2.0), rng.choice((0.0, 0.05, 0.2)),
        presses, reruns, backfills, tick_every, grace, rng.choice((0.0, 0.1, 0.3)),
        tick_retry, task_retry, rng.choice((0.0, 0.1)), calm_at, end, silences)


def draw_silences(seed: int, jobs: list[JobSpec], span: float) -> tuple[SilenceSpec, ...]:
    """Three seeds in five: one or two silences over part of the span, of a job or the stack,
    declared or set by `make silence` (sometimes lifted early). Drawn from their own
    stream, so that older seeds keep their worlds; at most one `make silence` per scope
    (a second one of the same scope replaces the first)."""
    quiet = random.Random(f"world/{seed}/silences")
    silences: list[SilenceSpec] = []
    for _ in range(quiet.choice((0, 0, 1, 1, 2))):
        job = None if quiet.random() < 0.25 else quiet.choice(jobs).name
        declared = quiet.random() < 0.5 or any(
            not s.declared and s.job == job for s in silences)
        begin = float(round(quiet.uniform(0, 0.8 * span)))
        until = float(round(begin + quiet.uniform(600, 0.7 * span)))
        removed = None
        if not declared and quiet.random() < 0.4:
            removed = float(round(quiet.uniform(begin + 60, until)))
        silences.append(SilenceSpec(job, declared, begin, until, removed))
    return tuple(silences)


def _press_time(rng: random.Random, job: JobSpec, start: datetime, span: float
                ) -> tuple[str, float]:
    """When "Run now" is pressed: anywhere, or (half the time) just after a scheduled run
    began, while it may still be running."""
    from infra.scheduler_rules import schedule_times

    at = rng.uniform(0, span)
    if rng.random() < 0.5:
        fire = next(schedule_times(job.schedule, job.time_zone, start + timedelta(seconds=at)))
        at = (fire - start).total_seconds() + rng.uniform(1, 60)
    return job.name, min(at, span)


@dataclass
class SeedRun:
    """What one seed's run left: the spec, the record, the store's final state."""

    spec: WorldSpec
    recorder: Recorder
    errors: list[str]
    ended: dict[str, float]  # actor name -> when it ended
    records: dict[str, Any] = field(default_factory=dict)  # run_id -> RunRecord at the end
    # request_id -> (status, outcome) of every re-run request at the end
    requests: dict[str, tuple[str, str]] = field(default_factory=dict)
    open_incidents: set[str] = field(default_factory=set)  # in a cursor at the end
    # Catch-ups still pending in a cursor at the end (delivered again while inside their
    # bound, reported once it is over): not judged yet.
    pending_catch_ups: set[str] = field(default_factory=set)
    steps: int = 0

    def run_id(self, job: str, schedule_time: datetime, generation: int = 0,
               forced: bool = False) -> str:
        return RunKey(PROJECT, LOCATION, job, schedule_time, forced, generation).run_id


def run_world(spec: WorldSpec, wrap_store: Any = None) -> SeedRun:
    """Run the seed's world to its quiet end. `wrap_store(fake) -> client`: a test's
    broken protocol (e.g. a store that skips the claim's precondition)."""
    logging.getLogger("dedup").setLevel(logging.CRITICAL + 1)
    rng = random.Random(f"run/{spec.seed}")
    scheduler = Scheduler(rng, kill_rate=0.0)
    clock = SimClock(scheduler, spec.start)
    recorder = Recorder()
    scheduler.on_kill = lambda actor: recorder.note(scheduler.now, actor.name, "killed")
    stalls = StalledCommits(scheduler, rng, recorder, spec.stall_max)

    def fate(rpc: Rpc) -> Fate:
        now = scheduler.now
        if now >= spec.calm_at or scheduler.current is None:
            return Fate.LAND
        rate = spec.fault_rate
        for begin, until, outage in spec.outages:
            if begin <= now < until:
                rate = max(rate, outage)
        if rng.random() >= rate:
            return Fate.LAND
        drawn = rng.choice((Fate.FAIL, Fate.LOST_REPLY, Fate.STALL))
        recorder.note(now, scheduler.current.name, f"store {drawn.name} {rpc.kind} "
                      f"{' '.join(p.rsplit('/', 1)[-1] for p in rpc.paths)}")
        if drawn is Fate.STALL and rpc.kind == "commit":
            stalls.parked(rpc, scheduler.current.name)
        return drawn

    def before_rpc(rpc: Rpc) -> None:
        if scheduler.current is not None:
            scheduler.pause()

    fake = FakeFirestore(clock.wall, fates=fate, before_rpc=before_rpc)
    stalls.fake = fake
    client = wrap_store(fake) if wrap_store is not None else fake

    def made(hex_id: str) -> None:
        actor = scheduler.current
        recorder.made_by[hex_id] = actor.name if actor is not None else "main"

    with patched_kit(clock, random.Random(f"uuid/{spec.seed}"), made):
        run = _run(spec, scheduler, clock, recorder, client, rng)
    return run


def _run(spec: WorldSpec, scheduler: Scheduler, clock: SimClock, recorder: Recorder,
         client: Any, rng: random.Random) -> SeedRun:
    settings = Settings(**accepted(
        Settings, project=PROJECT, location=LOCATION, lease_seconds=spec.lease,
        retention_seconds=7 * 24 * 3600.0, store_timeout_seconds=spec.store_timeout))
    behaviours = {job.name: job.behaviour for job in spec.jobs}
    instances = [Instance(f"i{n}", settings, client, scheduler, clock, recorder, rng,
                          behaviours) for n in range(spec.instances)]
    deliveries = Deliveries(scheduler, recorder, rng, instances, spec.duplicate_chance)
    queue = QueuedDeliveries(scheduler, clock, deliveries, spec.seed, spec.task_retry,
                             spec.task_fault_chance)
    watch_settings = WatchSettings(**accepted(
        WatchSettings, store=settings, jobs=tuple(job.watched() for job in spec.jobs),
        lookback_seconds=6 * 3600.0, grace_seconds=spec.grace,
        target_url="http://sim.invalid/", delivery_timeout_seconds=150.0,
        silences=declared_windows(tuple(s.entry(spec.start) for s in spec.silences
                                        if s.declared and s.job is None), "stack")))
    asked = [s for s in spec.silences if not s.declared]
    watchdog = build_watchdog(watch_settings, client, clock, queue,
                              _emit_to(scheduler, recorder), recorder,
                              bool(spec.silences), bool(asked))
    for job in spec.jobs:
        _schedule_job(spec, job, scheduler, clock, deliveries, recorder)
    for name, at in spec.presses:
        job = next(j for j in spec.jobs if j.name == name)
        _press(spec, job, at, scheduler, clock, deliveries)
    _tick_forever(spec, scheduler, watchdog, rng, recorder)
    for name, at in spec.reruns:
        job = next(j for j in spec.jobs if j.name == name)
        _rerun(spec, job, at, settings, client, scheduler, clock, recorder)
    for name, at in spec.backfills:
        job = next(j for j in spec.jobs if j.name == name)
        _backfill(spec, job, at, settings, client, scheduler, clock, recorder)
    for silence in asked:
        ask_silence(silence, settings.collection, settings.store_timeout_seconds, client,
                    scheduler, clock, recorder)

    def calm() -> None:
        scheduler.kill_rate = 0.0

    scheduler.spawn("calm", calm, at=spec.calm_at, killable=False)
    scheduler.kill_rate = spec.kill_rate
    scheduler.run()
    ended = {actor.name: actor.ended_at or scheduler.now for actor in scheduler.actors}
    return SeedRun(spec, recorder, list(scheduler.errors), ended, steps=scheduler.steps,
                   records=_final_records(spec, client, watch_settings),
                   requests=_final_requests(client, watch_settings),
                   open_incidents=_open_incidents(client, watch_settings),
                   pending_catch_ups=_pending_catch_ups(client, watch_settings))


def _emit_to(scheduler: Scheduler, recorder: Recorder) -> Any:
    def emit(entry: Any) -> None:
        actor = scheduler.current
        name = actor.name if actor is not None else "main"
        recorder.lines.append(Line(scheduler.now, name, dict(entry)))
        if entry.get("kind") or entry.get("event") or entry.get("outcome"):
            recorder.note(scheduler.now, name, f"watchdog: {entry.get('message')} "
                          f"run {entry.get('run_id')} {entry.get('incident') or ''}")
    return emit


def _fire_times(spec: WorldSpec, job: JobSpec) -> list[datetime]:
    """When Scheduler fires the job in the span (croniter in its zone, as Scheduler)."""
    from infra.scheduler_rules import schedule_times

    until = spec.start + timedelta(seconds=spec.span)
    times = []
    for instant in schedule_times(job.schedule, job.time_zone, spec.start):
        if instant > until:
            break
        times.append(instant.astimezone(UTC))
    return times


def _attempts(what: str, job: JobSpec, headers: dict[str, str], scheduler: Scheduler,
              deliveries: Deliveries) -> None:
    """Scheduler's attempts of one run: retried on a non-2xx or no reply within the
    attempt deadline, with its backoff, retryCount times."""
    for attempt in range(job.retry.retry_count + 1):
        status = deliveries.attempt(f"{what} attempt {attempt + 1}", headers, b"{}",
                                    job.retry.attempt_deadline)
        if status is not None and 200 <= status < 300:
            return
        if attempt < job.retry.retry_count:
            scheduler.sleep(job.retry.backoff(attempt))


def _schedule_job(spec: WorldSpec, job: JobSpec, scheduler: Scheduler, clock: SimClock,
                  deliveries: Deliveries, recorder: Recorder) -> None:
    for fire in _fire_times(spec, job):
        headers = {**job.headers(), JOB_NAME: job.name, SCHEDULE_TIME: format_instant(fire)}
        what = f"{job.name}@{fire:%H:%M}Z"

        def fire_run(what: str = what, headers: dict[str, str] = headers) -> None:
            _attempts(what, job, headers, scheduler, deliveries)

        at = clock.seconds(fire) + scheduler.rng.uniform(0.0, 2.0)
        scheduler.spawn(f"scheduler:{what}", fire_run, at=at, killable=False)


def _press(spec: WorldSpec, job: JobSpec, at: float, scheduler: Scheduler, clock: SimClock,
           deliveries: Deliveries) -> None:
    """"Run now": Scheduler delivers the job with its next scheduled time."""
    from infra.scheduler_rules import schedule_times

    pressed = clock.at(at)
    upcoming = next(schedule_times(job.schedule, job.time_zone, pressed)).astimezone(UTC)
    headers = {**job.headers(), JOB_NAME: job.name, SCHEDULE_TIME: format_instant(upcoming)}
    what = f"{job.name}{FORCED_DELIVERY}{pressed:%H:%M:%S}Z"
    scheduler.spawn(f"operator:{what}",
                    lambda: _attempts(what, job, headers, scheduler, deliveries),
                    at=at, killable=False)


def _rerun(spec: WorldSpec, job: JobSpec, at: float, settings: Settings, client: Any,
           scheduler: Scheduler, clock: SimClock, recorder: Recorder) -> None:
    """`make rerun` of one of the job's runs scheduled a little before `at`."""
    watched = job.watched()
    candidates = [run.key_time for run in watched.business.runs(
        clock.at(at) - timedelta(hours=1), clock.at(at))]
    if not candidates:
        return
    instant = scheduler.rng.choice(candidates)

    def ask() -> None:
        ask_rerun(client, settings.collection, settings.store_timeout_seconds,
                  settings.retention_seconds, watched, instant, spec.grace, PROJECT,
                  LOCATION, scheduler, clock, recorder)

    scheduler.spawn(f"operator:rerun {job.name}", ask, at=at, killable=False)


def _backfill(spec: WorldSpec, job: JobSpec, at: float, settings: Settings, client: Any,
              scheduler: Scheduler, clock: SimClock, recorder: Recorder) -> None:
    """`make backfill` of the job's runs from two hours to half an hour before `at`."""
    watched = job.watched()
    first = clock.at(at) - timedelta(hours=2)
    last = clock.at(at) - timedelta(minutes=30)

    def ask() -> None:
        ask_backfill(client, settings.collection, settings.store_timeout_seconds,
                     settings.retention_seconds, watched, first, last, spec.grace, PROJECT,
                     LOCATION, scheduler, clock, recorder)

    scheduler.spawn(f"operator:backfill {job.name}", ask, at=at, killable=False)


def _tick_forever(spec: WorldSpec, scheduler: Scheduler, watchdog: Any,
                  rng: random.Random, recorder: Recorder) -> None:
    """The watchdog's Scheduler job: a tick every `tick_every`, retried after a 500 or no
    reply; sometimes a second tick at once (two workers)."""
    def tick(label: str) -> None:
        for attempt in range(spec.tick_retry.retry_count + 1):
            holder: list[int] = []

            def one(holder: list[int] = holder) -> None:
                began = scheduler.current
                if began is not None:  # its `now` (no yield before the tick reads it)
                    recorder.tick_began[began.name] = scheduler.now
                reply = watchdog.handle({}, b"")
                holder.append(reply.status)
                me = scheduler.current
                recorder.note(scheduler.now, me.name if me else "main",
                              f"watchdog tick answered {reply.status}")

            worker = scheduler.spawn(f"watchdog:{label}#{attempt + 1}", one)
            scheduler.wait_for(worker, spec.tick_retry.attempt_deadline)
            if holder and holder[0] == 200:
                return
            scheduler.sleep(spec.tick_retry.backoff(attempt))

    at = rng.uniform(0, spec.tick_every)
    count = 0
    while at < spec.end:
        label = f"tick{count}"
        scheduler.spawn(f"watchdog-scheduler:{label}", functools.partial(tick, label), at=at,
                        killable=False)
        if rng.random() < spec.double_tick_chance:
            scheduler.spawn(f"watchdog-scheduler:{label}b", functools.partial(tick, label + "b"),
                            at=at + rng.uniform(0, 3), killable=False)
        at += spec.tick_every
        count += 1


def _final_records(spec: WorldSpec, client: Any, watch: WatchSettings) -> dict[str, Any]:
    """Every run record at the end, read with no fault (the main thread: no yield point)."""
    from dedup.store.firestore import FirestoreRunStore, document_to_record

    store = FirestoreRunStore(client, watch.store.collection, watch.store.store_timeout_seconds)
    records = {}
    for snapshot in store.client.collection(watch.store.collection).stream():
        try:
            record = document_to_record(snapshot.to_dict() or {})
        except ValueError:
            continue
        # A fence (RunRecord.is_fence, where the kit has it) is no run's record: nothing ran,
        # and every reader counts it absent.
        if not getattr(record, "is_fence", False):
            records[snapshot.id] = record
    return records


def _final_requests(client: Any, watch: WatchSettings) -> dict[str, tuple[str, str]]:
    """Every re-run request's status and outcome at the end (no fault: the main thread)."""
    found = {}
    for snapshot in client.collection(watch.reruns_collection).stream():
        data = snapshot.to_dict() or {}
        found[snapshot.id] = (str(data.get("status", "")), str(data.get("outcome") or ""))
    return found


def _pending_catch_ups(client: Any, watch: WatchSettings) -> set[str]:
    """The run IDs of the catch-ups pending in a cursor at the end."""
    found: set[str] = set()
    for snapshot in client.collection(watch.cursor_collection).stream():
        catch_ups = (snapshot.to_dict() or {}).get("catch_ups") or {}
        found.update(str(run_id) for run_id in catch_ups)
    return found


def _open_incidents(client: Any, watch: WatchSettings) -> set[str]:
    """The incidents open in a cursor at the end."""
    from dedup.store.firestore import FirestoreRunStore
    from dedup.watchdog.cursors import FirestoreWatchStore

    runs = FirestoreRunStore(client, watch.store.collection, watch.store.store_timeout_seconds)
    store = FirestoreWatchStore(runs, watch.cursor_collection, {watch.store.database: runs}, runs)
    cursors = store.get_cursors([job.name for job in watch.jobs])
    open_ids = set()
    for cursor in cursors.values():
        for streak in (getattr(cursor, "incidents", None) or {}).values():
            if getattr(streak, "open", False) and streak.incident:
                open_ids.add(streak.incident)
    return open_ids

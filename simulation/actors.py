"""The simulated processes around the kit: instances, lease renewals, Cloud Scheduler,
the watchdog's queue (Cloud Tasks), and the store's stalled commits.

Each is an actor of the scheduler (simulation/scheduler.py); the kit's own code runs
inside them unchanged, built the way function/dedup/entry/app.py and
function/dedup/watchdog/tick.py build it, but on the fake store and the simulated clocks.
"""

from __future__ import annotations

import contextlib
import inspect
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dedup.cache import CompletedRunCache
from dedup.entry.http import DedupHandler, HttpReply
from dedup.job_logic import JobRegistry
from dedup.protocol import Deduplicator
from dedup.run_context import RunContext
from dedup.settings import Settings
from dedup.store.firestore import FirestoreRunStore
from simulation.clock import SimClock
from simulation.record import Execution, Line, Recorder
from simulation.scheduler import Actor, Killed, Scheduler

# The wire names of the headers (dedup/keys.py declares them): spelled here so that the
# simulation also loads against older versions of the kit.
JOB_NAME = "X-CloudScheduler-JobName"
SCHEDULE_TIME = "X-CloudScheduler-ScheduleTime"


def accepted(factory: Callable[..., Any], **kwargs: Any) -> dict[str, Any]:
    """The keyword arguments `factory` takes (older versions of the kit take fewer)."""
    parameters = inspect.signature(factory).parameters
    return {name: value for name, value in kwargs.items() if name in parameters}


class SimHeartbeats:
    """dedup.heartbeat.Heartbeats on simulated time: each claim's renewals are an actor,
    dying with the delivery that holds the claim (its instance)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    def now(self) -> float:
        return self._scheduler.now

    @contextlib.contextmanager
    def keep(self, renew: Callable[[], bool], landed_at: Callable[[], float],
             interval: float, name: str) -> Iterator[None]:
        scheduler = self._scheduler
        owner = scheduler.current
        assert owner is not None
        state = {"done": False, "busy": False}

        def renewals() -> None:
            due = landed_at() + interval
            while True:
                scheduler.sleep(max(0.0, due - scheduler.now))
                if state["done"]:
                    return
                state["busy"] = True
                try:
                    if not renew():
                        return  # lost: the job is told through claim_lost
                    due = landed_at() + interval
                except Exception:
                    due = max(scheduler.now, due + interval / 2)
                finally:
                    state["busy"] = False

        scheduler.spawn(f"{owner.name}/renew", renewals, killable=False, group_of=owner)
        try:
            yield
        finally:
            state["done"] = True
            # As Heartbeats.stop: no renewal in flight once the outcome is being written.
            while state["busy"] and not owner.killed:
                scheduler.sleep(0.05)


@dataclass(frozen=True)
class JobBehaviour:
    """What the simulated job body does: how long it runs, how often it raises."""

    min_seconds: float
    max_seconds: float
    long_chance: float  # a run this much longer than the lease (renewals matter)
    fail_chance: float


class Instance:
    """One simulated instance of the dedup function: its own Deduplicator (cache, clocks,
    heartbeats) and DedupHandler over the shared fake store."""

    def __init__(self, name: str, settings: Settings, client: Any, scheduler: Scheduler,
                 clock: SimClock, recorder: Recorder, rng: random.Random,
                 behaviours: Mapping[str, JobBehaviour]) -> None:
        self.name = name
        self._scheduler = scheduler
        self._recorder = recorder
        self._rng = rng
        self._behaviours = behaviours
        self._lease = settings.lease_seconds
        store = FirestoreRunStore(client, settings.collection, settings.store_timeout_seconds)
        dedup = Deduplicator(store, **accepted(
            Deduplicator,
            lease_seconds=settings.lease_seconds,
            retention_seconds=settings.retention_seconds,
            cache=CompletedRunCache(settings.cache_size, **accepted(
                CompletedRunCache, monotonic=clock.monotonic)),
            settle_seconds=settings.store_timeout_seconds,
            wall_clock=clock.wall, monotonic=clock.monotonic,
            heartbeats=SimHeartbeats(scheduler),
            overlap=_overlap_gate(store, settings, clock),
        ))
        self.handler = DedupHandler(settings, dedup, JobRegistry(self._job, {}), self._emit)

    def _emit(self, entry: Mapping[str, Any]) -> None:
        actor = self._scheduler.current
        name = actor.name if actor is not None else "main"
        self._recorder.lines.append(Line(self._scheduler.now, name, dict(entry)))
        if "run_id" in entry:
            self._recorder.note(self._scheduler.now, name,
                                f"{self.name}: {entry.get('status')} {entry.get('outcome')} "
                                f"run {entry['run_id']} attempt {entry.get('attempt_id')} "
                                f"{entry.get('detail') or ''}")

    def _job(self, context: RunContext) -> dict[str, Any]:
        """The simulated job: counted as an execution unless it raises."""
        scheduler = self._scheduler
        actor = scheduler.current
        assert actor is not None
        behaviour = self._behaviours[context.job_name]
        execution = Execution(context.run_id, context.attempt_id, actor.name, scheduler.now)
        self._recorder.executions.append(execution)
        self._recorder.note(scheduler.now, actor.name,
                            f"{self.name}: job starts run {context.run_id} attempt "
                            f"{context.attempt_id}")
        seconds = self._rng.uniform(behaviour.min_seconds, behaviour.max_seconds)
        if self._rng.random() < behaviour.long_chance:
            seconds += self._lease * self._rng.uniform(0.5, 2.5)
        try:
            left = seconds
            while left > 0:
                if context.claim_lost.is_set():
                    raise RuntimeError("claim lost: the job stops")
                step = min(left, self._rng.uniform(1.0, max(1.0, self._lease / 3)))
                scheduler.kill_point()
                scheduler.sleep(step)  # others run meanwhile
                left -= step
            if self._rng.random() < behaviour.fail_chance:
                raise RuntimeError("the job failed (simulated)")
        except Exception:
            execution.how, execution.ended = "raised", scheduler.now
            raise
        execution.how, execution.ended = "returned", scheduler.now
        self._recorder.note(scheduler.now, actor.name,
                            f"{self.name}: job returns run {context.run_id}")
        return {"ran": context.run_id[:8]}

    def deliver(self, headers: Mapping[str, str], body: bytes) -> HttpReply:
        return self.handler.handle(headers, body)


def _overlap_gate(store: FirestoreRunStore, settings: Settings, clock: SimClock) -> Any:
    """The overlap gate as app.overlap_gate builds it, on the simulated wall clock; None
    for a kit from before overlap policies."""
    try:
        from dedup.overlap import COLLECTION_SUFFIX, FirestoreLatestRunStore, OverlapGate
    except ImportError:
        return None
    latest = FirestoreLatestRunStore(
        store.client, settings.collection + COLLECTION_SUFFIX, store.call, store.retry,
        store.timeout)
    return OverlapGate(
        latest, store, settings.lease_seconds,
        lambda: clock.wall() + timedelta(seconds=settings.retention_seconds), clock.wall)


@dataclass(frozen=True)
class RetryPolicy:
    """A Scheduler job's retryConfig (or a queue's), and its attempt deadline."""

    retry_count: int
    min_backoff: float
    max_backoff: float
    max_doublings: int
    attempt_deadline: float

    def backoff(self, index: int) -> float:
        """Scheduler's documented backoff (infra/scheduler_rules.backoff_seconds)."""
        if index <= self.max_doublings:
            wait = self.min_backoff * 2 ** index
        else:
            step = self.min_backoff * 2 ** self.max_doublings
            wait = step + (index - self.max_doublings) * step
        return float(min(wait, self.max_backoff))

    def window(self) -> float:
        """The longest a run's retries may go on after its schedule time."""
        return sum(self.attempt_deadline + self.backoff(i) for i in range(self.retry_count)
                   ) + self.attempt_deadline


class Deliveries:
    """Sends one request to an instance as its own actor, and waits for the reply up to the
    attempt deadline, as Scheduler and Cloud Tasks do (the request goes on after that)."""

    def __init__(self, scheduler: Scheduler, recorder: Recorder, rng: random.Random,
                 instances: list[Instance], duplicate_chance: float) -> None:
        self._scheduler = scheduler
        self._recorder = recorder
        self._rng = rng
        self._instances = instances
        self._duplicate_chance = duplicate_chance

    def attempt(self, what: str, headers: Mapping[str, str], body: bytes,
                deadline: float) -> int | None:
        """The reply's status, or None if none came within `deadline` seconds."""
        scheduler = self._scheduler
        me = scheduler.current
        assert me is not None
        replies: list[int] = []
        handler_actor = self._send(what, headers, body, replies)
        if self._rng.random() < self._duplicate_chance:
            self._send(what + " (duplicate)", headers, body, [])  # a second worker
        scheduler.wait_for(handler_actor, deadline)
        return replies[0] if replies else None

    def _send(self, what: str, headers: Mapping[str, str], body: bytes,
              replies: list[int]) -> Actor:
        scheduler = self._scheduler
        instance = self._rng.choice(self._instances)
        recorder = self._recorder

        def handle() -> None:
            me = scheduler.current
            assert me is not None
            reply = instance.deliver(headers, body)
            replies.append(reply.status)
            recorder.ended[me.name] = scheduler.now
            recorder.note(scheduler.now, me.name, f"{what}: {reply.status}")

        return scheduler.spawn(f"{instance.name}:{what}#{len(recorder.trace)}", handle)


class StalledCommits:
    """The store's parked (stalled) commits, each landed (mostly) or dropped a while later,
    as a commit the store accepted late; a landing is noted for the actor that sent it."""

    def __init__(self, scheduler: Scheduler, rng: random.Random, recorder: Recorder,
                 max_delay: float) -> None:
        self._scheduler = scheduler
        self._rng = rng
        self._recorder = recorder
        self._max_delay = max_delay
        self.fake: Any = None

    def parked(self, rpc: Any, sender: str) -> None:
        scheduler = self._scheduler
        delay = self._rng.uniform(0.1, self._max_delay)
        land = self._rng.random() < 0.8
        owner = sender.split("/renew", 1)[0]  # a renewal's commit is its delivery's

        def settle() -> None:
            if not land:
                self.fake.drop_stalled(lambda parked: parked is rpc)
                return
            for _, applied in self.fake.land_stalled(lambda parked: parked is rpc):
                self._recorder.note(scheduler.now, sender, f"stalled commit {rpc.writes} "
                                    f"{'lands' if applied else 'fails'} late")
                if applied:
                    self._recorder.late_landings[owner] = scheduler.now

        scheduler.spawn("stall-settles", settle, at=scheduler.now + delay, killable=False)


__all__ = ["Deliveries", "Instance", "JobBehaviour", "Killed", "RetryPolicy",
           "SimHeartbeats", "StalledCommits", "accepted"]

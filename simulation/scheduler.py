"""A cooperative scheduler: simulated actors as threads, exactly one running at a time.

Each actor (one delivery handled by one simulated instance, a lease renewal, a watchdog
tick, an operator's command, Cloud Scheduler's timer) runs the kit's own code in a thread
of its own, but only while it holds the baton. It gives the baton up at yield points (the
fake store's `before_rpc`, the simulated job's body, simulated sleeps), where the seeded
generator picks who goes on, and may kill the actor: `Killed` (a BaseException, so the
kit's `except Exception` cannot swallow it) is raised in it, and at every later yield
point of it, so its `finally` writes never land, as with an instance that died.

Time is simulated: each yield point moves the clock by a small seeded step, and when every
actor waits on a timer the clock jumps to the earliest one. Thread scheduling by the OS
cannot change anything: the baton decides, so a seed replays exactly.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field


class Killed(BaseException):
    """Raised in an actor the simulation killed (its instance died)."""


class Livelock(RuntimeError):
    """The simulation ran more steps than any seed needs: a loop that never waits."""


@dataclass(eq=False)
class Actor:
    """One simulated thread of control; `group`: the actors that die with it."""

    name: str
    body: Callable[[], None]
    killable: bool
    baton: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    killed: bool = False
    finished: bool = False
    ended_at: float | None = None
    group: list[Actor] = field(default_factory=list)
    # Actors waiting for this one to end (Scheduler.wait_for), and this actor's current
    # timer (a timer of an earlier wait, woken early, is stale: skipped when it fires).
    waiters: list[Actor] = field(default_factory=list)
    timer: int = -1
    # What the actor is at the moment (for traces and invariants).
    tags: dict[str, object] = field(default_factory=dict)


class Scheduler:
    """The baton, the simulated monotonic clock (`now`, seconds) and the timers."""

    def __init__(self, rng: random.Random, *, kill_rate: float = 0.0, step: float = 0.02,
                 max_steps: int = 400_000) -> None:
        self.rng = rng
        self.kill_rate = kill_rate
        self.step = step
        self.max_steps = max_steps
        self.now = 0.0
        self.steps = 0
        self.current: Actor | None = None
        self._ready: list[Actor] = []
        self._timers: list[tuple[float, int, Actor]] = []  # (when, its id, whom)
        self._order = itertools.count()
        self._all_done = threading.Event()
        self.errors: list[str] = []  # an actor's unexpected exception: a simulation bug
        self.on_kill: Callable[[Actor], None] | None = None
        self._threads: list[threading.Thread] = []
        self.actors: list[Actor] = []  # every actor spawned (names unique: #n)
        # Actors asked for from threads that are no actor (the watchdog's delivery pool):
        # spawned at the next baton move, in the order of their keys, not of those threads.
        self._asked: list[tuple[str, str, Callable[[], None], float]] = []
        self._asked_lock = threading.Lock()

    # -- actors ---------------------------------------------------------------------

    def spawn(self, name: str, body: Callable[[], None], *, at: float | None = None,
              killable: bool = True, group_of: Actor | None = None) -> Actor:
        """A new actor, runnable now or at `at`; `group_of`: it dies with that actor."""
        actor = Actor(f"{name}#{next(self._order)}", body, killable)
        self.actors.append(actor)
        if group_of is not None:
            group_of.group.append(actor)
            actor.killed = group_of.killed
        thread = threading.Thread(target=self._run_actor, args=(actor,), name=actor.name,
                                  daemon=True)
        self._threads.append(thread)
        thread.start()
        if at is None or at <= self.now:
            self._ready.append(actor)
        else:
            self._set_timer(actor, at)
        return actor

    def _set_timer(self, actor: Actor, at: float) -> None:
        actor.timer = next(self._order)
        heapq.heappush(self._timers, (at, actor.timer, actor))

    def spawn_soon(self, key: str, name: str, body: Callable[[], None], at: float) -> None:
        """spawn() from any thread (a pool the kit runs): made at the next baton move,
        sorted by `key`, so the seed replays whatever order those threads ran in."""
        with self._asked_lock:
            self._asked.append((key, name, body, at))

    def _spawn_asked(self) -> None:
        with self._asked_lock:
            asked, self._asked = sorted(self._asked, key=lambda a: a[0]), []
        for _, name, body, at in asked:
            self.spawn(name, body, at=at)

    def _run_actor(self, actor: Actor) -> None:
        actor.baton.acquire()
        try:
            if actor.killed:
                raise Killed
            actor.body()
        except Killed:
            pass
        except BaseException:
            self.errors.append(f"actor {actor.name}: {traceback.format_exc()}")
        finally:
            actor.finished = True
            if actor.ended_at is None:
                actor.ended_at = self.now
            for waiter in actor.waiters:  # woken before their timeout
                if waiter.timer >= 0:
                    waiter.timer = -1
                    self._ready.append(waiter)
            self._hand_on(None)

    def run(self) -> None:
        """Run every actor (and those they spawn) until none is left; from the main thread."""
        if self._hand_on(None, start=True):
            self._all_done.wait()
        for thread in self._threads:
            thread.join()

    # -- yield points -----------------------------------------------------------------

    def pause(self, kill_ok: bool = True) -> None:
        """A yield point of the current actor: time moves a step, and the seeded choice
        says who goes on (this actor may be killed here)."""
        actor = self._me()
        self.now += self.rng.random() * self.step
        if kill_ok and actor.killable and self.kill_rate and self.rng.random() < self.kill_rate:
            self.kill(actor)
        if actor.killed:
            raise Killed
        self._wake_due()
        if self._ready:
            choice = self.rng.randrange(len(self._ready) + 1)
            if choice < len(self._ready):
                other = self._ready.pop(choice)
                self._ready.append(actor)
                self._switch(actor, other)
        if actor.killed:
            raise Killed

    def kill_point(self) -> None:
        """A point where the current actor may be killed, without giving up the baton."""
        actor = self._me()
        if actor.killable and self.kill_rate and self.rng.random() < self.kill_rate:
            self.kill(actor)
        if actor.killed:
            raise Killed

    def sleep(self, seconds: float) -> None:
        """The current actor waits `seconds` of simulated time (others run meanwhile)."""
        actor = self._me()
        if actor.killed:
            raise Killed
        self._set_timer(actor, self.now + max(0.0, seconds))
        self._hand_on(actor)
        if actor.killed:
            raise Killed

    def wait_for(self, other: Actor, timeout: float) -> bool:
        """The current actor waits until `other` ends or `timeout` seconds pass; whether
        it ended."""
        actor = self._me()
        if not other.finished:
            other.waiters.append(actor)
            self.sleep(timeout)
            if actor in other.waiters:
                other.waiters.remove(actor)
        return other.finished

    def kill(self, actor: Actor) -> None:
        """`actor` and its group die: Killed at their next yield point."""
        for member in [actor, *actor.group]:
            if not member.killed:
                member.killed = True
                if not member.finished:
                    member.ended_at = self.now
                if self.on_kill is not None:
                    self.on_kill(member)

    # -- the baton --------------------------------------------------------------------

    def _me(self) -> Actor:
        actor = self.current
        assert actor is not None and threading.current_thread().name == actor.name, (
            "a yield point outside the current actor")
        return actor

    def _wake_due(self) -> None:
        if self._asked:
            self._spawn_asked()
        while self._timers and self._timers[0][0] <= self.now:
            _, timer, actor = heapq.heappop(self._timers)
            if timer == actor.timer:  # else: stale (woken early)
                actor.timer = -1
                self._ready.append(actor)

    def _next(self) -> Actor | None:
        self._wake_due()
        while not self._ready and self._timers:
            self.now = max(self.now, self._timers[0][0])  # everyone waits: jump
            self._wake_due()
        if not self._ready:
            return None
        return self._ready.pop(self.rng.randrange(len(self._ready)))

    def _hand_on(self, waiting: Actor | None, start: bool = False) -> bool:
        """Give the baton to the next actor; `waiting`: the caller, which blocks until
        it gets it back (None: the caller ends, or is the main thread)."""
        self.steps += 1
        if self.steps == self.max_steps:
            # Every actor dies at its next yield point, so the run still ends.
            self.errors.append(f"livelock: more than {self.max_steps} steps")
            for other in [*self._ready, *(entry[2] for entry in self._timers)]:
                other.killed = True
            self.kill_rate = 1.0
        nxt = self._next()
        if nxt is None:
            self.current = None
            if not start:
                self._all_done.set()
            return False
        if nxt is waiting:
            return True
        self.current = nxt
        nxt.baton.release()
        if waiting is not None:
            waiting.baton.acquire()
        return True

    def _switch(self, actor: Actor, other: Actor) -> None:
        self.current = other
        other.baton.release()
        actor.baton.acquire()

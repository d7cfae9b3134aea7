"""The kit's clocks and randomness, simulated for one run of a seed.

The kit takes its clocks as arguments where it can (`wall_clock`, `monotonic`,
`heartbeats`); where it reads them from a module (`time.sleep` in dedup/claim.py's
retry_unavailable, `datetime.now(UTC)` in the handler and the overlap gate, `uuid.uuid4()`
for attempt IDs), `patched_kit` swaps the module attribute for a simulated one while a
seed runs and puts it back after. It patches by attribute, not by line, so the simulation
also runs against older versions of function/ (to show it finds their bugs).
"""

from __future__ import annotations

import contextlib
import datetime as datetime_module
import random
import sys
import time as time_module
import types
import uuid as uuid_module
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

from simulation.scheduler import Scheduler


class SimClock:
    """Simulated time: the scheduler's seconds since the start, and the wall clock they map to."""

    def __init__(self, scheduler: Scheduler, start: datetime) -> None:
        self.scheduler = scheduler
        self.start = start

    def monotonic(self) -> float:
        return self.scheduler.now

    def wall(self) -> datetime:
        return self.start + timedelta(seconds=self.scheduler.now)

    def at(self, seconds: float) -> datetime:
        return self.start + timedelta(seconds=seconds)

    def seconds(self, instant: datetime) -> float:
        return (instant - self.start).total_seconds()

    def sleep(self, seconds: float) -> None:
        """A simulated sleep: outside an actor (the main thread) it only moves nothing."""
        if self.scheduler.current is not None:
            self.scheduler.sleep(seconds)


def _sim_time_module(clock: SimClock) -> types.SimpleNamespace:
    """What the kit's modules call on `time`, simulated (the rest is the real module's)."""
    names = {name: getattr(time_module, name) for name in dir(time_module)
             if not name.startswith("__")}
    names.update(
        sleep=clock.sleep, monotonic=clock.monotonic, perf_counter=clock.monotonic,
        time=lambda: clock.wall().timestamp(),
    )
    return types.SimpleNamespace(**names)


class _AnyDatetime(type):
    """isinstance(x, SimDatetime) is isinstance(x, datetime): the kit checks field types."""

    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, datetime)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, datetime)


def _sim_datetime_class(clock: SimClock) -> type[datetime]:
    class SimDatetime(datetime, metaclass=_AnyDatetime):
        """datetime whose now() is the simulated wall clock."""

        @classmethod
        def now(cls, tz: datetime_module.tzinfo | None = None) -> datetime:  # type: ignore[override]
            wall = clock.wall()
            return wall.astimezone(tz) if tz is not None else wall.replace(tzinfo=None)

        @classmethod
        def utcnow(cls) -> datetime:  # type: ignore[override]
            return clock.wall().replace(tzinfo=None)

    return SimDatetime


def _sim_uuid_module(rng: random.Random, on_uuid: Callable[[str], None]
                     ) -> types.SimpleNamespace:
    def uuid4() -> uuid_module.UUID:
        made = uuid_module.UUID(int=rng.getrandbits(128), version=4)
        on_uuid(made.hex)
        return made

    names = {name: getattr(uuid_module, name) for name in dir(uuid_module)
             if not name.startswith("__")}
    names["uuid4"] = uuid4
    return types.SimpleNamespace(**names)


@contextlib.contextmanager
def patched_kit(clock: SimClock, rng: random.Random,
                on_uuid: Callable[[str], None]) -> Iterator[None]:
    """Every loaded `dedup` module's `time`, `datetime` and `uuid` simulated, then restored."""
    fake_time = _sim_time_module(clock)
    fake_datetime = _sim_datetime_class(clock)
    fake_uuid = _sim_uuid_module(rng, on_uuid)
    swaps = {time_module: fake_time, datetime: fake_datetime, uuid_module: fake_uuid}
    saved: list[tuple[types.ModuleType, str, object]] = []
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "dedup" or name.startswith("dedup.")):
            continue
        for attribute, value in list(vars(module).items()):
            for real, fake in swaps.items():
                if value is real:
                    saved.append((module, attribute, value))
                    setattr(module, attribute, fake)
    try:
        yield
    finally:
        for module, attribute, value in saved:
            setattr(module, attribute, value)


"""What one run of the program under mocks (operator_tools/offline.py) needs of this process,
and what it leaves behind cleared: `hosted_run()`.

- An event loop and the default executor whose threads serve the mock monitor's calls, all
  closed after the run (`_event_loops`).
- Python's cyclic garbage collector paused during the run, the run's garbage collected once
  after it (operator_tools/collector.py): a run keeps a few hundred objects per resource
  alive while it lasts (Pulumi's outputs, futures, tasks), which the collector, left on,
  walked again and again.
- Two of the Pulumi SDK's per-resource costs that only a real engine needs, left out of the
  run (`_engine_only_work_left_out`): the SDK's `contains_unknowns` builds a self-referencing
  closure on every call (a quarter of a 5,000-job run went to it and to collecting its
  cycles), replaced by `contains_unknowns` here, the same walk without the cycle; and every
  registration's stack trace, which the engine shows as the resource's source position and
  the mock monitor drops, is left empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any, Final

from pulumi.runtime import known_types
from pulumi.runtime import resource as sdk_resource
from pulumi.runtime import rpc as sdk_rpc
from pulumi.runtime.proto import source_pb2

from operator_tools.collector import collector_paused


@contextlib.contextmanager
def hosted_run() -> Iterator[None]:
    """The run's event loop and executor, the collector paused and the engine's own work left
    out, for the `with` block; everything as it was after it (see the module docstring)."""
    with collector_paused(), _engine_only_work_left_out(), _event_loops():
        yield


def contains_unknowns(value: Any) -> bool:
    """Whether `value` is, or holds in its dicts and lists, the engine's unknown: the Pulumi
    SDK's `pulumi.runtime.rpc.contains_unknowns`, the same walk (each object looked at once),
    without the closure that refers to itself and so makes garbage only the cyclic
    collector frees, on each of the hundreds of calls per resource."""
    return _holds_unknown(value, set())


def _holds_unknown(value: Any, seen: set[int]) -> bool:
    if known_types.is_unknown(value):
        return True
    if id(value) in seen:
        return False
    seen.add(id(value))
    if isinstance(value, dict):
        return any(_holds_unknown(value[key], seen) for key in value)
    if isinstance(value, list):
        return any(_holds_unknown(item, seen) for item in value)
    return False


def _no_stack_trace() -> source_pb2.StackTrace:
    return source_pb2.StackTrace()


ENGINE_ONLY_WORK: Final[tuple[tuple[ModuleType, str, Callable[..., Any]], ...]] = (
    (sdk_rpc, "contains_unknowns", contains_unknowns),
    (sdk_resource, "_get_stack_trace", _no_stack_trace),
)
"""(SDK module, function, what a run under mocks calls instead). A name the installed SDK
no longer has is left alone (tests/infra/test_offline_host.py says so)."""


@contextlib.contextmanager
def _engine_only_work_left_out() -> Iterator[None]:
    replaced: list[tuple[ModuleType, str, Callable[..., Any]]] = []
    for module, name, instead in ENGINE_ONLY_WORK:
        original = getattr(module, name, None)
        if original is None or original is instead:  # not in this SDK; or an enclosing
            continue  # run's replacement, which that run puts back itself
        setattr(module, name, instead)
        replaced.append((module, name, original))
    try:
        yield
    finally:
        for module, name, original in replaced:
            setattr(module, name, original)


class _LoopTrackingExecutor(ThreadPoolExecutor):
    """The run's default executor, noting the event loop each of its threads ends up with.

    Pulumi calls the (mock) resource monitor through the loop's default executor, and the
    mock monitor gives every thread that serves a call an event loop of its own
    (`_ensure_event_loop`), which nothing closes. Left to the garbage collector, such a
    loop may be finalized after its self-pipe socket, at interpreter exit as like as not;
    its close then fails ("Exception ignored in BaseEventLoop.__del__ ... ValueError:
    Invalid file descriptor: -1", by the order objects happen to be collected in)."""

    def __init__(self) -> None:
        super().__init__(thread_name_prefix="pulumi-mock-monitor")
        self._loops: set[asyncio.AbstractEventLoop] = set()
        self._loops_lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        def call() -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                self._note_thread_loop()

        return super().submit(call)

    def _note_thread_loop(self) -> None:
        try:
            loop = asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:  # this thread was given none
            return
        with self._loops_lock:
            self._loops.add(loop)

    def close_thread_loops(self) -> None:
        """Once the threads have ended (`shutdown(wait=True)`): close their loops."""
        with self._loops_lock:
            loops, self._loops = self._loops, set()
        for loop in loops:
            if not loop.is_closed():
                loop.close()


@contextlib.contextmanager
def _event_loops() -> Iterator[None]:
    """The event loop for one run of the program, and everything the run opened closed after
    it, in order: the executor's threads ended, their loops closed, then the loop itself.

    The loop is the thread's current one if the caller has one (e.g. code under
    @pulumi.runtime.test: what it started runs on that loop), lent for the run with the
    run's own executor and given back as it was; else a new one, closed after the run, and
    the thread left with no current loop as it was found (so that asyncio.get_event_loop()
    still makes one there, as the Pulumi SDK's resource code expects).
    """
    # asyncio's default policy keeps the thread's loop, and whether one was ever set, in
    # `_local`; read here so as not to make a loop just to look.
    local = getattr(asyncio.get_event_loop_policy(), "_local", None)
    current = getattr(local, "_loop", None)
    set_called = getattr(local, "_set_called", None)
    caller_loop = current if isinstance(current, asyncio.AbstractEventLoop) and not (
        current.is_closed()) else None
    loop = caller_loop or asyncio.new_event_loop()
    executor = _LoopTrackingExecutor()
    callers_executor = getattr(loop, "_default_executor", None)
    loop.set_default_executor(executor)
    if caller_loop is None:
        asyncio.set_event_loop(loop)
    try:
        yield
    finally:
        try:
            executor.shutdown(wait=True)
            executor.close_thread_loops()
        finally:
            loop._default_executor = callers_executor  # type: ignore[attr-defined]
            if caller_loop is None:
                try:
                    loop.run_until_complete(loop.shutdown_asyncgens())
                finally:
                    asyncio.set_event_loop(None)
                    if set_called is not None:
                        local._set_called = set_called  # type: ignore[union-attr]
                    loop.close()

"""What an offline run leaves out of the Pulumi SDK's work (operator_tools/offline_host.py):
its own `contains_unknowns` answers as the SDK's does, without the self-referencing closure
that made a quarter of a 5,000-job run; the SDK functions it stands in for still exist
(an SDK upgrade that renames one fails here, not silently slower), are replaced only during
a run, and are put back after it, also when the program fails."""

from __future__ import annotations

import gc
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pulumi.output import UNKNOWN
from pulumi.runtime import rpc as sdk_rpc

from infra.gcp import storage
from operator_tools.offline import run_offline
from operator_tools.offline_host import ENGINE_ONLY_WORK, contains_unknowns, hosted_run

SHARED: dict[str, Any] = {"a": 1}
LOOP: list[Any] = [1, 2]
LOOP.append(LOOP)
VALUES: list[Any] = [
    None, 0, "", "text", UNKNOWN, [], {}, [1, "x", None], [1, [2, [3, UNKNOWN]]],
    {"a": {"b": [{"c": UNKNOWN}]}}, {"a": {"b": [{"c": 3}]}}, (UNKNOWN,), {UNKNOWN: 1},
    [SHARED, SHARED], {"x": SHARED, "y": [SHARED, {"z": UNKNOWN}]}, LOOP, [LOOP, UNKNOWN],
]


@pytest.mark.parametrize("value", VALUES, ids=[repr(v)[:30] for v in VALUES])
def test_contains_unknowns_answers_as_the_sdks_own(value: Any) -> None:
    original = sdk_rpc.contains_unknowns
    assert original is not contains_unknowns  # no run is going on
    assert contains_unknowns(value) == original(value)


def cyclic_garbage_functions(call: Callable[[], object]) -> set[str]:
    """The functions `call` left in reference cycles, by module and qualified name. Judged
    by what the collector finds, not by how much: another thread of the test process (a
    gRPC channel, an earlier test's client) may leave garbage of its own meanwhile."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds stays in gc.garbage to read
    try:
        call()
        gc.collect()
        return {f"{found.__module__}.{found.__qualname__}" for found in gc.garbage
                if isinstance(found, types.FunctionType)}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def test_no_call_leaves_garbage_for_the_cyclic_collector() -> None:
    ours = cyclic_garbage_functions(lambda: [contains_unknowns(value) for value in VALUES])
    assert not {name for name in ours if name.startswith("operator_tools.")}, ours
    # What it stands in for does: a self-referencing closure per call.
    theirs = cyclic_garbage_functions(
        lambda: [sdk_rpc.contains_unknowns(value) for value in VALUES])
    assert "pulumi.runtime.rpc.contains_unknowns.<locals>.impl" in theirs


def test_the_sdk_functions_it_stands_in_for_exist() -> None:
    assert [(module.__name__, name) for module, name, _ in ENGINE_ONLY_WORK] == [
        ("pulumi.runtime.rpc", "contains_unknowns"),
        ("pulumi.runtime.resource", "_get_stack_trace"),
    ]
    assert all(callable(getattr(module, name, None)) for module, name, _ in ENGINE_ONLY_WORK)


def _sdk_functions() -> list[Any]:
    return [getattr(module, name) for module, name, _ in ENGINE_ONLY_WORK]


def test_they_are_replaced_during_a_run_and_put_back_after(tmp_path: Path) -> None:
    before = _sdk_functions()
    during: list[list[Any]] = []

    def program() -> dict[str, Any]:
        during.append(_sdk_functions())
        return {"bucket": storage.Bucket("b", name="acme-host", location="EU").name}

    run = run_offline({"gcp:project": "acme-host"}, build_dir=tmp_path, program=program)
    assert run.outputs == {"bucket": "acme-host"}
    assert during == [[instead for _, _, instead in ENGINE_ONLY_WORK]]
    assert _sdk_functions() == before


def test_they_are_put_back_when_the_program_fails(tmp_path: Path) -> None:
    before = _sdk_functions()

    def program() -> dict[str, Any]:
        raise RuntimeError("the program failed")

    with pytest.raises(RuntimeError, match="the program failed"):
        run_offline({"gcp:project": "acme-host"}, build_dir=tmp_path, program=program)
    assert _sdk_functions() == before


def test_a_run_within_another_leaves_putting_them_back_to_the_outer_one() -> None:
    """The inner run finds the functions replaced and leaves them so; the outer one puts
    the SDK's own back."""
    before = _sdk_functions()
    instead = [replacement for _, _, replacement in ENGINE_ONLY_WORK]
    with hosted_run():
        with hosted_run():
            assert _sdk_functions() == instead
        assert _sdk_functions() == instead
    assert _sdk_functions() == before


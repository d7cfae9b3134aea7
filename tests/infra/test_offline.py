"""The offline runner: repeated runs in one process stay isolated, the records are what a
policy pack sees (camelCase inputs, URNs, parents), and a run frees its garbage itself."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import weakref
from pathlib import Path
from typing import Any

import pulumi
import pytest

from infra.gcp import storage
from operator_tools.offline import (
    DeclaredResource,
    StackFileError,
    declare_stack,
    engine_config,
    load_stack_config,
    region_code,
    run_offline,
    stack_names,
)
from tests.infra.helpers import FUNCTION, JOB, StackUnderTest
from tests.stacks import FIXTURE_STACKS_DIR


def test_stack_files_are_found() -> None:
    assert stack_names(FIXTURE_STACKS_DIR) == ["dev", "prod", "retail"]


def test_records_carry_urn_parent_and_camel_case_props(stack: StackUnderTest) -> None:
    fn = stack.function
    assert fn.type == FUNCTION
    assert fn.urn.startswith(f"urn:pulumi:{stack.name}::scheduler-dedup::")
    assert fn.urn.endswith("::dedup-function")
    assert fn.parent is not None and fn.parent.endswith("::dedup")
    assert "serviceConfig" in fn.props and "service_config" not in fn.props
    assert "ingressSettings" in fn.props["serviceConfig"]
    assert all(r.urn.startswith(f"urn:pulumi:{stack.name}::") for r in stack.run.resources)


def test_runs_do_not_leak_into_each_other(tmp_path: Path) -> None:
    dev_config = load_stack_config("dev", FIXTURE_STACKS_DIR)
    prod_config = load_stack_config("prod", FIXTURE_STACKS_DIR)
    dev = declare_stack(dev_config, stack="dev", build_dir=tmp_path)
    prod = declare_stack(prod_config, stack="prod", build_dir=tmp_path)
    dev_again = declare_stack(dev_config, stack="dev", build_dir=tmp_path)
    assert dev == dev_again
    assert {r.urn for r in dev}.isdisjoint({r.urn for r in prod})
    assert [r.props["name"] for r in dev if r.type == JOB] == [
        "sched-dedup-dev-heartbeat",
        "sched-dedup-dev-hourly-sync",
        "sched-dedup-dev-nightly-report",
        "sched-dedup-dev-watchdog",
    ]


def test_callers_pulumi_settings_are_left_alone(tmp_path: Path) -> None:
    """Code that set its own mocks (e.g. a @pulumi.runtime.test) keeps them."""

    class CallerMocks(pulumi.runtime.Mocks):
        def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
            return f"{args.name}-id", dict(args.inputs)

        def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[Any]]:
            return {}, []

    def check() -> None:
        # The caller's own event loop, as @pulumi.runtime.test gives it: set_mocks registers
        # the root stack on the current loop, which an earlier test in this worker may or may
        # not have left set (the order of files per worker varies).
        asyncio.set_event_loop(asyncio.new_event_loop())
        pulumi.runtime.set_mocks(CallerMocks(), project="caller", stack="callerstack")
        pulumi.runtime.set_all_config({"caller:key": "value"})
        monitor = pulumi.runtime.settings.SETTINGS.monitor
        run_offline(load_stack_config("dev", FIXTURE_STACKS_DIR), stack="dev", build_dir=tmp_path)
        assert (pulumi.get_project(), pulumi.get_stack()) == ("caller", "callerstack")
        assert pulumi.runtime.settings.SETTINGS.monitor is monitor
        assert pulumi.Config("caller").get("key") == "value"
        assert pulumi.Config("scheduler-dedup").get("leaseSeconds") is None

    contextvars.copy_context().run(check)


def test_program_errors_propagate(tmp_path: Path) -> None:
    def broken() -> dict[str, Any]:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        run_offline(
            load_stack_config("dev", FIXTURE_STACKS_DIR), build_dir=tmp_path, program=broken
        )
    # ...and the next run is unaffected.
    assert declare_stack(load_stack_config("dev", FIXTURE_STACKS_DIR), build_dir=tmp_path)


def test_sink_sees_resources_as_they_register(tmp_path: Path) -> None:
    sink: list[DeclaredResource] = []
    run = run_offline(load_stack_config("dev", FIXTURE_STACKS_DIR), build_dir=tmp_path, sink=sink)
    assert sorted(r.urn for r in sink) == sorted(r.urn for r in run.resources)


def test_stack_file_values(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.wrapped.yaml"
    path.write_text("config:\n  gcp:project:\n    value: acme-x\n  gcp:region: us-east1\n")
    assert load_stack_config(path) == {"gcp:project": "acme-x", "gcp:region": "us-east1"}
    # A provider's secret is not needed offline (the provider is mocked); the kit's would be.
    secret = tmp_path / "Pulumi.secret.yaml"
    secret.write_text("config:\n  gcp:project: acme-x\n  gcp:credentials:\n    secure: AAAB==\n")
    assert load_stack_config(secret) == {"gcp:project": "acme-x"}
    secret.write_text("config:\n  scheduler-dedup:alerts:\n    secure: AAABAC==\n")
    with pytest.raises(StackFileError, match="scheduler-dedup:alerts is a secret, which the"):
        load_stack_config(secret)
    with pytest.raises(FileNotFoundError, match="stacks: dev, prod, retail"):
        load_stack_config("no-such-stack", FIXTURE_STACKS_DIR)


def test_engine_config_strings() -> None:
    assert engine_config({"a:b": True, "a:c": 3, "a:d": "x", "a:e": [{"k": 1}]}) == {
        "a:b": "true",
        "a:c": "3",
        "a:d": "x",
        "a:e": '[{"k": 1}]',
    }


def test_region_codes() -> None:
    assert region_code("europe-west1") == "ew"
    assert region_code("us-central1") == "uc"


class _Node:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.itself = self


def _run_leaving_a_cycle(build_dir: Path) -> tuple[weakref.ref[_Node], list[bool]]:
    """A run whose program leaves a cycle behind; (a reference to it, whether the
    collector was on while the program ran)."""
    made: list[weakref.ref[_Node]] = []
    collector_on: list[bool] = []

    def program() -> dict[str, Any]:
        collector_on.append(gc.isenabled())
        made.append(weakref.ref(_Node()))
        bucket = storage.Bucket("b", name="acme-gc", location="EU")
        return {"bucket": bucket.name}

    run = run_offline({"gcp:project": "acme-gc"}, build_dir=build_dir, program=program)
    assert run.outputs == {"bucket": "acme-gc"}
    return made[0], collector_on


def test_a_run_pauses_the_collector_and_frees_its_cycles_after(tmp_path: Path) -> None:
    """The collector walks none of a run's objects while it runs (in a 5,000-job plan its
    full collections took half the time), and the run's cyclic garbage is gone when
    run_offline returns: no collection of it is left to the caller."""
    assert gc.isenabled()
    cycle, collector_on = _run_leaving_a_cycle(tmp_path)
    assert collector_on == [False]
    assert gc.isenabled()
    assert cycle() is None


def test_a_caller_that_paused_the_collector_finds_it_paused(tmp_path: Path) -> None:
    gc.disable()
    try:
        cycle, collector_on = _run_leaving_a_cycle(tmp_path)
        assert collector_on == [False]
        assert not gc.isenabled()
        assert cycle() is not None  # nothing collected behind the caller's back
    finally:
        gc.enable()
    gc.collect()
    assert cycle() is None

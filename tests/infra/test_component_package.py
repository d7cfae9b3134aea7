"""The component package (provider/, infra/component.py): its input types follow the config
models, its schema is what Pulumi's host serves and breaks nothing within a major version,
the example stacks keep their URNs through aliases, and a TypeScript program's inputs,
through the provider's own construct path under mocks, declare what the Python program does.
"""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from dedup.version import __version__ as KIT_VERSION
from infra import KIT_ROOT as REPO_ROOT
from infra.component import COMPONENT_TYPE
from infra.component_args import ARGS_TYPE, INPUTS, config_values, input_type
from infra.component_host import (
    PACKAGE_NAME,
    component_provider,
    package_version,
    pulumi_provider_importable,
)
from infra.config import (
    AT_MOST_ONCE,
    ConfigError,
    JobSettings,
    StackConfig,
    kit_key,
    load_config,
    model_fields,
    stack_fields,
)
from infra.program import COMPONENT_NAME
from operator_tools import schema
from operator_tools.offline import DeclaredResource, OfflineRun, load_stack_config, run_offline
from tests.stacks import FIXTURE_STACKS, fixture_stack_file

URNS_BEFORE = Path(__file__).parent / "data" / "urns_before_component.json"
"""Every URN the example stacks had before SchedulerDedup (recorded from the program then)."""
MOCK_ROOT = "pulumi:pulumi:Stack$"
"""The mock monitor puts the stack's type in its children's URNs; the engine does not (a
root resource's URN is urn:pulumi:<stack>::<project>::<type>::<name>)."""


def stack_values(stack: str) -> dict[str, Any]:
    return load_stack_config(fixture_stack_file(stack))


@pytest.fixture(scope="module")
def python_runs() -> dict[str, OfflineRun]:
    return {s: run_offline(stack_values(s), stack=s) for s in FIXTURE_STACKS}


# --------------------------------------------------------------------------- input types


def test_input_types_follow_the_models_field_for_field() -> None:
    top = INPUTS[ARGS_TYPE]
    assert {f.config_key for f in top.values()} == set(stack_fields())
    models = [JobSettings, *(m for m in _nested_models(JobSettings)),
              *(_model(StackConfig, k) for k in ("watchdog", "alerts"))]
    for model in models:
        fields = INPUTS[model.__name__]
        assert [f.config_key for f in fields.values()] == list(model_fields(model))
        annotations = input_type(model.__name__).__annotations__
        assert list(annotations) == list(fields)
        required = {f.key for f, i in zip(fields.values(), model_fields(model).values(),
                                          strict=True) if i.is_required()}
        assert input_type(model.__name__).__required_keys__ == required


def _model(owner: Any, key: str) -> Any:
    return model_fields(owner)[key].annotation


def _nested_models(model: Any) -> list[Any]:
    return [f.model for f in INPUTS[model.__name__].values() if f.model is not None]


def test_the_schema_names_every_input_by_its_config_key() -> None:
    package = schema.package_schema()
    resource = package["resources"][COMPONENT_TYPE]
    expected = {k.rpartition(":")[2] for k in stack_fields()}
    assert set(resource["inputProperties"]) == expected
    assert resource["requiredInputs"] == ["jobs", "project", "region"]
    job = package["types"][f"{PACKAGE_NAME}:index:JobSettings"]
    assert list(job["properties"]) == list(model_fields(JobSettings))
    overlap = package["types"][f"{PACKAGE_NAME}:index:Overlap"]
    assert [v["value"] for v in overlap["enum"]] == ["allow", "forbid", "wait", "replace"]
    assert job["properties"]["schedule"]["description"].startswith("5-field unix-cron")


def test_config_values_are_the_stack_files_mapping() -> None:
    values = stack_values("prod")
    from infra.component_args import component_args

    assert config_values(component_args(values)) == values


def test_a_non_plain_input_is_refused_with_why() -> None:
    import pulumi

    # An Output is made on the current event loop, which an earlier test in this worker may
    # have left unset (asyncio.run does: this file's gRPC test, the ASGI adapter's tests).
    asyncio.set_event_loop(asyncio.new_event_loop())
    args = {"project": "acme-scheduler-dev", "region": "europe-west1",
            "jobs": [{"name": "a", "schedule": pulumi.Output.from_input("* * * * *")}]}
    with pytest.raises(ConfigError) as raised:
        config_values(args)
    assert raised.value.keys == ("jobs[0].schedule",)
    assert "must be plain, known values" in str(raised.value)
    assert "decide the resources' names" in str(raised.value)


# --------------------------------------------------------------------------- the schema


def test_the_checked_in_schema_is_the_one_the_host_serves_over_grpc(kit_checkout: Path) -> None:
    """The real provider process (provider/__main__.py, of a clone of the kit: its project
    is the clone's), asked over gRPC as the engine asks."""
    pulumi_provider_importable()
    import grpc  # type: ignore[import-untyped]
    from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

    process = subprocess.Popen([sys.executable, str(kit_checkout / "provider"), "127.0.0.1:1"],
                               cwd=kit_checkout, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        assert process.stdout is not None
        port = process.stdout.readline().strip()
        assert port.isdigit(), process.stderr.read() if process.stderr else port
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = provider_pb2_grpc.ResourceProviderStub(channel)
            served = stub.GetSchema(provider_pb2.GetSchemaRequest(version=0), timeout=60)
    finally:
        process.kill()
        process.wait()
    checked_in = json.loads((REPO_ROOT / schema.PACKAGE_SCHEMA_PATH).read_text())
    assert json.loads(served.schema) == checked_in
    assert checked_in["version"] == package_version(KIT_VERSION)


def test_no_breaking_schema_change_without_a_major_version() -> None:
    released = json.loads((REPO_ROOT / schema.RELEASED_SCHEMA_PATH).read_text())
    current = json.loads((REPO_ROOT / schema.PACKAGE_SCHEMA_PATH).read_text())
    if _major(current["version"]) > _major(released["version"]):
        return  # a major release may break; record its schema when tagging it
    assert schema.breaking_changes(released, current) == [], (
        f"breaking changes to the {released['version']} schema need a major version "
        "(function/dedup/version.py), or keep the old inputs")


def _major(version: str) -> int:
    return int(version.split(".", 1)[0])


def test_breaking_changes_are_found_and_additions_are_not() -> None:
    released = json.loads((REPO_ROOT / schema.RELEASED_SCHEMA_PATH).read_text())
    token, job = COMPONENT_TYPE, f"{PACKAGE_NAME}:index:JobSettings"
    overlap = f"{PACKAGE_NAME}:index:Overlap"
    changed = copy.deepcopy(released)
    del changed["resources"][token]["inputProperties"]["leaseSeconds"]
    changed["resources"][token]["requiredInputs"].append("namePrefix")
    changed["types"][job]["properties"]["paused"]["type"] = "string"
    changed["types"][overlap]["enum"].pop()
    del changed["resources"][token]["properties"]["dashboard"]
    assert sorted(schema.breaking_changes(released, changed)) == sorted([
        f"{token}: input leaseSeconds removed (or renamed)",
        f"{token}: output dashboard removed (or renamed)",
        f"{token}: input namePrefix is now required",
        f"type {job}: property paused is {{'type': 'string', 'plain': True}}, was "
        "{'type': 'boolean', 'plain': True}",
        f"type {overlap}: enum value 'replace' removed",
    ])
    added = copy.deepcopy(released)
    added["resources"][token]["inputProperties"]["newSetting"] = {"type": "string"}
    added["types"][overlap]["enum"].append({"name": "later", "value": "later"})
    added["types"][job]["properties"]["paused"]["description"] = "reworded"
    assert schema.breaking_changes(released, added) == []


# --------------------------------------------------------------------------- aliases


def _engine_urn(urn: str) -> str:
    return urn.replace(f"::{MOCK_ROOT}", "::", 1)


def _child_urn(parent_urn: str, resource: DeclaredResource) -> str:
    """The URN of a child of `parent_urn`, as the engine makes it."""
    return f"{parent_urn[:parent_urn.rfind('::')]}${resource.type}::{resource.name}"


# Resources declared since the component (a stack updated to them creates them).
ADDED_AFTER_THE_COMPONENT: dict[str, set[str]] = {
    # The watchdog's task key (issue 36) and GetTask on its queue: dev delivers runs.
    "dev": {"watchdog-task-key", "watchdog-task-key-value", "watchdog-task-key-version",
            "watchdog-task-key-reader", "watchdog-task-key-api-secretmanager",
            "watchdog-reads-deliveries"},
    "prod": set(),
}


@pytest.mark.parametrize("stack", ["dev", "prod"])  # the stacks deployed before it existed
def test_the_stacks_urns_before_the_component_are_its_childrens_aliases(
    stack: str, python_runs: dict[str, OfflineRun]
) -> None:
    run = python_runs[stack]
    component = run.one(COMPONENT_TYPE)
    children = [r for r in run.resources if r.parent == component.urn]
    assert sorted(r.name for r in children) == sorted(
        ["dedup", "monitoring", "watchdog", *(["proxy"] if stack == "prod" else []),
         *(f"job-{j['name']}" for j in stack_values(stack)[kit_key("jobs")])])
    for child in children:
        assert child.aliases == ({"noParent": True},), child.name
    # The engine gives a parent's aliases to its children (their URNs under the aliased
    # parent): the URNs each resource answers to, from its own alias or its parent's.
    answers: dict[str, set[str]] = {}
    by_urn = {r.urn: r for r in run.resources}
    for resource in run.resources:  # tree order: parents first
        own = {_engine_urn(resource.urn)}
        if resource.parent == component.urn:
            own.add(f"urn:pulumi:{stack}::scheduler-dedup::{resource.type}::{resource.name}")
        elif resource.parent in by_urn:
            own |= {_child_urn(p, resource) for p in answers[resource.parent]}
        answers[resource.urn] = own
    before = {_engine_urn(u) for u in json.loads(URNS_BEFORE.read_text())[stack]}
    reachable = {urn for urns in answers.values() for urn in urns}
    assert before - reachable == set()
    # New: the component itself, and what was added after it (its URNs had no before).
    new = {r.name for r in run.resources if not answers[r.urn] & before}
    assert new == {component.name, *ADDED_AFTER_THE_COMPONENT[stack]}
    assert len(run.resources) == len(before) + len(new)


def test_the_stack_outputs_are_the_components(python_runs: dict[str, OfflineRun]) -> None:
    prod = python_runs["prod"]
    assert list(prod.outputs)[:2] == ["functionUrl", "functionName"]
    assert prod.outputs["kitVersion"] == KIT_VERSION
    assert "proxyUrl" in prod.outputs and "proxyUrl" not in python_runs["dev"].outputs


# --------------------------------------------------------------------------- construct


def typescript_inputs(values: Mapping[str, Any]) -> dict[str, Any]:
    """What `new SchedulerDedup("...", {...})` sends for a stack file: its keys without
    namespace (gcp:project as project), the rest as the file writes it; `retry: none`,
    which is no object, as the object its description names."""
    inputs: dict[str, Any] = {}
    for key, value in values.items():
        inputs[key.rpartition(":")[2]] = copy.deepcopy(value)
    for job in inputs.get("jobs", []):
        if job.get("retry") == AT_MOST_ONCE:
            job["retry"] = {"retryCount": 0, "maxRetryDurationSeconds": 0}
    return inputs


def construct(inputs: Mapping[str, Any], stack: str) -> tuple[OfflineRun, dict[str, Any]]:
    """The provider's construct path under mocks: the inputs serialized as the engine sends
    them (property values in a Struct), read back by the provider server's own code, then
    ComponentProvider.construct, as component_provider_host serves it."""
    pulumi_provider_importable()
    from pulumi.provider.server import ProviderServicer
    from pulumi.runtime import proto, rpc

    async def wire() -> Any:
        struct = await rpc.serialize_properties(dict(inputs), {})
        return await ProviderServicer._construct_inputs(struct, {})

    received = asyncio.run(wire())
    provider = component_provider()
    state: dict[str, Any] = {}

    def program() -> Mapping[str, Any]:
        options = ProviderServicer._construct_options(proto.ConstructRequest())
        result = provider.construct(COMPONENT_NAME, COMPONENT_TYPE, received, options)
        state.update(result.state)
        return {}

    project = {"gcp:project": inputs.get("project"), "gcp:region": inputs.get("region")}
    return run_offline(project, stack=stack, program=program), state


@pytest.mark.parametrize("stack", FIXTURE_STACKS)
def test_construct_declares_what_the_python_program_does(
    stack: str, python_runs: dict[str, OfflineRun]
) -> None:
    run, state = construct(typescript_inputs(stack_values(stack)), stack)
    python = python_runs[stack]
    assert Counter((r.type, r.name) for r in run.resources) == Counter(
        (r.type, r.name) for r in python.resources)
    assert {r.urn: r.props for r in run.resources} == {r.urn: r.props for r in python.resources}
    assert set(state) == set(python.outputs)


def test_a_bad_input_through_construct_is_the_kits_config_error() -> None:
    pulumi_provider_importable()
    from pulumi.provider.server import ComponentInitError

    inputs = typescript_inputs(stack_values("dev"))
    inputs["jobs"][0]["schedule"] = "every 5 minutes"
    inputs["leaseSeconds"] = 5
    values = stack_values("dev")
    values[kit_key("jobs")][0]["schedule"] = "every 5 minutes"
    values[kit_key("leaseSeconds")] = 5
    with pytest.raises(ConfigError) as expected:
        load_config(values, deploying=True)
    with pytest.raises(ComponentInitError) as raised:
        construct(inputs, "dev")
    assert isinstance(raised.value.inner, ConfigError)
    assert str(raised.value) == str(expected.value)
    assert "schedule" in str(raised.value) and "leaseSeconds" in str(raised.value)

"""Contract checks of what runtimes declare (issue 35), on the retail example stack changed by
one value: a runtime function's Direct VPC egress parsed with Google's `Function` and the
fields the REST reference documents (infra/contracts/api_additions.py), a connector's egress
enum, the 32 KiB of a function's environment (the kit's variables with the runtime's
settings), and the 100 Firestore databases of a project. The per-resource rules, each with a
declaration it accepts and one it refuses, are in tests/infra/test_contracts.py."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.contracts import check_resources
from infra.contracts import function_limits as F
from infra.contracts import limits as L
from infra.contracts.api_additions import FUNCTIONS_V2_DIRECT_VPC, with_additions
from infra.contracts.convert import CONTRACTS, ApiType, request_body
from operator_tools import offline, plan
from operator_tools.offline import DeclaredResource, OfflineRun, load_stack_config
from tests.infra.helpers import DATABASE, FUNCTION, StackUnderTest
from tests.stacks import FIXTURE_STACKS_DIR

SYNC_FUNCTION = "runtime-sync-function"
"""The retail stack's runtime `sync`: a connector, a secret as an environment variable."""
FUNCTIONS_TYPE = "google.cloud.functions_v2.types.Function"


def retail(change: Callable[[dict[str, Any]], None] = lambda config: None) -> dict[str, Any]:
    """The retail example stack's config, changed by `change`."""
    config: dict[str, Any] = copy.deepcopy(load_stack_config("retail", FIXTURE_STACKS_DIR))
    change(config)
    return config


def sync_runtime(config: dict[str, Any]) -> dict[str, Any]:
    runtime: dict[str, Any] = config["scheduler-dedup:runtimes"][0]
    assert runtime["name"] == "sync"
    return runtime


def plan_errors(
    directory: Path, config: Mapping[str, Any], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[int, list[str]]:
    """`make plan` of the stack (exit status, error lines): the real program under the mocks,
    without the start-up check (each function started in a virtualenv: test_job_logic.py)."""
    monkeypatch.setattr(offline, "check_job_logic", lambda *args, **kwargs: None)
    path = directory / "Pulumi.changed.yaml"
    path.write_text(yaml.safe_dump({"config": dict(config)}))
    status = plan.main([str(path)])
    err = capsys.readouterr().err
    return status, [line for line in err.splitlines() if line.strip()]


def replaced(run: OfflineRun | list[DeclaredResource], name: str,
             change: Callable[[dict[str, Any]], None]) -> list[DeclaredResource]:
    """The resources, the one named `name` with its props changed."""
    resources = run.resources if isinstance(run, OfflineRun) else run
    [resource] = [r for r in resources if r.name == name]
    props = copy.deepcopy(dict(resource.props))
    change(props)
    bad = DeclaredResource(type=resource.type, name=resource.name, urn=resource.urn,
                           props=props)
    return [bad if r.urn == resource.urn else r for r in resources]


# --- Direct VPC egress ----------------------------------------------------------------------


def direct_vpc(props: dict[str, Any]) -> None:
    """A function's serviceConfig with Direct VPC egress instead of a connector."""
    service = props["serviceConfig"]
    del service["vpcConnector"], service["vpcConnectorEgressSettings"]
    service.update(directVpcEgress="VPC_EGRESS_ALL_TRAFFIC", directVpcNetworkInterfaces=[
        {"network": "internal", "subnetwork": "internal-us-west1", "tags": ["inventory"]}])


@pytest.fixture(scope="module")
def direct_vpc_run(stack_runs: Mapping[str, StackUnderTest]) -> list[DeclaredResource]:
    """The retail stack with runtime sync's function on Direct VPC egress, as a program
    might declare it (the kit's config refuses Direct VPC egress: docs/job-needs.md; the
    contract checks still read such a declaration as Google's API would)."""
    return replaced(stack_runs["retail"].run, SYNC_FUNCTION, direct_vpc)


def test_a_runtime_with_direct_vpc_egress_passes_as_the_apis_request(
    direct_vpc_run: list[DeclaredResource],
) -> None:
    assert check_resources(direct_vpc_run) == []
    [function] = [r for r in direct_vpc_run if r.name == SYNC_FUNCTION]
    service = request_body(CONTRACTS[FUNCTION], function.props)["serviceConfig"]
    # pulumi-gcp's directVpcNetworkInterfaces is the REST API's directVpcNetworkInterface.
    assert service["directVpcNetworkInterface"] == [
        {"network": "internal", "subnetwork": "internal-us-west1", "tags": ["inventory"]}]
    assert service["directVpcEgress"] == "VPC_EGRESS_ALL_TRAFFIC"
    assert "directVpcNetworkInterfaces" not in service and "vpcConnector" not in service


@pytest.mark.parametrize(
    ("key", "value", "prop"),
    [
        # The connector's enum where Direct VPC's is due: Google's type refuses it.
        ("directVpcEgress", "ALL_TRAFFIC", "serviceConfig.directVpcEgress"),
        ("directVpcEgress", "VPC_EGRESS_ALL", "serviceConfig.directVpcEgress"),
        ("directVpcNetworkInterfaces", [{"network": "internal", "subnet": "s"}],
         "serviceConfig.directVpcNetworkInterface[0].subnet"),
    ],
)
def test_a_wrong_direct_vpc_value_is_refused_by_googles_type(
    direct_vpc_run: list[DeclaredResource], key: str, value: Any, prop: str,
) -> None:
    resources = replaced(direct_vpc_run, SYNC_FUNCTION,
                         lambda props: props["serviceConfig"].update({key: value}))
    (finding,) = check_resources(resources)
    assert (finding.resource_type, finding.resource_name, finding.property) == (
        FUNCTION, SYNC_FUNCTION, prop)
    assert finding.rule.text.startswith(f"{FUNCTIONS_TYPE} refuses it: ")


def test_a_misspelt_connector_egress_of_the_retail_stack_is_refused(
    stack_runs: Mapping[str, StackUnderTest],
) -> None:
    run = stack_runs["retail"].run
    assert run.by_name(SYNC_FUNCTION).props["serviceConfig"]["vpcConnectorEgressSettings"] == \
        "PRIVATE_RANGES_ONLY"
    resources = replaced(run, SYNC_FUNCTION, lambda props: props["serviceConfig"].update(
        vpcConnectorEgressSettings="PRIVATE_RANGES"))
    (finding,) = check_resources(resources)
    assert (finding.resource_name, finding.property, finding.value) == (
        SYNC_FUNCTION, "serviceConfig.vpcConnectorEgressSettings", "PRIVATE_RANGES")
    assert finding.rule.text.startswith(f"{FUNCTIONS_TYPE} refuses it: ")


def test_the_installed_type_lacks_direct_vpc_and_the_addition_retires_once_it_has_it() -> None:
    """When the first assertion fails, google-cloud-functions models Direct VPC egress:
    FUNCTIONS_V2_DIRECT_VPC is then moot (with_additions returns the installed type)."""
    installed = ApiType("google.cloud.functions_v2.types", "Function").message_class()
    service = installed.DESCRIPTOR.fields_by_name["service_config"].message_type
    assert "direct_vpc_egress" not in service.fields_by_name
    augmented = CONTRACTS[FUNCTION].api_type.message_class()
    added = augmented.DESCRIPTOR.fields_by_name["service_config"].message_type
    assert {"direct_vpc_egress", "direct_vpc_network_interface"} <= set(added.fields_by_name)
    present = dataclasses.replace(FUNCTIONS_V2_DIRECT_VPC, marker=("ServiceConfig",
                                                                   "vpc_connector"))
    assert with_additions(installed, present) is installed


# --- 32 KiB of environment variables ------------------------------------------------------


def sync_environment_bytes(run: OfflineRun) -> int:
    env = run.by_name(SYNC_FUNCTION).props["serviceConfig"]["environmentVariables"]
    return sum(len(key.encode()) + len(str(value).encode()) for key, value in env.items())


def test_a_runtime_whose_settings_pass_32_kib_with_the_kits_fails_the_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    stack_runs: Mapping[str, StackUnderTest],
) -> None:
    """Up to the byte: the kit's DEDUP_* variables count with the runtime's settings."""
    room = F.FUNCTION_ENV_VARS_MAX_BYTES - sync_environment_bytes(stack_runs["retail"].run)
    name = "INVENTORY_CATALOG"

    def setting(size: int) -> Callable[[dict[str, Any]], None]:
        return lambda config: sync_runtime(config)["settings"].update({name: "x" * size})

    assert plan_errors(tmp_path, retail(setting(room - len(name))), capsys,
                       monkeypatch) == (0, [])
    status, errors = plan_errors(tmp_path, retail(setting(room - len(name) + 1)), capsys,
                                 monkeypatch)
    assert status == 2
    (line,) = errors[1:]
    assert line.startswith(
        f"  - {FUNCTION} {SYNC_FUNCTION!r}: serviceConfig.environmentVariables = "
        f"'{F.FUNCTION_ENV_VARS_MAX_BYTES + 1:,} bytes' (function 'retail-sync': the kit's "
        "DEDUP_* variables ")
    assert f"largest: {name} {room + 1:,} B" in line
    assert f"{F.R_ENV_TOTAL.text}; fix: {F.R_ENV_TOTAL.fix} (source: " in line
    assert "runtimes[].secrets[].path" in line and "runtimes[].settings" in line


# --- 100 Firestore databases per project --------------------------------------------------


def test_98_runtimes_with_the_dedup_proxy_and_watchdog_databases_fail_the_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    def runtimes(count: int) -> Callable[[dict[str, Any]], None]:
        def change(config: dict[str, Any]) -> None:
            # Without the example's team services (their databases count as well).
            config.pop("scheduler-dedup:services", None)
            config["scheduler-dedup:jobs"] = [
                j for j in config["scheduler-dedup:jobs"] if "service" not in j]
            have = len(config["scheduler-dedup:runtimes"])
            for index in range(have + 1, count + 1):
                config["scheduler-dedup:runtimes"].append({"name": f"r{index}"})
                config["scheduler-dedup:jobs"].append(
                    {"name": f"job-{index}", "schedule": "0 * * * *", "runtime": f"r{index}"})
        return change

    status, errors = plan_errors(tmp_path, retail(runtimes(98)), capsys, monkeypatch)
    assert status == 2
    (line,) = errors[1:]
    assert line.startswith(
        f"  - {DATABASE} 'watchdog-database': project = 'acme-retail-prod' (the stack declares "
        "101 Firestore databases in this project: runtime 98, dedup 1, proxy 1, watchdog 1): ")
    assert f"{L.R_DATABASE_COUNT.text}; fix: {L.R_DATABASE_COUNT.fix}" in line
    assert "the other stacks in the same project" in line
    assert "https://cloud.google.com/firestore/quotas" in line


def databases(count: int, project: str = "acme") -> list[DeclaredResource]:
    return [DeclaredResource(type=DATABASE, name=f"runtime-r{index}-database",
                             urn=f"urn:{project}:{index}",
                             props={"project": project, "name": f"retail-r{index}"})
            for index in range(count)]


def test_a_project_holds_100_databases_counted_per_project() -> None:
    assert check_resources(databases(100)) == []
    assert check_resources(databases(60, "acme") + databases(60, "acme-eu")) == []
    (finding,) = check_resources(databases(101))
    assert (finding.resource_name, finding.property, finding.value, finding.rule) == (
        "runtime-r100-database", "project", "acme", L.R_DATABASE_COUNT)
    assert finding.detail == "the stack declares 101 Firestore databases in this project: " \
        "runtime 101"

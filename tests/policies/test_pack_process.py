"""The pack as `pulumi preview --policy-pack policies` runs it, without the CLI.

Starts the pack exactly as the CLI's Python policy runtime does
(`python -u -m pulumi.policy <engine> <pack dir>` from inside policies/, without the
repository on PYTHONPATH), then speaks the analyzer gRPC protocol to it like the engine:
GetAnalyzerInfo, Configure (a --policy-pack-config), Analyze (a resource's inputs, with
preview's unknown sentinels) and AnalyzeStack.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]
import pytest
from google.protobuf import empty_pb2, json_format, struct_pb2  # type: ignore[import-untyped]
from pulumi.runtime.proto import analyzer_pb2 as proto
from pulumi.runtime.proto import analyzer_pb2_grpc as proto_grpc

from policies.model import Enforcement, Resource, StackPolicy
from policies.registry import ALL_POLICIES
from tests.policies.fixtures import (
    DELETE,
    PROJECT,
    U,
    function_props,
    job_props,
    kit_stack,
    patch,
    preview_proxy_stack,
    preview_stack,
    proxy_child,
    res,
    without_type,
)

PACK_DIR = Path(__file__).resolve().parents[2] / "policies"
LEVELS = {
    proto.MANDATORY: Enforcement.MANDATORY,
    proto.ADVISORY: Enforcement.ADVISORY,
    proto.DISABLED: Enforcement.DISABLED,
}


@pytest.fixture(scope="module")
def analyzer() -> Iterator[Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "pulumi.policy", "127.0.0.1:1", str(PACK_DIR)],
        cwd=PACK_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        port = _read_port(process)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        yield proto_grpc.AnalyzerStub(channel)
        channel.close()
    finally:
        process.kill()
        process.wait(timeout=10)
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()
        process.stderr.close()


def _read_port(process: subprocess.Popen[bytes]) -> int:
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if selector.select(timeout=1):
            line = process.stdout.readline().decode().strip()
            if line.isdigit():
                return int(line)
        if process.poll() is not None:
            assert process.stderr is not None
            pytest.fail(f"the pack exited: {process.stderr.read().decode()}")
    pytest.fail("the pack did not print its port within 60 s")


def struct(props: Mapping[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(json.loads(json.dumps(props)))
    return message


def analyze(stub: Any, resource: Resource) -> list[Any]:
    request = proto.AnalyzeRequest(
        type=resource.type, properties=struct(resource.props), urn=resource.urn, name=resource.name
    )
    return list(stub.Analyze(request).diagnostics)


def analyze_stack(stub: Any, resources: Sequence[Resource]) -> list[Any]:
    request = proto.AnalyzeStackRequest(
        resources=[
            proto.AnalyzerResource(type=r.type, properties=struct(r.props), urn=r.urn, name=r.name)
            for r in resources
        ]
    )
    return list(stub.AnalyzeStack(request).diagnostics)


def configure(stub: Any, levels: Mapping[str, Any]) -> None:
    stub.Configure(
        proto.ConfigureAnalyzerRequest(
            policyConfig={k: proto.PolicyConfig(enforcementLevel=v) for k, v in levels.items()}
        )
    )


def test_the_pack_describes_every_policy(analyzer: Any) -> None:
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty())
    assert info.name == "scheduler-dedup"
    got = {p.name: (p.description, LEVELS[p.enforcementLevel]) for p in info.policies}
    assert got == {p.name: (p.description, p.enforcement) for p in ALL_POLICIES}
    kinds = {p.name: p.policy_type for p in info.policies}
    for policy in ALL_POLICIES:
        expected = (
            proto.PolicyType.POLICY_TYPE_RESOURCE
            if not isinstance(policy, StackPolicy)
            else proto.PolicyType.POLICY_TYPE_STACK
        )
        assert kinds[policy.name] == expected


def test_compliant_resources_pass_also_at_preview(analyzer: Any) -> None:
    for resource in [*kit_stack(), *preview_stack()]:
        assert analyze(analyzer, resource) == [], resource.name
    assert analyze_stack(analyzer, kit_stack()) == []
    assert analyze_stack(analyzer, preview_stack()) == []


def test_violations_are_reported_even_next_to_unknowns(analyzer: Any) -> None:
    # OAuth instead of OIDC, while the audience and the invoker e-mail are not known yet:
    # pulumi_policy's proxy alone would stop at the first unknown and report nothing.
    props = patch(job_props(), "httpTarget.uri", U)
    props = patch(props, "httpTarget.oidcToken", {"audience": U})
    props = patch(props, "httpTarget.oauthToken", {"serviceAccountEmail": U})
    props = patch(props, "schedule", "every 5 minutes")
    diagnostics = analyze(analyzer, res("gcp:cloudscheduler/job:Job", "bad-job", props))
    got = sorted((d.policyName, LEVELS[d.enforcementLevel]) for d in diagnostics)
    assert got == [
        ("scheduler-job-oidc-auth", Enforcement.MANDATORY),
        ("scheduler-job-oidc-auth", Enforcement.MANDATORY),
        ("scheduler-job-unix-cron-schedule", Enforcement.MANDATORY),
    ]
    assert all(d.urn.endswith("::bad-job") for d in diagnostics)
    assert not any("can't run policy" in d.message for d in diagnostics)


def test_stack_policies_run_over_the_whole_stack(analyzer: Any) -> None:
    diagnostics = analyze_stack(
        analyzer, without_type(preview_stack(), "gcp:firestore/field:Field")
    )
    assert [d.policyName for d in diagnostics] == ["dedup-ttl-policy"]
    assert LEVELS[diagnostics[0].enforcementLevel] is Enforcement.MANDATORY


def test_policy_config_changes_enforcement(analyzer: Any) -> None:
    bad = res(
        "gcp:cloudfunctionsv2/function:Function",
        "fn",
        patch(function_props(), "serviceConfig.ingressSettings", DELETE),
    )
    try:
        configure(analyzer, {"function-ingress-not-public": proto.ADVISORY})
        (diagnostic,) = analyze(analyzer, bad)
        assert LEVELS[diagnostic.enforcementLevel] is Enforcement.ADVISORY
        configure(analyzer, {"function-ingress-not-public": proto.DISABLED})
        assert analyze(analyzer, bad) == []
    finally:
        configure(analyzer, {})
    (diagnostic,) = analyze(analyzer, bad)
    assert LEVELS[diagnostic.enforcementLevel] is Enforcement.MANDATORY


def test_a_grant_in_the_proxy_component_is_judged_before_its_member_is_known(
    analyzer: Any,
) -> None:
    """Analyze (one resource, as the engine sends it before creating it): the URN alone
    links the grant to the proxy, so the first preview blocks it."""
    grant = proxy_child(
        "gcp:projects/iAMMember:IAMMember",
        "proxy-storage-admin",
        {"project": PROJECT, "role": "roles/storage.admin", "member": U},
    )
    diagnostics = analyze(analyzer, grant)
    assert [(d.policyName, LEVELS[d.enforcementLevel]) for d in diagnostics] == [
        ("dedup-proxy-component-grants", Enforcement.MANDATORY)
    ]
    assert diagnostics[0].urn == grant.urn
    for resource in preview_proxy_stack():
        assert analyze(analyzer, resource) == [], resource.name


def test_a_grant_is_linked_to_the_proxy_account_by_its_dependencies(analyzer: Any) -> None:
    """AnalyzeStack at a first preview: the grant's member is unknown, its dependency on the
    proxy's Account resource links it."""
    stack = preview_proxy_stack()
    (account,) = [r for r in stack if r.name == "proxy-sa"]
    grant = res(
        "gcp:projects/iAMMember:IAMMember",
        "someone-elses-grant",
        {"project": PROJECT, "role": "roles/storage.admin", "member": U},
    )
    request = proto.AnalyzeStackRequest(
        resources=[
            *(
                proto.AnalyzerResource(
                    type=r.type, properties=struct(r.props), urn=r.urn, name=r.name
                )
                for r in stack
            ),
            proto.AnalyzerResource(
                type=grant.type, properties=struct(grant.props), urn=grant.urn,
                name=grant.name, dependencies=[account.urn],
            ),
        ]
    )
    diagnostics = list(analyzer.AnalyzeStack(request).diagnostics)
    assert [(d.policyName, d.urn) for d in diagnostics] == [
        ("dedup-proxy-least-privilege", grant.urn)
    ]


def _configure_settings(stub: Any, settings: Mapping[str, Mapping[str, Any]]) -> None:
    """A --policy-pack-config with properties, as the engine sends it (each entry's level
    is the policy's own: Configure carries one for every policy)."""
    levels = {p.name: p.enforcement for p in ALL_POLICIES}
    to_proto = {v: k for k, v in LEVELS.items()}
    stub.Configure(
        proto.ConfigureAnalyzerRequest(
            policyConfig={
                name: proto.PolicyConfig(
                    enforcementLevel=to_proto[level], properties=struct(settings.get(name, {}))
                )
                for name, level in levels.items()
            }
        )
    )


def test_the_pack_declares_the_deployers_schema(analyzer: Any) -> None:
    """The CLI validates a --policy-pack-config against these schemas before any policy
    runs: a deployer that is no service account's IAM member is refused there."""
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty())
    schemas = {
        p.name: json_format.MessageToDict(p.configSchema.properties) for p in info.policies
    }
    with_schema = {name for name, properties in schemas.items() if properties}
    assert with_schema == {"iam-no-role-admin-or-build-create", "dedup-accounts-act-as"}
    for name in with_schema:
        deployers = schemas[name]["deployers"]
        assert deployers["type"] == "array"
        assert deployers["items"]["pattern"].startswith("^serviceAccount:")


def test_the_pack_reads_deployers_from_its_config(analyzer: Any) -> None:
    deployer = f"serviceAccount:pulumi-deployer@{PROJECT}.iam.gserviceaccount.com"
    grant = res(
        "gcp:projects/iAMMember:IAMMember",
        "deployer-role-admin",
        {"project": PROJECT, "role": "roles/iam.roleAdmin", "member": deployer},
    )
    stack = [*kit_stack(), grant]
    try:
        _configure_settings(analyzer, {})
        assert [d.policyName for d in analyze_stack(analyzer, stack)] == [
            "iam-no-role-admin-or-build-create"
        ]
        _configure_settings(
            analyzer, {"iam-no-role-admin-or-build-create": {"deployers": [deployer]}}
        )
        assert analyze_stack(analyzer, stack) == []
        # A group as deployer (the schema would have the CLI refuse it; a config that reaches
        # the pack anyway is reported, and the policy runs with no exemption).
        _configure_settings(
            analyzer,
            {"iam-no-role-admin-or-build-create": {"deployers": [deployer, "group:ops@x.com"]}},
        )
        diagnostics = analyze_stack(analyzer, stack)
        assert [d.policyName for d in diagnostics] == ["iam-no-role-admin-or-build-create"] * 2
        assert "is a group, not a service account" in diagnostics[0].message
        assert diagnostics[0].urn == ""
        assert diagnostics[1].urn == grant.urn
    finally:
        configure(analyzer, {})
    assert [d.policyName for d in analyze_stack(analyzer, stack)] == [
        "iam-no-role-admin-or-build-create"
    ]

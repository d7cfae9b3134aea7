"""The `deployers` setting (policies/deployers.py): what it accepts, which policies read it,
and how the policy config, the offline check and the pack hand it to them.

The pass/fail fixtures of the two policies with and without it are in round_two_cases.py.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from operator_tools.offline import DeclaredResource, load_stack_config, run_offline
from policies import deployers, offline_check
from policies.evaluate import (
    PolicyConfigError,
    load_pack_config,
    parse_pack_config,
    parse_policy_settings,
)
from policies.iam import no_role_admin_or_build_create
from policies.model import SettingError, StackPolicy
from policies.pack import build_policies, config_schema
from policies.registry import ALL_POLICIES, by_name
from tests.policies.fixtures import (
    APPSPOT_SA,
    CLOUDBUILD_SA,
    COMPUTE_SA,
    INVOKER_SA,
    PROJECT,
    PROJECT_IAM_BINDING,
    RUNTIME_SA,
    SA_IAM_MEMBER,
    kit_stack,
    res,
)
from tests.policies.round_two_cases import DEPLOYER, DEPLOYER_SA, GROUP, PRINCIPAL_SET
from tests.stacks import fixture_stack_file

ROOT = Path(__file__).resolve().parents[2]
READERS = {"iam-no-role-admin-or-build-create", "dedup-accounts-act-as"}
REFUSED = [
    GROUP,
    PRINCIPAL_SET,
    "principal://iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/github/"
    "subject/repo:acme/scheduler-dedup:environment:production",
    "user:alice@example.com",
    "domain:example.com",
    "allUsers",
    "allAuthenticatedUsers",
    f"deleted:serviceAccount:{DEPLOYER_SA}?uid=123",
    DEPLOYER_SA,  # an e-mail, not an IAM member
    f"serviceaccount:{DEPLOYER_SA}",
    f" {DEPLOYER}",
    "serviceAccount:deploy@example.com",  # not a service account's domain
    f"serviceAccount:{COMPUTE_SA}",
    f"serviceAccount:{APPSPOT_SA}",
    f"serviceAccount:{CLOUDBUILD_SA}",
    "serviceAccount:",
    # Google-managed service accounts, service agents (issue 36): a Google service acts as
    # them (https://cloud.google.com/iam/docs/service-agents).
    "serviceAccount:service-123456789012@gcp-sa-cloudbuild.iam.gserviceaccount.com",
    "serviceAccount:service-123456789012@gcp-sa-cloudscheduler.iam.gserviceaccount.com",
    "serviceAccount:service-123456789012@compute-system.iam.gserviceaccount.com",
    "serviceAccount:service-123456789012@serverless-robot-prod.iam.gserviceaccount.com",
    "serviceAccount:service-org-123456789012@gcp-sa-ktd-hpsa.iam.gserviceaccount.com",
    "serviceAccount:service-p123456789012@gcp-sa-accessapproval.iam.gserviceaccount.com",
    "serviceAccount:123456789012@cloudservices.gserviceaccount.com",
    "serviceAccount:firebase-agent@gcp-sa-firebase.iam.gserviceaccount.com",
    "serviceAccount:robot@cloud-ml.google.com.iam.gserviceaccount.com",
]


# --- the setting -------------------------------------------------------------------------


def test_only_the_two_escalation_policies_read_it() -> None:
    readers = {
        p.name for p in ALL_POLICIES if isinstance(p, StackPolicy) and deployers.SETTING in
        p.settings
    }
    assert readers == READERS
    assert all(
        not isinstance(p, StackPolicy) or not p.settings for p in ALL_POLICIES
        if p.name not in READERS
    )


def test_service_accounts_are_accepted_in_any_case() -> None:
    scoped = "serviceAccount:deployer@ci.example.com.iam.gserviceaccount.com"  # domain-scoped
    assert deployers.parse(
        [DEPLOYER, f"serviceAccount:CI-Bot@{PROJECT.upper()}.iam.gserviceaccount.com", scoped]
    ) == {DEPLOYER_SA, f"ci-bot@{PROJECT}.iam.gserviceaccount.com",
          scoped.removeprefix("serviceAccount:")}
    assert deployers.parse([]) == frozenset()


@pytest.mark.parametrize("member", REFUSED)
def test_anything_but_a_dedicated_service_account_is_a_setting_error(member: str) -> None:
    with pytest.raises(SettingError) as error:
        deployers.parse([DEPLOYER, member])
    assert f"deployers: {member!r} " in str(error.value)
    assert "set it to the deployer's own service accounts only" in str(error.value)


@pytest.mark.parametrize(
    ("member", "kind"),
    [(GROUP, "is a group"), (PRINCIPAL_SET, "is a principal set"),
     (f"serviceAccount:{COMPUTE_SA}", "is a default service account")],
)
def test_the_error_says_what_the_member_is(member: str, kind: str) -> None:
    with pytest.raises(SettingError, match=kind):
        deployers.parse([member])


@pytest.mark.parametrize("value", [DEPLOYER, {"a": DEPLOYER}, None, [3]])
def test_not_a_list_of_strings_is_a_setting_error(value: Any) -> None:
    with pytest.raises(SettingError):
        deployers.parse(value)


@pytest.mark.parametrize("member", [DEPLOYER, *REFUSED])
def test_what_the_cli_schema_lets_through_the_policies_accept_or_report(member: str) -> None:
    """The schema's pattern (the CLI refuses a config that does not match it) never admits
    what the policies refuse, except the default accounts and Google-managed service
    agents, which only they know: the pack reports those as a violation."""
    matches = re.fullmatch(deployers.PATTERN.strip("^$"), member) is not None
    try:
        deployers.parse([member])
        accepted = True
    except SettingError:
        accepted = False
    assert matches or not accepted
    if matches and not accepted:
        email = member.removeprefix("serviceAccount:")
        assert email in {COMPUTE_SA, APPSPOT_SA, CLOUDBUILD_SA} or deployers.google_managed(email)


# --- the policies ------------------------------------------------------------------------


def test_a_listed_deployer_is_left_out_of_a_binding_and_the_rest_reported() -> None:
    binding = res(PROJECT_IAM_BINDING, "admins", {
        "project": PROJECT, "role": "roles/iam.roleAdmin",
        "members": [DEPLOYER, GROUP, f"serviceAccount:{RUNTIME_SA}"]})
    stack = [*kit_stack(), binding]
    (finding,) = no_role_admin_or_build_create(stack, deployers.parse([DEPLOYER]))
    assert finding.message.startswith(
        f"roles/iam.roleAdmin (iam.roles.create, iam.roles.update) is granted to {GROUP}, "
        f"serviceAccount:{RUNTIME_SA} on projects 'admins'"
    )
    assert "list it in this policy's `deployers` setting" in finding.message
    listed = deployers.parse([DEPLOYER, f"serviceAccount:{RUNTIME_SA}"])
    (finding,) = no_role_admin_or_build_create(stack, listed)
    assert f"{RUNTIME_SA} is listed in deployers but is an account of the kit" in finding.message


def test_a_kit_account_listed_as_deployer_still_may_not_act_as_another() -> None:
    policy = by_name("dedup-accounts-act-as")
    assert isinstance(policy, StackPolicy)
    grant = res(SA_IAM_MEMBER, "runtime-as-invoker", {
        "serviceAccountId": f"projects/{PROJECT}/serviceAccounts/{INVOKER_SA}",
        "role": "roles/iam.serviceAccountUser", "member": f"serviceAccount:{RUNTIME_SA}"})
    settings = policy.configure({"deployers": [f"serviceAccount:{RUNTIME_SA}"]})
    (finding,) = policy.run([*kit_stack(), grant], settings)
    assert f"{RUNTIME_SA} is listed in deployers but is an account of the kit" in finding.message


# --- the policy config -------------------------------------------------------------------


def test_the_example_config_lists_the_deployer_for_both_policies() -> None:
    document = json.loads((ROOT / "policies" / "policy-config.example.json").read_text("utf-8"))
    config = parse_pack_config(document)
    assert set(config.settings) == READERS
    for name in READERS:
        (email,) = config.settings[name]["deployers"]
        assert email.endswith(".iam.gserviceaccount.com")
    assert name not in config.levels


def test_settings_default_to_nobody() -> None:
    assert parse_policy_settings({}) == {name: {"deployers": frozenset()} for name in READERS}
    only_level = {"dedup-accounts-act-as": "advisory"}
    assert parse_policy_settings(only_level)["dedup-accounts-act-as"] == {
        "deployers": frozenset()}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"dedup-accounts-act-as": {"deployers": [GROUP]}},
         "dedup-accounts-act-as: deployers: 'group:ops@example.com' is a group"),
        ({"iam-no-role-admin-or-build-create": {"deployers": [DEPLOYER, PRINCIPAL_SET]}},
         "iam-no-role-admin-or-build-create: deployers: 'principalSet://"),
        ({"all": {"deployers": [DEPLOYER]}},
         "all: 'deployers' is under 'all', which the CLI passes to no policy: set it in the "
         "entry of 'iam-no-role-admin-or-build-create' and 'dedup-accounts-act-as'"),
        ({"dedup-token-secret-readers": {"deployers": [DEPLOYER]}},
         "dedup-token-secret-readers: 'deployers' is a setting this policy does not read"),
    ],
)
def test_a_setting_error_is_a_config_error(document: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyConfigError) as error:
        parse_pack_config(document)
    assert str(error.value).startswith(message), error.value


def test_load_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"dedup-accounts-act-as": {"deployers": [GROUP]}}), "utf-8")
    with pytest.raises(PolicyConfigError, match=f"^{re.escape(str(path))}: dedup-accounts"):
        load_pack_config(path)


# --- the offline check (make policy-check POLICY_CONFIG=...) -----------------------------


def _with_deployer_grants(declared: list[DeclaredResource]) -> list[DeclaredResource]:
    """dev's resources plus the deployer's actAs on the invoker and Role Administrator on the
    project, as if the program declared them."""
    (invoker,) = [d for d in declared if d.name == "dedup-invoker-sa"]
    grants = {
        "deployer-acts-as-invoker": (SA_IAM_MEMBER, {
            "serviceAccountId": invoker.outputs["name"], "role": "roles/iam.serviceAccountUser",
            "member": DEPLOYER}),
        "deployer-role-admin": ("gcp:projects/iAMMember:IAMMember", {
            "project": "acme-scheduler-dev", "role": "roles/iam.roleAdmin", "member": DEPLOYER}),
    }
    return [*declared, *(
        dataclasses.replace(
            invoker, type=kind, name=name, urn=f"urn:pulumi:dev::scheduler-dedup::{kind}::{name}",
            props=props, parent=None, outputs=props, dependencies=())
        for name, (kind, props) in grants.items()
    )]


def _run(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    return offline_check.main(list(args), out=out), out.getvalue()


def _lines(output: str) -> list[str]:
    """The violation lines, without the per-stack and total counts."""
    return [line for line in output.splitlines() if line.startswith("  ")]


def test_offline_check_reads_deployers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dev = str(fixture_stack_file("dev"))
    declared = list(run_offline(load_stack_config(fixture_stack_file("dev")), stack="dev")
                    .resources)
    monkeypatch.setattr(offline_check, "declare", lambda _path: (declared, {}))
    _, baseline = _run("--stack-file", dev)
    granted = _with_deployer_grants(declared)
    monkeypatch.setattr(offline_check, "declare", lambda _path: (granted, {}))
    code, output = _run("--stack-file", dev)
    assert code == offline_check.EXIT_VIOLATIONS, output
    assert "[mandatory] dedup-accounts-act-as: deployer-acts-as-invoker " in output
    assert "[mandatory] iam-no-role-admin-or-build-create: deployer-role-admin " in output

    config = tmp_path / "policy-config.dev.json"
    listed = {"deployers": [DEPLOYER]}
    config.write_text(json.dumps({"iam-no-role-admin-or-build-create": listed,
                                  "dedup-accounts-act-as": listed}), "utf-8")
    code, output = _run("--stack-file", dev, "--policy-config", str(config))
    assert _lines(output) == _lines(baseline), output

    # Listed for one policy only: the other still refuses the deployer.
    config.write_text(json.dumps({"dedup-accounts-act-as": listed}), "utf-8")
    code, output = _run("--stack-file", dev, "--policy-config", str(config))
    assert code == offline_check.EXIT_VIOLATIONS, output
    assert "dedup-accounts-act-as: deployer" not in output
    assert "[mandatory] iam-no-role-admin-or-build-create: deployer-role-admin " in output


def test_offline_check_refuses_a_group_deployer(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"dedup-accounts-act-as": {"deployers": [GROUP]}}), "utf-8")
    code, output = _run("--stack-file", str(fixture_stack_file("dev")),
                        "--policy-config", str(config))
    assert code == offline_check.EXIT_ERROR
    assert "policy config: " in output and "is a group, not a service account" in output


# --- the pack ----------------------------------------------------------------------------


def test_the_pack_declares_the_setting_as_config_schema() -> None:
    built = {p.name: p for p in build_policies()}
    for policy in ALL_POLICIES:
        schema = built[policy.name].config_schema
        if policy.name not in READERS:
            assert schema is None, policy.name
            continue
        assert isinstance(policy, StackPolicy)
        expected = config_schema(policy)
        assert schema is not None and expected is not None
        assert schema.properties == expected.properties
        assert schema.properties["deployers"]["items"] == {
            "type": "string", "pattern": deployers.PATTERN}

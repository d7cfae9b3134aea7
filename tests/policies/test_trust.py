"""Issue 36's identity boundaries beyond the pass/fail fixtures (trust_cases.py): the places
the kit may name its caller identities are the ones its own program declares, a finding
says where and what to change, and a listed deployer's protection is its own entry's.
"""

from __future__ import annotations

from functools import cache

import pytest

from infra.iam_wait import SLEEP_TYPE
from policies import deployers, identities
from policies.accounts import act_as_only_own_accounts
from policies.deployer_trust import deployer_project
from policies.facts import StackFacts
from policies.gcp import TASKS_QUEUE
from policies.iam import no_role_admin_or_build_create
from policies.model import Resource, SettingError
from policies.offline_check import declare
from tests.policies.fixtures import INVOKER_SA, PROJECT, kit_stack
from tests.policies.trust_cases import (
    DEPLOYER,
    DEPLOYER_SA,
    GROUP,
    PUSH_AS_INVOKER,
    THING_AS_INVOKER,
    on_deployer,
)
from tests.stacks import fixture_stack_file

EXAMPLE_STACKS = ("dev", "prod", "retail")


@cache
def example_state(stack: str) -> tuple[Resource, ...]:
    """The example stack's resources as the stack policies see them (inputs and outputs)."""
    return tuple(
        Resource(d.type, d.name, d.urn, d.outputs or d.props, d.parent, tuple(d.dependencies))
        for d in declare(fixture_stack_file(stack))[0]
    )


def kit_places(resources: tuple[Resource, ...]) -> set[tuple[str, tuple[str, ...]]]:
    """(type, path) of every place the stack names a caller identity that KIT_USES allows."""
    facts = StackFacts(resources)
    found = identities.caller_identities(facts)
    assert found.roles, "no caller identity found: the walk would judge nothing"
    return {
        (r.type, path)
        for r in resources
        for path, email in identities.identity_mentions(r.props, found)
        if identities.kit_use(facts, r, path, found.roles[email])
    }


def test_the_allowed_places_are_the_ones_the_kits_program_declares() -> None:
    """Every entry of KIT_USES is a place the example stacks put an identity, but the
    deliveries queue's OIDC override (the kit sets none; the queue policies judge where
    one points), so the allow-list holds nothing the kit does not need."""
    used = set().union(*(kit_places(example_state(s)) for s in EXAMPLE_STACKS))
    listed = {(u.resource_type, u.path) for u in identities.KIT_USES}
    queue = {(t, p) for t, p in listed if t == TASKS_QUEUE}
    assert used == listed - queue


def test_the_iam_wait_type_is_the_programs() -> None:
    assert identities.IAM_WAIT_TYPE == SLEEP_TYPE


@pytest.mark.parametrize("stack", EXAMPLE_STACKS)
def test_the_example_stacks_name_the_identities_only_where_allowed(stack: str) -> None:
    assert identities.kit_identities_kit_only(example_state(stack)) == []


def test_a_finding_names_the_resource_the_place_and_the_account() -> None:
    (finding,) = identities.kit_identities_kit_only([*kit_stack(), PUSH_AS_INVOKER])
    assert finding.urn == PUSH_AS_INVOKER.urn
    assert finding.message.startswith(
        f"gcp:pubsub/subscription:Subscription 'orders-push' names {INVOKER_SA}, the jobs' "
        "invoker account, at pushConfig.oidcToken.serviceAccountEmail:")
    assert "use an account of its own" in finding.message


@pytest.mark.parametrize("form", [
    INVOKER_SA.upper(), f"serviceAccount:{INVOKER_SA}", f" projects/-/serviceAccounts/{INVOKER_SA}",
    f"projects/{PROJECT}/serviceAccounts/{INVOKER_SA.title()}",
])
def test_every_form_of_the_account_is_matched(form: str) -> None:
    thing = Resource(THING_AS_INVOKER.type, "thing", THING_AS_INVOKER.urn,
                     {"nested": [{"deep": {"identity": form}}]})
    (finding,) = identities.kit_identities_kit_only([*kit_stack(), thing])
    assert "at nested.deep.identity:" in finding.message


def test_a_key_naming_the_account_is_judged_too() -> None:
    thing = Resource(THING_AS_INVOKER.type, "thing", THING_AS_INVOKER.urn,
                     {"grants": {INVOKER_SA: "owner"}})
    assert len(identities.kit_identities_kit_only([*kit_stack(), thing])) == 1


def test_another_account_or_a_longer_string_is_not_the_account() -> None:
    thing = Resource(THING_AS_INVOKER.type, "thing", THING_AS_INVOKER.urn, {
        "note": f"tokens of {INVOKER_SA} are accepted",
        "identity": f"x{INVOKER_SA}"})
    assert identities.kit_identities_kit_only([*kit_stack(), thing]) == []


# --- deployers ---------------------------------------------------------------------------


def test_each_policy_protects_the_deployers_its_own_entry_lists() -> None:
    stack = [*kit_stack(), on_deployer("roles/iam.serviceAccountTokenCreator", GROUP)]
    listed = deployers.parse([DEPLOYER])
    (finding,) = act_as_only_own_accounts(stack, listed)
    assert finding.message.startswith(
        f"roles/iam.serviceAccountTokenCreator on serviceaccount 'on-deployer' lets {GROUP} "
        f"act as or mint tokens of {DEPLOYER_SA} (")
    assert "listed in dedup-accounts-act-as's `deployers` setting" in finding.message
    assert no_role_admin_or_build_create(stack) == []
    (other,) = no_role_admin_or_build_create(stack, listed)
    assert "listed in iam-no-role-admin-or-build-create's `deployers`" in other.message


def test_only_the_members_other_than_the_deployer_are_reported() -> None:
    binding = Resource("gcp:serviceaccount/iAMBinding:IAMBinding", "on-deployer",
                       "urn:pulumi:dev::scheduler-dedup::x::on-deployer", {
                           "serviceAccountId": f"projects/{PROJECT}/serviceAccounts/"
                                               f"{DEPLOYER_SA}",
                           "role": "roles/iam.serviceAccountUser",
                           "members": [DEPLOYER, GROUP]})
    (finding,) = act_as_only_own_accounts([*kit_stack(), binding], deployers.parse([DEPLOYER]))
    assert f"lets {GROUP} act as" in finding.message
    assert f"lets {DEPLOYER}" not in finding.message


def test_a_service_agent_is_refused_naming_the_entry() -> None:
    agent = "serviceAccount:service-123456789012@gcp-sa-cloudscheduler.iam.gserviceaccount.com"
    with pytest.raises(SettingError, match="is a Google-managed service account"):
        deployers.parse([DEPLOYER, agent])


@pytest.mark.parametrize(("email", "project"), [
    (DEPLOYER_SA, PROJECT),
    ("deployer@ci.example.com.iam.gserviceaccount.com", "example.com:ci"),
    ("123456789012-compute@developer.gserviceaccount.com", None),
])
def test_a_deployers_project_is_read_from_its_email(email: str, project: str | None) -> None:
    assert deployer_project(email) == project

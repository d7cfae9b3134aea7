"""Each policy against its pass/fail fixtures: exactly the failing fixtures violate it."""

from __future__ import annotations

import pytest

from infra.config import ConfigError, load_config
from policies.databases import database_writers
from policies.gcp import FIRESTORE_FIELD
from policies.model import SettingError, StackPolicy
from policies.registry import ALL_POLICIES, by_name
from policies.stack import (
    allowed_callers,
    lease_survives_missed_renewals,
    proxy_own_database,
    ttl_policy_on_expire_at,
)
from tests.policies.bypass_cases import BYPASS_CASES
from tests.policies.cases import RESOURCE_CASES, STACK_CASES, Case
from tests.policies.fixtures import (
    DATABASE,
    PROJECT,
    PROXY_DATABASE,
    PROXY_DATASTORE_CONDITION,
    PROXY_SA,
    RUNTIME_SA,
    kit_stack,
    proxy_stack,
    replace_named,
    without_named,
)
from tests.policies.queue_cases import CASES as QUEUE_CASES
from tests.policies.round_two_cases import ROUND_TWO_CASES
from tests.policies.runtime_cases import RUNTIME_CASES
from tests.policies.runtime_review_cases import REVIEW_CASES
from tests.policies.service_cases import CASES as SERVICE_CASES
from tests.policies.service_review_cases import CASES as SERVICE_REVIEW_CASES
from tests.policies.trust_cases import TRUST_CASES

ALL_CASES: dict[str, list[Case]] = {
    name: [
        *RESOURCE_CASES.get(name, []),
        *STACK_CASES.get(name, []),
        *BYPASS_CASES.get(name, []),
        *ROUND_TWO_CASES.get(name, []),
        *RUNTIME_CASES.get(name, []),
        *REVIEW_CASES.get(name, []),
        *TRUST_CASES.get(name, []),
        *QUEUE_CASES.get(name, []),
        *SERVICE_CASES.get(name, []),
        *SERVICE_REVIEW_CASES.get(name, []),
    ]
    for name in sorted(
        {*RESOURCE_CASES, *STACK_CASES, *BYPASS_CASES, *ROUND_TWO_CASES, *RUNTIME_CASES,
         *REVIEW_CASES, *TRUST_CASES, *QUEUE_CASES, *SERVICE_CASES,
         *SERVICE_REVIEW_CASES}
    )
}


def violations(policy_name: str, case: Case) -> list[str]:
    """The policy's messages for the case, with the case's policy config; a setting the
    policy refuses is one (the offline check refuses the config, the pack reports it)."""
    policy = by_name(policy_name)
    if isinstance(policy, StackPolicy):
        try:
            settings = policy.configure(case.config)
        except SettingError as exc:
            return [f"policy config: {exc}"]
        return [f.message for f in policy.run(case.resources, settings)]
    assert not case.config, f"{policy_name} reads no settings"
    return [m for r in case.resources for m in policy.judge(r)]


def test_every_policy_has_passing_and_failing_fixtures() -> None:
    assert set(ALL_CASES) == {p.name for p in ALL_POLICIES}
    for name, cases in ALL_CASES.items():
        assert any(c.fails for c in cases), f"{name} has no failing fixture"
        assert any(not c.fails for c in cases), f"{name} has no passing fixture"
        assert len({c.name for c in cases}) == len(cases), f"{name} repeats a fixture name"


@pytest.mark.parametrize("policy_name", sorted(ALL_CASES))
def test_exactly_the_failing_fixtures_violate(policy_name: str) -> None:
    cases = ALL_CASES[policy_name]
    failing = {c.name for c in cases if violations(policy_name, c)}
    assert failing == {c.name for c in cases if c.fails}


@pytest.mark.parametrize(
    ("policy_name", "case"),
    [(name, case) for name, cases in ALL_CASES.items() for case in cases if case.fails],
    ids=lambda v: v if isinstance(v, str) else v.name,
)
def test_messages_say_what_to_change(policy_name: str, case: Case) -> None:
    hints = ("set ", "use ", "add ", "remove ", "grant ", "declare ", "send ", "replace ", "fix ")
    for message in violations(policy_name, case):
        assert any(h in message for h in hints) or "e.g." in message, message


def test_ttl_policy_names_the_missing_ttl_field_not_another_field() -> None:
    """The schedule_time exemption (a Field of the same collection, no TTL) neither stands
    in for the TTL field nor draws the TTL field's complaints."""
    fields = [r for r in kit_stack() if r.type == FIRESTORE_FIELD]
    assert sorted(f.props["field"] for f in fields) == ["expire_at", "schedule_time"]
    assert ttl_policy_on_expire_at(kit_stack()) == []
    (finding,) = ttl_policy_on_expire_at(without_named(kit_stack(), "runs-expire-at"))
    assert finding.message.startswith(f"no {FIRESTORE_FIELD} sets a TTL policy on 'expire_at'")
    assert finding.urn is not None and finding.urn.endswith("::dedup-function")


def test_names_are_unique_and_stable() -> None:
    names = [p.name for p in ALL_POLICIES]
    assert len(names) == len(set(names))
    assert all(n == n.lower() and " " not in n and n != "all" for n in names)


@pytest.mark.parametrize(
    ("lease", "store_timeout"),
    [(29, 10), (30, 10), (60, 10), (60, 20), (60, 21), (3, 1), (2, 1), (180, 60), (179, 60)],
)
def test_config_and_policy_agree_on_the_shortest_lease(lease: int, store_timeout: int) -> None:
    """leaseSeconds >= 3 x storeTimeoutSeconds in the stack config is the same bound as
    DEDUP_LEASE_SECONDS >= 3 x DEDUP_STORE_TIMEOUT_SECONDS in the pack."""
    try:
        load_config(
            {
                "gcp:project": "acme-scheduler-test",
                "gcp:region": "europe-west1",
                "scheduler-dedup:leaseSeconds": lease,
                "scheduler-dedup:storeTimeoutSeconds": store_timeout,
                "scheduler-dedup:jobs": [{"name": "j", "schedule": "0 3 * * *"}],
            }
        )
        config_accepts = True
    except ConfigError as error:
        assert error.keys == ("scheduler-dedup:leaseSeconds",)
        config_accepts = False
    env = "serviceConfig.environmentVariables"
    stack = replace_named(kit_stack(), "dedup-function", f"{env}.DEDUP_LEASE_SECONDS", str(lease))
    stack = replace_named(
        stack, "dedup-function", f"{env}.DEDUP_STORE_TIMEOUT_SECONDS", str(store_timeout)
    )
    assert config_accepts == (lease >= 3 * store_timeout)
    assert config_accepts == (lease_survives_missed_renewals(stack) == [])


def test_allowed_callers_names_the_function_that_serves_everyone() -> None:
    env = "serviceConfig.environmentVariables.DEDUP_ALLOWED_CALLERS"
    assert allowed_callers(proxy_stack()) == []
    (finding,) = allowed_callers(replace_named(proxy_stack(), "proxy-function", env, ""))
    assert finding.message.startswith(
        "function 'scheduler-dedup-proxy' does not set DEDUP_ALLOWED_CALLERS"
    )
    assert finding.urn is not None and finding.urn.endswith("::proxy-function")
    both = replace_named(
        replace_named(proxy_stack(), "proxy-function", env, ""), "dedup-function", env, ""
    )
    assert sorted(f.message.split(" does not")[0] for f in allowed_callers(both)) == [
        "function 'scheduler-dedup'",
        "function 'scheduler-dedup-proxy'",
    ]


def test_proxy_own_database_names_the_database_the_member_and_the_fix() -> None:
    env = "serviceConfig.environmentVariables.DEDUP_DATABASE"
    assert proxy_own_database(proxy_stack()) == []
    (shared,) = [
        f for f in proxy_own_database(replace_named(proxy_stack(), "proxy-function", env, DATABASE))
        if f.urn is not None and f.urn.endswith("::proxy-function")
    ]
    assert f"'projects/{PROJECT}/databases/{DATABASE}' (DEDUP_DATABASE)" in shared.message
    assert "function 'scheduler-dedup'" in shared.message
    assert f"e.g. '{DATABASE}-proxy'" in shared.message
    writer = replace_named(
        proxy_stack(), "runtime-datastore-user", "condition", PROXY_DATASTORE_CONDITION
    )
    assert proxy_own_database(writer) == []  # who writes it: dedup-database-writers
    (finding,) = database_writers(writer)
    assert finding.message.startswith(
        f"serviceAccount:{RUNTIME_SA} holds roles/datastore.user, which writes the kit's "
        f"database 'projects/{PROJECT}/databases/{PROXY_DATABASE}' (its condition names it; "
        "named by 'scheduler-dedup-proxy' (DEDUP_DATABASE)): remove it"
    )
    assert f"only the accounts that must write it may ({PROXY_SA})" in finding.message
    assert finding.urn is not None and finding.urn.endswith("::runtime-datastore-user")

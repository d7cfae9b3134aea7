"""Values unknown at preview: no policy crashes, none invents or hides a violation.

Pulumi hands a policy an output of a resource not created yet as a sentinel string (see
policies/values.py). These tests replace every property of the compliant kit stack (with
and without the proxy) and of every fixture, one at a time, with each sentinel kind, and
run every policy.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from pulumi_policy import proxy

from policies.evaluate import evaluate, mandatory
from policies.facts import StackFacts
from policies.kit_resources import job_targets
from policies.model import Resource
from policies.registry import ALL_POLICIES
from policies.values import UNKNOWN_SENTINELS, UNKNOWN_STRING
from tests.policies.bypass_cases import BYPASS_CASES
from tests.policies.cases import RESOURCE_CASES, STACK_CASES
from tests.policies.fixtures import (
    FUNCTION_URL,
    PROJECT,
    PROXY_SA,
    REGION,
    kit_stack,
    preview_proxy_stack,
    preview_proxy_watchdog_stack,
    preview_stack,
    proxy_stack,
    proxy_watchdog_stack,
    replace,
    res,
)
from tests.policies.fixtures import U as U_
from tests.policies.round_two_cases import ROUND_TWO_CASES
from tests.policies.runtime_cases import RUNTIME_CASES
from tests.policies.runtime_fixtures import (
    preview_runtime_proxy_watchdog_stack,
    preview_runtime_stack,
    runtime_delivering_stack,
    runtime_proxy_watchdog_stack,
    runtime_stack,
)
from tests.policies.service_cases import CASES as SERVICE_CASES
from tests.policies.service_cases import service_stack, watchdog_service_stack

Path = tuple[str | int, ...]


def test_sentinels_are_pulumi_policys() -> None:
    expected = {
        proxy.UNKNOWN_BOOLEAN_VALUE,
        proxy.UNKNOWN_NUMBER_VALUE,
        proxy.UNKNOWN_STRING_VALUE,
        proxy.UNKNOWN_ARRAY_VALUE,
        proxy.UNKNOWN_ASSET_VALUE,
        proxy.UNKNOWN_ARCHIVE_VALUE,
        proxy.UNKNOWN_OBJECT_VALUE,
    }
    assert expected == UNKNOWN_SENTINELS
    assert proxy.UNKNOWN_STRING_VALUE == UNKNOWN_STRING == U_


def paths(value: Any, prefix: Path = ()) -> Iterator[Path]:
    """Every path to a value inside props (containers and leaves)."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*prefix, key)
            yield from paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield (*prefix, index)
            yield from paths(child, (*prefix, index))


def with_unknown(props: dict[str, Any], path: Path, sentinel: str) -> dict[str, Any]:
    result = copy.deepcopy(props)
    node: Any = result
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = sentinel
    return result


def _at(props: Any, path: Path) -> Any:
    for key in path:
        props = props[key]
    return props


def sentinels_for(value: Any) -> list[str]:
    """The string sentinel (what the engine almost always sends) and the typed one."""
    typed = {
        dict: proxy.UNKNOWN_OBJECT_VALUE,
        list: proxy.UNKNOWN_ARRAY_VALUE,
        bool: proxy.UNKNOWN_BOOLEAN_VALUE,
        int: proxy.UNKNOWN_NUMBER_VALUE,
        float: proxy.UNKNOWN_NUMBER_VALUE,
    }.get(type(value))
    return [UNKNOWN_STRING] if typed is None else [UNKNOWN_STRING, typed]


def variants(resources: list[Resource]) -> Iterator[tuple[str, list[Resource]]]:
    for index, resource in enumerate(resources):
        for path in paths(dict(resource.props)):
            for sentinel in sentinels_for(_at(resource.props, path)):
                props = with_unknown(dict(resource.props), path, sentinel)
                changed = Resource(resource.type, resource.name, resource.urn, props,
                                   resource.parent, resource.dependencies)
                label = f"{resource.name}.{'.'.join(map(str, path))}={sentinel[:4]}"
                yield label, [*resources[:index], changed, *resources[index + 1 :]]


def test_kit_stack_has_no_violation() -> None:
    assert evaluate(kit_stack()) == []


def test_preview_of_kit_stack_has_no_violation() -> None:
    assert evaluate(preview_stack()) == []


def test_any_single_unknown_in_the_kit_stack_is_not_a_violation() -> None:
    checked = 0
    for label, resources in variants(kit_stack()):
        found = evaluate(resources)
        assert found == [], (label, found)
        checked += 1
    assert checked > 90


@pytest.mark.parametrize(
    "case",
    [
        c
        for cases in (
            *RESOURCE_CASES.values(),
            *STACK_CASES.values(),
            *BYPASS_CASES.values(),
            *ROUND_TWO_CASES.values(),
            *RUNTIME_CASES.values(),
            *SERVICE_CASES.values(),
        )
        for c in cases
    ],
    ids=lambda c: c.name,
)
def test_no_policy_crashes_on_any_unknown(case: Any) -> None:
    for _label, resources in variants(
        case.resources[-1:] if len(case.resources) > 1 else case.resources
    ):
        evaluate(resources, policies=ALL_POLICIES)


@pytest.mark.parametrize("stack", [service_stack, watchdog_service_stack])
def test_any_single_unknown_in_a_team_service_stack_is_not_a_violation(stack: Any) -> None:
    """Issue 39: a team Cloud Run and App Engine service (their components and jobs), with
    and without the watchdog reading their databases and invoking the Cloud Run one."""
    assert evaluate(stack()) == []
    # cloud-run-internal-callers fails closed while the deliveries queue's name, project or
    # location (or the target's project) is unknown: judged apart, as in delivering_watchdog.
    judged = [p for p in ALL_POLICIES if p.name != "cloud-run-internal-callers"]
    checked = 0
    for label, resources in variants(stack()):
        found = mandatory(evaluate(resources, policies=judged))
        assert found == [], (label, found)
        checked += 1
    assert checked > 100


def test_a_real_violation_survives_unknowns_elsewhere() -> None:
    # First preview: every output unknown, and the function's ingress left at its default.
    resources = replace(
        preview_stack(),
        "gcp:cloudfunctionsv2/function:Function",
        "serviceConfig.ingressSettings",
        "ALLOW_ALL",
    )
    found = mandatory(evaluate(resources))
    assert [v.policy for v in found] == ["function-ingress-not-public"]


def test_proxy_stack_has_no_violation() -> None:
    assert evaluate(proxy_stack()) == []
    assert evaluate(preview_proxy_stack()) == []


def test_any_single_unknown_in_the_proxy_stack_is_not_a_violation() -> None:
    checked = 0
    for label, resources in variants(proxy_stack()):
        found = evaluate(resources)
        assert found == [], (label, found)
        checked += 1
    assert checked > 190


def test_proxy_and_watchdog_stack_has_no_violation() -> None:
    """The proxy's records in a database of its own, which the watchdog only reads."""
    assert evaluate(proxy_watchdog_stack()) == []
    assert evaluate(preview_proxy_watchdog_stack()) == []


def test_any_single_unknown_in_the_proxy_and_watchdog_stack_is_not_a_violation() -> None:
    checked = 0
    for label, resources in variants(proxy_watchdog_stack()):
        found = evaluate(resources)
        assert found == [], (label, found)
        checked += 1
    assert checked > 250


def test_a_proxy_violation_survives_unknowns_elsewhere() -> None:
    # A later preview: the proxy's account exists (its e-mail is known), the jobs' and
    # functions' URLs are not, and someone grants it a primitive role.
    resources = replace(proxy_stack(), "gcp:cloudscheduler/job:Job", "httpTarget.uri", U_)
    resources = replace(
        resources, "gcp:cloudfunctionsv2/function:Function", "serviceConfig.uri", U_
    )
    resources.append(
        res(
            "gcp:projects/iAMMember:IAMMember",
            "proxy-owner",
            {"project": "p", "role": "roles/owner", "member": f"serviceAccount:{PROXY_SA}"},
        )
    )
    found = sorted(v.policy for v in mandatory(evaluate(resources)))
    assert found == ["dedup-accounts-no-basic-roles", "dedup-proxy-least-privilege",
                     "iam-no-primitive-roles"]


def test_runtime_stacks_have_no_violation() -> None:
    """A compliant stack with runtimes passes the whole pack, advisories included: each
    runtime's function, account, database, datastore grant, secrets and their accessor
    grants, a grant on a team bucket; beside the proxy and the watchdog, which reads
    every runtime's database."""
    assert evaluate(runtime_stack()) == []
    assert evaluate(preview_runtime_stack()) == []
    assert evaluate(runtime_proxy_watchdog_stack()) == []
    assert evaluate(preview_runtime_proxy_watchdog_stack()) == []
    assert evaluate(runtime_delivering_stack()) == []


def test_any_single_unknown_in_the_runtime_stack_is_not_a_violation() -> None:
    checked = 0
    for label, resources in variants(runtime_stack()):
        found = evaluate(resources)
        assert found == [], (label, found)
        checked += 1
    assert checked > 300


def test_the_url_index_finds_what_job_targets_finds() -> None:
    """facts' index of the functions by URL answers as the pairwise job_targets would, for
    every fixture (known, unknown and odd URIs, functions with and without URLs)."""
    odd = [f"{FUNCTION_URL}/", f"{FUNCTION_URL}/run?x=1", f"{FUNCTION_URL}?a",
           f"{FUNCTION_URL}-proxy", f"{FUNCTION_URL}x/", "https://example.com/",
           f"https://{REGION}-{PROJECT}.cloudfunctions.net/scheduler-dedup", "", 3]
    without_urls = replace(runtime_stack(), "gcp:cloudfunctionsv2/function:Function",
                           "serviceConfig.uri", U_)
    stacks = [runtime_proxy_watchdog_stack(), preview_runtime_proxy_watchdog_stack(),
              *(replace(stack, "gcp:cloudscheduler/job:Job", "httpTarget.uri", uri)
                for uri in odd for stack in (runtime_stack(), without_urls)),
              *(c.resources for cases in (*STACK_CASES.values(), *BYPASS_CASES.values(),
                                          *ROUND_TWO_CASES.values(), *RUNTIME_CASES.values())
                for c in cases)]
    compared = 0
    for resources in stacks:
        facts = StackFacts(resources)
        for job in facts.scheduler_jobs:
            pairwise = [f for f in facts.dedup_functions if job_targets(job, f)]
            assert list(facts.functions_targeted(job)) == pairwise, job.name
            compared += 1
        for function in facts.dedup_functions:
            assert list(facts.jobs_targeting(function)) == [
                j for j in facts.scheduler_jobs if job_targets(j, function)]
    assert compared > 500

"""Issue 36's policies over the stack the kit's own program declares (dev, under Pulumi's
mocks): its deliveries queue, its build account and its jobs' URLs are found as the
program declares them, pass as declared, and each attack on them fails."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from operator_tools.offline import DeclaredResource, load_stack_config, run_offline
from policies import offline_check
from policies.deliveries_queue import deliveries_queues
from policies.evaluate import mandatory
from policies.facts import StackFacts
from policies.gcp import SCHEDULER_JOB, TASKS_QUEUE
from policies.model import Resource
from tests.policies.fixtures import patch
from tests.stacks import fixture_stack_file

DEV = fixture_stack_file("dev")
NEW_POLICIES = ("dedup-deliveries-queue-target", "dedup-deliveries-queue-task-creators")


@pytest.fixture(scope="module")
def dev() -> list[DeclaredResource]:
    return list(run_offline(load_stack_config(DEV), stack="dev").resources)


def state(declared: list[DeclaredResource]) -> list[Resource]:
    return [Resource(d.type, d.name, d.urn, {**d.props, **d.outputs}, d.parent)
            for d in declared if d.custom]


def changed(declared: list[DeclaredResource], name: str, path: str,
            value: Any) -> list[DeclaredResource]:
    assert any(d.name == name for d in declared), name
    return [dataclasses.replace(d, props=patch(d.props, path, value),
                                outputs=patch(d.outputs, path, value))
            if d.name == name else d for d in declared]


def added(declared: list[DeclaredResource], resource_type: str, name: str,
          props: dict[str, Any]) -> list[DeclaredResource]:
    urn = f"urn:pulumi:dev::scheduler-dedup::{resource_type}::{name}"
    return [*declared, DeclaredResource(resource_type, name, urn, props, outputs=props)]


def fired(declared: list[DeclaredResource]) -> set[str]:
    return {v.policy for v in mandatory(offline_check.check_declared(declared))}


def named(declared: list[DeclaredResource], resource_type: str) -> DeclaredResource:
    found = [d for d in declared if d.type == resource_type]
    assert found, resource_type
    return found[0]


def test_the_programs_queue_is_found_and_passes(dev: list[DeclaredResource]) -> None:
    queues = StackFacts(state(dev)).derived(deliveries_queues)
    assert len(queues) == 1
    queue = queues[0]
    assert queue.name is not None and queue.name.endswith("/queues/sched-dedup-dev-deliveries")
    assert queue.task_accounts and queue.delivery_urls  # known under the mocks
    assert not fired(dev) & set(NEW_POLICIES)
    assert not mandatory(offline_check.check_declared(dev))


def test_an_override_on_the_programs_queue_fails(dev: list[DeclaredResource]) -> None:
    queue = named(dev, TASKS_QUEUE)
    broken = changed(dev, queue.name, "httpTarget", {
        "uriOverride": {"host": "collector.attacker.example"}})
    assert fired(broken) == {"dedup-deliveries-queue-target"}


def test_an_enqueuer_on_the_programs_project_fails(dev: list[DeclaredResource]) -> None:
    project = named(dev, TASKS_QUEUE).props["project"]
    broken = added(dev, "gcp:projects/iAMMember:IAMMember", "ops-enqueue", {
        "project": project, "role": "roles/cloudtasks.enqueuer",
        "member": "group:ops@acme.example"})
    assert fired(broken) == {"dedup-deliveries-queue-task-creators"}


def test_token_creator_on_the_programs_build_account_fails(
        dev: list[DeclaredResource]) -> None:
    functions = [d for d in dev if d.type == "gcp:cloudfunctionsv2/function:Function"]
    build = functions[0].outputs["buildConfig"]["serviceAccount"]
    broken = added(dev, "gcp:serviceaccount/iAMMember:IAMMember", "ops-build-token", {
        "serviceAccountId": build, "role": "roles/iam.serviceAccountTokenCreator",
        "member": "group:ops@acme.example"})
    assert fired(broken) == {"dedup-accounts-not-impersonable"}


def test_a_job_naming_the_function_with_its_default_port_is_judged(
        dev: list[DeclaredResource]) -> None:
    job = next(d for d in dev if d.type == SCHEDULER_JOB
               and "X-Dedup-Project" in d.outputs["httpTarget"].get("headers", {}))
    uri = job.outputs["httpTarget"]["uri"].rstrip("/")
    scheme, _, host = uri.partition("://")
    spelled = f"{scheme.upper()}://{host.upper()}:443/"
    headerless = {k: v for k, v in job.outputs["httpTarget"]["headers"].items()
                  if not k.startswith("X-Dedup-")}
    broken = changed(changed(dev, job.name, "httpTarget.uri", spelled),
                     job.name, "httpTarget.headers", headerless)
    assert "dedup-job-headers" in fired(broken)

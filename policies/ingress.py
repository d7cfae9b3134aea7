"""Stack policy: a call from Cloud Run to an internal-only service takes a path Cloud Run admits.

"Requests to Cloud Run from Cloud Run, Cloud Functions, or App Engine must go to the VPC
network to be considered internal" ("Restrict network ingress for Cloud Run",
https://cloud.google.com/run/docs/securing/ingress#internal-services). From the same
project, Cloud Scheduler, Cloud Tasks, Eventarc, Pub/Sub and Workflows are internal on the
run.app URL; another Cloud Run service or function is only when its egress goes through a
VPC (a connector or Direct VPC egress, all traffic). So a function that would POST to an
internal-only function's URL without either is refused at every request, in production
only: nothing local enforces ingress.

A caller is a Cloud Run function or service whose environment carries the host of an
internal-only one (its run.app URL or, for a function, its cloudfunctions.net URL, in any
case, as the mocks and the engine resolve them), or, while that URL is not known yet (a
first preview), whose environment holds an unknown value and which depends on it. It
passes when all its egress goes through a VPC (a connector or Direct VPC egress, all
traffic), or when it hands its calls to a Cloud Tasks queue declared in the stack in the
target's project (the watchdog's DEDUP_WATCH_QUEUE, function/dedup/watchdog/cloud_tasks.py),
whose HTTP tasks are internal. Not judged: 1st gen functions, Cloud Run jobs and v1
services as callers (the kit declares none).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

from policies.facts import StackFacts, stack_facts
from policies.gcp import (
    CLOUD_RUN_V2_SERVICE,
    FUNCTION_INTERNAL_INGRESS,
    FUNCTION_V2,
    RUN_V2_INTERNAL_INGRESS,
    TASKS_QUEUE,
)
from policies.kit_resources import QUEUE_ENV
from policies.model import Finding, Resource
from policies.urls import normal_url
from policies.values import as_list, as_mapping, get, is_unknown

ALL_TRAFFIC_CONNECTOR: Final = "ALL_TRAFFIC"  # functions v2 vpcConnectorEgressSettings
ALL_TRAFFIC_DIRECT_VPC: Final = "VPC_EGRESS_ALL_TRAFFIC"  # functions v2 directVpcEgress
ALL_TRAFFIC_RUN_V2: Final = "ALL_TRAFFIC"  # cloudrunv2 template.vpcAccess.egress


def _internal_hosts(resource: Resource) -> tuple[str, ...] | None:
    """The hosts an internal-only function or service is called at (lower case), from its
    state; () while not known; None if it is not internal-only."""
    if resource.type == FUNCTION_V2:
        if get(resource.props, "serviceConfig", "ingressSettings") not in FUNCTION_INTERNAL_INGRESS:
            return None
        urls = [get(resource.props, "serviceConfig", "uri"), get(resource.props, "url")]
    elif resource.type == CLOUD_RUN_V2_SERVICE:
        if get(resource.props, "ingress") not in RUN_V2_INTERNAL_INGRESS:
            return None
        urls = [get(resource.props, "uri"), *(as_list(get(resource.props, "urls")) or [])]
    else:
        return None
    hosts = {url.host for u in urls if isinstance(u, str) and (url := normal_url(u))}
    return tuple(sorted(hosts))


def _environment(resource: Resource) -> list[Any]:
    """Every environment variable value of a function or service (v2)."""
    if resource.type == FUNCTION_V2:
        env = as_mapping(get(resource.props, "serviceConfig", "environmentVariables"))
        return list(env.values()) if env is not None else []
    if resource.type == CLOUD_RUN_V2_SERVICE:
        values: list[Any] = []
        for container in as_list(get(resource.props, "template", "containers")) or []:
            for entry in as_list(get(container, "envs")) or []:
                values.append(get(entry, "value"))
        return values
    return []


def _egress_through_vpc(resource: Resource) -> bool:
    if resource.type == FUNCTION_V2:
        config = get(resource.props, "serviceConfig")
        connector = get(config, "vpcConnector")
        if isinstance(connector, str) and connector and (
                get(config, "vpcConnectorEgressSettings") == ALL_TRAFFIC_CONNECTOR):
            return True
        return bool(as_list(get(config, "directVpcNetworkInterfaces"))) and (
            get(config, "directVpcEgress") == ALL_TRAFFIC_DIRECT_VPC)
    access = get(resource.props, "template", "vpcAccess")
    routed = get(access, "connector") or as_list(get(access, "networkInterfaces"))
    return bool(routed) and get(access, "egress") == ALL_TRAFFIC_RUN_V2


def _hands_calls_to_a_queue(resource: Resource, target: Resource, queues: set[str]) -> bool:
    """Its DEDUP_WATCH_QUEUE names a queue of the stack in the target's project (a task is
    internal from the same project only)."""
    env = as_mapping(get(resource.props, "serviceConfig", "environmentVariables")) or {}
    named = env.get(QUEUE_ENV)
    project = get(target.props, "project")
    return (isinstance(named, str) and named in queues
            and isinstance(project, str) and named.startswith(f"projects/{project}/"))


def _queue_names(facts: StackFacts) -> set[str]:
    return {
        f"projects/{get(queue.props, 'project')}/locations/"
        f"{get(queue.props, 'location')}/queues/{get(queue.props, 'name')}"
        for queue in facts.of_type(TASKS_QUEUE)
    }


def _calls(caller: Resource, target: Resource, hosts: tuple[str, ...]) -> bool:
    values = _environment(caller)
    texts = [v.lower() for v in values if isinstance(v, str) and not is_unknown(v)]
    if any(host in text for host in hosts for text in texts):
        return True
    return target.urn in caller.dependencies and any(is_unknown(v) for v in values)


def _callers(facts: StackFacts) -> Iterator[tuple[Resource, Resource, str]]:
    workloads = facts.in_stack_order(
        [*facts.of_type(FUNCTION_V2), *facts.of_type(CLOUD_RUN_V2_SERVICE)])
    targets = [(r, hosts) for r in workloads if (hosts := _internal_hosts(r)) is not None]
    for caller in workloads:
        for target, hosts in targets:
            if target.urn != caller.urn and _calls(caller, target, hosts):
                yield caller, target, ", ".join(hosts)


def internal_callers_take_an_admitted_path(resources: Sequence[Resource]) -> list[Finding]:
    facts = stack_facts(resources)
    queues = _queue_names(facts)
    findings: list[Finding] = []
    reported: set[tuple[str, str]] = set()
    for caller, target, url in _callers(facts):
        if _egress_through_vpc(caller) or _hands_calls_to_a_queue(caller, target, queues):
            continue
        if (caller.urn, target.urn) in reported:
            continue
        reported.add((caller.urn, target.urn))
        findings.append(Finding(
            f"{caller.name!r} calls the internal-only {target.name!r} ({url or 'its URL'}) "
            "without a VPC: Cloud Run refuses a request from Cloud Run or Cloud Functions "
            "that does not leave through a VPC network: send the calls through a Cloud "
            f"Tasks queue of the stack ({QUEUE_ENV}), or route all its egress through a VPC "
            "(vpcConnector with vpcConnectorEgressSettings ALL_TRAFFIC, or Direct VPC "
            "egress) (https://cloud.google.com/run/docs/securing/ingress#internal-services)",
            caller.urn,
        ))
    return findings

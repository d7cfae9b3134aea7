"""Two stacks in one Google Cloud project: every project-unique name follows from the
stack's namePrefix, so the second stack's `pulumi up` neither fails with 409 ALREADY_EXISTS
nor takes over the first stack's resources (its database, its TTL policy, its jobs).

Each declared resource is reduced to its identity in Google Cloud (what a second create of
the same thing would collide with); two stacks sharing a project must have none in common
except the project's APIs, which both merely keep enabled (never disabled on destroy).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from infra.config import ConfigError, load_config
from infra.source import JOB_ROUTES_TABLE, PROXY_ROUTES_TABLE, read_archive_table
from operator_tools.offline import DeclaredResource, OfflineRun, load_stack_config, run_offline
from tests.infra.helpers import (
    ACCOUNT,
    ALERT_POLICY,
    BUCKET,
    CHANNEL,
    CUSTOM_ROLE,
    DASHBOARD,
    DATABASE,
    FIELD,
    FUNCTION,
    JOB,
    JOB_IAM,
    METRIC,
    OBJECT,
    PROJECT_IAM,
    REPOSITORY,
    REPOSITORY_IAM,
    RUN_IAM,
    SERVICE,
    SLEEP,
)
from tests.stacks import FIXTURE_STACKS_DIR

SHARED_PROJECT = "acme-scheduler-shared"
SHARED_REGION = "europe-west1"

Identity = tuple[str, ...]


def _condition(props: Mapping[str, Any]) -> str:
    condition = props.get("condition") or {}
    return str(condition.get("expression", ""))


# How Google identifies each resource type the program declares, within one project. A
# type missing here fails the test: a new resource must be classified before it ships.
IDENTITIES: dict[str, Callable[[Mapping[str, Any]], Identity]] = {
    ACCOUNT: lambda p: ("service account", p["accountId"]),
    # A 2nd gen function is also a Cloud Run service of the same name in its region.
    FUNCTION: lambda p: ("function / Cloud Run service", p["location"], p["name"]),
    BUCKET: lambda p: ("bucket (global)", p["name"]),
    OBJECT: lambda p: ("object", p["bucket"], p["name"]),
    REPOSITORY: lambda p: ("repository", p["location"], p["repositoryId"]),
    DATABASE: lambda p: ("Firestore database", p["name"]),
    FIELD: lambda p: ("Firestore field", p["database"], p["collection"], p["field"]),
    JOB: lambda p: ("Scheduler job", p["region"], p["name"]),
    CUSTOM_ROLE: lambda p: ("custom role", p["roleId"]),
    PROJECT_IAM: lambda p: ("project grant", p["role"], p["member"], _condition(p)),
    REPOSITORY_IAM: lambda p: ("repository grant", p["repository"], p["role"], p["member"]),
    RUN_IAM: lambda p: ("service grant", p["name"], p["role"], p["member"]),
    JOB_IAM: lambda p: ("Cloud Run job grant", p["location"], p["name"], p["role"], p["member"]),
    SERVICE: lambda p: ("API", p["service"]),
    METRIC: lambda p: ("log-based metric", p["name"]),
    # Alert policies, channels and dashboards get IDs from Google: what tells two stacks'
    # apart in the console is their display name.
    ALERT_POLICY: lambda p: ("alert policy", p["displayName"]),
    CHANNEL: lambda p: ("notification channel", p["displayName"]),
    DASHBOARD: lambda p: ("dashboard", json.loads(p["dashboardJson"])["displayName"]),
    # The proxy's token secret and grants on it; a build trigger's topic and grant on it.
    "gcp:secretmanager/secret:Secret": lambda p: ("secret", p["secretId"]),
    "gcp:secretmanager/secretIamMember:SecretIamMember": lambda p: (
        "secret grant", p["secretId"], p["role"], p["member"]),
    "gcp:pubsub/topic:Topic": lambda p: ("Pub/Sub topic", p["name"]),
    "gcp:pubsub/topicIAMMember:TopicIAMMember": lambda p: (
        "topic grant", p["topic"], p["role"], p["member"]),
    # The watchdog's deliveries queue (per region), its grant on it and actAs on itself.
    "gcp:cloudtasks/queue:Queue": lambda p: ("Cloud Tasks queue", p["location"], p["name"]),
    "gcp:cloudtasks/queueIamMember:QueueIamMember": lambda p: (
        "queue grant", p["location"], p["name"], p["role"], p["member"]),
    "gcp:serviceaccount/iAMMember:IAMMember": lambda p: (
        "service account grant", p["serviceAccountId"], p["role"], p["member"]),
}
# Not Google Cloud resources of their own: the components, the wait for IAM propagation (a
# local timer of the `time` provider), and the two below.
# The token secret's version is numbered within its secret (classified above), and its
# value is a local random string of the `random` provider.
NOT_IN_THE_PROJECT = (
    SLEEP,
    "gcp:secretmanager/secretVersion:SecretVersion",
    "random:index/randomPassword:RandomPassword",
)


def identities(run: OfflineRun) -> dict[Identity, DeclaredResource]:
    found: dict[Identity, DeclaredResource] = {}
    for resource in run.resources:
        if not resource.custom or resource.type in NOT_IN_THE_PROJECT:
            continue
        assert resource.type in IDENTITIES, f"classify {resource.type} in IDENTITIES"
        identity = IDENTITIES[resource.type](resource.props)
        assert identity not in found, f"{resource.name}: {identity} declared twice"
        found[identity] = resource
    return found


def in_shared_project(config: Mapping[str, Any], **kit: Any) -> dict[str, Any]:
    """A stack file's config moved into the shared project (proxy targets with it), with
    the kit's settings in `kit` replaced (None removes the key)."""
    moved = copy.deepcopy(dict(config))
    old_project = moved["gcp:project"]
    moved["gcp:project"] = SHARED_PROJECT
    moved["gcp:region"] = SHARED_REGION
    for job in moved["scheduler-dedup:jobs"]:
        if "proxy" in job:
            job["proxy"]["resource"] = job["proxy"]["resource"].replace(
                f"projects/{old_project}/", f"projects/{SHARED_PROJECT}/"
            )
    for key, value in kit.items():
        if value is None:
            moved.pop(f"scheduler-dedup:{key}", None)
        else:
            moved[f"scheduler-dedup:{key}"] = value
    return moved


# The fixture stacks (examples/stacks/); in_shared_project copies them.
DEV = load_stack_config("dev", FIXTURE_STACKS_DIR)
PROD = load_stack_config("prod", FIXTURE_STACKS_DIR)

PAIRS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # The same jobs (same jobs[].name) in two stacks: dev and a staging copy of it whose
    # database defaults to its prefix.
    "dev-and-staging": (
        in_shared_project(DEV),
        in_shared_project(DEV, namePrefix="sched-dedup-stg", databaseName=None),
    ),
    # Both example stacks, the proxy (and its custom-role-free workflow grant) included.
    "dev-and-prod": (
        in_shared_project(DEV),
        in_shared_project(PROD),
    ),
    # Two stacks that leave every name at its default but the prefix.
    "defaults": (
        in_shared_project(DEV, namePrefix="team-a", databaseName=None),
        in_shared_project(DEV, namePrefix="team-b", databaseName=None),
    ),
}


@pytest.fixture(scope="module", params=sorted(PAIRS))
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[OfflineRun, OfflineRun]:
    build_dir: Path = tmp_path_factory.mktemp("shared-project-source")
    first, second = PAIRS[str(request.param)]
    return (
        run_offline(first, stack="first", build_dir=build_dir),
        run_offline(second, stack="second", build_dir=build_dir),
    )


def test_two_stacks_in_one_project_share_no_project_unique_name(
    pair: tuple[OfflineRun, OfflineRun],
) -> None:
    first, second = (identities(run) for run in pair)
    shared = set(first) & set(second)
    # Only the APIs: enabling an enabled API is a no-op, and neither stack disables one.
    assert {identity[0] for identity in shared} <= {"API"}, sorted(shared)
    for identity in shared:
        for resource in (first[identity], second[identity]):
            assert resource.props["disableOnDestroy"] is False, resource.name
    # Not vacuous: each stack declares its database, jobs, accounts and functions.
    for found in (first, second):
        kinds = {identity[0] for identity in found}
        assert {"Firestore database", "Scheduler job", "service account", "bucket (global)"} <= (
            kinds
        )


def test_the_function_routes_the_job_ids_its_stack_deploys(
    pair: tuple[OfflineRun, OfflineRun],
) -> None:
    """The job ID Scheduler sends (X-CloudScheduler-JobName) carries the prefix, and each
    stack's function is routed by exactly those IDs: not the other stack's."""
    routed: list[set[str]] = []
    for run in pair:
        # Every job but the watchdog's own, which targets the watchdog function.
        job_ids = {j.props["name"] for j in run.of_type(JOB)} - {
            str(run.outputs.get("watchdogJobName"))
        }
        routes: set[str] = set()
        objects = {o.props["name"]: o for o in run.of_type(OBJECT)}
        for function in run.of_type(FUNCTION):
            storage = function.props["buildConfig"]["source"]["storageSource"]
            archive = objects[storage["object"]].props["source"]["path"]
            for table in (JOB_ROUTES_TABLE, PROXY_ROUTES_TABLE):  # the watch list routes none
                text = read_archive_table(archive, table)
                if text is not None:
                    routes |= set(json.loads(text))
        assert routes == job_ids
        routed.append(routes)
    assert routed[0].isdisjoint(routed[1])


def test_names_follow_from_the_prefix() -> None:
    cfg = load_config(
        in_shared_project(DEV, namePrefix="team-a", databaseName=None)
    )
    run = run_offline(
        in_shared_project(DEV, namePrefix="team-a", databaseName=None),
        stack="team-a",
    )
    assert cfg.dedup.database_name == "team-a"
    # The dedup records' database, and the watchdog's own (cursors and re-run requests).
    assert sorted(d.props["name"] for d in run.of_type(DATABASE)) == [
        "team-a", "team-a-watchdog"]
    assert sorted(j.props["name"] for j in run.of_type(JOB)) == [
        "team-a-heartbeat",
        "team-a-hourly-sync",
        "team-a-nightly-report",
        "team-a-watchdog",
    ]
    assert sorted(a.props["accountId"] for a in run.of_type(ACCOUNT)) == [
        "team-a-build",
        "team-a-invoker",
        "team-a-runtime",
        "team-a-watchdog",
    ]
    assert sorted(m.props["name"] for m in run.of_type(METRIC)) == [
        f"team-a-{suffix}"
        for suffix in (
            "claim-lost", "completed-unrecorded", "deliveries", "job-duration",
            "watchdog-incidents", "watchdog-problems", "watchdog-summaries",
        )
    ]
    assert run.one(BUCKET).props["name"] == f"{SHARED_PROJECT}-team-a-source"
    assert run.one(REPOSITORY).props["repositoryId"] == "team-a-builds"
    assert [f.props["name"] for f in run.of_type(FUNCTION)] == ["team-a", "team-a-watchdog"]


def dev_with(**kit: Any) -> dict[str, Any]:
    return in_shared_project(DEV, **kit)


@pytest.mark.parametrize(
    ("database", "accepted"),
    [
        (None, True),  # unset: the prefix
        ("sched-dedup-dev", True),
        ("sched-dedup-dev-records", True),
        ("scheduler-dedup-dev", False),  # the example's old name: another stack's prefix
        ("sched-dedup-devx", False),  # starts with the prefix but is not <prefix>-...
        ("(default)", False),
    ],
)
def test_database_name_carries_the_prefix(database: str | None, accepted: bool) -> None:
    config = dev_with(databaseName=database)
    if accepted:
        assert load_config(config).dedup.database_name == (database or "sched-dedup-dev")
        return
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert caught.value.keys == ("scheduler-dedup:databaseName",)
    assert "Fix: leave databaseName unset" in str(caught.value)


def test_an_invalid_prefix_is_reported_once() -> None:
    """Without databaseName the database follows the prefix: a bad prefix is one error."""
    with pytest.raises(ConfigError) as caught:
        load_config(dev_with(namePrefix="Team_A", databaseName=None))
    assert caught.value.keys == ("scheduler-dedup:namePrefix",)


def test_a_job_id_longer_than_scheduler_allows_names_the_job() -> None:
    config = dev_with()
    prefix = config["scheduler-dedup:namePrefix"]
    fits = "j" * (500 - len(prefix) - 1)
    config["scheduler-dedup:jobs"][0]["name"] = fits
    assert load_config(config).job_id(load_config(config).jobs[0]) == f"{prefix}-{fits}"
    config["scheduler-dedup:jobs"][0]["name"] = fits + "j"
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert caught.value.keys == ("scheduler-dedup:jobs[0].name",)
    assert f"at most {len(fits)} characters" in str(caught.value)

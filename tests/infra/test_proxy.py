"""The idempotent proxy in the Pulumi program, under Pulumi's mocks: per target type
(workflow, Cloud Run job, build trigger) the proxy's function, its own account, exactly
the roles its targets need, its invoker binding and the jobs that call it; and the
config the program sends is the config the proxy's code accepts."""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from dedup.proxy.handler import ProxySettings
from dedup.proxy.targets import parse_target
from dedup.settings import Settings, SettingsError
from infra.config import ConfigError, load_config
from infra.dedup_proxy import ENTRY_POINT, WORKFLOW_START_PERMISSIONS
from infra.source import JOB_ROUTES_TABLE, PROXY_ROUTES_TABLE
from operator_tools.offline import run_offline
from policies import offline_check
from tests.infra.helpers import (
    CUSTOM_ROLE,
    FUNCTION,
    JOB_IAM,
    PROJECT_IAM,
    PROXY_COMPONENT,
    RUN_IAM,
    SERVICE,
    StackUnderTest,
)
from tests.infra.test_stacks import expected_counts

PROJECT = "acme-scheduler-test"
REGION = "europe-west1"
WORKFLOW = f"projects/{PROJECT}/locations/{REGION}/workflows/daily-report"
RUN_JOB = f"projects/{PROJECT}/locations/europe-west4/jobs/reindex"
RUN_JOB_2 = f"projects/{PROJECT}/locations/{REGION}/jobs/compact"
TRIGGER = f"projects/{PROJECT}/locations/global/triggers/nightly-release"
DEDUP_DATABASE = "scheduler-dedup"
PROXY_DATABASE = "scheduler-dedup-proxy"


def database_condition(database: str) -> str:
    return f'resource.name == "projects/{PROJECT}/databases/{database}"'


TOPIC = "gcp:pubsub/topic:Topic"
TOPIC_IAM = "gcp:pubsub/topicIAMMember:TopicIAMMember"
SECRET = "gcp:secretmanager/secret:Secret"
SECRET_IAM = "gcp:secretmanager/secretIamMember:SecretIamMember"


def job(name: str, proxy: Mapping[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": name,
        "schedule": "0 3 * * *",
        "attemptDeadlineSeconds": 300,
        # Retried for longer than the lease (600 s): crashed runs are recovered.
        "retry": {
            "retryCount": 2,
            "maxRetryDurationSeconds": 600,
            "minBackoffSeconds": 10,
            "maxBackoffSeconds": 60,
        },
        **extra,
    }
    if proxy is not None:
        entry["proxy"] = dict(proxy)
    return entry


def stack_config(*jobs: dict[str, Any], **kit: Any) -> dict[str, Any]:
    return {
        "gcp:project": PROJECT,
        "gcp:region": REGION,
        "scheduler-dedup:jobs": [job("plain"), *copy.deepcopy(list(jobs))],
        # Delete protection is on by default: such a stack must alert someone.
        "scheduler-dedup:alerts": {"emails": ["oncall@example.com"]},
        **{f"scheduler-dedup:{k}": v for k, v in kit.items()},
    }


CONFIGS: dict[str, dict[str, Any]] = {
    "workflow": stack_config(
        job("report", {"target": "workflow", "resource": WORKFLOW}, body={"report": "daily"})
    ),
    "run_job": stack_config(
        job("reindex", {"target": "run_job", "resource": RUN_JOB, "container": "worker"})
    ),
    "build_trigger": stack_config(
        job("release", {"target": "build_trigger", "resource": TRIGGER, "tokenName": "_RUN_KEY"})
    ),
    "all-three": stack_config(
        job("report", {"target": "workflow", "resource": WORKFLOW}),
        job("report-again", {"target": "workflow", "resource": WORKFLOW}),
        job("reindex", {"target": "run_job", "resource": RUN_JOB, "tokenName": "RUN_KEY"}),
        job("compact", {"target": "run_job", "resource": RUN_JOB_2}),
        job("release", {"target": "build_trigger", "resource": TRIGGER}),
        proxyTimeoutSeconds=60,
    ),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, StackUnderTest]:
    build_dir = tmp_path_factory.mktemp("proxy-source")
    return {
        name: StackUnderTest(
            name="test",
            raw=raw,
            config=load_config(raw),
            run=run_offline(raw, stack="test", build_dir=build_dir),
        )
        for name, raw in CONFIGS.items()
    }


@pytest.fixture(params=sorted(CONFIGS))
def proxied(request: pytest.FixtureRequest, runs: dict[str, StackUnderTest]) -> StackUnderTest:
    return runs[str(request.param)]


def proxy_roles(stack: StackUnderTest) -> dict[str, list[Any]]:
    """role -> the grant resources that give it to the proxy's account."""
    roles: dict[str, list[Any]] = {}
    for grant in stack.grants_to(stack.account_email("proxy")):
        roles.setdefault(grant.props["role"], []).append(grant)
    return roles


def test_every_resource_is_declared(proxied: StackUnderTest) -> None:
    assert Counter(r.type for r in proxied.run.resources) == expected_counts(proxied.config)
    assert len(proxied.all(PROXY_COMPONENT)) == 1


def test_proxy_function(proxied: StackUnderTest) -> None:
    proxy = proxied.proxy
    assert proxy is not None
    props = proxy.props
    cfg = proxied.config
    assert props["name"] == f"{cfg.name_prefix}-proxy"
    assert props["location"] == cfg.region
    assert props["buildConfig"]["entryPoint"] == ENTRY_POINT == "proxy_scheduled_job"
    assert props["buildConfig"]["runtime"] == proxied.function.props["buildConfig"]["runtime"]
    # Same build account and repository as the dedup function, the same source tree in the
    # same bucket, but its own object: the tree plus its own job table (its routes).
    for key in ("serviceAccount", "dockerRepository"):
        assert props["buildConfig"][key] == proxied.function.props["buildConfig"][key], key
    source = props["buildConfig"]["source"]["storageSource"]
    dedup_source = proxied.function.props["buildConfig"]["source"]["storageSource"]
    assert source["bucket"] == dedup_source["bucket"]
    assert source["object"] != dedup_source["object"]
    service = props["serviceConfig"]
    assert service["ingressSettings"] == "ALLOW_INTERNAL_ONLY"
    assert service["serviceAccountEmail"] == proxied.account_email("proxy")
    assert service["serviceAccountEmail"] != proxied.account_email("runtime")
    assert service["timeoutSeconds"] == cfg.function.timeout_seconds


def test_proxy_environment_is_what_the_proxy_accepts(proxied: StackUnderTest) -> None:
    assert proxied.proxy is not None
    env = proxied.proxy.props["serviceConfig"]["environmentVariables"]
    dedup_env = proxied.function.props["serviceConfig"]["environmentVariables"]
    # The claim protocol's settings are the dedup function's (collection, lease,
    # retention), but the records are in the proxy's own database.
    shared = {k: v for k, v in dedup_env.items() if k != "DEDUP_JOB"}
    assert (dedup_env["DEDUP_DATABASE"], env["DEDUP_DATABASE"]) == (
        DEDUP_DATABASE, PROXY_DATABASE
    )
    shared["DEDUP_DATABASE"] = PROXY_DATABASE
    assert {k: v for k, v in env.items() if not k.startswith("DEDUP_PROXY_")} == shared
    assert set(env) - set(shared) == {"DEDUP_PROXY_TIMEOUT_SECONDS"}
    # The token secret is no plain variable: Cloud Run reads it from Secret Manager.
    assert "DEDUP_TOKEN_SECRET" not in env
    (secret_env,) = proxied.proxy.props["serviceConfig"]["secretEnvironmentVariables"]
    assert secret_env["key"] == "DEDUP_TOKEN_SECRET"
    assert secret_env["secret"] == proxied.one(SECRET).props["secretId"]
    assert "DEDUP_PROXY_API_BASE" not in env, "never in a deployed stack"
    assert env["DEDUP_PROXY_TIMEOUT_SECONDS"] == str(proxied.config.proxy_timeout_seconds)

    # The function's own parsers accept it, with the job table of its own source archive,
    # and see every proxied job's target.
    tables = proxied.tables_env(proxied.proxy)
    assert Settings.from_env({**env, **tables}).job_routes == {}
    settings = ProxySettings.from_env({**env, **tables, "DEDUP_TOKEN_SECRET": "s" * 64})
    assert settings.default is None
    assert settings.api_base is None
    assert settings.timeout_seconds == proxied.config.proxy_timeout_seconds
    expected = proxied.config.proxy_routes()
    assert set(settings.routes) == set(expected)
    for job_id, target in expected.items():
        parsed = settings.routes[job_id]
        assert parsed.kind.value == target.target
        assert parsed.resource == target.resource
        assert parsed.container == target.container
        if target.token_name is not None:
            assert parsed.token_name == target.token_name
    # The dedup function no longer routes the proxied jobs.
    assert set(proxied.job_table(proxied.function, JOB_ROUTES_TABLE)) == {
        f"{proxied.config.name_prefix}-plain"
    }


def test_proxied_jobs_call_the_proxy_with_oidc(proxied: StackUnderTest) -> None:
    invoker = proxied.account_email("invoker")
    proxied_names = {proxied.config.job_id(j) for j in proxied.config.proxied_jobs}
    for resource in proxied.config_jobs():
        target = resource.props["httpTarget"]
        name = resource.props["name"]
        uri = proxied.proxy_uri if name in proxied_names else proxied.service_uri
        assert target["uri"] == uri
        assert target["oidcToken"] == {"serviceAccountEmail": invoker, "audience": uri}
        assert target["headers"]["X-Dedup-Project"] == PROJECT
        assert target["headers"]["X-Dedup-Location"] == REGION
        assert "oauthToken" not in target
        if name in proxied_names:
            assert "idempotent proxy" in resource.props["description"]
            ready = ("proxy-invoker", "proxy-datastore-user", "dedup-api-cloudscheduler")
            assert {proxied.run.by_name(n).urn for n in ready} <= set(resource.dependencies)


def test_invoker_holds_run_invoker_on_the_proxy_service_only(proxied: StackUnderTest) -> None:
    binding = proxied.run.by_name("proxy-invoker")
    assert binding.type == RUN_IAM
    assert binding.props == {
        "project": PROJECT,
        "location": REGION,
        "name": proxied.proxy_service_name,
        "role": "roles/run.invoker",
        "member": f"serviceAccount:{proxied.account_email('invoker')}",
    }
    invoker_grants = [g for g in proxied.iam_grants() if g.props["role"] == "roles/run.invoker"]
    assert {g.name for g in invoker_grants} == {
        "dedup-invoker", "proxy-invoker", "watchdog-invoker"
    }
    assert all(g.type == RUN_IAM for g in invoker_grants)


ALWAYS = {"roles/datastore.user", "roles/secretmanager.secretAccessor"}
WORKFLOW_STARTER = f"projects/{PROJECT}/roles/scheduler_dedup_proxy_workflow_starter"


def test_workflow_target_roles(runs: dict[str, StackUnderTest]) -> None:
    stack = runs["workflow"]
    roles = proxy_roles(stack)
    role = stack.one(CUSTOM_ROLE)
    # Only the permission starting an execution checks: no reading other executions.
    assert role.props["permissions"] == list(WORKFLOW_START_PERMISSIONS) == [
        "workflows.executions.create"
    ]
    assert f"projects/{PROJECT}/roles/{role.props['roleId']}" == WORKFLOW_STARTER
    assert set(roles) == ALWAYS | {WORKFLOW_STARTER}
    (starter,) = roles[WORKFLOW_STARTER]
    # Project level: Workflows roles cannot be granted on one workflow.
    assert starter.type == PROJECT_IAM
    assert starter.props["project"] == PROJECT
    assert "condition" not in starter.props
    assert role.urn in starter.dependencies
    apis = {s.props["service"] for s in stack.all(SERVICE)}
    assert {"workflows.googleapis.com", "workflowexecutions.googleapis.com"} <= apis


def test_run_job_target_roles(runs: dict[str, StackUnderTest]) -> None:
    stack = runs["run_job"]
    roles = proxy_roles(stack)
    assert set(roles) == ALWAYS | {"roles/run.jobsExecutorWithOverrides"}
    (grant,) = roles["roles/run.jobsExecutorWithOverrides"]
    assert grant.type == JOB_IAM, "granted on the job, not the project"
    assert grant.props["project"] == PROJECT
    assert grant.props["location"] == "europe-west4"
    assert grant.props["name"] == "reindex"
    assert not [s for s in stack.all(SERVICE) if "workflow" in s.props["service"]]


def test_build_trigger_target_roles(runs: dict[str, StackUnderTest]) -> None:
    """Nothing on Cloud Build (builds.create would create any build as the project's build
    account): pubsub.publisher on the one topic the trigger listens to."""
    stack = runs["build_trigger"]
    roles = proxy_roles(stack)
    assert stack.all(CUSTOM_ROLE) == []
    assert set(roles) == ALWAYS | {"roles/pubsub.publisher"}
    (grant,) = roles["roles/pubsub.publisher"]
    topic = stack.one(TOPIC)
    assert grant.type == TOPIC_IAM
    assert topic.props["name"] == grant.props["topic"] == "scheduler-dedup-build-nightly-release"
    assert topic.props["project"] == grant.props["project"] == PROJECT
    # The proxy is told that topic; the trigger's own settings say it listens to it.
    assert stack.proxy is not None
    routes = stack.job_table(stack.proxy, PROXY_ROUTES_TABLE)
    assert routes["scheduler-dedup-release"]["topic"] == (
        f"projects/{PROJECT}/topics/scheduler-dedup-build-nightly-release")
    assert "cloudbuild.builds.create" not in json.dumps([r.props for r in stack.run.resources])


def test_every_target_once_and_nothing_more(runs: dict[str, StackUnderTest]) -> None:
    stack = runs["all-three"]
    roles = proxy_roles(stack)
    assert {role: len(grants) for role, grants in roles.items()} == {
        "roles/datastore.user": 1,
        "roles/secretmanager.secretAccessor": 1,
        WORKFLOW_STARTER: 1,  # two jobs, one workflow, one project grant
        "roles/run.jobsExecutorWithOverrides": 2,  # one per job
        "roles/pubsub.publisher": 1,  # on the trigger's topic
    }
    jobs = {
        (g.props["location"], g.props["name"])
        for g in roles["roles/run.jobsExecutorWithOverrides"]
    }
    assert jobs == {("europe-west4", "reindex"), (REGION, "compact")}


def test_proxy_records_are_in_a_database_only_the_proxy_writes(
    proxied: StackUnderTest,
) -> None:
    """Firestore IAM conditions name databases: the proxy's records are in a database of
    its own, which the dedup function's account (running the team's job code) cannot
    write, and the watchdog's may only read."""
    (grant,) = proxy_roles(proxied)["roles/datastore.user"]
    assert grant.type == PROJECT_IAM
    assert grant.props["condition"]["expression"] == database_condition(PROXY_DATABASE)
    database = proxied.run.by_name("proxy-database")
    assert database.props["name"] == PROXY_DATABASE
    assert database.props["locationId"] == proxied.run.by_name("dedup-database").props[
        "locationId"]
    ttl = proxied.run.by_name("proxy-ttl-field").props
    assert (ttl["database"], ttl["collection"], ttl["field"]) == (
        PROXY_DATABASE, proxied.config.dedup.collection, "expire_at")
    assert proxied.run.outputs["proxyDatabaseName"] == PROXY_DATABASE
    writers = {
        g.props["member"]
        for g in proxied.iam_grants()
        if g.props.get("condition", {}).get("expression") == database_condition(PROXY_DATABASE)
        and g.props["role"] != "roles/datastore.viewer"
    }
    assert writers == {f"serviceAccount:{proxied.account_email('proxy')}"}
    (viewer,) = [g for g in proxied.iam_grants() if g.props["role"] == "roles/datastore.viewer"
                 and g.props["condition"]["expression"] == database_condition(PROXY_DATABASE)]
    assert viewer.props["member"] == f"serviceAccount:{proxied.account_email('watchdog')}"
    # The watchdog writes only its own database (its cursors, the re-run queue).
    for account, writes in (("runtime", DEDUP_DATABASE),
                            ("watchdog", proxied.config.dedup.watch_database_name)):
        (user,) = [g for g in proxied.grants_to(proxied.account_email(account))
                   if g.props["role"] == "roles/datastore.user"]
        assert user.props["condition"]["expression"] == database_condition(writes)
    for role, grants in proxy_roles(proxied).items():
        assert role not in ("roles/owner", "roles/editor", "roles/viewer", "roles/run.invoker")
        for g in grants:
            assert "allUsers" not in json.dumps(g.props)


def test_dedup_accounts_get_no_target_roles(proxied: StackUnderTest) -> None:
    for account in ("runtime", "invoker"):
        roles = {g.props["role"] for g in proxied.grants_to(proxied.account_email(account))}
        assert roles <= {"roles/datastore.user", "roles/run.invoker"}, account


def test_proxy_function_waits_for_its_database_role(proxied: StackUnderTest) -> None:
    assert proxied.proxy is not None
    deps = set(proxied.proxy.dependencies)
    assert proxied.run.by_name("proxy-datastore-user").urn in deps
    assert proxied.run.by_name("proxy-ttl-field").urn in deps


def test_outputs_name_the_proxy(proxied: StackUnderTest) -> None:
    outputs = proxied.run.outputs
    assert outputs["proxyUrl"] == proxied.proxy_uri
    assert outputs["proxyFunctionName"] == "scheduler-dedup-proxy"
    assert outputs["proxyServiceAccount"] == proxied.account_email("proxy")


def test_no_proxy_without_proxied_jobs(tmp_path: Path) -> None:
    run = run_offline(stack_config(), stack="test", build_dir=tmp_path)
    assert [r for r in run.resources if r.name.startswith("proxy")] == []
    assert [f.name for f in run.of_type(FUNCTION)] == ["dedup-function", "watchdog-function"]
    assert not {"proxyUrl", "proxyServiceAccount"} & set(run.outputs)


def test_policy_pack_passes_every_proxy_stack(proxied: StackUnderTest) -> None:
    assert offline_check.check_declared(proxied.run.resources) == []


# --- the config is what the proxy accepts ----------------------------------------------

AGREEMENT = [
    ("workflow", WORKFLOW, None, None, True),
    ("workflow", WORKFLOW, "dedup_token", None, True),
    ("workflow", WORKFLOW, "dedup-token", None, False),
    ("workflow", f"projects/{PROJECT}/locations/{REGION}/workflows/9lives", None, None, False),
    ("workflow", RUN_JOB, None, None, False),
    ("workflow", WORKFLOW, None, "worker", False),
    ("run_job", RUN_JOB, "DEDUP_TOKEN", "worker", True),
    ("run_job", f"projects/{PROJECT}/locations/{REGION}/jobs/Reindex", None, None, False),
    ("run_job", f"projects/{PROJECT}/locations/{REGION}/jobs/reindex-", None, None, False),
    ("run_job", RUN_JOB, "1TOKEN", None, False),
    ("build_trigger", TRIGGER, None, None, True),
    ("build_trigger", TRIGGER, "_RUN_KEY", None, True),
    ("build_trigger", TRIGGER, "RUN_KEY", None, False),
    ("build_trigger", TRIGGER, "_run_key", None, False),
    ("build_trigger", f"projects/{PROJECT}/triggers/x", None, None, False),
    ("cloud_function", WORKFLOW, None, None, False),
]


@pytest.mark.parametrize(
    ("target", "resource", "token", "container", "valid"),
    AGREEMENT,
    ids=[f"{a[0]}-{i}" for i, a in enumerate(AGREEMENT)],
)
def test_config_and_proxy_agree(
    target: str, resource: str, token: str | None, container: str | None, valid: bool
) -> None:
    proxy: dict[str, Any] = {"target": target, "resource": resource}
    if token is not None:
        proxy["tokenName"] = token
    if container is not None:
        proxy["container"] = container
    try:
        # The program adds the topic a build trigger's route publishes to (not config).
        topic = f"projects/{PROJECT}/topics/builds" if target == "build_trigger" else None
        parse_target(target, resource, token, container, "test", topic)
        proxy_accepts = True
    except SettingsError:
        proxy_accepts = False
    try:
        load_config(stack_config(job("j", proxy)))
        config_accepts = True
    except ConfigError as exc:
        assert all(k.startswith("scheduler-dedup:jobs[1].proxy") for k in exc.keys), exc
        config_accepts = False
    assert proxy_accepts is config_accepts is valid


def test_the_token_secret_is_readable_by_the_proxy_and_the_listed_readers_only(
    runs: dict[str, StackUnderTest], tmp_path: Path
) -> None:
    stack = runs["workflow"]
    secret = stack.one(SECRET)
    assert secret.props["secretId"] == "scheduler-dedup-token-secret"
    (grant,) = stack.all(SECRET_IAM)
    assert grant.props == {
        "project": PROJECT, "secretId": "scheduler-dedup-token-secret",
        "role": "roles/secretmanager.secretAccessor",
        "member": f"serviceAccount:{stack.account_email('proxy')}",
    }
    (version,) = stack.all("gcp:secretmanager/secretVersion:SecretVersion")
    (value,) = stack.all("random:index/randomPassword:RandomPassword")
    assert value.props == {"length": 64, "special": False}
    assert value.urn in version.dependencies

    reader = f"reports@{PROJECT}.iam.gserviceaccount.com"
    raw = {**CONFIGS["workflow"], "scheduler-dedup:tokenSecretReaders": [reader]}
    run = run_offline(raw, stack="test", build_dir=tmp_path)
    members = {g.props["member"] for g in run.of_type(SECRET_IAM)}
    assert members == {f"serviceAccount:{stack.account_email('proxy')}",
                       f"serviceAccount:{reader}"}


@pytest.mark.parametrize(
    ("target", "resource", "token"),
    [("workflow", WORKFLOW, "job"), ("workflow", WORKFLOW, "payload"),
     ("workflow", WORKFLOW, "schedule_time"), ("run_job", RUN_JOB, "DEDUP_SCHEDULE_TIME")],
)
def test_reserved_token_names_are_config_errors(target: str, resource: str, token: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(stack_config(job("j", {"target": target, "resource": resource,
                                           "tokenName": token})))
    assert "is reserved" in str(raised.value)
    assert "scheduler-dedup:jobs[1].proxy.tokenName" in raised.value.keys


def test_config_and_proxy_reserve_the_same_token_names() -> None:
    from dedup.proxy.targets import RESERVED_TOKEN_NAMES
    from infra.config import PROXY_RESERVED_TOKEN_NAMES

    assert {k.value: v for k, v in RESERVED_TOKEN_NAMES.items()} == dict(
        PROXY_RESERVED_TOKEN_NAMES)


def test_token_secret_readers_need_a_proxied_job() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(stack_config(
            tokenSecretReaders=[f"reports@{PROJECT}.iam.gserviceaccount.com"]))
    assert "no job calls the proxy" in str(raised.value)
    with pytest.raises(ConfigError) as raised:
        load_config({**CONFIGS["workflow"], "scheduler-dedup:tokenSecretReaders": ["not-mail"]})
    assert "scheduler-dedup:tokenSecretReaders[0]" in str(raised.value)

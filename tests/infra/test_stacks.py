"""The example dev and prod stacks (examples/stacks/), run under Pulumi's mocks: every resource
the kit needs exists with the property values the dedup guarantee and least privilege
require."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from dedup.business_runs import default_dst
from dedup.settings import Settings
from dedup.version import __version__ as KIT_VERSION
from infra.config import AT_MOST_ONCE, RETRY_COUNT_DEFAULT, DedupSettings, StackConfig
from infra.dedup_proxy import SECRET_APIS, TARGET_APIS
from infra.dedup_service import REQUIRED_APIS, runtime_apis
from infra.scheduler_rules import (
    ATTEMPT_DEADLINE_DEFAULT_SECONDS,
    fast_failure_retry_span_seconds,
    retry_duration_to_recover_seconds,
)
from infra.source import (
    JOB_ROUTES_TABLE,
    PROXY_ROUTES_TABLE,
    WATCH_JOBS_TABLE,
    table_files,
)
from infra.watchdog import watch_jobs
from operator_tools.offline import DeclaredResource
from tests.infra.helpers import (
    ACCOUNT,
    ALERT_POLICY,
    BUCKET,
    CHANNEL,
    CUSTOM_ROLE,
    DASHBOARD,
    DATABASE,
    DEDUP_COMPONENT,
    FIELD,
    FUNCTION,
    JOB,
    JOB_COMPONENT,
    JOB_IAM,
    METRIC,
    MONITORING_COMPONENT,
    OBJECT,
    PROJECT_IAM,
    PROXY_COMPONENT,
    REPOSITORY,
    REPOSITORY_IAM,
    RUN_IAM,
    RUNTIME_COMPONENT,
    SERVICE,
    SLEEP,
    STACK_COMPONENT,
    TEAM_SERVICE_COMPONENT,
    WATCHDOG_COMPONENT,
    StackUnderTest,
    walk_strings,
)

ALL_TABLES = (JOB_ROUTES_TABLE, PROXY_ROUTES_TABLE, WATCH_JOBS_TABLE)

DEFAULT_ACCOUNTS = re.compile(
    r"(-compute@developer\.gserviceaccount\.com|@appspot\.gserviceaccount\.com|"
    r"@cloudbuild\.gserviceaccount\.com)$"
)


def expected_counts(cfg: StackConfig) -> Counter[str]:
    """What the program declares for a config: the dedup service, the jobs, and the proxy
    with one grant per kind of target when some job has `proxy:`."""
    counts: Counter[str] = Counter(
        {
            STACK_COMPONENT: 1,
            DEDUP_COMPONENT: 1,
            SERVICE: len(REQUIRED_APIS),
            ACCOUNT: 3,
            DATABASE: 1,
            FIELD: 2,  # expire_at (TTL) and schedule_time, both exempt from indexing
            BUCKET: 1,
            OBJECT: 1,  # each function's own source object: function/ + its job table
            REPOSITORY: 1,
            REPOSITORY_IAM: 1,
            PROJECT_IAM: 3,
            FUNCTION: 1,
            RUN_IAM: 1,
            JOB_COMPONENT: len(cfg.jobs),
            JOB: len(cfg.jobs),
            SLEEP: 1,  # the wait for IAM propagation before the function
        }
    )
    targets = list(cfg.proxy_routes().values())
    if targets:
        kinds = {t.target for t in targets}
        extra_apis = (
            {api for k in kinds for api in TARGET_APIS[k]} | set(SECRET_APIS)
        ) - set(REQUIRED_APIS)
        triggers = len({t.resource for t in targets if t.target == "build_trigger"})
        counts.update(
            {
                PROXY_COMPONENT: 1,
                FUNCTION: 1,
                OBJECT: 1,
                ACCOUNT: 1,
                RUN_IAM: 1,
                SERVICE: len(extra_apis),
                # Its own records database (TTL field and schedule_time field), which
                # only its account writes and the watchdog's may read
                DATABASE: 1,
                FIELD: 2,
                # datastore.user on it, the workflow-starter role (a custom role), and the
                # watchdog's datastore.viewer on it
                PROJECT_IAM: 1 + ("workflow" in kinds) + int(cfg.watchdog.enabled),
                JOB_IAM: len({t.resource for t in targets if t.target == "run_job"}),
                CUSTOM_ROLE: int("workflow" in kinds),
                # A build trigger: its topic, and pubsub.publisher on it (nothing project-wide)
                "gcp:pubsub/topic:Topic": triggers,
                "gcp:pubsub/topicIAMMember:TopicIAMMember": triggers,
                # The token secret, its one version and value, and the proxy's and each
                # tokenSecretReaders account's accessor grant on it
                "gcp:secretmanager/secret:Secret": 1,
                "gcp:secretmanager/secretVersion:SecretVersion": 1,
                "random:index/randomPassword:RandomPassword": 1,
                "gcp:secretmanager/secretIamMember:SecretIamMember":
                    1 + len(cfg.token_secret_readers),
                SLEEP: 1,  # the proxy's own wait for its account's grants
            }
        )
    counts.update(monitoring_counts(cfg))
    counts.update(runtime_counts(cfg))
    counts.update(team_service_counts(cfg))
    return +counts


GRANT_TYPES = {
    "bucket": "gcp:storage/bucketIAMMember:BucketIAMMember",
    "dataset": "gcp:bigquery/datasetIamMember:DatasetIamMember",
    "topic": "gcp:pubsub/topicIAMMember:TopicIAMMember",
    "secret": "gcp:secretmanager/secretIamMember:SecretIamMember",
    "project": PROJECT_IAM,
}


def runtime_counts(cfg: StackConfig) -> Counter[str]:
    """Each runtime: its component, account, records database (TTL and schedule_time
    fields), datastore.user on it, source object, function, invoker binding and wait; an
    accessor grant per secret, one resource per team grant; the watchdog's viewer grant on
    its database and, when it delivers the runtime's runs, its invoker grant; the APIs."""
    counts: Counter[str] = Counter({SERVICE: len(runtime_apis(cfg))})
    for runtime in cfg.runtimes:
        counts.update({RUNTIME_COMPONENT: 1, ACCOUNT: 1, DATABASE: 1, FIELD: 2,
                       PROJECT_IAM: 1 + int(cfg.watchdog.enabled), OBJECT: 1, FUNCTION: 1,
                       RUN_IAM: 1 + int(cfg.watchdog_delivers_to(runtime=runtime.name)),
                       SLEEP: 1, GRANT_TYPES["secret"]: len(runtime.secret_ids)})
        counts.update(GRANT_TYPES[grant.target[0]] for grant in runtime.grants)
    return counts


def team_service_counts(cfg: StackConfig) -> Counter[str]:
    """Each team service: its component, records database (TTL and schedule_time fields),
    its account's datastore.user on it, the watchdog's viewer grant on it; on Cloud Run the
    invoker's grant and, when the watchdog delivers its runs, the watchdog's."""
    counts: Counter[str] = Counter()
    for team in cfg.services:
        cloud_run = int(team.cloud_run is not None)
        counts.update({TEAM_SERVICE_COMPONENT: 1, DATABASE: 1, FIELD: 2,
                       PROJECT_IAM: 1 + int(cfg.watchdog.enabled),
                       RUN_IAM: cloud_run * (1 + int(cfg.watchdog_delivers_to(
                           service=team.name)))})
    return counts


def monitoring_counts(cfg: StackConfig) -> Counter[str]:
    """The watchdog (function, account, grant, wait, job) and the Monitoring component:
    4 log-based metrics, 1 alert policy, plus 2 metrics and 2 policies of the watchdog,
    a channel per alert e-mail and one dashboard."""
    watchdog = cfg.watchdog.enabled
    # A watchdog that delivers runs hands them to a Cloud Tasks queue of its own, with
    # enqueuer and viewer (GetTask) on it and actAs on its own account; its tasks' names
    # are keyed by a secret (its one version and value, its accessor grant), whose API it
    # enables unless the proxy or a runtime's secrets do.
    delivers = int(any(cfg.watchdog_delivers_to(proxied=p) for p in (False, True)) or any(
        cfg.watchdog_delivers_to(runtime=r.name) for r in cfg.runtimes) or any(
        cfg.watchdog_delivers_to(service=t.name) for t in cfg.services))
    secret_api = set(SECRET_APIS) - set(runtime_apis(cfg)) if not cfg.proxied_jobs else set()
    return Counter(
        {
            "gcp:cloudtasks/queue:Queue": delivers,
            "gcp:cloudtasks/queueIamMember:QueueIamMember": 2 * delivers,
            "gcp:serviceaccount/iAMMember:IAMMember": delivers,
            "gcp:secretmanager/secret:Secret": delivers,
            "gcp:secretmanager/secretVersion:SecretVersion": delivers,
            "random:index/randomPassword:RandomPassword": delivers,
            "gcp:secretmanager/secretIamMember:SecretIamMember": delivers,
            SERVICE: delivers * len(secret_api),
            WATCHDOG_COMPONENT: int(watchdog),
            FUNCTION: int(watchdog),
            OBJECT: int(watchdog),
            ACCOUNT: int(watchdog),
            # datastore.user on its own database, datastore.viewer on the dedup database's
            # records (and on the proxy's: counted with the proxy)
            PROJECT_IAM: 2 * int(watchdog),
            # its own database: cursors and re-run requests (issue 25)
            DATABASE: int(watchdog),
            # Its own invoker grant, and one per service it delivers runs to (catch-up,
            # re-runs): the dedup function's, the proxy's.
            RUN_IAM: int(watchdog) + sum(
                cfg.watchdog_delivers_to(proxied=proxied) for proxied in (False, True)
            ),
            SLEEP: int(watchdog),
            FIELD: int(watchdog),  # the TTL policy on its re-run requests
            JOB_COMPONENT: int(watchdog),
            JOB: int(watchdog),
            MONITORING_COMPONENT: 1,
            METRIC: 4 + 3 * watchdog,  # problems, incident transitions, summaries
            # store-unavailable; malformed documents, incident opened and resolved, absence
            ALERT_POLICY: 1 + 4 * watchdog,
            CHANNEL: len(cfg.alerts.emails),
            DASHBOARD: 1,
        }
    )


def test_every_resource_is_declared(stack: StackUnderTest) -> None:
    assert Counter(r.type for r in stack.run.resources) == expected_counts(stack.config)


def test_prod_has_a_proxied_job_and_dev_has_none(stack_runs: dict[str, StackUnderTest]) -> None:
    assert stack_runs["dev"].proxy is None
    assert not stack_runs["dev"].config.proxied_jobs
    prod = stack_runs["prod"]
    assert prod.proxy is not None
    assert [j.name for j in prod.config.proxied_jobs] == ["daily-report"]


def test_children_are_parented_to_their_component(stack: StackUnderTest) -> None:
    components = {r.urn: r.type for r in stack.run.resources if not r.custom}
    for resource in stack.run.resources:
        if not resource.custom:
            if resource.name == "watchdog-job":  # the watchdog's own job is its child
                assert components[resource.parent or ""] == WATCHDOG_COMPONENT
                continue
            if resource.type == STACK_COMPONENT:
                assert resource.parent is not None and resource.parent.endswith(
                    f"::scheduler-dedup-{stack.name}"
                ), "the stack's component hangs off the stack"
                continue
            assert components[resource.parent or ""] == STACK_COMPONENT, (
                "the other components hang off the stack's component")
            continue
        assert resource.parent in components, f"{resource.name} has no component parent"
        if resource.type == JOB:
            expected = JOB_COMPONENT
        elif resource.name.startswith("proxy-"):
            expected = PROXY_COMPONENT
        elif resource.name.startswith("watchdog-"):
            expected = WATCHDOG_COMPONENT
        elif resource.name.startswith("monitoring-"):
            expected = MONITORING_COMPONENT
        elif resource.name.startswith("runtime-"):
            expected = RUNTIME_COMPONENT
        elif resource.name.startswith("service-"):
            expected = TEAM_SERVICE_COMPONENT
        else:
            expected = DEDUP_COMPONENT
        assert components[resource.parent] == expected


def test_apis_enabled_and_kept_on_destroy(stack: StackUnderTest) -> None:
    services = stack.all(SERVICE)
    routes = stack.config.proxy_routes().values()
    proxy_apis = {api for t in routes for api in TARGET_APIS[t.target]}
    delivers = stack.all("gcp:cloudtasks/queue:Queue")
    if routes or delivers:  # the proxy's token secret, the watchdog's task key
        proxy_apis |= set(SECRET_APIS)
    assert {s.props["service"] for s in services} == (
        set(REQUIRED_APIS) | proxy_apis | set(runtime_apis(stack.config)))
    for needed in (
        "cloudfunctions.googleapis.com",
        "run.googleapis.com",
        "cloudbuild.googleapis.com",
        "artifactregistry.googleapis.com",
        "cloudscheduler.googleapis.com",
        "firestore.googleapis.com",
        "storage.googleapis.com",
        "iam.googleapis.com",
    ):
        assert needed in REQUIRED_APIS
    for service in services:
        assert service.props["disableOnDestroy"] is False
        assert service.props["project"] == stack.config.project


def test_resources_wait_for_their_apis(stack: StackUnderTest) -> None:
    api_urns = {s.props["service"]: s.urn for s in stack.all(SERVICE)}
    needs = {
        FUNCTION: (
            "cloudfunctions.googleapis.com",
            "run.googleapis.com",
            "cloudbuild.googleapis.com",
        ),
        DATABASE: ("firestore.googleapis.com",),
        BUCKET: ("storage.googleapis.com",),
        REPOSITORY: ("artifactregistry.googleapis.com",),
        ACCOUNT: ("iam.googleapis.com",),
        JOB: ("cloudscheduler.googleapis.com",),
    }
    for type_token, apis in needs.items():
        for resource in stack.all(type_token):
            for api in apis:
                assert api_urns[api] in resource.dependencies, f"{resource.name} -> {api}"


def test_named_firestore_database(stack: StackUnderTest) -> None:
    """The dedup database, and the proxy's own beside it (same settings) when it has one,
    and the watchdog's own (its cursors and re-run queue) when it runs."""
    d = stack.config.dedup
    names = {"dedup-database": d.database_name}
    if stack.proxy is not None:
        names["proxy-database"] = d.proxy_database_name
    if stack.watchdog is not None:
        names["watchdog-database"] = d.watch_database_name
    for runtime in stack.config.runtimes:  # each runtime's own records
        names[f"runtime-{runtime.name}-database"] = f"{d.database_name}-{runtime.name}"
    for team in stack.config.services:  # each team service's own records
        names[f"service-{team.name}-database"] = f"{d.database_name}-{team.name}"
    assert sorted(db.name for db in stack.all(DATABASE)) == sorted(names)
    for resource_name, database_name in names.items():
        check_database(stack.run.by_name(resource_name), database_name, d)


def check_database(db: DeclaredResource, name: str, d: DedupSettings) -> None:
    assert db.props["name"] == name != "(default)"
    assert db.props["type"] == "FIRESTORE_NATIVE"
    assert db.props["locationId"] == d.firestore_location
    assert db.props["deleteProtectionState"] == (
        "DELETE_PROTECTION_ENABLED" if d.delete_protection else "DELETE_PROTECTION_DISABLED"
    )
    assert db.props["pointInTimeRecoveryEnablement"] == (
        "POINT_IN_TIME_RECOVERY_ENABLED"
        if d.point_in_time_recovery
        else "POINT_IN_TIME_RECOVERY_DISABLED"
    )
    assert db.protect is d.delete_protection


def test_stack_files_differ_where_it_matters(stack_runs: dict[str, StackUnderTest]) -> None:
    dev, prod = stack_runs["dev"].config, stack_runs["prod"].config
    assert not dev.dedup.delete_protection and prod.dedup.delete_protection
    assert prod.dedup.point_in_time_recovery
    assert dev.function.max_instances < prod.function.max_instances
    assert prod.function.min_instances >= 1
    assert {j.schedule for j in dev.jobs}.isdisjoint({j.schedule for j in prod.jobs})
    assert len({j.retry for j in dev.jobs}) == len(dev.jobs) == 3  # each its own retry config
    assert dev.project != prod.project


# The record fields with their own config: Pulumi name, field, TTL policy. Both keep
# increasing across documents and are never queried: exempt from indexing.
RECORD_FIELDS: list[tuple[str, str, dict[str, object] | None]] = [
    ("dedup-ttl-field", "expire_at", {}),
    ("dedup-schedule-time-field", "schedule_time", None),
]


@pytest.mark.parametrize(("name", "field_name", "ttl"), RECORD_FIELDS, ids=["ttl", "schedule"])
def test_record_fields_exempt_from_indexing(
    stack: StackUnderTest, name: str, field_name: str, ttl: dict[str, object] | None
) -> None:
    field = stack.run.by_name(name)
    assert field.type == FIELD
    assert field.props["field"] == field_name
    assert field.props["collection"] == stack.config.dedup.collection
    assert field.props["database"] == stack.config.dedup.database_name
    assert field.props.get("ttlConfig") == ttl  # {}: the TTL policy; None: no TTL
    assert field.props["indexConfig"] == {}


def test_only_the_ttl_field_has_a_ttl_and_goes_first(stack: StackUnderTest) -> None:
    components = ["dedup"] + (["proxy"] if stack.proxy is not None else []) + [
        f"runtime-{r.name}" for r in stack.config.runtimes] + [
        f"service-{t.name}" for t in stack.config.services]
    reruns = int(stack.watchdog is not None)  # the re-run requests' TTL field
    assert len(stack.all(FIELD)) == 2 * len(components) + reruns
    for component in components:
        ttl = stack.run.by_name(f"{component}-ttl-field")
        schedule_time = stack.run.by_name(f"{component}-schedule-time-field")
        assert (ttl.props["field"], schedule_time.props["field"]) == (
            "expire_at", "schedule_time")
        assert "ttlConfig" in ttl.props and "ttlConfig" not in schedule_time.props
        database = stack.run.by_name(f"{component}-database").props["name"]
        assert ttl.props["database"] == schedule_time.props["database"] == database
        # One field operation at a time on the database.
        assert ttl.urn in schedule_time.dependencies


def test_private_source_bucket_and_content_hashed_object(stack: StackUnderTest) -> None:
    bucket = stack.one(BUCKET)
    assert bucket.props["uniformBucketLevelAccess"] is True
    assert bucket.props["publicAccessPrevention"] == "enforced"
    assert bucket.props["location"] == stack.config.region
    # One object per function: the source tree plus that function's own job table.
    functions = stack.all(FUNCTION)
    assert len(stack.all(OBJECT)) == len(functions)
    tables = {"dedup-function": (JOB_ROUTES_TABLE, dict(stack.config.job_routes())),
              "watchdog-function": (WATCH_JOBS_TABLE, watch_jobs(stack.config))}
    tables.update({f"runtime-{r.name}-function": (JOB_ROUTES_TABLE, stack.config.job_routes(
        r.name)) for r in stack.config.runtimes})
    if stack.proxy is not None:
        tables["proxy-function"] = (PROXY_ROUTES_TABLE, stack.job_table(
            stack.proxy, PROXY_ROUTES_TABLE))
    for function in functions:
        obj = stack.source_object(function)
        table, content = tables[function.name]
        # Named by the hash of the very bytes uploaded (function/ may change under a running
        # suite: rebuilding it here could differ), which hold the function's table.
        uploaded = Path(obj.props["source"]["path"]).read_bytes()
        assert obj.props["name"] == f"function-source/{hashlib.sha256(uploaded).hexdigest()}.zip"
        [written] = table_files(table, content).values()
        assert stack.job_table(function, table) == json.loads(written)
        assert re.fullmatch(r"function-source/[0-9a-f]{64}\.zip", obj.props["name"])
        assert obj.props["bucket"] == bucket.props["name"]
        assert obj.props["source"]["__asset"] == "file"
        storage = function.props["buildConfig"]["source"]["storageSource"]
        assert storage == {"bucket": bucket.props["name"], "object": obj.props["name"]}
        assert obj.urn in function.dependencies  # uploaded before the function builds
        # Its own table, and no other function's.
        assert [t for t in ALL_TABLES if stack.job_table(function, t) is not None] == [table]


def test_function_settings(stack: StackUnderTest) -> None:
    cfg = stack.config
    props = stack.function.props
    assert props["name"] == cfg.name_prefix
    assert props["location"] == cfg.region
    build = props["buildConfig"]
    assert build["runtime"] == "python312"
    assert build["entryPoint"] == "handle_scheduled_job"
    service = props["serviceConfig"]
    assert service["ingressSettings"] == "ALLOW_INTERNAL_ONLY"
    assert service["timeoutSeconds"] == cfg.function.timeout_seconds
    assert service["availableMemory"] == cfg.function.memory
    assert service["minInstanceCount"] == cfg.function.min_instances
    assert service["maxInstanceCount"] == cfg.function.max_instances
    assert service["maxInstanceRequestConcurrency"] == cfg.function.max_request_concurrency
    if cfg.function.max_request_concurrency > 1:
        assert service["availableCpu"] == "1"


def test_the_proxy_keeps_no_instance_warm(stack_runs: dict[str, StackUnderTest]) -> None:
    """The proxy takes the function's settings but scales to zero: prod's minInstances 1
    is for its jobs' latency, not for starting a workflow once a day."""
    prod = stack_runs["prod"]
    assert prod.proxy is not None
    function, proxy = prod.function.props["serviceConfig"], prod.proxy.props["serviceConfig"]
    assert function["minInstanceCount"] == prod.config.function.min_instances >= 1
    assert proxy["minInstanceCount"] == 0
    for same in ("availableMemory", "timeoutSeconds", "maxInstanceCount",
                 "maxInstanceRequestConcurrency"):
        assert proxy[same] == function[same], same


def test_dedicated_runtime_and_build_accounts(stack: StackUnderTest) -> None:
    props = stack.function.props
    runtime = stack.account_email("runtime")
    build = stack.account_email("build")
    assert props["serviceConfig"]["serviceAccountEmail"] == runtime
    assert props["buildConfig"]["serviceAccount"] == (
        f"projects/{stack.config.project}/serviceAccounts/{build}"
    )
    assert runtime != build
    accounts = [runtime, build, stack.account_email("invoker")]
    if stack.proxy is not None:
        proxy = stack.account_email("proxy")
        assert stack.proxy.props["serviceConfig"]["serviceAccountEmail"] == proxy
        assert stack.proxy.props["buildConfig"]["serviceAccount"] == (
            props["buildConfig"]["serviceAccount"]
        ), "the proxy is built by the same dedicated build account"
        accounts.append(proxy)
    assert len(set(accounts)) == len(accounts), "one account per role"
    for email in accounts:
        assert not DEFAULT_ACCOUNTS.search(email), f"{email} is a default account"
        assert email.endswith(f"@{stack.config.project}.iam.gserviceaccount.com")


def test_every_function_serves_only_the_invoker_account(stack: StackUnderTest) -> None:
    """DEDUP_ALLOWED_CALLERS of every function the program declares (the dedup function,
    and the proxy when a job has `proxy:`) is exactly the e-mail of the account every job's
    OIDC token is sent as: the invoker account, an output of the same program; plus the
    watchdog's account on the services it delivers runs to (catch-up, re-runs)."""
    invoker = stack.account_email("invoker")
    functions = stack.all(FUNCTION)
    assert len(functions) == 1 + (stack.proxy is not None) + (stack.watchdog is not None) + len(
        stack.config.runtimes)
    for function in functions:
        env = function.props["serviceConfig"]["environmentVariables"]
        callers = [invoker, *watchdog_caller(stack, function)]
        assert env["DEDUP_ALLOWED_CALLERS"] == ",".join(callers), function.name
        # The function's own parser accepts it, as the callers it serves.
        assert Settings.from_env(env).allowed_callers == frozenset(callers)
    jobs = [j for j in stack.all(JOB) if "httpTarget" in j.props]  # App Engine: no token
    assert {j.props["httpTarget"]["oidcToken"]["serviceAccountEmail"] for j in jobs} == {
        invoker
    }


def watchdog_caller(stack: StackUnderTest, function: DeclaredResource) -> list[str]:
    """[the watchdog's account] if `function` is a service the watchdog delivers runs to."""
    cfg = stack.config
    proxied = {"dedup-function": False, "proxy-function": True}.get(function.name)
    delivers = proxied is not None and cfg.watchdog_delivers_to(proxied=proxied)
    runtime = function.name.removeprefix("runtime-").removesuffix("-function")
    if function.name.startswith("runtime-"):
        delivers = cfg.watchdog_delivers_to(runtime=runtime)
    return [stack.account_email("watchdog")] if delivers else []


def test_function_environment(stack: StackUnderTest) -> None:
    """Proxied jobs are not the dedup function's: its routes hold only the other jobs."""
    cfg = stack.config
    env = stack.function.props["serviceConfig"]["environmentVariables"]
    assert env == {
        "DEDUP_PROJECT": cfg.project,
        "DEDUP_LOCATION": cfg.region,
        "DEDUP_DATABASE": cfg.dedup.database_name,
        "DEDUP_COLLECTION": cfg.dedup.collection,
        "DEDUP_LEASE_SECONDS": str(cfg.dedup.lease_seconds),
        "DEDUP_RETENTION_SECONDS": str(cfg.dedup.retention_seconds),
        "DEDUP_MISSING_SCHEDULE_TIME": cfg.dedup.missing_schedule_time,
        "DEDUP_JOB": cfg.dedup.default_job_logic,
        "DEDUP_STORE_TIMEOUT_SECONDS": str(cfg.dedup.store_timeout_seconds),
        "DEDUP_CACHE_SIZE": str(cfg.dedup.cache_size),
        "DEDUP_FORCED_RUN_MARGIN_SECONDS": str(cfg.dedup.forced_run_margin_seconds),
        "DEDUP_ALLOWED_CALLERS": ",".join(
            [stack.account_email("invoker"), *watchdog_caller(stack, stack.function)]
        ),
    }
    routes = stack.job_table(stack.function, JOB_ROUTES_TABLE)
    assert Settings.from_env({**env, **stack.tables_env(stack.function)}).job_routes == routes
    raw_jobs = stack.raw["scheduler-dedup:jobs"]
    # Keyed by the deployed job ID (what X-CloudScheduler-JobName carries), not jobs[].name.
    assert routes == {
        f"{cfg.name_prefix}-{job['name']}": job.get("jobLogic", cfg.dedup.default_job_logic)
        for job in raw_jobs
        if "proxy" not in job and "runtime" not in job and "service" not in job
    }
    assert set(routes) <= {j.props["name"] for j in stack.all(JOB)}


def test_invoker_on_the_service_not_the_project(stack: StackUnderTest) -> None:
    invoker = f"serviceAccount:{stack.account_email('invoker')}"
    binding = stack.run.by_name("dedup-invoker")
    assert binding.type == RUN_IAM
    assert binding.props["role"] == "roles/run.invoker"
    assert binding.props["member"] == invoker
    assert binding.props["name"] == stack.service_name
    assert binding.props["name"].endswith(f"/services/{stack.config.name_prefix}")
    assert binding.props["location"] == stack.config.region
    bindings = [binding]
    if stack.proxy is not None:
        proxy_binding = stack.run.by_name("proxy-invoker")
        assert proxy_binding.type == RUN_IAM
        assert proxy_binding.props["role"] == "roles/run.invoker"
        assert proxy_binding.props["member"] == invoker
        assert proxy_binding.props["name"] == stack.proxy_service_name
        assert proxy_binding.props["name"].endswith(f"/services/{stack.config.name_prefix}-proxy")
        bindings.append(proxy_binding)
    if stack.watchdog is not None:
        watchdog_binding = stack.run.by_name("watchdog-invoker")
        assert watchdog_binding.props["role"] == "roles/run.invoker"
        assert watchdog_binding.props["member"] == invoker
        assert watchdog_binding.props["name"].endswith(
            f"/services/{stack.config.name_prefix}-watchdog"
        )
        bindings.append(watchdog_binding)
    invoker_grants = [g for g in stack.iam_grants() if g.props["role"] == "roles/run.invoker"]
    # The watchdog's own, on the services it delivers runs to (catch-up, re-runs) only.
    deliveries = [g for g in invoker_grants if g.name.startswith("watchdog-delivers-to-")]
    watchdog = f"serviceAccount:{stack.account_email('watchdog')}"
    assert all(g.props["member"] == watchdog for g in deliveries)
    for runtime in stack.config.runtimes:
        runtime_binding = stack.run.by_name(f"runtime-{runtime.name}-invoker")
        assert runtime_binding.props["role"] == "roles/run.invoker"
        assert runtime_binding.props["member"] == invoker
        assert runtime_binding.props["name"].endswith(
            f"/services/{stack.config.name_prefix}-{runtime.name}")
        bindings.append(runtime_binding)
    for team in stack.config.services:  # a team's Cloud Run service: that service only
        if team.cloud_run is not None:
            team_binding = stack.run.by_name(f"service-{team.name}-invoker")
            assert team_binding.props["member"] == invoker
            assert team_binding.props["name"].endswith(f"/services/{team.cloud_run}")
            bindings.append(team_binding)
    assert sorted(g.name for g in deliveries) == sorted(
        [f"watchdog-delivers-to-{target}"
         for target, proxied in (("dedup", False), ("proxy", True))
         if stack.config.watchdog_delivers_to(proxied=proxied)]
        + [f"watchdog-delivers-to-runtime-{r.name}" for r in stack.config.runtimes
           if stack.config.watchdog_delivers_to(runtime=r.name)]
        + [f"watchdog-delivers-to-service-{t.name}" for t in stack.config.services
           if t.cloud_run is not None and stack.config.watchdog_delivers_to(service=t.name)]
    )
    assert sorted(g.name for g in invoker_grants) == sorted(
        g.name for g in [*bindings, *deliveries]
    )
    assert all(g.props["member"] != invoker for g in stack.iam_grants() if g not in bindings)


def test_datastore_role_is_conditioned_to_the_database(stack: StackUnderTest) -> None:
    """Each account that writes, on its own database only: the proxy and the watchdog on
    their own, the runtime account on the dedup database."""
    d = stack.config.dedup
    grants = [g for g in stack.all(PROJECT_IAM) if g.props["role"] == "roles/datastore.user"]
    databases = {"runtime": d.database_name}
    if stack.proxy is not None:
        databases["proxy"] = d.proxy_database_name
    if stack.watchdog is not None:
        databases["watchdog"] = d.watch_database_name
    databases.update({r.name: stack.config.runtime_database(r) for r in stack.config.runtimes})
    expected = {
        f"serviceAccount:{stack.account_email(a)}": database for a, database in databases.items()
    }
    # Each team service's account, on its own records database only.
    expected.update({f"serviceAccount:{t.service_account}": stack.config.service_database(t)
                     for t in stack.config.services})
    assert sorted(g.props["member"] for g in grants) == sorted(expected)
    for grant in grants:
        assert grant.props["condition"]["expression"] == (
            f'resource.name == "projects/{stack.config.project}/databases/'
            f'{expected[grant.props["member"]]}"'
        )
        assert grant.props["condition"]["title"]


def test_build_account_has_only_the_minimal_build_roles(stack: StackUnderTest) -> None:
    member = f"serviceAccount:{stack.account_email('build')}"
    grants = {g.props["role"]: g for g in stack.iam_grants() if g.props["member"] == member}
    assert set(grants) == {
        "roles/logging.logWriter",
        "roles/artifactregistry.writer",
        "roles/storage.objectViewer",
    }
    registry = grants["roles/artifactregistry.writer"]
    assert registry.type == REPOSITORY_IAM, "image push is granted on the repository only"
    assert registry.props["repository"] == stack.one(REPOSITORY).props["repositoryId"]
    reader = grants["roles/storage.objectViewer"]
    expression = reader.props["condition"]["expression"]
    assert f"gcf-v2-sources-123456789012-{stack.config.region}" in expression
    assert expression.count("resource.name") == 2
    # The function builds into the repository the build account may write to.
    repo_id = f"projects/{stack.config.project}/locations/{stack.config.region}/repositories/"
    assert stack.function.props["buildConfig"]["dockerRepository"] == (
        repo_id + stack.one(REPOSITORY).props["repositoryId"]
    )


def test_runtime_account_only_has_the_database_grant(stack: StackUnderTest) -> None:
    member = f"serviceAccount:{stack.account_email('runtime')}"
    roles = [g.props["role"] for g in stack.iam_grants() if g.props["member"] == member]
    assert roles == ["roles/datastore.user"]


def test_nothing_is_public_or_primitive(stack: StackUnderTest) -> None:
    for resource in stack.run.resources:
        for text in walk_strings(resource.props):
            assert "allUsers" not in text, resource.name
            assert "allAuthenticatedUsers" not in text, resource.name
    for grant in stack.iam_grants():
        assert grant.props["role"] not in ("roles/owner", "roles/editor", "roles/viewer")
        assert grant.props["member"].startswith("serviceAccount:")


def test_scheduler_jobs(stack: StackUnderTest) -> None:
    cfg = stack.config
    jobs = {j.props["name"]: j for j in stack.config_jobs()}
    # Every job ID carries the stack's prefix: <namePrefix>-<jobs[].name>.
    assert list(jobs) == sorted(f"{cfg.name_prefix}-{j.name}" for j in cfg.jobs)
    invoker = stack.account_email("invoker")
    raw_jobs = {j["name"]: j for j in stack.raw["scheduler-dedup:jobs"]}
    for job in cfg.jobs:
        props = jobs[cfg.job_id(job)].props
        raw = raw_jobs[job.name]
        assert props["schedule"] == raw["schedule"]
        assert props["timeZone"] == raw.get("timeZone", "Etc/UTC")
        assert props["region"] == cfg.region
        assert props["project"] == cfg.project
        deadline = raw.get("attemptDeadlineSeconds", ATTEMPT_DEADLINE_DEFAULT_SECONDS)
        assert props["attemptDeadline"] == f"{deadline}s"
        retry = props["retryConfig"]
        raw_retry = raw.get("retry") or {}
        retries = 0 if raw_retry == AT_MOST_ONCE else raw_retry.get("retryCount",
                                                                    RETRY_COUNT_DEFAULT)
        assert retry["retryCount"] == job.retry.retry_count == retries
        assert retry["minBackoffDuration"] == f"{job.retry.min_backoff_seconds:g}s"
        assert retry["maxBackoffDuration"] == f"{job.retry.max_backoff_seconds:g}s"
        assert retry["maxRetryDuration"] == f"{job.retry.max_retry_duration_seconds:g}s"
        assert retry["maxDoublings"] == job.retry.max_doublings
        team = cfg.service_of(job)
        if team is not None and team.app_engine is not None:  # no URL, no token
            target = props["appEngineHttpTarget"]
            assert "httpTarget" not in props
        else:
            target = props["httpTarget"]
            assert target["uri"] == stack.job_uri(job.name)
            assert target["oidcToken"] == {
                "serviceAccountEmail": invoker,
                "audience": stack.job_audience(job.name),
            }
        assert target["httpMethod"] == "POST"
        # Where it runs, and what its schedule times mean (dedup.business_runs), with the
        # choices in force (the job's, the stack's, else BSD cron -s's).
        assert target["headers"] == {
            "X-Dedup-Project": cfg.project,
            "X-Dedup-Location": cfg.region,
            "Content-Type": "application/json",
            "X-Dedup-Schedule": job.schedule,
            "X-Dedup-Time-Zone": job.time_zone,
            "X-Dedup-Attempt-Deadline": str(job.attempt_deadline_seconds),
            "X-Dedup-Dst-Repeated": job.dst_repeated,
            "X-Dedup-Dst-Skipped": job.dst_skipped,
            "X-Dedup-Forced-Runs": job.forced_runs,
            # `allow` is what no header means
            **({"X-Dedup-Overlap": job.overlap} if job.overlap != "allow" else {}),
        }
        assert (job.dst_repeated, job.dst_skipped) == (
            raw.get("dstRepeated", default_dst(job.schedule)[0]),
            raw.get("dstSkipped", default_dst(job.schedule)[1]))
        if "body" in raw:
            assert json.loads(base64.b64decode(target["body"])) == raw["body"]
        else:
            assert target.get("body") is None


def test_audience_is_the_run_app_service_uri(stack: StackUnderTest) -> None:
    assert re.fullmatch(
        rf"https://{stack.config.name_prefix}-[a-z0-9]+-[a-z]+\.a\.run\.app", stack.service_uri
    )
    for job in stack.all(JOB):
        if "httpTarget" in job.props:  # an App Engine target carries no token
            assert job.props["httpTarget"]["oidcToken"]["audience"] == stack.job_audience(
                job.props["name"]
            )


def test_jobs_wait_for_the_invoker_binding(stack: StackUnderTest) -> None:
    for job in stack.all(JOB):
        team = stack.job_service(job.props["name"])
        if job.props["name"] == stack.watchdog_job_id:
            name = "watchdog-invoker"
        elif team is not None:  # its TeamService's grants (none on App Engine)
            name = (f"service-{team.name}-invoker" if team.cloud_run
                    else f"service-{team.name}-datastore-user")
        else:
            name = stack.job_function(job.props["name"]).name.replace("-function", "-invoker")
        binding = stack.run.by_name(name)
        assert binding.urn in job.dependencies


def test_function_waits_for_its_grants(stack: StackUnderTest) -> None:
    deps = set(stack.function.dependencies)
    dedup_grants = [g for g in stack.children_of("dedup") if "role" in g.props]
    for grant in dedup_grants:
        if grant.type != RUN_IAM:
            assert grant.urn in deps, grant.name
    if stack.proxy is not None:
        proxy_deps = set(stack.proxy.dependencies)
        build = f"serviceAccount:{stack.account_email('build')}"
        for grant in stack.iam_grants():
            if grant.props["member"] == build or grant.name == "proxy-datastore-user":
                assert grant.urn in proxy_deps, grant.name


def test_stack_outputs(stack: StackUnderTest) -> None:
    cfg = stack.config
    assert stack.run.outputs == {
        "functionUrl": stack.service_uri,
        "functionName": cfg.name_prefix,
        "runtimeServiceAccount": stack.account_email("runtime"),
        "buildServiceAccount": stack.account_email("build"),
        "invokerServiceAccount": stack.account_email("invoker"),
        "databaseName": cfg.dedup.database_name,
        "collection": cfg.dedup.collection,
        "sourceObject": stack.source_object(stack.function).props["name"],
        "jobNames": [cfg.job_id(j) for j in cfg.jobs],
        "kitVersion": KIT_VERSION,
        **(
            {
                "proxyUrl": stack.proxy_uri,
                "proxyFunctionName": f"{cfg.name_prefix}-proxy",
                "proxyServiceAccount": stack.account_email("proxy"),
                "proxyDatabaseName": cfg.dedup.proxy_database_name,
            }
            if stack.proxy is not None
            else {}
        ),
        **(
            {
                "watchdogUrl": stack.watchdog_uri,
                "watchdogFunctionName": f"{cfg.name_prefix}-watchdog",
                "watchdogServiceAccount": stack.account_email("watchdog"),
                "watchdogJobName": stack.watchdog_job_id,
            }
            if stack.watchdog is not None
            else {}
        ),
        "dashboard": stack.one(DASHBOARD).outputs.get("id", "monitoring-dashboard-id"),
        **(
            {
                "runtimeUrls": {r.name: str(stack.runtime_function(r.name).outputs[
                    "serviceConfig"]["uri"]) for r in cfg.runtimes},
                "runtimeServiceAccounts": {r.name: cfg.runtime_email(r) for r in cfg.runtimes},
            }
            if cfg.runtimes
            else {}
        ),
        **(
            {"teamServiceDatabases": {t.name: cfg.service_database(t) for t in cfg.services}}
            if cfg.services
            else {}
        ),
    }


def test_dedup_invariants_hold_in_the_stack_files(stack: StackUnderTest) -> None:
    for function in (*stack.dedup_functions, stack.proxy):
        if function is None:
            continue
        env = function.props["serviceConfig"]["environmentVariables"]
        lease = int(env["DEDUP_LEASE_SECONDS"])
        retention = int(env["DEDUP_RETENTION_SECONDS"])
        store_timeout = int(env["DEDUP_STORE_TIMEOUT_SECONDS"])
        timeout = function.props["serviceConfig"]["timeoutSeconds"]
        # A liveness window, not a bound on the job: it survives two failed renewals.
        assert lease >= 3 * store_timeout
        assert retention > lease
        for job in stack.config.jobs:
            if job.service is None and stack.job_function(job.name) is function:
                assert job.attempt_deadline_seconds <= timeout
            assert retention > job.retry_window_seconds


# Jobs that are deliberately at-most-once: not retried, so a crashed run is skipped.
AT_MOST_ONCE_JOBS = {"dev": {"heartbeat"}, "prod": set(), "retail": set()}


def test_retried_jobs_recover_crashed_runs(stack: StackUnderTest) -> None:
    """A crashed attempt's claim answers 409 until its lease lapses: every retried job keeps
    retrying until a retry surely comes after that (dedup-retries-outlast-lease)."""
    lease = stack.config.dedup.lease_seconds
    unretried = set()
    for job in stack.config.jobs:
        if fast_failure_retry_span_seconds(job.retry) == 0:
            unretried.add(job.name)
            continue
        needed = retry_duration_to_recover_seconds(job.attempt_deadline_seconds, lease, job.retry)
        assert job.retry.max_retry_duration_seconds >= needed, job.name
        assert fast_failure_retry_span_seconds(job.retry) >= lease, job.name
    assert unretried == AT_MOST_ONCE_JOBS[stack.name]

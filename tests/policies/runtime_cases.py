"""Pass/fail fixtures for runtimes (issue 35, RUNTIMES.md), in the pattern of cases.py:
the new policies that keep job code to its own, and existing policies meeting a runtime's
function (a dedup function like the default one). test_policy_cases.py runs them with the
others. The fail cases the issue names: a runtime granted write on the kit's database
(`runtime-writes-dedup-database`), on another runtime's database
(`runtime-writes-another-runtimes-database`), actAs on the invoker
(`runtime-acts-as-invoker`), the token secret (`runtime-reads-token-secret`), a secret
another runtime declared (`runtime-reads-secret-another-runtime-declared`), a basic role
(`runtime-holds-basic-role`).
"""

from __future__ import annotations

from typing import Any

from policies import gcp
from policies.model import Resource
from tests.policies.bypass_cases import custom_role
from tests.policies.cases import Case, delivering_watchdog, stack_case
from tests.policies.fixtures import (
    BUCKET_IAM_MEMBER,
    BUILD_SA,
    DATABASE,
    DELETE,
    FOLDER_IAM_MEMBER,
    INVOKER_SA,
    PROJECT,
    PROJECT_IAM_MEMBER,
    PROXY_DATABASE,
    PROXY_SA,
    REGION,
    RUN_SERVICE_IAM_MEMBER,
    RUNTIME_SA,
    SA_IAM_MEMBER,
    SECRET_IAM_MEMBER,
    TOKEN_SECRET,
    WATCHDOG_SA,
    U,
    database_condition,
    kit_stack,
    proxy_stack,
    proxy_watchdog_stack,
    replace_named,
    res,
    without_named,
)
from tests.policies.runtime_fixtures import (
    EXPORT,
    RUNTIMES,
    SYNC,
    TEAM_BUCKET,
    preview_runtime_proxy_watchdog_stack,
    preview_runtime_stack,
    runtime_delivering_stack,
    runtime_proxy_watchdog_stack,
    runtime_resources,
    runtime_stack,
    watchdog_reads,
)

TASKS_QUEUE_IAM_MEMBER = "gcp:cloudtasks/queueIamMember:QueueIamMember"
SOURCE_BUCKET = "src-bucket"  # the kit functions' storageSource.bucket
TEAM_GROUP = "group:inventory-team@acme.example"
SYNC_FN = SYNC.pulumi_name("function")
ENV = "serviceConfig.environmentVariables"


def project_grant(name: str, role: str, who: str = SYNC.member, **extra: Any) -> Resource:
    return res(PROJECT_IAM_MEMBER, name, {"project": PROJECT, "role": role, "member": who,
                                          **extra})


def datastore_grant(name: str, role: str, database: str, who: str = SYNC.member) -> Resource:
    return project_grant(name, role, who, condition=database_condition(database))


def on_account(name: str, email: str, role: str, who: str = SYNC.member) -> Resource:
    return res(SA_IAM_MEMBER, name, {
        "serviceAccountId": f"projects/{PROJECT}/serviceAccounts/{email}", "role": role,
        "member": who})


def on_secret(name: str, secret: str, who: str = SYNC.member,
              role: str = "roles/secretmanager.secretAccessor") -> Resource:
    return res(SECRET_IAM_MEMBER, name, {"project": PROJECT, "secretId": secret, "role": role,
                                         "member": who})


def on_service(name: str, service: str, role: str = "roles/run.invoker",
               who: str = SYNC.member) -> Resource:
    return res(RUN_SERVICE_IAM_MEMBER, name, {
        "project": PROJECT, "location": REGION, "name": service, "role": role, "member": who})


def on_bucket(name: str, bucket: str, role: str, who: str = SYNC.member) -> Resource:
    return res(BUCKET_IAM_MEMBER, name, {"bucket": bucket, "role": role, "member": who})


def on_queue(name: str, role: str, queue: str = "dedup-deliveries",
             who: str = SYNC.member) -> Resource:
    return res(TASKS_QUEUE_IAM_MEMBER, name, {
        "project": PROJECT, "location": REGION, "name": queue, "role": role, "member": who})


def with_runtimes(stack: list[Resource]) -> list[Resource]:
    """`stack` plus the runtimes sync and export."""
    return [*stack, *(r for spec in RUNTIMES for r in runtime_resources(spec))]


RT = runtime_stack
PROXIED = runtime_proxy_watchdog_stack


def delivering() -> list[Resource]:
    """The runtimes beside a watchdog that delivers runs through its deliveries queue."""
    return with_runtimes(delivering_watchdog())


def shared_account() -> list[Resource]:
    """export's function runs as sync's account, which holds both databases' grants."""
    stack = replace_named(runtime_stack(), EXPORT.pulumi_name("function"),
                          "serviceConfig.serviceAccountEmail", SYNC.account)
    for what in ("datastore-user", "secret-0", "secret-1", "grant-0"):
        stack = replace_named(stack, EXPORT.pulumi_name(what), "member", SYNC.member)
    return stack


RUNTIME_CASES: dict[str, list[Case]] = {
    "dedup-runtime-own-database-only": [
        stack_case("runtime-stack", RT(), False),
        stack_case("runtime-stack-preview", preview_runtime_stack(), False),
        stack_case("runtime-proxy-watchdog-stack", PROXIED(), False),
        stack_case("runtime-proxy-watchdog-preview", preview_runtime_proxy_watchdog_stack(),
                   False),
        stack_case("default-function-only", kit_stack(), False),
        stack_case("runtime-reads-a-team-database", [*RT(), datastore_grant(
            "team-db", "roles/datastore.viewer", "inventory-analytics")], False),
        stack_case("runtime-datastore-in-another-project", [*RT(), res(
            PROJECT_IAM_MEMBER, "elsewhere", {"project": "acme-analytics", "member": SYNC.member,
                                              "role": "roles/datastore.user"})], False),
        stack_case("runtime-grant-member-unknown", [*RT(), datastore_grant(
            "unknown-member", "roles/datastore.user", DATABASE, U)], False),
        stack_case("runtime-grant-condition-unknown", [*RT(), project_grant(
            "unknown-condition", "roles/datastore.user", condition=U)], False),
        stack_case("runtime-basic-role-is-reported-elsewhere", [*RT(), project_grant(
            "editor", "roles/editor")], False),
        stack_case("runtime-writes-dedup-database", [*RT(), datastore_grant(
            "writes-dedup", "roles/datastore.user", DATABASE)], True),
        stack_case("runtime-writes-another-runtimes-database", [*RT(), datastore_grant(
            "writes-export", "roles/datastore.user", EXPORT.database)], True),
        stack_case("runtime-reads-another-runtimes-database", [*RT(), datastore_grant(
            "reads-export", "roles/datastore.viewer", EXPORT.database)], True),
        stack_case("runtime-reads-the-proxys-database", [*PROXIED(), datastore_grant(
            "reads-proxy", "roles/datastore.viewer", PROXY_DATABASE)], True),
        stack_case("runtime-datastore-unconditioned-on-project", replace_named(
            RT(), SYNC.pulumi_name("datastore-user"), "condition", None), True),
        stack_case("runtime-datastore-at-folder-level", [*RT(), res(FOLDER_IAM_MEMBER, "folder", {
            "folder": "folders/1234", "role": "roles/datastore.viewer",
            "member": SYNC.member})], True),
        stack_case("runtime-custom-role-reads-entities", [
            *RT(), custom_role(["datastore.entities.get"], "records_reader"),
            project_grant("custom", f"projects/{PROJECT}/roles/records_reader")], True),
        stack_case("runtime-exports-the-project", [*RT(), project_grant(
            "export-all", "roles/datastore.importExportAdmin")], True),
        stack_case("default-function-reads-a-runtimes-database", [*RT(), datastore_grant(
            "default-reads-sync", "roles/datastore.viewer", SYNC.database,
            f"serviceAccount:{RUNTIME_SA}")], True),
        stack_case("runtimes-share-an-account", shared_account(), True),
    ],
    "dedup-runtime-no-kit-resources": [
        stack_case("runtime-stack", RT(), False),
        stack_case("runtimes-beside-a-watchdog-delivering-to-them", runtime_delivering_stack(),
                   False),
        stack_case("runtime-enqueues-the-watchdogs-deliveries", [
            *runtime_delivering_stack(), on_queue("sync-enqueues", "roles/cloudtasks.enqueuer")],
            True),
        stack_case("runtime-stack-preview", preview_runtime_stack(), False),
        stack_case("runtime-proxy-watchdog-stack", PROXIED(), False),
        stack_case("runtime-beside-a-delivering-watchdog", delivering(), False),
        stack_case("default-function-only", proxy_watchdog_stack(), False),
        stack_case("runtime-publishes-a-team-topic-project-wide", [*RT(), project_grant(
            "publisher", "roles/pubsub.publisher")], False),
        stack_case("runtime-enqueues-a-team-queue", [*delivering(), on_queue(
            "team-queue", "roles/cloudtasks.enqueuer", "inventory-retries")], False),
        stack_case("runtime-unknown-role-on-the-project", [*RT(), project_grant(
            "unknown-role", "roles/someservice.newRole")], True),
        stack_case("runtime-grant-member-unknown", [*RT(), on_account(
            "unknown-member", INVOKER_SA, "roles/iam.serviceAccountUser", U)], False),
        stack_case("runtime-acts-as-invoker", [*RT(), on_account(
            "acts-as-invoker", INVOKER_SA, "roles/iam.serviceAccountUser")], True),
        stack_case("runtime-mints-another-runtimes-tokens", [*RT(), on_account(
            "mints-export", EXPORT.account, "roles/iam.serviceAccountTokenCreator")], True),
        stack_case("runtime-acts-as-the-build-account", [*RT(), on_account(
            "acts-as-build", BUILD_SA, "roles/iam.serviceAccountUser")], True),
        stack_case("runtime-acts-as-anyone-on-the-project", [*RT(), project_grant(
            "acts-as-all", "roles/iam.serviceAccountUser")], True),
        stack_case("runtime-custom-role-acts-as-the-invoker", [
            *RT(), custom_role(["iam.serviceAccounts.actAs"], "attach"),
            on_account("custom-act-as", INVOKER_SA, f"projects/{PROJECT}/roles/attach")], True),
        stack_case("default-function-acts-as-invoker", [*RT(), on_account(
            "default-acts-as", INVOKER_SA, "roles/iam.serviceAccountUser",
            f"serviceAccount:{RUNTIME_SA}")], True),
        stack_case("runtime-reads-token-secret", [*PROXIED(), on_secret(
            "reads-token", TOKEN_SECRET)], True),
        stack_case("runtime-adds-token-secret-versions", [*PROXIED(), on_secret(
            "adds-token", TOKEN_SECRET, role="roles/secretmanager.secretVersionAdder")], True),
        stack_case("runtime-reads-every-secret-beside-the-proxy", [*PROXIED(), project_grant(
            "reads-all", "roles/secretmanager.secretAccessor")], True),
        stack_case("runtime-enqueues-deliveries", [*delivering(), on_queue(
            "enqueues", "roles/cloudtasks.enqueuer")], True),
        stack_case("runtime-deletes-tasks-project-wide", [*delivering(), project_grant(
            "deletes-tasks", "roles/cloudtasks.taskDeleter")], True),
        stack_case("runtime-invokes-dedup-function", [*RT(), on_service(
            "invokes-dedup", "scheduler-dedup")], True),
        stack_case("runtime-invokes-another-runtime", [*RT(), on_service(
            "invokes-export", EXPORT.function)], True),
        stack_case("runtime-invokes-every-service", [*RT(), project_grant(
            "invokes-all", "roles/run.invoker")], True),
        stack_case("runtime-writes-source-bucket", [*RT(), on_bucket(
            "writes-source", SOURCE_BUCKET, "roles/storage.objectCreator")], True),
        stack_case("runtime-storage-admin-project-wide", [*RT(), project_grant(
            "storage-admin", "roles/storage.admin")], True),
        stack_case("runtime-unknown-role-on-source-bucket", [*RT(), on_bucket(
            "unknown-on-source", SOURCE_BUCKET, "roles/storage.somethingNew")], True),
    ],
    "dedup-secret-readers-declared": [
        stack_case("runtime-stack", RT(), False),
        stack_case("runtime-stack-preview", preview_runtime_stack(), False),
        stack_case("runtime-proxy-watchdog-stack", PROXIED(), False),
        stack_case("proxy-reads-its-token-secret", proxy_stack(), False),
        stack_case("a-team-group-reads-a-runtime-secret", [*RT(), on_secret(
            "team-reads", SYNC.secret, TEAM_GROUP)], False),
        stack_case("runtime-grant-member-unknown", [*RT(), on_secret(
            "unknown-member", EXPORT.secret, U)], False),
        stack_case("runtime-secrets-unknown", replace_named(
            [*RT(), on_secret("reads-export", EXPORT.secret)], SYNC_FN,
            "serviceConfig.secretEnvironmentVariables", U), False),
        stack_case("runtime-reads-secret-another-runtime-declared", [*RT(), on_secret(
            "reads-export", EXPORT.secret)], True),
        stack_case("runtime-reads-another-runtimes-volume-secret", [*RT(), on_secret(
            "reads-export-volume", EXPORT.volume_secret or "")], True),
        stack_case("runtime-admin-of-another-runtimes-secret", [*RT(), on_secret(
            "admin-export", EXPORT.secret, role="roles/secretmanager.admin")], True),
        stack_case("runtime-reads-every-secret", [*RT(), project_grant(
            "reads-all", "roles/secretmanager.secretAccessor")], True),
        stack_case("runtime-no-longer-declares-its-secret", replace_named(
            RT(), SYNC_FN, "serviceConfig.secretEnvironmentVariables", []), True),
        stack_case("runtime-reads-a-same-named-secret-elsewhere", [*RT(), on_secret(
            "elsewhere", f"projects/acme-vault/secrets/{SYNC.secret}")], True),
        stack_case("invoker-reads-a-runtime-secret", [*RT(), on_secret(
            "invoker-reads", SYNC.secret, f"serviceAccount:{INVOKER_SA}")], True),
        stack_case("watchdog-reads-a-runtime-secret", [*PROXIED(), on_secret(
            "watchdog-reads", SYNC.secret, f"serviceAccount:{WATCHDOG_SA}")], True),
        stack_case("build-account-reads-a-runtime-secret", [*RT(), on_secret(
            "build-reads", SYNC.secret, f"serviceAccount:{BUILD_SA}")], True),
        stack_case("proxy-reads-a-runtime-secret", [*PROXIED(), on_secret(
            "proxy-reads", SYNC.secret, f"serviceAccount:{PROXY_SA}")], True),
        stack_case("default-function-reads-a-runtime-secret", [*RT(), on_secret(
            "default-reads", SYNC.secret, f"serviceAccount:{RUNTIME_SA}")], True),
    ],
    "dedup-accounts-no-basic-roles": [
        stack_case("runtime-stack", RT(), False),
        stack_case("runtime-proxy-watchdog-stack", PROXIED(), False),
        stack_case("a-person-with-a-basic-role", [*RT(), project_grant(
            "person-editor", "roles/editor", "user:ops@acme.example")], False),
        stack_case("basic-role-member-unknown", [*RT(), project_grant(
            "unknown-editor", "roles/editor", U)], False),
        stack_case("runtime-holds-basic-role", [*RT(), project_grant(
            "sync-editor", "roles/editor")], True),
        stack_case("invoker-holds-owner", [*RT(), project_grant(
            "invoker-owner", "roles/owner", f"serviceAccount:{INVOKER_SA}")], True),
        stack_case("watchdog-holds-viewer", [*PROXIED(), project_grant(
            "watchdog-viewer", "roles/viewer", f"serviceAccount:{WATCHDOG_SA}")], True),
        stack_case("build-account-holds-editor", [*RT(), project_grant(
            "build-editor", "roles/editor", f"serviceAccount:{BUILD_SA}")], True),
        stack_case("runtime-basic-role-on-a-bucket", [*RT(), on_bucket(
            "bucket-editor", TEAM_BUCKET, "roles/editor")], True),
    ],
    "dedup-runtime-no-project-grants": [
        stack_case("runtime-stack", RT(), False),
        stack_case("runtime-proxy-watchdog-stack", PROXIED(), False),
        stack_case("runtime-grant-on-a-bucket", [*RT(), on_bucket(
            "bucket-writer", TEAM_BUCKET, "roles/storage.objectUser")], False),
        stack_case("runtime-grant-condition-unknown", [*RT(), project_grant(
            "unknown-condition", "roles/datastore.user", condition=U)], False),
        stack_case("runtime-publishes-project-wide", [*RT(), project_grant(
            "publisher", "roles/pubsub.publisher")], True),
        stack_case("runtime-datastore-conditioned-to-a-team-database", [*RT(), datastore_grant(
            "team-db", "roles/datastore.viewer", "inventory-analytics")], False),
        stack_case("runtime-datastore-on-every-database", [*RT(), project_grant(
            "all-dbs", "roles/datastore.viewer")], True),
        stack_case("default-function-project-grant", [*RT(), project_grant(
            "default-jobs", "roles/bigquery.jobUser", f"serviceAccount:{RUNTIME_SA}")], True),
    ],
    # Existing policies meet a runtime's function as they meet the default one.
    "dedup-watchdog-least-privilege": [
        stack_case("watchdog-reads-runtime-databases", PROXIED(), False),
        stack_case("watchdog-delivers-to-runtimes-only", runtime_delivering_stack(), False),
        stack_case("watchdog-reads-runtime-databases-preview",
                   preview_runtime_proxy_watchdog_stack(), False),
        stack_case("watchdog-reads-a-database-of-no-runtime", [
            *without_named(PROXIED(), watchdog_reads(EXPORT).name),
            datastore_grant("watchdog-reads-team", "roles/datastore.viewer", "inventory-analytics",
                            f"serviceAccount:{WATCHDOG_SA}")], True),
    ],
    "dedup-accounts-act-as": [
        stack_case("watchdog-delivering-to-runtimes-acts-as-itself", runtime_delivering_stack(),
                   False),
        stack_case("watchdog-not-delivering-acts-as-itself", replace_named(
            runtime_delivering_stack(), "watchdog-function",
            f"{ENV}.DEDUP_WATCH_RUNTIME_URLS", DELETE), True),
    ],
    "dedup-database-writers": [
        stack_case("runtimes-write-their-own-databases", RT(), False),
        stack_case("runtime-writes-another-runtimes-records", [*RT(), datastore_grant(
            "writes-export", "roles/datastore.user", EXPORT.database)], True),
        stack_case("watchdog-writes-a-runtime-database", [*PROXIED(), datastore_grant(
            "watchdog-writes-sync", "roles/datastore.user", SYNC.database,
            f"serviceAccount:{WATCHDOG_SA}")], True),
    ],
    "dedup-ttl-policy": [
        stack_case("runtimes-with-ttl-fields", RT(), False),
        stack_case("runtime-without-its-ttl-field", without_named(
            RT(), SYNC.pulumi_name("ttl-field")), True),
    ],
    "dedup-allowed-callers": [
        stack_case("runtimes-serve-the-invoker", RT(), False),
        stack_case("runtimes-serve-the-watchdog-delivering-to-them", runtime_delivering_stack(),
                   False),
        stack_case("runtimes-serve-a-watchdog-that-does-not-deliver", replace_named(
            runtime_delivering_stack(), "watchdog-function",
            f"{ENV}.DEDUP_WATCH_RUNTIME_URLS", DELETE), True),
        stack_case("runtime-serves-everyone", replace_named(
            RT(), SYNC_FN, f"{ENV}.DEDUP_ALLOWED_CALLERS", ""), True),
    ],
    "dedup-runtime-account-not-a-caller": [
        stack_case("runtime-accounts-call-nothing", RT(), False),
        stack_case("runtime-account-is-an-allowed-caller", replace_named(
            RT(), "dedup-function", f"{ENV}.DEDUP_ALLOWED_CALLERS",
            f"{INVOKER_SA},{SYNC.account}"), True),
    ],
    "function-ingress-not-public": [
        Case("runtime-function-internal", [r for r in RT() if r.name == SYNC_FN], False),
        Case("runtime-function-public", [r for r in replace_named(
            RT(), SYNC_FN, "serviceConfig.ingressSettings", "ALLOW_ALL")
            if r.name == SYNC_FN], True),
    ],
}

assert all(r.type != gcp.FUNCTION_V2 or r.name for r in RT())

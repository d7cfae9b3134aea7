"""A compliant stack with runtimes (RUNTIMES.md, issue 35), shaped like infra/job_runtime.py
declares one: `runtime_stack()` is `kit_stack()` plus two runtimes, `sync` and `export`,
each with its account, its own records database (with the TTL and schedule_time fields),
roles/datastore.user conditioned to that database, its function (labelled `kit-runtime`,
internal ingress, its own DEDUP_DATABASE, a setting, a secret environment variable; export
also a secret volume), roles/secretmanager.secretAccessor on each secret it declares, a
grant on a bucket of the team's, the invoker's roles/run.invoker on its service, and a
Scheduler job that targets it. `runtime_proxy_watchdog_stack()` adds them to the stack
with the proxy and the watchdog, which reads every runtime's database;
`runtime_delivering_stack()` has that watchdog deliver the runtimes' runs (only theirs:
DEDUP_WATCH_RUNTIME_URLS) through its deliveries queue, as infra/watchdog.py declares it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies import gcp
from policies.job_tables import BUCKET_OBJECT
from policies.model import Resource
from tests.policies.fixtures import (
    BUCKET_IAM_MEMBER,
    DATABASE,
    FIRESTORE_DATABASE,
    INVOKER_SA,
    PROJECT,
    PROJECT_IAM_MEMBER,
    REGION,
    RUN_SERVICE_IAM_MEMBER,
    SA_IAM_MEMBER,
    SECRET_IAM_MEMBER,
    SERVICE_ACCOUNT,
    STACK,
    WATCHDOG_SA,
    as_preview,
    database_condition,
    database_props,
    field_props,
    function_props,
    job_props,
    kit_stack,
    patch,
    proxy_watchdog_stack,
    res,
    schedule_time_field_props,
)

RUNTIME_COMPONENT = "scheduler-dedup:index:JobRuntime"
TEAM_BUCKET = "acme-exports"


@dataclass(frozen=True)
class RuntimeSpec:
    name: str
    secret: str
    """The secret its function reads as an environment variable."""
    volume_secret: str | None
    """A secret it mounts as a file (None: none)."""
    bucket_role: str

    @property
    def function(self) -> str:
        return f"{DATABASE}-{self.name}"

    @property
    def account(self) -> str:
        return f"{DATABASE}-{self.name}@{PROJECT}.iam.gserviceaccount.com"

    @property
    def database(self) -> str:
        return f"{DATABASE}-{self.name}"

    @property
    def url(self) -> str:
        return f"https://{DATABASE}-{self.name}-mno345-ew.a.run.app"

    @property
    def member(self) -> str:
        return f"serviceAccount:{self.account}"

    def pulumi_name(self, what: str) -> str:
        return f"runtime-{self.name}-{what}"


SYNC = RuntimeSpec("sync", "inventory-api-token", None, "roles/storage.objectViewer")
EXPORT = RuntimeSpec("export", "export-signing-key", "export-gpg-key",
                     "roles/storage.objectCreator")
RUNTIMES = (SYNC, EXPORT)


def runtime_child(resource_type: str, name: str, props: Mapping[str, Any]) -> Resource:
    """A resource declared inside a runtime's JobRuntime component."""
    return Resource(
        resource_type,
        name,
        f"urn:pulumi:{STACK}::scheduler-dedup::{RUNTIME_COMPONENT}${resource_type}::{name}",
        copy.deepcopy(dict(props)),
        parent=f"urn:pulumi:{STACK}::scheduler-dedup::{RUNTIME_COMPONENT}::runtime-x",
    )


def runtime_function_props(spec: RuntimeSpec) -> dict[str, Any]:
    props = function_props()
    props["name"] = spec.function
    props["labels"] = {"managed-by": "pulumi", "kit": "scheduler-dedup", "kit-runtime": spec.name}
    props["buildConfig"]["source"]["storageSource"]["object"] = f"function-{spec.name}-7a8b.zip"
    service = props["serviceConfig"]
    service["serviceAccountEmail"] = spec.account
    service["uri"] = spec.url
    service["maxInstanceCount"] = 2
    env = service["environmentVariables"]
    env["DEDUP_DATABASE"] = spec.database
    env["DEDUP_JOB"] = f"jobs.{spec.name}:run"
    env["INVENTORY_API_URL"] = "https://inventory.internal.acme.example"
    service["secretEnvironmentVariables"] = [
        {"key": "API_TOKEN", "projectId": PROJECT, "secret": spec.secret, "version": "latest"}]
    if spec.volume_secret:
        service["secretVolumes"] = [
            {"mountPath": "/secrets/gpg", "projectId": PROJECT, "secret": spec.volume_secret,
             "versions": [{"path": "key", "version": "3"}]}]
    return props


def secret_accessor(spec: RuntimeSpec, secret: str, name: str) -> Resource:
    return runtime_child(SECRET_IAM_MEMBER, name, {
        "project": PROJECT, "secretId": secret,
        "role": "roles/secretmanager.secretAccessor", "member": spec.member})


def runtime_resources(spec: RuntimeSpec) -> list[Resource]:
    """What the program declares for one runtime."""
    name = spec.pulumi_name
    job = job_props(f"{spec.name}-job")
    job["httpTarget"]["uri"] = spec.url
    job["httpTarget"]["oidcToken"]["audience"] = spec.url
    found = [
        runtime_child(SERVICE_ACCOUNT, name("account"),
                      {"accountId": spec.function, "project": PROJECT}),
        runtime_child(FIRESTORE_DATABASE, name("database"),
                      database_props(False, spec.database)),
        runtime_child(gcp.FIRESTORE_FIELD, name("ttl-field"), field_props(spec.database)),
        runtime_child(gcp.FIRESTORE_FIELD, name("schedule-time-field"),
                      schedule_time_field_props(spec.database)),
        runtime_child(PROJECT_IAM_MEMBER, name("datastore-user"), {
            "project": PROJECT, "role": "roles/datastore.user", "member": spec.member,
            "condition": database_condition(spec.database)}),
        secret_accessor(spec, spec.secret, name("secret-0")),
        runtime_child(BUCKET_IAM_MEMBER, name("grant-0"), {
            "bucket": TEAM_BUCKET, "role": spec.bucket_role, "member": spec.member}),
        runtime_child(BUCKET_OBJECT, name("source"), {
            "bucket": "src-bucket", "name": f"function-{spec.name}-7a8b.zip",
            "contentType": "application/zip"}),
        runtime_child(gcp.FUNCTION_V2, name("function"), runtime_function_props(spec)),
        runtime_child(RUN_SERVICE_IAM_MEMBER, name("invoker"), {
            "project": PROJECT, "location": REGION, "name": spec.function,
            "role": "roles/run.invoker", "member": f"serviceAccount:{INVOKER_SA}"}),
        res(gcp.SCHEDULER_JOB, f"job-{spec.name}", job),
    ]
    if spec.volume_secret:
        found.append(secret_accessor(spec, spec.volume_secret, name("secret-1")))
    return found


def runtime_stack() -> list[Resource]:
    """kit_stack plus the runtimes sync and export."""
    return [*kit_stack(), *(r for spec in RUNTIMES for r in runtime_resources(spec))]


def preview_runtime_stack() -> list[Resource]:
    return as_preview(runtime_stack())


def watchdog_reads(spec: RuntimeSpec) -> Resource:
    """The watchdog's roles/datastore.viewer on a runtime's records database."""
    return res(PROJECT_IAM_MEMBER, f"watchdog-{spec.name}-datastore-viewer", {
        "project": PROJECT, "role": "roles/datastore.viewer",
        "member": f"serviceAccount:{WATCHDOG_SA}",
        "condition": database_condition(spec.database)})


def runtime_proxy_watchdog_stack() -> list[Resource]:
    """proxy_watchdog_stack plus the runtimes, whose databases the watchdog reads."""
    return [
        *proxy_watchdog_stack(),
        *(r for spec in RUNTIMES for r in runtime_resources(spec)),
        *(watchdog_reads(spec) for spec in RUNTIMES),
    ]


def preview_runtime_proxy_watchdog_stack() -> list[Resource]:
    return as_preview(runtime_proxy_watchdog_stack())


DELIVERIES = f"projects/{PROJECT}/locations/{REGION}/queues/dedup-deliveries"
WATCH_ENV = "serviceConfig.environmentVariables"


def runtime_delivering_stack() -> list[Resource]:
    """runtime_proxy_watchdog_stack whose watchdog delivers the runtimes' runs: their URLs
    in DEDUP_WATCH_RUNTIME_URLS, its deliveries queue (enqueuer on it, actAs on itself for
    its tasks' OIDC token), run.invoker on each runtime's service, and each runtime's
    DEDUP_ALLOWED_CALLERS naming it."""
    watchdog = f"serviceAccount:{WATCHDOG_SA}"
    urls = json.dumps({spec.name: spec.url for spec in RUNTIMES})
    stack: list[Resource] = []
    for r in runtime_proxy_watchdog_stack():
        props = r.props
        if r.name == "watchdog-function":
            props = patch(props, f"{WATCH_ENV}.DEDUP_WATCH_RUNTIME_URLS", urls)
            props = patch(props, f"{WATCH_ENV}.DEDUP_WATCH_QUEUE", DELIVERIES)
        elif r.name in {spec.pulumi_name("function") for spec in RUNTIMES}:
            props = patch(props, f"{WATCH_ENV}.DEDUP_ALLOWED_CALLERS",
                          f"{INVOKER_SA},{WATCHDOG_SA}")
        stack.append(Resource(r.type, r.name, r.urn, props, r.parent, r.dependencies))
    return [
        *stack,
        res(gcp.TASKS_QUEUE, "watchdog-deliveries", {
            "project": PROJECT, "location": REGION, "name": "dedup-deliveries"}),
        res("gcp:cloudtasks/queueIamMember:QueueIamMember", "watchdog-enqueues-deliveries", {
            "project": PROJECT, "location": REGION, "name": "dedup-deliveries",
            "role": "roles/cloudtasks.enqueuer", "member": watchdog}),
        res(SA_IAM_MEMBER, "watchdog-acts-as-itself", {
            "serviceAccountId": f"projects/{PROJECT}/serviceAccounts/{WATCHDOG_SA}",
            "role": "roles/iam.serviceAccountUser", "member": watchdog}),
        *(res(RUN_SERVICE_IAM_MEMBER, f"watchdog-delivers-to-{spec.name}", {
            "project": PROJECT, "location": REGION, "name": spec.function,
            "role": "roles/run.invoker", "member": watchdog}) for spec in RUNTIMES),
    ]

"""Resources as the Pulumi engine hands them to policies: type token + camelCase props.

`kit_stack()` is a compliant stack shaped like the kit's program; `preview_stack()` is the
same stack during a first `pulumi preview`, where outputs of resources not created yet
(URLs, service account e-mails, database names) are unknown sentinels. `proxy_stack()` and
`preview_proxy_stack()` add the idempotent proxy with one target of each kind and its
records in a database of its own; `watchdog_stack()` adds the run watchdog, and
`proxy_watchdog_stack()` both (the watchdog then also reads the proxy's database).
"""

from __future__ import annotations

import copy
import hashlib
import json
import tempfile
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dedup.tables import archive_path
from infra.source import PROXY_ROUTES_TABLE
from policies import gcp
from policies.job_tables import BUCKET_OBJECT
from policies.model import Resource
from policies.values import UNKNOWN_STRING

U = UNKNOWN_STRING  # "not known until the update runs"
STACK = "dev"
PROJECT = "acme-billing-dev"
REGION = "europe-west1"
DATABASE = "scheduler-dedup"
COLLECTION = "scheduler_runs"
FUNCTION_URL = "https://scheduler-dedup-abc123-ew.a.run.app"
PROXY_URL = "https://scheduler-dedup-proxy-def456-ew.a.run.app"
INVOKER_SA = f"dedup-invoker@{PROJECT}.iam.gserviceaccount.com"
RUNTIME_SA = f"dedup-runtime@{PROJECT}.iam.gserviceaccount.com"
BUILD_SA = f"dedup-build@{PROJECT}.iam.gserviceaccount.com"
PROXY_SA = f"dedup-proxy@{PROJECT}.iam.gserviceaccount.com"
WATCHDOG_SA = f"dedup-watchdog@{PROJECT}.iam.gserviceaccount.com"
WATCHDOG_URL = "https://scheduler-dedup-watchdog-ghi789-ew.a.run.app"
CHANNEL_ID = f"projects/{PROJECT}/notificationChannels/1234567890"
WORKFLOW = f"projects/{PROJECT}/locations/{REGION}/workflows/daily-report"
RUN_JOB = f"projects/{PROJECT}/locations/{REGION}/jobs/reindex"
TRIGGER = f"projects/{PROJECT}/locations/global/triggers/release"
WORKFLOW_ROLE = f"projects/{PROJECT}/roles/dedup_proxy_workflow_starter"
TRIGGER_TOPIC = f"projects/{PROJECT}/topics/dedup-build-release"
TOKEN_SECRET = "dedup-token-secret"
COMPUTE_SA = "123456789012-compute@developer.gserviceaccount.com"
APPSPOT_SA = f"{PROJECT}@appspot.gserviceaccount.com"
CLOUDBUILD_SA = "123456789012@cloudbuild.gserviceaccount.com"

PROJECT_IAM_MEMBER = "gcp:projects/iAMMember:IAMMember"
PROJECT_IAM_BINDING = "gcp:projects/iAMBinding:IAMBinding"
PROJECT_IAM_POLICY = "gcp:projects/iAMPolicy:IAMPolicy"
RUN_SERVICE_IAM_MEMBER = "gcp:cloudrunv2/serviceIamMember:ServiceIamMember"
RUN_SERVICE_IAM_BINDING = "gcp:cloudrunv2/serviceIamBinding:ServiceIamBinding"
FUNCTION_IAM_MEMBER = "gcp:cloudfunctionsv2/functionIamMember:FunctionIamMember"
CLOUDRUN_V1_IAM_MEMBER = "gcp:cloudrun/iamMember:IamMember"
BUCKET_IAM_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
BUCKET_IAM_BINDING = "gcp:storage/bucketIAMBinding:BucketIAMBinding"
SA_IAM_MEMBER = "gcp:serviceaccount/iAMMember:IAMMember"
FOLDER_IAM_MEMBER = "gcp:folder/iAMMember:IAMMember"
ORG_IAM_BINDING = "gcp:organizations/iAMBinding:IAMBinding"
SERVICE_ACCOUNT = "gcp:serviceaccount/account:Account"
RUN_JOB_IAM_MEMBER = "gcp:cloudrunv2/jobIamMember:JobIamMember"
RUN_JOB_IAM_BINDING = "gcp:cloudrunv2/jobIamBinding:JobIamBinding"
TOPIC_IAM_MEMBER = "gcp:pubsub/topicIAMMember:TopicIAMMember"
SECRET_IAM_MEMBER = "gcp:secretmanager/secretIamMember:SecretIamMember"
FIRESTORE_DATABASE = "gcp:firestore/database:Database"
ALERT_POLICY = "gcp:monitoring/alertPolicy:AlertPolicy"
NOTIFICATION_CHANNEL = "gcp:monitoring/notificationChannel:NotificationChannel"
PROXY_DATABASE = f"{DATABASE}-proxy"  # the proxy's records: a database of its own


def database_condition(database: str = DATABASE) -> dict[str, str]:
    """The condition the kit puts on datastore roles: one database."""
    return {
        "title": "dedup-database-only",
        "expression": f'resource.name == "projects/{PROJECT}/databases/{database}"',
    }


DATASTORE_CONDITION = database_condition()
PROXY_DATASTORE_CONDITION = database_condition(PROXY_DATABASE)


DELETE = object()
"""Pass as `value` to `patch` to remove the property."""


def urn(resource_type: str, name: str) -> str:
    return f"urn:pulumi:{STACK}::scheduler-dedup::{resource_type}::{name}"


def res(resource_type: str, name: str, props: Mapping[str, Any]) -> Resource:
    return Resource(resource_type, name, urn(resource_type, name), copy.deepcopy(dict(props)))


PROXY_COMPONENT_URN = urn(gcp.PROXY_COMPONENT, "proxy")


def proxy_child(resource_type: str, name: str, props: Mapping[str, Any]) -> Resource:
    """A resource declared inside the kit's DedupProxy component, as infra/dedup_proxy.py
    declares them: the component's type leads its URN's type chain."""
    return Resource(
        resource_type,
        name,
        f"urn:pulumi:{STACK}::scheduler-dedup::{gcp.PROXY_COMPONENT}${resource_type}::{name}",
        copy.deepcopy(dict(props)),
        parent=PROXY_COMPONENT_URN,
    )


def patch(props: Mapping[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of `props` with the dotted `path` set to `value` (DELETE removes it)."""
    result = copy.deepcopy(dict(props))
    node: Any = result
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    if value is DELETE:
        node.pop(last, None)
    else:
        node[last] = value
    return result


def job_props(name: str = "nightly-export") -> dict[str, Any]:
    return {
        "name": name,
        "project": PROJECT,
        "region": REGION,
        "schedule": "0 3 * * *",
        "timeZone": "Europe/Berlin",
        "attemptDeadline": "300s",
        "retryConfig": {
            "retryCount": 3,
            # Well past the lease (60 s): a run whose instance crashed is taken over.
            "maxRetryDuration": "600s",
            "minBackoffDuration": "10s",
            "maxBackoffDuration": "300s",
            "maxDoublings": 3,
        },
        "httpTarget": {
            "uri": FUNCTION_URL,
            "httpMethod": "POST",
            "body": "eyJyZXBvcnQiOiAiZGFpbHkifQ==",
            "headers": {
                "Content-Type": "application/json",
                "X-Dedup-Project": PROJECT,
                "X-Dedup-Location": REGION,
            },
            "oidcToken": {"serviceAccountEmail": INVOKER_SA, "audience": FUNCTION_URL},
        },
    }


def function_props() -> dict[str, Any]:
    return {
        "name": "scheduler-dedup",
        "project": PROJECT,
        "location": REGION,
        "buildConfig": {
            "runtime": "python311",
            "entryPoint": "handle_scheduled_job",
            "serviceAccount": f"projects/{PROJECT}/serviceAccounts/{BUILD_SA}",
            "source": {"storageSource": {"bucket": "src-bucket", "object": "function-1a2b.zip"}},
        },
        "serviceConfig": {
            "serviceAccountEmail": RUNTIME_SA,
            "ingressSettings": "ALLOW_INTERNAL_ONLY",
            "timeoutSeconds": 540,
            "availableMemory": "512Mi",
            "minInstanceCount": 0,
            "maxInstanceCount": 10,
            "environmentVariables": {
                "DEDUP_PROJECT": PROJECT,
                "DEDUP_LOCATION": REGION,
                "DEDUP_DATABASE": DATABASE,
                "DEDUP_COLLECTION": COLLECTION,
                "DEDUP_LEASE_SECONDS": "60",
                "DEDUP_RETENTION_SECONDS": "604800",
                "DEDUP_STORE_TIMEOUT_SECONDS": "10",
                "DEDUP_MISSING_SCHEDULE_TIME": "reject",
                "DEDUP_JOB": "example_jobs.example:run",
                "DEDUP_ALLOWED_CALLERS": INVOKER_SA,
            },
            "uri": FUNCTION_URL,
        },
    }


PROXY_ROUTES = {
    "daily-report": {"target": "workflow", "resource": WORKFLOW},
    "reindex": {"target": "run_job", "resource": RUN_JOB, "container": "worker"},
    "release": {"target": "build_trigger", "resource": TRIGGER, "topic": TRIGGER_TOPIC},
}


PROXY_SOURCE = "proxy-source"
"""The proxy's source object (function/ plus its job table, the routes)."""
PROXY_SOURCE_OBJECT = "function-proxy-3c4d.zip"
_ARCHIVES = Path(tempfile.mkdtemp(prefix="policy-fixture-archives-"))


def routes_asset(routes: Mapping[str, Any] | str | None) -> dict[str, str]:
    """A proxy source archive whose job table is `routes` (raw text as is; None: no table),
    as the offline mocks present a file asset. Written once per content."""
    return table_asset(PROXY_ROUTES_TABLE, routes)


def table_asset(table: str, content: Any) -> dict[str, str]:
    """A source archive holding job table `table` (raw text as is; None: no table)."""
    text = content if isinstance(content, str) or content is None else json.dumps(content)
    key = hashlib.sha256(repr((table, text)).encode()).hexdigest()[:16]
    path = _ARCHIVES / f"{key}.zip"
    if not path.exists():
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("main.py", "")
            if text is not None:
                zf.writestr(archive_path(table), text)
    return {"__asset": "file", "path": str(path)}


def proxy_source_props(routes: Mapping[str, Any] | str | None) -> dict[str, Any]:
    return {"bucket": "src-bucket", "name": PROXY_SOURCE_OBJECT, "source": routes_asset(routes),
            "contentType": "application/zip"}


def proxy_function_props() -> dict[str, Any]:
    """The idempotent proxy: same source tree and protocol settings, own account, its own
    source object (with its routes)."""
    props = function_props()
    props["name"] = "scheduler-dedup-proxy"
    props["buildConfig"]["entryPoint"] = "proxy_scheduled_job"
    props["buildConfig"]["source"]["storageSource"]["object"] = PROXY_SOURCE_OBJECT
    service = props["serviceConfig"]
    service["serviceAccountEmail"] = PROXY_SA
    service["uri"] = PROXY_URL
    env = service["environmentVariables"]
    del env["DEDUP_JOB"]
    env["DEDUP_DATABASE"] = PROXY_DATABASE
    env["DEDUP_PROXY_TIMEOUT_SECONDS"] = "30"
    # The token secret, read by Cloud Run at instance start (infra/dedup_proxy.py).
    service["secretEnvironmentVariables"] = [
        {"key": "DEDUP_TOKEN_SECRET", "projectId": PROJECT, "secret": TOKEN_SECRET,
         "version": "1"}]
    return props


def proxied_job_props() -> dict[str, Any]:
    props = job_props("daily-report")
    props["httpTarget"]["uri"] = PROXY_URL
    props["httpTarget"]["oidcToken"]["audience"] = PROXY_URL
    return props


def field_props(database: str = DATABASE) -> dict[str, Any]:
    return {
        "project": PROJECT,
        "database": database,
        "collection": COLLECTION,
        "field": "expire_at",
        "ttlConfig": {},
        "indexConfig": {},
    }


def schedule_time_field_props(database: str = DATABASE) -> dict[str, Any]:
    """The records' schedule_time, exempt from indexing like expire_at, with no TTL."""
    props = field_props(database)
    props["field"] = "schedule_time"
    del props["ttlConfig"]
    return props


def bucket_props() -> dict[str, Any]:
    return {
        "name": f"{PROJECT}-dedup-src",
        "location": "EUROPE-WEST1",
        "uniformBucketLevelAccess": True,
        "publicAccessPrevention": "enforced",
    }


def kit_stack() -> list[Resource]:
    return [
        res(SERVICE_ACCOUNT, "invoker-sa", {"accountId": "dedup-invoker", "project": PROJECT}),
        res(SERVICE_ACCOUNT, "runtime-sa", {"accountId": "dedup-runtime", "project": PROJECT}),
        res(SERVICE_ACCOUNT, "build-sa", {"accountId": "dedup-build", "project": PROJECT}),
        res(gcp.STORAGE_BUCKET, "source-bucket", bucket_props()),
        res(gcp.FIRESTORE_FIELD, "runs-expire-at", field_props()),
        res(gcp.FIRESTORE_FIELD, "runs-schedule-time", schedule_time_field_props()),
        res(gcp.FUNCTION_V2, "dedup-function", function_props()),
        res(
            RUN_SERVICE_IAM_MEMBER,
            "invoker-binding",
            {
                "project": PROJECT,
                "location": REGION,
                "name": "scheduler-dedup",
                "role": "roles/run.invoker",
                "member": f"serviceAccount:{INVOKER_SA}",
            },
        ),
        res(
            PROJECT_IAM_MEMBER,
            "runtime-datastore-user",
            {
                "project": PROJECT,
                "role": "roles/datastore.user",
                "member": f"serviceAccount:{RUNTIME_SA}",
                "condition": dict(DATASTORE_CONDITION),
            },
        ),
        res(
            PROJECT_IAM_MEMBER,
            "build-log-writer",
            {
                "project": PROJECT,
                "role": "roles/logging.logWriter",
                "member": f"serviceAccount:{BUILD_SA}",
            },
        ),
        res(gcp.SCHEDULER_JOB, "job-nightly-export", job_props()),
        res(
            NOTIFICATION_CHANNEL,
            "alerts-email-0",
            {"project": PROJECT, "type": "email", "labels": {"email_address": "oncall@x.io"},
             "name": CHANNEL_ID},
        ),
        res(ALERT_POLICY, "alert-watchdog-problem", alert_policy_props()),
    ]


def alert_policy_props(*channels: Any) -> dict[str, Any]:
    return {
        "project": PROJECT,
        "displayName": "Scheduler dedup: a scheduled run was missed",
        "combiner": "OR",
        "conditions": [{"displayName": "any problem", "conditionThreshold": {
            "filter": 'metric.type="logging.googleapis.com/user/dedup-watchdog-problems"',
            "comparison": "COMPARISON_GT", "thresholdValue": 0, "duration": "0s"}}],
        "notificationChannels": list(channels) if channels else [CHANNEL_ID],
    }


def database_props(protected: bool, name: str = DATABASE) -> dict[str, Any]:
    state = "DELETE_PROTECTION_ENABLED" if protected else "DELETE_PROTECTION_DISABLED"
    return {"project": PROJECT, "name": name, "locationId": "eur3",
            "type": "FIRESTORE_NATIVE", "deleteProtectionState": state}


def watchdog_function_props() -> dict[str, Any]:
    """The run watchdog: same source and store settings, own account, the jobs it watches."""
    props = function_props()
    props["name"] = "scheduler-dedup-watchdog"
    props["buildConfig"]["entryPoint"] = "watch_scheduled_runs"
    service = props["serviceConfig"]
    service["serviceAccountEmail"] = WATCHDOG_SA
    service["uri"] = WATCHDOG_URL
    env = service["environmentVariables"]
    del env["DEDUP_JOB"]
    env["DEDUP_WATCH_LOOKBACK_SECONDS"] = "172800"
    env["DEDUP_WATCH_GRACE_SECONDS"] = "300"
    return props


def watchdog_job_props() -> dict[str, Any]:
    props = job_props("dedup-watchdog")
    props["schedule"] = "*/10 * * * *"
    props["timeZone"] = "Etc/UTC"
    props["attemptDeadline"] = "180s"
    props["httpTarget"]["uri"] = WATCHDOG_URL
    props["httpTarget"]["oidcToken"]["audience"] = WATCHDOG_URL
    props["httpTarget"].pop("body", None)
    return props


def watchdog_stack() -> list[Resource]:
    """kit_stack plus the watchdog: its account, function, invoker binding, database role
    and its own Scheduler job."""
    return [
        *kit_stack(),
        res(SERVICE_ACCOUNT, "watchdog-sa", {"accountId": "dedup-watchdog", "project": PROJECT}),
        res(gcp.FUNCTION_V2, "watchdog-function", watchdog_function_props()),
        res(
            RUN_SERVICE_IAM_MEMBER,
            "watchdog-invoker",
            {
                "project": PROJECT,
                "location": REGION,
                "name": "scheduler-dedup-watchdog",
                "role": "roles/run.invoker",
                "member": f"serviceAccount:{INVOKER_SA}",
            },
        ),
        res(
            PROJECT_IAM_MEMBER,
            "watchdog-datastore-user",
            {
                "project": PROJECT,
                "role": "roles/datastore.user",
                "member": f"serviceAccount:{WATCHDOG_SA}",
                "condition": dict(DATASTORE_CONDITION),
            },
        ),
        res(gcp.SCHEDULER_JOB, "watchdog-job", watchdog_job_props()),
    ]


def proxy_stack() -> list[Resource]:
    """kit_stack plus the proxy: its account, its own records database (with the TTL
    field), function, invoker binding, database role (on its own database), one role per
    kind of target, and a job that calls it."""
    proxy_member = f"serviceAccount:{PROXY_SA}"
    return [
        *kit_stack(),
        proxy_child(SERVICE_ACCOUNT, "proxy-sa", {"accountId": "dedup-proxy", "project": PROJECT}),
        proxy_child(FIRESTORE_DATABASE, "proxy-database", database_props(False, PROXY_DATABASE)),
        proxy_child(gcp.FIRESTORE_FIELD, "proxy-ttl-field", field_props(PROXY_DATABASE)),
        proxy_child(
            gcp.FIRESTORE_FIELD,
            "proxy-schedule-time-field",
            schedule_time_field_props(PROXY_DATABASE),
        ),
        proxy_child(BUCKET_OBJECT, PROXY_SOURCE, proxy_source_props(PROXY_ROUTES)),
        proxy_child(gcp.FUNCTION_V2, "proxy-function", proxy_function_props()),
        proxy_child(
            RUN_SERVICE_IAM_MEMBER,
            "proxy-invoker",
            {
                "project": PROJECT,
                "location": REGION,
                "name": "scheduler-dedup-proxy",
                "role": "roles/run.invoker",
                "member": f"serviceAccount:{INVOKER_SA}",
            },
        ),
        proxy_child(
            PROJECT_IAM_MEMBER,
            "proxy-datastore-user",
            {
                "project": PROJECT,
                "role": "roles/datastore.user",
                "member": proxy_member,
                "condition": dict(PROXY_DATASTORE_CONDITION),
            },
        ),
        proxy_child(
            gcp.PROJECT_CUSTOM_ROLE,
            "proxy-workflow-starter-role",
            {
                "project": PROJECT,
                "roleId": "dedup_proxy_workflow_starter",
                "title": "start workflow executions",
                "permissions": ["workflows.executions.create"],
                "stage": "GA",
            },
        ),
        proxy_child(
            PROJECT_IAM_MEMBER,
            "proxy-workflow-starter",
            {"project": PROJECT, "role": WORKFLOW_ROLE, "member": proxy_member},
        ),
        proxy_child(
            RUN_JOB_IAM_MEMBER,
            "proxy-run-job",
            {
                "project": PROJECT,
                "location": REGION,
                "name": "reindex",
                "role": "roles/run.jobsExecutorWithOverrides",
                "member": proxy_member,
            },
        ),
        proxy_child(
            TOPIC_IAM_MEMBER,
            "proxy-build-publisher-release",
            {"project": PROJECT, "topic": "dedup-build-release", "role": "roles/pubsub.publisher",
             "member": proxy_member},
        ),
        proxy_child(
            SECRET_IAM_MEMBER,
            "proxy-token-secret-proxy",
            {"project": PROJECT, "secretId": TOKEN_SECRET,
             "role": "roles/secretmanager.secretAccessor", "member": proxy_member},
        ),
        res(gcp.SCHEDULER_JOB, "job-daily-report", proxied_job_props()),
    ]


def proxy_watchdog_stack() -> list[Resource]:
    """proxy_stack plus the watchdog (as watchdog_stack adds it), which also reads the
    proxy's records: roles/datastore.viewer conditioned to the proxy's database."""
    kit = {r.name for r in kit_stack()}
    return [
        *proxy_stack(),
        *[r for r in watchdog_stack() if r.name not in kit],
        res(
            PROJECT_IAM_MEMBER,
            "watchdog-proxy-datastore-viewer",
            {
                "project": PROJECT,
                "role": "roles/datastore.viewer",
                "member": f"serviceAccount:{WATCHDOG_SA}",
                "condition": dict(PROXY_DATASTORE_CONDITION),
            },
        ),
    ]


def as_preview(resources: Iterable[Resource]) -> list[Resource]:
    """Outputs of resources created in the same update are unknown at a first preview."""
    previewed = []
    for r in resources:
        props = r.props
        if r.type == gcp.SCHEDULER_JOB:
            props = patch(props, "httpTarget.uri", U)
            props = patch(props, "httpTarget.oidcToken.audience", U)
            props = patch(props, "httpTarget.oidcToken.serviceAccountEmail", U)
        elif r.type == gcp.FUNCTION_V2:
            props = patch(props, "serviceConfig.serviceAccountEmail", U)
            props = patch(props, "serviceConfig.uri", U)
            props = patch(props, "buildConfig.serviceAccount", U)
            props = patch(props, "buildConfig.source.storageSource.bucket", U)
            props = patch(props, "url", U)
            # The invoker account's e-mail.
            props = patch(props, "serviceConfig.environmentVariables.DEDUP_ALLOWED_CALLERS", U)
        elif r.type == gcp.FIRESTORE_FIELD:
            props = patch(props, "database", U)
        elif r.type == ALERT_POLICY:
            props = patch(props, "notificationChannels", [U])  # the channels' IDs
        elif r.type in (
            RUN_SERVICE_IAM_MEMBER, PROJECT_IAM_MEMBER, RUN_JOB_IAM_MEMBER, TOPIC_IAM_MEMBER,
            SECRET_IAM_MEMBER, BUCKET_IAM_MEMBER,
        ):
            props = patch(props, "member", U)
            if str(props.get("role", "")).startswith("projects/"):
                props = patch(props, "role", U)  # the custom role's name
        previewed.append(Resource(r.type, r.name, r.urn, props, r.parent, r.dependencies))
    return previewed


def preview_stack() -> list[Resource]:
    """kit_stack as a first preview sees it: outputs of new resources are unknown."""
    return as_preview(kit_stack())


def preview_proxy_stack() -> list[Resource]:
    return as_preview(proxy_stack())


def preview_watchdog_stack() -> list[Resource]:
    return as_preview(watchdog_stack())


def preview_proxy_watchdog_stack() -> list[Resource]:
    return as_preview(proxy_watchdog_stack())


def replace(
    resources: Iterable[Resource], resource_type: str, path: str, value: Any
) -> list[Resource]:
    """The stack with `path` set to `value` on every resource of `resource_type`."""
    return [
        Resource(r.type, r.name, r.urn, patch(r.props, path, value), r.parent, r.dependencies)
        if r.type == resource_type
        else r
        for r in resources
    ]


def replace_named(
    resources: Iterable[Resource], name: str, path: str, value: Any
) -> list[Resource]:
    """The stack with `path` set to `value` on the resource with that Pulumi name."""
    found = list(resources)
    assert any(r.name == name for r in found), name
    return [
        Resource(r.type, r.name, r.urn, patch(r.props, path, value), r.parent, r.dependencies)
        if r.name == name
        else r
        for r in found
    ]


def without_type(resources: Iterable[Resource], resource_type: str) -> list[Resource]:
    return [r for r in resources if r.type != resource_type]


def without_named(resources: Iterable[Resource], name: str) -> list[Resource]:
    return [r for r in resources if r.name != name]

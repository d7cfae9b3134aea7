"""Contract checks (infra/contracts): every rule with a declaration it accepts and one it
refuses (small fixtures, checkov style), the converter failing closed, Google's strict
parse, and every resource the fixture stacks declare passing."""

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping
from typing import Any

import pytest

from infra.contracts import (
    CHECKED_TYPES,
    UNCHECKED_TYPES,
    Finding,
    Rule,
    check_resource,
    check_resources,
)
from infra.contracts import function_limits as F
from infra.contracts import limits as L
from infra.contracts.convert import (
    CONTRACTS,
    PULUMI_SECRET_SIGNATURE,
    UNKNOWN_PROPERTY_RULE_TEXT,
    request_body,
)
from infra.contracts.findings import VALUE_SHOWN_CHARS, abbreviate
from operator_tools.offline import DeclaredResource
from tests.infra.helpers import StackUnderTest

FUNCTION = "gcp:cloudfunctionsv2/function:Function"
JOB = "gcp:cloudscheduler/job:Job"
ALERT = "gcp:monitoring/alertPolicy:AlertPolicy"
CHANNEL = "gcp:monitoring/notificationChannel:NotificationChannel"
METRIC = "gcp:logging/metric:Metric"
DATABASE = "gcp:firestore/database:Database"
FIELD = "gcp:firestore/field:Field"
SECRET = "gcp:secretmanager/secret:Secret"
SECRET_VERSION = "gcp:secretmanager/secretVersion:SecretVersion"
ACCOUNT = "gcp:serviceaccount/account:Account"
ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
QUEUE = "gcp:cloudtasks/queue:Queue"
QUEUE_IAM = "gcp:cloudtasks/queueIamMember:QueueIamMember"
PROJECT_IAM = "gcp:projects/iAMMember:IAMMember"
RUN_IAM = "gcp:cloudrunv2/serviceIamMember:ServiceIamMember"
REPOSITORY_IAM = "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember"
SECRET_IAM = "gcp:secretmanager/secretIamMember:SecretIamMember"
ACCOUNT_IAM = "gcp:serviceaccount/iAMMember:IAMMember"
BUCKET_IAM = "gcp:storage/bucketIAMMember:BucketIAMMember"
DATASET_IAM = "gcp:bigquery/datasetIamMember:DatasetIamMember"
TOPIC_IAM = "gcp:pubsub/topicIAMMember:TopicIAMMember"
BUCKET = "gcp:storage/bucket:Bucket"
OBJECT = "gcp:storage/bucketObject:BucketObject"

SA = "serviceAccount:runner@acme.iam.gserviceaccount.com"


def secret(value: Any) -> dict[str, Any]:
    """A secret input as the engine (and the mocks) show it."""
    return {PULUMI_SECRET_SIGNATURE: "1b47061264138c4ac30d75fd1eb44270", "value": value}


def threshold(duration: str, missing_data: bool = True, period: str = "300s") -> dict[str, Any]:
    condition: dict[str, Any] = {
        "filter": 'metric.type="logging.googleapis.com/user/x"',
        "comparison": "COMPARISON_GT", "thresholdValue": 0.0, "duration": duration,
        "aggregations": [{"alignmentPeriod": period, "perSeriesAligner": "ALIGN_SUM"}],
    }
    if missing_data:
        condition["evaluationMissingData"] = "EVALUATION_MISSING_DATA_INACTIVE"
    return {"conditions": [{"displayName": "c", "conditionThreshold": condition}]}


def absent(duration: str) -> dict[str, Any]:
    return {"conditions": [{"displayName": "c", "conditionAbsent": {
        "filter": 'metric.type="x"', "duration": duration, "trigger": {"count": 1.0},
        "aggregations": [{"alignmentPeriod": "300s", "perSeriesAligner": "ALIGN_SUM"}]}}]}


# One valid declaration per type, props as a policy pack sees them (camelCase, numbers as
# floats): what the fixture stacks declare, cut down.
VALID: dict[str, dict[str, Any]] = {
    FUNCTION: {
        "name": "scheduler-dedup", "project": "acme", "location": "europe-west1",
        "description": "d", "labels": {"kit": "scheduler-dedup"},
        "buildConfig": {"runtime": "python312", "entryPoint": "handle_scheduled_job",
                        "serviceAccount": "projects/acme/serviceAccounts/b@acme.example",
                        "source": {"storageSource": {"bucket": "b", "object": "s.zip"}}},
        "serviceConfig": {"timeoutSeconds": 1800.0, "availableMemory": "1Gi",
                          "availableCpu": "1", "ingressSettings": "ALLOW_INTERNAL_ONLY",
                          "minInstanceCount": 0.0, "maxInstanceCount": 3.0,
                          "maxInstanceRequestConcurrency": 8.0,
                          "allTrafficOnLatestRevision": True,
                          "serviceAccountEmail": "r@acme.iam.gserviceaccount.com",
                          "environmentVariables": {"DEDUP_JOB": "example_jobs.example:run"},
                          "secretEnvironmentVariables": [
                              {"key": "T", "projectId": "acme", "secret": "s",
                               "version": "latest"}],
                          "secretVolumes": [
                              {"mountPath": "/secrets/api", "projectId": "acme", "secret": "k",
                               "versions": [{"path": "key", "version": "3"}]}],
                          "vpcConnector": "projects/acme/locations/europe-west1/connectors/c1",
                          "vpcConnectorEgressSettings": "PRIVATE_RANGES_ONLY"},
    },
    JOB: {
        "name": "scheduler-dedup-nightly", "project": "acme", "region": "europe-west1",
        "paused": False, "description": "nightly", "schedule": "0 3 * * *",
        "timeZone": "Europe/Berlin", "attemptDeadline": "1800s",
        "retryConfig": {"retryCount": 5.0, "maxRetryDuration": "0s",
                        "minBackoffDuration": "30s", "maxBackoffDuration": "600s",
                        "maxDoublings": 4.0},
        "httpTarget": {"uri": "https://f-abc-ew.a.run.app", "httpMethod": "POST",
                       "body": base64.b64encode(b'{"a":1}').decode(),
                       "headers": {"Content-Type": "application/json"},
                       "oidcToken": {"serviceAccountEmail": "i@acme.iam.gserviceaccount.com",
                                     "audience": "https://f-abc-ew.a.run.app"}},
    },
    ALERT: {
        "project": "acme", "displayName": "a", "combiner": "OR", "severity": "ERROR",
        "notificationChannels": ["c-id"], "alertStrategy": {"autoClose": "1800s"},
        "documentation": {"content": "doc", "mimeType": "text/markdown"},
        **threshold("60s"),
    },
    CHANNEL: {"project": "acme", "type": "email", "displayName": "oncall",
              "labels": {"email_address": "oncall@acme.example"}},
    METRIC: {
        "project": "acme", "name": "scheduler-dedup-deliveries", "description": "d",
        "filter": 'resource.type="cloud_run_revision"',
        "metricDescriptor": {"metricKind": "DELTA", "valueType": "DISTRIBUTION", "unit": "ms",
                             "labels": [{"key": "job", "valueType": "STRING"}]},
        "labelExtractors": {"job": "EXTRACT(jsonPayload.job)"},
        "valueExtractor": "EXTRACT(jsonPayload.latency_ms)",
        "bucketOptions": {"exponentialBuckets": {"numFiniteBuckets": 40.0,
                                                 "growthFactor": 1.5, "scale": 10.0}},
    },
    DATABASE: {"project": "acme", "name": "scheduler-dedup", "locationId": "eur3",
               "type": "FIRESTORE_NATIVE", "deletionPolicy": "DELETE",
               "deleteProtectionState": "DELETE_PROTECTION_ENABLED",
               "pointInTimeRecoveryEnablement": "POINT_IN_TIME_RECOVERY_ENABLED",
               "appEngineIntegrationMode": "DISABLED"},
    FIELD: {"project": "acme", "database": "scheduler-dedup", "collection": "runs",
            "field": "expire_at", "indexConfig": {}, "ttlConfig": {}},
    SECRET: {"project": "acme", "secretId": "scheduler-dedup-token", "labels": {"k": "v"},
             "replication": {"auto": {}}},
    SECRET_VERSION: {"secret": "secret-id", "secretData": secret("s3cr3t")},
    ACCOUNT: {"project": "acme", "accountId": "scheduler-dedup", "displayName": "runtime",
              "description": "Runs the function."},
    ROLE: {"project": "acme", "roleId": "scheduler_dedup_starter", "title": "Starter",
           "description": "d", "stage": "GA", "permissions": ["workflows.executions.create"]},
    QUEUE: {
        "project": "acme", "location": "europe-west1", "name": "scheduler-dedup-deliveries",
        "rateLimits": {"maxDispatchesPerSecond": 5.0, "maxConcurrentDispatches": 10.0},
        "retryConfig": {"maxAttempts": 5.0, "maxRetryDuration": "3600s", "minBackoff": "10s",
                        "maxBackoff": "300s", "maxDoublings": 4.0},
        "stackdriverLoggingConfig": {"samplingRatio": 1.0},
        "httpTarget": {"httpMethod": "POST",
                       "headerOverrides": [{"header": {"key": "X-A", "value": "b"}}],
                       "uriOverride": {"scheme": "HTTPS", "host": "f-abc-ew.a.run.app",
                                       "pathOverride": {"path": "/"},
                                       "uriOverrideEnforceMode": "IF_NOT_EXISTS"},
                       "oidcToken": {"serviceAccountEmail": "w@acme.iam.gserviceaccount.com",
                                     "audience": "https://f-abc-ew.a.run.app"}},
    },
    QUEUE_IAM: {"project": "acme", "location": "europe-west1", "name": "q",
                "role": "roles/cloudtasks.enqueuer", "member": SA},
    PROJECT_IAM: {"project": "acme", "role": "roles/datastore.user", "member": SA,
                  "condition": {"title": "t", "description": "d",
                                "expression": 'resource.name == "projects/acme/databases/d"'}},
    REPOSITORY_IAM: {"project": "acme", "location": "europe-west1", "repository": "builds",
                     "role": "roles/artifactregistry.writer", "member": SA},
    SECRET_IAM: {"project": "acme", "secretId": "token", "member": SA,
                 "role": "roles/secretmanager.secretAccessor"},
    ACCOUNT_IAM: {"serviceAccountId": "projects/acme/serviceAccounts/w@acme.example",
                  "role": "roles/iam.serviceAccountUser", "member": SA},
    RUN_IAM: {"project": "acme", "location": "europe-west1", "role": "roles/run.invoker",
              "member": SA, "name": "projects/acme/locations/europe-west1/services/s"},
    BUCKET_IAM: {"bucket": "acme-exports", "role": "roles/storage.objectCreator", "member": SA},
    DATASET_IAM: {"project": "acme", "datasetId": "retail_exports", "member": SA,
                  "role": "roles/bigquery.dataEditor"},
    TOPIC_IAM: {"project": "acme", "topic": "orders", "role": "roles/pubsub.publisher",
                "member": SA},
    BUCKET: {"name": "acme-scheduler-dedup-source", "location": "europe-west1"},
    OBJECT: {"name": "function-source/abc.zip", "bucket": "b"},
}


# A job aimed at a team's App Engine service (infra/scheduled_job.py): no httpTarget.
APP_ENGINE_JOB: dict[str, Any] = {"httpTarget": None, "appEngineHttpTarget": {
    "relativeUri": "/x", "httpMethod": "POST", "appEngineRouting": {"service": "default"}}}


def declared(resource_type: str, **changes: Any) -> DeclaredResource:
    """VALID[resource_type] with `changes` (dotted paths; None removes the key)."""
    props = copy.deepcopy(VALID[resource_type])
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        target = props
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if value is None:
            del target[leaf]
        else:
            target[leaf] = value
    return DeclaredResource(type=resource_type, name="under-test", urn=f"urn:{resource_type}",
                            props=props)


def rules_of(findings: list[Finding]) -> list[Rule]:
    return [f.rule for f in findings]


@pytest.mark.parametrize("resource_type", sorted(VALID))
def test_every_valid_fixture_passes(resource_type: str) -> None:
    assert check_resource(declared(resource_type)) == []


def test_every_contract_and_limit_has_a_fixture() -> None:
    assert set(VALID) == set(CHECKED_TYPES)


# (resource type, changes accepted, changes refused, the rule, the property it names)
CASES: list[tuple[str, dict[str, Any], dict[str, Any], Rule, str]] = [
    (FUNCTION, {"name": "abcd"}, {"name": "Dedup_Function"}, F.R_FUNCTION_ID, "name"),
    (FUNCTION, {"name": "a" * 63}, {"name": "a" * 64}, F.R_FUNCTION_ID, "name"),
    (FUNCTION,
     {"serviceConfig__environmentVariables": {"A": "x" * (32 * 1024 - 2), "B": ""}},
     {"serviceConfig__environmentVariables": {"A": "x" * (32 * 1024 - 2), "BC": ""}},
     F.R_ENV_TOTAL, "serviceConfig.environmentVariables"),
    (FUNCTION,
     {"serviceConfig__environmentVariables": {"V": "x" * 32_767}},  # 32 KiB with its name
     {"serviceConfig__environmentVariables": {"V": "é" * 16_384 + "x"}},  # 32,769 bytes
     F.R_ENV_VALUE, "serviceConfig.environmentVariables.V"),
    (FUNCTION,  # with the fixture's 1 secret environment variable
     {"serviceConfig__environmentVariables": {f"V{i}": "" for i in range(999)}},
     {"serviceConfig__environmentVariables": {f"V{i}": "" for i in range(1000)}},
     F.R_ENV_COUNT, "serviceConfig.environmentVariables"),
    (FUNCTION, {"serviceConfig__environmentVariables": {"PORTS": "1"}},
     {"serviceConfig__environmentVariables": {"PORT": "8080"}},
     F.R_ENV_RESERVED, "serviceConfig.environmentVariables.PORT"),
    (FUNCTION, {"serviceConfig__environmentVariables": {"MY_GOOGLE_X": "1"}},
     {"serviceConfig__environmentVariables": {"X_GOOGLE_X": "1"}},
     F.R_ENV_NAME, "serviceConfig.environmentVariables.X_GOOGLE_X"),
    (FUNCTION, {"serviceConfig__environmentVariables": {"A_B": "1"}},
     {"serviceConfig__environmentVariables": {"A=B": "1"}},
     F.R_ENV_NAME, "serviceConfig.environmentVariables.A=B"),
    (JOB, {"name": "a-b_C9" * 83}, {"name": "nightly export"}, L.R_JOB_ID, "name"),
    (JOB, {"name": "a" * 500}, {"name": "a" * 501}, L.R_JOB_ID, "name"),
    (JOB, {"description": "d" * 500}, {"description": "d" * 501}, L.R_JOB_DESCRIPTION,
     "description"),
    (JOB, {"attemptDeadline": "15s"}, {"attemptDeadline": "14s"}, L.R_JOB_DEADLINE,
     "attemptDeadline"),
    (JOB, {"attemptDeadline": "1800s"}, {"attemptDeadline": "1801s"}, L.R_JOB_DEADLINE,
     "attemptDeadline"),
    (JOB, {**APP_ENGINE_JOB, "attemptDeadline": "86400s"}, {**APP_ENGINE_JOB, "attemptDeadline":
                                                            "86401s"},
     L.R_JOB_APP_ENGINE_DEADLINE, "attemptDeadline"),
    (JOB, {"retryConfig__retryCount": 0.0}, {"retryConfig__retryCount": 6.0},
     L.R_JOB_RETRY_COUNT, "retryConfig.retryCount"),
    (JOB, {"httpTarget__headers": {"X-Big": "v" * (80_000 - 6)}},  # 79,999 bytes in all
     {"httpTarget__headers": {"X-Big": "v" * (80_000 - 5)}}, L.R_JOB_HEADERS,
     "httpTarget.headers"),
    (JOB, {"httpTarget__body": base64.b64encode(b"x" * 1_000_000).decode()},
     {"httpTarget__body": base64.b64encode(b"x" * 1_000_001).decode()}, L.R_JOB_BODY,
     "httpTarget.body"),
    (JOB, {"httpTarget__httpMethod": "PUT"}, {"httpTarget__httpMethod": "GET"},
     L.R_JOB_BODY_METHOD, "httpTarget.httpMethod"),
    (ALERT, threshold("120s"), threshold("90s"), L.R_DURATION_STEP,
     "conditions[0].conditionThreshold.duration"),
    # The two alert policies' bug: evaluationMissingData with a 0 s duration.
    (ALERT, {"conditions": [{"displayName": "p", "conditionPrometheusQueryLanguage": {
        "query": "up == 0", "duration": "90s"}}]},
     {"conditions": [{"displayName": "m", "conditionMonitoringQueryLanguage": {
         "query": "fetch x", "duration": "90s"}}]}, L.R_DURATION_STEP,
     "conditions[0].conditionMonitoringQueryLanguage.duration"),
    (ALERT, threshold("60s"), threshold("0s"), L.R_MISSING_DATA,
     "conditions[0].conditionThreshold.duration"),
    (ALERT, threshold("0s", missing_data=False), threshold("0s"), L.R_MISSING_DATA,
     "conditions[0].conditionThreshold.duration"),
    (ALERT, absent("120s"), absent("60s"), L.R_ABSENT_DURATION,
     "conditions[0].conditionAbsent.duration"),
    (ALERT, threshold("60s", period="60s"), threshold("60s", period="30s"), L.R_ALIGNMENT,
     "conditions[0].conditionThreshold.aggregations[0].alignmentPeriod"),
    (ALERT, threshold("60s", period="90000s"), threshold("60s", period="90060s"),
     L.R_ALIGNMENT, "conditions[0].conditionThreshold.aggregations[0].alignmentPeriod"),
    (ALERT, {"displayName": "é" * 512}, {"displayName": "é" * 513}, L.R_ALERT_DISPLAY_NAME,
     "displayName"),
    (ALERT, {"documentation__content": "d" * 8192}, {"documentation__content": "d" * 8193},
     L.R_ALERT_DOCUMENTATION, "documentation.content"),
    (ALERT, {"documentation__content": "é" * 5120},  # 10,240 bytes
     {"documentation__content": "é" * 5120 + "x"}, L.R_ALERT_DOCUMENTATION,
     "documentation.content"),
    (FUNCTION, {"labels": {"managed-by": "pulumi", "kit": "scheduler-dedup"}},
     {"labels": {"managed-by": "Pulumi"}}, L.R_LABELS, "labels.managed-by"),
    (FUNCTION, {"labels": {"k" * 63: "v" * 63}}, {"labels": {"k" * 64: "v"}}, L.R_LABELS,
     "labels." + "k" * 64),
    (SECRET, {"labels": {"é_1": "ü-2", "team": ""}}, {"labels": {"1team": "x"}}, L.R_LABELS,
     "labels.1team"),
    (BUCKET, {"labels": {f"k{i}": "v" for i in range(64)}},
     {"labels": {f"k{i}": "v" for i in range(65)}}, L.R_LABELS, "labels"),
    (CHANNEL, {"userLabels": {"team": "ops"}}, {"userLabels": {"team": "ops.eu"}}, L.R_LABELS,
     "userLabels.team"),
    (METRIC, {"name": "a/b" + "c" * 97}, {"name": "a/b" + "c" * 98}, L.R_LOG_METRIC_NAME,
     "name"),
    (METRIC, {"name": "nginx/requests"}, {"name": "/requests"}, L.R_LOG_METRIC_NAME, "name"),
    (METRIC, {"name": "errors(5xx)"}, {"name": "errors[5xx]"}, L.R_LOG_METRIC_NAME, "name"),
    (METRIC, {"description": "d" * 8000}, {"description": "d" * 8001},
     L.R_LOG_METRIC_DESCRIPTION, "description"),
    (METRIC, {"filter": "f" * 20_000}, {"filter": "f" * 20_001}, L.R_LOG_METRIC_FILTER,
     "filter"),
    (DATABASE, {"name": "abcd"}, {"name": "abc"}, L.R_DATABASE_ID, "name"),
    (DATABASE, {"name": "a" * 63}, {"name": "a" * 64}, L.R_DATABASE_ID, "name"),
    (DATABASE, {"name": "(default)"}, {"name": "1abc"}, L.R_DATABASE_ID, "name"),
    (DATABASE, {"name": "a-b-9"}, {"name": "abcd-"}, L.R_DATABASE_ID, "name"),
    (DATABASE, {"name": "z2345678-1234-1234-1234-123456789012"},
     {"name": "a2345678-1234-1234-1234-1234567890ab"}, L.R_DATABASE_ID, "name"),
    (SECRET, {"secretId": "A_b-9" * 51}, {"secretId": "token.secret"}, L.R_SECRET_ID,
     "secretId"),
    (SECRET, {"secretId": "s" * 255}, {"secretId": "s" * 256}, L.R_SECRET_ID, "secretId"),
    (SECRET_VERSION, {"secretData": secret("x" * 65_536)},
     {"secretData": secret("x" * 65_537)}, L.R_SECRET_PAYLOAD, "secretData"),
    (SECRET_VERSION,
     {"secretData": base64.b64encode(b"x" * 65_536).decode(), "isSecretDataBase64": True},
     {"secretData": base64.b64encode(b"x" * 65_537).decode(), "isSecretDataBase64": True},
     L.R_SECRET_PAYLOAD, "secretData"),
    (QUEUE, {"name": "Q-1" * 33}, {"name": "scheduler_dedup"}, L.R_QUEUE_ID, "name"),
    (QUEUE, {"name": "q" * 100}, {"name": "q" * 101}, L.R_QUEUE_ID, "name"),
    (QUEUE, {"rateLimits__maxDispatchesPerSecond": 500.0},
     {"rateLimits__maxDispatchesPerSecond": 500.5}, L.R_QUEUE_RATE,
     "rateLimits.maxDispatchesPerSecond"),
    (QUEUE, {"rateLimits__maxConcurrentDispatches": 5000.0},
     {"rateLimits__maxConcurrentDispatches": 5001.0}, L.R_QUEUE_CONCURRENCY,
     "rateLimits.maxConcurrentDispatches"),
    (QUEUE, {"retryConfig__maxAttempts": -1.0}, {"retryConfig__maxAttempts": -2.0},
     L.R_QUEUE_ATTEMPTS, "retryConfig.maxAttempts"),
    (QUEUE, {"stackdriverLoggingConfig__samplingRatio": 0.0},
     {"stackdriverLoggingConfig__samplingRatio": 1.01}, L.R_QUEUE_SAMPLING,
     "stackdriverLoggingConfig.samplingRatio"),
    (ACCOUNT, {"accountId": "abcdef"}, {"accountId": "abcde"}, L.R_ACCOUNT_ID, "accountId"),
    (ACCOUNT, {"accountId": "a" * 30}, {"accountId": "a" * 31}, L.R_ACCOUNT_ID, "accountId"),
    (ACCOUNT, {"accountId": "a-b-c-9"}, {"accountId": "a-b-c-"}, L.R_ACCOUNT_ID, "accountId"),
    (ACCOUNT, {"accountId": "abc123"}, {"accountId": "1abcde"}, L.R_ACCOUNT_ID, "accountId"),
    (ACCOUNT, {"displayName": "é" * 50}, {"displayName": "é" * 50 + "x"},  # UTF-8 bytes
     L.R_ACCOUNT_DISPLAY_NAME, "displayName"),
    (ACCOUNT, {"description": "d" * 256}, {"description": "d" * 257},
     L.R_ACCOUNT_DESCRIPTION, "description"),
    (ROLE, {"roleId": "a.b"}, {"roleId": "ab"}, L.R_ROLE_ID, "roleId"),
    (ROLE, {"roleId": "r" * 64}, {"roleId": "scheduler-dedup-starter"}, L.R_ROLE_ID, "roleId"),
    (ROLE, {"title": "t" * 100}, {"title": "t" * 101}, L.R_ROLE_TITLE, "title"),
    (PROJECT_IAM, {"role": "projects/acme/roles/starter"}, {"role": "run.invoker"},
     L.R_IAM_ROLE, "role"),
    (RUN_IAM, {"role": "organizations/123/roles/starter"}, {"role": "organizations/x/roles/r"},
     L.R_IAM_ROLE, "role"),
    (QUEUE_IAM, {"member": "group:ops@acme.example"}, {"member": "ops@acme.example"},
     L.R_IAM_MEMBER, "member"),
    (QUEUE_IAM, {"member": "domain:acme.example"}, {"member": "serviceaccount:a@b.c"},
     L.R_IAM_MEMBER, "member"),
    (PROJECT_IAM, {"member": "principalSet://iam.googleapis.com/locations/global/"
                             "workforcePools/p/group/g"},
     {"member": "user:"}, L.R_IAM_MEMBER, "member"),
    (PROJECT_IAM, {"member": "deleted:user:a@acme.example?uid=123"},
     {"member": "deleted:user:a@acme.example"}, L.R_IAM_MEMBER, "member"),
    (BUCKET, {"name": "a" * 63}, {"name": "a" * 64}, L.R_BUCKET_NAME, "name"),
    (BUCKET, {"name": ".".join(["a" * 63] * 3) + "." + "b" * 30},  # 222 characters
     {"name": ".".join(["a" * 63] * 3) + "." + "b" * 31}, L.R_BUCKET_NAME, "name"),
    (BUCKET, {"name": "my_bucket-1"}, {"name": "My-bucket"}, L.R_BUCKET_NAME, "name"),
    (BUCKET, {"name": "abc"}, {"name": "ab"}, L.R_BUCKET_NAME, "name"),
    (BUCKET, {"name": "bucket-9"}, {"name": "bucket-"}, L.R_BUCKET_NAME, "name"),
    (BUCKET, {"name": "acme-goog"}, {"name": "goog-acme"}, L.R_BUCKET_NAME, "name"),
    (BUCKET, {"name": "acme-gogle"}, {"name": "acme-google-source"}, L.R_BUCKET_NAME, "name"),
    (BUCKET, {"name": "192.168.5"}, {"name": "192.168.5.4"}, L.R_BUCKET_NAME, "name"),
    (OBJECT, {"name": "é" * 512}, {"name": "é" * 512 + "x"}, L.R_OBJECT_NAME, "name"),
    (OBJECT, {"name": "a.b"}, {"name": ".."}, L.R_OBJECT_NAME, "name"),
    (OBJECT, {"name": "a b"}, {"name": "a\nb"}, L.R_OBJECT_NAME, "name"),
    # What a runtime declares: its function's secrets and VPC egress, its grants' targets.
    (FUNCTION, {"serviceConfig__secretEnvironmentVariables__0__key": "PORTS"},
     {"serviceConfig__secretEnvironmentVariables__0__key": "PORT"}, F.R_ENV_RESERVED,
     "serviceConfig.secretEnvironmentVariables[0].key"),
    (FUNCTION, {"serviceConfig__secretEnvironmentVariables__0__secret": "api-token_2"},
     {"serviceConfig__secretEnvironmentVariables__0__secret": "projects/acme/secrets/t"},
     F.R_SECRET_NAME, "serviceConfig.secretEnvironmentVariables[0].secret"),
    (FUNCTION, {"serviceConfig__secretEnvironmentVariables__0__version": "12"},
     {"serviceConfig__secretEnvironmentVariables__0__version": "v12"}, F.R_SECRET_VERSION,
     "serviceConfig.secretEnvironmentVariables[0].version"),
    (FUNCTION, {"serviceConfig__secretVolumes__0__versions__0__version": "latest"},
     {"serviceConfig__secretVolumes__0__versions__0__version": "0"}, F.R_SECRET_VERSION,
     "serviceConfig.secretVolumes[0].versions[0].version"),
    (FUNCTION, {"serviceConfig__secretVolumes__0__versions__0__path": "api/key"},
     {"serviceConfig__secretVolumes__0__versions__0__path": "/secrets/api/key"},
     F.R_SECRET_FILE_PATH, "serviceConfig.secretVolumes[0].versions[0].path"),
    (FUNCTION, {"serviceConfig__secretVolumes__0__versions__0__path": "a..b"},
     {"serviceConfig__secretVolumes__0__versions__0__path": "../key"},
     F.R_SECRET_FILE_PATH, "serviceConfig.secretVolumes[0].versions[0].path"),
    (FUNCTION, {"serviceConfig__secretVolumes": [
        {"mountPath": "/secrets/a", "secret": "a"}, {"mountPath": "/secrets/b", "secret": "b"}]},
     {"serviceConfig__secretVolumes": [
         {"mountPath": "/secrets/a", "secret": "a"}, {"mountPath": "/secrets/a/", "secret": "b"}]},
     F.R_SECRET_MOUNT_PATH, "serviceConfig.secretVolumes[1].mountPath"),
    (FUNCTION, {"serviceConfig__vpcConnector": "projects/p/locations/r/connectors/a" + "b" * 24},
     {"serviceConfig__vpcConnector": "projects/p/locations/r/connectors/a" + "b" * 25},
     F.R_CONNECTOR_ID, "serviceConfig.vpcConnector"),
    (FUNCTION, {"serviceConfig__vpcConnector": "projects/p/locations/r/connectors/c-9"},
     {"serviceConfig__vpcConnector": "projects/p/locations/r/connectors/-c9"},
     F.R_CONNECTOR_ID, "serviceConfig.vpcConnector"),
    (FUNCTION, {"serviceConfig__vpcConnector": "projects/p/locations/r/connectors/c-9"},
     {"serviceConfig__vpcConnector": "internal"}, F.R_CONNECTOR_NAME,
     "serviceConfig.vpcConnector"),
    (FUNCTION, {"serviceConfig__vpcConnector": None},
     {"serviceConfig__directVpcNetworkInterfaces": [{"network": "n"}]},
     F.R_DIRECT_VPC_WITH_CONNECTOR, "serviceConfig.directVpcNetworkInterfaces"),
    (FUNCTION, {"serviceConfig__vpcConnector": None,
                "serviceConfig__directVpcNetworkInterfaces": [{"subnetwork": "s"}]},
     {"serviceConfig__vpcConnector": None,
      "serviceConfig__directVpcNetworkInterfaces": [{"network": "n"}, {"network": "m"}]},
     F.R_DIRECT_VPC_INTERFACES, "serviceConfig.directVpcNetworkInterfaces"),
    (FUNCTION, {"serviceConfig__vpcConnector": None,
                "serviceConfig__directVpcNetworkInterfaces": [{"network": "n", "tags": ["t"]}]},
     {"serviceConfig__vpcConnector": None,
      "serviceConfig__directVpcNetworkInterfaces": [{"tags": ["t"]}]},
     F.R_DIRECT_VPC_INTERFACES, "serviceConfig.directVpcNetworkInterfaces"),
    (BUCKET_IAM, {"bucket": "acme_exports.eu"}, {"bucket": "Acme-exports"}, L.R_BUCKET_NAME,
     "bucket"),
    (DATASET_IAM, {"datasetId": "D" * 1024}, {"datasetId": "retail-exports"}, L.R_DATASET_ID,
     "datasetId"),
    (TOPIC_IAM, {"topic": "o.r~d+e%r-s_" + "x" * 243}, {"topic": "x" * 256}, L.R_TOPIC_ID,
     "topic"),
    (TOPIC_IAM, {"topic": "go-orders"}, {"topic": "goog-orders"}, L.R_TOPIC_ID, "topic"),
    (TOPIC_IAM, {"topic": "abc"}, {"topic": "1abc"}, L.R_TOPIC_ID, "topic"),
    (SECRET_IAM, {"secretId": "inventory-api-token"}, {"secretId": "projects/a/secrets/t"},
     L.R_SECRET_ID, "secretId"),
]


@pytest.mark.parametrize(
    ("resource_type", "accepted", "refused", "rule", "prop"),
    CASES,
    ids=[f"{case[0].rsplit(':', 1)[-1]}-{case[4]}-{index}" for index, case in enumerate(CASES)],
)
def test_contract_rule(
    resource_type: str, accepted: dict[str, Any], refused: dict[str, Any], rule: Rule,
    prop: str,
) -> None:
    assert check_resource(declared(resource_type, **accepted)) == []
    findings = check_resource(declared(resource_type, **refused))
    assert [(f.rule, f.property) for f in findings if f.rule == rule] == [(rule, prop)]
    assert all(f.resource_type == resource_type and f.resource_name == "under-test"
               for f in findings)


def test_every_limit_rule_has_a_case() -> None:
    """Each resource's rule here; the limits across a stack's resources (STACK_LIMITS) in
    tests/infra/test_contracts_runtimes.py."""
    declared_rules = {value for module in (L, F) for name, value in vars(module).items()
                      if name.startswith("R_") and isinstance(value, Rule)}
    assert declared_rules - {L.R_DATABASE_COUNT} == {case[3] for case in CASES}


# --- the converter and Google's strict parse --------------------------------------------


@pytest.mark.parametrize("resource_type", sorted(CONTRACTS))
def test_a_property_the_converter_does_not_know_is_a_finding(resource_type: str) -> None:
    """Fails closed: a new pulumi-gcp property is reported, never silently dropped."""
    findings = check_resource(declared(resource_type, newProviderSetting=True))
    assert [(f.property, f.value, f.rule.text) for f in findings] == [
        ("newProviderSetting", True, UNKNOWN_PROPERTY_RULE_TEXT)
    ]
    assert findings[0].rule.source == CONTRACTS[resource_type].source


@pytest.mark.parametrize(
    ("resource_type", "changes", "prop", "google_type"),
    [
        # A nested name the API does not have (Terraform's, or a typo).
        (JOB, {"retryConfig__retryAttempts": 3.0}, "retryConfig.retryAttempts",
         "google.cloud.scheduler_v1.types.Job"),
        (JOB, {"retryConfig__maxRetryDuration": "1e+06s"}, "retryConfig.maxRetryDuration",
         "google.cloud.scheduler_v1.types.Job"),
        (JOB, {"httpTarget__httpMethod": "FETCH", "httpTarget__body": None},
         "httpTarget.httpMethod",
         "google.cloud.scheduler_v1.types.Job"),
        (FUNCTION, {"serviceConfig__ingressSettings": "INTERNAL_ONLY"},
         "serviceConfig.ingressSettings", "google.cloud.functions_v2.types.Function"),
        (FUNCTION, {"serviceConfig__timeoutSeconds": 1800.5}, "serviceConfig.timeoutSeconds",
         "google.cloud.functions_v2.types.Function"),
        (FUNCTION, {"serviceConfig__memory": "1Gi"}, "serviceConfig.memory",
         "google.cloud.functions_v2.types.Function"),
        (FUNCTION, {"serviceConfig__vpcConnectorEgressSettings": "PRIVATE_RANGES"},
         "serviceConfig.vpcConnectorEgressSettings", "google.cloud.functions_v2.types.Function"),
        (FUNCTION, {"serviceConfig__secretEnvironmentVariables__0__projectID": "acme"},
         "serviceConfig.secretEnvironmentVariables[0].projectID",
         "google.cloud.functions_v2.types.Function"),
        (FUNCTION, {"serviceConfig__secretVolumes__0__versions__0__file": "key"},
         "serviceConfig.secretVolumes[0].versions[0].file",
         "google.cloud.functions_v2.types.Function"),
        (BUCKET_IAM, {"condition": {"title": "t", "expresion": "true"}}, "condition.expresion",
         "google.iam.v1.policy_pb2.Binding"),
        (ALERT, {"conditions__0__conditionThreshold__duration": "1 minute"},
         "conditions[0].conditionThreshold.duration",
         "google.cloud.monitoring_v3.types.AlertPolicy"),
        (METRIC, {"metricDescriptor__valueType": "INTEGER"}, "metricDescriptor.valueType",
         "google.cloud.logging_v2.types.LogMetric"),
        (DATABASE, {"type": "NATIVE"}, "type", "google.cloud.firestore_admin_v1.types.Database"),
        (FIELD, {"indexConfig": {"indexes": [{"queryScope": "COLLECTION", "mode": "ASC"}]}},
         "indexConfig.indexes[0].fields[0].mode",
         "google.cloud.firestore_admin_v1.types.Field"),
        (FIELD, {"ttlConfig": {"expirationOffset": "60s"}}, "ttlConfig.expirationOffset",
         "google.cloud.firestore_admin_v1.types.Field"),
        (SECRET, {"replication": {"automatic": {}, "autoo": {}}}, "replication.autoo",
         "google.cloud.secretmanager_v1.types.Secret"),
        (QUEUE, {"retryConfig__minBackoffDuration": "1s"}, "retryConfig.minBackoffDuration",
         "google.cloud.tasks_v2.types.Queue"),
        (QUEUE, {"httpTarget__oidcToken__email": "w@acme"}, "httpTarget.oidcToken.email",
         "google.cloud.tasks_v2beta3.types.HttpTarget"),
        (PROJECT_IAM, {"condition__expr": "true"}, "condition.expr",
         "google.iam.v1.policy_pb2.Binding"),
        (CHANNEL, {"sensitiveLabels": {"authTokenWo": "t"}}, "sensitiveLabels",
         "google.cloud.monitoring_v3.types.NotificationChannel"),
        (CHANNEL, {"labels": {"email_address": 5}}, "labels",
         "google.cloud.monitoring_v3.types.NotificationChannel"),
    ],
)
def test_googles_type_refuses_what_the_api_would(
    resource_type: str, changes: dict[str, Any], prop: str, google_type: str
) -> None:
    findings = check_resource(declared(resource_type, **changes))
    assert len(findings) == 1, findings
    assert findings[0].property == prop
    assert findings[0].rule.text.startswith(f"{google_type} refuses it: ")
    assert findings[0].rule.source == CONTRACTS[resource_type].source


def test_the_converter_maps_terraform_names_to_the_apis() -> None:
    assert request_body(CONTRACTS[SECRET], VALID[SECRET])["replication"] == {"automatic": {}}
    field = request_body(CONTRACTS[FIELD], {
        **VALID[FIELD], "indexConfig": {"indexes": [{"queryScope": "COLLECTION",
                                                     "order": "ASCENDING"}]}})
    assert field["indexConfig"]["indexes"] == [
        {"queryScope": "COLLECTION", "fields": [{"fieldPath": "expire_at",
                                                 "order": "ASCENDING"}]}]
    assert field["name"] == "projects/acme/databases/scheduler-dedup/collectionGroups/runs/" \
        "fields/expire_at"
    job = request_body(CONTRACTS[JOB], VALID[JOB])
    assert job["name"] == "projects/acme/locations/europe-west1/jobs/scheduler-dedup-nightly"
    assert not {"project", "region", "paused"} & set(job)
    role = request_body(CONTRACTS[ROLE], VALID[ROLE])
    assert role["role"]["includedPermissions"] == ["workflows.executions.create"]
    channel = request_body(CONTRACTS[CHANNEL], {
        **VALID[CHANNEL], "type": "slack", "sensitiveLabels": {"authToken": secret("t")}})
    assert channel["labels"] == {"email_address": "oncall@acme.example", "auth_token": "t"}


def test_a_secret_unknown_until_deployed_is_not_judged() -> None:
    assert check_resource(declared(SECRET_VERSION, secretData=secret(None))) == []


def test_a_finding_names_resource_property_value_rule_and_source() -> None:
    (finding,) = check_resource(declared(JOB, attemptDeadline="7200s"))
    text = finding.message()
    assert text.startswith("gcp:cloudscheduler/job:Job 'under-test': attemptDeadline = '7200s': ")
    assert L.R_JOB_DEADLINE.text in text
    assert "https://cloud.google.com/scheduler/docs/reference/rest/v1/projects.locations.jobs" \
        in text


def test_long_values_are_abbreviated() -> None:
    assert abbreviate("x" * 10) == repr("x" * 10)
    shown = abbreviate("x" * 5000)
    assert shown.startswith(repr("x" * 5000)[:VALUE_SHOWN_CHARS])
    assert shown.endswith("... (5002 characters)")
    assert len(shown) < 120


# --- what the program declares ------------------------------------------------------------


def test_every_declared_resource_of_the_fixture_stacks_passes(stack: StackUnderTest) -> None:
    checked = [r for r in stack.run.resources if r.type in CHECKED_TYPES]
    assert len(checked) > 30
    assert check_resources(stack.run.resources) == []


def custom_types(stack: StackUnderTest) -> set[str]:
    return {r.type for r in stack.run.resources if r.custom}


def test_every_declared_type_is_checked_or_listed_as_unchecked(stack: StackUnderTest) -> None:
    """A resource type the program starts to declare needs a contract or a reason here."""
    assert not CHECKED_TYPES & set(UNCHECKED_TYPES)
    assert custom_types(stack) - CHECKED_TYPES - set(UNCHECKED_TYPES) == set()


def test_the_unchecked_list_names_only_declared_types(
    stack_runs: Mapping[str, StackUnderTest],
) -> None:
    declared_types = set().union(*(custom_types(run) for run in stack_runs.values()))
    assert set(UNCHECKED_TYPES) <= declared_types


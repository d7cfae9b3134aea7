"""Google's documentation behind every contract rule, each page declared once.

Field-level rules are quoted from the API references (the same text is in the field
docstrings of Google's Python client types installed in the dev venv, e.g.
`google.cloud.scheduler_v1.types.HttpTarget.headers`); limits and quotas from the
products' quota and configuration pages.
"""

from __future__ import annotations

from typing import Final

from infra.contracts.findings import Source

SCHEDULER_JOBS_API: Final = Source(
    "Cloud Scheduler API, REST resource projects.locations.jobs (Job, HttpTarget, "
    "RetryConfig)",
    "https://cloud.google.com/scheduler/docs/reference/rest/v1/projects.locations.jobs",
)
SCHEDULER_QUOTAS: Final = Source(
    "Cloud Scheduler, Quotas and limits", "https://cloud.google.com/scheduler/quotas"
)
MONITORING_ALERT_POLICIES_API: Final = Source(
    "Cloud Monitoring API, REST resource projects.alertPolicies (MetricThreshold.duration, "
    "evaluationMissingData)",
    "https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.alertPolicies",
)
MONITORING_NOTIFICATION_CHANNELS_API: Final = Source(
    "Cloud Monitoring API, REST resource projects.notificationChannels",
    "https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.notificationChannels",
)
LOGGING_METRICS_API: Final = Source(
    "Cloud Logging API, REST resource projects.metrics (LogMetric)",
    "https://cloud.google.com/logging/docs/reference/v2/rest/v2/projects.metrics",
)
FUNCTIONS_API: Final = Source(
    "Cloud Functions API v2, method projects.locations.functions.create (functionId)",
    "https://cloud.google.com/functions/docs/reference/rest/v2/projects.locations.functions/create",
)
FUNCTIONS_SERVICE_CONFIG_API: Final = Source(
    "Cloud Functions API v2, REST resource projects.locations.functions (ServiceConfig: "
    "SecretEnvVar, SecretVolume, vpcConnector, DirectVpcNetworkInterface)",
    "https://cloud.google.com/functions/docs/reference/rest/v2/projects.locations.functions",
)
FUNCTIONS_DIRECT_VPC: Final = Source(
    "Cloud Run functions, Configure Direct VPC egress for 2nd gen functions (limitations)",
    "https://cloud.google.com/functions/docs/running/direct-vpc",
)
VPC_ACCESS_CONNECTORS_API: Final = Source(
    "Serverless VPC Access API, method projects.locations.connectors.create (connectorId: its "
    "400 answer \"Connector ID must follow the pattern ^[a-z][-a-z0-9]{0,23}[a-z0-9]$\", as "
    "quoted in the Terraform configurations it refused)",
    "https://cloud.google.com/vpc/docs/reference/vpcaccess/rest/v1/projects.locations.connectors/"
    "create",
)
FUNCTIONS_ENV_VARS: Final = Source(
    "Cloud Run functions, Configure environment variables (size limits)",
    "https://cloud.google.com/functions/docs/configuring/env-var",
)
RUN_ENV_VARS: Final = Source(
    "Cloud Run, Environment variables for services (maximum number, reserved names)",
    "https://cloud.google.com/run/docs/configuring/services/overview-environment-variables",
)
RUN_ENV_VAR_API: Final = Source(
    "Cloud Run Admin API v2, EnvVar (value: maximum length 32768)",
    "https://cloud.google.com/run/docs/reference/rest/v2/Container#EnvVar",
)
FIRESTORE_DATABASES_API: Final = Source(
    "Cloud Firestore API, method projects.databases.create (databaseId)",
    "https://cloud.google.com/firestore/docs/reference/rest/v1/projects.databases/create",
)
FIRESTORE_QUOTAS: Final = Source(
    "Firestore, Quotas and limits (maximum number of databases per project: 100)",
    "https://cloud.google.com/firestore/quotas",
)
FIRESTORE_FIELDS_API: Final = Source(
    "Cloud Firestore API, REST resource projects.databases.collectionGroups.fields",
    "https://cloud.google.com/firestore/docs/reference/rest/v1/"
    "projects.databases.collectionGroups.fields",
)
SECRETS_API: Final = Source(
    "Secret Manager API, method projects.secrets.create (secretId)",
    "https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets/create",
)
SECRET_PAYLOAD_API: Final = Source(
    "Secret Manager API, SecretPayload (data: no larger than 64KiB)",
    "https://cloud.google.com/secret-manager/docs/reference/rest/v1/SecretPayload",
)
TASKS_QUEUES_API: Final = Source(
    "Cloud Tasks API, REST resource projects.locations.queues (Queue, RateLimits, "
    "RetryConfig, StackdriverLoggingConfig)",
    "https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues",
)
IAM_SERVICE_ACCOUNTS_API: Final = Source(
    "IAM API, method projects.serviceAccounts.create (accountId) and resource "
    "ServiceAccount",
    "https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts/create",
)
IAM_ROLES_API: Final = Source(
    "IAM API, method projects.roles.create (roleId) and resource Role",
    "https://cloud.google.com/iam/docs/reference/rest/v1/projects.roles/create",
)
IAM_POLICY_BINDING: Final = Source(
    "IAM API, Policy: Binding (role, members, condition)",
    "https://cloud.google.com/iam/docs/reference/rest/v1/Policy#Binding",
)
IAM_PRINCIPAL_IDENTIFIERS: Final = Source(
    "IAM, Principal identifiers", "https://cloud.google.com/iam/docs/principal-identifiers"
)
LABELS: Final = Source(
    "Resource Manager, Labels overview: requirements for labels (the same rules are in "
    "each API's labels field, e.g. Secret Manager's Secret.labels)",
    "https://cloud.google.com/resource-manager/docs/labels-overview#requirements",
)
STORAGE_BUCKET_NAMES: Final = Source(
    "Cloud Storage, Bucket naming", "https://cloud.google.com/storage/docs/buckets#naming"
)
STORAGE_OBJECT_NAMES: Final = Source(
    "Cloud Storage, Object naming", "https://cloud.google.com/storage/docs/objects#naming"
)
BIGQUERY_DATASETS_API: Final = Source(
    "BigQuery API, DatasetReference (datasetId)",
    "https://cloud.google.com/bigquery/docs/reference/rest/v2/datasets#DatasetReference",
)
PUBSUB_TOPICS_API: Final = Source(
    "Pub/Sub API, REST resource projects.topics (Topic.name)",
    "https://cloud.google.com/pubsub/docs/reference/rest/v1/projects.topics",
)

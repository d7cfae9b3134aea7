"""Google Cloud facts the policies share: resource type tokens, default accounts, durations."""

from __future__ import annotations

import re
from typing import Final

# Facts the stack config shares with the pack, declared once in infra/shared_facts.py
# (standard library only, so this process may load it) and re-exported here under the
# names the policies use.
from infra.shared_facts import TEAM_SERVICE_COMPONENT_TYPE, account_email
from infra.shared_facts import is_default_runtime_account as is_default_runtime_account

SCHEDULER_JOB: Final = "gcp:cloudscheduler/job:Job"
FUNCTION_V2: Final = "gcp:cloudfunctionsv2/function:Function"
FUNCTION_V1: Final = "gcp:cloudfunctions/function:Function"
WORKFLOWS_WORKFLOW: Final = "gcp:workflows/workflow:Workflow"
CLOUD_RUN_V2_SERVICE: Final = "gcp:cloudrunv2/service:Service"
CLOUD_RUN_V1_SERVICE: Final = "gcp:cloudrun/service:Service"
CLOUD_RUN_V2_JOB: Final = "gcp:cloudrunv2/job:Job"
PROJECT_CUSTOM_ROLE: Final = "gcp:projects/iAMCustomRole:IAMCustomRole"
ORGANIZATION_CUSTOM_ROLE: Final = "gcp:organizations/iAMCustomRole:IAMCustomRole"
CLOUD_BUILD_TRIGGER: Final = "gcp:cloudbuild/trigger:Trigger"
SERVICE_ACCOUNT: Final = "gcp:serviceaccount/account:Account"
# IAM resources of one Pub/Sub topic: TopicIAMMember / TopicIAMBinding / TopicIAMPolicy.
PUBSUB_TOPIC_IAM_PREFIX: Final = "gcp:pubsub/topicIAM"
# The kit's idempotent proxy component (infra/dedup_proxy.py): the type in its children's
# URNs, which links them to the proxy before any output (its account's e-mail) is known.
PROXY_COMPONENT: Final = "scheduler-dedup:index:DedupProxy"
TEAM_SERVICE_COMPONENT: Final = TEAM_SERVICE_COMPONENT_TYPE
"""A team's own service (infra/team_service.py): its records database and the one grant
that lets the service's account write it."""
# IAM resources of one Cloud Run (v2) job: JobIamMember / JobIamBinding / JobIamPolicy.
CLOUD_RUN_V2_JOB_IAM_PREFIX: Final = "gcp:cloudrunv2/jobIam"
# IAM resources of one Secret Manager secret: SecretIamMember / SecretIamBinding / ...
SECRET_IAM_PREFIX: Final = "gcp:secretmanager/secretIam"
FIRESTORE_FIELD: Final = "gcp:firestore/field:Field"
STORAGE_BUCKET: Final = "gcp:storage/bucket:Bucket"
TASKS_QUEUE: Final = "gcp:cloudtasks/queue:Queue"

# The ingress settings that keep a function (both generations) or a Cloud Run (v2) service
# internal: an allow-list (policies/function.py, policies/ingress.py).
FUNCTION_INTERNAL_INGRESS: Final = ("ALLOW_INTERNAL_ONLY", "ALLOW_INTERNAL_AND_GCLB")
RUN_V2_INTERNAL_INGRESS: Final = (
    "INGRESS_TRAFFIC_INTERNAL_ONLY", "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER")

# Modules whose IAM resources grant on a whole project, folder or organization.
HIERARCHY_IAM_MODULES: Final = frozenset({"projects", "folder", "organizations"})

# The entry points of the kit's dedup function and its idempotent proxy (function/main.py).
DEDUP_ENTRY_POINT: Final = "handle_scheduled_job"
PROXY_ENTRY_POINT: Final = "proxy_scheduled_job"
WATCHDOG_ENTRY_POINT: Final = "watch_scheduled_runs"
# The watchdog's settings (DEDUP_WATCH_LOOKBACK_SECONDS, ...: function/dedup/watchdog/settings.py).
WATCH_SETTINGS_PREFIX: Final = "DEDUP_WATCH_"
FIRESTORE_DATABASE: Final = "gcp:firestore/database:Database"
ALERT_POLICY: Final = "gcp:monitoring/alertPolicy:AlertPolicy"
NOTIFICATION_CHANNEL: Final = "gcp:monitoring/notificationChannel:NotificationChannel"
# The proxy's settings (DEDUP_PROXY_TIMEOUT_SECONDS, ...), those that name its default
# target (function/dedup/proxy/handler.py); its per-job routes travel in its source archive
# (policies/job_tables.py).
PROXY_SETTINGS_PREFIX: Final = "DEDUP_PROXY_"
PROXY_TARGET_ENV: Final = "DEDUP_PROXY_TARGET"
PROXY_RESOURCE_ENV: Final = "DEDUP_PROXY_RESOURCE"
# The only callers a function serves: e-mails of its Scheduler jobs' OIDC accounts.
ALLOWED_CALLERS_ENV: Final = "DEDUP_ALLOWED_CALLERS"

# Defaults of the function's environment (function/dedup/settings.py).
DEDUP_DEFAULTS: Final = {
    "DEDUP_LEASE_SECONDS": "60",
    "DEDUP_RETENTION_SECONDS": "604800",
    "DEDUP_STORE_TIMEOUT_SECONDS": "10",
    "DEDUP_COLLECTION": "scheduler_runs",
    "DEDUP_DATABASE": "(default)",
}
DEDUP_TTL_FIELD: Final = "expire_at"

service_account_email: Final = account_email
"""The e-mail in `serviceAccount:E`, `projects/P/serviceAccounts/E` or plain `E`."""
_LEGACY_BUILD_ACCOUNT: Final = re.compile(r"^\d+@cloudbuild\.gserviceaccount\.com$")
_DURATION: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")
_DECIMAL: Final = re.compile(r"\s*\d+(?:\.\d+)?\s*")


def is_default_build_account(email: str) -> bool:
    """A default account Cloud Build would otherwise use (compute, App Engine, legacy)."""
    return is_default_runtime_account(email) or bool(
        _LEGACY_BUILD_ACCOUNT.match(service_account_email(email)))


def parse_duration_seconds(value: object) -> float:
    """A google.protobuf.Duration as Pulumi passes it ("300s", "3.5s") or a number."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return float(match.group(1))
    raise ValueError(f"{value!r} is not a duration like '300s'")


def parse_int(value: object) -> int:
    """An integer given as a number or as a decimal string (environment variables)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    raise ValueError(f"{value!r} is not an integer")


def parse_seconds(value: object) -> float:
    """A positive number of seconds given as a number or a decimal string ("10", "2.5")."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a number of seconds")
    if isinstance(value, str):
        if not _DECIMAL.fullmatch(value):
            raise ValueError(f"{value!r} is not a number of seconds")
        number = float(value)
    elif isinstance(value, int | float):
        number = float(value)
    else:
        raise ValueError(f"{value!r} is not a number of seconds")
    if not 0 < number < float("inf"):
        raise ValueError(f"{value!r} is not a positive number of seconds")
    return number


def type_module(resource_type: str) -> str:
    """`gcp:projects/iAMMember:IAMMember` -> `projects`."""
    parts = resource_type.split(":")
    return parts[1].split("/")[0] if len(parts) == 3 else ""


def iam_kind(resource_type: str) -> str | None:
    """'member', 'binding' or 'policy' for a gcp IAM resource type, else None."""
    parts = resource_type.split(":")
    if len(parts) != 3 or parts[0] != "gcp":
        return None
    name = parts[2].lower()
    for kind in ("member", "binding", "policy"):
        if name.endswith("iam" + kind):
            return kind
    return None

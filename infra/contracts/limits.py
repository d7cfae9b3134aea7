"""Google's documented limits that no client type encodes: name patterns and lengths,
minimum and multiple-of durations, sizes, and (`STACK_LIMITS`) counts across a stack's
resources. Each limit is declared once, here or, a Cloud Run function's, in
infra/contracts/function_limits.py (Cloud Scheduler's own bounds come from
infra/scheduler_rules.py, which the config validation and the policy pack share), with the
page that documents it (infra/contracts/sources.py).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

from infra.contracts import sources
from infra.contracts.convert import Declared, api_value
from infra.contracts.findings import Finding, Rule, Source
from infra.scheduler_rules import (
    APP_ENGINE_ATTEMPT_DEADLINE_MAX_SECONDS,
    ATTEMPT_DEADLINE_MAX_SECONDS,
    ATTEMPT_DEADLINE_MIN_SECONDS,
    JOB_ID_MAX_LENGTH,
    RETRY_COUNT_MAX,
)

LimitCheck = Callable[[Declared], Iterator[Finding]]
StackLimitCheck = Callable[[Sequence[Declared]], Iterator[Finding]]
"""A limit on what a stack declares together (e.g. how many of a type in one project)."""

# --- Cloud Scheduler ---------------------------------------------------------------------
SCHEDULER_HEADERS_MAX_BYTES: Final = 80_000
"""The headers' total size must be less than this ("80KB", read as the smaller 80,000)."""
SCHEDULER_JOB_MAX_BYTES: Final = 1_000_000
"""A job (its body with it) is at most 1 MB."""
SCHEDULER_DESCRIPTION_MAX_CHARS: Final = 500
SCHEDULER_JOB_ID: Final = re.compile(rf"[A-Za-z0-9_-]{{1,{JOB_ID_MAX_LENGTH}}}")
SCHEDULER_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})

# --- Cloud Monitoring --------------------------------------------------------------------
CONDITION_DURATION_STEP_SECONDS: Final = 60
MISSING_DATA_MIN_DURATION_SECONDS: Final = 60
ABSENT_MIN_DURATION_SECONDS: Final = 120
ALIGNMENT_PERIOD_MIN_SECONDS: Final = 60
ALERT_ALIGNMENT_PERIOD_MAX_SECONDS: Final = 90_000

ALERT_DISPLAY_NAME_MAX_CHARS: Final = 512
ALERT_DOCUMENTATION_MAX_CHARS: Final = 8192
ALERT_DOCUMENTATION_MAX_BYTES: Final = 10_240

# --- Labels (every labelled resource) ----------------------------------------------------
LABELS_MAX_COUNT: Final = 64
LABEL_MAX_CHARS: Final = 63
LABEL_MAX_BYTES: Final = 128

# --- Cloud Logging -----------------------------------------------------------------------
LOG_METRIC_NAME: Final = re.compile(r"[A-Za-z0-9_\-.,+!*',()%][A-Za-z0-9_\-.,+!*',()%/]{0,99}")
LOG_METRIC_DESCRIPTION_MAX_CHARS: Final = 8000
LOG_METRIC_FILTER_MAX_CHARS: Final = 20_000

# --- Firestore, Secret Manager, Cloud Tasks, IAM, Cloud Storage ------------------------
FIRESTORE_DATABASE_ID: Final = re.compile(r"[a-z][a-z0-9-]{2,61}[a-z0-9]|\(default\)")
FIRESTORE_DATABASES_PER_PROJECT: Final = 100
UUID_LIKE: Final = re.compile(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}")
SECRET_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,255}")
SECRET_PAYLOAD_MAX_BYTES: Final = 64 * 1024
QUEUE_ID: Final = re.compile(r"[A-Za-z0-9-]{1,100}")
QUEUE_MAX_DISPATCHES_PER_SECOND: Final = 500
QUEUE_MAX_CONCURRENT_DISPATCHES: Final = 5000
QUEUE_MAX_ATTEMPTS_MIN: Final = -1
SERVICE_ACCOUNT_ID: Final = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])")
SERVICE_ACCOUNT_ID_LENGTH: Final = range(6, 31)
SERVICE_ACCOUNT_DISPLAY_NAME_MAX_BYTES: Final = 100
SERVICE_ACCOUNT_DESCRIPTION_MAX_BYTES: Final = 256
CUSTOM_ROLE_ID: Final = re.compile(r"[A-Za-z0-9_.]{3,64}")
CUSTOM_ROLE_TITLE_MAX_BYTES: Final = 100
IAM_ROLE: Final = re.compile(
    r"roles/[A-Za-z0-9_.]+|(projects/[^/\s]+|organizations/[0-9]+)/roles/[A-Za-z0-9_.]{3,64}"
)
IAM_MEMBER: Final = re.compile(
    r"allUsers|allAuthenticatedUsers"
    r"|(user|serviceAccount|group):[^@\s:]+@[^@\s]+"
    r"|deleted:(user|serviceAccount|group):[^@\s:]+@[^@\s?]+\?uid=[0-9]+"
    r"|domain:[A-Za-z0-9.-]+\.[A-Za-z]{2,}"
    r"|principal(Set)?://\S+"
)
BUCKET_NAME_PART: Final = re.compile(r"[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?")
BUCKET_NAME_MAX_CHARS: Final = 222
OBJECT_NAME_MAX_BYTES: Final = 1024
DATASET_ID: Final = re.compile(r"[A-Za-z0-9_]{1,1024}")
TOPIC_ID: Final = re.compile(r"(?!goog)[A-Za-z][A-Za-z0-9._~+%-]{2,254}")


def _rule(text: str, source: Source) -> Rule:
    return Rule(text, source)


R_JOB_ID: Final = _rule(
    f"a job ID has only letters, digits, hyphens and underscores, at most "
    f"{JOB_ID_MAX_LENGTH} characters", sources.SCHEDULER_JOBS_API)
R_JOB_DESCRIPTION: Final = _rule(
    f"a job's description has at most {SCHEDULER_DESCRIPTION_MAX_CHARS} characters",
    sources.SCHEDULER_JOBS_API)
R_JOB_DEADLINE: Final = _rule(
    f"an HTTP target's attemptDeadline lies within {ATTEMPT_DEADLINE_MIN_SECONDS} s .. "
    f"{ATTEMPT_DEADLINE_MAX_SECONDS // 60} min", sources.SCHEDULER_JOBS_API)
R_JOB_APP_ENGINE_DEADLINE: Final = _rule(
    f"an App Engine HTTP target's attemptDeadline lies within {ATTEMPT_DEADLINE_MIN_SECONDS} "
    f"s .. {APP_ENGINE_ATTEMPT_DEADLINE_MAX_SECONDS // 3600} h", sources.SCHEDULER_JOBS_API)
R_JOB_RETRY_COUNT: Final = _rule(
    f"retryCount lies within 0..{RETRY_COUNT_MAX} (greater and negative values are not "
    "allowed)", sources.SCHEDULER_JOBS_API)
R_JOB_HEADERS: Final = _rule(
    "the total size of an HTTP target's headers must be less than 80KB",
    sources.SCHEDULER_JOBS_API)
R_JOB_BODY: Final = _rule(
    "a job, its body included, is at most 1 MB", sources.SCHEDULER_QUOTAS)
R_JOB_BODY_METHOD: Final = _rule(
    "a request body is allowed only with HTTP method POST, PUT or PATCH",
    sources.SCHEDULER_JOBS_API)
R_DURATION_STEP: Final = _rule(
    "a threshold or MQL condition's duration is a multiple of 60 s (0, 60, 120, ...)",
    sources.MONITORING_ALERT_POLICIES_API)
R_MISSING_DATA: Final = _rule(
    "a condition that sets evaluationMissingData needs a duration of at least 60 s (else the "
    "API answers 400 \"Conditions setting evaluation_missing_data must have a non-zero "
    "duration\", as in terraform-provider-google#16892)", sources.MONITORING_ALERT_POLICIES_API)
R_ABSENT_DURATION: Final = _rule(
    "an absence condition's duration is at least 120 s", sources.MONITORING_ALERT_POLICIES_API)
R_ALIGNMENT: Final = _rule(
    f"an alerting policy's alignmentPeriod lies within {ALIGNMENT_PERIOD_MIN_SECONDS} s .. "
    f"{ALERT_ALIGNMENT_PERIOD_MAX_SECONDS:,} s", sources.MONITORING_ALERT_POLICIES_API)
R_ALERT_DISPLAY_NAME: Final = _rule(
    f"an alert policy's displayName is limited to {ALERT_DISPLAY_NAME_MAX_CHARS} characters",
    sources.MONITORING_ALERT_POLICIES_API)
R_ALERT_DOCUMENTATION: Final = _rule(
    f"documentation.content may not exceed {ALERT_DOCUMENTATION_MAX_CHARS:,} characters nor "
    f"{ALERT_DOCUMENTATION_MAX_BYTES:,} UTF-8 bytes", sources.MONITORING_ALERT_POLICIES_API)
R_LABELS: Final = _rule(
    f"labels: at most {LABELS_MAX_COUNT}; a key 1-{LABEL_MAX_CHARS} characters starting with a "
    "lowercase letter, a value 0-63 characters, both of lowercase letters, digits, _ and -, "
    f"at most {LABEL_MAX_BYTES} UTF-8 bytes", sources.LABELS)
R_LOG_METRIC_NAME: Final = _rule(
    "a log metric name is at most 100 characters of A-Z a-z 0-9 _-.,+!*',()%/ and does not "
    "start with /", sources.LOGGING_METRICS_API)
R_LOG_METRIC_DESCRIPTION: Final = _rule(
    f"a log metric's description has at most {LOG_METRIC_DESCRIPTION_MAX_CHARS:,} characters",
    sources.LOGGING_METRICS_API)
R_LOG_METRIC_FILTER: Final = _rule(
    f"a log metric's filter has at most {LOG_METRIC_FILTER_MAX_CHARS:,} characters",
    sources.LOGGING_METRICS_API)
R_DATABASE_ID: Final = _rule(
    "a database ID is 4-63 characters of a-z 0-9 -, starts with a letter, ends with a letter "
    "or digit, is not UUID-like (or is \"(default)\")", sources.FIRESTORE_DATABASES_API)
R_DATABASE_COUNT: Final = Rule(
    f"a project holds at most {FIRESTORE_DATABASES_PER_PROJECT} Firestore databases (Google "
    "support can raise it); every database of the project counts: its (default) database "
    "and those of the other stacks in the same project too", sources.FIRESTORE_QUOTAS,
    fix="declare fewer runtimes (each has a records database of its own): let jobs that may "
    "share records share a runtime, or move some jobs to a stack in another project; or ask "
    "Google support for a higher limit")
R_SECRET_ID: Final = _rule(
    "a secret ID is at most 255 letters, digits, hyphens and underscores", sources.SECRETS_API)
R_SECRET_PAYLOAD: Final = _rule(
    f"a secret version's data is no larger than {SECRET_PAYLOAD_MAX_BYTES // 1024}KiB",
    sources.SECRET_PAYLOAD_API)
R_QUEUE_ID: Final = _rule(
    "a queue ID has only letters, digits and hyphens, at most 100 characters",
    sources.TASKS_QUEUES_API)
R_QUEUE_RATE: Final = _rule(
    f"rateLimits.maxDispatchesPerSecond is at most {QUEUE_MAX_DISPATCHES_PER_SECOND}",
    sources.TASKS_QUEUES_API)
R_QUEUE_CONCURRENCY: Final = _rule(
    f"rateLimits.maxConcurrentDispatches is at most {QUEUE_MAX_CONCURRENT_DISPATCHES:,}",
    sources.TASKS_QUEUES_API)
R_QUEUE_ATTEMPTS: Final = _rule(
    "retryConfig.maxAttempts is -1 (unlimited) or more", sources.TASKS_QUEUES_API)
R_QUEUE_SAMPLING: Final = _rule(
    "stackdriverLoggingConfig.samplingRatio lies within 0.0..1.0", sources.TASKS_QUEUES_API)
R_ACCOUNT_ID: Final = _rule(
    "a service account ID is 6-30 characters matching [a-z]([-a-z0-9]*[a-z0-9])",
    sources.IAM_SERVICE_ACCOUNTS_API)
R_ACCOUNT_DISPLAY_NAME: Final = _rule(
    f"a service account's displayName is at most {SERVICE_ACCOUNT_DISPLAY_NAME_MAX_BYTES} "
    "UTF-8 bytes", sources.IAM_SERVICE_ACCOUNTS_API)
R_ACCOUNT_DESCRIPTION: Final = _rule(
    f"a service account's description is at most {SERVICE_ACCOUNT_DESCRIPTION_MAX_BYTES} "
    "UTF-8 bytes", sources.IAM_SERVICE_ACCOUNTS_API)
R_ROLE_ID: Final = _rule(
    "a custom role ID is 3-64 letters, digits, underscores and periods", sources.IAM_ROLES_API)
R_ROLE_TITLE: Final = _rule(
    f"a role's title is limited to {CUSTOM_ROLE_TITLE_MAX_BYTES} UTF-8 bytes",
    sources.IAM_ROLES_API)
R_IAM_ROLE: Final = _rule(
    "a binding's role is roles/<name>, projects/<project>/roles/<id> or "
    "organizations/<number>/roles/<id>", sources.IAM_POLICY_BINDING)
R_IAM_MEMBER: Final = _rule(
    "a member is allUsers, allAuthenticatedUsers, user:/serviceAccount:/group:<email>, "
    "deleted:<kind>:<email>?uid=<id>, domain:<domain>, or a principal:// or principalSet:// "
    "identifier", sources.IAM_PRINCIPAL_IDENTIFIERS)
R_BUCKET_NAME: Final = _rule(
    "a bucket name is 3-63 characters of a-z 0-9 - _ (up to 222 with dots, each dot-separated "
    "part at most 63), starts and ends with a letter or digit, is not an IP address, does not "
    "start with \"goog\" and does not contain \"google\"", sources.STORAGE_BUCKET_NAMES)
R_DATASET_ID: Final = _rule(
    "a dataset ID has only letters, digits and underscores, at most 1,024 characters",
    sources.BIGQUERY_DATASETS_API)
R_TOPIC_ID: Final = _rule(
    "a topic ID starts with a letter, has 3-255 letters, digits, '-', '_', '.', '~', '+' or "
    "'%', and does not start with \"goog\"", sources.PUBSUB_TOPICS_API)
R_OBJECT_NAME: Final = _rule(
    f"an object name is 1-{OBJECT_NAME_MAX_BYTES} UTF-8 bytes without carriage returns or line "
    "feeds, and is not \".\" or \"..\"", sources.STORAGE_OBJECT_NAMES)


def finding(
    resource: Declared, prop: str, value: Any, rule: Rule, detail: str = ""
) -> Finding:
    return Finding(resource.type, resource.name, prop, value, rule, detail)


def duration_seconds(value: Any) -> float | None:
    """A google.protobuf.Duration JSON string ("180s") in seconds; None if not one (the
    strict parse reports that)."""
    from google.protobuf import duration_pb2  # type: ignore[import-untyped]

    if not isinstance(value, str):
        return None
    duration = duration_pb2.Duration()
    try:
        duration.FromJsonString(value)
    except ValueError:
        return None
    return float(duration.ToTimedelta().total_seconds())


def utf8_len(text: Any) -> int:
    return len(str(text).encode())


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def matches(pattern: re.Pattern[str], value: Any) -> bool:
    return isinstance(value, str) and pattern.fullmatch(value) is not None


# --------------------------------------------------------------------------- Scheduler


def scheduler_job_limits(resource: Declared) -> Iterator[Finding]:
    props = resource.props
    if not matches(SCHEDULER_JOB_ID, props.get("name")):
        yield finding(resource, "name", props.get("name"), R_JOB_ID)
    description = props.get("description")
    if isinstance(description, str) and len(description) > SCHEDULER_DESCRIPTION_MAX_CHARS:
        yield finding(resource, "description", description, R_JOB_DESCRIPTION)
    retry = props.get("retryConfig")
    count = retry.get("retryCount") if isinstance(retry, Mapping) else None
    if isinstance(count, int | float) and not 0 <= count <= RETRY_COUNT_MAX:
        yield finding(resource, "retryConfig.retryCount", count, R_JOB_RETRY_COUNT)
    target = props.get("httpTarget")
    deadline = duration_seconds(props.get("attemptDeadline"))
    if isinstance(props.get("appEngineHttpTarget"), Mapping) and deadline is not None and not (
        ATTEMPT_DEADLINE_MIN_SECONDS <= deadline <= APP_ENGINE_ATTEMPT_DEADLINE_MAX_SECONDS
    ):
        yield finding(resource, "attemptDeadline", props.get("attemptDeadline"),
                      R_JOB_APP_ENGINE_DEADLINE)
    if not isinstance(target, Mapping):
        return
    if deadline is not None and not (
        ATTEMPT_DEADLINE_MIN_SECONDS <= deadline <= ATTEMPT_DEADLINE_MAX_SECONDS
    ):
        yield finding(resource, "attemptDeadline", props.get("attemptDeadline"), R_JOB_DEADLINE)
    headers = target.get("headers")
    if isinstance(headers, Mapping):
        size = sum(utf8_len(k) + utf8_len(v) for k, v in headers.items())
        if size >= SCHEDULER_HEADERS_MAX_BYTES:
            yield finding(resource, "httpTarget.headers", f"{size:,} bytes", R_JOB_HEADERS)
    body = target.get("body")
    if isinstance(body, str) and body:
        try:
            body_size: int | None = len(base64.b64decode(body, validate=True))
        except (binascii.Error, ValueError):
            body_size = None  # not base64: the strict parse reports it
        if body_size is not None and body_size > SCHEDULER_JOB_MAX_BYTES:
            yield finding(resource, "httpTarget.body", f"{body_size:,} bytes", R_JOB_BODY)
        method = target.get("httpMethod", "POST")
        if method not in SCHEDULER_BODY_METHODS:
            yield finding(resource, "httpTarget.httpMethod", method, R_JOB_BODY_METHOD)


# --------------------------------------------------------------------------- Monitoring

# The conditions whose duration is documented as a multiple of a minute (a PromQL
# condition's is any non-negative duration).
_THRESHOLD_CONDITIONS: Final = ("conditionThreshold", "conditionMonitoringQueryLanguage")


def alert_policy_limits(resource: Declared) -> Iterator[Finding]:
    name = resource.props.get("displayName")
    if len(str(name or "")) > ALERT_DISPLAY_NAME_MAX_CHARS:
        yield finding(resource, "displayName", name, R_ALERT_DISPLAY_NAME)
    content = _mapping(resource.props.get("documentation")).get("content")
    if isinstance(content, str) and (
        len(content) > ALERT_DOCUMENTATION_MAX_CHARS
        or utf8_len(content) > ALERT_DOCUMENTATION_MAX_BYTES
    ):
        yield finding(resource, "documentation.content", content, R_ALERT_DOCUMENTATION)
    conditions = resource.props.get("conditions")
    for index, condition in enumerate(conditions if isinstance(conditions, Sequence) else []):
        if not isinstance(condition, Mapping):
            continue
        for kind in (*_THRESHOLD_CONDITIONS, "conditionAbsent"):
            spec = condition.get(kind)
            if isinstance(spec, Mapping):
                yield from _condition_limits(resource, f"conditions[{index}].{kind}", kind, spec)


def _condition_limits(
    resource: Declared, prop: str, kind: str, spec: Mapping[str, Any]
) -> Iterator[Finding]:
    raw = spec.get("duration")
    seconds = duration_seconds(raw)
    if seconds is not None:
        if seconds % CONDITION_DURATION_STEP_SECONDS:
            yield finding(resource, f"{prop}.duration", raw, R_DURATION_STEP)
        if kind == "conditionAbsent" and seconds < ABSENT_MIN_DURATION_SECONDS:
            yield finding(resource, f"{prop}.duration", raw, R_ABSENT_DURATION)
    unparsable = raw is not None and seconds is None  # the strict parse reports that
    if spec.get("evaluationMissingData") and not unparsable and (
        (seconds or 0) < MISSING_DATA_MIN_DURATION_SECONDS
    ):
        yield finding(resource, f"{prop}.duration", raw, R_MISSING_DATA)
    for key in ("aggregations", "denominatorAggregations"):
        aggregations = spec.get(key)
        for index, aggregation in enumerate(
            aggregations if isinstance(aggregations, Sequence) else []
        ):
            period_raw = aggregation.get("alignmentPeriod") if isinstance(
                aggregation, Mapping) else None
            period = duration_seconds(period_raw)
            if period is not None and not (
                ALIGNMENT_PERIOD_MIN_SECONDS <= period <= ALERT_ALIGNMENT_PERIOD_MAX_SECONDS
            ):
                yield finding(resource, f"{prop}.{key}[{index}].alignmentPeriod", period_raw,
                               R_ALIGNMENT)


# --------------------------------------------------------------------------- labels


def _is_label_text(text: str, first_lowercase: bool) -> bool:
    """Lowercase letters (any script's, or letters without case), digits, _ and -."""
    def allowed(char: str) -> bool:
        return unicodedata.category(char) in ("Ll", "Lo", "Nd") or char in "_-"

    if first_lowercase and not (text and unicodedata.category(text[0]) in ("Ll", "Lo")):
        return False
    return all(allowed(char) for char in text)


def labels_limits(prop: str) -> LimitCheck:
    """The labels requirements, for the labels map at `prop`."""

    def check(resource: Declared) -> Iterator[Finding]:
        labels = api_value(resource.props.get(prop))
        if not isinstance(labels, Mapping):
            return
        if len(labels) > LABELS_MAX_COUNT:
            yield finding(resource, prop, f"{len(labels)} labels", R_LABELS)
        for key, value in labels.items():
            valid = (
                isinstance(key, str) and isinstance(value, str)
                and 1 <= len(key) <= LABEL_MAX_CHARS and len(value) <= LABEL_MAX_CHARS
                and utf8_len(key) <= LABEL_MAX_BYTES and utf8_len(value) <= LABEL_MAX_BYTES
                and _is_label_text(key, first_lowercase=True)
                and _is_label_text(value, first_lowercase=False)
            )
            if not valid:
                yield finding(resource, f"{prop}.{key}", value, R_LABELS)

    return check


# --------------------------------------------------------------------------- the rest


def log_metric_limits(resource: Declared) -> Iterator[Finding]:
    props = resource.props
    if not matches(LOG_METRIC_NAME, props.get("name")):
        yield finding(resource, "name", props.get("name"), R_LOG_METRIC_NAME)
    if len(str(props.get("description") or "")) > LOG_METRIC_DESCRIPTION_MAX_CHARS:
        yield finding(resource, "description", props.get("description"),
                       R_LOG_METRIC_DESCRIPTION)
    if len(str(props.get("filter") or "")) > LOG_METRIC_FILTER_MAX_CHARS:
        yield finding(resource, "filter", props.get("filter"), R_LOG_METRIC_FILTER)


def firestore_database_limits(resource: Declared) -> Iterator[Finding]:
    name = resource.props.get("name")
    if not matches(FIRESTORE_DATABASE_ID, name) or matches(UUID_LIKE, name):
        yield finding(resource, "name", name, R_DATABASE_ID)


def firestore_database_count(resources: Sequence[Declared]) -> Iterator[Finding]:
    """Reported on the first database past the limit, with how many of each the stack has
    (by the first word of their Pulumi names: dedup, proxy, watchdog, runtime)."""
    by_project: dict[Any, list[Declared]] = {}
    for resource in resources:
        if resource.type == "gcp:firestore/database:Database":
            by_project.setdefault(resource.props.get("project"), []).append(resource)
    for project, databases in by_project.items():
        if len(databases) <= FIRESTORE_DATABASES_PER_PROJECT:
            continue
        kinds: dict[str, int] = {}
        for database in databases:
            kind = database.name.split("-", 1)[0]
            kinds[kind] = kinds.get(kind, 0) + 1
        counted = ", ".join(f"{kind} {count}" for kind, count in
                            sorted(kinds.items(), key=lambda item: (-item[1], item[0])))
        yield finding(databases[FIRESTORE_DATABASES_PER_PROJECT], "project", project,
                      R_DATABASE_COUNT, f"the stack declares {len(databases)} Firestore "
                      f"databases in this project: {counted}")


def secret_limits(resource: Declared) -> Iterator[Finding]:
    secret_id = resource.props.get("secretId")
    if not matches(SECRET_ID, secret_id):
        yield finding(resource, "secretId", secret_id, R_SECRET_ID)


def secret_version_limits(resource: Declared) -> Iterator[Finding]:
    data = api_value(resource.props.get("secretData"))
    if not isinstance(data, str):
        return  # unknown until deployed (e.g. a random password)
    size = (len(base64.b64decode(data)) if resource.props.get("isSecretDataBase64")
            else utf8_len(data))
    if size > SECRET_PAYLOAD_MAX_BYTES:
        yield finding(resource, "secretData", f"{size:,} bytes (secret)", R_SECRET_PAYLOAD)


def queue_limits(resource: Declared) -> Iterator[Finding]:
    props = resource.props
    if not matches(QUEUE_ID, props.get("name")):
        yield finding(resource, "name", props.get("name"), R_QUEUE_ID)
    rates = _mapping(props.get("rateLimits"))
    rate = rates.get("maxDispatchesPerSecond")
    if isinstance(rate, int | float) and rate > QUEUE_MAX_DISPATCHES_PER_SECOND:
        yield finding(resource, "rateLimits.maxDispatchesPerSecond", rate, R_QUEUE_RATE)
    concurrency = rates.get("maxConcurrentDispatches")
    if isinstance(concurrency, int | float) and concurrency > QUEUE_MAX_CONCURRENT_DISPATCHES:
        yield finding(resource, "rateLimits.maxConcurrentDispatches", concurrency,
                       R_QUEUE_CONCURRENCY)
    retry = _mapping(props.get("retryConfig"))
    attempts = retry.get("maxAttempts")
    if isinstance(attempts, int | float) and attempts < QUEUE_MAX_ATTEMPTS_MIN:
        yield finding(resource, "retryConfig.maxAttempts", attempts, R_QUEUE_ATTEMPTS)
    ratio = _mapping(props.get("stackdriverLoggingConfig")).get("samplingRatio")
    if isinstance(ratio, int | float) and not 0.0 <= ratio <= 1.0:
        yield finding(resource, "stackdriverLoggingConfig.samplingRatio", ratio,
                       R_QUEUE_SAMPLING)


def service_account_limits(resource: Declared) -> Iterator[Finding]:
    props = resource.props
    account_id = props.get("accountId")
    if not (
        isinstance(account_id, str)
        and matches(SERVICE_ACCOUNT_ID, account_id)
        and len(account_id) in SERVICE_ACCOUNT_ID_LENGTH
    ):
        yield finding(resource, "accountId", account_id, R_ACCOUNT_ID)
    if utf8_len(props.get("displayName") or "") > SERVICE_ACCOUNT_DISPLAY_NAME_MAX_BYTES:
        yield finding(resource, "displayName", props.get("displayName"), R_ACCOUNT_DISPLAY_NAME)
    if utf8_len(props.get("description") or "") > SERVICE_ACCOUNT_DESCRIPTION_MAX_BYTES:
        yield finding(resource, "description", props.get("description"), R_ACCOUNT_DESCRIPTION)


def custom_role_limits(resource: Declared) -> Iterator[Finding]:
    props = resource.props
    if not matches(CUSTOM_ROLE_ID, props.get("roleId")):
        yield finding(resource, "roleId", props.get("roleId"), R_ROLE_ID)
    if utf8_len(props.get("title") or "") > CUSTOM_ROLE_TITLE_MAX_BYTES:
        yield finding(resource, "title", props.get("title"), R_ROLE_TITLE)


def iam_member_limits(resource: Declared) -> Iterator[Finding]:
    role, member = resource.props.get("role"), resource.props.get("member")
    if not matches(IAM_ROLE, role):
        yield finding(resource, "role", role, R_IAM_ROLE)
    if not matches(IAM_MEMBER, member):
        yield finding(resource, "member", member, R_IAM_MEMBER)


def _is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _is_bucket_name(name: Any) -> bool:
    return (
        isinstance(name, str)
        and 3 <= len(name) <= (BUCKET_NAME_MAX_CHARS if "." in name else 63)
        and all(matches(BUCKET_NAME_PART, part) for part in name.split("."))
        and not _is_ip_address(name)
        and not name.startswith("goog")
        and "google" not in name
    )


def bucket_limits(resource: Declared) -> Iterator[Finding]:
    name = resource.props.get("name")
    if not _is_bucket_name(name):
        yield finding(resource, "name", name, R_BUCKET_NAME)


def target_limits(prop: str, valid: Callable[[Any], bool], rule: Rule) -> LimitCheck:
    """The name rule of the resource an IAM member is on, for its `prop` (e.g. a bucket's)."""

    def check(resource: Declared) -> Iterator[Finding]:
        value = resource.props.get(prop)
        if not valid(value):
            yield finding(resource, prop, value, rule)

    return check


def bucket_object_limits(resource: Declared) -> Iterator[Finding]:
    name = resource.props.get("name")
    if (
        not isinstance(name, str)
        or not 1 <= utf8_len(name) <= OBJECT_NAME_MAX_BYTES
        or "\r" in name
        or "\n" in name
        or name in (".", "..")
    ):
        yield finding(resource, "name", name, R_OBJECT_NAME)


IAM_MEMBER_TYPES: Final = (
    "gcp:projects/iAMMember:IAMMember",
    "gcp:serviceaccount/iAMMember:IAMMember",
    "gcp:cloudrunv2/serviceIamMember:ServiceIamMember",
    "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember",
    "gcp:secretmanager/secretIamMember:SecretIamMember",
    "gcp:cloudtasks/queueIamMember:QueueIamMember",
    "gcp:storage/bucketIAMMember:BucketIAMMember",
    "gcp:bigquery/datasetIamMember:DatasetIamMember",
    "gcp:pubsub/topicIAMMember:TopicIAMMember",
)
_IAM_TARGETS: Final[Mapping[str, LimitCheck]] = {
    "gcp:secretmanager/secretIamMember:SecretIamMember": target_limits(
        "secretId", lambda value: matches(SECRET_ID, value), R_SECRET_ID),
    "gcp:storage/bucketIAMMember:BucketIAMMember": target_limits(
        "bucket", _is_bucket_name, R_BUCKET_NAME),
    "gcp:bigquery/datasetIamMember:DatasetIamMember": target_limits(
        "datasetId", lambda value: matches(DATASET_ID, value), R_DATASET_ID),
    "gcp:pubsub/topicIAMMember:TopicIAMMember": target_limits(
        "topic", lambda value: matches(TOPIC_ID, value), R_TOPIC_ID),
}

LIMITS: Final[Mapping[str, tuple[LimitCheck, ...]]] = {
    "gcp:cloudscheduler/job:Job": (scheduler_job_limits,),
    "gcp:monitoring/alertPolicy:AlertPolicy": (alert_policy_limits,
                                               labels_limits("userLabels")),
    "gcp:monitoring/notificationChannel:NotificationChannel": (labels_limits("userLabels"),),
    "gcp:logging/metric:Metric": (log_metric_limits,),
    "gcp:firestore/database:Database": (firestore_database_limits,),
    "gcp:secretmanager/secret:Secret": (secret_limits, labels_limits("labels")),
    "gcp:secretmanager/secretVersion:SecretVersion": (secret_version_limits,),
    "gcp:cloudtasks/queue:Queue": (queue_limits,),
    "gcp:serviceaccount/account:Account": (service_account_limits,),
    "gcp:projects/iAMCustomRole:IAMCustomRole": (custom_role_limits,),
    "gcp:storage/bucket:Bucket": (bucket_limits, labels_limits("labels")),
    "gcp:storage/bucketObject:BucketObject": (bucket_object_limits,),
    **{resource_type: (iam_member_limits, *((_IAM_TARGETS[resource_type],)
                                            if resource_type in _IAM_TARGETS else ()))
       for resource_type in IAM_MEMBER_TYPES},
}
"""The limits of the types here; a Cloud Run function's are infra/contracts/function_limits.py's
(infra/contracts/__init__.py joins the two)."""

STACK_LIMITS: Final[tuple[StackLimitCheck, ...]] = (firestore_database_count,)


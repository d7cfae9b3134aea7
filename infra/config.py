"""The stack configuration: read, typed and validated in one place, before any resource.

`load_config(values)` is a pure function over a plain mapping of full config keys
(`"gcp:project"`, `"scheduler-dedup:jobs"`, ...) to values. The values may be native YAML
values (the `config:` section of a `Pulumi.<stack>.yaml` file, as the offline plan and the
tests feed them) or the strings the Pulumi engine hands a program (`"600"`, `"true"`, JSON
for objects and lists). `config_from_pulumi()` is the thin adapter from `pulumi.Config`.

Every problem is collected and reported in one `ConfigError`, each naming the key
(`scheduler-dedup:jobs[1].schedule`) and the fix. Cross-field rules (lease, retention,
timeout) run only once every field on its own is valid, so one typo never cascades into
a list of follow-on complaints. Cloud Scheduler's own rules (cron, time zone, deadline,
backoff, retry window) come from `infra.scheduler_rules`, shared with the policy pack.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from infra.scheduler_rules import (
    ATTEMPT_DEADLINE_DEFAULT_SECONDS,
    ATTEMPT_DEADLINE_MAX_SECONDS,
    ATTEMPT_DEADLINE_MIN_SECONDS,
    DURATION_MAX_SECONDS,
    JOB_ID_MAX_LENGTH,
    LEASE_STORE_TIMEOUTS,
    MAX_BACKOFF_DEFAULT_SECONDS,
    MAX_DOUBLINGS_DEFAULT,
    MAX_DOUBLINGS_MAX,
    MIN_BACKOFF_DEFAULT_SECONDS,
    RETRY_COUNT_MAX,
    RetrySettings,
    ScheduleError,
    min_lease_seconds,
    retry_window_seconds,
    validate_cron,
    validate_time_zone,
)

PROJECT_NAME: Final = "scheduler-dedup"
"""The Pulumi project name, and so the namespace of the kit's own config keys."""

GCP_PROJECT_KEY: Final = "gcp:project"
GCP_REGION_KEY: Final = "gcp:region"

# Defaults of the kit's keys (Pulumi.yaml declares the same; a test keeps them equal).
DEFAULTS: Final[Mapping[str, Any]] = {
    "namePrefix": "scheduler-dedup",
    "collection": "scheduler_runs",
    "deleteProtection": True,
    "pointInTimeRecovery": False,
    "leaseSeconds": 60,
    "retentionSeconds": 604800,
    "functionTimeoutSeconds": 540,
    "functionMemory": "512Mi",
    "minInstances": 0,
    "maxInstances": 10,
    "maxRequestConcurrency": 1,
    "missingScheduleTime": "reject",
    "defaultJobLogic": "jobs.example:run",
    "storeTimeoutSeconds": 10,
    "cacheSize": 10000,
    "proxyTimeoutSeconds": 30,
    "iamPropagationSeconds": 120,
}
# Keys without a fixed default: databaseName (defaults to namePrefix), firestoreLocation
# (defaults to gcp:region), jobs (required).
KIT_KEYS: Final = frozenset({*DEFAULTS, "databaseName", "firestoreLocation", "jobs"})

JOB_KEYS: Final = frozenset(
    {
        "name",
        "schedule",
        "timeZone",
        "attemptDeadlineSeconds",
        "retry",
        "body",
        "jobLogic",
        "paused",
        "description",
        "proxy",
    }
)
RETRY_KEYS: Final = frozenset(
    {
        "retryCount",
        "maxRetryDurationSeconds",
        "minBackoffSeconds",
        "maxBackoffSeconds",
        "maxDoublings",
    }
)
PROXY_KEYS: Final = frozenset({"target", "resource", "tokenName", "container"})
DEFAULT_TIME_ZONE: Final = "Etc/UTC"
MISSING_SCHEDULE_TIME_MODES: Final = ("reject", "run")

FUNCTION_TIMEOUT_MAX_SECONDS: Final = 3600  # 2nd gen HTTP functions
FUNCTION_MEMORY_MIN_MIB: Final = 128
FUNCTION_MEMORY_MAX_MIB: Final = 32768
MAX_INSTANCES_LIMIT: Final = 1000
MAX_REQUEST_CONCURRENCY_LIMIT: Final = 1000
STORE_TIMEOUT_MAX_SECONDS: Final = 60
PROXY_TIMEOUT_MAX_SECONDS: Final = 600  # the proxy's own bound (DEDUP_PROXY_TIMEOUT_SECONDS)
# The wait for IAM grants to propagate before the functions are deployed (infra/iam_wait.py):
# Google documents that a grant usually takes effect within 2 minutes, sometimes 7 or more.
IAM_PROPAGATION_MAX_SECONDS: Final = 900

# The proxy's downstream targets (function/dedup/targets.py accepts the same names and
# resource shapes; tests/infra/test_proxy_config.py checks both agree).
PROXY_TARGET_WORKFLOW: Final = "workflow"
PROXY_TARGET_RUN_JOB: Final = "run_job"
PROXY_TARGET_BUILD_TRIGGER: Final = "build_trigger"
PROXY_TARGETS: Final = (PROXY_TARGET_WORKFLOW, PROXY_TARGET_RUN_JOB, PROXY_TARGET_BUILD_TRIGGER)
_PROXY_PROJECT = r"(?:[a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]|[0-9]{1,20}"
_PROXY_LOCATION = r"[a-z][a-z0-9-]{1,62}"
_PROXY_RESOURCE: Final[Mapping[str, re.Pattern[str]]] = {
    PROXY_TARGET_WORKFLOW: re.compile(
        rf"projects/({_PROXY_PROJECT})/locations/({_PROXY_LOCATION})"
        r"/workflows/([A-Za-z][A-Za-z0-9_-]{0,127})"
    ),
    PROXY_TARGET_RUN_JOB: re.compile(
        rf"projects/({_PROXY_PROJECT})/locations/({_PROXY_LOCATION})"
        r"/jobs/([a-z](?:[a-z0-9-]{0,61}[a-z0-9])?)"
    ),
    PROXY_TARGET_BUILD_TRIGGER: re.compile(
        rf"projects/({_PROXY_PROJECT})/locations/({_PROXY_LOCATION})"
        r"/triggers/([A-Za-z0-9][A-Za-z0-9_.-]{0,127})"
    ),
}
_PROXY_SHAPE: Final[Mapping[str, str]] = {
    PROXY_TARGET_WORKFLOW: "projects/PROJECT/locations/LOCATION/workflows/WORKFLOW",
    PROXY_TARGET_RUN_JOB: "projects/PROJECT/locations/LOCATION/jobs/JOB",
    PROXY_TARGET_BUILD_TRIGGER: "projects/PROJECT/locations/LOCATION/triggers/TRIGGER_ID",
}
# Where the token goes: a workflow argument key, a container env var, a user substitution.
_PROXY_TOKEN_NAME: Final[Mapping[str, tuple[re.Pattern[str], str]]] = {
    PROXY_TARGET_WORKFLOW: (
        re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}"),
        "an argument key of letters, digits and underscores, e.g. dedup_token",
    ),
    PROXY_TARGET_RUN_JOB: (
        re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}"),
        "an environment variable name, e.g. DEDUP_TOKEN",
    ),
    PROXY_TARGET_BUILD_TRIGGER: (
        re.compile(r"_[A-Z0-9_]{1,99}"),
        "a user substitution: '_' then upper-case letters, digits or underscores, "
        "e.g. _DEDUP_TOKEN",
    ),
}
_CONTAINER_NAME = re.compile(r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?")

_PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
_FIRESTORE_LOCATION = re.compile(r"^[a-z][a-z0-9-]*[a-z0-9]$")
_NAME_PREFIX = re.compile(r"^[a-z][a-z0-9-]{2,20}[a-z0-9]$")
_DATABASE_ID = re.compile(r"^[a-z][a-z0-9-]{2,61}[a-z0-9]$")
_UUID_LIKE = re.compile(r"^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$")
_COLLECTION_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,99}$")
_JOB_NAME = re.compile(r"^[A-Za-z0-9_-]{1,500}$")
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_JOB_LOGIC = re.compile(rf"^{_IDENTIFIER}(\.{_IDENTIFIER})*:{_IDENTIFIER}$")
_MEMORY = re.compile(r"^([1-9][0-9]*)(Mi|Gi|M|G)$")
_INT_STRING = re.compile(r"^\s*-?[0-9]+\s*$")

# The gcp provider's keys the kit needs: valid form, what it is, how to set it, the fix.
_PROVIDER_KEYS: Final[Mapping[str, tuple[re.Pattern[str], str, str, str]]] = {
    GCP_PROJECT_KEY: (
        _PROJECT_ID,
        "a Google Cloud project ID",
        "pulumi config set gcp:project <project-id>",
        "use the project ID (6-30 lowercase letters, digits, hyphens), not its name or number",
    ),
    GCP_REGION_KEY: (
        _REGION,
        "a Google Cloud region",
        "pulumi config set gcp:region europe-west1",
        "use a region such as europe-west1 or us-central1 (not a zone)",
    ),
}


def kit_key(name: str) -> str:
    """`leaseSeconds` -> `scheduler-dedup:leaseSeconds`."""
    return f"{PROJECT_NAME}:{name}"


def scheduler_job_id(name_prefix: str, job_name: str) -> str:
    """The Cloud Scheduler job ID of `jobs[].name` in a stack: `<namePrefix>-<name>`.

    Job IDs are unique per project and region, so two stacks sharing a project keep apart
    only if the ID carries the stack's prefix. It is what the function receives as
    X-CloudScheduler-JobName, keys DEDUP_JOB_ROUTES / DEDUP_PROXY_ROUTES, and is part of
    every run's dedup key.
    """
    return f"{name_prefix}-{job_name}"


# --------------------------------------------------------------------------- errors


@dataclass(frozen=True)
class Problem:
    """One invalid setting: the full config key, what is wrong, and how to fix it."""

    key: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}. Fix: {self.fix}"


class ConfigError(ValueError):
    """The stack config cannot be deployed. Raised before any resource is declared."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        if not problems:
            raise ValueError("ConfigError needs at least one problem")
        self.problems: tuple[Problem, ...] = tuple(problems)
        if len(self.problems) == 1:
            text = f"invalid stack config: {self.problems[0]}"
        else:
            lines = "\n".join(f"  - {p}" for p in self.problems)
            text = f"invalid stack config ({len(self.problems)} problems):\n{lines}"
        super().__init__(text)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(p.key for p in self.problems)


# --------------------------------------------------------------------------- typed config


@dataclass(frozen=True)
class ProxyTarget:
    """The downstream execution a proxied job starts (`jobs[].proxy`)."""

    target: str
    """workflow | run_job | build_trigger"""
    resource: str
    """projects/P/locations/L/{workflows/W | jobs/J | triggers/T}"""
    token_name: str | None = None
    """Where the token goes; None: the proxy's default for the target."""
    container: str | None = None
    """run_job only: the container that gets the token (default: the first)."""

    @property
    def project(self) -> str:
        return self.resource.split("/")[1]

    @property
    def location(self) -> str:
        return self.resource.split("/")[3]

    @property
    def resource_id(self) -> str:
        return self.resource.rsplit("/", 1)[1]

    def route(self) -> dict[str, str]:
        """The job's entry of DEDUP_PROXY_ROUTES (the keys the proxy reads)."""
        route = {"target": self.target, "resource": self.resource}
        if self.token_name is not None:
            route["tokenName"] = self.token_name
        if self.container is not None:
            route["container"] = self.container
        return route


@dataclass(frozen=True)
class JobSettings:
    """One Cloud Scheduler job, served by the stack's dedup function (or its proxy)."""

    name: str
    schedule: str
    time_zone: str
    attempt_deadline_seconds: int
    retry: RetrySettings
    job_logic: str
    """The effective `module:function` (the job's own, or the stack's defaultJobLogic).
    Unused for a proxied job, which runs no job logic of its own."""
    body_json: str | None = None
    """Canonical JSON of the body (sorted keys, compact), or None for no body."""
    paused: bool = False
    description: str | None = None
    proxy: ProxyTarget | None = None
    """Set: the job calls the idempotent proxy, which starts this target once per run."""

    @property
    def retry_window_seconds(self) -> float:
        return retry_window_seconds(self.attempt_deadline_seconds, self.retry)


@dataclass(frozen=True)
class FunctionSettings:
    """The Cloud Run function (2nd gen) that serves every job."""

    timeout_seconds: int
    memory: str
    min_instances: int
    max_instances: int
    max_request_concurrency: int

    @property
    def memory_mib(self) -> int:
        return memory_mib(self.memory)

    @property
    def available_cpu(self) -> str | None:
        """CPU to request, or None to let Cloud Run derive it from the memory.

        More than one concurrent request per instance needs at least one whole CPU; up to
        4 GiB a single CPU is allowed, above that Cloud Run derives two or more.
        """
        if self.max_request_concurrency > 1 and self.memory_mib <= 4096:
            return "1"
        return None


@dataclass(frozen=True)
class DedupSettings:
    """The dedup records: where they live and how long leases and records last."""

    database_name: str
    collection: str
    firestore_location: str
    delete_protection: bool
    point_in_time_recovery: bool
    lease_seconds: int
    retention_seconds: int
    missing_schedule_time: str
    default_job_logic: str
    store_timeout_seconds: int
    cache_size: int


@dataclass(frozen=True)
class StackConfig:
    """Everything the program needs, validated."""

    project: str
    region: str
    name_prefix: str
    dedup: DedupSettings
    function: FunctionSettings
    jobs: tuple[JobSettings, ...]
    proxy_timeout_seconds: int = 30
    """DEDUP_PROXY_TIMEOUT_SECONDS: bound on one downstream start request."""
    iam_propagation_seconds: int = 120
    """How long the program waits after the accounts' grants before deploying functions."""

    def job_id(self, job: JobSettings) -> str:
        """The deployed Scheduler job ID of `job`: `<namePrefix>-<name>`."""
        return scheduler_job_id(self.name_prefix, job.name)

    def job_routes(self) -> dict[str, str]:
        """DEDUP_JOB_ROUTES: every (not proxied) job's deployed ID -> its effective
        `module:function`."""
        return {
            self.job_id(job): job.job_logic
            for job in sorted(self.jobs, key=lambda j: j.name)
            if job.proxy is None
        }

    @property
    def proxied_jobs(self) -> tuple[JobSettings, ...]:
        return tuple(job for job in self.jobs if job.proxy is not None)

    def proxy_routes(self) -> dict[str, ProxyTarget]:
        """Every proxied job's deployed ID -> its target (DEDUP_PROXY_ROUTES); empty: no
        proxy."""
        return {
            self.job_id(job): job.proxy
            for job in sorted(self.jobs, key=lambda j: j.name)
            if job.proxy is not None
        }


def memory_mib(memory: str) -> int:
    match = _MEMORY.match(memory)
    if match is None:
        raise ValueError(f"{memory!r} is not a memory size like '512Mi' or '1Gi'")
    amount, unit = int(match.group(1)), match.group(2)
    if unit == "Gi":
        return amount * 1024
    if unit == "G":
        return amount * 1000 * 1000 * 1000 // (1024 * 1024)
    if unit == "M":
        return amount * 1000 * 1000 // (1024 * 1024)
    return amount


# --------------------------------------------------------------------------- reading


class _Reader:
    """Collects problems while coercing raw values; `None` marks an invalid field."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def fail(self, key: str, message: str, fix: str) -> None:
        self.problems.append(Problem(key, message, fix))

    def integer(
        self, key: str, raw: Any, *, minimum: int | None = None, maximum: int | None = None
    ) -> int | None:
        value: int | None = None
        if isinstance(raw, bool):
            value = None
        elif isinstance(raw, int):
            value = raw
        elif (isinstance(raw, float) and raw.is_integer()) or (
            isinstance(raw, str) and _INT_STRING.match(raw)
        ):
            value = int(raw)
        if value is None:
            self.fail(key, f"{raw!r} is not a whole number", "give an integer, e.g. 600")
            return None
        bounds = _bounds_text(minimum, maximum)
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            self.fail(key, f"{value} is out of range", f"use a value {bounds}")
            return None
        return value

    def boolean(self, key: str, raw: Any) -> bool | None:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true"
        self.fail(key, f"{raw!r} is not a boolean", "use true or false")
        return None

    def string(
        self, key: str, raw: Any, *, pattern: re.Pattern[str] | None = None, fix: str = ""
    ) -> str | None:
        if not isinstance(raw, str) or not raw.strip():
            self.fail(key, f"{raw!r} is not a non-empty string", fix or "give a string value")
            return None
        if pattern is not None and not pattern.match(raw):
            self.fail(key, f"{raw!r} is not valid", fix)
            return None
        return raw

    def mapping(
        self, key: str, raw: Any, known: frozenset[str], what: str, fix: str
    ) -> Mapping[str, Any] | None:
        """`raw` if it is a mapping (each key not in `known` is reported as not `what`)."""
        if not isinstance(raw, Mapping):
            self.fail(key, f"{raw!r} is not a mapping", fix)
            return None
        for name in raw:
            if name not in known:
                self.fail(f"{key}.{name}", f"is not {what}", _unknown_key_fix(str(name), known))
        return raw

    def not_more_than(
        self, key: str, value: int | None, limit: int | None, limit_key: str, fix: str
    ) -> None:
        """`value` (at `key`) <= `limit` (the setting `limit_key`), once both are valid."""
        if value is not None and limit is not None and value > limit:
            self.fail(key, f"{value} is more than {limit_key} ({limit})", fix)


@dataclass(frozen=True)
class _KitSettings:
    """The kit's own keys of one stack (short names, with DEFAULTS), read through `r`."""

    r: _Reader
    values: Mapping[str, Any]

    def raw(self, name: str) -> Any:
        return self.values.get(name, DEFAULTS.get(name))

    def integer(
        self, name: str, *, minimum: int | None = None, maximum: int | None = None
    ) -> int | None:
        return self.r.integer(kit_key(name), self.raw(name), minimum=minimum, maximum=maximum)

    def boolean(self, name: str) -> bool | None:
        return self.r.boolean(kit_key(name), self.raw(name))

    def string(self, name: str, *, pattern: re.Pattern[str] | None = None, fix: str) -> str | None:
        return self.r.string(kit_key(name), self.raw(name), pattern=pattern, fix=fix)


def _bounds_text(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"from {minimum} to {maximum}"
    if minimum is not None:
        return f">= {minimum}"
    return f"<= {maximum}"


def _parse_structure(raw: Any) -> Any:
    """Objects and lists arrive from the Pulumi engine as JSON strings."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def _unknown_key_fix(key: str, known: frozenset[str]) -> str:
    close = difflib.get_close_matches(key, sorted(known), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{hint}known keys: {', '.join(sorted(known))}"


def load_config(values: Mapping[str, Any]) -> StackConfig:
    """Validate a stack's config mapping and return the typed config.

    `values` maps full keys (`"gcp:project"`, `"scheduler-dedup:leaseSeconds"`) to native
    or string values. Keys of other namespaces (e.g. `gcp:zone`) are ignored. Raises
    `ConfigError` listing every problem.
    """
    r = _Reader()
    given: dict[str, Any] = {}
    for full_key, value in values.items():
        namespace, _, name = full_key.partition(":")
        if namespace != PROJECT_NAME:
            continue
        if name not in KIT_KEYS:
            r.fail(full_key, "is not a setting of the kit", _unknown_key_fix(name, KIT_KEYS))
            continue
        given[name] = value
    kit = _KitSettings(r, given)

    # Google Cloud project and region (the gcp provider's own keys).
    project = _provider_setting(r, values, GCP_PROJECT_KEY)
    region = _provider_setting(r, values, GCP_REGION_KEY)

    name_prefix = kit.string(
        "namePrefix",
        pattern=_NAME_PREFIX,
        fix="use 4-22 lowercase letters, digits or hyphens, starting with a letter and "
        "ending with a letter or digit (it names every project-unique resource: functions, "
        "service accounts, bucket, repository, Scheduler jobs and, by default, the database)",
    )
    dedup = _read_dedup(kit, region, name_prefix)
    function = _read_function(kit)
    default_logic = dedup.default_job_logic if dedup is not None else None
    jobs = _read_jobs(r, kit.raw("jobs"), default_logic, project, name_prefix)
    proxy_timeout = kit.integer("proxyTimeoutSeconds", minimum=1, maximum=PROXY_TIMEOUT_MAX_SECONDS)
    iam_propagation = kit.integer(
        "iamPropagationSeconds", minimum=0, maximum=IAM_PROPAGATION_MAX_SECONDS
    )

    if r.problems:
        raise ConfigError(r.problems)
    assert project is not None and region is not None and name_prefix is not None
    assert dedup is not None and function is not None and jobs is not None
    assert proxy_timeout is not None and iam_propagation is not None
    _check_cross_field(r, dedup, function, jobs)
    _check_proxy_timeout(r, proxy_timeout, dedup, jobs)
    if r.problems:
        raise ConfigError(r.problems)
    return StackConfig(
        project=project,
        region=region,
        name_prefix=name_prefix,
        dedup=dedup,
        function=function,
        jobs=jobs,
        proxy_timeout_seconds=proxy_timeout,
        iam_propagation_seconds=iam_propagation,
    )


def _provider_setting(r: _Reader, values: Mapping[str, Any], key: str) -> str | None:
    """A required key of the gcp provider (see _PROVIDER_KEYS)."""
    pattern, what, set_with, fix = _PROVIDER_KEYS[key]
    raw = values.get(key)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        r.fail(key, "is not set", set_with)
        return None
    value = r.string(key, raw, fix=set_with)
    if value is not None and not pattern.match(value):
        r.fail(key, f"{value!r} is not {what}", fix)
        return None
    return value


def _read_dedup(
    kit: _KitSettings, region: str | None, name_prefix: str | None
) -> DedupSettings | None:
    r = kit.r
    start = len(r.problems)
    database = _read_database_name(kit, name_prefix)
    collection = kit.string(
        "collection",
        pattern=_COLLECTION_ID,
        fix="use a collection ID of letters, digits, '_' or '-' (at most 100), e.g. scheduler_runs",
    )
    if collection is not None and collection.startswith("__") and collection.endswith("__"):
        r.fail(
            kit_key("collection"),
            f"{collection!r} is reserved by Firestore",
            "choose an ID that does not start and end with '__'",
        )
    location: str | None = region
    if kit.raw("firestoreLocation") is not None:
        location = kit.string(
            "firestoreLocation",
            pattern=_FIRESTORE_LOCATION,
            fix="use a Firestore location such as europe-west1, eur3 or nam5 "
            "(or leave it unset to use gcp:region)",
        )
    delete_protection = kit.boolean("deleteProtection")
    pitr = kit.boolean("pointInTimeRecovery")
    lease = kit.integer("leaseSeconds", minimum=1)
    retention = kit.integer("retentionSeconds", minimum=60)
    missing = kit.raw("missingScheduleTime")
    if missing not in MISSING_SCHEDULE_TIME_MODES:
        r.fail(
            kit_key("missingScheduleTime"),
            f"{missing!r} is not a mode",
            "use 'reject' (answer 400 to a delivery without X-CloudScheduler-ScheduleTime) "
            "or 'run' (run it without dedup)",
        )
    default_logic = kit.string(
        "defaultJobLogic",
        pattern=_JOB_LOGIC,
        fix="use 'module:function' of a module inside function/, e.g. jobs.example:run",
    )
    store_timeout = kit.integer("storeTimeoutSeconds", minimum=1, maximum=STORE_TIMEOUT_MAX_SECONDS)
    cache_size = kit.integer("cacheSize", minimum=0)
    # No location: gcp:region is reported; no database: namePrefix (its default) is.
    if len(r.problems) > start or location is None or database is None:
        return None
    assert collection is not None
    assert delete_protection is not None and pitr is not None
    assert lease is not None and retention is not None and default_logic is not None
    assert store_timeout is not None and cache_size is not None
    return DedupSettings(
        database_name=database,
        collection=collection,
        firestore_location=location,
        delete_protection=delete_protection,
        point_in_time_recovery=pitr,
        lease_seconds=lease,
        retention_seconds=retention,
        missing_schedule_time=str(missing),
        default_job_logic=default_logic,
        store_timeout_seconds=store_timeout,
        cache_size=cache_size,
    )


def _read_database_name(kit: _KitSettings, name_prefix: str | None) -> str | None:
    """`databaseName`: the stack's own Firestore database, named after its namePrefix.

    Unset, it is the prefix itself. A database ID is unique in its project: a name that
    does not carry the stack's prefix would let two stacks sharing a project pick the same
    database, share records and fight over its TTL policy; `(default)` is the project's
    one default database, which the program would try to create (and own).
    """
    r = kit.r
    if kit.raw("databaseName") is None:
        return name_prefix  # None: namePrefix itself is invalid and already reported
    database = kit.string(
        "databaseName",
        fix="use a Firestore database ID: 4-63 lowercase letters, digits or hyphens, "
        "starting with a letter, or leave it unset to use namePrefix",
    )
    if database is None:
        return None
    if database == "(default)":
        r.fail(
            kit_key("databaseName"),
            "'(default)' is the project's default database, which the program would create "
            "and own, and which no second stack in the project could have",
            "leave databaseName unset (it defaults to namePrefix) or use a named database "
            "that starts with namePrefix",
        )
        return None
    if not _DATABASE_ID.match(database) or _UUID_LIKE.match(database):
        r.fail(
            kit_key("databaseName"),
            f"{database!r} is not a valid Firestore database ID",
            "use 4-63 lowercase letters, digits or hyphens, starting with a letter and not "
            "UUID-like, e.g. scheduler-dedup",
        )
        return None
    if name_prefix is not None and not (
        database == name_prefix or database.startswith(f"{name_prefix}-")
    ):
        r.fail(
            kit_key("databaseName"),
            f"{database!r} does not carry this stack's namePrefix {name_prefix!r}: database "
            "IDs are unique per project, so two stacks sharing a project could pick the "
            "same database and share its records and TTL policy",
            f"leave databaseName unset (it defaults to {name_prefix!r}) or use "
            f"'{name_prefix}-<suffix>'",
        )
        return None
    return database


def _read_function(kit: _KitSettings) -> FunctionSettings | None:
    r = kit.r
    start = len(r.problems)
    timeout = kit.integer("functionTimeoutSeconds", minimum=1, maximum=FUNCTION_TIMEOUT_MAX_SECONDS)
    memory = kit.string(
        "functionMemory",
        pattern=_MEMORY,
        fix="use a size with a unit Mi or Gi, e.g. 256Mi, 512Mi or 1Gi",
    )
    if memory is not None:
        mib = memory_mib(memory)
        if not FUNCTION_MEMORY_MIN_MIB <= mib <= FUNCTION_MEMORY_MAX_MIB:
            r.fail(
                kit_key("functionMemory"),
                f"{memory!r} is outside what Cloud Run functions allow",
                "use 128Mi up to 32Gi",
            )
    min_instances = kit.integer("minInstances", minimum=0, maximum=MAX_INSTANCES_LIMIT)
    max_instances = kit.integer("maxInstances", minimum=1, maximum=MAX_INSTANCES_LIMIT)
    concurrency = kit.integer(
        "maxRequestConcurrency", minimum=1, maximum=MAX_REQUEST_CONCURRENCY_LIMIT
    )
    r.not_more_than(
        kit_key("minInstances"),
        min_instances,
        max_instances,
        "maxInstances",
        "lower minInstances or raise maxInstances",
    )
    if len(r.problems) > start:
        return None
    assert timeout is not None and memory is not None and concurrency is not None
    assert min_instances is not None and max_instances is not None
    return FunctionSettings(
        timeout_seconds=timeout,
        memory=memory,
        min_instances=min_instances,
        max_instances=max_instances,
        max_request_concurrency=concurrency,
    )


def _read_jobs(
    r: _Reader,
    raw: Any,
    default_logic: str | None,
    project: str | None,
    name_prefix: str | None = None,
) -> tuple[JobSettings, ...] | None:
    key = kit_key("jobs")
    raw = _parse_structure(raw)
    if raw is None:
        r.fail(key, "is not set", "add a list of jobs, each with at least a name and a schedule")
        return None
    if not isinstance(raw, list) or not raw:
        r.fail(key, "is not a non-empty list", "give a list of jobs (mappings with name, schedule)")
        return None
    start = len(r.problems)
    jobs: list[JobSettings] = []
    first_index: dict[str, int] = {}
    for index, entry in enumerate(raw):
        job = _read_job(r, f"{key}[{index}]", entry, default_logic, project)
        if job is None:
            continue
        if job.name in first_index:
            r.fail(
                f"{key}[{index}].name",
                f"{job.name!r} is already the name of jobs[{first_index[job.name]}]",
                "give every job a unique name (it names the Scheduler job, part of the dedup key)",
            )
            continue
        if name_prefix is not None:
            job_id = scheduler_job_id(name_prefix, job.name)
            if len(job_id) > JOB_ID_MAX_LENGTH:
                r.fail(
                    f"{key}[{index}].name",
                    f"makes the Scheduler job ID '<namePrefix>-<name>' {len(job_id)} "
                    f"characters long (at most {JOB_ID_MAX_LENGTH})",
                    f"shorten the name to at most {JOB_ID_MAX_LENGTH - len(name_prefix) - 1} "
                    "characters",
                )
                continue
        first_index[job.name] = index
        jobs.append(job)
    if len(r.problems) > start:
        return None
    return tuple(jobs)


def _read_job(
    r: _Reader, key: str, entry: Any, default_logic: str | None, project: str | None
) -> JobSettings | None:
    start = len(r.problems)
    entry = r.mapping(
        key, entry, JOB_KEYS, "a job setting", "give name, schedule and optional settings"
    )
    if entry is None:
        return None

    name = r.string(
        f"{key}.name",
        entry.get("name"),
        pattern=_JOB_NAME,
        fix="use letters, digits, '-' or '_' (the Cloud Scheduler job ID is "
        "'<namePrefix>-<name>', at most 500 characters)",
    )
    schedule = r.string(
        f"{key}.schedule",
        entry.get("schedule"),
        fix="use a 5-field unix-cron expression, e.g. '*/5 * * * *'",
    )
    if schedule is not None:
        try:
            validate_cron(schedule)
        except ScheduleError as exc:
            r.fail(
                f"{key}.schedule",
                str(exc),
                "use 5 fields 'minute hour day-of-month month day-of-week' such as "
                "'0 3 * * *'; the legacy 'every 5 minutes' form gives no reliable schedule time",
            )
    time_zone = r.string(
        f"{key}.timeZone",
        entry.get("timeZone", DEFAULT_TIME_ZONE),
        fix="use an IANA time zone such as Etc/UTC or Europe/Berlin",
    )
    if time_zone is not None:
        try:
            validate_time_zone(time_zone)
        except ScheduleError as exc:
            r.fail(f"{key}.timeZone", str(exc), "use an IANA name such as Etc/UTC or Europe/Berlin")
    deadline = r.integer(
        f"{key}.attemptDeadlineSeconds",
        entry.get("attemptDeadlineSeconds", ATTEMPT_DEADLINE_DEFAULT_SECONDS),
        minimum=ATTEMPT_DEADLINE_MIN_SECONDS,
        maximum=ATTEMPT_DEADLINE_MAX_SECONDS,
    )
    retry = _read_retry(r, f"{key}.retry", entry.get("retry"))

    body_json: str | None = None
    if entry.get("body") is not None:
        try:
            body_json = json.dumps(
                entry["body"], sort_keys=True, separators=(",", ":"), allow_nan=False
            )
        except (TypeError, ValueError) as exc:
            r.fail(f"{key}.body", f"cannot be sent as JSON ({exc})", "give a JSON value")

    job_logic: str | None = default_logic
    if entry.get("jobLogic") is not None:
        job_logic = r.string(
            f"{key}.jobLogic",
            entry.get("jobLogic"),
            pattern=_JOB_LOGIC,
            fix="use 'module:function' of a module inside function/, e.g. jobs.example:run",
        )
    proxy: ProxyTarget | None = None
    if entry.get("proxy") is not None:
        proxy = _read_proxy(r, f"{key}.proxy", entry["proxy"], project)
        if entry.get("jobLogic") is not None:
            r.fail(
                f"{key}.jobLogic",
                "is set on a job that calls the proxy (proxy: ...), which runs no job logic",
                "remove jobLogic (the proxy starts the downstream target) or remove proxy "
                "(the dedup function runs jobLogic)",
            )
    paused = r.boolean(f"{key}.paused", entry.get("paused", False))
    description = entry.get("description")
    if description is not None and (not isinstance(description, str) or len(description) > 500):
        r.fail(
            f"{key}.description",
            "is not a text of at most 500 characters",
            "give a short text (Cloud Scheduler allows 500 characters)",
        )

    if len(r.problems) > start or job_logic is None:
        return None
    assert name is not None and schedule is not None and time_zone is not None
    assert deadline is not None and retry is not None and paused is not None
    return JobSettings(
        name=name,
        schedule=schedule,
        time_zone=time_zone,
        attempt_deadline_seconds=deadline,
        retry=retry,
        job_logic=job_logic,
        body_json=body_json,
        paused=paused,
        description=description,
        proxy=proxy,
    )


def _read_proxy(r: _Reader, key: str, raw: Any, project: str | None) -> ProxyTarget | None:
    """`jobs[i].proxy`: the downstream target, validated like the proxy validates it."""
    example = (
        "give target (workflow | run_job | build_trigger) and resource, e.g. "
        "{target: workflow, resource: projects/P/locations/L/workflows/W}"
    )
    start = len(r.problems)
    raw = r.mapping(key, raw, PROXY_KEYS, "a proxy setting", example)
    if raw is None:
        return None
    target = raw.get("target")
    if target not in PROXY_TARGETS:
        r.fail(
            f"{key}.target",
            f"{target!r} is not a proxy target",
            f"use one of: {', '.join(PROXY_TARGETS)}",
        )
        target = None
    resource = r.string(f"{key}.resource", raw.get("resource"), fix=example)
    if target is not None and resource is not None:
        match = _PROXY_RESOURCE[target].fullmatch(resource)
        if match is None:
            r.fail(
                f"{key}.resource",
                f"{resource!r} is not a {target} resource name",
                f"use the full name {_PROXY_SHAPE[target]}",
            )
        elif project is not None and match.group(1) != project:
            r.fail(
                f"{key}.resource",
                f"{resource!r} is in project {match.group(1)!r}, not in this stack's project "
                f"{project!r}",
                "target a resource of gcp:project by its project ID (the proxy's roles on the "
                "target are granted in the stack's project)",
            )
    token_name: str | None = None
    if raw.get("tokenName") is not None:
        token_name = r.string(f"{key}.tokenName", raw.get("tokenName"))
        if token_name is not None and target is not None:
            pattern, what = _PROXY_TOKEN_NAME[target]
            if not pattern.fullmatch(token_name):
                r.fail(
                    f"{key}.tokenName",
                    f"{token_name!r} cannot carry the token of a {target} target",
                    f"use {what}",
                )
    container: str | None = None
    if raw.get("container") is not None:
        container = r.string(f"{key}.container", raw.get("container"))
        if container is not None and target is not None and target != PROXY_TARGET_RUN_JOB:
            r.fail(
                f"{key}.container",
                f"applies only to target run_job, not {target}",
                "remove container",
            )
        elif container is not None and not _CONTAINER_NAME.fullmatch(container):
            r.fail(
                f"{key}.container",
                f"{container!r} is not a Cloud Run container name",
                "use the container's name in the job (lowercase letters, digits, '-'), or "
                "leave it unset for the job's first container",
            )
    if len(r.problems) > start or target is None or resource is None:
        return None
    return ProxyTarget(target=target, resource=resource, token_name=token_name, container=container)


def _read_retry(r: _Reader, key: str, raw: Any) -> RetrySettings | None:
    if raw is None:
        return RetrySettings()
    start = len(r.problems)
    raw = r.mapping(
        key, raw, RETRY_KEYS, "a retry setting", "give retryCount, minBackoffSeconds, ..."
    )
    if raw is None:
        return None
    count = r.integer(
        f"{key}.retryCount", raw.get("retryCount", 0), minimum=0, maximum=RETRY_COUNT_MAX
    )
    # Durations are google.protobuf.Duration values: Scheduler documents no bound of its own,
    # the type's range is the API's (see infra.scheduler_rules.DURATION_MAX_SECONDS).
    duration = r.integer(
        f"{key}.maxRetryDurationSeconds",
        raw.get("maxRetryDurationSeconds", 0),
        minimum=0,
        maximum=DURATION_MAX_SECONDS,
    )
    min_backoff = r.integer(
        f"{key}.minBackoffSeconds",
        raw.get("minBackoffSeconds", MIN_BACKOFF_DEFAULT_SECONDS),
        minimum=0,
        maximum=DURATION_MAX_SECONDS,
    )
    max_backoff = r.integer(
        f"{key}.maxBackoffSeconds",
        raw.get("maxBackoffSeconds", MAX_BACKOFF_DEFAULT_SECONDS),
        minimum=0,
        maximum=DURATION_MAX_SECONDS,
    )
    doublings = r.integer(
        f"{key}.maxDoublings",
        raw.get("maxDoublings", MAX_DOUBLINGS_DEFAULT),
        minimum=0,
        maximum=MAX_DOUBLINGS_MAX,
    )
    r.not_more_than(
        f"{key}.minBackoffSeconds",
        min_backoff,
        max_backoff,
        "maxBackoffSeconds",
        "make minBackoffSeconds <= maxBackoffSeconds",
    )
    if len(r.problems) > start:
        return None
    assert count is not None and duration is not None and doublings is not None
    assert min_backoff is not None and max_backoff is not None
    return RetrySettings(
        retry_count=count,
        max_retry_duration_seconds=duration,
        min_backoff_seconds=min_backoff,
        max_backoff_seconds=max_backoff,
        max_doublings=doublings,
    )


def _check_cross_field(
    r: _Reader, dedup: DedupSettings, function: FunctionSettings, jobs: Sequence[JobSettings]
) -> None:
    """Rules that tie settings together; the dedup guarantee depends on each of them."""
    lease, retention = dedup.lease_seconds, dedup.retention_seconds
    # The lease is a liveness window, renewed by a heartbeat while the job runs, not a
    # bound on the job: it need not cover the function timeout or any attempt deadline.
    min_lease = round(min_lease_seconds(dedup.store_timeout_seconds))
    if lease < min_lease:
        r.fail(
            kit_key("leaseSeconds"),
            f"{lease} s is shorter than {LEASE_STORE_TIMEOUTS} x storeTimeoutSeconds "
            f"({min_lease} s): the heartbeat renews the lease every leaseSeconds/3 and a renewal "
            "may take up to storeTimeoutSeconds, so one stalled renewal would still be running "
            "when the next is due, and a running job's claim would not survive two failed "
            "renewals",
            f"set leaseSeconds >= {min_lease} or lower storeTimeoutSeconds",
        )
    if function.timeout_seconds <= dedup.store_timeout_seconds:
        r.fail(
            kit_key("storeTimeoutSeconds"),
            f"{dedup.store_timeout_seconds} s leaves no time for the job within "
            f"functionTimeoutSeconds ({function.timeout_seconds} s)",
            "make storeTimeoutSeconds smaller than functionTimeoutSeconds",
        )
    if retention <= lease:
        r.fail(
            kit_key("retentionSeconds"),
            f"{retention} s is not longer than leaseSeconds ({lease} s): a record would expire "
            "while its run still holds the lease",
            f"set retentionSeconds > {lease}",
        )
    for index, job in enumerate(jobs):
        key = f"{kit_key('jobs')}[{index}]"
        deadline = job.attempt_deadline_seconds
        if function.timeout_seconds < deadline:
            r.fail(
                f"{key}.attemptDeadlineSeconds",
                f"{deadline} s is longer than functionTimeoutSeconds ({function.timeout_seconds}"
                " s): the function would be cut off before Scheduler's deadline",
                f"lower attemptDeadlineSeconds to <= {function.timeout_seconds} or raise "
                "functionTimeoutSeconds",
            )
        window = job.retry_window_seconds
        if retention <= window:
            r.fail(
                kit_key("retentionSeconds"),
                f"{retention} s is not longer than jobs[{index}] ({job.name}) retry window "
                f"({window:.0f} s): a late retry would find no record and run the job again",
                f"set retentionSeconds > {window:.0f} or shorten that job's retries",
            )


def _check_proxy_timeout(
    r: _Reader, proxy_timeout: int, dedup: DedupSettings, jobs: Sequence[JobSettings]
) -> None:
    """One proxied attempt: claim, the start request, record the result, all within the
    attempt deadline, so Scheduler does not give up on an attempt that is still starting."""
    budget = proxy_timeout + 2 * dedup.store_timeout_seconds
    for index, job in enumerate(jobs):
        if job.proxy is None:
            continue
        deadline = job.attempt_deadline_seconds
        if budget >= deadline:
            r.fail(
                kit_key("proxyTimeoutSeconds"),
                f"{proxy_timeout} s plus two Firestore calls (2 x storeTimeoutSeconds = "
                f"{2 * dedup.store_timeout_seconds} s) does not fit in jobs[{index}] "
                f"({job.name}) attemptDeadlineSeconds ({deadline} s): Scheduler would abandon "
                "attempts that are still starting the target",
                (
                    f"set proxyTimeoutSeconds < {room} (or lower storeTimeoutSeconds), or raise "
                    if (room := deadline - 2 * dedup.store_timeout_seconds) > 1
                    else "lower proxyTimeoutSeconds and storeTimeoutSeconds, or raise "
                )
                + f"jobs[{index}].attemptDeadlineSeconds above {budget}",
            )


# --------------------------------------------------------------------------- Pulumi adapter


def config_from_pulumi() -> StackConfig:
    """Read the running stack's config through `pulumi.Config` and validate it."""
    return load_config(pulumi_config_values())


def pulumi_config_values() -> dict[str, Any]:
    """The kit's keys plus gcp:project/gcp:region, as the Pulumi engine gives them."""
    import pulumi

    values: dict[str, Any] = {}
    kit = pulumi.Config(PROJECT_NAME)
    for name in sorted(KIT_KEYS):
        raw = kit.get(name)
        if raw is not None:
            values[kit_key(name)] = raw
    gcp = pulumi.Config("gcp")
    for full_key in (GCP_PROJECT_KEY, GCP_REGION_KEY):
        raw = gcp.get(full_key.split(":", 1)[1])
        if raw is not None:
            values[full_key] = raw
    # Unknown keys of the kit's namespace (typos) are only visible in the raw config map.
    for full_key, raw in _raw_config_map().items():
        if full_key.startswith(f"{PROJECT_NAME}:") and full_key not in values:
            values[full_key] = raw
    return values


def _raw_config_map() -> dict[str, Any]:
    """All config the engine passed, best effort (used only to report unknown keys)."""
    try:
        from pulumi.runtime import config as runtime_config

        merged: dict[str, Any] = dict(runtime_config.get_config_env())
        merged.update(runtime_config.CONFIG.get())
        return merged
    except (ImportError, AttributeError, ValueError):  # pragma: no cover - SDK internals moved
        return {}

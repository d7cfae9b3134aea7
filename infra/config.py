"""The stack configuration, declared once: typed models, read and validated before any resource.

Each setting is one field of a pydantic model below, with its type, bounds, default and a
one-line description. From these models follow the validation (`load_config`), `DEFAULTS`
and, through `make schema` (operator_tools/schema.py), the `config:` block of `Pulumi.yaml`,
docs/configuration.md's reference and `schema/stack.schema.json` for editors.

`load_config(values)` is a pure function over a plain mapping of full config keys
(`"gcp:project"`, `"scheduler-dedup:jobs"`, ...) to values: native YAML values (the `config:`
section of a `Pulumi.<stack>.yaml` file, as the offline plan and the tests feed them) or the
strings the Pulumi engine hands a program (`"600"`, `"true"`, JSON for objects and lists).
`config_from_pulumi()` is the thin adapter from `pulumi.Config`.

Every problem is reported in one `ConfigError`, each naming the key
(`scheduler-dedup:jobs[1].schedule`), what is wrong and the fix. A model's own rules run once
its fields are valid, the rules across models (lease, retention, timeouts, job names) once the
whole stack is, so one typo never cascades into follow-on complaints. Cloud Scheduler's own
rules (cron, time zone, deadline, backoff, retry window) come from `infra.scheduler_rules`,
shared with the policy pack.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Final, Literal, get_args, get_origin
from zoneinfo import available_timezones

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

import infra.source  # noqa: F401  (puts function/ on sys.path: DST defaults are the function's)
from dedup.business_runs import default_dst
from dedup.watchdog.incidents import MAX_THRESHOLD
from infra.scheduler_rules import (
    ATTEMPT_DEADLINE_DEFAULT_SECONDS,
    ATTEMPT_DEADLINE_MAX_SECONDS,
    ATTEMPT_DEADLINE_MIN_SECONDS,
    DURATION_MAX_SECONDS,
    JOB_ID_MAX_LENGTH,
    LEASE_STORE_TIMEOUTS,
    MAX_DOUBLINGS_DEFAULT,
    MAX_DOUBLINGS_MAX,
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
DEFAULT_TIME_ZONE: Final = "Etc/UTC"

# The proxy's downstream targets (function/dedup/proxy/targets.py accepts the same names and
# resource shapes; tests/infra/test_proxy.py checks both agree).
PROXY_TARGET_WORKFLOW: Final = "workflow"
PROXY_TARGET_RUN_JOB: Final = "run_job"
PROXY_TARGET_BUILD_TRIGGER: Final = "build_trigger"
ProxyTargetName = Literal["workflow", "run_job", "build_trigger"]
# Business runs (function/dedup/business_runs.py, SPEC §9): the same names the function takes.
DstRepeated = Literal["once", "each"]
DstSkipped = Literal["shift", "skip"]
ForcedRuns = Literal["separate", "replaceNext", "refuse"]
Overlap = Literal["allow", "forbid", "wait", "replace"]  # dedup.keys.OVERLAP_POLICIES
_DST_REPEATED_TEXT = (
    "A local time that happens twice (the autumn DST change): `once` (one run; a delivery for "
    "the other instant is a duplicate) or `each` (a run per instant)")
_DST_SKIPPED_TEXT = (
    "A local time that does not happen (the spring DST change): `shift` (run at the change) "
    "or `skip` (no run that day)")
_FORCED_RUNS_TEXT = (
    "A forced run (\"Run now\", `gcloud scheduler jobs run`): `separate` (a run of its own; "
    "the scheduled run still runs), `replaceNext` (it is the upcoming scheduled run, whose "
    "delivery is then a duplicate) or `refuse` (400, nothing runs)")
_OVERLAP_TEXT = (
    "A run whose previous run of the same job still runs: `allow` (both run), `forbid` (200, "
    "recorded `skipped`, nothing runs), `wait` (409 until that run ends: Scheduler's retries "
    "start it) or `replace` (that run is asked to stop through claim_lost; 409 until it did)")
_OVERLAP_FIX = "use 'allow', 'forbid', 'wait' or 'replace'"
PROXY_TARGETS: Final[tuple[str, ...]] = get_args(ProxyTargetName)
_PROXY_PROJECT = r"(?:[a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]|[0-9]{1,20}"
_PROXY_PREFIX = rf"projects/({_PROXY_PROJECT})/locations/([a-z][a-z0-9-]{{1,62}})"
# Per target: its resource name and shape, and where the token goes (a workflow argument
# key, a container env var, a user substitution) with how to write it.
_PROXY_RULES: Final[Mapping[str, tuple[re.Pattern[str], str, re.Pattern[str], str]]] = {
    PROXY_TARGET_WORKFLOW: (
        re.compile(rf"{_PROXY_PREFIX}/workflows/([A-Za-z][A-Za-z0-9_-]{{0,127}})"),
        "projects/PROJECT/locations/LOCATION/workflows/WORKFLOW",
        re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}"),
        "an argument key of letters, digits and underscores, e.g. dedup_token",
    ),
    PROXY_TARGET_RUN_JOB: (
        re.compile(rf"{_PROXY_PREFIX}/jobs/([a-z](?:[a-z0-9-]{{0,61}}[a-z0-9])?)"),
        "projects/PROJECT/locations/LOCATION/jobs/JOB",
        re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}"),
        "an environment variable name, e.g. DEDUP_TOKEN",
    ),
    PROXY_TARGET_BUILD_TRIGGER: (
        re.compile(rf"{_PROXY_PREFIX}/triggers/([A-Za-z0-9][A-Za-z0-9_.-]{{0,127}})"),
        "projects/PROJECT/locations/LOCATION/triggers/TRIGGER_ID",
        re.compile(r"_[A-Z0-9_]{1,99}"),
        "a user substitution: '_' then upper-case letters, digits or underscores, "
        "e.g. _DEDUP_TOKEN",
    ),
}
# What the proxy sends beside the token (function/dedup/proxy/targets.py RESERVED_TOKEN_NAMES):
# a tokenName among them would overwrite it, and every run would carry the same token.
PROXY_RESERVED_TOKEN_NAMES: Final[Mapping[str, frozenset[str]]] = {
    PROXY_TARGET_WORKFLOW: frozenset({"job", "schedule_time", "payload"}),
    PROXY_TARGET_RUN_JOB: frozenset({"DEDUP_SCHEDULE_TIME"}),
    PROXY_TARGET_BUILD_TRIGGER: frozenset({"job", "schedule_time"}),
}
_UUID_LIKE = re.compile(r"^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$")
_MEMORY = r"^([1-9][0-9]*)(Mi|Gi|M|G)$"
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_JOB_LOGIC = rf"^{_IDENTIFIER}(\.{_IDENTIFIER})*:{_IDENTIFIER}$"
_INT_STRING = re.compile(r"^\s*-?[0-9]+\s*$")


def kit_key(name: str) -> str:
    """`leaseSeconds` -> `scheduler-dedup:leaseSeconds`."""
    return f"{PROJECT_NAME}:{name}"


def service_account_id(name_prefix: str, role: str) -> str:
    """The kit's service account IDs: `<namePrefix>-<role>` (runtime, build, invoker, proxy,
    watchdog)."""
    return f"{name_prefix}-{role}"


def service_account_email(project: str, account_id: str) -> str:
    """A user-managed service account's e-mail, fixed by its ID and project."""
    return f"{account_id}@{project}.iam.gserviceaccount.com"


def scheduler_job_id(name_prefix: str, job_name: str) -> str:
    """The Cloud Scheduler job ID of `jobs[].name` in a stack: `<namePrefix>-<name>`.

    Job IDs are unique per project and region, so two stacks sharing a project keep apart
    only if the ID carries the stack's prefix. It is what the function receives as
    X-CloudScheduler-JobName, keys the functions' job tables (routes, watch list), and is part of
    every run's dedup key.
    """
    return f"{name_prefix}-{job_name}"


def memory_mib(memory: str) -> int:
    match = re.match(_MEMORY, memory)
    if match is None:
        raise ValueError(f"{memory!r} is not a memory size like '512Mi' or '1Gi'")
    unit_bytes = {"Mi": 2**20, "Gi": 2**30, "M": 10**6, "G": 10**9}[match.group(2)]
    return int(match.group(1)) * unit_bytes // 2**20


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


Loc = tuple[str | int, ...]


class Invalid(ValueError):
    """Raised by a validator: its problems, as (key relative to the value, what, fix)."""

    def __init__(self, problems: Sequence[tuple[Loc, str, str]]) -> None:
        super().__init__("; ".join(message for _, message, _ in problems))
        self.problems = tuple(problems)


class _Problems(list[tuple[Loc, str, str]]):
    def add(self, at: Loc | str, message: str, fix: str) -> None:
        self.append(((at,) if isinstance(at, str) else at, message, fix))

    def raise_any(self) -> None:
        if self:
            raise Invalid(self)


def invalid(message: str, fix: str, at: Loc | str = ()) -> Invalid:
    return Invalid([((at,) if isinstance(at, str) else at, message, fix)])


def checked_cron(schedule: str, example: str) -> str:
    """A job's or the watchdog's unix-cron schedule; the fix names `example` (or fits the
    mistake: a seconds or year field, the legacy "every 5 minutes" form)."""
    try:
        validate_cron(schedule)
    except ScheduleError as exc:
        raise invalid(str(exc), _cron_fix(schedule, example)) from None
    return schedule


def _cron_fix(schedule: str, example: str) -> str:
    fields = schedule.split()
    five = "use the 5 fields 'minute hour day-of-month month day-of-week'"
    if len(fields) in (6, 7):
        # Quartz/croniter style: seconds first (and a year last): unix-cron has neither.
        dropped = " ".join(fields[1:6])
        try:
            validate_cron(dropped)
        except ScheduleError:
            return f"unix-cron has no seconds or year field: {five}, such as {example}"
        return (f"unix-cron has no seconds or year field: drop the first field ('{dropped}'), "
                f"or {five}")
    if schedule.strip().lower().startswith("every"):
        return (f"the legacy 'every 5 minutes' form gives no reliable schedule time: {five}, "
                "e.g. '*/5 * * * *'")
    return f"{five}, such as {example}"


# Time zone names that are abbreviations or fixed offsets, not places: EST, MST and HST
# have no daylight saving time (an "EST" job runs at 07:00 New York time all summer), and
# the POSIX-style ones are legacy aliases. Each maps to the place most likely meant.
_ZONE_ABBREVIATIONS: Final[Mapping[str, str]] = {
    "EST": "America/New_York", "EDT": "America/New_York", "EST5EDT": "America/New_York",
    "CST": "America/Chicago", "CDT": "America/Chicago", "CST6CDT": "America/Chicago",
    "MST": "America/Denver", "MDT": "America/Denver", "MST7MDT": "America/Denver",
    "PST": "America/Los_Angeles", "PDT": "America/Los_Angeles",
    "PST8PDT": "America/Los_Angeles", "HST": "Pacific/Honolulu",
    "CET": "Europe/Berlin", "CEST": "Europe/Berlin", "MET": "Europe/Berlin",
    "EET": "Europe/Athens", "WET": "Europe/Lisbon", "BST": "Europe/London",
    "IST": "Asia/Kolkata", "JST": "Asia/Tokyo", "AEST": "Australia/Sydney",
}
_FIXED_OFFSET_ZONE = re.compile(r"^(?:Etc/)?GMT[+-](?:[1-9]|1[0-4])$")  # not GMT+0: UTC


def checked_time_zone(time_zone: str) -> str:
    """An IANA time zone of a place (or UTC), with a suggestion for a near miss."""
    place = _ZONE_ABBREVIATIONS.get(time_zone.upper())
    if place is not None:
        raise invalid(f"{time_zone!r} is a time zone abbreviation, not a place: it does not "
                      "follow daylight saving time changes the way the place does",
                      f"use the IANA name of the place, e.g. {place}")
    if _FIXED_OFFSET_ZONE.match(time_zone):
        raise invalid(f"{time_zone!r} is a fixed offset without daylight saving time (and "
                      "'Etc/GMT+5' means UTC-5: POSIX inverts the sign)",
                      "use the IANA name of the place, e.g. America/New_York, or Etc/UTC "
                      "with the schedule's hours in UTC")
    try:
        validate_time_zone(time_zone)
    except ScheduleError as exc:
        raise invalid(str(exc), _closest("time zone", time_zone, sorted(available_timezones()))
                      + "use an IANA name such as Etc/UTC or America/New_York") from None
    return time_zone


def _closest(what: str, value: str, known: Sequence[str]) -> str:
    """"did you mean 'X'? " for the closest of `known` (case-insensitive), else ""."""
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(value.lower(), list(by_lower), n=1, cutoff=0.75)
    return f"did you mean {by_lower[close[0]]!r}? " if close else ""


# Firestore's locations (https://cloud.google.com/firestore/docs/locations): its
# multi-regions and the regions it offers. Google adds regions now and then: a location
# missing here is rejected with this list; add it here once Firestore offers it.
FIRESTORE_MULTI_REGIONS: Final = ("eur3", "nam5", "nam7")
FIRESTORE_REGIONS: Final = (
    "africa-south1", "asia-east1", "asia-east2", "asia-northeast1", "asia-northeast2",
    "asia-northeast3", "asia-south1", "asia-south2", "asia-southeast1", "asia-southeast2",
    "asia-southeast3", "australia-southeast1", "australia-southeast2", "europe-central2",
    "europe-north1", "europe-north2", "europe-southwest1", "europe-west1", "europe-west10",
    "europe-west12", "europe-west15", "europe-west2", "europe-west3", "europe-west4",
    "europe-west6", "europe-west8", "europe-west9", "me-central1", "me-central2", "me-west1",
    "northamerica-northeast1", "northamerica-northeast2", "northamerica-south1",
    "southamerica-east1", "southamerica-west1", "us-central1", "us-east1", "us-east4",
    "us-east5", "us-south1", "us-west1", "us-west2", "us-west3", "us-west4",
)
FIRESTORE_LOCATIONS: Final = frozenset((*FIRESTORE_MULTI_REGIONS, *FIRESTORE_REGIONS))


def firestore_location_problem(location: str) -> tuple[str, str] | None:
    """(what is wrong, fix) if `location` is not a Firestore location, else None."""
    if location in FIRESTORE_LOCATIONS:
        return None
    return (f"{location!r} is not a Firestore location",
            _closest("location", location, sorted(FIRESTORE_LOCATIONS)) + "use a region such "
            "as europe-west1 or us-central1, or a multi-region: "
            f"{', '.join(FIRESTORE_MULTI_REGIONS)} (infra/config.py FIRESTORE_REGIONS lists "
            "the regions)")


@dataclass(frozen=True)
class Hint:
    """A field's `json_schema_extra`: how its invalid values are reported beyond type and
    bounds ("'<value>' is not <what>. Fix: <fix>"; `unset_fix` when a required one is
    missing), and `default` for one whose unset value follows another setting's."""

    what: str = "valid"
    fix: str = ""
    unset_fix: str = ""
    default: str = ""
    schema: Mapping[str, Any] | None = None
    also: str | None = None
    """A value the field accepts besides its type (`retry: none`)."""

    def __call__(self, schema: dict[str, Any]) -> None:
        """Pydantic's JSON schema hook: a follower's "" default is no value to suggest."""
        if self.default:
            schema.pop("default", None)
        if self.also is not None:  # the field's own type, or that one value
            own = {k: schema.pop(k) for k in ("$ref", "type") if k in schema}
            schema["anyOf"] = [own, {"const": self.also}]
        schema.update(self.schema or {})


def _to_int(raw: Any) -> Any:
    """Engine strings ("600") and whole floats read as integers; anything else as given."""
    integral = isinstance(raw, float) and raw.is_integer()
    return int(raw) if integral or (isinstance(raw, str) and _INT_STRING.match(raw)) else raw


def _to_bool(raw: Any) -> Any:
    """Engine strings "true"/"false" read as booleans (not "yes", "1", ...)."""
    text = raw.strip().lower() if isinstance(raw, str) else None
    return text == "true" if text in ("true", "false") else raw


Int = Annotated[int, Strict(), BeforeValidator(_to_int)]
Bool = Annotated[bool, Strict(), BeforeValidator(_to_bool)]
_JOB_LOGIC_FIX = "use 'module:function' of a module inside function/, e.g. jobs.send_invoices:run"
CATCH_UP_WITHIN_DEFAULT_SECONDS: Final = 6 * 3600
"""jobs[].catchUpWithinSeconds: a missed run is caught up at most six hours late."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel)
    setting_of: ClassVar[str] = "a setting"
    """What an unknown key of this model is not ("is not a job setting")."""

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, raw: Any) -> Any:
        """A key given as null (YAML `key:` with no value) is unset, as if left out."""
        return {k: v for k, v in raw.items() if v is not None} if isinstance(raw, dict) else raw


# --------------------------------------------------------------------------- the models


class ProxyTarget(_Model):
    """The downstream execution a proxied job starts (`jobs[].proxy`)."""

    setting_of: ClassVar[str] = "a proxy setting"
    target: ProxyTargetName = Field(description="What the proxy starts once per run",
                                    json_schema_extra=Hint("a proxy target"))
    resource: str = Field(
        description="Full name projects/P/locations/L/{workflows/W | jobs/J | triggers/T}, "
        "in gcp:project",
        json_schema_extra=Hint(fix="give the target's full name, e.g. "
                               "projects/P/locations/L/workflows/W (in gcp:project)"))
    token_name: str | None = Field(
        default=None, description="Where the run's token goes: a workflow argument key, a "
        "job's env var or a build `_SUBSTITUTION`; unset: the proxy's default for the target")
    container: str | None = Field(
        default=None, pattern=r"^[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?$",
        description="`run_job` only: the container that gets the token; unset: the first",
        json_schema_extra=Hint("a Cloud Run container name", "use the container's name in the "
                               "job (lowercase letters, digits, '-'), or leave it unset for the "
                               "job's first container"))

    @model_validator(mode="after")
    def _fits_target(self) -> ProxyTarget:
        resource, shape, token, token_what = _PROXY_RULES[self.target]
        problems = _Problems()
        if not resource.fullmatch(self.resource):
            problems.add("resource", f"{self.resource!r} is not a {self.target} resource name",
                         f"use the full name {shape}")
        if self.token_name is not None and not token.fullmatch(self.token_name):
            problems.add("tokenName", f"{self.token_name!r} cannot carry the token of a "
                         f"{self.target} target", f"use {token_what}")
        reserved = PROXY_RESERVED_TOKEN_NAMES[self.target]
        if self.token_name in reserved:
            problems.add("tokenName", f"{self.token_name!r} is reserved: the proxy already "
                         f"sends {', '.join(sorted(reserved))} to a {self.target}",
                         f"use another name, e.g. {token_what.rsplit('e.g. ', 1)[-1]}")
        if self.container is not None and self.target != PROXY_TARGET_RUN_JOB:
            problems.add("container", f"applies only to target run_job, not {self.target}",
                         "remove container")
        problems.raise_any()
        return self

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
        """The job's entry of the proxy's routes table (the keys the proxy reads)."""
        return self.model_dump(by_alias=True, exclude_none=True)


# Durations are google.protobuf.Duration values: Scheduler documents no bound of its own,
# the type's range is the API's (see infra.scheduler_rules.DURATION_MAX_SECONDS).
# The kit's retry defaults, not Cloud Scheduler's (which never retries): a failed run is
# retried 30, 60 and 120 s after its failed attempts, so even an attempt whose instance
# crashed (its claim answers 409 until the 60 s default lease lapses) is taken over by the
# second retry at the latest (policy dedup-retries-outlast-lease). Google documents two
# readings of where retries stop: RetryConfig's API reference says at the next scheduled
# time, the retry guide says only at both limits. Under the first, that holds only for a job
# whose interval is longer than its retries take (90 s to the second retry, by default).
RETRY_COUNT_DEFAULT: Final = 3
RETRY_MIN_BACKOFF_DEFAULT_SECONDS: Final = 30
RETRY_MAX_BACKOFF_DEFAULT_SECONDS: Final = 300
AT_MOST_ONCE: Final = "none"
"""`retry: none`: the job is never retried (at most once)."""


class RetryConfig(_Model):
    """A job's retryConfig (`jobs[].retry`). Unset, the kit's defaults retry a failed or
    crashed run until a retry comes after the crashed attempt's lease has lapsed (three
    retries, 30 s doubling up to 300 s apart), so every run is recovered. (If Scheduler stops
    retrying at the next scheduled time, as RetryConfig's API reference says, that holds
    only for a job whose interval is longer than those retries take; the retry guide says
    retries go on past it.)

    `retry: none` makes the job at most once: a run whose attempt failed or whose instance
    crashed is skipped, not retried. Choose it for a job that must never run late, where a
    late run is worse than none and the next scheduled run does the work anyway (a
    heartbeat, a time-critical notification)."""

    setting_of: ClassVar[str] = "a retry setting"
    retry_count: Int = Field(default=RETRY_COUNT_DEFAULT, ge=0, le=RETRY_COUNT_MAX,
                             description="Retries of a failed run's attempt")
    max_retry_duration_seconds: Int = Field(
        default=0, ge=0, le=DURATION_MAX_SECONDS, description="How long to keep retrying; 0: "
        "unlimited (Scheduler retries until both this and retryCount are reached)")
    min_backoff_seconds: Int = Field(default=RETRY_MIN_BACKOFF_DEFAULT_SECONDS, ge=0,
                                     le=DURATION_MAX_SECONDS,
                                     description="First wait before a retry; <= maxBackoffSeconds")
    max_backoff_seconds: Int = Field(default=RETRY_MAX_BACKOFF_DEFAULT_SECONDS, ge=0,
                                     le=DURATION_MAX_SECONDS,
                                     description="Longest wait before a retry")
    max_doublings: Int = Field(default=MAX_DOUBLINGS_DEFAULT, ge=0, le=MAX_DOUBLINGS_MAX,
                               description="How often the wait doubles before it grows linearly")

    @model_validator(mode="after")
    def _backoffs_in_order(self) -> RetryConfig:
        if self.min_backoff_seconds > self.max_backoff_seconds:
            raise invalid(f"{self.min_backoff_seconds} is more than maxBackoffSeconds "
                          f"({self.max_backoff_seconds})",
                          "make minBackoffSeconds <= maxBackoffSeconds", "minBackoffSeconds")
        return self


def _at_most_once(raw: Any) -> Any:
    """`retry: none` is a retryConfig without any retry."""
    if raw == AT_MOST_ONCE:
        return {"retryCount": 0, "maxRetryDurationSeconds": 0}
    return raw


_FAILURE_THRESHOLD_TEXT = ("How many of the job's runs in a row judged missed, failed or "
                           "overlong open an incident (one notification per streak)")
_RECOVERY_THRESHOLD_TEXT = ("How many completed runs in a row close it (a recovery "
                            "notification); also closes a ran_twice incident")


class JobAlertSettings(_Model):
    """A job's own alert thresholds (`jobs[].alerts`); unset: the stack's `alerts`."""

    setting_of: ClassVar[str] = "a job's alerts setting"
    failure_threshold: Int = Field(  # 0: unset (a given value is validated, the default not)
        default=0, ge=1, le=MAX_THRESHOLD,
        description=f"{_FAILURE_THRESHOLD_TEXT}; unset: alerts.failureThreshold",
        json_schema_extra=Hint(default="alerts.failureThreshold"))
    recovery_threshold: Int = Field(  # 0: unset (a given value is validated, the default not)
        default=0, ge=1, le=MAX_THRESHOLD,
        description=f"{_RECOVERY_THRESHOLD_TEXT}; unset: alerts.recoveryThreshold",
        json_schema_extra=Hint(default="alerts.recoveryThreshold"))


class JobSettings(_Model):
    """One Cloud Scheduler job, served by the stack's dedup function (or its proxy)."""

    setting_of: ClassVar[str] = "a job setting"
    name: str = Field(
        pattern=rf"^[A-Za-z0-9_-]{{1,{JOB_ID_MAX_LENGTH}}}$",
        description="Unique in the stack; the Scheduler job ID is `<namePrefix>-<name>`, at "
        f"most {JOB_ID_MAX_LENGTH} characters",
        json_schema_extra=Hint("a job name", "use letters, digits, '-' or '_' (the Cloud "
                               "Scheduler job ID is '<namePrefix>-<name>', at most 500 "
                               "characters)"))
    schedule: str = Field(
        description="5-field unix-cron (not the legacy \"every 5 minutes\" form)",
        json_schema_extra=Hint(fix="use a 5-field unix-cron expression, e.g. '*/5 * * * *'"))
    time_zone: str = Field(default=DEFAULT_TIME_ZONE, description="IANA time zone name")
    attempt_deadline_seconds: Int = Field(
        default=ATTEMPT_DEADLINE_DEFAULT_SECONDS, ge=ATTEMPT_DEADLINE_MIN_SECONDS,
        le=ATTEMPT_DEADLINE_MAX_SECONDS,
        description="How long Scheduler waits for one attempt; <= functionTimeoutSeconds")
    retry_config: Annotated[RetryConfig, BeforeValidator(_at_most_once)] = Field(
        default_factory=RetryConfig, alias="retry",
        description="Scheduler's retryConfig; unset: 3 retries 30..300 s apart; `none`: never "
        "retried (at most once, for a job that must never run late)",
        json_schema_extra=Hint(also=AT_MOST_ONCE))
    body: Any = Field(default=None, description="JSON value POSTed as `application/json`")
    job_logic: str = Field(
        default="", pattern=_JOB_LOGIC,
        description="`module:function` inside `function/` that runs the job; not with `proxy`",
        json_schema_extra=Hint("a module:function", _JOB_LOGIC_FIX, default="defaultJobLogic"))
    """The effective `module:function` (the job's own, or the stack's defaultJobLogic).
    Unused for a proxied job, which runs no job logic of its own."""
    paused: Bool = Field(default=False, description="Deploy the job paused")
    description: str | None = Field(
        default=None, max_length=500, description="The Scheduler job's description; unset: "
        "generated",
        json_schema_extra=Hint(fix="give a short text (Cloud Scheduler allows 500 characters)"))
    proxy: ProxyTarget | None = Field(
        default=None, description="Start a Google Cloud execution once per run through the "
        "idempotent proxy (its own function and account) instead of running jobLogic")
    dst_repeated: DstRepeated | None = Field(
        default=None, description=f"{_DST_REPEATED_TEXT}; unset: the stack's dstRepeated, "
        "else as BSD cron -s: `each` when the minute or hour field starts with `*`, else `once`",
        json_schema_extra=Hint("a DST choice", "use 'once' or 'each'", default="dstRepeated"))
    dst_skipped: DstSkipped | None = Field(
        default=None, description=f"{_DST_SKIPPED_TEXT}; unset: the stack's dstSkipped, else "
        "as BSD cron -s: `skip` when the minute or hour field starts with `*`, else `shift`",
        json_schema_extra=Hint("a DST choice", "use 'shift' or 'skip'", default="dstSkipped"))
    forced_runs: ForcedRuns | None = Field(
        default=None, description=f"{_FORCED_RUNS_TEXT}; unset: the stack's forcedRuns",
        json_schema_extra=Hint("a forced-run choice", "use 'separate', 'replaceNext' or "
                               "'refuse'", default="forcedRuns"))
    overlap: Overlap | None = Field(
        default=None, description=f"{_OVERLAP_TEXT}; unset: the stack's overlap",
        json_schema_extra=Hint("an overlap policy", _OVERLAP_FIX, default="overlap"))
    catch_up: Bool = Field(
        default=False, description="The watchdog delivers a missed run itself (late, with its "
        "original schedule time, exactly once); not for runs that must not execute late")
    catch_up_within_seconds: Int = Field(
        default=CATCH_UP_WITHIN_DEFAULT_SECONDS, ge=60, le=DURATION_MAX_SECONDS,
        description="With catchUp: only a run scheduled at most this long ago is caught up; "
        "> the job's retry window + watchdog.graceSeconds, < watchdog.lookbackSeconds")
    alerts: JobAlertSettings = Field(
        default_factory=JobAlertSettings, description="The job's own alert thresholds "
        "(failureThreshold, recoveryThreshold); unset: the stack's alerts")

    @field_validator("schedule")
    @classmethod
    def _unix_cron(cls, schedule: str) -> str:
        return checked_cron(schedule, "'0 3 * * *'")

    @field_validator("time_zone")
    @classmethod
    def _iana(cls, time_zone: str) -> str:
        return checked_time_zone(time_zone)

    @field_validator("body")
    @classmethod
    def _json(cls, body: Any) -> Any:
        try:
            json.dumps(body, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise invalid(f"cannot be sent as JSON ({exc})", "give a JSON value") from None
        return body

    @model_validator(mode="after")
    def _proxy_runs_no_logic(self) -> JobSettings:
        if self.proxy is not None and self.job_logic:
            raise invalid("is set on a job that calls the proxy (proxy: ...), which runs no "
                          "job logic", "remove jobLogic (the proxy starts the downstream "
                          "target) or remove proxy (the dedup function runs jobLogic)",
                          "jobLogic")
        return self

    @property
    def retry(self) -> RetrySettings:
        return RetrySettings(**self.retry_config.model_dump())  # the same field names

    @property
    def body_json(self) -> str | None:
        """Canonical JSON of the body (sorted keys, compact), or None for no body."""
        if self.body is None:
            return None
        return json.dumps(self.body, sort_keys=True, separators=(",", ":"), allow_nan=False)

    @property
    def retry_window_seconds(self) -> float:
        return retry_window_seconds(self.attempt_deadline_seconds, self.retry)


class FunctionSettings(_Model):
    """The Cloud Run function (2nd gen) that serves every job."""

    timeout_seconds: Int = Field(  # le: 2nd gen HTTP functions
        default=540, ge=1, le=3600, alias="functionTimeoutSeconds", description="Request "
        "timeout of the function; >= every job's attemptDeadlineSeconds, > storeTimeoutSeconds")
    memory: str = Field(
        default="512Mi", pattern=_MEMORY, alias="functionMemory",
        description="Memory per instance, 128Mi..32Gi (unit Mi or Gi)",
        json_schema_extra=Hint("a memory size", "use a size with a unit Mi or Gi, e.g. 256Mi, "
                               "512Mi or 1Gi"))
    min_instances: Int = Field(default=0, ge=0, le=1000, description="Minimum instances of "
                               "the dedup function (0 scales to zero; the proxy and the "
                               "watchdog always do); <= maxInstances")
    max_instances: Int = Field(default=10, ge=1, le=1000, description="Maximum instances")
    max_request_concurrency: Int = Field(
        default=1, ge=1, le=1000,
        description="Concurrent requests per instance (above 1 the function gets a whole CPU)")

    @field_validator("memory")
    @classmethod
    def _memory_in_range(cls, memory: str) -> str:
        if not 128 <= memory_mib(memory) <= 32768:
            raise invalid(f"{memory!r} is outside what Cloud Run functions allow",
                          "use 128Mi up to 32Gi")
        return memory

    @model_validator(mode="after")
    def _instances_in_order(self) -> FunctionSettings:
        if self.min_instances > self.max_instances:
            raise invalid(f"{self.min_instances} is more than maxInstances "
                          f"({self.max_instances})", "lower minInstances or raise maxInstances",
                          "minInstances")
        return self

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


PROXY_DATABASE_SUFFIX: Final = "-proxy"
WATCH_DATABASE_SUFFIX: Final = "-watchdog"
DATABASE_ID_MAX_LENGTH: Final = 63


def proxy_database_of(database_name: str) -> str:
    """The proxy's own database beside the dedup database `database_name`."""
    return f"{database_name}{PROXY_DATABASE_SUFFIX}"


def watch_database_of(database_name: str) -> str:
    """The watchdog's own database (its cursors, the re-run requests) beside it."""
    return f"{database_name}{WATCH_DATABASE_SUFFIX}"


class DedupSettings(_Model):
    """The dedup records: where they live and how long leases and records last."""

    database_name: str = Field(
        default="", pattern=r"^[a-z][a-z0-9-]{2,61}[a-z0-9]$",
        description="Firestore database ID of the records (4-63 lowercase): `namePrefix` or "
        "`<namePrefix>-…`, not `(default)`; the proxy's own records are in "
        "`<databaseName>-proxy` (then at most 57), the watchdog's cursors and re-run "
        "requests in `<databaseName>-watchdog` (then at most 54)",
        json_schema_extra=Hint("a valid Firestore database ID", "use 4-63 lowercase letters, "
                               "digits or hyphens, starting with a letter and not UUID-like, "
                               "e.g. scheduler-dedup", default="namePrefix"))
    collection: str = Field(
        default="scheduler_runs", pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,99}$",
        description="Collection of the dedup records; the TTL policy is on its expire_at field",
        json_schema_extra=Hint("a collection ID", "use a collection ID of letters, digits, '_' "
                               "or '-' (at most 100), e.g. scheduler_runs"))
    firestore_location: str = Field(
        default="", pattern=r"^[a-z][a-z0-9-]*[a-z0-9]$",
        description="Firestore location of the database, e.g. eur3, nam5",
        json_schema_extra=Hint("a Firestore location", "use a Firestore location such as "
                               "europe-west1, eur3 or nam5 (or leave it unset to use gcp:region)",
                               default="gcp:region"))
    delete_protection: Bool = Field(default=True, description="Firestore delete protection, "
                                    "and Pulumi `protect` on the database")
    # Fail closed: a stack is reviewed unless its file says otherwise (not derived from
    # deleteProtection, whose removal would then also remove the reviewer).
    review_before_up: Bool = Field(
        default=True, description="CI's `pulumi up` of this stack waits for a reviewer (it runs "
        "in the GitHub environment `production`, which has required reviewers) and pull "
        "requests never preview it; `false` for a stack that deploys on every push to main "
        "(the environment `dev`)")
    point_in_time_recovery: Bool = Field(default=False, description="Firestore point-in-time "
                                         "recovery (7 days of versions)")
    lease_seconds: Int = Field(
        default=60, ge=1,
        description=f"Lease of an in-progress run, >= {LEASE_STORE_TIMEOUTS} x storeTimeoutSeconds:"
        " a liveness window the heartbeat renews every lease/3 while the job runs, so it may be "
        "shorter than functionTimeoutSeconds and any attemptDeadlineSeconds",
    )
    retention_seconds: Int = Field(default=604800, ge=60, description="How long a record lives "
                                   "(expire_at); > leaseSeconds and every job's retry window")
    missing_schedule_time: Literal["reject", "run"] = Field(
        default="reject",
        description="A delivery without X-CloudScheduler-ScheduleTime: `reject` (400) or `run` "
        "(without dedup)",
        json_schema_extra=Hint("a mode", "use 'reject' (answer 400 to a delivery without "
                               "X-CloudScheduler-ScheduleTime) or 'run' (run it without dedup)"))
    dst_repeated: DstRepeated | None = Field(
        default=None, description=f"Every job's default: {_DST_REPEATED_TEXT}; unset: as BSD "
        "cron -s, per job (see jobs[].dstRepeated)",
        json_schema_extra=Hint("a DST choice", "use 'once' or 'each'", default="BSD cron -s"))
    dst_skipped: DstSkipped | None = Field(
        default=None, description=f"Every job's default: {_DST_SKIPPED_TEXT}; unset: as BSD "
        "cron -s, per job (see jobs[].dstSkipped)",
        json_schema_extra=Hint("a DST choice", "use 'shift' or 'skip'", default="BSD cron -s"))
    forced_runs: ForcedRuns = Field(
        default="separate", description=f"Every job's default: {_FORCED_RUNS_TEXT}",
        json_schema_extra=Hint("a forced-run choice", "use 'separate', 'replaceNext' or "
                               "'refuse'"))
    overlap: Overlap = Field(
        default="allow", description=f"Every job's default: {_OVERLAP_TEXT}. `allow`: no "
        "extra Firestore RPC; the others cost 3 more per run (docs/operations.md)",
        json_schema_extra=Hint("an overlap policy", _OVERLAP_FIX))
    default_job_logic: str = Field(
        default="example_jobs.example:run", pattern=_JOB_LOGIC,
        description="`module:function` inside `function/` for jobs without their own jobLogic",
        json_schema_extra=Hint("a module:function", _JOB_LOGIC_FIX))
    store_timeout_seconds: Int = Field(default=10, ge=1, le=60, description="Bound on any "
                                       "Firestore call; < functionTimeoutSeconds, <= "
                                       "leaseSeconds / 3")
    cache_size: Int = Field(default=10000, ge=0, description="Completed runs remembered per "
                            "instance (0 turns the cache off)")
    forced_run_margin_seconds: Int = Field(
        default=10, ge=0, le=3600,
        description="A delivery whose schedule time is more than this ahead of the function's "
        "clock is a forced run (\"Run now\"), deduplicated apart from the scheduled run of "
        "that time")

    @property
    def proxy_database_name(self) -> str:
        """The idempotent proxy's own database: `<databaseName>-proxy`. Firestore IAM
        conditions name databases, not collections, so only a database of its own keeps the
        dedup function's job code from writing (forging) a proxied job's records."""
        return proxy_database_of(self.database_name)

    @property
    def watch_database_name(self) -> str:
        """The watchdog's own database: `<databaseName>-watchdog`, its cursors and the
        re-run queue, which only its account and the operators (`make rerun`) write: job
        code, which can write the dedup database, can neither blind the watchdog nor ask it
        for runs."""
        return watch_database_of(self.database_name)

    @field_validator("firestore_location")
    @classmethod
    def _a_firestore_location(cls, location: str) -> str:
        if location and (wrong := firestore_location_problem(location)) is not None:
            raise invalid(*wrong)
        return location

    @field_validator("database_name", mode="before")
    @classmethod
    def _not_the_default_database(cls, database: Any) -> Any:
        if database == "(default)":
            raise invalid("'(default)' is the project's default database, which the program "
                          "would create and own, and which no second stack in the project "
                          "could have", "leave databaseName unset (it defaults to namePrefix) "
                          "or use a named database that starts with namePrefix")
        return database

    @field_validator("database_name")
    @classmethod
    def _not_uuid_like(cls, database: str) -> str:
        if _UUID_LIKE.match(database):
            raise invalid(f"{database!r} is not a valid Firestore database ID",
                          "use a name that is not UUID-like, e.g. scheduler-dedup")
        return database

    @field_validator("collection")
    @classmethod
    def _not_reserved(cls, collection: str) -> str:
        if collection.startswith("__") and collection.endswith("__"):
            raise invalid(f"{collection!r} is reserved by Firestore",
                          "choose an ID that does not start and end with '__'")
        return collection

    @model_validator(mode="after")
    def _records_outlive_leases(self) -> DedupSettings:
        lease, retention = self.lease_seconds, self.retention_seconds
        # The lease is a liveness window, renewed by a heartbeat while the job runs, not a
        # bound on the job: it need not cover the function timeout or any attempt deadline.
        min_lease = round(min_lease_seconds(self.store_timeout_seconds))
        problems = _Problems()
        if lease < min_lease:
            problems.add("leaseSeconds", f"{lease} s is shorter than {LEASE_STORE_TIMEOUTS} x "
                         f"storeTimeoutSeconds ({min_lease} s): the heartbeat renews the lease "
                         "every leaseSeconds/3 and a renewal may take up to storeTimeoutSeconds,"
                         " so one stalled renewal would still be running when the next is due, "
                         "and a running job's claim would not survive two failed renewals",
                         f"set leaseSeconds >= {min_lease} or lower storeTimeoutSeconds")
        if retention <= lease:
            problems.add("retentionSeconds", f"{retention} s is not longer than leaseSeconds "
                         f"({lease} s): a record would expire while its run still holds the "
                         "lease", f"set retentionSeconds > {lease}")
        problems.raise_any()
        return self


WATCHDOG_JOB_NAME: Final = "watchdog"
"""The watchdog's role name: its Scheduler job `<namePrefix>-watchdog`, its function and its
runtime account of the same name (so no `jobs[].name` may be `watchdog`)."""
SERVICE_ACCOUNT_ID_MAX_LENGTH: Final = 30
WATCHDOG_LOOKBACK_DEFAULT_SECONDS: Final = 172800
"""Two days; an unset lookback is this, or half the records' retention if that is less."""
_EMAIL_ADDRESS = (r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
                  r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+$")
EmailAddress = Annotated[str, Field(pattern=_EMAIL_ADDRESS)]


class WatchdogSettings(_Model):
    """The run watchdog (`watchdog`): its own function, account and Scheduler job, which
    reports missed, failed, overlong and never-run runs of the stack's jobs."""

    setting_of: ClassVar[str] = "a watchdog setting"
    enabled: Bool = Field(default=True, description="Deploy the watchdog (its function, "
                          "account, Scheduler job) and its alerts")
    schedule: str = Field(
        default="*/10 * * * *", description="How often the watchdog runs: 5-field unix-cron",
        json_schema_extra=Hint(fix="use a 5-field unix-cron expression, e.g. '*/10 * * * *'"))
    time_zone: str = Field(default=DEFAULT_TIME_ZONE, description="IANA time zone of "
                           "`schedule`")
    lookback_seconds: Int = Field(
        default=0, ge=3600, le=DURATION_MAX_SECONDS, description="How far back a tick "
        "judges runs at most (bounds the catch-up after the watchdog itself was down); < "
        "retentionSeconds, so no record expires before it is judged",
        json_schema_extra=Hint(default=f"min({WATCHDOG_LOOKBACK_DEFAULT_SECONDS}, "
                               "retentionSeconds / 2)"))
    grace_seconds: Int = Field(default=300, ge=0, le=86400, description="Slack after a run's "
                               "retry window (or attempt deadline) before it is reported")
    reruns: Bool = Field(default=False, description="The watchdog delivers operator re-runs "
                         "(`make rerun`): it may then invoke the stack's functions, as for "
                         "jobs with catchUp")
    backfill_runs_per_tick: Int = Field(
        default=20, ge=1, le=1000, description="At most this many runs of a job's backfill "
        "(`make backfill`) are released per watchdog tick")
    backfill_in_flight: Int = Field(
        default=1, ge=1, le=100, description="Runs of a job's backfill delivered and not "
        "finished at once; 1 never runs two of them side by side: raise it only for a job "
        "whose runs may overlap")

    @field_validator("schedule")
    @classmethod
    def _unix_cron(cls, schedule: str) -> str:
        return checked_cron(schedule, "'*/10 * * * *'")

    @field_validator("time_zone")
    @classmethod
    def _iana(cls, time_zone: str) -> str:
        return checked_time_zone(time_zone)


class AlertSettings(_Model):
    """Where the stack's alert policies notify (`alerts`)."""

    setting_of: ClassVar[str] = "an alerts setting"
    emails: tuple[EmailAddress, ...] = Field(
        default=(), description="E-mail addresses notified by every alert policy (one "
        "notification channel each); a deletion-protected stack needs at least one",
        json_schema_extra=Hint("an e-mail address", "use addresses like oncall@example.com"))
    failure_threshold: Int = Field(
        default=1, ge=1, le=MAX_THRESHOLD,
        description=f"Every job's default: {_FAILURE_THRESHOLD_TEXT}; never_ran and "
        "ran_twice open one at once")
    recovery_threshold: Int = Field(
        default=1, ge=1, le=MAX_THRESHOLD,
        description=f"Every job's default: {_RECOVERY_THRESHOLD_TEXT}")

    @field_validator("emails")
    @classmethod
    def _unique(cls, emails: tuple[str, ...]) -> tuple[str, ...]:
        lowered = [e.lower() for e in emails]
        for index, email in enumerate(lowered):
            if email in lowered[:index]:
                raise invalid(f"{emails[index]!r} is listed twice", "list every address once",
                              (index,))
        return emails


GROUPS: Final[Mapping[str, type[BaseModel]]] = {
    "<dedup>": DedupSettings,
    "<function>": FunctionSettings,
}
"""Models whose keys sit flat in the stack config, grouped for the program (`cfg.dedup`)."""


class StackConfig(_Model):
    """Everything the program needs, validated."""

    setting_of: ClassVar[str] = "a setting of the kit"
    project: str = Field(
        alias=GCP_PROJECT_KEY, pattern=r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$",
        description="Google Cloud project ID (not its name or number)",
        json_schema_extra=Hint("a Google Cloud project ID", "use the project ID (6-30 "
                               "lowercase letters, digits, hyphens), not its name or number",
                               "pulumi config set gcp:project <project-id>"))
    region: str = Field(
        alias=GCP_REGION_KEY, pattern=r"^[a-z]+-[a-z]+[0-9]+$",
        description="Google Cloud region (not a zone), e.g. `europe-west1`",
        json_schema_extra=Hint("a Google Cloud region", "use a region such as europe-west1 or "
                               "us-central1 (not a zone)",
                               "pulumi config set gcp:region europe-west1"))
    name_prefix: str = Field(
        default="scheduler-dedup", pattern=r"^[a-z][a-z0-9-]{2,20}[a-z0-9]$",
        description="4-22 of `a-z0-9-`, starts with a letter, ends with a letter or digit. Names "
        "every project-unique resource: functions `<prefix>` and `<prefix>-proxy`, service "
        "accounts `<prefix>-runtime/-build/-invoker/-proxy`, bucket `<project>-<prefix>-source`,"
        " repository `<prefix>-builds`, Scheduler job IDs `<prefix>-<jobs[].name>`, the proxy's "
        "custom role, and by default the database. Stacks sharing a project need different "
        "prefixes, neither the other's followed by `-`",
        json_schema_extra=Hint("a valid name prefix", "use 4-22 lowercase letters, digits or "
                               "hyphens, starting with a letter and ending with a letter or digit"
                               " (it names every project-unique resource: functions, service "
                               "accounts, bucket, repository, Scheduler jobs and, by default, "
                               "the database)"))
    dedup: DedupSettings = Field(default_factory=DedupSettings, alias="<dedup>")
    function: FunctionSettings = Field(default_factory=FunctionSettings, alias="<function>")
    token_secret_readers: list[EmailAddress] = Field(
        default=[], description="Service accounts of the downstream services that check the "
        "proxy's tokens (IdempotencyGuard): each may read the stack's token secret",
        json_schema_extra=Hint("a service account e-mail", "list the downstream services' "
                               "runtime accounts, e.g. reports@my-project.iam.gserviceaccount.com"))
    proxy_timeout_seconds: Int = Field(  # le: the proxy's own DEDUP_PROXY_TIMEOUT_SECONDS bound
        default=30, ge=1, le=600, description="Bound on the proxy's one start request to a "
        "workflow, Cloud Run job or build trigger; plus 2 x storeTimeoutSeconds below every "
        "proxied job's attemptDeadlineSeconds")
    # The wait for IAM grants to propagate before the functions deploy (infra/iam_wait.py):
    # Google documents that a grant usually takes effect within 2 minutes, sometimes 7 or more.
    iam_propagation_seconds: Int = Field(
        default=120, ge=0, le=900, description="The wait after the accounts' IAM grants before "
        "the functions deploy (on the first `pulumi up`, and when accounts are replaced)")
    watchdog: WatchdogSettings = Field(default_factory=WatchdogSettings,
                                       description="The run watchdog")
    alerts: AlertSettings = Field(default_factory=AlertSettings,
                                  description="Alert notification channels and thresholds")
    jobs: tuple[JobSettings, ...] = Field(
        description="The Cloud Scheduler jobs: at least one, names unique",
        json_schema_extra=Hint(fix="give a list of jobs, each with at least a name and a "
                               "schedule", schema={"minItems": 1}))

    @field_validator("jobs")
    @classmethod
    def _some_jobs(cls, jobs: tuple[JobSettings, ...]) -> tuple[JobSettings, ...]:
        if not jobs:  # not min_length: that also fires when every job is invalid
            raise invalid("is an empty list", "give a list of jobs, each with at least a name "
                          "and a schedule")
        return jobs

    @model_validator(mode="after")
    def _settings_fit_together(self, info: ValidationInfo) -> StackConfig:
        """Rules across the models; the dedup guarantee depends on each of them. Then the
        unset databaseName, firestoreLocation and jobs[].jobLogic follow their settings.
        A config validated for a deployment (`DEPLOYING` in the context) keeps the
        `DEPLOY_RULES` too."""
        dedup, timeout, prefix = self.dedup, self.function.timeout_seconds, self.name_prefix
        store_timeout, retention = dedup.store_timeout_seconds, dedup.retention_seconds
        problems = _Problems()
        if isinstance(info.context, Mapping) and info.context.get(DEPLOYING):
            for rule in DEPLOY_RULES:
                if (broken := rule.check(self)) is not None:
                    problems.add(*broken)
        # A database ID is unique in its project: one without the stack's prefix would let
        # two stacks sharing a project share records and fight over the TTL policy.
        database = dedup.database_name
        if database and database != prefix and not database.startswith(f"{prefix}-"):
            problems.add("databaseName", f"{database!r} does not carry this stack's namePrefix "
                         f"{prefix!r}: database IDs are unique per project, so two stacks "
                         "sharing a project could pick the same database and share its records "
                         f"and TTL policy", f"leave databaseName unset (it defaults to "
                         f"{prefix!r}) or use '{prefix}-<suffix>'")
        if timeout <= store_timeout:
            problems.add("storeTimeoutSeconds", f"{store_timeout} s leaves no time for the job "
                         f"within functionTimeoutSeconds ({timeout} s)",
                         "make storeTimeoutSeconds smaller than functionTimeoutSeconds")
        if self.watchdog.enabled and len(
            watchdog_id := service_account_id(prefix, WATCHDOG_JOB_NAME)
        ) > SERVICE_ACCOUNT_ID_MAX_LENGTH:
            problems.add("namePrefix", f"makes the watchdog's service account ID "
                         f"{watchdog_id!r} {len(watchdog_id)} characters long (at most "
                         f"{SERVICE_ACCOUNT_ID_MAX_LENGTH})", "shorten namePrefix to at most "
                         f"{SERVICE_ACCOUNT_ID_MAX_LENGTH - len(WATCHDOG_JOB_NAME) - 1} "
                         "characters, or set watchdog.enabled false")
        watchdog = self.watchdog
        if not watchdog.lookback_seconds:  # unset: follows the retention
            watchdog = watchdog.model_copy(update={"lookback_seconds": max(
                60, min(WATCHDOG_LOOKBACK_DEFAULT_SECONDS, retention // 2))})
        if watchdog.enabled and watchdog.lookback_seconds >= retention:
            problems.add(("watchdog", "lookbackSeconds"), f"{watchdog.lookback_seconds} s is not "
                         f"shorter than retentionSeconds ({retention} s): records expire "
                         "within the lookback, and a run judged later would look missed",
                         f"set watchdog.lookbackSeconds < {retention} or raise retentionSeconds")
        first_index: dict[str, int] = {}
        budget = self.proxy_timeout_seconds + 2 * store_timeout
        for index, job in enumerate(self.jobs):
            self._check_catch_up(index, job, watchdog, problems)
            self._check_overlap(index, job, dedup, watchdog, problems)
            if job.name in first_index:
                problems.add(("jobs", index, "name"), f"{job.name!r} is already the name of "
                             f"jobs[{first_index[job.name]}]", "give every job a unique name "
                             "(it names the Scheduler job, part of the dedup key)")
            first_index.setdefault(job.name, index)
            if self.watchdog.enabled and job.name == WATCHDOG_JOB_NAME:
                problems.add(("jobs", index, "name"), f"{job.name!r} is the watchdog's own "
                             "Scheduler job name", "rename the job (or set watchdog.enabled "
                             "false)")
            if len(job_id := scheduler_job_id(prefix, job.name)) > JOB_ID_MAX_LENGTH:
                problems.add(("jobs", index, "name"), "makes the Scheduler job ID "
                             f"'<namePrefix>-<name>' {len(job_id)} characters long (at most "
                             f"{JOB_ID_MAX_LENGTH})", "shorten the name to at most "
                             f"{JOB_ID_MAX_LENGTH - len(prefix) - 1} characters")
            deadline, window = job.attempt_deadline_seconds, job.retry_window_seconds
            if timeout < deadline:
                problems.add(("jobs", index, "attemptDeadlineSeconds"), f"{deadline} s is longer"
                             f" than functionTimeoutSeconds ({timeout} s): the function would be "
                             "cut off before Scheduler's deadline", "lower "
                             f"attemptDeadlineSeconds to <= {timeout} or raise "
                             "functionTimeoutSeconds")
            if retention <= window:
                problems.add("retentionSeconds", f"{retention} s is not longer than "
                             f"jobs[{index}] ({job.name}) retry window ({window:.0f} s): a late "
                             "retry would find no record and run the job again",
                             f"set retentionSeconds > {window:.0f} or shorten that job's retries")
            if job.proxy is None:
                continue
            if job.proxy.project != self.project:
                problems.add(("jobs", index, "proxy", "resource"), f"{job.proxy.resource!r} is "
                             f"in project {job.proxy.project!r}, not in this stack's project "
                             f"{self.project!r}", "target a resource of gcp:project by its "
                             "project ID (the proxy's roles on the target are granted in the "
                             "stack's project)")
            # One proxied attempt: claim, the start request, record the result, all within
            # the deadline, so Scheduler does not abandon an attempt still starting the target.
            if budget >= deadline:
                room = deadline - 2 * store_timeout
                problems.add("proxyTimeoutSeconds", f"{self.proxy_timeout_seconds} s plus two "
                             f"Firestore calls (2 x storeTimeoutSeconds = {2 * store_timeout} s)"
                             f" does not fit in jobs[{index}] ({job.name}) "
                             f"attemptDeadlineSeconds ({deadline} s): Scheduler would abandon "
                             "attempts that are still starting the target",
                             (f"set proxyTimeoutSeconds < {room} (or lower storeTimeoutSeconds),"
                              " or raise " if room > 1 else "lower proxyTimeoutSeconds and "
                              "storeTimeoutSeconds, or raise ")
                             + f"jobs[{index}].attemptDeadlineSeconds above {budget}")
        proxy_database = proxy_database_of(database or prefix)
        if self.proxied_jobs and len(proxy_database) > DATABASE_ID_MAX_LENGTH:
            longest = DATABASE_ID_MAX_LENGTH - len(PROXY_DATABASE_SUFFIX)
            problems.add("databaseName" if database else "namePrefix", f"makes the proxy's "
                         f"database ID {proxy_database!r} {len(proxy_database)} characters "
                         f"long (at most {DATABASE_ID_MAX_LENGTH})", f"shorten "
                         f"{'databaseName' if database else 'namePrefix'} to at most "
                         f"{longest} characters")
        watch_database = watch_database_of(database or prefix)
        if self.watchdog.enabled and len(watch_database) > DATABASE_ID_MAX_LENGTH:
            longest = DATABASE_ID_MAX_LENGTH - len(WATCH_DATABASE_SUFFIX)
            problems.add("databaseName" if database else "namePrefix", f"makes the watchdog's "
                         f"database ID {watch_database!r} {len(watch_database)} characters "
                         f"long (at most {DATABASE_ID_MAX_LENGTH})", f"shorten "
                         f"{'databaseName' if database else 'namePrefix'} to at most "
                         f"{longest} characters, or set watchdog.enabled false")
        if self.token_secret_readers and not any(job.proxy for job in self.jobs):
            problems.add("tokenSecretReaders", "is set but no job calls the proxy, so the "
                         "stack has no token secret to read", "remove tokenSecretReaders, or "
                         "give a job `proxy:`")
        if not dedup.firestore_location and (
            wrong := firestore_location_problem(self.region)
        ) is not None:
            problems.add("firestoreLocation", f"is unset, so the database would be in gcp:region "
                         f"{self.region!r}, which is not a Firestore location",
                         f"set firestoreLocation to a Firestore location near it; {wrong[1]}")
        problems.raise_any()
        derived = {"database_name": database or prefix,
                   "firestore_location": dedup.firestore_location or self.region}
        jobs = tuple(job.model_copy(update=with_stack_defaults(job, dedup)) for job in self.jobs)
        object.__setattr__(self, "dedup", dedup.model_copy(update=derived))  # frozen model
        object.__setattr__(self, "watchdog", watchdog)
        object.__setattr__(self, "jobs", jobs)
        return self

    @staticmethod
    def _check_catch_up(
        index: int, job: JobSettings, watchdog: WatchdogSettings, problems: _Problems
    ) -> None:
        """The watchdog catches a run up once its verdict is due (retry window + grace)
        and while it still judges it (the lookback): the bound must fall in between."""
        if not job.catch_up:
            return
        at: Loc = ("jobs", index, "catchUpWithinSeconds")
        within, due = job.catch_up_within_seconds, job.retry_window_seconds + watchdog.grace_seconds
        if not watchdog.enabled:
            problems.add(("jobs", index, "catchUp"), "needs the watchdog, which delivers the "
                         "missed runs, but watchdog.enabled is false", "set watchdog.enabled "
                         "true, or remove catchUp")
        elif within <= due:
            problems.add(at, f"{within} s is not longer than the job's retry window plus "
                         f"watchdog.graceSeconds ({due:.0f} s): a missed run is only known "
                         "missed after that, so none would ever be caught up",
                         f"set catchUpWithinSeconds > {due:.0f}")
        elif within >= watchdog.lookback_seconds:
            problems.add(at, f"{within} s is not shorter than watchdog.lookbackSeconds "
                         f"({watchdog.lookback_seconds} s): the watchdog judges runs within "
                         "its lookback only", f"set catchUpWithinSeconds < "
                         f"{watchdog.lookback_seconds} (or raise watchdog.lookbackSeconds)")

    @staticmethod
    def _check_overlap(
        index: int, job: JobSettings, dedup: DedupSettings, watchdog: WatchdogSettings,
        problems: _Problems,
    ) -> None:
        """`wait` and `replace` answer 409 and count on Scheduler's retries to start the
        run later: a job that is never retried would never run while another runs. And
        `replace` contradicts backfill runs in flight side by side: the watchdog's
        deliveries never replace one another (they wait), so more than one buys nothing."""
        overlap = job.overlap or dedup.overlap
        if overlap == "replace" and watchdog.enabled and watchdog.backfill_in_flight > 1:
            problems.add(("jobs", index, "overlap") if job.overlap else "overlap",
                         f"'replace' lets no two runs of jobs[{index}] ({job.name}) run at "
                         "once, but watchdog.backfillInFlight is "
                         f"{watchdog.backfill_in_flight} (backfill runs side by side; a "
                         "watchdog delivery waits for a live run, it never replaces it)",
                         "set watchdog.backfillInFlight to 1, or use overlap 'allow' for a "
                         "job whose runs may overlap")
        if overlap in ("wait", "replace") and job.retry.retry_count == 0:
            problems.add(("jobs", index, "overlap") if job.overlap else "overlap",
                         f"{overlap!r} waits for Scheduler's retries to start a run while "
                         f"another runs, but jobs[{index}] ({job.name}) is never retried",
                         f"give jobs[{index}] retries (retry.retryCount >= 1), or use "
                         "overlap 'forbid' (skip such a run) or 'allow'")

    def watchdog_delivers_to(self, *, proxied: bool) -> bool:
        """Whether the watchdog delivers runs (catch-up, re-runs) to the proxy (`proxied`)
        or to the dedup function: only then is it one of that function's allowed callers,
        may invoke it, and gets its URL."""
        jobs = [job for job in self.jobs if (job.proxy is not None) == proxied]
        return self.watchdog.enabled and bool(jobs) and (
            self.watchdog.reruns or any(job.catch_up for job in jobs)
        )

    @property
    def watchdog_email(self) -> str:
        """The watchdog's runtime account (its ID tokens' `email` when it delivers runs)."""
        return service_account_email(
            self.project, service_account_id(self.name_prefix, WATCHDOG_JOB_NAME)
        )

    @property
    def invoker_email(self) -> str:
        """The Scheduler jobs' OIDC identity: the one caller the functions serve."""
        return service_account_email(
            self.project, service_account_id(self.name_prefix, "invoker")
        )

    def alert_thresholds(self, job: JobSettings) -> tuple[int, int]:
        """The job's (failureThreshold, recoveryThreshold): its own, else the stack's."""
        own, stack = job.alerts, self.alerts
        return (own.failure_threshold or stack.failure_threshold,
                own.recovery_threshold or stack.recovery_threshold)

    def job_id(self, job: JobSettings) -> str:
        """The deployed Scheduler job ID of `job`: `<namePrefix>-<name>`."""
        return scheduler_job_id(self.name_prefix, job.name)

    def job_routes(self) -> dict[str, str]:
        """The dedup function's job table: every (not proxied) job's deployed ID -> its effective
        `module:function`."""
        jobs = sorted(self.jobs, key=lambda j: j.name)
        return {self.job_id(job): job.job_logic for job in jobs if job.proxy is None}

    @property
    def proxied_jobs(self) -> tuple[JobSettings, ...]:
        return tuple(job for job in self.jobs if job.proxy is not None)

    def proxy_routes(self) -> dict[str, ProxyTarget]:
        """Every proxied job's deployed ID -> its target (the proxy's job table); empty: no
        proxy."""
        jobs = sorted(self.jobs, key=lambda j: j.name)
        return {self.job_id(job): job.proxy for job in jobs if job.proxy is not None}


# --------------------------------------------------------------------------- deploy rules


DEPLOYING: Final = "deploying"
"""The validation context key of a config that is to be deployed (`load_config(...,
deploying=True)`): the program's own (`pulumi up`/`preview`, and so `make plan` and
`make policy-check`, which run it under mocks)."""


@dataclass(frozen=True)
class DeployRule:
    """A mandatory policy of the policy pack (`policy`, its name in policies/registry.py)
    that the stack config alone decides, as a config rule: a deployment's config breaking
    it is refused before anything is declared, at `make plan` with its key and fix, instead
    of by `make policy-check` after the plan. `check` returns (key, what, fix) when broken.

    Local runs (`make demo`, the Scheduler emulator, `make runs`) deploy nothing and do not
    apply them. tests/infra/test_config.py checks each against the pack: with the rule
    off, the same stack fails that policy, and with the rule's fix applied it passes."""

    policy: str
    check: Callable[[StackConfig], tuple[Loc, str, str] | None]


def _protected_stack_alerts_someone(cfg: StackConfig) -> tuple[Loc, str, str] | None:
    if not cfg.dedup.delete_protection or cfg.alerts.emails:
        return None
    return (("alerts", "emails"), "is empty while deleteProtection is true (its default): "
            "a missed, failed or overlong run of this production-like stack would alert "
            "nobody, and policy dedup-alerting-notifies-production refuses the deployment",
            "add `scheduler-dedup:alerts: {emails: [oncall@example.com]}` with your on-call "
            "address, or set `scheduler-dedup:deleteProtection: false` for a stack you may "
            "delete (its alerts are then advised, not required)")


DEPLOY_RULES: Final[tuple[DeployRule, ...]] = (
    DeployRule("dedup-alerting-notifies-production", _protected_stack_alerts_someone),
)
"""Every mandatory policy that the stack config alone can break (the others judge what
the program declares from a valid config, which keeps them by construction)."""


def with_stack_defaults(job: JobSettings, dedup: DedupSettings) -> dict[str, Any]:
    """A job's unset settings that follow the stack's: jobLogic, and the business-run
    choices (the stack's, else BSD cron -s for its schedule), so every table and header
    carries the choice in force (StackConfig fills every job so; a job made outside a
    stack, the demo's, is filled the same way)."""
    repeated, skipped = default_dst(job.schedule)
    return {
        "job_logic": job.job_logic or dedup.default_job_logic,
        "dst_repeated": job.dst_repeated or dedup.dst_repeated or repeated,
        "dst_skipped": job.dst_skipped or dedup.dst_skipped or skipped,
        "forced_runs": job.forced_runs or dedup.forced_runs,
        "overlap": job.overlap or dedup.overlap,
    }


# --------------------------------------------------------------------------- what follows


def model_fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """A model's fields by config key (alias), in declaration order."""
    return {info.alias or name: info for name, info in model.model_fields.items()}


def stack_fields() -> dict[str, FieldInfo]:
    """Every key of a stack (`gcp:project`, then the kit's), the groups' keys in place."""
    found: dict[str, FieldInfo] = {}
    for key, info in model_fields(StackConfig).items():
        group = GROUPS.get(key)
        found.update(model_fields(group) if group else {key: info})
    return found


def hint(info: FieldInfo | None) -> Hint:
    extra = info.json_schema_extra if info is not None else None
    return extra if isinstance(extra, Hint) else Hint()


def has_fixed_default(info: FieldInfo) -> bool:
    return not info.is_required() and info.default_factory is None and not hint(info).default


KIT_KEYS: Final = frozenset(key for key in stack_fields() if ":" not in key)
DEFAULTS: Final[Mapping[str, Any]] = {
    k: i.default for k, i in stack_fields().items() if k in KIT_KEYS and has_fixed_default(i)
}
"""Defaults of the kit's keys (Pulumi.yaml's config block is generated from the same)."""


def choices(info: FieldInfo | None) -> tuple[str, ...]:
    """The values of a Literal field."""
    args = get_args(info.annotation) if info is not None else ()
    if type(None) in args:  # `Literal[...] | None`: unset follows a default elsewhere
        args = tuple(v for a in args if a is not type(None) for v in get_args(a))
    return tuple(args) if args and all(isinstance(a, str) for a in args) else ()


def bounds(info: FieldInfo | None) -> tuple[int | None, int | None]:
    """A field's `ge` and `le`."""
    metadata = info.metadata if info is not None else []
    low = [m.ge for m in metadata if hasattr(m, "ge")]
    high = [m.le for m in metadata if hasattr(m, "le")]
    return (low[0] if low else None, high[0] if high else None)


# --------------------------------------------------------------------------- reading


def load_config(values: Mapping[str, Any], *, deploying: bool = False) -> StackConfig:
    """Validate a stack's config mapping and return the typed config; `deploying`: for a
    deployment, so the `DEPLOY_RULES` apply too (the program's config).

    `values` maps full keys (`"gcp:project"`, `"scheduler-dedup:leaseSeconds"`) to native
    or string values. Keys of the providers' namespaces (e.g. `gcp:zone`) are left to
    them; a key in any other namespace, or in none, is a problem (Pulumi would not give it
    to the program: a typo there would silently keep the default). Raises `ConfigError`
    listing every problem.
    """
    group_of = {key: group for group, model in GROUPS.items() for key in model_fields(model)}
    data: dict[str, Any] = {group: {} for group in GROUPS}
    problems = [p for key in values if (p := _namespace_problem(key)) is not None]
    for full_key, value in values.items():
        namespace, _, name = full_key.partition(":")
        if full_key in (GCP_PROJECT_KEY, GCP_REGION_KEY):
            data[full_key] = value
        elif namespace == PROJECT_NAME and name in GROUPS:  # the models' name, not a key
            raise ConfigError([Problem(full_key, "is not a setting of the kit", "remove it")])
        elif namespace == PROJECT_NAME:
            (data[group_of[name]] if name in group_of else data)[name] = _parse_structure(value)
    try:
        config = StackConfig.model_validate(data, context={DEPLOYING: deploying})
    except ValidationError as exc:
        raise ConfigError([*problems, *_problems(exc)]) from None
    if problems:
        raise ConfigError(problems)
    return config


PROVIDER_NAMESPACES: Final = ("gcp", "time", "pulumi")
"""Config namespaces read by others than the kit: the providers the program uses (gcp,
time) and Pulumi itself (e.g. pulumi:tags)."""


def _namespace_problem(full_key: str) -> Problem | None:
    """A problem if `full_key` is in a namespace nobody reads, with the key likely meant."""
    namespace, colon, name = full_key.rpartition(":")
    if colon and namespace in (PROJECT_NAME, *PROVIDER_NAMESPACES):
        return None
    meant = name if name in KIT_KEYS else next(
        iter(difflib.get_close_matches(name, sorted(KIT_KEYS), n=1)), None)
    if not colon:
        what = f"has no namespace, so the kit does not read it (it reads {PROJECT_NAME}:<key>)"
    else:
        what = (f"is in namespace {namespace!r}, which neither the kit ({PROJECT_NAME}) nor a "
                f"provider it uses ({', '.join(PROVIDER_NAMESPACES)}) reads")
    if meant is not None:
        fix = f"did you mean {kit_key(meant)}? write the kit's settings as {PROJECT_NAME}:<key>"
    else:
        fix = f"write the kit's settings as {PROJECT_NAME}:<key>, or remove it"
    return Problem(full_key, what, fix)


def _parse_structure(raw: Any) -> Any:
    """Objects and lists arrive from the Pulumi engine as JSON strings."""
    if isinstance(raw, str) and raw.lstrip()[:1] in ("[", "{"):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def _problems(exc: ValidationError) -> list[Problem]:
    problems: list[Problem] = []
    for error in exc.errors(include_url=False):
        loc: Loc = tuple(error["loc"])
        raised = error.get("ctx", {}).get("error")
        if isinstance(raised, Invalid):
            problems += [Problem(_key(loc + at), msg, fix) for at, msg, fix in raised.problems]
        else:
            problems.append(Problem(_key(loc), *_explain(error, loc)))
    return problems


def _key(loc: Loc) -> str:
    """("jobs", 1, "schedule") -> "scheduler-dedup:jobs[1].schedule"."""
    head, *rest = [part for part in loc if part not in GROUPS]
    key = str(head) if ":" in str(head) else kit_key(str(head))
    return key + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in rest)


def _lookup(loc: Loc) -> tuple[type[BaseModel], FieldInfo | None]:
    """The model that holds the last key of `loc` (or is its value), and that key's field."""
    model: type[BaseModel] = StackConfig
    info: FieldInfo | None = None
    for part in (p for p in loc if isinstance(p, str)):
        info = model_fields(model).get(part)
        if info is None:
            return model, None
        model = model_in(info.annotation) or model
    return model, info


def model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: its type, or one inside it (`X | None`, `tuple[X, ...]`)."""
    if get_origin(annotation) is None and isinstance(annotation, type):
        return annotation if issubclass(annotation, BaseModel) else None
    return next(filter(None, map(model_in, get_args(annotation))), None)


def _explain(error: ErrorDetails, loc: Loc) -> tuple[str, str]:
    """What is wrong and the fix, for one of pydantic's own errors."""
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx", {})
    model, info = _lookup(loc)
    advice, options = hint(info), choices(info)
    use_one_of = f"use one of: {', '.join(options)}" if options else ""
    if kind == "missing":
        return "is not set", advice.unset_fix or advice.fix or use_one_of or "set it"
    if kind == "extra_forbidden":
        parent = _lookup(loc[:-1])[0]
        known = sorted(KIT_KEYS if parent is StackConfig else model_fields(parent))
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        guess = f"did you mean {close[0]!r}? " if close else ""
        return f"is not {getattr(parent, 'setting_of', 'a setting')}", (
            f"{guess}known keys: {', '.join(known)}"
        )
    if kind in ("int_type", "int_parsing"):
        low, high = bounds(info)
        span = "" if low is None and high is None else (
            f" >= {low}" if high is None else f" <= {high}" if low is None else
            f" from {low} to {high}")
        example = info.default if info is not None and isinstance(info.default, int) else (
            low if low is not None else 1)
        return f"{value!r} is not a whole number", f"give an integer{span}, e.g. {example}"
    if kind in ("greater_than_equal", "less_than_equal"):
        low, high = bounds(info)
        span = f">= {low}" if high is None else f"<= {high}" if low is None else (
            f"from {low} to {high}")
        return f"{value} is out of range", f"use a value {span}"
    if kind == "bool_type":
        return f"{value!r} is not a boolean", "use true or false"
    if kind in ("string_pattern_mismatch", "literal_error"):
        return f"{value!r} is not {advice.what}", advice.fix or use_one_of
    if kind == "string_too_long":
        return f"is longer than {ctx['max_length']} characters", advice.fix
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        keys = model_fields(model)
        required = ", ".join(k for k, i in keys.items() if i.is_required())
        optional = ", ".join(k for k, i in keys.items() if not i.is_required())
        listed = f"{required} and optionally {optional}" if required else f"any of {optional}"
        return f"{value!r} is not a mapping", f"give a mapping with {listed}"
    if kind in ("tuple_type", "list_type"):
        return f"{value!r} is not a list", advice.fix
    if kind == "string_type":
        return f"{value!r} is not a string", advice.fix or "give a string value"
    fix = advice.fix or "see docs/configuration.md"
    return f"{value!r} is not valid ({error['msg']})", fix


# --------------------------------------------------------------------------- Pulumi adapter


def config_from_pulumi() -> StackConfig:
    """Read the running stack's config through `pulumi.Config` and validate it, for a
    deployment (the `DEPLOY_RULES` included)."""
    return load_config(pulumi_config_values(), deploying=True)


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
    # Unknown keys of the kit's namespace (typos), and keys of no known namespace, are only
    # visible in the raw config map.
    for full_key, raw in _raw_config_map().items():
        namespace = full_key.rpartition(":")[0]
        if namespace not in PROVIDER_NAMESPACES and full_key not in values:
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

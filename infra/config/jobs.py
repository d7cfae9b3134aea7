"""The models of a job (`jobs[]`): `JobSettings`, its `RetryConfig` (the kit's retry
defaults, `retry: none`), its `JobAlertSettings` and the `ProxyTarget` a proxied job starts,
with the proxy's target kinds and their resource and token rules; and the business-run
choices (dstRepeated, dstSkipped, forcedRuns, overlap) and job-logic pattern that the
stack-wide settings give every job's default.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Final, Literal, get_args

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from dedup.watchdog.incidents import MAX_THRESHOLD
from dedup.watchdog.windows import MAX_WINDOWS
from infra.config.errors import ProblemList, invalid
from infra.config.fields import Bool, ConfigModel, Hint, Int
from infra.config.hints import DEFAULT_TIME_ZONE, checked_cron, checked_time_zone
from infra.config.silences import SILENCES_TEXT, SilenceWindow
from infra.scheduler_rules import (
    APP_ENGINE_ATTEMPT_DEADLINE_MAX_SECONDS,
    ATTEMPT_DEADLINE_DEFAULT_SECONDS,
    ATTEMPT_DEADLINE_MAX_SECONDS,
    ATTEMPT_DEADLINE_MIN_SECONDS,
    DURATION_MAX_SECONDS,
    JOB_ID_MAX_LENGTH,
    MAX_DOUBLINGS_DEFAULT,
    MAX_DOUBLINGS_MAX,
    RETRY_COUNT_MAX,
    HazardKind,
    RetrySettings,
    retry_window_seconds,
)

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
RunsBeyondSchedule = Literal["off", "log", "page"]  # dedup.beyond.BEYOND_SETTINGS
RUNS_BEYOND_SCHEDULE_TEXT = (
    "Executions no business run explains (a second Scheduler job or another caller sending "
    "the job's headers at a time of its own: `unexplained_run`) and forced runs beyond "
    "maxForcedRunsPerDay (`too_many_forced_runs`): `off` (not judged), `log` (the watchdog "
    "logs a problem line each) or `page` (and counts them in a `beyond_schedule` incident, "
    "which pages once per streak); not `off`: the watchdog reads two small documents more "
    "per tick for the job")
MAX_FORCED_RUNS_PER_DAY_MAX: Final = 10_000
DST_REPEATED_TEXT = (
    "A local time that happens twice (the autumn DST change): `once` (one run; a delivery for "
    "the other instant is a duplicate) or `each` (a run per instant)")
DST_SKIPPED_TEXT = (
    "A local time that does not happen (the spring DST change): `shift` (run at the change) "
    "or `skip` (no run that day)")
FORCED_RUNS_TEXT = (
    "A forced run (\"Run now\", `gcloud scheduler jobs run`): `separate` (a run of its own; "
    "the scheduled run still runs), `replaceNext` (it is the upcoming scheduled run, whose "
    "delivery is then a duplicate) or `refuse` (400, nothing runs)")
OVERLAP_TEXT = (
    "A run whose previous run of the same job still runs: `allow` (both run), `forbid` (200, "
    "recorded `skipped`, nothing runs; a refused \"Run now\" is recorded nowhere), `wait` "
    "(409 until that run ends: Scheduler's retries start it) or `replace` (a newer run asks "
    "the older one to stop through claim_lost, 409 until it did; an older run's retry waits)")
OVERLAP_FIX = "use 'allow', 'forbid', 'wait' or 'replace'"
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
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
JOB_LOGIC = rf"^{_IDENTIFIER}(\.{_IDENTIFIER})*:{_IDENTIFIER}$"
JOB_LOGIC_FIX = "use 'module:function' of a module inside function/, e.g. jobs.send_invoices:run"
SERVICE_PATH: Final = r"^/[^\s#]*$"
"""jobs[].path: a relative URI (Scheduler's AppEngineHttpTarget.relativeUri: begins with '/',
no spaces, at most 2083 characters; the same for an HTTP target's path)."""
SERVICE_PATH_MAX_LENGTH: Final = 2083
CATCH_UP_WITHIN_DEFAULT_SECONDS: Final = 6 * 3600
"""jobs[].catchUpWithinSeconds: a missed run is caught up at most six hours late."""


class ScheduledModel(ConfigModel):
    """A model with a Scheduler `schedule` and `timeZone`, checked as Cloud Scheduler
    checks them; the error's example is the model's CRON_EXAMPLE."""

    CRON_EXAMPLE: ClassVar[str]

    @field_validator("schedule", check_fields=False)
    @classmethod
    def _unix_cron(cls, schedule: str) -> str:
        return checked_cron(schedule, cls.CRON_EXAMPLE)

    @field_validator("time_zone", check_fields=False)
    @classmethod
    def _iana(cls, time_zone: str) -> str:
        return checked_time_zone(time_zone)


class ProxyTarget(ConfigModel):
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
        problems = ProblemList()
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


class RetryConfig(ConfigModel):
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


FAILURE_THRESHOLD_TEXT = ("How many of the job's runs in a row judged missed, failed or "
                           "overlong open an incident (one notification per streak)")
RECOVERY_THRESHOLD_TEXT = ("How many completed runs in a row close it (a recovery "
                            "notification); also closes a ran_twice incident")


class JobAlertSettings(ConfigModel):
    """A job's own alert thresholds (`jobs[].alerts`); unset: the stack's `alerts`."""

    setting_of: ClassVar[str] = "a job's alerts setting"
    failure_threshold: Int = Field(  # 0: unset (a given value is validated, the default not)
        default=0, ge=1, le=MAX_THRESHOLD,
        description=f"{FAILURE_THRESHOLD_TEXT}; unset: alerts.failureThreshold",
        json_schema_extra=Hint(default="alerts.failureThreshold"))
    recovery_threshold: Int = Field(  # 0: unset (a given value is validated, the default not)
        default=0, ge=1, le=MAX_THRESHOLD,
        description=f"{RECOVERY_THRESHOLD_TEXT}; unset: alerts.recoveryThreshold",
        json_schema_extra=Hint(default="alerts.recoveryThreshold"))


class JobSettings(ScheduledModel):
    """One Cloud Scheduler job, served by the stack's dedup function (or its proxy)."""

    CRON_EXAMPLE: ClassVar[str] = "'0 3 * * *'"
    setting_of: ClassVar[str] = "a job setting"
    # The schema's own bound for a job not aimed at a team service (an HTTP target's 30
    # minutes); a team service's kind decides its bound (infra/config/services.py).
    model_config = ConfigDict(json_schema_extra={
        "if": {"not": {"required": ["service"]}},
        "then": {"properties": {"attemptDeadlineSeconds": {
            "maximum": ATTEMPT_DEADLINE_MAX_SECONDS}}}})
    # Not a setting: which DST behaviours the stack file chose, kept once StackConfig has
    # filled dstRepeated and dstSkipped with the choice in force (dst_chosen).
    _dst_chosen: frozenset[HazardKind] = PrivateAttr(default_factory=frozenset)
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
        le=APP_ENGINE_ATTEMPT_DEADLINE_MAX_SECONDS,
        description="How long Scheduler waits for one attempt; <= functionTimeoutSeconds; "
        f"at most {ATTEMPT_DEADLINE_MAX_SECONDS} (an HTTP target), "
        f"{APP_ENGINE_ATTEMPT_DEADLINE_MAX_SECONDS} for a job aimed at an App Engine service")
    retry_config: Annotated[RetryConfig, BeforeValidator(_at_most_once)] = Field(
        default_factory=RetryConfig, alias="retry",
        description="Scheduler's retryConfig; unset: 3 retries 30..300 s apart; `none`: never "
        "retried (at most once, for a job that must never run late)",
        json_schema_extra=Hint(also=AT_MOST_ONCE))
    body: Any = Field(default=None, description="JSON value POSTed as `application/json`")
    job_logic: str = Field(
        default="", pattern=JOB_LOGIC,
        description="`module:function` inside `function/` that runs the job; not with `proxy`",
        json_schema_extra=Hint("a module:function", JOB_LOGIC_FIX, default="defaultJobLogic"))
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
    runtime: str | None = Field(
        default=None, description="The runtime (`runtimes[].name`) the job runs in, with "
        "its settings, secrets, grants and network; unset: the stack's dedup function; not "
        "with `proxy`")
    service: str | None = Field(
        default=None, description="A team's own service (`services[].name`) the job calls "
        "instead of a kit function; it runs the protocol library itself (docs/own-service.md); "
        "not with runtime, proxy or jobLogic")
    path: str | None = Field(
        default=None, pattern=SERVICE_PATH, max_length=SERVICE_PATH_MAX_LENGTH,
        description="With service: the route the job POSTs to, e.g. /tasks/export (begins "
        "with '/'); unset: /",
        json_schema_extra=Hint("a relative URI", "give the route beginning with '/', e.g. "
                               "/tasks/export (no spaces)"))
    dst_repeated: DstRepeated | None = Field(
        default=None, description=f"{DST_REPEATED_TEXT}; unset: the stack's dstRepeated, "
        "else as BSD cron -s: `each` when the minute or hour field starts with `*`, else `once`",
        json_schema_extra=Hint("a DST choice", "use 'once' or 'each'", default="dstRepeated"))
    dst_skipped: DstSkipped | None = Field(
        default=None, description=f"{DST_SKIPPED_TEXT}; unset: the stack's dstSkipped, else "
        "as BSD cron -s: `skip` when the minute or hour field starts with `*`, else `shift`",
        json_schema_extra=Hint("a DST choice", "use 'shift' or 'skip'", default="dstSkipped"))
    forced_runs: ForcedRuns | None = Field(
        default=None, description=f"{FORCED_RUNS_TEXT}; unset: the stack's forcedRuns",
        json_schema_extra=Hint("a forced-run choice", "use 'separate', 'replaceNext' or "
                               "'refuse'", default="forcedRuns"))
    overlap: Overlap | None = Field(
        default=None, description=f"{OVERLAP_TEXT}; unset: the stack's overlap",
        json_schema_extra=Hint("an overlap policy", OVERLAP_FIX, default="overlap"))
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
    silences: tuple[SilenceWindow, ...] = Field(
        default=(), max_length=MAX_WINDOWS,
        description=f"The job's maintenance windows: {SILENCES_TEXT}")
    runs_beyond_schedule: RunsBeyondSchedule = Field(
        default="off", description=RUNS_BEYOND_SCHEDULE_TEXT,
        json_schema_extra=Hint("a runsBeyondSchedule choice", "use 'off', 'log' or 'page'"))
    max_forced_runs_per_day: Int = Field(  # 0: unset (a given value is validated, the default not)
        default=0, ge=1, le=MAX_FORCED_RUNS_PER_DAY_MAX,
        description="With runsBeyondSchedule: each forced run (\"Run now\") beyond this many "
        "within 24 hours is reported `too_many_forced_runs`; 0 (unset): forced runs are not "
        "counted")

    @field_validator("path")
    @classmethod
    def _one_route(cls, path: str | None) -> str | None:
        # The pattern has checked the rest; these two would name a route other than the one
        # written: '//' starts a network-path reference (another host, to a URL parser), and
        # a '..' segment climbs out of the route's folder.
        if path is None:
            return None
        route = path.split("?", 1)[0]
        if path.startswith("//"):
            raise invalid(f"{path!r} begins with '//', which a URL parser reads as another "
                          "host", "give the route with one leading '/', e.g. /tasks/export")
        if ".." in route.split("/"):
            raise invalid(f"{path!r} has a '..' segment, so it names another route than it "
                          "reads", "give the route itself, without '..', e.g. /tasks/export")
        return path

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
        if self.proxy is not None and self.runtime:
            raise invalid("is set on a job that calls the proxy (proxy: ...), which runs in "
                          "the proxy's own function", "remove runtime (the proxy starts the "
                          "downstream target) or remove proxy", "runtime")
        return self

    @model_validator(mode="after")
    def _service_runs_its_own_code(self) -> JobSettings:
        if self.service is None:
            if self.path is not None:
                raise invalid("is set on a job without service (a kit function's job is "
                              "POSTed to its function's URL)", "remove path, or set service "
                              "to the team service it is a route of", "path")
            if self.attempt_deadline_seconds > ATTEMPT_DEADLINE_MAX_SECONDS:
                raise invalid(f"{self.attempt_deadline_seconds} is out of range",
                              f"use a value from {ATTEMPT_DEADLINE_MIN_SECONDS} to "
                              f"{ATTEMPT_DEADLINE_MAX_SECONDS} (only a job aimed at an App "
                              f"Engine service may wait up to "
                              f"{APP_ENGINE_ATTEMPT_DEADLINE_MAX_SECONDS})",
                              "attemptDeadlineSeconds")
            return self
        for key, value in (("runtime", self.runtime), ("proxy", self.proxy),
                           ("jobLogic", self.job_logic)):
            if value:
                raise invalid(f"is set on a job aimed at service {self.service!r}, which runs "
                              "its own code (the protocol library guards its route)",
                              f"remove {key} (the service's handler is the job), or remove "
                              "service to run the job in the kit", key)
        return self

    @model_validator(mode="after")
    def _forced_runs_counted(self) -> JobSettings:
        if self.max_forced_runs_per_day and self.runs_beyond_schedule == "off":
            raise invalid("is set on a job whose runsBeyondSchedule is off, so no forced run "
                          "would be counted", "set runsBeyondSchedule to 'log' or 'page', or "
                          "remove maxForcedRunsPerDay", "maxForcedRunsPerDay")
        return self

    @property
    def retry(self) -> RetrySettings:
        return RetrySettings(**self.retry_config.model_dump())  # the same field names

    @property
    def service_path(self) -> str:
        """The route a job aimed at a team service POSTs to (its `path`, else '/')."""
        return self.path or "/"

    @property
    def body_json(self) -> str | None:
        """Canonical JSON of the body (sorted keys, compact), or None for no body."""
        if self.body is None:
            return None
        return json.dumps(self.body, sort_keys=True, separators=(",", ":"), allow_nan=False)

    @property
    def retry_window_seconds(self) -> float:
        return retry_window_seconds(self.attempt_deadline_seconds, self.retry)

    @property
    def dst_chosen(self) -> frozenset[HazardKind]:
        """The DST changes whose behaviour the stack file chose for this job ("repeat":
        dstRepeated, "gap": dstSkipped; the job's own or the stack's): `make plan` and `make
        policy-check` advise about the others only. Empty for a job made outside a stack."""
        return self._dst_chosen

    def with_dst_chosen(self, chosen: frozenset[HazardKind]) -> JobSettings:
        job = self.model_copy()
        job._dst_chosen = chosen
        return job

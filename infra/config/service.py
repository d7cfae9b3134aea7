"""The stack-wide sections of the service every job shares: `FunctionSettings` (the
Cloud Run function: timeout, memory, instances), `DedupSettings` (the records: database,
collection, location, leases, retention, and every job's default business-run choices),
`WatchdogSettings` (the run watchdog) and `AlertSettings` (who is notified, the default
thresholds), each with the rules among its own fields.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import Field, field_validator, model_validator

from dedup.watchdog.incidents import MAX_THRESHOLD
from dedup.watchdog.windows import MAX_WINDOWS
from infra.config.errors import ProblemList, invalid
from infra.config.fields import Bool, ConfigModel, Hint, Int
from infra.config.hints import (
    DEFAULT_TIME_ZONE,
    firestore_location_problem,
)
from infra.config.jobs import (
    DST_REPEATED_TEXT,
    DST_SKIPPED_TEXT,
    FAILURE_THRESHOLD_TEXT,
    FORCED_RUNS_TEXT,
    JOB_LOGIC,
    JOB_LOGIC_FIX,
    OVERLAP_FIX,
    OVERLAP_TEXT,
    RECOVERY_THRESHOLD_TEXT,
    DstRepeated,
    DstSkipped,
    ForcedRuns,
    Overlap,
    ScheduledModel,
)
from infra.config.names import proxy_database_of, watch_database_of
from infra.config.silences import SILENCES_TEXT, SilenceWindow
from infra.scheduler_rules import DURATION_MAX_SECONDS, LEASE_STORE_TIMEOUTS, min_lease_seconds

_UUID_LIKE = re.compile(r"^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$")
_MEMORY = r"^([1-9][0-9]*)(Mi|Gi|M|G)$"


def memory_mib(memory: str) -> int:
    match = re.match(_MEMORY, memory)
    if match is None:
        raise ValueError(f"{memory!r} is not a memory size like '512Mi' or '1Gi'")
    unit_bytes = {"Mi": 2**20, "Gi": 2**30, "M": 10**6, "G": 10**9}[match.group(2)]
    return int(match.group(1)) * unit_bytes // 2**20


class FunctionSettings(ConfigModel):
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


class DedupSettings(ConfigModel):
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
        default=None, description=f"Every job's default: {DST_REPEATED_TEXT}; unset: as BSD "
        "cron -s, per job (see jobs[].dstRepeated)",
        json_schema_extra=Hint("a DST choice", "use 'once' or 'each'", default="BSD cron -s"))
    dst_skipped: DstSkipped | None = Field(
        default=None, description=f"Every job's default: {DST_SKIPPED_TEXT}; unset: as BSD "
        "cron -s, per job (see jobs[].dstSkipped)",
        json_schema_extra=Hint("a DST choice", "use 'shift' or 'skip'", default="BSD cron -s"))
    forced_runs: ForcedRuns = Field(
        default="separate", description=f"Every job's default: {FORCED_RUNS_TEXT}",
        json_schema_extra=Hint("a forced-run choice", "use 'separate', 'replaceNext' or "
                               "'refuse'"))
    overlap: Overlap = Field(
        default="allow", description=f"Every job's default: {OVERLAP_TEXT}. `allow`: no "
        "extra Firestore RPC; the others cost 3 more per run (docs/operations.md)",
        json_schema_extra=Hint("an overlap policy", OVERLAP_FIX))
    default_job_logic: str = Field(
        default="example_jobs.example:run", pattern=JOB_LOGIC,
        description="`module:function` inside `function/` for jobs without their own jobLogic",
        json_schema_extra=Hint("a module:function", JOB_LOGIC_FIX))
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
        problems = ProblemList()
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


WATCHDOG_LOOKBACK_DEFAULT_SECONDS: Final = 172800
"""Two days; an unset lookback is this, or half the records' retention if that is less."""
_EMAIL_ADDRESS = (r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
                  r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+$")
EmailAddress = Annotated[str, Field(pattern=_EMAIL_ADDRESS)]


class WatchdogSettings(ScheduledModel):
    """The run watchdog (`watchdog`): its own function, account and Scheduler job, which
    reports missed, failed, overlong and never-run runs of the stack's jobs."""

    CRON_EXAMPLE: ClassVar[str] = "'*/10 * * * *'"
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
    silences: tuple[SilenceWindow, ...] = Field(
        default=(), max_length=MAX_WINDOWS,
        description=f"Maintenance windows of every job of the stack: {SILENCES_TEXT}")


class AlertSettings(ConfigModel):
    """Where the stack's alert policies notify (`alerts`)."""

    setting_of: ClassVar[str] = "an alerts setting"
    emails: tuple[EmailAddress, ...] = Field(
        default=(), description="E-mail addresses notified by every alert policy (one "
        "notification channel each); a deletion-protected stack needs at least one",
        json_schema_extra=Hint("an e-mail address", "use addresses like oncall@example.com"))
    failure_threshold: Int = Field(
        default=1, ge=1, le=MAX_THRESHOLD,
        description=f"Every job's default: {FAILURE_THRESHOLD_TEXT}; never_ran and "
        "ran_twice open one at once")
    recovery_threshold: Int = Field(
        default=1, ge=1, le=MAX_THRESHOLD,
        description=f"Every job's default: {RECOVERY_THRESHOLD_TEXT}")

    @field_validator("emails")
    @classmethod
    def _unique(cls, emails: tuple[str, ...]) -> tuple[str, ...]:
        lowered = [e.lower() for e in emails]
        for index, email in enumerate(lowered):
            if email in lowered[:index]:
                raise invalid(f"{emails[index]!r} is listed twice", "list every address once",
                              (index,))
        return emails

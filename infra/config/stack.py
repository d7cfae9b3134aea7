"""The whole stack, validated: `StackConfig` (gcp:project, gcp:region, namePrefix, the
groups of flat keys in `GROUPS`, the watchdog, alerts and jobs) and the rules across its
models (lease, retention, timeouts, job names and IDs, databases), after which the unset
settings that follow others are filled in (`with_stack_defaults`); the `DEPLOY_RULES`, the
policy pack's mandatory policies that the config alone decides, kept by a config validated
for a deployment (`DEPLOYING`); and the stack's keys (`stack_fields`, `KIT_KEYS`) and their
`DEFAULTS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator
from pydantic.fields import FieldInfo

from dedup.business_runs import default_dst
from infra.config.errors import Loc, ProblemList, invalid
from infra.config.fields import ConfigModel, Hint, Int, has_fixed_default, model_fields
from infra.config.hints import firestore_location_problem
from infra.config.jobs import JobSettings, ProxyTarget
from infra.config.names import (
    DATABASE_ID_MAX_LENGTH,
    GCP_PROJECT_KEY,
    GCP_REGION_KEY,
    PROXY_DATABASE_SUFFIX,
    SERVICE_ACCOUNT_ID_MAX_LENGTH,
    WATCH_DATABASE_SUFFIX,
    WATCHDOG_JOB_NAME,
    proxy_database_of,
    runtime_database_of,
    scheduler_job_id,
    service_account_email,
    service_account_id,
    watch_database_of,
)
from infra.config.runtimes import RuntimeSettings, runtimes_in_stack
from infra.config.service import (
    WATCHDOG_LOOKBACK_DEFAULT_SECONDS,
    AlertSettings,
    DedupSettings,
    EmailAddress,
    FunctionSettings,
    WatchdogSettings,
)
from infra.config.services import TeamServiceSettings, services_in_stack
from infra.scheduler_rules import JOB_ID_MAX_LENGTH, HazardKind

GROUPS: Final[Mapping[str, type[BaseModel]]] = {
    "<dedup>": DedupSettings,
    "<function>": FunctionSettings,
}
"""Models whose keys sit flat in the stack config, grouped for the program (`cfg.dedup`)."""


class StackConfig(ConfigModel):
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
    runtimes: tuple[RuntimeSettings, ...] = Field(  # a factory: no key of Pulumi.yaml's block
        default_factory=tuple, description="Runtimes: each a function of its own, with its "
        "own account, records, resources, settings, secrets, grants and network, for the jobs "
        "that name it (docs/job-needs.md)")
    services: tuple[TeamServiceSettings, ...] = Field(  # a factory, as runtimes
        default_factory=tuple, description="A team's own services that jobs call "
        "(`jobs[].service`): each runs the protocol library itself; the kit declares its "
        "records database, the grants and the jobs (docs/own-service.md)")
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
        problems = ProblemList()
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
        runtimes = runtimes_in_stack(
            self.runtimes, stack_function=self.function,
            job_runtimes=[job.runtime for job in self.jobs], name_prefix=prefix,
            database=database or prefix, store_timeout_seconds=store_timeout,
            project=self.project, region=self.region, problems=problems)
        services_in_stack(
            self.services, runtime_names=[runtime.name for runtime in self.runtimes],
            job_targets=[(job.service, job.attempt_deadline_seconds, job.catch_up)
                         for job in self.jobs],
            database=database or prefix, region=self.region, project=self.project,
            kit_accounts=self.kit_accounts,
            reruns=self.watchdog.enabled and self.watchdog.reruns, problems=problems)
        # A runtime job's function is its runtime's: its timeout bounds the job's deadline.
        timeouts = {runtime.name: runtime.function.timeout_seconds for runtime in runtimes}
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
            if job.silences and not self.watchdog.enabled:
                problems.add(("jobs", index, "silences"), "needs the watchdog (it is what "
                             "pages, and what a silence holds back), which is disabled",
                             "remove silences, or set watchdog.enabled true")
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
            job_timeout = timeouts.get(job.runtime or "", timeout)
            # A team service's timeout is its own (make plan's checklist names it).
            if job.service is None and job_timeout < deadline:
                whose = (f"runtime {job.runtime!r}'s functionTimeoutSeconds" if job.runtime
                         else "functionTimeoutSeconds")
                problems.add(("jobs", index, "attemptDeadlineSeconds"), f"{deadline} s is longer"
                             f" than {whose} ({job_timeout} s): the function would be "
                             "cut off before Scheduler's deadline", "lower "
                             f"attemptDeadlineSeconds to <= {job_timeout} or raise {whose}")
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
        jobs = tuple(job.model_copy(update=with_stack_defaults(job, dedup))
                     .with_dst_chosen(dst_chosen(job, dedup)) for job in self.jobs)
        object.__setattr__(self, "dedup", dedup.model_copy(update=derived))  # frozen model
        object.__setattr__(self, "watchdog", watchdog)
        object.__setattr__(self, "jobs", jobs)
        object.__setattr__(self, "runtimes", runtimes)
        return self

    @staticmethod
    def _check_catch_up(
        index: int, job: JobSettings, watchdog: WatchdogSettings, problems: ProblemList
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
        problems: ProblemList,
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

    def watchdog_delivers_to(self, *, proxied: bool = False, runtime: str | None = None,
                             service: str | None = None) -> bool:
        """Whether the watchdog delivers runs (catch-up, re-runs) to the proxy (`proxied`),
        to the runtime named `runtime`, to the team service named `service`, or to the dedup
        function: only then is it one of that function's allowed callers, may invoke it,
        and gets its URL."""
        jobs = [job for job in self.jobs if (job.proxy is not None) == proxied
                and job.runtime == runtime and job.service == service]
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
    def kit_accounts(self) -> dict[str, str]:
        """Every account the kit declares (or would, once the feature needing it is on): its
        e-mail -> what it is, for messages. No team service may run as one of them."""
        roles = {"runtime": "the dedup function's runtime account",
                 "build": "the functions' build account", "invoker": "the jobs' invoker "
                 "account", "proxy": "the proxy's account", WATCHDOG_JOB_NAME: "the "
                 "watchdog's account"}
        accounts = {service_account_email(self.project, service_account_id(
            self.name_prefix, role)): what for role, what in roles.items()}
        accounts.update({self.runtime_email(runtime): f"the account of runtime {runtime.name!r}"
                         for runtime in self.runtimes})
        return accounts

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

    def dst_chosen_by_job_id(self) -> dict[str, frozenset[HazardKind]]:
        """Each Scheduler job ID -> the DST behaviours its stack file chose (dst_chosen)."""
        return {self.job_id(job): job.dst_chosen for job in self.jobs}

    def job_routes(self, runtime: str | None = None) -> dict[str, str]:
        """A function's job table: the deployed ID -> effective `module:function` of every
        job it runs: the dedup function's (`runtime` None: no proxy, no runtime), or the
        runtime's of that name."""
        jobs = sorted(self.jobs, key=lambda j: j.name)
        return {self.job_id(job): job.job_logic for job in jobs
                if job.proxy is None and job.service is None and job.runtime == runtime}

    def runtime_of(self, job: JobSettings) -> RuntimeSettings | None:
        """The runtime `job` runs in; None: the dedup function (or the proxy)."""
        return next((r for r in self.runtimes if r.name == job.runtime), None)

    def runtime_function_name(self, runtime: RuntimeSettings) -> str:
        """A runtime's function (and its Cloud Run service): `<namePrefix>-<name>`."""
        return f"{self.name_prefix}-{runtime.name}"

    def runtime_account_id(self, runtime: RuntimeSettings) -> str:
        return service_account_id(self.name_prefix, runtime.name)

    def runtime_email(self, runtime: RuntimeSettings) -> str:
        """A runtime's account: the identity its jobs run as."""
        return service_account_email(self.project, self.runtime_account_id(runtime))

    def runtime_database(self, runtime: RuntimeSettings) -> str:
        """A runtime's own records database: `<databaseName>-<name>`."""
        return runtime_database_of(self.dedup.database_name, runtime.name)

    def service_of(self, job: JobSettings) -> TeamServiceSettings | None:
        """The team service `job` is aimed at; None: a kit function's job."""
        return next((s for s in self.services if s.name == job.service), None)

    def service_database(self, service: TeamServiceSettings) -> str:
        """A team service's own records database: `<databaseName>-<name>`."""
        return runtime_database_of(self.dedup.database_name, service.name)

    def records_database_of(self, job: JobSettings) -> str:
        """The database of `job`'s run records: the proxy's own for a proxied job, its
        runtime's for a job in a runtime, its service's for a job aimed at a team service,
        else the dedup database."""
        if (service := self.service_of(job)) is not None:
            return self.service_database(service)
        if job.proxy is not None:
            return self.dedup.proxy_database_name
        runtime = self.runtime_of(job)
        return self.runtime_database(runtime) if runtime else self.dedup.database_name

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
        # A team service's job runs the service's own code: no job logic of the kit's.
        "job_logic": "" if job.service else job.job_logic or dedup.default_job_logic,
        "dst_repeated": job.dst_repeated or dedup.dst_repeated or repeated,
        "dst_skipped": job.dst_skipped or dedup.dst_skipped or skipped,
        "forced_runs": job.forced_runs or dedup.forced_runs,
        "overlap": job.overlap or dedup.overlap,
    }


def dst_chosen(job: JobSettings, dedup: DedupSettings) -> frozenset[HazardKind]:
    """The DST behaviours set for `job` in the stack file, before the defaults fill them."""
    chosen: list[HazardKind] = []
    if job.dst_repeated or dedup.dst_repeated:
        chosen.append("repeat")
    if job.dst_skipped or dedup.dst_skipped:
        chosen.append("gap")
    return frozenset(chosen)


# --------------------------------------------------------------------------- what follows


def stack_fields() -> dict[str, FieldInfo]:
    """Every key of a stack (`gcp:project`, then the kit's), the groups' keys in place."""
    found: dict[str, FieldInfo] = {}
    for key, info in model_fields(StackConfig).items():
        group = GROUPS.get(key)
        found.update(model_fields(group) if group else {key: info})
    return found


KIT_KEYS: Final = frozenset(key for key in stack_fields() if ":" not in key)
DEFAULTS: Final[Mapping[str, Any]] = {
    k: i.default for k, i in stack_fields().items() if k in KIT_KEYS and has_fixed_default(i)
}
"""Defaults of the kit's keys (Pulumi.yaml's config block is generated from the same)."""

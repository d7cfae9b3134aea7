"""Watchdog: the run watchdog, its own function, identity and Scheduler job.

The watchdog (entry point `watch_scheduled_runs`, same source archive as the dedup function)
reads the dedup records of every expected run of the stack's jobs and reports the missed,
failed, overlong and never-run ones as structured log lines, which the Monitoring component
turns into metrics and alerts. It is a 2nd gen function of the kit like the others (built by
the dedup service's build account into its repository, internal-only ingress), and:

- runs as its own account `<namePrefix>-watchdog`, which holds only `roles/datastore.user`
  conditioned to the dedup database. It reads the records by ID; it also writes its own
  cursor documents (collection `<collection>_watchdog`, one per job, so a tick judges only
  the runs whose verdict became due since the previous one). Firestore has no predefined
  role that reads everything but writes one collection, so the database-conditioned user
  role is the narrowest grant;
- is called by its own Scheduler job `<namePrefix>-watchdog`, with OIDC tokens of the
  stack's invoker account: it already holds `roles/run.invoker` on the kit's other services
  and can already trigger every job's delivery, so invoking the read-only watchdog adds
  nothing it could abuse, while a second invoker account would add an identity (and a
  project-unique name) for no narrower privilege. The watchdog serves only that account
  (DEDUP_ALLOWED_CALLERS);
- gets the stack's jobs as DEDUP_WATCH_JOBS (deployed job IDs, cron, time zone, attempt
  deadline, retry window, paused), plus DEDUP_WATCH_LOOKBACK_SECONDS and
  DEDUP_WATCH_GRACE_SECONDS, beside the same DEDUP_* store settings as the dedup function.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import pulumi
import pulumi_gcp as gcp

from infra.cloud_function import FunctionBase, declare_function, grant_database_user
from infra.config import (
    DEFAULTS,
    WATCHDOG_JOB_NAME,
    DedupSettings,
    JobSettings,
    StackConfig,
    WatchdogSettings,
    service_account_id,
)
from infra.dedup_service import DedupService, dedup_environment
from infra.iam_wait import wait_for_iam
from infra.scheduled_job import ScheduledJob, ScheduledJobArgs

COMPONENT_TYPE: Final = "scheduler-dedup:index:Watchdog"
ENTRY_POINT: Final = "watch_scheduled_runs"
CURSOR_COLLECTION_SUFFIX: Final = "_watchdog"
ATTEMPT_DEADLINE_SECONDS: Final = 180
"""The watchdog job's attempt deadline (bounded by the function's timeout)."""


def watch_jobs(cfg: StackConfig) -> list[dict[str, Any]]:
    """DEDUP_WATCH_JOBS: every job of the stack (dedup function and proxy), by deployed ID."""

    def seconds(value: float) -> float | int:
        return int(value) if float(value).is_integer() else value

    return [
        {
            "name": cfg.job_id(job),
            "schedule": job.schedule,
            "timeZone": job.time_zone,
            "attemptDeadlineSeconds": job.attempt_deadline_seconds,
            "retryWindowSeconds": seconds(job.retry_window_seconds),
            "paused": job.paused,
        }
        for job in sorted(cfg.jobs, key=lambda j: j.name)
    ]


def watchdog_job_settings(
    settings: WatchdogSettings, *, function_timeout_seconds: int, lease_seconds: int
) -> JobSettings:
    """The watchdog's own Scheduler job. One retry after a lease: a tick is idempotent (its
    cursors only move forward), and a failed one is caught up by the next anyway."""
    deadline = max(15, min(ATTEMPT_DEADLINE_SECONDS, function_timeout_seconds))
    return JobSettings.model_validate(
        {
            "name": WATCHDOG_JOB_NAME,
            "schedule": settings.schedule,
            "timeZone": settings.time_zone,
            "attemptDeadlineSeconds": deadline,
            "retry": {
                "retryCount": 1,
                "minBackoffSeconds": lease_seconds,
                "maxBackoffSeconds": lease_seconds,
            },
            "description": "Run watchdog: reports missed, failed and overlong runs of the "
            "stack's jobs",
        }
    )


@dataclass(frozen=True)
class WatchdogArgs:
    """The watchdog's settings, the jobs it watches, and what it shares with the service."""

    project: str
    region: str
    name_prefix: str
    dedup: DedupSettings
    settings: WatchdogSettings
    job: JobSettings
    """Its own Scheduler job."""
    job_id: str
    watched_jobs: Sequence[Mapping[str, Any]]
    """DEDUP_WATCH_JOBS."""
    function_base: FunctionBase
    database: pulumi.Input[str]
    depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)
    """What the function's deployment waits for (APIs, build grants, TTL field)."""
    job_depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)
    """What its job waits for besides the watchdog's invoker binding (the APIs)."""
    iam_propagation_seconds: int = int(DEFAULTS["iamPropagationSeconds"])

    @classmethod
    def from_service(cls, cfg: StackConfig, service: DedupService) -> WatchdogArgs:
        job = watchdog_job_settings(
            cfg.watchdog,
            function_timeout_seconds=cfg.function.timeout_seconds,
            lease_seconds=cfg.dedup.lease_seconds,
        )
        return cls(
            project=cfg.project,
            region=cfg.region,
            name_prefix=cfg.name_prefix,
            dedup=cfg.dedup,
            settings=cfg.watchdog,
            job=job,
            job_id=cfg.job_id(job),
            watched_jobs=watch_jobs(cfg),
            function_base=service.function_base,
            database=service.database.name,
            depends_on=[*service.apis, *service.build_grants, service.ttl_field],
            job_depends_on=list(service.apis),
            iam_propagation_seconds=cfg.iam_propagation_seconds,
        )

    @property
    def function_name(self) -> str:
        return f"{self.name_prefix}-{WATCHDOG_JOB_NAME}"

    @property
    def account_id(self) -> str:
        return service_account_id(self.name_prefix, WATCHDOG_JOB_NAME)

    def environment(self) -> dict[str, str]:
        return {
            **dedup_environment(self.project, self.region, self.dedup),
            "DEDUP_WATCH_JOBS": json.dumps(
                list(self.watched_jobs), sort_keys=True, separators=(",", ":")
            ),
            "DEDUP_WATCH_LOOKBACK_SECONDS": str(self.settings.lookback_seconds),
            "DEDUP_WATCH_GRACE_SECONDS": str(self.settings.grace_seconds),
        }


class Watchdog(pulumi.ComponentResource):
    """The run watchdog function, its own account and grant, and its Scheduler job."""

    function: gcp.cloudfunctionsv2.Function
    function_uri: pulumi.Output[str]
    service_name: pulumi.Output[str]
    account: gcp.serviceaccount.Account
    datastore_user: gcp.projects.IAMMember
    invoker_binding: gcp.cloudrunv2.ServiceIamMember
    iam_wait: pulumi.CustomResource
    scheduled_job: ScheduledJob

    def __init__(
        self, name: str, args: WatchdogArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, None, opts)
        project = args.project

        self.account = gcp.serviceaccount.Account(
            f"{name}-sa",
            project=project,
            account_id=args.account_id,
            display_name="Scheduler dedup run watchdog (runtime)",
            description="Runs the run watchdog: reads the dedup records and writes its own "
            "cursors, in the dedup database only.",
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        # roles/datastore.user conditioned to the dedup database: the watchdog reads the
        # records and writes its cursor documents (`<collection>_watchdog`); no predefined
        # role reads the database but writes only one collection.
        self.datastore_user = grant_database_user(
            f"{name}-datastore-user",
            parent=self,
            project=project,
            member=self.account.member,
            database=args.database,
        )
        self.iam_wait = wait_for_iam(
            f"{name}-iam-propagation",
            parent=self,
            after=[self.account, self.datastore_user],
            seconds=args.iam_propagation_seconds,
            triggers={"watchdog": self.account.email},
        )
        # One tick every few minutes: no warm instance (the stack's minInstances is for the
        # jobs' latency), and one tick at a time.
        settings = args.function_base.settings.model_copy(
            update={"min_instances": 0, "max_instances": 1, "max_request_concurrency": 1}
        )
        declared = declare_function(
            name,
            parent=self,
            base=dataclasses.replace(args.function_base, settings=settings),
            function_name=args.function_name,
            description="Run watchdog: reports missed, failed, overlong and never-run runs of "
            "the stack's Scheduler jobs.",
            entry_point=ENTRY_POINT,
            runtime_account_email=self.account.email,
            environment=args.environment(),
            # Its job sends OIDC tokens of the stack's invoker account (see the docstring).
            allowed_callers=[args.function_base.invoker_email],
            depends_on=[*args.depends_on, self.datastore_user, self.iam_wait],
        )
        self.function, self.function_uri, self.service_name, self.invoker_binding = declared

        self.scheduled_job = ScheduledJob(
            f"{name}-job",
            ScheduledJobArgs(
                job=args.job,
                project=project,
                region=args.region,
                target_uri=self.function_uri,
                invoker_email=args.function_base.invoker_email,
                audience=self.function_uri,
                job_id=args.job_id,
                depends_on=[*args.job_depends_on, self.invoker_binding],
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs(
            {
                "functionUri": self.function_uri,
                "serviceAccount": self.account.email,
                "jobName": self.scheduled_job.job_name,
            }
        )

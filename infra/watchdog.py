"""Watchdog: the run watchdog, its own function, identity and Scheduler job.

The watchdog (entry point `watch_scheduled_runs`; its archive the kit's code and lock alone)
reads the dedup records of every expected run of the stack's jobs and reports the missed,
failed, overlong and never-run ones as structured log lines, which the Monitoring component
turns into metrics and alerts. It is a 2nd gen function of the kit like the others (built by
the dedup service's build account into its repository, internal-only ingress), and:

- runs as its own account `<namePrefix>-watchdog`, which holds `roles/datastore.viewer`
  conditioned to the dedup database and, when the stack has a proxy, to the proxy's own
  database (it reads a proxied job's records there, by the job's `database` in its job
  table): it reads the records by ID and never writes them. What it writes is in a
  database of its own, `<databaseName>-watchdog` (DEDUP_WATCH_DATABASE, declared here like
  the proxy's), on which it holds `roles/datastore.user` conditioned to it: its cursor
  documents (collection `<collection>_watchdog`, one per job, so a tick judges only the
  runs whose verdict became due since the previous one) and the re-run requests of `make
  rerun` (`<collection>_reruns`, with a TTL policy on their expire_at), which it marks
  done. Firestore IAM conditions name databases, not collections: in the dedup database,
  which the dedup function's account (the team's job code) writes, job code could write
  requests the watchdog delivers and cursors that blind it. Nobody else in the stack
  writes the watchdog's database; the operators' `make rerun` does, with their own
  credentials (outside the stack);
- is called by its own Scheduler job `<namePrefix>-watchdog`, with OIDC tokens of the
  stack's invoker account: it already holds `roles/run.invoker` on the kit's other services
  and can already trigger every job's delivery, so invoking the read-only watchdog adds
  nothing it could abuse, while a second invoker account would add an identity (and a
  project-unique name) for no narrower privilege. The watchdog serves only that account
  (DEDUP_ALLOWED_CALLERS);
- gets the stack's jobs as its job table, watch_jobs.json in its own source archive (deployed
  job IDs, cron, time zone, attempt deadline, retry window, paused; a proxied job `proxied`
  and the proxy's `database`): environment variables are capped at 32 KiB, about 100 jobs'
  worth (a job's silence windows too; the stack's in DEDUP_WATCH_SILENCES); plus
  DEDUP_WATCH_LOOKBACK_SECONDS and DEDUP_WATCH_GRACE_SECONDS, beside the same DEDUP_*
  store settings as the dedup function;
- only when it delivers runs (some job has `catchUp`, or `watchdog.reruns`): each job's
  entry also carries `catchUp`/`catchUpWithinSeconds`, its body and its Scheduler headers
  DEDUP_WATCH_TARGET_URL is the dedup function's URL (DEDUP_WATCH_PROXY_URL the proxy's, for
  proxied jobs), and its account is an allowed caller of, and holds `roles/run.invoker`
  on, the function (and the proxy) it delivers to. Its deliveries are Cloud Tasks tasks
  in its own queue `<namePrefix>-deliveries` (DEDUP_WATCH_QUEUE), carrying OIDC tokens of
  its own account (DEDUP_WATCH_TASK_ACCOUNT): it holds roles/cloudtasks.enqueuer on that
  queue and roles/iam.serviceAccountUser on itself only. A run it delivers is one
  Scheduler missed, or one an operator asked for. Its tasks' names carry a MAC under a key
  only it holds (so nobody who may create tasks takes them first): 64 random characters
  (pulumi-random, kept encrypted in the stack's state, never in the stack file) in the
  Secret Manager secret `<namePrefix>-watchdog-task-key` (resource `watchdog-task-key`),
  whose accessor is its account alone, read by Cloud Run as the secret environment
  variable DEDUP_WATCH_TASK_KEY (job code runs in other functions, as other accounts). It
  holds roles/cloudtasks.viewer on its queue besides: a task name that already exists is
  believed only once read back (GetTask, cloudtasks.tasks.get; the FULL view's
  cloudtasks.tasks.fullView comes with the enqueuer role).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import pulumi

from infra import gcp
from infra.cloud_function import (
    FunctionBase,
    declare_function,
    declare_random_secret,
    declare_source,
    enable_apis,
    grant_database_user,
    grant_invoker,
)
from infra.config import (
    DEFAULTS,
    WATCHDOG_JOB_NAME,
    DedupSettings,
    JobSettings,
    StackConfig,
    WatchdogSettings,
    service_account_id,
)
from infra.config.silences import silences_environment
from infra.dedup_proxy import SECRET_APIS, DedupProxy
from infra.dedup_service import DedupService, dedup_environment, runtime_apis
from infra.iam_wait import wait_for_iam
from infra.job_runtime import JobRuntime
from infra.records_database import TTL_FIELD, declare_database, declare_unindexed_field
from infra.scheduled_job import ScheduledJob, ScheduledJobArgs
from infra.scheduler_rules import duration_string
from infra.source import WATCH_JOBS_TABLE
from infra.team_service import TeamService, run_service_name
from infra.watch_table import SERVICE_TARGET, watch_jobs

COMPONENT_TYPE: Final = "scheduler-dedup:index:Watchdog"
ENTRY_POINT: Final = "watch_scheduled_runs"
RERUNS_COLLECTION_SUFFIX: Final = "_reruns"
"""`make rerun`'s requests, `<collection>_reruns` (function/dedup/watchdog/reruns.py)."""
ATTEMPT_DEADLINE_SECONDS: Final = 180
"""The watchdog job's attempt deadline (bounded by the function's timeout)."""
DELIVERY_QUEUE_SUFFIX: Final = "-deliveries"
"""`<namePrefix>-deliveries`, the Cloud Tasks queue of its catch-up and re-run deliveries."""
# The deliveries' retries, Cloud Tasks' own on any non-2xx (a 409 while the run is in
# progress, a 500 store_unavailable or job failure): 5 attempts, the backoff doubling from
# 10 s to 5 min. The max backoff is the function's QUEUE_MAX_BACKOFF_SECONDS (a test checks):
# how long the watchdog waits before it calls a failed delivery final.
DELIVERY_MAX_ATTEMPTS: Final = 5
DELIVERY_MIN_BACKOFF_SECONDS: Final = 10
DELIVERY_MAX_BACKOFF_SECONDS: Final = 300
DELIVERY_MAX_DOUBLINGS: Final = 5
RUNTIME_TARGET: Final = "runtime-"
"""A runtime's key among the databases it reads and the targets it delivers to."""
ROLE_TASKS_ENQUEUER: Final = "roles/cloudtasks.enqueuer"
ROLE_TASKS_VIEWER: Final = "roles/cloudtasks.viewer"
"""GetTask on its own queue: an existing task name is believed once read back."""
TASK_KEY_ENV: Final = "DEDUP_WATCH_TASK_KEY"
"""function/dedup/watchdog/cloud_tasks.py reads its task key from this variable."""
TASK_KEY_SECRET_SUFFIX: Final = "-watchdog-task-key"
ROLE_SA_USER: Final = "roles/iam.serviceAccountUser"
__all__ = ["Watchdog", "WatchdogArgs", "watch_jobs", "watchdog_job_settings"]


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
    """Its job table (watch_jobs.json in its source archive)."""
    function_base: FunctionBase
    database: pulumi.Input[str]
    read_databases: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    """Other components' records databases it reads, by component ("proxy"): viewer only."""
    depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)
    """What the function's deployment waits for (APIs, build grants, TTL field)."""
    job_depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)
    """What its job waits for besides the watchdog's invoker binding (the APIs)."""
    iam_propagation_seconds: int = int(DEFAULTS["iamPropagationSeconds"])
    secret_apis: tuple[str, ...] = ()
    """APIs its task-key secret needs that nothing else of the stack enables (the proxy
    enables Secret Manager for its token secret)."""
    secret_depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)
    """What enables them otherwise (the proxy's APIs)."""
    delivery_targets: Mapping[str, tuple[pulumi.Input[str], pulumi.Input[str] | None]] = field(
        default_factory=dict
    )
    """What the watchdog delivers runs to: "dedup", "proxy", `runtime-<name>` and
    `service-<name>` -> (URL, Cloud Run service name; None: App Engine, no grant), for
    DEDUP_WATCH_TARGET_URL, DEDUP_WATCH_PROXY_URL, DEDUP_WATCH_RUNTIME_URLS and its
    run.invoker grants (a team service's URL is in its jobs' table entries)."""

    @classmethod
    def from_service(
        cls, cfg: StackConfig, service: DedupService, proxy: DedupProxy | None = None,
        runtimes: Mapping[str, JobRuntime] | None = None,
        team_services: Mapping[str, TeamService] | None = None,
    ) -> WatchdogArgs:
        runtimes, team_services = runtimes or {}, team_services or {}
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
            read_databases={
                **({"proxy": proxy.database.name} if proxy is not None else {}),
                **{f"{RUNTIME_TARGET}{n}": r.database.name for n, r in runtimes.items()},
                **{f"{SERVICE_TARGET}{n}": t.database.name for n, t in team_services.items()},
            },
            depends_on=[*service.apis, *service.build_grants, service.ttl_field],
            job_depends_on=list(service.apis),
            iam_propagation_seconds=cfg.iam_propagation_seconds,
            # Enabled already by the proxy (its token secret) or the service (runtimes'
            # secrets), or here.
            secret_apis=tuple(sorted(set(SECRET_APIS) - set(runtime_apis(cfg))))
            if proxy is None else (),
            secret_depends_on=list(proxy.apis) if proxy is not None else [],
            delivery_targets=_delivery_targets(cfg, service, proxy, runtimes),
        )

    @property
    def function_name(self) -> str:
        return f"{self.name_prefix}-{WATCHDOG_JOB_NAME}"

    @property
    def account_id(self) -> str:
        return service_account_id(self.name_prefix, WATCHDOG_JOB_NAME)

    @property
    def task_key_secret_id(self) -> str:
        return f"{self.name_prefix}{TASK_KEY_SECRET_SUFFIX}"

    @property
    def watch_database_name(self) -> str:
        """Its own database: its cursors and the re-run requests (`<databaseName>-watchdog`)."""
        return self.dedup.watch_database_name

    def environment(self) -> dict[str, pulumi.Input[str]]:
        environment: dict[str, pulumi.Input[str]] = {
            **dedup_environment(self.project, self.region, self.dedup),
            # A DEDUP_*DATABASE setting: policies/databases.py finds its writers by it.
            "DEDUP_WATCH_DATABASE": self.watch_database_name,
            "DEDUP_WATCH_LOOKBACK_SECONDS": str(self.settings.lookback_seconds),
            "DEDUP_WATCH_GRACE_SECONDS": str(self.settings.grace_seconds),
            "DEDUP_WATCH_BACKFILL_RUNS_PER_TICK": str(self.settings.backfill_runs_per_tick),
            "DEDUP_WATCH_BACKFILL_IN_FLIGHT": str(self.settings.backfill_in_flight),
        }
        environment.update(silences_environment(self.settings.silences))
        if "dedup" in self.delivery_targets:
            environment["DEDUP_WATCH_TARGET_URL"] = self.delivery_targets["dedup"][0]
        if "proxy" in self.delivery_targets:
            environment["DEDUP_WATCH_PROXY_URL"] = self.delivery_targets["proxy"][0]
        runtime_urls = {target.removeprefix(RUNTIME_TARGET): url
                        for target, (url, _) in self.delivery_targets.items()
                        if target.startswith(RUNTIME_TARGET)}
        if runtime_urls:  # URLs are outputs: one JSON object once all are known
            names = sorted(runtime_urls)
            environment["DEDUP_WATCH_RUNTIME_URLS"] = pulumi.Output.all(
                *[runtime_urls[n] for n in names]
            ).apply(lambda urls: json.dumps(dict(zip(names, urls, strict=True)),
                                            sort_keys=True, separators=(",", ":")))
        return environment


def _delivery_targets(
    cfg: StackConfig, service: DedupService, proxy: DedupProxy | None,
    runtimes: Mapping[str, JobRuntime],
) -> dict[str, tuple[pulumi.Input[str], pulumi.Input[str] | None]]:
    targets: dict[str, tuple[pulumi.Input[str], pulumi.Input[str] | None]] = {
        f"{RUNTIME_TARGET}{name}": (runtime.function_uri, runtime.service_name)
        for name, runtime in runtimes.items() if cfg.watchdog_delivers_to(runtime=name)
    }
    if cfg.watchdog_delivers_to(proxied=False):
        targets["dedup"] = (service.function_uri, service.service_name)
    if cfg.watchdog_delivers_to(proxied=True) and proxy is not None:
        targets["proxy"] = (proxy.function_uri, proxy.service_name)
    # A team service's URL is in its jobs' table entries (infra/watch_table.py).
    targets.update({f"{SERVICE_TARGET}{t.name}": (t.url or "",
                                                    run_service_name(cfg.project, cfg.region, t))
                    for t in cfg.services if cfg.watchdog_delivers_to(service=t.name)})
    return targets


class Watchdog(pulumi.ComponentResource):
    """The run watchdog function, its own account and grant, and its Scheduler job."""

    function: gcp.cloudfunctionsv2.Function
    function_uri: pulumi.Output[str]
    service_name: pulumi.Output[str]
    account: gcp.serviceaccount.Account
    database: gcp.firestore.Database
    """Its own database (`<databaseName>-watchdog`): its cursors and the re-run requests."""
    datastore_user: gcp.projects.IAMMember
    """roles/datastore.user conditioned to its own database, the only one it writes."""
    reruns_ttl_field: gcp.firestore.Field
    """TTL policy on the re-run requests' expire_at (exempt from indexing)."""
    datastore_viewers: list[gcp.projects.IAMMember]
    """roles/datastore.viewer on each database of run records it reads (the dedup
    database's, the proxy's)."""
    invoker_binding: gcp.cloudrunv2.ServiceIamMember
    iam_wait: pulumi.CustomResource
    scheduled_job: ScheduledJob
    delivery_grants: list[gcp.cloudrunv2.ServiceIamMember]
    """roles/run.invoker for its own account on the services it delivers runs to."""
    delivery_queue: gcp.cloudtasks.Queue | None
    """The Cloud Tasks queue its deliveries go through (when it delivers runs)."""
    queue_grants: list[pulumi.CustomResource]
    """roles/cloudtasks.enqueuer and roles/cloudtasks.viewer on that queue,
    roles/iam.serviceAccountUser on itself, the accessor role on its task key."""
    task_key_secret: gcp.secretmanager.Secret | None
    """The key its task names carry a MAC under (when it delivers runs)."""
    task_key_version: gcp.secretmanager.SecretVersion | None
    source_object: gcp.storage.BucketObject
    """Its source: function/ plus its job table (the watch list)."""

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
            description="Runs the run watchdog: reads the run records (dedup and proxy "
            "databases) and writes its cursors and the re-run requests' status in its own "
            "database only.",
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        # --- its own database: cursors and re-run requests, which job code cannot write --
        self.database = declare_database(
            f"{name}-database", parent=self, project=project,
            database_name=args.watch_database_name, dedup=args.dedup,
            depends_on=list(args.job_depends_on),
        )
        # roles/datastore.user conditioned to its own database, the only one it writes.
        self.datastore_user = grant_database_user(
            f"{name}-datastore-user",
            parent=self,
            project=project,
            member=self.account.member,
            database=self.database.name,
        )
        # `make rerun`'s requests carry expire_at (requested + retention): Firestore deletes
        # them with the runs they asked for, as it does the run records.
        self.reruns_ttl_field = declare_unindexed_field(
            f"{name}-reruns-ttl-field", parent=self, project=project,
            database=self.database.name,
            collection=f"{args.dedup.collection}{RERUNS_COLLECTION_SUFFIX}",
            field_name=TTL_FIELD, ttl=True,
        )
        # Read only, every database of run records (the dedup function's, the proxy's).
        self.datastore_viewers = [
            grant_database_user(
                f"{name}-reads-{component}-database",
                parent=self,
                project=project,
                member=self.account.member,
                database=database,
                read_only=True,
            )
            for component, database in sorted(
                {"dedup": args.database, **args.read_databases}.items())
        ]
        # Only when it delivers runs (catch-up, re-runs), on those services only; its wait
        # covers them, so the first delivery does not meet a grant still propagating.
        self.delivery_grants = [
            grant_invoker(
                f"{name}-delivers-to-{target}",
                parent=self,
                project=project,
                region=args.region,
                service_name=service_name,
                member=self.account.member,
            )
            for target, (_, service_name) in sorted(args.delivery_targets.items())
            if service_name is not None  # App Engine: no per-service grant
        ]
        # Its deliveries go through a Cloud Tasks queue: Cloud Run admits a task from the
        # same project on an internal-only URL, not a POST from a function without VPC
        # egress (docs/security.md, "Deliveries by the watchdog").
        self.delivery_queue, self.queue_grants = (
            self._delivery_queue(name, args) if args.delivery_targets else (None, [])
        )
        self.task_key_secret, self.task_key_version = None, None
        if self.delivery_queue is not None:
            self.task_key_secret, self.task_key_version, key_reader = self._task_key(
                name, args)
            self.queue_grants.append(key_reader)
        self.iam_wait = wait_for_iam(
            f"{name}-iam-propagation",
            parent=self,
            after=[self.account, self.datastore_user, *self.datastore_viewers,
                   *self.delivery_grants, *self.queue_grants],
            seconds=args.iam_propagation_seconds,
            triggers={"watchdog": self.account.email},
        )
        # One tick every few minutes: no warm instance (the stack's minInstances is for the
        # jobs' latency), and one tick at a time.
        settings = args.function_base.settings.model_copy(
            update={"min_instances": 0, "max_instances": 1, "max_request_concurrency": 1}
        )
        base = dataclasses.replace(args.function_base, settings=settings)
        # It runs no job logic: the kit's code and lock alone, so nothing of the team's is
        # built or imported with its identity (it creates the deliveries' tasks).
        source = declare_source(
            name, parent=self, base=base, table=WATCH_JOBS_TABLE,
            content=list(args.watched_jobs), runs_jobs=False,
        )
        self.source_object = source.object
        declared = declare_function(
            name,
            parent=self,
            base=base,
            source=source,
            function_name=args.function_name,
            description="Run watchdog: reports missed, failed, overlong and never-run runs of "
            "the stack's Scheduler jobs.",
            entry_point=ENTRY_POINT,
            runtime_account_email=self.account.email,
            environment={**args.environment(), **self._queue_environment(args)},
            secret_environment=self._task_key_environment(args),
            # Its job sends OIDC tokens of the stack's invoker account (see the docstring).
            allowed_callers=[args.function_base.invoker_email],
            depends_on=[*args.depends_on, self.database, self.reruns_ttl_field,
                        self.datastore_user, *self.datastore_viewers, self.iam_wait],
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
                "deliveryQueue": self.delivery_queue.name if self.delivery_queue else None,
                "taskKeySecret": self.task_key_secret.name if self.task_key_secret else None,
                "functionUri": self.function_uri,
                "serviceAccount": self.account.email,
                "jobName": self.scheduled_job.job_name,
            }
        )

    def _delivery_queue(
        self, name: str, args: WatchdogArgs
    ) -> tuple[gcp.cloudtasks.Queue, list[pulumi.CustomResource]]:
        """The deliveries queue, the watchdog's enqueuer grant on it, and actAs on its own
        account: a task's OIDC token is minted for `oidcToken.serviceAccountEmail`, and "the
        caller must have iam.serviceAccounts.actAs permission for the service account"
        (google.cloud.tasks.v2.OidcToken). Its own account only: nothing it could not do."""
        queue = gcp.cloudtasks.Queue(
            f"{name}-deliveries",
            project=args.project,
            location=args.region,
            name=f"{args.name_prefix}{DELIVERY_QUEUE_SUFFIX}",
            retry_config=gcp.cloudtasks.QueueRetryConfigArgs(
                max_attempts=DELIVERY_MAX_ATTEMPTS,
                min_backoff=duration_string(DELIVERY_MIN_BACKOFF_SECONDS),
                max_backoff=duration_string(DELIVERY_MAX_BACKOFF_SECONDS),
                max_doublings=DELIVERY_MAX_DOUBLINGS,
            ),
            # One run at a time per task; a handful side by side is plenty for catch-ups.
            rate_limits=gcp.cloudtasks.QueueRateLimitsArgs(
                max_dispatches_per_second=10, max_concurrent_dispatches=10,
            ),
            stackdriver_logging_config=gcp.cloudtasks.QueueStackdriverLoggingConfigArgs(
                sampling_ratio=1.0,  # every attempt logged: a delivery is rare and matters
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.job_depends_on)),
        )
        enqueuer = gcp.cloudtasks.QueueIamMember(
            f"{name}-enqueues-deliveries",
            project=args.project,
            location=args.region,
            name=queue.name,
            role=ROLE_TASKS_ENQUEUER,
            member=self.account.member,
            opts=pulumi.ResourceOptions(parent=self),
        )
        reads_tasks = gcp.cloudtasks.QueueIamMember(
            f"{name}-reads-deliveries",
            project=args.project,
            location=args.region,
            name=queue.name,
            role=ROLE_TASKS_VIEWER,
            member=self.account.member,
            opts=pulumi.ResourceOptions(parent=self),
        )
        acts_as_itself = gcp.serviceaccount.IAMMember(
            f"{name}-acts-as-itself",
            service_account_id=self.account.name,
            role=ROLE_SA_USER,
            member=self.account.member,
            opts=pulumi.ResourceOptions(parent=self),
        )
        return queue, [enqueuer, reads_tasks, acts_as_itself]

    def _task_key(
        self, name: str, args: WatchdogArgs
    ) -> tuple[gcp.secretmanager.Secret, gcp.secretmanager.SecretVersion,
               gcp.secretmanager.SecretIamMember]:
        """The task key (module docstring): a random value, a secret whose one reader is
        the watchdog's account. The pack refuses any other reader (resource
        `watchdog-task-key`)."""
        apis = enable_apis(f"{name}-task-key", parent=self, project=args.project,
                           apis=args.secret_apis)
        key = declare_random_secret(
            f"{name}-task-key", parent=self, project=args.project,
            secret_id=args.task_key_secret_id, labels=args.function_base.labels,
            readers={"reader": self.account.member},
            depends_on=[*args.job_depends_on, *args.secret_depends_on, *apis],
        )
        [reader] = key.readers
        return key.secret, key.version, reader

    def _task_key_environment(
        self, args: WatchdogArgs
    ) -> list[gcp.cloudfunctionsv2.FunctionServiceConfigSecretEnvironmentVariableArgs]:
        """DEDUP_WATCH_TASK_KEY, the version made here (a new key only with a deploy)."""
        if self.task_key_secret is None or self.task_key_version is None:
            return []
        return [gcp.cloudfunctionsv2.FunctionServiceConfigSecretEnvironmentVariableArgs(
            key=TASK_KEY_ENV, project_id=args.project, secret=self.task_key_secret.secret_id,
            version=self.task_key_version.version)]

    def _queue_environment(self, args: WatchdogArgs) -> dict[str, pulumi.Input[str]]:
        """DEDUP_WATCH_QUEUE and DEDUP_WATCH_TASK_ACCOUNT (dedup/watchdog/cloud_tasks.py)."""
        if self.delivery_queue is None:
            return {}
        return {
            "DEDUP_WATCH_QUEUE": pulumi.Output.concat(
                "projects/", args.project, "/locations/", args.region, "/queues/",
                self.delivery_queue.name,
            ),
            "DEDUP_WATCH_TASK_ACCOUNT": self.account.email,
        }

"""DedupService: the deduplicating Cloud Run function and everything it needs.

One component, importable into any Pulumi program: the APIs, the Firestore database with
the TTL policy on `expire_at` (it and `schedule_time` exempt from indexing), the private
source bucket and the function's content-hashed source object (with its job table, the
job routes), an Artifact Registry repository for the
build, three dedicated service accounts (runtime, build, invoker) with the narrowest grants
the resources allow, the 2nd gen function with internal-only ingress that serves only the
invoker account (DEDUP_ALLOWED_CALLERS = its e-mail), and `roles/run.invoker` for the
invoker account on that one service.
Nothing is granted to `allUsers` or `allAuthenticatedUsers`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pulumi

from dedup.settings import DEFAULT_JOB_ENV
from infra import gcp
from infra.cloud_function import (
    FunctionBase,
    declare_function,
    declare_source,
    enable_apis,
    grant_database_user,
)
from infra.config import (
    DEFAULTS,
    DedupSettings,
    FunctionSettings,
    StackConfig,
    service_account_id,
)
from infra.iam_wait import wait_for_iam
from infra.job_modules import modules_of
from infra.records_database import declare_records_database
from infra.source import JOB_ROUTES_TABLE

COMPONENT_TYPE: Final = "scheduler-dedup:index:DedupService"
ENTRY_POINT: Final = "handle_scheduled_job"

# Every API the stack uses (enabled with disable_on_destroy=False, see enable_apis).
REQUIRED_APIS: Final = (
    "cloudresourcemanager.googleapis.com",  # project IAM bindings and the project lookup
    "iam.googleapis.com",  # service accounts
    "serviceusage.googleapis.com",  # enabling the others
    "storage.googleapis.com",  # source bucket
    "artifactregistry.googleapis.com",  # the function's container image
    "cloudbuild.googleapis.com",  # builds the function from source
    "cloudfunctions.googleapis.com",  # the function
    "run.googleapis.com",  # the function's Cloud Run service
    "logging.googleapis.com",  # build logs, log-based metrics
    "monitoring.googleapis.com",  # alert policies, notification channels, dashboard
    "firestore.googleapis.com",  # dedup records
    "cloudscheduler.googleapis.com",  # the jobs
    "cloudtasks.googleapis.com",  # the watchdog's deliveries (catch-up, re-runs)
)

ROLE_LOG_WRITER: Final = "roles/logging.logWriter"
ROLE_AR_WRITER: Final = "roles/artifactregistry.writer"
ROLE_OBJECT_VIEWER: Final = "roles/storage.objectViewer"

DEFAULT_LABELS: Final[Mapping[str, str]] = {"managed-by": "pulumi", "kit": "scheduler-dedup"}


@dataclass(frozen=True)
class DedupServiceArgs:
    """Everything DedupService needs; `from_config` builds it from the stack config."""

    project: str
    region: str
    name_prefix: str
    dedup: DedupSettings
    function: FunctionSettings
    job_routes: Mapping[str, str]
    """Scheduler job ID -> `module:function`: the function's job table (job_routes.json)."""
    source_dir: Path
    """The function's source root (main.py, requirements.txt, packages)."""
    build_dir: Path
    """Where the source zip is written before upload."""
    team_dir: Path | None = None
    """The team's function/ when it is not `source_dir` (the kit installed): its jobs/."""
    enable_apis: bool = True
    labels: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_LABELS))
    iam_propagation_seconds: int = int(DEFAULTS["iamPropagationSeconds"])
    """How long the function's deployment waits after the accounts' grants (infra/iam_wait)."""
    watchdog_caller: str | None = None
    """The watchdog's account e-mail when it delivers runs (catch-up, re-runs): then an
    allowed caller too (infra/watchdog.py grants it run.invoker on the service)."""
    runtime_apis: tuple[str, ...] = ()
    """APIs the stack's runtimes need beyond REQUIRED_APIS (Secret Manager, VPC Access)."""
    job_modules: tuple[str, ...] | None = None
    """When the stack has runtimes, the team's modules its own jobs use: all of the team's
    code its archive carries (None: every module, as a stack without runtimes)."""

    @classmethod
    def from_config(
        cls, cfg: StackConfig, *, source_dir: Path, build_dir: Path, team_dir: Path | None = None
    ) -> DedupServiceArgs:
        return cls(
            project=cfg.project,
            region=cfg.region,
            name_prefix=cfg.name_prefix,
            dedup=cfg.dedup,
            function=cfg.function,
            job_routes=cfg.job_routes(),
            source_dir=source_dir,
            build_dir=build_dir,
            team_dir=team_dir,
            iam_propagation_seconds=cfg.iam_propagation_seconds,
            watchdog_caller=(
                cfg.watchdog_email if cfg.watchdog_delivers_to(proxied=False) else None
            ),
            runtime_apis=runtime_apis(cfg),
            # Its jobs' modules and defaultJobLogic's, which it imports at start when it
            # has no job of its own (dedup.job_logic).
            job_modules=(modules_of([*cfg.job_routes().values(),
                                     cfg.dedup.default_job_logic])
                         if cfg.runtimes else None),
        )

    # Resource names derived from the prefix (all within Google's length limits, see
    # config: the prefix has at most 22 characters).
    @property
    def function_name(self) -> str:
        return self.name_prefix

    @property
    def bucket_name(self) -> str:
        return f"{self.project}-{self.name_prefix}-source"

    @property
    def repository_id(self) -> str:
        return f"{self.name_prefix}-builds"

    def account_id(self, role: str) -> str:
        return service_account_id(self.name_prefix, role)

    def environment(self) -> dict[str, str]:
        """The DEDUP_* environment of the function (see the function's settings); the job
        routes travel in its source archive, not here (32 KiB cap)."""
        return {
            **dedup_environment(self.project, self.region, self.dedup),
            DEFAULT_JOB_ENV: self.dedup.default_job_logic,
        }


def runtime_apis(cfg: StackConfig) -> tuple[str, ...]:
    """The APIs the stack's runtimes use: Secret Manager for secrets, Serverless VPC Access
    for a connector (none for a stack without runtimes)."""
    needed = set()
    for runtime in cfg.runtimes:
        if runtime.secrets:
            needed.add("secretmanager.googleapis.com")
        if runtime.network is not None and runtime.network.vpc_connector is not None:
            needed.add("vpcaccess.googleapis.com")
    return tuple(sorted(needed))


def dedup_environment(
    project: str, region: str, dedup: DedupSettings, database: str | None = None
) -> dict[str, str]:
    """The claim protocol's DEDUP_* settings, shared by the dedup function, the proxy and
    the watchdog: collection, lease, retention; the records' database is the dedup
    database unless `database` names another (the proxy's own)."""
    return {
        "DEDUP_PROJECT": project,
        "DEDUP_LOCATION": region,
        "DEDUP_DATABASE": database or dedup.database_name,
        "DEDUP_COLLECTION": dedup.collection,
        "DEDUP_LEASE_SECONDS": str(dedup.lease_seconds),
        "DEDUP_RETENTION_SECONDS": str(dedup.retention_seconds),
        "DEDUP_MISSING_SCHEDULE_TIME": dedup.missing_schedule_time,
        "DEDUP_STORE_TIMEOUT_SECONDS": str(dedup.store_timeout_seconds),
        "DEDUP_CACHE_SIZE": str(dedup.cache_size),
        "DEDUP_FORCED_RUN_MARGIN_SECONDS": str(dedup.forced_run_margin_seconds),
    }


def gcf_sources_condition_expression(project_number: str, region: str) -> str:
    """The IAM condition for Cloud Functions' own source staging bucket of one region.

    Cloud Functions copies the uploaded source to `gcf-v2-sources-<number>-<region>` and
    the build fetches it from there. That bucket appears on the first deployment, so it
    cannot carry a bucket-level binding beforehand; the condition pins the grant to it.
    """
    bucket = f"gcf-v2-sources-{project_number}-{region}"
    return (
        f'resource.name == "projects/_/buckets/{bucket}" || '
        f'resource.name.startsWith("projects/_/buckets/{bucket}/")'
    )


class DedupService(pulumi.ComponentResource):
    """The dedup function, its data store and its identities."""

    function: gcp.cloudfunctionsv2.Function
    function_uri: pulumi.Output[str]
    """The function's run.app URL: the jobs' target and OIDC audience."""
    service_name: pulumi.Output[str]
    runtime_account: gcp.serviceaccount.Account
    build_account: gcp.serviceaccount.Account
    invoker_account: gcp.serviceaccount.Account
    database: gcp.firestore.Database
    ttl_field: gcp.firestore.Field
    """TTL policy on expire_at, which is exempt from indexing."""
    schedule_time_field: gcp.firestore.Field
    """schedule_time exempt from indexing (no TTL)."""
    invoker_binding: gcp.cloudrunv2.ServiceIamMember
    apis: list[gcp.projects.Service]
    iam_wait: pulumi.CustomResource
    """The wait for the accounts and grants to propagate; the function depends on it."""
    source_object: gcp.storage.BucketObject
    """The function's source: function/ plus its job table (the job routes)."""
    function_base: FunctionBase
    """What the function shares with the proxy (source, build, settings, invoker)."""

    def __init__(
        self,
        name: str,
        args: DedupServiceArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        project, region = args.project, args.region

        # --- APIs --------------------------------------------------------------------
        self.apis = enable_apis(
            name, parent=self, project=project,
            apis=(*REQUIRED_APIS, *args.runtime_apis) if args.enable_apis else (),
        )
        after_apis = pulumi.ResourceOptions(parent=self, depends_on=list(self.apis))

        # --- identities: one account per role ----------------------------------------
        def account(role: str, description: str) -> gcp.serviceaccount.Account:
            return gcp.serviceaccount.Account(
                f"{name}-{role}-sa",
                project=project,
                account_id=args.account_id(role),
                display_name=f"Scheduler dedup function ({role})",
                description=description,
                opts=after_apis,
            )

        self.runtime_account = account(
            "runtime", "Runs the dedup function; reads and writes the dedup database only."
        )
        self.build_account = account(
            "build", "Cloud Build identity that builds the dedup function's image."
        )
        self.invoker_account = account(
            "invoker", "OIDC identity of the Scheduler jobs; may only invoke the function."
        )

        # --- Firestore: the dedup records -------------------------------------------
        records = declare_records_database(
            name, parent=self, project=project, database_name=args.dedup.database_name,
            dedup=args.dedup, depends_on=self.apis,
        )
        self.database = records.database
        self.ttl_field = records.ttl_field
        self.schedule_time_field = records.schedule_time_field

        # --- source: private bucket, content-hashed object ----------------------------
        self.bucket = gcp.storage.Bucket(
            f"{name}-source-bucket",
            project=project,
            name=args.bucket_name,
            location=region,
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            force_destroy=True,  # holds only build inputs, recreated from git on demand
            soft_delete_policy=gcp.storage.BucketSoftDeletePolicyArgs(retention_duration_seconds=0),
            labels=dict(args.labels),
            opts=after_apis,
        )

        # --- Artifact Registry repository for the function's image ------------------
        self.repository = gcp.artifactregistry.Repository(
            f"{name}-images",
            project=project,
            location=region,
            repository_id=args.repository_id,
            format="DOCKER",
            description="Images of the scheduler dedup function (built by Cloud Build).",
            cleanup_policies=[
                gcp.artifactregistry.RepositoryCleanupPolicyArgs(
                    id="keep-recent",
                    action="KEEP",
                    most_recent_versions=gcp.artifactregistry.RepositoryCleanupPolicyMostRecentVersionsArgs(
                        keep_count=5
                    ),
                ),
                gcp.artifactregistry.RepositoryCleanupPolicyArgs(
                    id="delete-old",
                    action="DELETE",
                    condition=gcp.artifactregistry.RepositoryCleanupPolicyConditionArgs(
                        tag_state="ANY", older_than="2592000s"
                    ),
                ),
            ],
            labels=dict(args.labels),
            opts=after_apis,
        )

        # --- build account: the minimal roles a dedicated Cloud Functions build needs --
        build_member = self.build_account.member
        # Build logs are written to the project's Cloud Logging; log entries have no
        # narrower resource to grant on. The role holds only logging.logEntries.create
        # (and logging.logEntries.route).
        self.build_log_writer = gcp.projects.IAMMember(
            f"{name}-build-log-writer",
            project=project,
            role=ROLE_LOG_WRITER,
            member=build_member,
            opts=child,
        )
        # Push the built image: writer on this one repository (set as the function's
        # docker_repository), not on the project.
        self.build_registry_writer = gcp.artifactregistry.RepositoryIamMember(
            f"{name}-build-registry-writer",
            project=project,
            location=region,
            repository=self.repository.repository_id,
            role=ROLE_AR_WRITER,
            member=build_member,
            opts=child,
        )
        # Fetch the source: Cloud Functions copies our object into its staging bucket
        # gcf-v2-sources-<number>-<region> and the build reads it there. That bucket is
        # created by the first deployment, so the grant is on the project but conditioned
        # to that bucket and its objects.
        project_info = gcp.organizations.get_project_output(
            project_id=project, opts=pulumi.InvokeOutputOptions(parent=self)
        )
        self.build_source_reader = gcp.projects.IAMMember(
            f"{name}-build-source-reader",
            project=project,
            role=ROLE_OBJECT_VIEWER,
            member=build_member,
            condition=gcp.projects.IAMMemberConditionArgs(
                title="gcf-v2-sources-only",
                description="Read the function source Cloud Functions stages for builds.",
                expression=project_info.number.apply(
                    lambda number: gcf_sources_condition_expression(str(number), region)
                ),
            ),
            opts=child,
        )

        # --- runtime account: read/write the one dedup database ----------------------
        self.runtime_datastore_user = grant_database_user(
            f"{name}-runtime-datastore-user",
            parent=self,
            project=project,
            member=self.runtime_account.member,
            database=self.database.name,
        )

        # --- wait for the accounts and grants to propagate (see infra/iam_wait.py) ------
        self.iam_wait = wait_for_iam(
            f"{name}-iam-propagation",
            parent=self,
            after=[
                self.build_account,
                self.runtime_account,
                *self.build_grants,
                self.runtime_datastore_user,
            ],
            seconds=args.iam_propagation_seconds,
            triggers={"build": self.build_account.email, "runtime": self.runtime_account.email},
        )

        # --- the function, and the invoker account on its one Cloud Run service ---------
        self.function_base = FunctionBase(
            project=project,
            region=region,
            source_bucket=self.bucket.name,
            source_dir=args.source_dir,
            build_dir=args.build_dir,
            team_dir=args.team_dir,
            build_service_account=self.build_account.name,
            docker_repository=self.repository.id,
            settings=args.function,
            labels=args.labels,
            invoker_member=self.invoker_account.member,
            invoker_email=self.invoker_account.email,
        )
        source = declare_source(
            name, parent=self, base=self.function_base, table=JOB_ROUTES_TABLE,
            content=dict(args.job_routes), runs_jobs=True, job_modules=args.job_modules,
        )
        self.source_object, self.source_sha256 = source.object, source.sha256
        declared = declare_function(
            name,
            parent=self,
            base=self.function_base,
            function_name=args.function_name,
            description="Runs Cloud Scheduler jobs effectively exactly once (dedup by run key).",
            entry_point=ENTRY_POINT,
            runtime_account_email=self.runtime_account.email,
            environment=args.environment(),
            # Every job of the stack sends OIDC tokens of the invoker account (and the
            # watchdog its own, when it delivers runs).
            allowed_callers=[
                self.function_base.invoker_email,
                *([args.watchdog_caller] if args.watchdog_caller else []),
            ],
            depends_on=[
                *self.apis,
                *self.build_grants,
                self.runtime_datastore_user,
                self.ttl_field,
                self.iam_wait,
            ],
            source=source,
        )
        self.function, self.function_uri, self.service_name, self.invoker_binding = declared

        self.register_outputs(
            {
                "functionUri": self.function_uri,
                "serviceName": self.service_name,
                "runtimeServiceAccount": self.runtime_account.email,
                "buildServiceAccount": self.build_account.email,
                "invokerServiceAccount": self.invoker_account.email,
                "databaseName": self.database.name,
                "sourceObject": self.source_object.name,
            }
        )

    @property
    def build_grants(self) -> Sequence[pulumi.Resource]:
        """The build account's roles: a function built from the kit's source waits for them."""
        return [self.build_log_writer, self.build_registry_writer, self.build_source_reader]

    @property
    def ready(self) -> Sequence[pulumi.Resource]:
        """What a job must wait for before its first delivery can succeed."""
        return [*self.apis, self.invoker_binding]

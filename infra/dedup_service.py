"""DedupService: the deduplicating Cloud Run function and everything it needs.

One component, importable into any Pulumi program: the APIs, the Firestore database with
the TTL policy on `expire_at`, the private source bucket and content-hashed source object,
an Artifact Registry repository for the build, three dedicated service accounts (runtime,
build, invoker) with the narrowest grants the resources allow, the 2nd gen function with
internal-only ingress, and `roles/run.invoker` for the invoker account on that one service.
Nothing is granted to `allUsers` or `allAuthenticatedUsers`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pulumi
import pulumi_gcp as gcp

from infra.config import DedupSettings, FunctionSettings, StackConfig
from infra.source import write_source_archive

COMPONENT_TYPE: Final = "scheduler-dedup:index:DedupService"
FUNCTION_RUNTIME: Final = "python312"
ENTRY_POINT: Final = "handle_scheduled_job"
TTL_FIELD: Final = "expire_at"

# Every API the stack uses. disable_on_destroy=False: tearing the stack down must never
# switch an API off under other workloads of the same project.
REQUIRED_APIS: Final = (
    "cloudresourcemanager.googleapis.com",  # project IAM bindings and the project lookup
    "iam.googleapis.com",  # service accounts
    "serviceusage.googleapis.com",  # enabling the others
    "storage.googleapis.com",  # source bucket
    "artifactregistry.googleapis.com",  # the function's container image
    "cloudbuild.googleapis.com",  # builds the function from source
    "cloudfunctions.googleapis.com",  # the function
    "run.googleapis.com",  # the function's Cloud Run service
    "logging.googleapis.com",  # build logs
    "firestore.googleapis.com",  # dedup records
    "cloudscheduler.googleapis.com",  # the jobs
)

ROLE_RUN_INVOKER: Final = "roles/run.invoker"
ROLE_DATASTORE_USER: Final = "roles/datastore.user"
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
    """Scheduler job ID -> `module:function`, sent as DEDUP_JOB_ROUTES."""
    source_dir: Path
    """The function's source root (main.py, requirements.txt, packages)."""
    build_dir: Path
    """Where the source zip is written before upload."""
    enable_apis: bool = True
    labels: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_LABELS))

    @classmethod
    def from_config(
        cls, cfg: StackConfig, *, source_dir: Path, build_dir: Path
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
        return f"{self.name_prefix}-{role}"

    def environment(self) -> dict[str, str]:
        """The DEDUP_* environment of the function (see the function's settings)."""
        return {
            **dedup_environment(self.project, self.region, self.dedup),
            "DEDUP_JOB": self.dedup.default_job_logic,
            "DEDUP_JOB_ROUTES": json.dumps(dict(self.job_routes), sort_keys=True),
        }


def dedup_environment(project: str, region: str, dedup: DedupSettings) -> dict[str, str]:
    """The claim protocol's DEDUP_* settings, shared by the dedup function and the proxy:
    same database and collection (so the one TTL policy covers both), lease, retention."""
    return {
        "DEDUP_PROJECT": project,
        "DEDUP_LOCATION": region,
        "DEDUP_DATABASE": dedup.database_name,
        "DEDUP_COLLECTION": dedup.collection,
        "DEDUP_LEASE_SECONDS": str(dedup.lease_seconds),
        "DEDUP_RETENTION_SECONDS": str(dedup.retention_seconds),
        "DEDUP_MISSING_SCHEDULE_TIME": dedup.missing_schedule_time,
        "DEDUP_STORE_TIMEOUT_SECONDS": str(dedup.store_timeout_seconds),
        "DEDUP_CACHE_SIZE": str(dedup.cache_size),
    }


def database_condition_expression(project: str, database: str) -> str:
    """The IAM condition that limits a Datastore/Firestore role to one database."""
    return f'resource.name == "projects/{project}/databases/{database}"'


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


def _service_name(config: Any) -> str:
    service = getattr(config, "service", None) if config is not None else None
    if not service:
        raise ValueError("the function's serviceConfig.service is not set")
    return str(service)


def _service_uri(config: Any) -> str:
    uri = getattr(config, "uri", None) if config is not None else None
    if not uri:
        raise ValueError("the function's serviceConfig.uri is not set")
    return str(uri)


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
    invoker_binding: gcp.cloudrunv2.ServiceIamMember
    apis: list[gcp.projects.Service]
    source_object: gcp.storage.BucketObject

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
        self.apis = []
        if args.enable_apis:
            for api in REQUIRED_APIS:
                self.apis.append(
                    gcp.projects.Service(
                        f"{name}-api-{api.split('.')[0]}",
                        project=project,
                        service=api,
                        disable_on_destroy=False,
                        disable_dependent_services=False,
                        opts=child,
                    )
                )
        after_apis = pulumi.ResourceOptions(parent=self, depends_on=list(self.apis))

        # --- identities ----------------------------------------------------------------
        self.runtime_account = gcp.serviceaccount.Account(
            f"{name}-runtime-sa",
            project=project,
            account_id=args.account_id("runtime"),
            display_name="Scheduler dedup function (runtime)",
            description="Runs the dedup function; reads and writes the dedup database only.",
            opts=after_apis,
        )
        self.build_account = gcp.serviceaccount.Account(
            f"{name}-build-sa",
            project=project,
            account_id=args.account_id("build"),
            display_name="Scheduler dedup function (build)",
            description="Cloud Build identity that builds the dedup function's image.",
            opts=after_apis,
        )
        self.invoker_account = gcp.serviceaccount.Account(
            f"{name}-invoker-sa",
            project=project,
            account_id=args.account_id("invoker"),
            display_name="Scheduler dedup function (invoker)",
            description="OIDC identity of the Scheduler jobs; may only invoke the function.",
            opts=after_apis,
        )

        # --- Firestore: the dedup records -------------------------------------------
        d = args.dedup
        self.database = gcp.firestore.Database(
            f"{name}-database",
            project=project,
            name=d.database_name,
            location_id=d.firestore_location,
            type="FIRESTORE_NATIVE",
            app_engine_integration_mode="DISABLED",
            delete_protection_state=(
                "DELETE_PROTECTION_ENABLED" if d.delete_protection else "DELETE_PROTECTION_DISABLED"
            ),
            point_in_time_recovery_enablement=(
                "POINT_IN_TIME_RECOVERY_ENABLED"
                if d.point_in_time_recovery
                else "POINT_IN_TIME_RECOVERY_DISABLED"
            ),
            # Let `pulumi destroy` delete an unprotected database; a protected one is also
            # `protect`ed in Pulumi, so destroy refuses before touching anything.
            deletion_policy="DELETE",
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=list(self.apis), protect=d.delete_protection
            ),
        )
        # TTL policy on expire_at (Firestore deletes expired records, typically within a
        # day), and an empty index config: the timestamp is never queried, and a single
        # field index on a monotonically increasing value would only cost writes.
        self.ttl_field = gcp.firestore.Field(
            f"{name}-ttl-field",
            project=project,
            database=self.database.name,
            collection=d.collection,
            field=TTL_FIELD,
            ttl_config=gcp.firestore.FieldTtlConfigArgs(),
            index_config=gcp.firestore.FieldIndexConfigArgs(),
            opts=child,
        )

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
        archive, archive_path = write_source_archive(args.source_dir, args.build_dir)
        self.source_sha256 = archive.sha256
        self.source_object = gcp.storage.BucketObject(
            f"{name}-source",
            bucket=self.bucket.name,
            name=archive.object_name,
            source=pulumi.FileAsset(str(archive_path)),
            content_type="application/zip",
            opts=child,
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
        self.runtime_datastore_user = gcp.projects.IAMMember(
            f"{name}-runtime-datastore-user",
            project=project,
            role=ROLE_DATASTORE_USER,
            member=self.runtime_account.member,
            condition=gcp.projects.IAMMemberConditionArgs(
                title="dedup-database-only",
                description="Only the scheduler dedup database.",
                expression=self.database.name.apply(
                    lambda db: database_condition_expression(project, db)
                ),
            ),
            opts=child,
        )

        # --- the function ---------------------------------------------------------------
        f = args.function
        self.function = gcp.cloudfunctionsv2.Function(
            f"{name}-function",
            project=project,
            location=region,
            name=args.function_name,
            description="Runs Cloud Scheduler jobs effectively exactly once (dedup by run key).",
            labels=dict(args.labels),
            build_config=gcp.cloudfunctionsv2.FunctionBuildConfigArgs(
                runtime=FUNCTION_RUNTIME,
                entry_point=ENTRY_POINT,
                service_account=self.build_account.name,
                docker_repository=self.repository.id,
                source=gcp.cloudfunctionsv2.FunctionBuildConfigSourceArgs(
                    storage_source=gcp.cloudfunctionsv2.FunctionBuildConfigSourceStorageSourceArgs(
                        bucket=self.bucket.name,
                        object=self.source_object.name,
                    ),
                ),
            ),
            service_config=gcp.cloudfunctionsv2.FunctionServiceConfigArgs(
                service_account_email=self.runtime_account.email,
                ingress_settings="ALLOW_INTERNAL_ONLY",
                all_traffic_on_latest_revision=True,
                timeout_seconds=f.timeout_seconds,
                available_memory=f.memory,
                available_cpu=f.available_cpu,
                min_instance_count=f.min_instances,
                max_instance_count=f.max_instances,
                max_instance_request_concurrency=f.max_request_concurrency,
                environment_variables=args.environment(),
            ),
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[
                    *self.apis,
                    self.build_log_writer,
                    self.build_registry_writer,
                    self.build_source_reader,
                    self.runtime_datastore_user,
                    self.ttl_field,
                ],
            ),
        )
        self.function_uri = self.function.service_config.apply(_service_uri)
        self.service_name = self.function.service_config.apply(_service_name)

        # --- invocation: the invoker account on this one Cloud Run service -----------
        self.invoker_binding = gcp.cloudrunv2.ServiceIamMember(
            f"{name}-invoker",
            project=project,
            location=region,
            name=self.service_name,
            role=ROLE_RUN_INVOKER,
            member=self.invoker_account.member,
            opts=child,
        )

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

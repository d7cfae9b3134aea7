"""JobRuntime: one runtime of the stack (`runtimes[]`), the function its jobs run in.

Built like the dedup function (the same build account, repository, bucket, ingress and
invoker: infra/cloud_function.py) but with what is its own, so that nothing one runtime's
jobs are given reaches another's:
- its own runtime account, which holds only what this component grants it;
- its own records database (`<databaseName>-<name>`), the only one it may write: Firestore
  IAM conditions name databases, not collections (docs/security.md, "Runtimes");
- `roles/secretmanager.secretAccessor` on each secret it declares, and no other;
- the team's grants, each on the one resource it names;
- an archive with only its own jobs' modules (and what they import) besides the kit's;
- its settings and secrets as environment variables (secrets read by Cloud Run from Secret
  Manager at instance start, or mounted as files), its resources, and its VPC egress.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import pulumi

from dedup.settings import DEFAULT_JOB_ENV
from infra import gcp
from infra.cloud_function import (
    FunctionBase,
    FunctionNetwork,
    declare_function,
    declare_source,
    grant_database_user,
)
from infra.config import DedupSettings, GrantSettings, RuntimeSettings, StackConfig
from infra.config.runtimes import EGRESS, SECRET_ACCESSOR_ROLE
from infra.dedup_service import ENTRY_POINT, dedup_environment
from infra.iam_wait import wait_for_iam
from infra.job_modules import modules_of
from infra.records_database import declare_records_database
from infra.source import JOB_ROUTES_TABLE

COMPONENT_TYPE: Final = "scheduler-dedup:index:JobRuntime"
RUNTIME_LABEL: Final = "kit-runtime"
"""The label naming a runtime's function: the policy pack finds runtimes by it."""


@dataclass(frozen=True)
class JobRuntimeArgs:
    """One runtime's settings and what it shares with the dedup service."""

    project: str
    region: str
    runtime: RuntimeSettings
    function_name: str
    account_id: str
    database_name: str
    dedup: DedupSettings
    default_job_logic: str
    job_routes: Mapping[str, str]
    """Its jobs' deployed IDs -> `module:function`: its job table."""
    function_base: FunctionBase
    """The service's: source tree, build, labels, invoker (its settings are replaced)."""
    depends_on: Sequence[pulumi.Resource]
    """What its function waits for (the APIs, the build grants)."""
    iam_propagation_seconds: int
    watchdog_caller: str | None = None
    """The watchdog's e-mail when it delivers this runtime's runs: an allowed caller too."""

    @classmethod
    def from_config(
        cls, cfg: StackConfig, runtime: RuntimeSettings, *, base: FunctionBase,
        depends_on: Sequence[pulumi.Resource],
    ) -> JobRuntimeArgs:
        return cls(
            project=cfg.project,
            region=cfg.region,
            runtime=runtime,
            function_name=cfg.runtime_function_name(runtime),
            account_id=cfg.runtime_account_id(runtime),
            database_name=cfg.runtime_database(runtime),
            dedup=cfg.dedup,
            default_job_logic=cfg.dedup.default_job_logic,
            job_routes=cfg.job_routes(runtime.name),
            function_base=base,
            depends_on=depends_on,
            iam_propagation_seconds=cfg.iam_propagation_seconds,
            watchdog_caller=(cfg.watchdog_email
                             if cfg.watchdog_delivers_to(runtime=runtime.name) else None),
        )

    @property
    def job_modules(self) -> tuple[str, ...]:
        """The modules of its jobs' logic: all of the team's code its archive carries."""
        return modules_of(self.job_routes.values())

    def environment(self) -> dict[str, str]:
        """The kit's DEDUP_* settings (its own database), then the team's settings."""
        return {
            **dedup_environment(self.project, self.region, self.dedup, self.database_name),
            DEFAULT_JOB_ENV: self.default_job_logic,
            **self.runtime.environment(),
        }


class JobRuntime(pulumi.ComponentResource):
    """A runtime's function, account, records database, secrets' and team's grants."""

    account: gcp.serviceaccount.Account
    database: gcp.firestore.Database
    datastore_user: gcp.projects.IAMMember
    secret_grants: list[gcp.secretmanager.SecretIamMember]
    team_grants: list[pulumi.CustomResource]
    function: gcp.cloudfunctionsv2.Function
    function_uri: pulumi.Output[str]
    service_name: pulumi.Output[str]
    invoker_binding: gcp.cloudrunv2.ServiceIamMember

    def __init__(
        self, name: str, args: JobRuntimeArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, None, opts)
        project, runtime = args.project, args.runtime
        after = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        self.account = gcp.serviceaccount.Account(
            f"{name}-sa",
            project=project,
            account_id=args.account_id,
            display_name=f"Scheduler dedup runtime {runtime.name}",
            description=f"Runs the jobs of runtime {runtime.name}: its own records database, "
            "its own secrets and the grants its stack file lists.",
            opts=after,
        )
        member = self.account.member
        records = declare_records_database(
            name, parent=self, project=project, database_name=args.database_name,
            dedup=args.dedup, depends_on=args.depends_on,
        )
        self.database = records.database
        self.datastore_user = grant_database_user(
            f"{name}-datastore-user", parent=self, project=project, member=member,
            database=self.database.name,
        )
        self.secret_grants = [
            gcp.secretmanager.SecretIamMember(
                f"{name}-reads-{secret}",
                project=project,
                secret_id=secret,
                role=SECRET_ACCESSOR_ROLE,
                member=member,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for secret in runtime.secret_ids
        ]
        self.team_grants = [
            declare_grant(f"{name}-grant-{index}", parent=self, project=project, grant=grant,
                          member=member)
            for index, grant in enumerate(runtime.grants)
        ]
        self.iam_wait = wait_for_iam(
            f"{name}-iam-propagation",
            parent=self,
            after=[self.account, self.datastore_user, *self.secret_grants, *self.team_grants],
            seconds=args.iam_propagation_seconds,
            triggers={"runtime": self.account.email},
        )
        base = dataclasses.replace(args.function_base, settings=runtime.function,
                                   labels={**args.function_base.labels,
                                           RUNTIME_LABEL: runtime.name})
        source = declare_source(name, parent=self, base=base, table=JOB_ROUTES_TABLE,
                                content=dict(args.job_routes), runs_jobs=True,
                                job_modules=args.job_modules)
        self.source_object = source.object
        declared = declare_function(
            name,
            parent=self,
            base=base,
            function_name=args.function_name,
            description=f"Runs the Cloud Scheduler jobs of runtime {runtime.name} effectively "
            "exactly once (dedup by run key).",
            entry_point=ENTRY_POINT,
            runtime_account_email=self.account.email,
            environment=args.environment(),
            allowed_callers=[base.invoker_email,
                             *([args.watchdog_caller] if args.watchdog_caller else [])],
            depends_on=[*args.depends_on, self.datastore_user, records.ttl_field,
                        *self.secret_grants, self.iam_wait],
            source=source,
            secret_environment=secret_environment(project, runtime),
            secret_volumes=secret_volumes(project, runtime),
            network=function_network(runtime, project=project, region=args.region),
        )
        self.function, self.function_uri, self.service_name, self.invoker_binding = declared
        self.register_outputs({
            "functionUri": self.function_uri,
            "serviceAccount": self.account.email,
            "databaseName": self.database.name,
        })

    @property
    def ready(self) -> Sequence[pulumi.Resource]:
        """What a job of this runtime waits for before its first delivery."""
        return [self.invoker_binding]


def secret_environment(
    project: str, runtime: RuntimeSettings
) -> list[gcp.cloudfunctionsv2.FunctionServiceConfigSecretEnvironmentVariableArgs]:
    return [
        gcp.cloudfunctionsv2.FunctionServiceConfigSecretEnvironmentVariableArgs(
            key=secret.env, project_id=project, secret=secret.secret, version=secret.version)
        for secret in runtime.secrets if secret.env is not None
    ]


def secret_volumes(
    project: str, runtime: RuntimeSettings
) -> list[gcp.cloudfunctionsv2.FunctionServiceConfigSecretVolumeArgs]:
    return [
        gcp.cloudfunctionsv2.FunctionServiceConfigSecretVolumeArgs(
            mount_path=secret.mount_folder, project_id=project, secret=secret.secret,
            versions=[gcp.cloudfunctionsv2.FunctionServiceConfigSecretVolumeVersionArgs(
                path=secret.file_name, version=secret.version)])
        for secret in runtime.secrets if secret.path is not None
    ]


def function_network(
    runtime: RuntimeSettings, *, project: str, region: str
) -> FunctionNetwork | None:
    """Its VPC egress as the function's settings take it, or None. A connector named
    without its path is the one of that name in the stack's project and region: the API
    takes only the full name (projects/P/locations/R/connectors/C)."""
    network = runtime.network
    if network is None:
        return None
    connector = network.vpc_connector
    if not connector.startswith("projects/"):
        connector = f"projects/{project}/locations/{region}/connectors/{connector}"
    return FunctionNetwork(vpc_connector=connector,
                           vpc_connector_egress_settings=EGRESS[network.egress])


def declare_grant(
    resource_name: str, *, parent: pulumi.Resource, project: str, grant: GrantSettings,
    member: pulumi.Input[str],
) -> pulumi.CustomResource:
    """One of the team's grants: `grant.role` for `member` on the one resource it names."""
    opts = pulumi.ResourceOptions(parent=parent)
    kind, target = grant.target
    role = grant.role
    if kind == "bucket":
        return gcp.storage.BucketIAMMember(resource_name, bucket=target, role=role,
                                           member=member, opts=opts)
    if kind == "dataset":
        dataset_project, _, dataset = target.replace(":", ".").rpartition(".")
        return gcp.bigquery.DatasetIamMember(resource_name, project=dataset_project or project,
                                             dataset_id=dataset, role=role, member=member,
                                             opts=opts)
    if kind == "topic":
        topic_project = target.split("/")[1] if target.startswith("projects/") else project
        return gcp.pubsub.TopicIAMMember(resource_name, project=topic_project,
                                         topic=target.rsplit("/", 1)[-1], role=role,
                                         member=member, opts=opts)
    if kind == "secret":
        return gcp.secretmanager.SecretIamMember(resource_name, project=project,
                                                 secret_id=target, role=role, member=member,
                                                 opts=opts)
    return gcp.projects.IAMMember(resource_name, project=project, role=role, member=member,
                                  opts=opts)

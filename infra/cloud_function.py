"""Declaration helpers shared by the dedup function and the idempotent proxy.

Both are Cloud Run functions (2nd gen) built from the same source tree, each from its own
source object (the tree plus that function's job table, infra/source.py; only the kit's
code and lock for one that runs no job logic), by the same
dedicated build account into the same Artifact Registry repository, run as a runtime
account of their own with internal-only ingress, may be invoked only by the jobs' invoker
account (`roles/run.invoker` on the function's one Cloud Run service), serve only that
account's OIDC tokens (`DEDUP_ALLOWED_CALLERS`, checked in the function: Cloud Run's IAM
check also lets through anyone with a broader role on the service or the project), and
read and write only the dedup database (`roles/datastore.user` conditioned to it). These
helpers declare exactly that. They are plain functions, not components: each resource
takes the Pulumi name and the parent (`parent=self` of the calling component) it is given,
so names and URNs stay those of the component that declares them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple

import pulumi
import pulumi_random as random

from infra import gcp
from infra.config import FunctionSettings
from infra.config.runtimes import SECRET_ACCESSOR_ROLE
from infra.source import table_files, write_source_archive

FUNCTION_RUNTIME: Final = "python312"
INGRESS: Final = "ALLOW_INTERNAL_ONLY"
ROLE_RUN_INVOKER: Final = "roles/run.invoker"
ROLE_DATASTORE_USER: Final = "roles/datastore.user"
ROLE_DATASTORE_VIEWER: Final = "roles/datastore.viewer"
ALLOWED_CALLERS_ENV: Final = "DEDUP_ALLOWED_CALLERS"
"""The function's setting listing the only accounts it serves (function/dedup/settings.py)."""


def database_condition_expression(project: str, database: str) -> str:
    """The IAM condition that limits a Datastore/Firestore role to one database."""
    return f'resource.name == "projects/{project}/databases/{database}"'


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


@dataclass(frozen=True)
class FunctionBase:
    """What every function of the kit shares: where it runs, the source tree it is built
    from (each function's object: that tree plus its own job table) and who builds it
    where, the stack's function settings and labels, and who may invoke it. The dedup
    service makes one; the proxy and the watchdog use the service's."""

    project: str
    region: str
    source_bucket: pulumi.Input[str]
    source_dir: Path
    """The function source tree (main.py, requirements.txt, packages)."""
    build_dir: Path
    """Where the source zips are written before upload."""
    build_service_account: pulumi.Input[str]
    """`projects/P/serviceAccounts/E` of the dedicated build account."""
    docker_repository: pulumi.Input[str]
    """The repository the build account may push to (its ID, `projects/P/locations/L/...`)."""
    settings: FunctionSettings
    labels: Mapping[str, str]
    invoker_member: pulumi.Input[str]
    """`serviceAccount:E` of the jobs' OIDC identity."""
    invoker_email: pulumi.Input[str]
    """E of that account: what its OIDC tokens' `email` claim says, and so the one caller
    the functions built from this base serve (DEDUP_ALLOWED_CALLERS)."""
    team_dir: Path | None = None
    """The team's function/ when it is not `source_dir` (the kit installed): its jobs/,
    which only the archives of functions that run job logic carry (`declare_source`)."""


@dataclass(frozen=True)
class FunctionNetwork:
    """A function's VPC egress, as its serviceConfig takes it: a Serverless VPC Access
    connector with its egress setting."""

    vpc_connector: str | None = None
    vpc_connector_egress_settings: str | None = None


def network_settings(network: FunctionNetwork | None) -> dict[str, Any]:
    """The serviceConfig arguments of `network` (all None: no VPC egress)."""
    network = network or FunctionNetwork()
    return {f.name: getattr(network, f.name) for f in dataclasses.fields(network)}


class FunctionSource(NamedTuple):
    """One function's source object: function/ plus its job table, content-hashed."""

    object: gcp.storage.BucketObject
    object_name: str
    """`function-source/<sha256>.zip`, known before anything is applied."""
    sha256: str


def declare_source(
    name: str, *, parent: pulumi.Resource, base: FunctionBase, table: str, content: object,
    runs_jobs: bool, job_modules: Collection[str] | None = None,
) -> FunctionSource:
    """`{name}-source`: the source tree with the job table `table` (dedup/tables.py) holding
    `content`, uploaded to the source bucket under its hash. Only a change of the tree or of
    this table renames it, and so redeploys this function.

    `runs_jobs`, said by every function: whether it runs job logic (the dedup function, a
    runtime), and so carries the team's code and lock; one that does not (the proxy, the
    watchdog) gets the kit's code and lock alone (infra/source.py). `job_modules`: only
    these of the team's job modules (and what they import) ship; None: all."""
    archive, path = write_source_archive(
        base.source_dir, base.build_dir, table_files(table, content), base.team_dir,
        job_modules=job_modules, kit_only=not runs_jobs,
    )
    source_object = gcp.storage.BucketObject(
        f"{name}-source",
        bucket=base.source_bucket,
        name=archive.object_name,
        source=pulumi.FileAsset(str(path)),
        content_type="application/zip",
        opts=pulumi.ResourceOptions(parent=parent),
    )
    return FunctionSource(source_object, archive.object_name, archive.sha256)


class DeclaredFunction(NamedTuple):
    """A declared function, what its jobs need of it, and their grant to invoke it."""

    function: gcp.cloudfunctionsv2.Function
    uri: pulumi.Output[str]
    """The run.app URL: the jobs' target and OIDC audience."""
    service_name: pulumi.Output[str]
    """The function's Cloud Run service (`projects/P/locations/L/services/S`)."""
    invoker_binding: gcp.cloudrunv2.ServiceIamMember
    """roles/run.invoker for the jobs' invoker account on that one service."""


def enable_apis(
    name: str, *, parent: pulumi.Resource, project: str, apis: Iterable[str]
) -> list[gcp.projects.Service]:
    """One `{name}-api-<service>` per API. disable_on_destroy=False: tearing the stack
    down must never switch an API off under other workloads of the same project."""
    return [
        gcp.projects.Service(
            f"{name}-api-{api.split('.')[0]}",
            project=project,
            service=api,
            disable_on_destroy=False,
            disable_dependent_services=False,
            opts=pulumi.ResourceOptions(parent=parent),
        )
        for api in apis
    ]


def declare_function(
    name: str,
    *,
    parent: pulumi.Resource,
    base: FunctionBase,
    function_name: str,
    description: str,
    entry_point: str,
    runtime_account_email: pulumi.Input[str],
    environment: Mapping[str, pulumi.Input[str]],
    allowed_callers: Sequence[pulumi.Input[str]],
    depends_on: Sequence[pulumi.Resource],
    source: FunctionSource,
    secret_environment: Sequence[
        gcp.cloudfunctionsv2.FunctionServiceConfigSecretEnvironmentVariableArgs
    ] = (),
    secret_volumes: Sequence[gcp.cloudfunctionsv2.FunctionServiceConfigSecretVolumeArgs] = (),
    network: FunctionNetwork | None = None,
) -> DeclaredFunction:
    """The function `{name}-function`, built from `source` as `base` says, with
    internal-only ingress, run as `runtime_account_email` with `environment` plus
    DEDUP_ALLOWED_CALLERS (the
    e-mails of `allowed_callers`: the accounts whose OIDC tokens its Scheduler jobs send);
    and `{name}-invoker`, which lets the jobs' invoker account invoke it."""
    project, region, settings = base.project, base.region, base.settings
    if not allowed_callers:
        raise ValueError(f"{name}: a function of the kit serves at least one caller")
    if ALLOWED_CALLERS_ENV in environment:
        raise ValueError(f"{name}: {ALLOWED_CALLERS_ENV} comes from allowed_callers")
    # E-mails of accounts created in the same program: outputs, known once they exist.
    callers = pulumi.Output.all(*allowed_callers).apply(
        lambda emails: ",".join(dict.fromkeys(str(e) for e in emails))
    )
    function = gcp.cloudfunctionsv2.Function(
        f"{name}-function",
        project=project,
        location=region,
        name=function_name,
        description=description,
        labels=dict(base.labels),
        build_config=gcp.cloudfunctionsv2.FunctionBuildConfigArgs(
            runtime=FUNCTION_RUNTIME,
            entry_point=entry_point,
            service_account=base.build_service_account,
            docker_repository=base.docker_repository,
            source=gcp.cloudfunctionsv2.FunctionBuildConfigSourceArgs(
                storage_source=gcp.cloudfunctionsv2.FunctionBuildConfigSourceStorageSourceArgs(
                    bucket=base.source_bucket,
                    # The name itself, not the object's output: known at a first preview,
                    # where the policy pack links the function to its object (job tables).
                    object=source.object_name,
                ),
            ),
        ),
        service_config=gcp.cloudfunctionsv2.FunctionServiceConfigArgs(
            service_account_email=runtime_account_email,
            ingress_settings=INGRESS,
            all_traffic_on_latest_revision=True,
            timeout_seconds=settings.timeout_seconds,
            available_memory=settings.memory,
            available_cpu=settings.available_cpu,
            min_instance_count=settings.min_instances,
            max_instance_count=settings.max_instances,
            max_instance_request_concurrency=settings.max_request_concurrency,
            environment_variables={**environment, ALLOWED_CALLERS_ENV: callers},
            # Secret Manager versions Cloud Run reads at instance start (no client library).
            secret_environment_variables=list(secret_environment) or None,
            secret_volumes=list(secret_volumes) or None,
            **network_settings(network),
        ),
        opts=pulumi.ResourceOptions(
            parent=parent, depends_on=[*depends_on, source.object]
        ),
    )
    service_name = function.service_config.apply(_service_name)
    invoker_binding = grant_invoker(
        f"{name}-invoker",
        parent=parent,
        project=project,
        region=region,
        service_name=service_name,
        member=base.invoker_member,
    )
    return DeclaredFunction(
        function, function.service_config.apply(_service_uri), service_name, invoker_binding
    )


def grant_invoker(
    resource_name: str,
    *,
    parent: pulumi.Resource,
    project: str,
    region: str,
    service_name: pulumi.Input[str],
    member: pulumi.Input[str],
) -> gcp.cloudrunv2.ServiceIamMember:
    """roles/run.invoker for `member` on the one Cloud Run service, not on the project."""
    return gcp.cloudrunv2.ServiceIamMember(
        resource_name,
        project=project,
        location=region,
        name=service_name,
        role=ROLE_RUN_INVOKER,
        member=member,
        opts=pulumi.ResourceOptions(parent=parent),
    )


def grant_database_user(
    resource_name: str,
    *,
    parent: pulumi.Resource,
    project: str,
    member: pulumi.Input[str],
    database: pulumi.Input[str],
    read_only: bool = False,
) -> gcp.projects.IAMMember:
    """roles/datastore.user (`read_only`: roles/datastore.viewer) for `member`, conditioned
    to the one `database`.

    The role can only be granted on the project; the condition narrows it to the database.
    """
    return gcp.projects.IAMMember(
        resource_name,
        project=project,
        role=ROLE_DATASTORE_VIEWER if read_only else ROLE_DATASTORE_USER,
        member=member,
        condition=gcp.projects.IAMMemberConditionArgs(
            title="dedup-database-only",
            description="Only the scheduler dedup database.",
            expression=pulumi.Output.from_input(database).apply(
                lambda db: database_condition_expression(project, db)
            ),
        ),
        opts=pulumi.ResourceOptions(parent=parent),
    )


RANDOM_SECRET_LENGTH: Final = 64
"""Letters and digits of a secret the kit makes (the proxy's token secret, the watchdog's
task key): about 381 bits."""


class RandomSecret(NamedTuple):
    """A Secret Manager secret holding one random value the program made, and its readers."""

    secret: gcp.secretmanager.Secret
    version: gcp.secretmanager.SecretVersion
    readers: list[gcp.secretmanager.SecretIamMember]


def declare_random_secret(
    name: str,
    *,
    parent: pulumi.Resource,
    project: str,
    secret_id: str,
    labels: Mapping[str, str],
    readers: Mapping[str, pulumi.Input[str]],
    depends_on: Sequence[pulumi.Resource] = (),
) -> RandomSecret:
    """`{name}`: the secret `secret_id`; `{name}-value`, a random value of
    RANDOM_SECRET_LENGTH letters and digits (in Pulumi's state, never in a stack file);
    `{name}-version`, its one version; and `{name}-<who>`, secretAccessor on it for each
    member of `readers` (who -> member), and for nobody else."""
    child = pulumi.ResourceOptions(parent=parent)
    secret = gcp.secretmanager.Secret(
        name,
        project=project,
        secret_id=secret_id,
        labels=dict(labels),
        replication=gcp.secretmanager.SecretReplicationArgs(
            auto=gcp.secretmanager.SecretReplicationAutoArgs(),
        ),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
    )
    value = random.RandomPassword(f"{name}-value", length=RANDOM_SECRET_LENGTH, special=False,
                                  opts=child)
    version = gcp.secretmanager.SecretVersion(
        f"{name}-version", secret=secret.id, secret_data=value.result, opts=child)
    granted = [
        gcp.secretmanager.SecretIamMember(
            f"{name}-{who}",
            project=project,
            secret_id=secret.secret_id,
            role=SECRET_ACCESSOR_ROLE,
            member=member,
            opts=child,
        )
        for who, member in readers.items()
    ]
    return RandomSecret(secret, version, granted)

"""DedupProxy: the idempotent proxy for Google Cloud API targets (SPEC section 4).

A Scheduler job with `proxy:` in the stack config calls this function instead of the
dedup function. It runs the same claim protocol over the same Firestore database and
collection, then starts the job's downstream execution once (a Workflows execution, a
Cloud Run job execution or a Cloud Build trigger run) with the run's dedup key as
idempotency token. It is the same source as the dedup function with the entry point
`proxy_scheduled_job`, built by the same build account into the same repository.

The proxy runs as its own service account, which holds only what its targets need:

- always `roles/datastore.user`, conditioned to the one dedup database;
- a workflow: `roles/workflows.invoker` on the project. Google lists the project as the
  lowest level Workflows roles can be granted on, and pulumi-gcp has no per-workflow IAM
  resource. It is left unconditioned: IAM Conditions' resource attributes are honoured
  only by the services Google lists, Workflows could not be confirmed among them, and a
  `resource.name` condition a service does not fill never matches, which would make
  every start fail with 403 (recorded as a non-retryable error, so the run is lost);
- a Cloud Run job: `roles/run.jobsExecutorWithOverrides` on that job only: the narrowest
  role that may pass an environment override (the token);
- a build trigger: a custom project role holding only `cloudbuild.builds.create`, the one
  permission `triggers.run` checks (Cloud Build has no per-trigger IAM; the predefined
  `roles/cloudbuild.builds.editor` would add get, list, update and cancel of every build).

The dedup function's invoker account holds `roles/run.invoker` on the proxy's Cloud Run
service only, and is the one caller the proxy serves (DEDUP_ALLOWED_CALLERS = its e-mail:
the proxied jobs send its OIDC tokens); ingress is internal-only; nothing is public.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import pulumi
import pulumi_gcp as gcp

from infra.cloud_function import (
    FunctionBase,
    declare_function,
    enable_apis,
    grant_database_user,
)
from infra.config import DEFAULTS as CONFIG_DEFAULTS
from infra.config import (
    PROXY_TARGET_BUILD_TRIGGER,
    PROXY_TARGET_RUN_JOB,
    PROXY_TARGET_WORKFLOW,
    DedupSettings,
    ProxyTarget,
    StackConfig,
    service_account_id,
)
from infra.dedup_service import (
    REQUIRED_APIS,
    DedupService,
    dedup_environment,
)
from infra.iam_wait import wait_for_iam

COMPONENT_TYPE: Final = "scheduler-dedup:index:DedupProxy"
ENTRY_POINT: Final = "proxy_scheduled_job"

ROLE_WORKFLOWS_INVOKER: Final = "roles/workflows.invoker"
ROLE_RUN_JOBS_EXECUTOR_WITH_OVERRIDES: Final = "roles/run.jobsExecutorWithOverrides"
BUILD_TRIGGER_PERMISSIONS: Final = ("cloudbuild.builds.create",)
"""Exactly what `projects.locations.triggers.run` checks on the trigger."""

# APIs the proxy calls per target, beyond the dedup service's own (run and cloudbuild are
# among those already). The target itself exists already; its execution API may not be on.
TARGET_APIS: Final[Mapping[str, tuple[str, ...]]] = {
    PROXY_TARGET_WORKFLOW: ("workflows.googleapis.com", "workflowexecutions.googleapis.com"),
    PROXY_TARGET_RUN_JOB: ("run.googleapis.com",),
    PROXY_TARGET_BUILD_TRIGGER: ("cloudbuild.googleapis.com",),
}


@dataclass(frozen=True)
class DedupProxyArgs:
    """The proxy's settings, routes, and what it shares with the dedup service."""

    project: str
    region: str
    name_prefix: str
    dedup: DedupSettings
    routes: Mapping[str, ProxyTarget]
    """Scheduler job ID -> target, sent as DEDUP_PROXY_ROUTES."""
    timeout_seconds: int
    """DEDUP_PROXY_TIMEOUT_SECONDS."""
    function_base: FunctionBase
    """The dedup service's: same source, build account, repository, settings, invoker."""
    depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)
    """What the function's deployment waits for (APIs, build grants, TTL field)."""
    enable_apis: bool = True
    enabled_apis: frozenset[str] = frozenset(REQUIRED_APIS)
    """APIs some other resource of the stack enables already."""
    iam_propagation_seconds: int = int(CONFIG_DEFAULTS["iamPropagationSeconds"])
    """How long the proxy's deployment waits after its account's grants (infra/iam_wait)."""

    @classmethod
    def from_service(cls, cfg: StackConfig, service: DedupService) -> DedupProxyArgs:
        return cls(
            project=cfg.project,
            region=cfg.region,
            name_prefix=cfg.name_prefix,
            dedup=cfg.dedup,
            routes=cfg.proxy_routes(),
            timeout_seconds=cfg.proxy_timeout_seconds,
            function_base=service.function_base,
            depends_on=[*service.apis, *service.build_grants, service.ttl_field],
            iam_propagation_seconds=cfg.iam_propagation_seconds,
        )

    @property
    def function_name(self) -> str:
        return f"{self.name_prefix}-proxy"

    @property
    def account_id(self) -> str:
        return service_account_id(self.name_prefix, "proxy")

    @property
    def build_role_id(self) -> str:
        """Custom role IDs allow letters, digits, '_' and '.' only."""
        return f"{self.name_prefix.replace('-', '_')}_proxy_trigger_runner"

    def targets(self, kind: str) -> list[ProxyTarget]:
        """The distinct targets of one kind, by resource name."""
        found = {t.resource: t for t in self.routes.values() if t.target == kind}
        return [found[name] for name in sorted(found)]

    def apis(self) -> list[str]:
        needed = {api for t in self.routes.values() for api in TARGET_APIS[t.target]}
        return sorted(needed - self.enabled_apis)

    def environment(self) -> dict[str, str]:
        routes = {job: self.routes[job].route() for job in sorted(self.routes)}
        return {
            **dedup_environment(self.project, self.region, self.dedup),
            "DEDUP_PROXY_ROUTES": json.dumps(routes, sort_keys=True, separators=(",", ":")),
            "DEDUP_PROXY_TIMEOUT_SECONDS": str(self.timeout_seconds),
        }


class DedupProxy(pulumi.ComponentResource):
    """The idempotent proxy function, its own service account and its target roles."""

    function: gcp.cloudfunctionsv2.Function
    function_uri: pulumi.Output[str]
    """The proxy's run.app URL: the proxied jobs' target and OIDC audience."""
    service_name: pulumi.Output[str]
    account: gcp.serviceaccount.Account
    datastore_user: gcp.projects.IAMMember
    invoker_binding: gcp.cloudrunv2.ServiceIamMember
    target_grants: list[pulumi.CustomResource]
    build_role: gcp.projects.IAMCustomRole | None
    apis: list[gcp.projects.Service]
    iam_wait: pulumi.CustomResource
    """The wait for its account and grants to propagate; the function depends on it."""

    def __init__(
        self,
        name: str,
        args: DedupProxyArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, None, opts)
        if not args.routes:
            raise ValueError("DedupProxy needs at least one proxied job (routes is empty)")
        child = pulumi.ResourceOptions(parent=self)
        project = args.project

        self.apis = enable_apis(
            name, parent=self, project=project, apis=args.apis() if args.enable_apis else ()
        )
        after_apis = pulumi.ResourceOptions(
            parent=self, depends_on=[*args.depends_on, *self.apis]
        )

        # --- its own identity --------------------------------------------------------
        self.account = gcp.serviceaccount.Account(
            f"{name}-sa",
            project=project,
            account_id=args.account_id,
            display_name="Scheduler dedup proxy (runtime)",
            description="Runs the idempotent proxy: the dedup database, and starting only "
            "its configured workflows, Cloud Run jobs or build triggers.",
            opts=after_apis,
        )
        member = self.account.member

        self.datastore_user = grant_database_user(
            f"{name}-datastore-user",
            parent=self,
            project=project,
            member=member,
            database=args.dedup.database_name,
        )

        # --- the roles its targets need, nothing else ---------------------------------
        self.target_grants = []
        self.build_role = None
        if args.targets(PROXY_TARGET_WORKFLOW):
            # Project level: Workflows IAM has no narrower resource (see module docstring).
            self.target_grants.append(
                gcp.projects.IAMMember(
                    f"{name}-workflows-invoker",
                    project=project,
                    role=ROLE_WORKFLOWS_INVOKER,
                    member=member,
                    opts=child,
                )
            )
        for target in args.targets(PROXY_TARGET_RUN_JOB):
            self.target_grants.append(
                gcp.cloudrunv2.JobIamMember(
                    f"{name}-run-job-{target.location}-{target.resource_id}",
                    project=target.project,
                    location=target.location,
                    name=target.resource_id,
                    role=ROLE_RUN_JOBS_EXECUTOR_WITH_OVERRIDES,
                    member=member,
                    opts=child,
                )
            )
        if args.targets(PROXY_TARGET_BUILD_TRIGGER):
            self.build_role = gcp.projects.IAMCustomRole(
                f"{name}-trigger-runner-role",
                project=project,
                role_id=args.build_role_id,
                title="Scheduler dedup proxy: run build triggers",
                description="Only cloudbuild.builds.create, which running a build trigger "
                "needs (Cloud Build has no per-trigger IAM).",
                permissions=list(BUILD_TRIGGER_PERMISSIONS),
                stage="GA",
                opts=after_apis,
            )
            self.target_grants.append(
                gcp.projects.IAMMember(
                    f"{name}-trigger-runner",
                    project=project,
                    role=self.build_role.name,
                    member=member,
                    opts=child,
                )
            )

        # --- wait for its account and grants to propagate (see infra/iam_wait.py) -----
        # Its account is created after the build account's grants (args.depends_on), so
        # this wait covers those too; it runs beside the dedup service's own wait.
        self.iam_wait = wait_for_iam(
            f"{name}-iam-propagation",
            parent=self,
            after=[self.account, self.datastore_user, *self.target_grants],
            seconds=args.iam_propagation_seconds,
            triggers={"proxy": self.account.email},
        )

        # --- the function, and the jobs' invoker account on its one service ---------
        declared = declare_function(
            name,
            parent=self,
            base=args.function_base,
            function_name=args.function_name,
            description="Starts workflows, Cloud Run jobs or build triggers once per "
            "scheduled run, with the run's dedup key as idempotency token.",
            entry_point=ENTRY_POINT,
            runtime_account_email=self.account.email,
            environment=args.environment(),
            # The proxied jobs send OIDC tokens of the dedup service's invoker account.
            allowed_callers=[args.function_base.invoker_email],
            depends_on=[*args.depends_on, *self.apis, self.datastore_user, self.iam_wait],
        )
        self.function, self.function_uri, self.service_name, self.invoker_binding = declared

        self.register_outputs(
            {
                "functionUri": self.function_uri,
                "serviceName": self.service_name,
                "serviceAccount": self.account.email,
            }
        )

    @property
    def ready(self) -> Sequence[pulumi.Resource]:
        """What a proxied job waits for: invocable, and able to start its target."""
        return [*self.apis, self.invoker_binding, self.datastore_user, *self.target_grants]

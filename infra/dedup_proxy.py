"""DedupProxy: the idempotent proxy for Google Cloud API targets (one execution per run).

A Scheduler job with `proxy:` in the stack config calls this function instead of the
dedup function. It runs the same claim protocol over a Firestore database of its own,
`<databaseName>-proxy` (same collection, TTL policy and settings as the dedup database;
infra/records_database.py says why it is not shared), then starts the job's downstream
execution once (a Workflows execution, a Cloud Run job execution or a Cloud Build trigger
run) with the run's dedup key as idempotency token. It is the same source as the dedup
function with the entry point `proxy_scheduled_job`, built by the same build account into
the same repository.

The proxy runs as its own service account, which holds only what its targets need:

- always `roles/datastore.user`, conditioned to its own database (nothing on the dedup
  database, and nobody but it, bar the watchdog's read-only viewer role, on its own), and
  `roles/secretmanager.secretAccessor` on the stack's token secret only (below);
- a workflow: a custom project role holding only `workflows.executions.create`, the one
  permission starting an execution checks (not `roles/workflows.invoker`, which also
  reads other workflows' executions). Google lists the project as the lowest level
  Workflows roles can be granted on (no IAM on one workflow, and pulumi-gcp has no
  per-workflow IAM resource), so the proxy can start any workflow of the project. It is
  left unconditioned: IAM Conditions' resource attributes are honoured only by the
  services Google lists, Workflows could not be confirmed among them, and a
  `resource.name` condition a service does not fill never matches, which would make every
  start fail with 403 (recorded as a non-retryable error, so the run is lost);
- a Cloud Run job: `roles/run.jobsExecutorWithOverrides` on that job only: the narrowest
  role that may pass an environment override (the token);
- a build trigger: `roles/pubsub.publisher` on one topic per trigger,
  `<namePrefix>-build-<trigger>`, which the program declares and the trigger listens to
  (its `pubsubConfig.topic`, with the substitution `_DEDUP_TOKEN:
  $(body.message.data._DEDUP_TOKEN)`): nothing on Cloud Build. Running a trigger through
  Cloud Build's API needs `cloudbuild.builds.create` on the project, which also creates
  arbitrary builds running as the project's build account (a known escalation path).

The token secret (`<namePrefix>-token-secret`): 64 random letters and digits made by
pulumi-random's RandomPassword (kept encrypted in the stack's state), one Secret Manager
version, read by Cloud Run at instance start as DEDUP_TOKEN_SECRET (a secret environment
variable: no client library, no Secret Manager call in the function). The proxy signs
each run's token with it (function/dedup/proxy/tokens.py); the accounts in `tokenSecretReaders`
(the downstream services' IdempotencyGuard) get the accessor role on it to check them.

It takes the dedup function's memory, timeout and instance settings, but never keeps an
instance warm (minInstances 0 whatever the stack says: see `scaled_to_zero_base`).

The dedup function's invoker account holds `roles/run.invoker` on the proxy's Cloud Run
service only, and is the one caller the proxy serves (DEDUP_ALLOWED_CALLERS = its e-mail:
the proxied jobs send its OIDC tokens); ingress is internal-only; nothing is public.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import pulumi

from infra import gcp
from infra.cloud_function import (
    FunctionBase,
    declare_function,
    declare_random_secret,
    declare_source,
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
from infra.records_database import declare_records_database
from infra.source import PROXY_ROUTES_TABLE

COMPONENT_TYPE: Final = "scheduler-dedup:index:DedupProxy"
ENTRY_POINT: Final = "proxy_scheduled_job"

WORKFLOW_START_PERMISSIONS: Final = ("workflows.executions.create",)
"""Exactly what `projects.locations.workflows.executions.create` checks."""
ROLE_RUN_JOBS_EXECUTOR_WITH_OVERRIDES: Final = "roles/run.jobsExecutorWithOverrides"
ROLE_PUBSUB_PUBLISHER: Final = "roles/pubsub.publisher"
TOKEN_SECRET_ENV: Final = "DEDUP_TOKEN_SECRET"
"""function/dedup/proxy/tokens.py reads the token secret from this variable."""
SECRET_APIS: Final = ("secretmanager.googleapis.com",)

# APIs the proxy calls per target, beyond the dedup service's own (run and cloudbuild are
# among those already). The target itself exists already; its execution API may not be on.
TARGET_APIS: Final[Mapping[str, tuple[str, ...]]] = {
    PROXY_TARGET_WORKFLOW: ("workflows.googleapis.com", "workflowexecutions.googleapis.com"),
    PROXY_TARGET_RUN_JOB: ("run.googleapis.com",),
    PROXY_TARGET_BUILD_TRIGGER: ("pubsub.googleapis.com",),  # the trigger's topic
}


@dataclass(frozen=True)
class DedupProxyArgs:
    """The proxy's settings, routes, and what it shares with the dedup service."""

    project: str
    region: str
    name_prefix: str
    dedup: DedupSettings
    routes: Mapping[str, ProxyTarget]
    """Scheduler job ID -> target: the proxy's job table (proxy_routes.json)."""
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
    token_secret_readers: tuple[str, ...] = ()
    """Downstream accounts that check the proxy's tokens: accessor on the token secret."""
    watchdog_caller: str | None = None
    """The watchdog's account e-mail when it delivers runs of proxied jobs (catch-up,
    re-runs): then an allowed caller too (infra/watchdog.py grants it run.invoker)."""

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
            token_secret_readers=tuple(cfg.token_secret_readers),
            watchdog_caller=(
                cfg.watchdog_email if cfg.watchdog_delivers_to(proxied=True) else None
            ),
        )

    @property
    def function_name(self) -> str:
        return f"{self.name_prefix}-proxy"

    def scaled_to_zero_base(self) -> FunctionBase:
        """The dedup function's base without warm instances: the stack's minInstances is for
        its jobs' latency, while a proxied run only starts an execution that itself takes
        seconds to start, so an instance kept warm all month for it buys nothing."""
        settings = self.function_base.settings.model_copy(update={"min_instances": 0})
        return dataclasses.replace(self.function_base, settings=settings)

    @property
    def account_id(self) -> str:
        return service_account_id(self.name_prefix, "proxy")

    @property
    def workflow_role_id(self) -> str:
        """Custom role IDs allow letters, digits, '_' and '.' only."""
        return f"{self.name_prefix.replace('-', '_')}_proxy_workflow_starter"

    @property
    def token_secret_id(self) -> str:
        return f"{self.name_prefix}-token-secret"

    def build_topic_id(self, target: ProxyTarget) -> str:
        """The topic one build trigger listens to (IDs: letters first, at most 255)."""
        return f"{self.name_prefix}-build-{target.resource_id}"[:255]

    def build_topic(self, target: ProxyTarget) -> str:
        return f"projects/{target.project}/topics/{self.build_topic_id(target)}"

    def targets(self, kind: str) -> list[ProxyTarget]:
        """The distinct targets of one kind, by resource name."""
        found = {t.resource: t for t in self.routes.values() if t.target == kind}
        return [found[name] for name in sorted(found)]

    def apis(self) -> list[str]:
        needed = {api for t in self.routes.values() for api in TARGET_APIS[t.target]}
        return sorted((needed | set(SECRET_APIS)) - self.enabled_apis)

    def route(self, job: str) -> dict[str, str]:
        """The job's route entry; a build trigger's names the topic to publish to."""
        target = self.routes[job]
        route = target.route()
        if target.target == PROXY_TARGET_BUILD_TRIGGER:
            route["topic"] = self.build_topic(target)
        return route

    def route_table(self) -> dict[str, dict[str, str]]:
        """The proxy's job table (proxy_routes.json in its source archive)."""
        return {job: self.route(job) for job in sorted(self.routes)}

    def environment(self) -> dict[str, str]:
        """The proxy's DEDUP_* environment; its routes travel in its source archive."""
        return {
            **dedup_environment(
                self.project, self.region, self.dedup, self.dedup.proxy_database_name
            ),
            "DEDUP_PROXY_TIMEOUT_SECONDS": str(self.timeout_seconds),
        }


class DedupProxy(pulumi.ComponentResource):
    """The idempotent proxy function, its own service account and its target roles."""

    function: gcp.cloudfunctionsv2.Function
    function_uri: pulumi.Output[str]
    """The proxy's run.app URL: the proxied jobs' target and OIDC audience."""
    service_name: pulumi.Output[str]
    account: gcp.serviceaccount.Account
    database: gcp.firestore.Database
    """Its own records (`<databaseName>-proxy`), which only its account may write."""
    ttl_field: gcp.firestore.Field
    datastore_user: gcp.projects.IAMMember
    invoker_binding: gcp.cloudrunv2.ServiceIamMember
    target_grants: list[pulumi.CustomResource]
    workflow_role: gcp.projects.IAMCustomRole | None
    build_topics: list[gcp.pubsub.Topic]
    """One per build trigger: what the trigger listens to, and the proxy publishes to."""
    token_secret: gcp.secretmanager.Secret
    token_secret_version: gcp.secretmanager.SecretVersion
    token_secret_grants: list[gcp.secretmanager.SecretIamMember]
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
            description="Runs the idempotent proxy: its own records database, and starting only "
            "its configured workflows, Cloud Run jobs or build triggers.",
            opts=after_apis,
        )
        member = self.account.member

        # --- its own records: a database the dedup function's account cannot write ------
        records = declare_records_database(
            name, parent=self, project=project,
            database_name=args.dedup.proxy_database_name, dedup=args.dedup,
            depends_on=[*args.depends_on, *self.apis],
        )
        self.database, self.ttl_field = records.database, records.ttl_field
        self.datastore_user = grant_database_user(
            f"{name}-datastore-user",
            parent=self,
            project=project,
            member=member,
            database=self.database.name,
        )

        # --- the token secret: the proxy signs, the downstream guards check -------------
        readers: dict[str, pulumi.Input[str]] = {"proxy": member}
        readers.update({f"reader-{email.lower()}": f"serviceAccount:{email}"
                        for email in args.token_secret_readers})
        token = declare_random_secret(
            f"{name}-token-secret", parent=self, project=project,
            secret_id=args.token_secret_id, labels=args.function_base.labels, readers=readers,
            depends_on=[*args.depends_on, *self.apis],
        )
        self.token_secret, self.token_secret_version = token.secret, token.version
        self.token_secret_grants = token.readers

        # --- the roles its targets need, nothing else ---------------------------------
        self.target_grants = []
        self.workflow_role = None
        self.build_topics = []
        if args.targets(PROXY_TARGET_WORKFLOW):
            # Project level: Workflows IAM has no narrower resource (see module docstring).
            self.workflow_role = gcp.projects.IAMCustomRole(
                f"{name}-workflow-starter-role",
                project=project,
                role_id=args.workflow_role_id,
                title="Scheduler dedup proxy: start workflow executions",
                description="Only workflows.executions.create (Workflows has no IAM on one "
                "workflow).",
                permissions=list(WORKFLOW_START_PERMISSIONS),
                stage="GA",
                opts=after_apis,
            )
            self.target_grants.append(
                gcp.projects.IAMMember(
                    f"{name}-workflow-starter",
                    project=project,
                    role=self.workflow_role.name,
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
        for target in args.targets(PROXY_TARGET_BUILD_TRIGGER):
            topic = gcp.pubsub.Topic(
                f"{name}-build-topic-{target.resource_id}",
                project=target.project,
                name=args.build_topic_id(target),
                labels=dict(args.function_base.labels),
                opts=after_apis,
            )
            self.build_topics.append(topic)
            self.target_grants.append(
                gcp.pubsub.TopicIAMMember(
                    f"{name}-build-publisher-{target.resource_id}",
                    project=target.project,
                    topic=topic.name,
                    role=ROLE_PUBSUB_PUBLISHER,
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
            after=[self.account, self.datastore_user, *self.token_secret_grants,
                   *self.target_grants],
            seconds=args.iam_propagation_seconds,
            triggers={"proxy": self.account.email},
        )

        # --- the function, and the jobs' invoker account on its one service ---------
        base = args.scaled_to_zero_base()
        # It runs no job logic (it starts executions): the kit's code and lock alone, so
        # nothing of the team's is built or imported beside the token secret.
        source = declare_source(
            name, parent=self, base=base, table=PROXY_ROUTES_TABLE, content=args.route_table(),
            runs_jobs=False,
        )
        declared = declare_function(
            name,
            parent=self,
            base=base,
            source=source,
            function_name=args.function_name,
            description="Starts workflows, Cloud Run jobs or build triggers once per "
            "scheduled run, with the run's dedup key as idempotency token.",
            entry_point=ENTRY_POINT,
            runtime_account_email=self.account.email,
            environment=args.environment(),
            # The proxied jobs send OIDC tokens of the dedup service's invoker account (and
            # the watchdog its own, when it delivers their runs).
            allowed_callers=[
                args.function_base.invoker_email,
                *([args.watchdog_caller] if args.watchdog_caller else []),
            ],
            depends_on=[
                *args.depends_on, *self.apis, self.datastore_user, self.ttl_field, self.iam_wait
            ],
            secret_environment=[
                gcp.cloudfunctionsv2.FunctionServiceConfigSecretEnvironmentVariableArgs(
                    key=TOKEN_SECRET_ENV,
                    project_id=project,
                    secret=self.token_secret.secret_id,
                    # The version made here, not "latest": a new value reaches the proxy
                    # only with a deploy, never half its instances mid-rotation.
                    version=self.token_secret_version.version,
                )
            ],
        )
        self.function, self.function_uri, self.service_name, self.invoker_binding = declared

        self.register_outputs(
            {
                "functionUri": self.function_uri,
                "serviceName": self.service_name,
                "serviceAccount": self.account.email,
                "databaseName": self.database.name,
                "tokenSecret": self.token_secret.name,
                "buildTopics": [topic.id for topic in self.build_topics],
            }
        )

    @property
    def ready(self) -> Sequence[pulumi.Resource]:
        """What a proxied job waits for: invocable, and able to start its target."""
        return [*self.apis, self.invoker_binding, self.datastore_user, *self.target_grants,
                *self.token_secret_grants]

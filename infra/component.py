"""`SchedulerDedup`: the whole stack as one component, the kit's component package's
(provider/) and the kit's own program's (infra/program.py), so a TypeScript team's stack and
the example stacks run through the same code.

Its inputs are a stack's settings (infra/component_args.py derives their types from the
config models); they become the stack config mapping a stack file gives, validated by
`load_config` with the same errors, before anything is registered. It then declares one
DedupService, one DedupProxy when some job has `proxy:`, one ScheduledJob per job, the run
Watchdog (unless `watchdog.enabled` is false) and the Monitoring component, each its child.

The stacks deployed before this component existed had those five at the stack's root:
each carries `Alias(parent=ROOT_STACK_RESOURCE)`, and Pulumi gives a parent's aliases to
its children, so no resource of such a stack is replaced (docs/component-package.md).
"""

# No `from __future__ import annotations`: Pulumi's analyzer reads the annotations of
# `__init__`'s `args` and of the class's outputs as objects (inspect.get_annotations).

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pulumi

from dedup.version import __version__ as KIT_VERSION
from infra import KIT_FUNCTION_DIR, PROJECT_DIR, TEAM_FUNCTION_DIR
from infra.component_args import ARGS_TYPE, config_values, input_type, schema_name
from infra.config import StackConfig, load_config
from infra.dedup_proxy import DedupProxy, DedupProxyArgs
from infra.dedup_service import DedupService, DedupServiceArgs
from infra.job_runtime import JobRuntime, JobRuntimeArgs
from infra.monitoring import Monitoring, MonitoringArgs
from infra.scheduled_job import ScheduledJob, ScheduledJobArgs
from infra.team_service import TeamService, TeamServiceArgs
from infra.watchdog import Watchdog, WatchdogArgs

COMPONENT_TYPE: Final = "scheduler-dedup:index:SchedulerDedup"
"""The package's token: `<package>:index:<class>`, as component_provider_host serves it."""
DEFAULT_SOURCE_DIR: Final = KIT_FUNCTION_DIR
"""The kit's function/: the runtime every archive carries."""
DEFAULT_TEAM_DIR: Final = TEAM_FUNCTION_DIR
"""The team's function/ (its jobs/) when it is not the kit's: the kit installed."""
DEFAULT_BUILD_DIR: Final = PROJECT_DIR / "build" / "function-source"
SERVICE_NAME: Final = "dedup"
PROXY_NAME: Final = "proxy"
WATCHDOG_NAME: Final = "watchdog"
MONITORING_NAME: Final = "monitoring"
RUNTIME_PREFIX: Final = "runtime-"
"""A runtime's component is `runtime-<name>`."""
TEAM_SERVICE_PREFIX: Final = "service-"
"""A team service's component is `service-<name>`."""

if TYPE_CHECKING:
    # The rendered TypedDict is built at import time, which mypy cannot follow.
    SchedulerDedupArgs = dict[str, Any]
else:
    SchedulerDedupArgs = input_type(ARGS_TYPE)


class SchedulerDedup(pulumi.ComponentResource):
    """Google Cloud Scheduler jobs that run effectively exactly once: the deduplicating
    Cloud Run function, the jobs, the idempotent proxy (for jobs with `proxy`), the run
    watchdog and the alerting, from a stack's settings (docs/configuration.md)."""

    function_url: pulumi.Output[str]
    """The dedup function's run.app URL (the jobs' target and OIDC audience)."""
    function_name: pulumi.Output[str]
    """The dedup function's name."""
    runtime_service_account: pulumi.Output[str]
    """The dedup function's runtime account."""
    build_service_account: pulumi.Output[str]
    """The account Cloud Build builds the functions with."""
    invoker_service_account: pulumi.Output[str]
    """The jobs' OIDC identity, the one caller the functions serve."""
    database_name: pulumi.Output[str]
    """The Firestore database of the run records."""
    collection: pulumi.Output[str]
    """The collection of the run records."""
    source_object: pulumi.Output[str]
    """The dedup function's source archive object."""
    job_names: pulumi.Output[list[str]]
    """The Cloud Scheduler jobs' full names."""
    kit_version: pulumi.Output[str]
    """The kit release deployed (CHANGELOG.md says what changed)."""
    proxy_url: pulumi.Output[str] | None
    """The idempotent proxy's URL, when a job has `proxy`."""
    proxy_function_name: pulumi.Output[str] | None
    """The proxy function's name, when a job has `proxy`."""
    proxy_service_account: pulumi.Output[str] | None
    """The proxy's runtime account, when a job has `proxy`."""
    proxy_database_name: pulumi.Output[str] | None
    """The proxy's own records database, when a job has `proxy`."""
    watchdog_url: pulumi.Output[str] | None
    """The run watchdog's URL, unless `watchdog.enabled` is false."""
    watchdog_function_name: pulumi.Output[str] | None
    """The run watchdog function's name, unless `watchdog.enabled` is false."""
    watchdog_service_account: pulumi.Output[str] | None
    """The run watchdog's runtime account, unless `watchdog.enabled` is false."""
    watchdog_job_name: pulumi.Output[str] | None
    """The run watchdog's Cloud Scheduler job, unless `watchdog.enabled` is false."""
    dashboard: pulumi.Output[str]
    """The stack's Cloud Monitoring dashboard."""
    runtime_urls: pulumi.Output[dict[str, str]] | None
    """Each runtime's function URL by runtime name, when the stack has runtimes."""
    runtime_service_accounts: pulumi.Output[dict[str, str]] | None
    """Each runtime's account (its jobs' identity) by runtime name, when it has runtimes."""
    team_service_databases: pulumi.Output[dict[str, str]] | None
    """Each team service's records database (its DEDUP_DATABASE) by service name, when the
    stack has services."""

    def __init__(
        self,
        name: str,
        args: SchedulerDedupArgs,
        opts: pulumi.ResourceOptions | None = None,
        *,
        source_dir: Path = DEFAULT_SOURCE_DIR,
        build_dir: Path = DEFAULT_BUILD_DIR,
        team_dir: Path | None = DEFAULT_TEAM_DIR,
    ) -> None:
        # Validated before anything is registered: a ConfigError declares nothing.
        cfg = load_config(config_values(args), deploying=True)
        super().__init__(COMPONENT_TYPE, name, None, opts)
        self._config = cfg
        self._declare(cfg, source_dir, build_dir, team_dir)

    @property
    def config(self) -> StackConfig:
        """The validated stack config the component was declared from."""
        return self._config

    def _child(self, depends_on: list[pulumi.Resource] | None = None) -> pulumi.ResourceOptions:
        # These five were the stack's own children before this component existed.
        return pulumi.ResourceOptions(
            parent=self, aliases=[pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE)],
            depends_on=depends_on)

    def _declare(
        self, cfg: StackConfig, source_dir: Path, build_dir: Path, team_dir: Path | None
    ) -> None:
        service_args = DedupServiceArgs.from_config(cfg, source_dir=source_dir,
                                                    build_dir=build_dir, team_dir=team_dir)
        service = DedupService(SERVICE_NAME, service_args, self._child())
        proxy_args = DedupProxyArgs.from_service(cfg, service) if cfg.proxied_jobs else None
        proxy = DedupProxy(PROXY_NAME, proxy_args, self._child()) if proxy_args else None
        # Declared under the component itself: no stack before runtimes had them at its root.
        runtimes = {
            runtime.name: JobRuntime(
                f"{RUNTIME_PREFIX}{runtime.name}",
                JobRuntimeArgs.from_config(
                    cfg, runtime, base=service.function_base,
                    depends_on=[*service.apis, *service.build_grants]),
                pulumi.ResourceOptions(parent=self))
            for runtime in cfg.runtimes
        }
        team_services = {
            team.name: TeamService(
                f"{TEAM_SERVICE_PREFIX}{team.name}",
                TeamServiceArgs.from_config(cfg, team,
                                            invoker_member=service.invoker_account.member,
                                            depends_on=service.apis),
                pulumi.ResourceOptions(parent=self))
            for team in cfg.services
        }
        jobs: list[ScheduledJob] = []
        for job in cfg.jobs:
            # A proxied job calls the proxy, a runtime's job its runtime, a team service's
            # job that service (at its path; the token's audience its URL), any other job
            # the dedup function.
            uri: pulumi.Input[str] = service.function_uri
            audience: pulumi.Input[str] | None = None  # None: the uri itself
            ready = service.ready
            team = cfg.service_of(job)
            if team is not None:  # its url: unused for App Engine (no token)
                uri, audience = f"{team.url or ''}{job.service_path}", team.url or ""
                ready = [*service.apis, *team_services[team.name].ready]
            elif job.proxy is not None:
                assert proxy is not None
                uri, ready = proxy.function_uri, [*service.apis, *proxy.ready]
            elif job.runtime is not None:
                runtime = runtimes[job.runtime]
                uri, ready = runtime.function_uri, [*service.apis, *runtime.ready]
            jobs.append(ScheduledJob(
                f"job-{job.name}",
                ScheduledJobArgs(
                    job=job,
                    project=cfg.project,
                    region=cfg.region,
                    target_uri=uri,
                    invoker_email=service.invoker_account.email,
                    audience=audience,
                    job_id=cfg.job_id(job),
                    depends_on=ready,
                    app_engine=team.app_engine if team is not None else None,
                ),
                self._child(),
            ))
        watchdog_args = (
            WatchdogArgs.from_service(cfg, service, proxy, runtimes, team_services)
            if cfg.watchdog.enabled else None
        )
        watchdog = (Watchdog(WATCHDOG_NAME, watchdog_args, self._child())
                    if watchdog_args is not None else None)
        # A 2nd gen function's Cloud Run service carries the function's name: the log filters.
        delivery_services = [service_args.function_name]
        if proxy_args is not None:
            delivery_services.append(proxy_args.function_name)
        delivery_services.extend(cfg.runtime_function_name(r) for r in cfg.runtimes)
        # A team's Cloud Run service logs the library's same one line per delivery.
        delivery_services.extend(t.cloud_run for t in cfg.services if t.cloud_run is not None)
        monitoring = Monitoring(
            MONITORING_NAME,
            MonitoringArgs(
                project=cfg.project,
                name_prefix=cfg.name_prefix,
                delivery_services=delivery_services,
                watchdog_service=watchdog_args.function_name if watchdog_args else None,
                watchdog=cfg.watchdog,
                emails=cfg.alerts.emails,
                depends_on=service.apis,
            ),
            self._child(),
        )
        self.function_url = service.function_uri
        self.function_name = service.function.name
        self.runtime_service_account = service.runtime_account.email
        self.build_service_account = service.build_account.email
        self.invoker_service_account = service.invoker_account.email
        self.database_name = service.database.name
        self.collection = pulumi.Output.from_input(cfg.dedup.collection)
        self.source_object = service.source_object.name
        self.job_names = pulumi.Output.all(*[j.job_name for j in jobs])
        # The kit release deployed (function/dedup/version.py; CHANGELOG.md says what changed).
        self.kit_version = pulumi.Output.from_input(KIT_VERSION)
        self.proxy_url = proxy.function_uri if proxy else None
        self.proxy_function_name = proxy.function.name if proxy else None
        self.proxy_service_account = proxy.account.email if proxy else None
        self.proxy_database_name = proxy.database.name if proxy else None
        self.watchdog_url = watchdog.function_uri if watchdog else None
        self.watchdog_function_name = watchdog.function.name if watchdog else None
        self.watchdog_service_account = watchdog.account.email if watchdog else None
        self.watchdog_job_name = watchdog.scheduled_job.job_name if watchdog else None
        self.dashboard = monitoring.dashboard.id
        self.runtime_urls = pulumi.Output.all(
            **{n: r.function_uri for n, r in runtimes.items()}) if runtimes else None
        self.runtime_service_accounts = pulumi.Output.all(
            **{n: r.account.email for n, r in runtimes.items()}) if runtimes else None
        self.team_service_databases = pulumi.Output.all(
            **{n: t.database.name for n, t in team_services.items()}) if team_services else None
        self.register_outputs(self.outputs())

    def outputs(self) -> dict[str, pulumi.Output[Any]]:
        """The component's outputs by their schema name (`functionUrl`, ...), the ones it
        has; the Python program exports them as the stack's outputs."""
        names = [n for n in type(self).__annotations__ if not n.startswith("_")]
        found = {schema_name(n): getattr(self, n, None) for n in names}
        return {k: v for k, v in found.items() if v is not None}


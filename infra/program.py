"""The kit's Pulumi program: validated config in, components out, stack outputs exported.

`main()` is what `infra/__main__.py` runs under `pulumi up` and what `operator_tools.offline`
runs under Pulumi's mocks: it reads and validates the whole stack config first (a
`ConfigError` stops it before any resource is declared), checks the two APIs it cannot
enable itself (`infra.preflight`: a `PrerequisiteError` stops it too), then declares one
DedupService,
one DedupProxy when some job has `proxy:`, one ScheduledJob per configured job, the run
Watchdog (unless `watchdog.enabled` is false) and the Monitoring component (log-based
metrics, alert policies, notification channels, dashboard).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import pulumi

from dedup.version import __version__ as KIT_VERSION
from infra import KIT_FUNCTION_DIR, PROJECT_DIR, TEAM_FUNCTION_DIR
from infra.config import StackConfig, config_from_pulumi
from infra.dedup_proxy import DedupProxy, DedupProxyArgs
from infra.dedup_service import DedupService, DedupServiceArgs
from infra.monitoring import Monitoring, MonitoringArgs
from infra.preflight import check_prerequisites
from infra.scheduled_job import ScheduledJob, ScheduledJobArgs
from infra.watchdog import Watchdog, WatchdogArgs

DEFAULT_SOURCE_DIR: Final = KIT_FUNCTION_DIR
DEFAULT_TEAM_DIR: Final = TEAM_FUNCTION_DIR
DEFAULT_BUILD_DIR: Final = PROJECT_DIR / "build" / "function-source"
SERVICE_NAME: Final = "dedup"
PROXY_NAME: Final = "proxy"
WATCHDOG_NAME: Final = "watchdog"
MONITORING_NAME: Final = "monitoring"


def build(
    cfg: StackConfig,
    *,
    source_dir: Path = DEFAULT_SOURCE_DIR,
    build_dir: Path = DEFAULT_BUILD_DIR,
    team_dir: Path | None = DEFAULT_TEAM_DIR,
) -> dict[str, pulumi.Output[Any]]:
    """Declare the stack's resources from a validated config and export its outputs."""
    service_args = DedupServiceArgs.from_config(
        cfg, source_dir=source_dir, build_dir=build_dir, team_dir=team_dir
    )
    service = DedupService(SERVICE_NAME, service_args)
    proxy_args = DedupProxyArgs.from_service(cfg, service) if cfg.proxied_jobs else None
    proxy = DedupProxy(PROXY_NAME, proxy_args) if proxy_args is not None else None
    jobs: list[ScheduledJob] = []
    for job in cfg.jobs:
        # A proxied job calls the proxy, every other job the dedup function.
        uri = service.function_uri
        ready = service.ready
        if job.proxy is not None:
            assert proxy is not None
            uri, ready = proxy.function_uri, [*service.apis, *proxy.ready]
        jobs.append(
            ScheduledJob(
                f"job-{job.name}",
                ScheduledJobArgs(
                    job=job,
                    project=cfg.project,
                    region=cfg.region,
                    target_uri=uri,
                    invoker_email=service.invoker_account.email,
                    audience=uri,
                    job_id=cfg.job_id(job),
                    depends_on=ready,
                ),
            )
        )
    watchdog_args = (
        WatchdogArgs.from_service(cfg, service, proxy) if cfg.watchdog.enabled else None
    )
    watchdog = Watchdog(WATCHDOG_NAME, watchdog_args) if watchdog_args is not None else None
    # A 2nd gen function's Cloud Run service carries the function's name: the log filters.
    delivery_services = [service_args.function_name]
    if proxy_args is not None:
        delivery_services.append(proxy_args.function_name)
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
    )
    outputs: dict[str, pulumi.Output[Any]] = {
        "functionUrl": service.function_uri,
        "functionName": service.function.name,
        "runtimeServiceAccount": service.runtime_account.email,
        "buildServiceAccount": service.build_account.email,
        "invokerServiceAccount": service.invoker_account.email,
        "databaseName": service.database.name,
        "collection": pulumi.Output.from_input(cfg.dedup.collection),
        "sourceObject": service.source_object.name,
        "jobNames": pulumi.Output.all(*[j.job_name for j in jobs]),
        # The kit release deployed (function/dedup/version.py; CHANGELOG.md says what changed).
        "kitVersion": pulumi.Output.from_input(KIT_VERSION),
    }
    if proxy is not None:
        outputs["proxyUrl"] = proxy.function_uri
        outputs["proxyFunctionName"] = proxy.function.name
        outputs["proxyServiceAccount"] = proxy.account.email
        outputs["proxyDatabaseName"] = proxy.database.name
    if watchdog is not None:
        outputs["watchdogUrl"] = watchdog.function_uri
        outputs["watchdogFunctionName"] = watchdog.function.name
        outputs["watchdogServiceAccount"] = watchdog.account.email
        outputs["watchdogJobName"] = watchdog.scheduled_job.job_name
    outputs["dashboard"] = monitoring.dashboard.id
    for key, value in outputs.items():
        pulumi.export(key, value)
    return outputs


def main(
    *,
    source_dir: Path = DEFAULT_SOURCE_DIR,
    build_dir: Path = DEFAULT_BUILD_DIR,
    team_dir: Path | None = DEFAULT_TEAM_DIR,
) -> dict[str, pulumi.Output[Any]]:
    """Validate the running stack's config, check the project's prerequisites (the APIs the
    program cannot enable itself), then declare everything."""
    cfg = config_from_pulumi()
    check_prerequisites(cfg.project)
    return build(cfg, source_dir=source_dir, build_dir=build_dir, team_dir=team_dir)

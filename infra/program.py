"""The kit's Pulumi program: validated config in, components out, stack outputs exported.

`main()` is what `infra/__main__.py` runs under `pulumi up` and what `infra.offline`
runs under Pulumi's mocks: it reads and validates the whole stack config first (a
`ConfigError` stops it before any resource is declared), then declares one DedupService
and one ScheduledJob per configured job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import pulumi

from infra.config import StackConfig, config_from_pulumi
from infra.dedup_service import DedupService, DedupServiceArgs
from infra.scheduled_job import ScheduledJob, ScheduledJobArgs

REPO_ROOT: Final = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE_DIR: Final = REPO_ROOT / "function"
DEFAULT_BUILD_DIR: Final = REPO_ROOT / "build" / "function-source"
SERVICE_NAME: Final = "dedup"


def build(
    cfg: StackConfig,
    *,
    source_dir: Path = DEFAULT_SOURCE_DIR,
    build_dir: Path = DEFAULT_BUILD_DIR,
) -> dict[str, pulumi.Output[Any]]:
    """Declare the stack's resources from a validated config and export its outputs."""
    service = DedupService(
        SERVICE_NAME,
        DedupServiceArgs.from_config(cfg, source_dir=source_dir, build_dir=build_dir),
    )
    jobs = [
        ScheduledJob(
            f"job-{job.name}",
            ScheduledJobArgs(
                job=job,
                project=cfg.project,
                region=cfg.region,
                target_uri=service.function_uri,
                invoker_email=service.invoker_account.email,
                audience=service.function_uri,
                depends_on=service.ready,
            ),
        )
        for job in cfg.jobs
    ]
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
    }
    for key, value in outputs.items():
        pulumi.export(key, value)
    return outputs


def main(
    *,
    source_dir: Path = DEFAULT_SOURCE_DIR,
    build_dir: Path = DEFAULT_BUILD_DIR,
) -> dict[str, pulumi.Output[Any]]:
    """Validate the running stack's config, then declare everything."""
    cfg = config_from_pulumi()
    return build(cfg, source_dir=source_dir, build_dir=build_dir)

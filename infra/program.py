"""The kit's Pulumi program: validated config in, one SchedulerDedup component out, stack
outputs exported.

`main()` is what `infra/__main__.py` runs under `pulumi up` and what `operator_tools.offline`
runs under Pulumi's mocks: it reads and validates the whole stack config first (a
`ConfigError` stops it before any resource is declared), checks the two APIs it cannot
enable itself (`infra.preflight`: a `PrerequisiteError` stops it too), then declares the
stack through `SchedulerDedup` (infra/component.py), the component a TypeScript team gets
from the kit's component package (provider/): one DedupService, one DedupProxy when some job
has `proxy:`, one ScheduledJob per configured job, the run Watchdog (unless
`watchdog.enabled` is false) and the Monitoring component, and exports its outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import pulumi

from infra.component import (
    DEFAULT_BUILD_DIR,
    DEFAULT_SOURCE_DIR,
    DEFAULT_TEAM_DIR,
    SchedulerDedup,
)
from infra.component_args import component_args
from infra.config import PROJECT_NAME, load_config
from infra.config.load import pulumi_config_values
from infra.preflight import check_prerequisites

__all__ = ["COMPONENT_NAME", "DEFAULT_BUILD_DIR", "DEFAULT_SOURCE_DIR", "DEFAULT_TEAM_DIR",
           "build", "main"]

COMPONENT_NAME: Final = PROJECT_NAME
"""The SchedulerDedup component's name in the kit's own stacks."""


def build(
    values: Mapping[str, Any],
    *,
    source_dir: Path = DEFAULT_SOURCE_DIR,
    build_dir: Path = DEFAULT_BUILD_DIR,
    team_dir: Path | None = DEFAULT_TEAM_DIR,
) -> dict[str, pulumi.Output[Any]]:
    """Declare the stack from its config mapping (a stack file's `config:` block, or the
    engine's values) through SchedulerDedup, and export the component's outputs as the
    stack's."""
    stack = SchedulerDedup(COMPONENT_NAME, component_args(values), source_dir=source_dir,
                           build_dir=build_dir, team_dir=team_dir)
    outputs = stack.outputs()
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
    values = pulumi_config_values()
    # The stack file's own errors (unknown keys with their did-you-mean included) first.
    cfg = load_config(values, deploying=True)
    check_prerequisites(cfg.project)
    return build(values, source_dir=source_dir, build_dir=build_dir, team_dir=team_dir)

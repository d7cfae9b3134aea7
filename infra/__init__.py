"""The kit's Pulumi program (Pulumi.yaml: `main: infra/`).

Importable pieces (this package imports nothing of the kit itself, so
`infra.scheduler_rules` stays light for the policy pack and the Scheduler emulator):

- `infra.config`: `load_config(mapping)` / `config_from_pulumi()` -> validated `StackConfig`
- `infra.dedup_service`: `DedupService` component (function, identities, Firestore, IAM)
- `infra.dedup_proxy`: `DedupProxy` component (the idempotent proxy, its account and roles)
- `infra.cloud_function`: what both declare alike (the function and its invoker grant,
  the conditioned database role, API enablement)
- `infra.scheduled_job`: `ScheduledJob` component (one Cloud Scheduler job with OIDC)
- `infra.component`: `SchedulerDedup`, the whole stack as one component (its inputs'
  types rendered from the config models by `infra.component_args`), which the component
  package (provider/) serves too
- `infra.program`: `build(values)` declares the whole stack through it; `main()` is what
  `pulumi up` runs

The operator tools that run this program offline (make plan, policy-check, runs, ...) are
operator_tools/, a room of their own: nothing here imports them.
"""

import os
import sys
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
"""The kit's tree: this checkout, or the installed package's folder (scheduler_dedup_kit/)."""
KIT_FUNCTION_DIR = KIT_ROOT / "function"
"""The kit's function source root: `dedup`, `example_jobs`, main.py and the kit's lock."""
KIT_INSTALLED = (KIT_ROOT / "__init__.py").is_file()
"""True when the kit runs from its wheel (`pip install scheduler-dedup-kit`), not a checkout."""


PROJECT_DIR_ENV = "SCHEDULER_DEDUP_PROJECT"
"""Names the project outright, e.g. for a component provider the engine starts elsewhere."""


def _project_dir() -> Path:
    """The Pulumi project the kit works on: the folder SCHEDULER_DEDUP_PROJECT names, else
    the nearest folder holding a Pulumi.yaml from the working directory up (where Pulumi
    runs the program, and where a person runs `scheduler-dedup`), never the installed kit's
    own folder; else, in a checkout, the checkout (the kit's own example stacks), and,
    installed, the working directory (where `scheduler-dedup` then says there is no
    project)."""
    if named := os.environ.get(PROJECT_DIR_ENV):
        return Path(named).resolve()
    here = Path(os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if KIT_INSTALLED and folder.is_relative_to(KIT_ROOT):
            continue  # a folder of the installed kit (its provider/, say) is nobody's project
        if (folder / "Pulumi.yaml").is_file():
            return folder
    return here if KIT_INSTALLED else KIT_ROOT


PROJECT_DIR = _project_dir()
"""The team's repository: its stacks, its `function/jobs/` and their lock, its build/."""
PROJECT_FUNCTION_DIR = PROJECT_DIR / "function"
"""The project's function source root, which holds its `jobs/` package: the kit's own
function/ in a fork, a folder of the team's repository when the kit is installed."""
TEAM_FUNCTION_DIR = None if PROJECT_FUNCTION_DIR == KIT_FUNCTION_DIR else PROJECT_FUNCTION_DIR
"""The team's function/ when it is not the kit's (the kit installed), whose `jobs/` each
archive carries beside the kit's runtime (infra/source.py); None in a fork, whose one
function/ holds both."""

# The function's source roots import as `dedup` and `jobs`, once for every module of the
# program and of what imports it: the table names, thresholds, DST defaults and version it
# declares are the function's own (one declaration each), and its archive is made of them.
# The project's first: its `jobs` is what the archive ships (infra/source.py).
for _root in (KIT_FUNCTION_DIR, PROJECT_FUNCTION_DIR):
    if str(_root) not in sys.path:
        sys.path.insert(0, str(_root))

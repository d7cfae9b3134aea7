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

import sys
from pathlib import Path

# The function's source root imports as `dedup`, once for every module of the program and
# of what imports it: the table names, thresholds, DST defaults and version it declares
# are the function's own (one declaration each), and its archive is that folder.
FUNCTION_DIR = Path(__file__).resolve().parent.parent / "function"
if str(FUNCTION_DIR) not in sys.path:
    sys.path.insert(0, str(FUNCTION_DIR))

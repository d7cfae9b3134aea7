"""Entry point `pulumi preview --policy-pack policies` runs: builds the PolicyPack, nothing else.

The CLI runs `python -u -m pulumi.policy <engine> <this directory>` with the working
directory set here, so this directory is on sys.path and the repository root is not: put
the root first (the policies import as `policies.*` and use `infra.scheduler_rules`) and
drop this directory, so its module names (function, stack, ...) cannot shadow anything.
Creating the PolicyPack starts the analyzer server and blocks: never import this module.
"""

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_ROOT))

from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

from policies.pack import PACK_NAME, build_policies  # noqa: E402

PolicyPack(
    name=PACK_NAME,
    policies=build_policies(),
    enforcement_level=EnforcementLevel.MANDATORY,
)

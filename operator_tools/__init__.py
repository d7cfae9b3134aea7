"""The operator tools: what a person runs from a shell against a stack (plan, policy check,
runs, re-runs, backfills, locks, new jobs, upgrades), behind one entry point,
`python -m operator_tools <command>` (__main__.py), which the make targets call. They
import the Pulumi program (infra/) and the function code (dedup); nothing imports them
but the demo, the Scheduler emulator (stack files), the policy pack's offline check, the
bench and the tests (docs/layout.md)."""

import sys
from pathlib import Path

# The function's source root imports as `dedup` (as on Cloud Run, and as demo/ and bench/
# do): every tool reads records, settings or job tables with the function's own code.
_FUNCTION_DIR = str(Path(__file__).resolve().parent.parent / "function")
if _FUNCTION_DIR not in sys.path:
    sys.path.insert(0, _FUNCTION_DIR)

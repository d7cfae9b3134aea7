"""The operator tools: what a person runs from a shell against a stack (plan, policy check,
runs, re-runs, backfills, locks, new jobs, upgrades), behind one entry point,
`scheduler-dedup <command>` (__main__.py), which the make targets call. They
import the Pulumi program (infra/) and the function code (dedup); nothing imports them
but the demo, the Scheduler emulator (stack files), the policy pack's offline check, the
bench and the tests (docs/layout.md)."""

import sys
from typing import NoReturn

import infra  # noqa: F401  (puts function/ on sys.path: the tools read with the function's code)


def not_an_entry_point(command: str) -> NoReturn:
    """What `python -m operator_tools.<module>` runs: nothing but this refusal (exit 1), so a
    script that ran a tool that way fails instead of passing without doing anything."""
    sys.exit(f"this module is not an entry point: run `scheduler-dedup {command}` "
             "(or the make target that calls it)")

"""`scheduler-dedup <command> [args]`: the one entry point of the operator tools, which the
make targets call (`make plan` is `scheduler-dedup plan`). The console command
(scheduler_dedup_kit.cli) runs this `main`; `python -m operator_tools <command>` still does
too, from a checkout (CHANGELOG.md documents it; the workflows' venvs install no command).

Each command is a module's `main(argv) -> exit code`, imported only when it is run: `plan`
and `policy-check` import the Pulumi program, `runs` the Firestore client, `schema` neither.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Final

# command -> (module, function, what it does); the make target of the same name runs it.
COMMANDS: Final[dict[str, tuple[str, str, str]]] = {
    "plan": ("operator_tools.plan", "main", "the offline plan of a stack (make plan)"),
    "policy-check": ("policies.offline_check", "main",
                     "the policy pack over the stacks, offline (make policy-check)"),
    "demo": ("demo.cli", "command", "a stack's jobs replayed locally under faults (make demo)"),
    "serve": ("demo.serve", "main", "a stack served locally until Ctrl-C (make serve)"),
    "runs": ("operator_tools.runs", "main", "each job's last runs, from its records (make runs)"),
    "rerun": ("operator_tools.rerun", "main", "ask for one run to execute again (make rerun)"),
    "backfill": ("operator_tools.backfill", "main",
                 "queue the runs of a range, or show or cancel a backfill (make backfill)"),
    "silence": ("operator_tools.silence", "main",
                "silence a job or the stack until a time, lift or list silences (make silence)"),
    "migrate-proxy-records": ("operator_tools.migrate_records", "main",
                              "copy proxied jobs' records into the proxy's database"),
    "lock": ("operator_tools.lock", "main", "pin your jobs' dependencies (make lock)"),
    "new-job": ("operator_tools.new_job", "main", "a job module and its test (make new-job)"),
    "upgrade-check": ("operator_tools.upgrade_check", "main",
                      "the upgrade steps from a release to this one (make upgrade-check)"),
    "release": ("operator_tools.release", "main",
                "kit maintainers: cut a release, or check the version (make release, make dist)"),
    "schema": ("operator_tools.schema", "main",
               "kit maintainers: regenerate the config reference and schema (make schema)"),
    "ci-stacks": ("operator_tools.ci_stacks", "main", "the team's stacks, as CI deploys them"),
    "init": ("operator_tools.init", "main",
             "a team repository that depends on this kit by version (init DIR)"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {what}" for name, (_, _, what) in COMMANDS.items()]
    return "usage: scheduler-dedup <command> [args]\n\ncommands:\n" + "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(usage(), file=sys.stderr)
        return 2
    if args[0] in ("-h", "--help"):
        print(usage())
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"scheduler-dedup: no command {name!r}\n{usage()}", file=sys.stderr)
        return 2
    module, function, _ = COMMANDS[name]
    command: Callable[[list[str]], int] = getattr(importlib.import_module(module), function)
    return command(rest)


if __name__ == "__main__":
    sys.exit(main())

"""`scheduler-dedup <command>`: the console entry point of the installed kit, and of the
make targets in this repository. The commands are operator_tools' (`COMMANDS`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Final

from scheduler_dedup_kit import activate

ANYWHERE: Final = frozenset({"init", "upgrade-check", "-h", "--help"})
"""What the installed kit runs outside a Pulumi project: every other command works on one."""
CHECKOUT_ONLY: Final = frozenset({"schema", "release"})
"""Kit maintainers' commands: they rewrite the kit's own files, which an install must not."""


def main(argv: Sequence[str] | None = None) -> int:
    activate()
    import infra
    from operator_tools.__main__ import main as run_command

    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else ""
    if infra.KIT_INSTALLED and command in CHECKOUT_ONLY:
        print(f"scheduler-dedup {command}: a kit maintainer's command, run in a checkout of "
              "the kit (it rewrites the kit's own files)", file=sys.stderr)
        return 2
    if (infra.KIT_INSTALLED and command and command not in ANYWHERE
            and not (infra.PROJECT_DIR / "Pulumi.yaml").is_file()):
        print(f"scheduler-dedup {command}: no Pulumi.yaml in {infra.PROJECT_DIR} or any folder "
              "above it. Fix: run it in your team's repository (`scheduler-dedup init DIR` "
              f"writes one), or name it with {infra.PROJECT_DIR_ENV}=<folder>",
              file=sys.stderr)
        return 2
    return run_command(args)

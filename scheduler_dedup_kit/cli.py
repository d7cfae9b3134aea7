"""`scheduler-dedup <command>`: the console entry point of the installed kit, and of the
make targets in this repository. The commands are operator_tools' (`COMMANDS`)."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler_dedup_kit import activate


def main(argv: Sequence[str] | None = None) -> int:
    activate()
    from operator_tools.__main__ import main as run_command

    return run_command(argv)

"""`scheduler-dedup init DIR`: a team's repository that holds only its own files, with the
kit pinned by version (docs/by-version.md): examples/team-repo/ copied, and its first job,
`jobs.hello` and its test, written from the same templates as `new-job`."""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from dedup.version import __version__ as KIT_VERSION
from infra import KIT_ROOT
from operator_tools.new_job import write_job

STARTER: Final = KIT_ROOT / "examples" / "team-repo"
FIRST_JOB: Final = "hello"
"""The job the starter's dev stack names (stacks/Pulumi.dev.yaml: jobs.hello:run)."""
KIT_PIN: Final = f"scheduler-dedup-kit=={KIT_VERSION}"
"""The starter's requirements.txt line: the version of the kit that wrote it."""


class InitError(ValueError):
    """A folder `init` refuses: what is wrong, and the fix."""


def init_repository(target: Path) -> list[Path]:
    """Write the starter into `target` (absent or empty); the files written, sorted."""
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InitError(f"{target} exists and is not an empty folder. Fix: name a new folder "
                        "(init never writes over a file)")
    # Never what a run of the starter left behind (its .gitignore's build/, .cache/, .venv).
    shutil.copytree(STARTER, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
        "__pycache__", "*.pyc", ".venv", "build", ".cache", ".pytest_cache"))
    write_job(FIRST_JOB, target)
    return sorted(p for p in target.rglob("*") if p.is_file())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scheduler-dedup init",
        description="Write a team repository (stacks, jobs, their tests, CI) that depends on "
        f"this kit by version ({KIT_PIN}).",
    )
    parser.add_argument("directory", type=Path, help="a new or empty folder")
    args = parser.parse_args(argv)
    try:
        written = init_repository(args.directory)
    except InitError as exc:
        print(f"scheduler-dedup init: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path.relative_to(args.directory)}")
    print(f"Next, in {args.directory}: set your project in stacks/Pulumi.dev.yaml, then "
          "`make test` (it builds .venv from requirements.txt), `make lock` (the hash-checked "
          "locks CI installs: commit them), `make demo STACK=dev`, and "
          "`pulumi stack init dev && pulumi up --policy-pack policy` (README.md there).")
    return 0


if __name__ == "__main__":  # the entry point is scheduler-dedup (operator_tools.__main__)
    from operator_tools import not_an_entry_point

    not_an_entry_point("init")

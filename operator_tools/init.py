"""`scheduler-dedup init DIR [--project NAME]`: a team's repository that holds only its own
files, with the kit pinned by version (docs/by-version.md): examples/team-repo/ copied, its
Pulumi project named after DIR (or NAME), and its first job, `jobs.hello` and its test,
written from the same templates as `new-job`.

The project's name is the team's own: stacks are `<org>/<project>/<stack>` in a Pulumi
organisation or state backend, so two teams' repositories of one name would share their
stacks (docs/by-version.md, "Your Pulumi project's name")."""

from __future__ import annotations

import argparse
import re
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
LEFT_BEHIND: Final = ("__pycache__", "*.pyc", ".venv", "build", ".cache", ".pytest_cache",
                      ".ruff_cache", ".mypy_cache")
"""What a run of the starter leaves in it, which init never copies."""
FIRST_STEPS: Final = "pulumi stack select --create dev && pulumi up --policy-pack policy"
"""How the starter's dev stack is first deployed (its README says the same)."""
_PROJECT_LINE: Final = re.compile(r"(?m)^name: .*$")
# Pulumi's project names: letters, digits, '-', '_' and '.', at most 100 characters.
_PROJECT_NAME: Final = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


class InitError(ValueError):
    """A folder `init` refuses: what is wrong, and the fix."""


def project_name(target: Path, given: str | None = None) -> str:
    """The Pulumi project's name: `given`, else the repository folder's name."""
    name = given if given is not None else target.resolve().name
    if not _PROJECT_NAME.fullmatch(name):
        raise InitError(f"{name!r} is not a Pulumi project name (letters, digits, '-', '_', "
                        "'.'). Fix: --project <name>, one no other team's repository in your "
                        "Pulumi organisation or state backend uses")
    return name


def init_repository(target: Path, project: str | None = None) -> list[Path]:
    """Write the starter into `target` (absent or empty), its project named `project` (else
    after `target`); the files written, sorted."""
    name = project_name(target, project)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InitError(f"{target} exists and is not an empty folder. Fix: name a new folder "
                        "(init never writes over a file)")
    # Never what a run of the starter (or of the kit's checks over it) left behind: its
    # .gitignore's build/, .cache/, .venv and the tools' caches.
    shutil.copytree(STARTER, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
        *LEFT_BEHIND))
    pulumi_yaml = target / "Pulumi.yaml"
    pulumi_yaml.write_text(_PROJECT_LINE.sub(f"name: {name}", pulumi_yaml.read_text(
        encoding="utf-8"), count=1), encoding="utf-8")
    write_job(FIRST_JOB, target)
    return sorted(p for p in target.rglob("*") if p.is_file())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scheduler-dedup init",
        description="Write a team repository (stacks, jobs, their tests, CI) that depends on "
        f"this kit by version ({KIT_PIN}).",
    )
    parser.add_argument("directory", type=Path, help="a new or empty folder")
    parser.add_argument("--project", help="the Pulumi project's name (default: the folder's "
                        "name); unique in your Pulumi organisation or state backend")
    args = parser.parse_args(argv)
    try:
        written = init_repository(args.directory, args.project)
    except InitError as exc:
        print(f"scheduler-dedup init: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path.relative_to(args.directory)}")
    print(f"Its Pulumi project is {project_name(args.directory, args.project)!r} "
          "(Pulumi.yaml): no other team's repository in your Pulumi organisation or state "
          "backend may use that name.")
    print(f"Next, in {args.directory}: set your project in stacks/Pulumi.dev.yaml, then "
          "`make test` (it builds .venv from requirements.txt), `make lock` (the hash-checked "
          f"locks CI installs: commit them), `make demo STACK=dev`, and `{FIRST_STEPS}` "
          "(README.md there).")
    return 0


if __name__ == "__main__":  # the entry point is scheduler-dedup (operator_tools.__main__)
    from operator_tools import not_an_entry_point

    not_an_entry_point("init")

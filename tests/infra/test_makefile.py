"""The Makefile: one spelling for the stack (STACK=<name>), every stack when it is
omitted, and `make help` listing every target."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from infra import KIT_ROOT as REPO_ROOT

MAKEFILE = REPO_ROOT / "Makefile"


def make(checkout: Path, *args: str, dry_run: bool = True,
         timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`make` in `checkout` (a kit_clone of the repository: make reads its stacks and the
    team's lock, and the kit's tests never read a fork's); the virtualenv's stamp is taken
    as current (-o)."""
    env = {k: v for k, v in os.environ.items() if k != "STACK"}
    return subprocess.run(
        ["make", "--no-print-directory", "-o", ".venv/stamp", *(["-n"] if dry_run else []),
         *args],
        cwd=checkout, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )


def phony_targets() -> list[str]:
    text = MAKEFILE.read_text()
    return [t for line in re.findall(r"^\.PHONY:(.*)$", text, re.M) for t in line.split()]


def test_help_lists_every_target_with_one_line(kit_checkout: Path) -> None:
    result = make(kit_checkout, "help", dry_run=False)
    assert result.returncode == 0, result.stderr
    listed = dict(re.findall(r"^  make (\S+) +(.+)$", result.stdout, re.M))
    assert set(listed) == set(phony_targets())
    assert all(description.strip() for description in listed.values())


def test_help_is_what_a_bare_make_prints(kit_checkout: Path) -> None:
    bare = make(kit_checkout, dry_run=False)
    assert bare.stdout == make(kit_checkout, "help", dry_run=False).stdout


@pytest.mark.parametrize(
    ("args", "command"),
    [
        (["plan"], "scheduler-dedup plan \n"),
        (["plan", "STACK=staging"], "scheduler-dedup plan staging\n"),
        (["policy-check"], "scheduler-dedup policy-check\n"),
        (["policy-check", "STACK=staging"], "scheduler-dedup policy-check --stack staging\n"),
        (["demo", "STACK=staging"], "scheduler-dedup demo --stack staging "),
        (["runs", "STACK=staging"], "scheduler-dedup runs staging "),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else None,
)
def test_stack_picks_one_stack_and_none_means_every_stack(
    args: list[str], command: str, kit_checkout: Path
) -> None:
    result = make(kit_checkout, *args)
    assert result.returncode == 0, result.stderr
    assert command in result.stdout + "\n"


def test_runs_without_a_stack_says_how_to_name_one(kit_checkout: Path) -> None:
    result = make(kit_checkout, "runs", dry_run=False)
    assert result.returncode != 0
    assert "make runs needs a stack: make runs STACK=<name>" in result.stderr


def test_make_test_runs_the_plan_and_the_policy_check() -> None:
    prerequisites = re.search(r"^test:([^#\n]*)", MAKEFILE.read_text(), re.M)
    assert prerequisites is not None
    assert {"plan", "policy-check", "unit"} <= set(prerequisites.group(1).split())
    assert "dist" not in prerequisites.group(1).split()  # make dist is a release's, not CI's


def test_the_targets_run_the_kits_console_command_on_this_checkout(kit_checkout: Path) -> None:
    """`scheduler-dedup <command>` (the venv installs this checkout editable), with this
    checkout first on PYTHONPATH: a venv borrowed from another checkout runs this one."""
    text = MAKEFILE.read_text()
    assert "-m operator_tools" not in text
    result = make(kit_checkout, "plan")
    assert result.returncode == 0, result.stderr
    assert re.search(rf"PYTHONPATH={re.escape(str(kit_checkout))}\S* \.venv/bin/scheduler-dedup "
                     "plan", result.stdout), result.stdout


def test_the_venv_is_rebuilt_when_the_kits_package_declaration_changes() -> None:
    """A fresh clone's `make` builds the venv and installs the checkout (-e), and again
    after pyproject.toml, hatch_build.py or a requirements file changes."""
    stamp = re.search(r"^\$\(VENV\)/stamp:(.*(?:\\\n.*)*)", MAKEFILE.read_text(), re.M)
    assert stamp is not None
    assert {"pyproject.toml", "hatch_build.py", "requirements-tools.txt", "requirements-dev.txt",
            "constraints.txt"} <= set(stamp.group(1).replace("\\", " ").split())
    assert "pip install --quiet --no-deps --no-build-isolation -e ." in MAKEFILE.read_text()

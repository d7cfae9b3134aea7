"""`scheduler-dedup init DIR`: the starter copied, its first job written, never over a file,
and the kit pinned at this version (tests/test_by_version.py runs what it writes)."""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from dedup.version import __version__ as KIT_VERSION
from infra import KIT_ROOT as REPO_ROOT
from operator_tools.init import FIRST_JOB, FIRST_STEPS, KIT_PIN, LEFT_BEHIND, STARTER, main


def starter_files() -> list[Path]:
    """The starter's files, but what a run of it (or the kit's checks over it) left there."""
    return [p.relative_to(STARTER) for p in STARTER.rglob("*") if p.is_file() and not any(
        fnmatch.fnmatch(part, pattern) for part in p.relative_to(STARTER).parts
        for pattern in LEFT_BEHIND)]


def test_init_writes_the_starter_and_its_first_job(tmp_path: Path) -> None:
    target = tmp_path / "our-jobs"
    assert main([str(target)]) == 0
    starter = set(starter_files())
    written = {p.relative_to(target) for p in target.rglob("*") if p.is_file()}
    job = {Path(f"function/jobs/{FIRST_JOB}.py"), Path(f"tests/jobs/test_{FIRST_JOB}.py"),
           Path("function/jobs/__init__.py"), Path("tests/jobs/__init__.py")}
    assert written == starter | job
    for name in starter - {Path("Pulumi.yaml")}:
        assert (target / name).read_bytes() == (STARTER / name).read_bytes()
    stack = (target / "stacks" / "Pulumi.dev.yaml").read_text(encoding="utf-8")
    assert f"jobLogic: jobs.{FIRST_JOB}:run" in stack
    # The Pulumi project is the repository's own (its folder's name), not the kit's.
    project = yaml.safe_load((target / "Pulumi.yaml").read_text(encoding="utf-8"))
    assert project["name"] == "our-jobs"
    assert project == {**yaml.safe_load((STARTER / "Pulumi.yaml").read_text()), "name": "our-jobs"}


def test_init_names_the_project_as_told_and_refuses_a_name_pulumi_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([str(tmp_path / "repo"), "--project", "billing-jobs"]) == 0
    said = capsys.readouterr().out
    assert "Its Pulumi project is 'billing-jobs'" in said and "no other team's" in said
    assert "name: billing-jobs\n" in (tmp_path / "repo" / "Pulumi.yaml").read_text()
    assert main([str(tmp_path / "other"), "--project", "our jobs"]) == 2
    assert "'our jobs' is not a Pulumi project name" in capsys.readouterr().err
    assert not (tmp_path / "other").exists()


def test_the_starter_finds_python_as_the_kits_makefile_does() -> None:
    """python3.12 on PATH, else a pyenv-installed 3.12, else python3: the same lines."""
    kit = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    lookup = kit[kit.index("RUNTIME_PYTHON_VERSION :="):kit.index("endif\n") + len("endif\n")]
    assert "pyenv root" in lookup
    assert lookup in (STARTER / "Makefile").read_text(encoding="utf-8")


def test_the_starters_words_name_commands_that_exist_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """The README and init's last words give the same first deployment; the stack file's
    new-job hint is the starter Makefile's target with its variable."""
    assert FIRST_STEPS in (STARTER / "README.md").read_text(encoding="utf-8")
    assert main([str(tmp_path / "our-jobs")]) == 0
    assert f"`{FIRST_STEPS}`" in capsys.readouterr().out
    stack = (STARTER / "stacks" / "Pulumi.dev.yaml").read_text(encoding="utf-8")
    hint = " ".join(line.strip(" #") for line in stack.splitlines()
                    if line.lstrip().startswith("#"))
    assert "`make new-job NAME=<name>` (`scheduler-dedup new-job <name>`)" in hint
    makefile = (STARTER / "Makefile").read_text(encoding="utf-8")
    assert '$(BIN)/scheduler-dedup new-job "$(NAME)"' in makefile


def test_the_starter_pins_this_kit_version() -> None:
    """A release bumps the starter's pin with the version (function/dedup/version.py)."""
    lines = (STARTER / "requirements.txt").read_text(encoding="utf-8").splitlines()
    assert f"scheduler-dedup-kit=={KIT_VERSION}" == KIT_PIN and KIT_PIN in lines


@pytest.mark.parametrize("existing", ["file", "folder with a file"])
def test_init_never_writes_over_anything(
    tmp_path: Path, existing: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "our-jobs"
    if existing == "file":
        target.write_text("mine")
    else:
        target.mkdir()
        (target / "notes.txt").write_text("mine")
    assert main([str(target)]) == 2
    assert "is not an empty folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.rglob("*")) in (["our-jobs"], ["notes.txt", "our-jobs"])


def _commands(makefile: Path, call: str) -> dict[str, str]:
    """target -> the scheduler-dedup command line of its recipe (what follows the call)."""
    found: dict[str, str] = {}
    target = ""
    for line in makefile.read_text(encoding="utf-8").splitlines():
        if line and not line[0].isspace() and ":" in line and not line.startswith("#"):
            target = line.split(":", 1)[0]
        elif call in line:
            found[target] = line.split(call, 1)[1].strip()
    return found


def test_the_starters_make_targets_are_the_kits_with_the_same_arguments() -> None:
    """Every message that says `make <target> VAR=...` holds in a team repository too."""
    kit = _commands(REPO_ROOT / "Makefile", "$(SCHEDULER_DEDUP)")
    starter = _commands(STARTER / "Makefile", "$(BIN)/scheduler-dedup")
    for own in ("schema", "release", "dist"):  # the kit maintainers' own (the kit's files)
        kit.pop(own)
    assert starter == kit


def test_the_starter_holds_team_code_to_the_kits_ruff_and_mypy_settings() -> None:
    """docs/jobs.md's checks, by version: the same rules, strictness and tool versions."""
    kit = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]
    starter = tomllib.loads((STARTER / "pyproject.toml").read_text(encoding="utf-8"))["tool"]
    for key in ("line-length", "target-version"):
        assert starter["ruff"][key] == kit["ruff"][key]
    assert starter["ruff"]["lint"]["select"] == kit["ruff"]["lint"]["select"]
    assert starter["ruff"]["lint"]["flake8-tidy-imports"] == kit["ruff"]["lint"][
        "flake8-tidy-imports"]
    assert {"dedup", "jobs"} <= set(starter["ruff"]["lint"]["isort"]["known-first-party"])
    for key in ("python_version", "strict", "warn_unused_ignores", "explicit_package_bases",
                "mypy_path"):
        assert starter["mypy"][key] == kit["mypy"][key], key
    assert starter["mypy"]["files"] == ["function/jobs", "tests"]
    assert all(override in starter["mypy"]["overrides"] for override in kit["mypy"]["overrides"])
    makefile = (STARTER / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"(?m)^test: lint typecheck unit plan policy-check ", makefile)
    kit_pins = set((REPO_ROOT / "requirements-dev.txt").read_text(encoding="utf-8").split())
    starter_pins = (STARTER / "requirements.txt").read_text(encoding="utf-8").split()
    assert {p for p in starter_pins if p.startswith(("ruff==", "mypy=="))} <= kit_pins
    assert any(p.startswith("ruff==") for p in starter_pins)
    assert any(p.startswith("mypy==") for p in starter_pins)


def test_an_inited_repository_passes_them_and_they_catch_what_they_should(
    tmp_path: Path, kit_function_dir: Path,
) -> None:
    """As the starter's `make lint` and `make typecheck` run them (mypy finding the kit's
    `dedup` through MYPYPATH), on what `init` writes, then on a job that breaks them."""
    team = tmp_path / "our-jobs"
    assert main([str(team)]) == 0
    tools = Path(sys.executable).parent
    kit_types = team / ".cache" / "kit-types"  # as `make typecheck` copies the kit's dedup
    shutil.copytree(kit_function_dir / "dedup", kit_types / "dedup")
    env = {**os.environ, "MYPYPATH": str(kit_types)}

    def check(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(tools / argv[0]), *argv[1:]], cwd=team, env=env,
                              capture_output=True, text=True, timeout=600, check=False)

    linted, typed = check("ruff", "check", "."), check("mypy")
    assert linted.returncode == 0, linted.stdout
    assert typed.returncode == 0, typed.stdout
    job = team / "function" / "jobs" / f"{FIRST_JOB}.py"
    job.write_text(job.read_text() + "\n\ndef helper(value):\n    return value\n")
    typed = check("mypy")
    assert typed.returncode == 1 and "Function is missing a type annotation" in typed.stdout
    job.write_text("import sys, os\n" + job.read_text())
    linted = check("ruff", "check", ".")
    assert linted.returncode == 1 and "E401" in linted.stdout, linted.stdout

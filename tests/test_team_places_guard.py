"""The guard that keeps the kit's tests off the team's places (tests/team_places_guard.py)
sees each way in, lets the kit's own trees through, and fails a test that reads one.

These pass in the kit's checkout, where the team's places do not exist (the look-up is
what is seen), and in a fork, where they do: tests/test_fork.py runs them there.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infra import KIT_FUNCTION_DIR, KIT_ROOT, PROJECT_DIR_ENV
from operator_tools.offline import run_offline
from operator_tools.stack_files import checked_stack_files, stack_names
from operator_tools.team_files import TEAM_PLACES
from tests.kit_tree import kit_clone, kit_files, kit_function
from tests.team_places_guard import OF_THE_KITS_FUNCTION, recording

TEAM_PATHS = ("stacks/Pulumi.dev.yaml", "function/jobs/__init__.py",
              "function/jobs/requirements.txt", "tests/jobs/test_invoices.py",
              "policies/policy-config.prod.json")


def test_each_team_place_is_one_the_guard_knows() -> None:
    """The places are team_files' (their one declaration), each covered by a path above."""
    assert all(any(place.matches(path) for path in TEAM_PATHS) for place in TEAM_PLACES)


@pytest.mark.parametrize("path", TEAM_PATHS)
def test_a_look_up_open_or_listing_of_a_team_place_is_seen(path: str) -> None:
    target = KIT_ROOT / path
    with recording() as found:
        target.exists()
    # In the kit's checkout they do not exist: the attempt is what counts.
    with recording() as opened, contextlib.suppress(FileNotFoundError):
        target.read_bytes()
    with recording() as listed, contextlib.suppress(FileNotFoundError):
        os.listdir(target.parent)
    assert any(f"stat {path}: a team's place" in hit for hit in found), found
    assert any(f"open {path}: a team's place" in hit for hit in opened), opened
    assert any(f"{target.parent.relative_to(KIT_ROOT).as_posix()}: a team's place" in hit
               for hit in listed) or path.startswith("policies/"), listed
    assert "tests/test_team_places_guard.py" in found[0]  # where it happened


def test_the_kits_files_next_to_them_are_not() -> None:
    with recording() as found:
        (KIT_ROOT / "examples" / "stacks" / "Pulumi.dev.yaml").read_bytes()
        (KIT_ROOT / "policies" / "policy-config.example.json").exists()
        (KIT_FUNCTION_DIR / "example_jobs" / "example.py").is_file()
        (KIT_FUNCTION_DIR / "requirements.txt").read_bytes()
        os.listdir(KIT_FUNCTION_DIR / "dedup")
        kit_files()
    assert found == []


def test_a_copy_or_listing_of_the_kits_function_is_seen_but_kit_functions(
    tmp_path: Path,
) -> None:
    with recording() as found:
        shutil.copytree(KIT_FUNCTION_DIR, tmp_path / "copy")
        sorted(KIT_FUNCTION_DIR.iterdir())
    kinds = {hit.split(" (at ")[0] for hit in found}
    assert {f"shutil.copytree {OF_THE_KITS_FUNCTION}", f"os.listdir {OF_THE_KITS_FUNCTION}"} \
        <= kinds, found
    with recording() as found:
        copy = kit_function(tmp_path / "kit")
    assert found == []
    assert (copy / "main.py").is_file() and (copy / "example_jobs").is_dir()
    assert not (copy / "jobs").exists()


def run(argv: list[str], cwd: Path, **env: str) -> list[str]:
    with recording() as found:
        subprocess.run(argv, cwd=cwd, env={**os.environ, **env}, capture_output=True,
                       check=False, timeout=60)
    return found


def test_a_kit_process_on_the_checkout_is_seen_and_one_on_a_project_of_its_own_is_not(
    tmp_path: Path, kit_checkout: Path
) -> None:
    kit_tool = [sys.executable, "-c", "import infra"]
    assert "started `make -v` with the checkout as its project" in " ".join(
        run(["make", "-v"], KIT_ROOT))
    # From a folder with no Pulumi.yaml the kit works on the checkout too.
    assert run(kit_tool, tmp_path)
    assert run([sys.executable, "-m", "operator_tools.no_such_module"], KIT_ROOT)
    assert run(kit_tool, tmp_path, **{PROJECT_DIR_ENV: str(tmp_path)}) == []
    assert run(["make", "-v"], kit_checkout) == []
    assert run([sys.executable, "-c", "import json"], KIT_ROOT) == []  # no kit tool
    assert run(["git", "--version"], KIT_ROOT) == []


def test_the_kits_tools_in_a_tests_process_work_on_the_kit_as_it_ships(
    kit_function_dir: Path,
) -> None:
    """tests/conftest.py: the program's function/ is a copy without jobs/, and no stack
    file is the team's (the kit's examples stand in)."""
    assert run_offline.__kwdefaults__ is not None
    assert run_offline.__kwdefaults__["source_dir"] == kit_function_dir
    assert not (kit_function_dir / "jobs").exists()
    with recording() as found:
        assert stack_names() == []
        files, examples = checked_stack_files()
    assert examples and [f.name for f in files] == [
        "Pulumi.dev.yaml", "Pulumi.prod.yaml", "Pulumi.retail.yaml"]
    assert found == []


def test_a_kit_clone_holds_none_of_the_teams_files(tmp_path: Path) -> None:
    with recording() as found:
        clone = kit_clone(tmp_path)
    assert found == []
    assert not any((clone / path).exists() for path in TEAM_PATHS)
    assert (clone / "Makefile").is_file() and (clone / "function" / "main.py").is_file()


def test_a_test_that_reads_a_team_place_fails_naming_it(tmp_path: Path) -> None:
    """End to end, in a pytest of its own: the test's assertions pass, the guard fails it."""
    (tmp_path / "test_reads.py").write_text(
        "from infra import KIT_ROOT\n\n\n"
        "def test_reads_the_teams_stacks() -> None:\n"
        "    assert (KIT_ROOT / 'stacks').exists() in (True, False)\n\n\n"
        "def test_reads_nothing_of_the_team() -> None:\n"
        "    assert (KIT_ROOT / 'Makefile').exists()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
         "tests.team_places_guard", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=KIT_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed, 1 passed" in result.stdout
    assert "this kit test reaches the team's places" in result.stdout
    assert "stat stacks: a team's place (at " in result.stdout

"""The kit installed, a team's repository apart from it: each archive of a function that runs
jobs is the kit's function/ plus the team's function/jobs/ (and its lock; the proxy's and
the watchdog's hold the kit's alone: test_archives_by_trust.py), the project is found from
the working directory up but never inside the installed kit, and a team repository never
falls back to the kit's example stacks. (tests/test_by_version.py runs all of it from a
real wheel.)"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from infra.job_modules import JobModuleError
from infra.lock import KIT_LOCK, TEAM_LOCK
from infra.source import build_source_archive, source_files
from tests.kit_tree import kit_function


@pytest.fixture
def kit_and_team(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the kit's function/ (with a stray jobs/ of its own) and a team's function/
    with its jobs and their lock."""
    kit = kit_function(tmp_path / "kit" / "function")
    (kit / "jobs").mkdir()
    (kit / "jobs" / "stale.py").write_text("raise SystemExit('not the team job')\n")
    team = tmp_path / "team" / "function"
    (team / "jobs").mkdir(parents=True)
    (team / "jobs" / "__init__.py").write_text("")
    (team / "jobs" / "billing.py").write_text("def run(context): return {}\n")
    (team / "jobs" / "requirements.txt").write_text("humanize==4.15.0 \\\n    --hash=sha256:00\n")
    return kit, team


def test_the_archive_is_the_kits_function_and_the_teams_jobs(
    kit_and_team: tuple[Path, Path],
) -> None:
    kit, team = kit_and_team
    names = [name for name, _ in source_files(kit, team)]
    assert "jobs/billing.py" in names and "jobs/stale.py" not in names
    assert "dedup/protocol.py" in names and "main.py" in names
    archive = build_source_archive(kit, None, team)
    with zipfile.ZipFile(io.BytesIO(archive.data)) as zf:
        requirements = zf.read("requirements.txt").decode()
    kit_lock = (kit / KIT_LOCK.name).read_text()
    assert requirements.startswith(kit_lock) and requirements.endswith(
        (team / TEAM_LOCK.relative_to("function")).read_text())


def test_a_new_kit_version_or_a_changed_team_job_is_a_new_archive(
    kit_and_team: tuple[Path, Path],
) -> None:
    kit, team = kit_and_team
    before = build_source_archive(kit, None, team).sha256
    (team / "jobs" / "billing.py").write_text("def run(context): return {'v': 2}\n")
    after_job = build_source_archive(kit, None, team).sha256
    version = kit / "dedup" / "version.py"
    version.write_text(version.read_text().replace('"', '"9', 1))
    after_kit = build_source_archive(kit, None, team).sha256
    assert len({before, after_job, after_kit}) == 3


def test_a_runtimes_archive_takes_only_its_jobs_from_the_teams_repository(
    kit_and_team: tuple[Path, Path],
) -> None:
    kit, team = kit_and_team
    (team / "jobs" / "billing.py").write_text("from jobs import money\n\ndef run(context):\n"
                                              "    return {}\n")
    (team / "jobs" / "money.py").write_text("")
    (team / "jobs" / "inventory.py").write_text("def run(context): return {}\n")
    names = [name for name, _ in source_files(kit, team, job_modules=["jobs.billing"])]
    assert [n for n in names if n.startswith("jobs/")] == [
        "jobs/__init__.py", "jobs/billing.py", "jobs/money.py", "jobs/requirements.txt"]
    assert "dedup/protocol.py" in names and "main.py" in names
    every = build_source_archive(kit, None, team)
    billing = build_source_archive(kit, None, team, job_modules=["jobs.billing"])
    with zipfile.ZipFile(io.BytesIO(billing.data)) as zf, \
            zipfile.ZipFile(io.BytesIO(every.data)) as whole:
        assert zf.read("jobs/billing.py") == (team / "jobs" / "billing.py").read_bytes()
        assert zf.read("requirements.txt") == whole.read("requirements.txt")
    # Looked for in the team's jobs/, never the installed kit's (its stale one included).
    with pytest.raises(JobModuleError, match=re.escape(str(team / "jobs" / "stale.py"))):
        source_files(kit, team, job_modules=["jobs.stale"])


def _discover(cwd: Path, kit_root: Path, env: dict[str, str] | None = None) -> str:
    """infra.PROJECT_DIR as a process started in `cwd` finds it, with the kit's tree at
    `kit_root` (a copy of infra/ there; an __init__.py beside it makes it "installed")."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import infra; "
            "print(infra.PROJECT_DIR, infra.KIT_INSTALLED, infra.TEAM_FUNCTION_DIR)")
    result = subprocess.run(
        [sys.executable, "-c", code, str(kit_root)], cwd=cwd, capture_output=True, text=True,
        env={**{k: v for k, v in os.environ.items() if k != "SCHEDULER_DEDUP_PROJECT"},
             **(env or {})}, check=True)
    return result.stdout.strip()


@pytest.fixture
def installed_kit(tmp_path: Path) -> Path:
    root = tmp_path / "site-packages" / "scheduler_dedup_kit"
    (root / "infra").mkdir(parents=True)
    shutil.copy2(Path(__file__).resolve().parents[2] / "infra" / "__init__.py",
                 root / "infra" / "__init__.py")
    (root / "__init__.py").write_text("")
    (root / "Pulumi.yaml").write_text("name: scheduler-dedup\n")  # shipped as data
    (root / "provider").mkdir()
    return root


def test_the_project_is_the_nearest_pulumi_yaml_up_from_the_working_directory(
    tmp_path: Path, installed_kit: Path,
) -> None:
    team = tmp_path / "team"
    (team / "stacks").mkdir(parents=True)
    (team / "Pulumi.yaml").write_text("name: scheduler-dedup\n")
    assert _discover(team / "stacks", installed_kit) == f"{team} True {team / 'function'}"


def test_a_folder_of_the_installed_kit_is_nobodys_project(
    tmp_path: Path, installed_kit: Path,
) -> None:
    """The component provider run from the kit's provider/ is not in a project the kit
    ships (its Pulumi.yaml is data): it works where it is, or where it is told."""
    provider = installed_kit / "provider"
    assert _discover(provider, installed_kit).startswith(f"{provider} True")
    team = tmp_path / "team"
    team.mkdir()
    named = _discover(provider, installed_kit, {"SCHEDULER_DEDUP_PROJECT": str(team)})
    assert named == f"{team} True {team / 'function'}"


def test_a_team_repository_never_plans_the_kits_example_stacks(tmp_path: Path) -> None:
    """In a checkout a stack it lacks is the kit's example of that name; in a team's
    repository it is an error naming the team's stacks, never another project's plan."""
    team = tmp_path / "team"
    (team / "stacks").mkdir(parents=True)
    (team / "Pulumi.yaml").write_text("name: scheduler-dedup\nstackConfigDir: stacks\n")
    root = Path(__file__).resolve().parents[2]
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/function']; "
            "import infra; "
            "from operator_tools import stack_files as s; print(s.EXAMPLES_STAND_IN); "
            "print(s.checked_stack_files()); s.stack_path('prod')")
    result = subprocess.run([sys.executable, "-c", code, str(root)], cwd=team,
                            capture_output=True, text=True, check=False)
    assert result.stdout.splitlines() == ["False", "([], False)"]
    assert "no stack file" in result.stderr and "the kit's examples" not in result.stderr


def _in_team_repo(code: str, tmp_path: Path) -> str:
    """Run `code` where a team repository's doors run (its root, the kit importable)."""
    team = tmp_path / "team"
    team.mkdir(exist_ok=True)
    (team / "Pulumi.yaml").write_text("name: scheduler-dedup\n")
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", code], cwd=team, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(root)}, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_team_repositorys_main_runs_the_kits_program(tmp_path: Path) -> None:
    """examples/team-repo/__main__.py -> run_program() -> infra/__main__.py -> its main()."""
    out = _in_team_repo(
        "import scheduler_dedup_kit as kit; kit.activate(); import infra.program as program; "
        "program.main = lambda: print('declared from', __import__('infra').PROJECT_DIR); "
        "import runpy; runpy.run_path('" + str(Path(__file__).resolve().parents[2] /
                                             "examples" / "team-repo" / "__main__.py") + "')",
        tmp_path)
    assert out.strip() == f"declared from {tmp_path / 'team'}"


def test_a_team_repositorys_policy_folder_builds_the_kits_pack(tmp_path: Path) -> None:
    """examples/team-repo/policy/__main__.py -> run_policy_pack() -> the kit's
    policies/__main__.py, which builds the PolicyPack (stubbed: the real one serves)."""
    out = _in_team_repo(
        "import pulumi_policy; made = []; "
        "pulumi_policy.PolicyPack = lambda **kw: made.append(kw); import runpy; "
        "runpy.run_path('" + str(Path(__file__).resolve().parents[2] / "examples" /
                                 "team-repo" / "policy" / "__main__.py") + "'); "
        "from policies.pack import PACK_NAME, build_policies; "
        "print(made[0]['name'] == PACK_NAME, len(made[0]['policies']) == len(build_policies()))",
        tmp_path)
    assert out.split() == ["True", "True"]

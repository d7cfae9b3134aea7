"""Archives by trust (issue 36): the proxy's and the watchdog's archives hold only the kit's
code and the kit's lock, so nothing of the team's (a job module, a dependency's install or
import hook) is built or run with the token secret or the watchdog's identity; the dedup
function's and each runtime's carry the team's lock and their own jobs. Read from the very
archives the program declares for a stack with a team job module and a team lock, and
started by the plan's check each in the environment of its own lock."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import zipfile
from pathlib import Path
from typing import Any, Final

import pytest

from infra.config import ConfigError, load_config
from infra.lock import KIT_LOCK, deployed_requirements
from infra.source import build_source_archive, source_files
from operator_tools.function_startup import (
    REQUIREMENTS_FILE,
    DeclaredStartup,
    declared_startups,
    start_functions,
)
from operator_tools.function_venv import function_python
from operator_tools.offline import checked_run, load_stack_config, run_offline
from tests.infra.helpers import OBJECT, StackUnderTest
from tests.kit_tree import kit_function
from tests.stacks import FIXTURE_STACKS_DIR

TEAM_LOCK_TEXT: Final = (
    "# locked from function/jobs/requirements.in sha256:00 function/requirements.txt "
    "sha256:00\nhumanize==4.15.0 \\\n    --hash=sha256:"
    "5ea58ac1c4a0ab4a5a1e4a24a4b2c3b0e6b6b3f9c1e7f8d1a7ab2a55d1d3f9a1\n"
)
"""A team lock as `make lock` writes it (the start-up check's test below never installs it)."""
TEAM_JOBS: Final = {
    "__init__.py": "",
    "requirements.in": "humanize\n",
    "requirements.txt": TEAM_LOCK_TEXT,
    "inventory.py": "def sync(context):\n    return {'synced': True}\n",
    "billing.py": "from jobs import money\n\n\ndef export(context):\n    return money.TOTAL\n",
    "money.py": "TOTAL = {'total': 0}\n",
    "fallback.py": "def run(context):\n    return {}\n",
}
"""A fork's function/jobs/: a job for each runtime (one importing a module of its own), the
stack's default job logic, the team's requirements and lock."""
KIT_ONLY: Final = ("proxy-function", "watchdog-function")
RUNS_JOBS: Final = {
    "dedup-function": {"jobs/fallback.py"},
    "runtime-sync-function": {"jobs/inventory.py"},
    "runtime-export-function": {"jobs/billing.py", "jobs/money.py"},
}
"""Each function that runs job logic, and the team's modules its archive carries."""


def team_function(into: Path) -> Path:
    """The kit's function/ with the team's jobs/ and lock in it, as a fork has it."""
    source = kit_function(into)
    for name, text in TEAM_JOBS.items():
        (source / "jobs" / name).parent.mkdir(parents=True, exist_ok=True)
        (source / "jobs" / name).write_text(text)
    return source


def retail_with_team_jobs() -> dict[str, Any]:
    """The retail fixture (a proxy, two runtimes, a watchdog) running the team's jobs."""
    raw = copy.deepcopy(load_stack_config("retail", FIXTURE_STACKS_DIR))
    logic = {"inventory-sync": "jobs.inventory:sync", "nightly-export": "jobs.billing:export"}
    for job in raw["scheduler-dedup:jobs"]:
        if job["name"] in logic:
            job["jobLogic"] = logic[job["name"]]
    raw["scheduler-dedup:defaultJobLogic"] = "jobs.fallback:run"
    return raw


@pytest.fixture(scope="module")
def team_stack(tmp_path_factory: pytest.TempPathFactory) -> tuple[StackUnderTest, Path]:
    tmp = tmp_path_factory.mktemp("team-stack")
    source = team_function(tmp / "function")
    raw = retail_with_team_jobs()
    run = run_offline(raw, stack="retail", source_dir=source, build_dir=tmp / "build")
    return StackUnderTest("retail", raw, load_config(raw), run), source


def archive_of(stack: StackUnderTest, function: str) -> dict[str, bytes]:
    """Every entry of the archive the function `function` (its Pulumi name) is built from."""
    path = stack.source_object(stack.run.by_name(function)).props["source"]["path"]
    with zipfile.ZipFile(path) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def test_the_proxys_and_the_watchdogs_archives_hold_the_kits_code_and_lock_alone(
    team_stack: tuple[StackUnderTest, Path],
) -> None:
    stack, source = team_stack
    kit_lock = (source / KIT_LOCK.name).read_bytes()
    for function in KIT_ONLY:
        entries = archive_of(stack, function)
        assert not [n for n in entries if n.startswith(("jobs/", "example_jobs/"))], function
        assert entries[REQUIREMENTS_FILE] == kit_lock, function
        assert b"humanize" not in entries[REQUIREMENTS_FILE]
        # The kit's code and nothing else: main.py, dedup/, the lock and its own job table.
        assert {n.split("/", 1)[0] for n in entries} == {
            "main.py", "dedup", REQUIREMENTS_FILE, "job_tables"}, function
        assert entries["dedup/protocol.py"] == (source / "dedup" / "protocol.py").read_bytes()


def test_the_functions_that_run_jobs_carry_the_teams_lock_and_their_own_jobs(
    team_stack: tuple[StackUnderTest, Path],
) -> None:
    stack, source = team_stack
    union = deployed_requirements(source)
    assert union.endswith(TEAM_LOCK_TEXT.encode())
    modules = {n for n in TEAM_JOBS if n.endswith(".py") and n != "__init__.py"}
    for function, own in RUNS_JOBS.items():
        entries = archive_of(stack, function)
        assert entries[REQUIREMENTS_FILE] == union, function
        shipped = {n for n in entries if n.startswith("jobs/")
                   and n.removeprefix("jobs/") in modules}
        assert shipped == own, function
        for name in own:
            assert entries[name] == (source / name).read_bytes()


def test_a_team_job_change_redeploys_only_the_functions_that_run_it(tmp_path: Path) -> None:
    source = team_function(tmp_path / "function")
    raw = retail_with_team_jobs()

    def objects() -> dict[str, str]:
        run = run_offline(raw, stack="retail", source_dir=source, build_dir=tmp_path / "b")
        return {o.name: o.props["name"] for o in run.of_type(OBJECT)}

    before = objects()
    (source / "jobs" / "money.py").write_text("TOTAL = {'total': 1}\n")
    after = objects()
    assert {name for name in before if after[name] != before[name]} == {
        "runtime-export-source"}
    # The team's lock is every job runner's, and no one else's.
    (source / "jobs" / "requirements.txt").write_text(TEAM_LOCK_TEXT + "# again\n")
    again = objects()
    assert {name for name in after if again[name] != after[name]} == {
        "dedup-source", "runtime-sync-source", "runtime-export-source"}


def test_an_installed_kits_kit_only_archive_takes_nothing_of_the_team(tmp_path: Path) -> None:
    """The kit installed: its function/ and the team's repository apart. A kit-only archive
    is the kit's code and lock whatever either folder holds (a stray jobs/ in the kit's)."""
    kit = kit_function(tmp_path / "kit" / "function")
    (kit / "jobs").mkdir()
    (kit / "jobs" / "stray.py").write_text("")
    team = team_function(tmp_path / "team" / "function")
    archive = build_source_archive(kit, None, team, kit_only=True)
    with zipfile.ZipFile(io.BytesIO(archive.data)) as zf:
        names = zf.namelist()
        assert zf.read(REQUIREMENTS_FILE) == (kit / KIT_LOCK.name).read_bytes()
    assert "main.py" in names and "dedup/protocol.py" in names
    assert not [n for n in names if not (n.startswith("dedup/") or n in {
        "main.py", REQUIREMENTS_FILE})]
    # The team's code and lock change nothing of it.
    (team / "jobs" / "billing.py").write_text("# changed\n")
    assert build_source_archive(kit, None, team, kit_only=True) == archive
    with pytest.raises(ValueError, match="no job modules"):
        source_files(kit, team, job_modules=["jobs.billing"], kit_only=True)


def _recording_python(venvs_dir: Path, lock: bytes, label: str, runs: Path,
                      python: Path) -> None:
    """The cached environment of `lock` (operator_tools/function_venv.py's name for it): a
    `bin/python` that keeps the plan it is given (which functions it starts) and runs
    `python`, the kit lock's environment (the team lock here adds nothing importable)."""
    digest = hashlib.sha256(lock).hexdigest()[:16]
    bin_dir = venvs_dir / f"{digest}-py312" / "bin"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "python"
    # Its arguments: -P -c <starter> <plan.json> <results.json>.
    script.write_text(f'#!/bin/sh\ncp "$4" "{runs}/{label}.json"\nexec "{python}" "$@"\n')
    script.chmod(0o755)


def test_each_function_starts_in_the_environment_of_its_own_lock(
    team_stack: tuple[StackUnderTest, Path], tmp_path: Path,
) -> None:
    stack, source = team_stack
    kit_python = function_python(source / KIT_LOCK.name)
    venvs, runs = tmp_path / "venvs", tmp_path / "runs"
    runs.mkdir()
    _recording_python(venvs, (source / KIT_LOCK.name).read_bytes(), "kit", runs, kit_python)
    _recording_python(venvs, deployed_requirements(source), "team", runs, kit_python)
    # Each function that runs jobs imports its own (as check_job_logic has it import them).
    specs = {"dedup-function": ("jobs.fallback:run",),
             "runtime-sync-function": ("jobs.inventory:sync",),
             "runtime-export-function": ("jobs.billing:export",)}
    startups = [
        DeclaredStartup(s.resource, s.function_name, s.entry_point, s.archive, s.environment,
                        specs.get(s.resource, ()))
        for s in declared_startups(stack.run.resources)
    ]
    results = start_functions(startups, venvs)
    assert list(results.functions) == [None] * len(startups) == [None] * 5
    assert dict(results.specs) == {spec: None for own in specs.values() for spec in own}
    started = {label: {entry["environment"]["K_SERVICE"]
                       for entry in json.loads((runs / f"{label}.json").read_text())}
               for label in ("kit", "team")}
    assert started == {
        "kit": {"retail-proxy", "retail-watchdog"},
        "team": {"retail", "retail-sync", "retail-export"},
    }


def test_the_plan_starts_runtimes_that_run_different_team_modules(tmp_path: Path) -> None:
    """Each job-running function imports the specs of its own job table (a runtime's
    archive carries its own jobs' modules only): the sync runtime is not asked for the
    export runtime's module, which it does not ship. (Without a team lock: its
    environment is the kit's lock's, cached.)"""
    source = team_function(tmp_path / "function")
    for name in ("requirements.in", "requirements.txt"):
        (source / "jobs" / name).unlink()
    checked_run(retail_with_team_jobs(), stack="retail", source_dir=source,
                build_dir=tmp_path / "build")
    # And a runtime's own job that is missing is still named under its key.
    (source / "jobs" / "inventory.py").write_text("def other(context):\n    return {}\n")
    with pytest.raises(ConfigError) as caught:
        checked_run(retail_with_team_jobs(), stack="retail", source_dir=source,
                    build_dir=tmp_path / "build")
    assert caught.value.keys == ("scheduler-dedup:jobs[0].jobLogic",)
    assert "'jobs.inventory:sync': module jobs.inventory has no attribute 'sync'" in str(
        caught.value)

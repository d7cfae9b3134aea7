"""The kit forked the way a team adopts it stays green.

A clean clone of the kit (the repository's files, minus any team file: operator_tools/team_files.py)
is forked as a team does, each change in the team's own places and the README's way: a job
written by `make new-job` that imports a dependency of its own, added to
`function/jobs/requirements.in` and pinned by `make lock` (with the package index, as a
team runs it); stack files in `stacks/`: the kit's examples copied there, dev's jobs
replaced by the team's, and a staging stack in another project, region and time zone.
Then, there, with this checkout's virtualenv (no new one is built): what `make test` runs
but the kit's unit suite (lint, typecheck, workflow lint, policy check, plan, docs), the
team's job tests, and kit tests: a sample on their example stacks, and the proof that no
kit test reads the team's places (KIT_TESTS_IN_THE_FORK): the guard every kit test runs
under (tests/team_places_guard.py) sees the fork's stacks, jobs and lock where they exist.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.lock import TEAM_LOCK, TEAM_REQUIREMENTS, parse_lock
from tests.kit_tree import kit_clone
from tests.stacks import fixture_stack_file

# One fork for the module: its tests share a worker (make unit runs --dist loadfile).

VENV = Path(sys.prefix)  # the virtualenv running the tests
# The team's job validates its body with jsonschema: not a package of the kit's function
# (a dev one, so this virtualenv has it), with dependencies of its own (attrs, referencing,
# rpds-py, ...) that `make lock` must pin too.
JOB_DEPENDENCY = "jsonschema"

STAGING = """\
# The team's staging stack: another project and region, a New York job, no retry
# settings (the kit's defaults recover failed and crashed runs).
config:
  gcp:project: acme-billing-staging
  gcp:region: us-east1
  scheduler-dedup:namePrefix: billing-stg
  scheduler-dedup:deleteProtection: false
  scheduler-dedup:defaultJobLogic: jobs.invoices:run
  scheduler-dedup:jobs:
    - name: month-end-invoices
      schedule: "0 6 1 * *"
      timeZone: America/New_York
      body: {"ledger": "us"}
"""

INVOICES = '''\
"""The team's job: send the month's invoices."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import jsonschema

from dedup import RunContext

log = logging.getLogger(__name__)

BODY_SCHEMA = {"type": "object", "properties": {"ledger": {"type": "string"}}}


def run(context: RunContext) -> dict[str, str]:
    body = json.loads(context.body or b"{}")
    jsonschema.validate(body, BODY_SCHEMA)
    month = (context.schedule_time.replace(day=1) - timedelta(days=1)).strftime("%Y-%m")
    log.info("sending the invoices of %s", month)
    return {"month": month}
'''


def fork(into: Path) -> Path:
    kit_clone(into, mypy_cache=True)
    code, output = make(into, "new-job", "NAME=invoices")
    assert code == 0, output
    (into / "function" / "jobs" / "invoices.py").write_text(INVOICES)
    (into / TEAM_REQUIREMENTS).write_text(f"# jobs/invoices.py\n{JOB_DEPENDENCY}\n")
    code, output = make(into, "lock")
    assert code == 0, output
    stacks = into / "stacks"
    stacks.mkdir()
    for stack in ("dev", "prod"):  # the team's two, and its own staging below
        shutil.copy2(fixture_stack_file(stack), stacks / f"Pulumi.{stack}.yaml")
    (stacks / "Pulumi.staging.yaml").write_text(STAGING)
    dev = stacks / "Pulumi.dev.yaml"
    document: dict[str, Any] = yaml.safe_load(dev.read_text())
    document["config"]["scheduler-dedup:jobs"] = [
        {"name": "send-invoices", "schedule": "0 7 * * 1-5", "timeZone": "Europe/Berlin",
         "jobLogic": "jobs.invoices:run"},
    ]
    dev.write_text(yaml.safe_dump(document, sort_keys=False))
    # A fork is a git repository (what tests/kit_tree.py lists the kit's files of).
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "The team's fork"]):
        subprocess.run(["git", "-c", "user.name=team", "-c", "user.email=team@example.com",
                        *command], cwd=into, check=True, capture_output=True)
    return into


def make(fork_dir: Path, *args: str, timeout: float = 300) -> tuple[int, str]:
    """`make` in the fork with this checkout's virtualenv; its stamp is taken as current
    (-o), so make never rebuilds it for the fork's changed requirements."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STACK")}
    result = subprocess.run(
        ["make", "--no-print-directory", "-o", f"{VENV}/stamp", f"VENV={VENV}", *args],
        cwd=fork_dir, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )
    return result.returncode, result.stdout + result.stderr


@pytest.fixture(scope="module")
def forked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fork(tmp_path_factory.mktemp("fork"))


@pytest.fixture(scope="module")
def checked(forked: Path) -> str:
    """`make test`'s targets but the kit's unit suite (which this test is part of), once:
    the team's code held to the kit's ruff and mypy --strict, every stack checked by the
    policy pack and planned."""
    code, output = make(forked, "lint", "typecheck", "workflow-lint", "policy-check", "plan",
                        "docs", timeout=840)
    assert code == 0, output[-4000:]
    return output


@pytest.mark.timeout(900)
def test_make_plan_covers_every_stack_of_the_fork(checked: str) -> None:
    for stack in ("dev", "prod", "staging"):
        assert f"Offline plan for stack '{stack}'" in checked
    assert "'0 6 1 * *' America/New_York" in checked
    # The staging job has no retry settings: the kit's defaults recover its runs.
    assert "retries=3 backoff=30s..300s" in checked
    assert "billing-stg-month-end-invoices" in checked
    assert "sched-dedup-dev-send-invoices" in checked
    assert "sched-dedup-dev-heartbeat" not in checked


@pytest.mark.timeout(900)
def test_make_policy_check_passes_for_every_stack_of_the_fork(checked: str) -> None:
    assert "stack staging (stacks/Pulumi.staging.yaml): " in checked
    assert "policy check: 3 stack(s)" in checked
    assert "0 mandatory violation(s), 0 stack(s) not checkable" in checked


@pytest.mark.timeout(240)
def test_make_plan_and_policy_check_with_a_stack_check_that_one(forked: Path) -> None:
    code, output = make(forked, "plan", "policy-check", "STACK=staging")
    assert code == 0, output
    assert output.count("Offline plan for stack ") == 1
    assert "Offline plan for stack 'staging'" in output
    assert "policy check: 1 stack(s)" in output


@pytest.mark.timeout(240)
def test_a_typo_in_the_forks_job_logic_fails_plan_and_policy_check(forked: Path) -> None:
    staging = forked / "stacks" / "Pulumi.staging.yaml"
    staging.write_text(STAGING.replace("jobs.invoices:run", "jobs.invoice:run"))
    try:
        for target in ("plan", "policy-check"):
            code, output = make(forked, target, "STACK=staging")
            assert code != 0, output
            assert "scheduler-dedup:defaultJobLogic: 'jobs.invoice:run': no module" in output
            assert "did you mean jobs.invoices:run?" in output
    finally:
        staging.write_text(STAGING)


@pytest.mark.timeout(900)
def test_make_lock_pinned_the_teams_dependency_and_what_it_needs(
    forked: Path, checked: str
) -> None:
    """Pinned with what it needs; the functions started with it (the plan's start-up
    check installs the archive's requirements.txt, the kit's lock and the team's)."""
    pinned = {pin.name for pin in parse_lock((forked / TEAM_LOCK).read_text())}
    assert {"jsonschema", "attrs", "referencing", "rpds-py"} <= pinned
    assert "Offline plan for stack 'dev'" in checked


def pytest_in_fork(fork_dir: Path, *paths: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *paths],
        cwd=fork_dir, env=env, capture_output=True, text=True, timeout=280, check=False,
    )


# The kit's tests run in the fork, its team places there: a sample on the example stacks;
# the guard's own tests (tests/team_places_guard.py, which fails any kit test, in every run
# of the suite, that reads the checkout's team places: here it must see them where they
# exist); and the five that read them before tests/kit_tree.py (issue 41).
KIT_TESTS_IN_THE_FORK = (
    "tests/infra/test_offline.py", "tests/infra/test_stacks.py", "tests/infra/test_plan.py",
    "tests/policies/test_offline_check.py::test_kit_stacks_pass_with_no_mandatory_violation",
    "tests/function/test_requirements_lock.py",
    "tests/test_team_places_guard.py",
    "tests/infra/test_job_logic.py::test_with_every_job_proxied_the_function_runs_the_default",
    "tests/infra/test_new_job.py::test_make_new_job_refuses_a_missing_name",
    "tests/infra/test_lock.py::test_cloud_build_installs_the_kits_lock_and_the_teams",
    "tests/infra/test_lock.py::test_make_plan_refuses_a_stale_team_lock_before_anything_starts",
    "tests/infra/test_startup_parity.py::test_a_job_falling_back_to_the_deleted_default_fails",
)
# A team module no kit test may import (the fork's own, invoices, imports jsonschema).
TRAP = Path("function") / "jobs" / "kit_test_trap.py"


@pytest.mark.timeout(300)
def test_the_teams_and_the_kits_tests_pass_in_the_fork(forked: Path) -> None:
    """The team's job tests (tests/jobs/, collected as make test collects them), and the
    kit's (KIT_TESTS_IN_THE_FORK), whatever the team's stack files, jobs and lock say."""
    team = pytest_in_fork(forked, "tests/jobs")
    assert team.returncode == 0, team.stdout[-3000:] + team.stderr[-2000:]
    assert "2 passed" in team.stdout
    (forked / TRAP).write_text('raise RuntimeError("a kit test imported the team\'s jobs")\n')
    try:
        kit = pytest_in_fork(forked, *KIT_TESTS_IN_THE_FORK)
    finally:
        (forked / TRAP).unlink()
    assert kit.returncode == 0, kit.stdout[-3000:] + kit.stderr[-2000:]
    assert " failed" not in kit.stdout and " error" not in kit.stdout

"""The kit forked the way a team adopts it stays green.

A copy of the repository's files (what `git ls-files` tracks, plus new files not yet
committed) is forked as a team does: a staging stack in another project, region and time
zone, dev's jobs replaced by the team's job, that job's module in function/jobs/ with its
own dependency added to the function's requirements (function/requirements.in). Then `make plan` and
`make policy-check` run there (with this checkout's virtualenv: no new one is built), for
every stack and for one, and the kit's own tests run there on their fixture stacks.
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

from infra.program import REPO_ROOT
from tests.stacks import FIXTURE_STACKS, fixture_stack_file

VENV = Path(sys.prefix)  # the virtualenv running the tests
# Installed in the virtualenv and pinned in constraints.txt and the lock (croniter needs
# it), but not one of the function's own requirements: the team's job adds it, offline.
JOB_DEPENDENCY = "python-dateutil==4.0.0"

STAGING = """\
# The team's staging stack: another project and region, a New York job, no retry
# settings (the kit's defaults recover failed and crashed runs).
config:
  gcp:project: acme-billing-staging
  gcp:region: us-east1
  scheduler-dedup:namePrefix: billing-stg
  scheduler-dedup:deleteProtection: false
  scheduler-dedup:defaultJobLogic: jobs.invoices:send
  scheduler-dedup:jobs:
    - name: month-end-invoices
      schedule: "0 6 1 * *"
      timeZone: America/New_York
      body: {"ledger": "us"}
"""

INVOICES = '''\
"""The team's job: send the month's invoices."""

from __future__ import annotations

import logging

from dateutil.relativedelta import relativedelta

from dedup import RunContext

log = logging.getLogger(__name__)


def send(context: RunContext) -> dict[str, str]:
    month = (context.schedule_time - relativedelta(months=1)).strftime("%Y-%m")
    log.info("sending the invoices of %s", month)
    return {"month": month}
'''


def repository_files() -> list[str]:
    """Tracked files, and new ones not ignored, that exist in the working tree."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True,
    ).stdout.split("\0")
    return sorted({name for name in listed if name and (REPO_ROOT / name).is_file()})


def fork(into: Path) -> Path:
    for name in repository_files():
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, target)
    # The fork starts from the kit's example stacks (the fixtures: this checkout's own
    # stack files are its team's, whatever they hold).
    for stack_file in into.glob("Pulumi.*.yaml"):
        stack_file.unlink()
    for stack in FIXTURE_STACKS:
        shutil.copy2(fixture_stack_file(stack), into / f"Pulumi.{stack}.yaml")
    (into / "Pulumi.staging.yaml").write_text(STAGING)
    dev = into / "Pulumi.dev.yaml"
    document: dict[str, Any] = yaml.safe_load(dev.read_text())
    document["config"]["scheduler-dedup:jobs"] = [
        {"name": "send-invoices", "schedule": "0 7 * * 1-5", "timeZone": "Europe/Berlin",
         "jobLogic": "jobs.invoices:send"},
    ]
    dev.write_text(yaml.safe_dump(document, sort_keys=False))
    (into / "function" / "jobs" / "invoices.py").write_text(INVOICES)
    requirements = into / "function" / "requirements.in"
    requirements.write_text(requirements.read_text() + f"# jobs/invoices.py\n{JOB_DEPENDENCY}\n")
    return into


def make(fork_dir: Path, *args: str) -> tuple[int, str]:
    """`make` in the fork with this checkout's virtualenv; its stamp is taken as current
    (-o), so make never rebuilds it for the fork's changed requirements."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STACK")}
    result = subprocess.run(
        ["make", "--no-print-directory", "-o", f"{VENV}/stamp", f"VENV={VENV}", *args],
        cwd=fork_dir, env=env, capture_output=True, text=True, timeout=180, check=False,
    )
    return result.returncode, result.stdout + result.stderr


@pytest.fixture(scope="module")
def forked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fork(tmp_path_factory.mktemp("fork"))


@pytest.mark.timeout(240)
def test_make_plan_covers_every_stack_of_the_fork(forked: Path) -> None:
    code, output = make(forked, "plan")
    assert code == 0, output
    for stack in ("dev", "prod", "staging"):
        assert f"Offline plan for stack '{stack}'" in output
    assert "'0 6 1 * *' America/New_York" in output
    # The staging job has no retry settings: the kit's defaults recover its runs.
    assert "retries=3 backoff=30s..300s" in output
    assert "billing-stg-month-end-invoices" in output
    assert "sched-dedup-dev-send-invoices" in output
    assert "sched-dedup-dev-heartbeat" not in output


@pytest.mark.timeout(240)
def test_make_plan_with_a_stack_plans_that_one(forked: Path) -> None:
    code, output = make(forked, "plan", "STACK=staging")
    assert code == 0, output
    assert output.count("Offline plan for stack ") == 1
    assert "Offline plan for stack 'staging'" in output


@pytest.mark.timeout(240)
def test_make_policy_check_passes_for_every_stack_of_the_fork(forked: Path) -> None:
    code, output = make(forked, "policy-check")
    assert code == 0, output
    assert "stack staging (Pulumi.staging.yaml): " in output
    assert "policy check: 3 stack(s)" in output
    assert "0 mandatory violation(s), 0 stack(s) not checkable" in output
    code, output = make(forked, "policy-check", "STACK=staging")
    assert code == 0, output
    assert "policy check: 1 stack(s)" in output


@pytest.mark.timeout(240)
def test_a_typo_in_the_forks_job_logic_fails_plan_and_policy_check(forked: Path) -> None:
    staging = forked / "Pulumi.staging.yaml"
    staging.write_text(STAGING.replace("jobs.invoices:send", "jobs.invoice:send"))
    try:
        for target in ("plan", "policy-check"):
            code, output = make(forked, target, "STACK=staging")
            assert code != 0, output
            assert "scheduler-dedup:defaultJobLogic: 'jobs.invoice:send': no module" in output
            assert "did you mean jobs.invoices:send?" in output
    finally:
        staging.write_text(STAGING)


@pytest.mark.timeout(240)
def test_the_kits_tests_pass_in_the_fork(forked: Path) -> None:
    """They run on their fixture stacks, whatever the team's stack files say."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/infra/test_offline.py", "tests/infra/test_stacks.py", "tests/infra/test_plan.py",
         "tests/policies/test_offline_check.py::test_kit_stacks_pass_with_no_mandatory_violation",
         # The team's dependency is in the lock Cloud Build installs (here: already, through
         # croniter; a new one needs `make lock`, with the package index).
         "tests/function/test_requirements_lock.py"],
        cwd=forked, env=env, capture_output=True, text=True, timeout=200, check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]

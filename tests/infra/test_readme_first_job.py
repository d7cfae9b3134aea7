"""README's "Add your first job in five steps", followed literally in a copy of the
repository: `make new-job`, the README's job as written, its stack file as written, then
`make plan` and `make policy-check` for that stack, the job's test, and the checks
`make test` holds the team's code to (ruff, mypy --strict)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.infra.team_code import (
    README,
    first_job_block,
    kit_checks,
    make_in,
    minimal_checkout,
    pytest_in,
)
from tests.kit_tree import kit_clone


def stack_name() -> str:
    """The stack file the README's example names (`e.g. stacks/Pulumi.<name>.yaml`)."""
    _, text = first_job_block("yaml")
    found = re.search(r"e\.g\. stacks/Pulumi\.([a-z0-9-]+)\.yaml", text.splitlines()[0])
    assert found is not None, "the stack block's first line names an example stack file"
    return found.group(1)


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mypy cache for this module's checks of the README's job (kit_checks)."""
    return tmp_path_factory.mktemp("mypy-cache")


@pytest.fixture(scope="module")
def readme_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Steps 1 and 3 done in a clone of the kit (no team's files), as the README says."""
    checkout = kit_clone(tmp_path_factory.mktemp("readme"))
    job_path, job_text = first_job_block("python")
    module = job_path.removeprefix("function/").removesuffix(".py").replace("/", ".")
    name = module.removeprefix("jobs.")
    code, output = make_in(checkout, "new-job", f"NAME={name}")
    assert code == 0, output
    assert f"wrote {job_path}" in output
    (checkout / job_path).write_text(job_text, encoding="utf-8")
    _, stack_text = first_job_block("yaml")
    (checkout / "stacks").mkdir(exist_ok=True)
    (checkout / "stacks" / f"Pulumi.{stack_name()}.yaml").write_text(stack_text, encoding="utf-8")
    return checkout


def test_the_readme_shows_one_job_and_the_stack_that_runs_it() -> None:
    job_path, job_text = first_job_block("python")
    assert job_path == "function/jobs/billing.py"
    assert "make new-job NAME=billing" in README.read_text(encoding="utf-8")
    config = yaml.safe_load(first_job_block("yaml")[1])["config"]
    (job,) = config["scheduler-dedup:jobs"]
    assert job["jobLogic"] == "jobs.billing:run"
    assert "\ndef run(context: RunContext)" in job_text
    # Delete protection is on by default: the README's stack names who is alerted.
    assert "scheduler-dedup:deleteProtection" not in config
    assert config["scheduler-dedup:alerts"]["emails"]


def test_the_readme_job_passes_the_kits_checks_as_written(tmp_path: Path,
                                                          mypy_cache: Path) -> None:
    checkout = minimal_checkout(tmp_path)
    job_path, job_text = first_job_block("python")
    # The package make new-job creates (step 1), then the job as the README writes it.
    (checkout / job_path).parent.mkdir(parents=True, exist_ok=True)
    (checkout / job_path).with_name("__init__.py").write_text("", encoding="utf-8")
    (checkout / job_path).write_text(job_text, encoding="utf-8")
    kit_checks(checkout, job_path, mypy_cache=mypy_cache)


@pytest.mark.timeout(300)
def test_the_readme_stack_passes_make_plan_and_make_policy_check(readme_checkout: Path) -> None:
    stack = stack_name()
    code, output = make_in(readme_checkout, "plan", f"STACK={stack}")
    assert code == 0, output
    assert f"Offline plan for stack '{stack}'" in output
    assert "scheduler-dedup-send-invoices" in output
    code, output = make_in(readme_checkout, "policy-check", f"STACK={stack}")
    assert code == 0, output
    assert "policy check: 1 stack(s)" in output
    assert "0 mandatory violation(s), 0 stack(s) not checkable" in output


@pytest.mark.timeout(300)
def test_the_readme_jobs_test_runs_and_passes_the_kits_checks(readme_checkout: Path,
                                                              mypy_cache: Path) -> None:
    result = pytest_in(readme_checkout, "tests/jobs")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "2 passed" in result.stdout
    kit_checks(readme_checkout, "function/jobs/billing.py", "tests/jobs/test_billing.py",
               mypy_cache=mypy_cache)


@pytest.mark.timeout(300)
def test_the_readme_stack_without_its_alerts_fails_at_make_plan(readme_checkout: Path) -> None:
    """Fail early: what the policy check would block, the plan refuses with key and fix."""
    _, stack_text = first_job_block("yaml")
    lines = stack_text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "scheduler-dedup:alerts:" in line)
    (readme_checkout / "stacks" / "Pulumi.no-alerts.yaml").write_text(
        "".join(lines[:at] + lines[at + 2 :]), encoding="utf-8"
    )
    code, output = make_in(readme_checkout, "plan", "STACK=no-alerts")
    assert code == 2, output
    assert "scheduler-dedup:alerts.emails: is empty while deleteProtection is true" in output
    assert "Fix: add `scheduler-dedup:alerts: {emails: [oncall@example.com]}`" in output

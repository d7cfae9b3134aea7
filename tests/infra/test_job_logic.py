"""Job logic resolved offline: `make plan` and `make policy-check` import every job's
`module:function` in the function's environment (its declared archive, environment and a
virtualenv of function/requirements.txt alone: tests/infra/test_startup_parity.py) and fail
naming the key, what is missing and the closest match; stack files that are not valid YAML
are one clear line."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config import ConfigError, load_config
from operator_tools.job_logic import check_job_logic, job_logic_uses, job_modules
from operator_tools.offline import checked_run, load_stack_config, run_offline
from tests.kit_tree import kit_function
from tests.stacks import FIXTURE_STACKS, FIXTURE_STACKS_DIR, fixture_stack_file

JOBS = "scheduler-dedup:jobs"


def dev_with(change: Callable[[dict[str, Any]], None], tmp_path: Path) -> Path:
    """The fixture dev stack with `change` made to its config, as Pulumi.broken.yaml."""
    document = yaml.safe_load(fixture_stack_file("dev").read_text(encoding="utf-8"))
    change(document["config"])
    path = tmp_path / "Pulumi.broken.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def job_logic(index: int, spec: str) -> Callable[[dict[str, Any]], None]:
    def change(config: dict[str, Any]) -> None:
        config[JOBS][index]["jobLogic"] = spec

    return change


def default_job_logic(spec: str) -> Callable[[dict[str, Any]], None]:
    def change(config: dict[str, Any]) -> None:
        config["scheduler-dedup:defaultJobLogic"] = spec

    return change


# Each entry point as `make plan` / `make policy-check` runs it: a fresh interpreter in
# the repository root (the same venv's python), one stack file. The repository is a clone
# of the kit's files: a fork's own jobs and lock are not the kit's tests' business.
ENTRY_POINTS: dict[str, Callable[[Path], list[str]]] = {
    "plan": lambda path: ["-m", "operator_tools", "plan", str(path)],
    "policy-check": lambda path: [
        "-m", "operator_tools", "policy-check", "--stack-file", str(path)],
}


def run_entry_point(name: str, path: Path, checkout: Path) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, *ENTRY_POINTS[name](path)],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    return result.returncode, result.stdout + result.stderr


MISTAKES = {
    # (change, the key named, what is missing, the suggestion)
    "missing-module": (
        job_logic(2, "example_jobs.exampel:run"),
        f"{JOBS}[2].jobLogic",
        "'example_jobs.exampel:run': no module 'example_jobs.exampel' in function/",
        "did you mean example_jobs.example:run?",
    ),
    "missing-attribute": (
        job_logic(2, "example_jobs.example:runn"),
        f"{JOBS}[2].jobLogic",
        "'example_jobs.example:runn': module example_jobs.example has no attribute 'runn'",
        "did you mean example_jobs.example:run?",
    ),
    "missing-default": (
        default_job_logic("example_jobs.flaky:rn"),
        "scheduler-dedup:defaultJobLogic",
        "'example_jobs.flaky:rn': module example_jobs.flaky has no attribute 'rn'",
        "did you mean example_jobs.flaky:run?",
    ),
}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("entry_point", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_a_job_logic_typo_fails_plan_and_policy_check_naming_the_key(
    entry_point: str, mistake: str, tmp_path: Path, kit_checkout: Path
) -> None:
    change, key, missing, suggestion = MISTAKES[mistake]
    code, output = run_entry_point(entry_point, dev_with(change, tmp_path), kit_checkout)
    assert code == 2, output
    assert f"{key}: {missing}" in output
    assert suggestion in output
    assert "Traceback" not in output


@pytest.mark.parametrize("stack", FIXTURE_STACKS)
def test_the_fixture_stacks_job_logic_resolves(stack: str, kit_function_dir: Path,
                                               tmp_path: Path) -> None:
    values = load_stack_config(stack, FIXTURE_STACKS_DIR)
    config = load_config(values)
    run = run_offline(values, source_dir=kit_function_dir, build_dir=tmp_path)
    check_job_logic(values, config, run, kit_function_dir)  # raises on any problem
    assert job_logic_uses(values, config)


def test_a_job_uses_its_own_key_and_the_rest_the_default() -> None:
    values = load_stack_config("dev", FIXTURE_STACKS_DIR)
    uses = job_logic_uses(values, load_config(values))
    # dev: nightly-report names its own jobLogic; heartbeat and hourly-sync take the default.
    assert [(u.key, u.spec) for u in uses] == [
        (f"{JOBS}[2].jobLogic", "example_jobs.example:run"),
        ("scheduler-dedup:defaultJobLogic", "example_jobs.example:run"),
    ]


def test_with_every_job_proxied_the_function_runs_the_default(
    kit_function_dir: Path, tmp_path: Path
) -> None:
    """No job is routed to the dedup function, so it imports defaultJobLogic to run every
    job (function/dedup/job_logic.py scheduled_jobs): a missing one fails its start-up."""
    values = load_stack_config("prod", FIXTURE_STACKS_DIR)
    values["scheduler-dedup:defaultJobLogic"] = "jobs.nothing:here"
    values[JOBS] = [job for job in values[JOBS] if "proxy" in job]
    config = load_config(values)
    assert [(u.key, u.spec) for u in job_logic_uses(values, config)] == [
        ("scheduler-dedup:defaultJobLogic", "jobs.nothing:here")
    ]
    with pytest.raises(ConfigError) as caught:
        run = run_offline(values, source_dir=kit_function_dir, build_dir=tmp_path)
        check_job_logic(values, config, run, kit_function_dir)
    assert caught.value.keys == ("scheduler-dedup:defaultJobLogic",)
    # The kit's function/ has no jobs/ (the team's, written by its first make new-job).
    assert "'jobs.nothing:here': no module 'jobs' in function/" in str(caught.value)
    assert "function/jobs/ does not exist yet: `make new-job NAME=nothing` writes " \
        "jobs.nothing" in str(caught.value)


def test_a_stack_naming_the_examples_old_module_is_pointed_at_its_new_one(
    kit_function_dir: Path, tmp_path: Path
) -> None:
    """1.0.0 shipped the example job as jobs.example: a stack copied from then is told
    where it went, not to write a job of that name."""
    values = load_stack_config("prod", FIXTURE_STACKS_DIR)
    values["scheduler-dedup:defaultJobLogic"] = "jobs.example:run"
    values[JOBS] = [job for job in values[JOBS] if "proxy" in job]
    with pytest.raises(ConfigError) as caught:
        run = run_offline(values, source_dir=kit_function_dir, build_dir=tmp_path)
        check_job_logic(values, load_config(values), run, kit_function_dir)
    assert "did you mean example_jobs.example:run?" in str(caught.value)
    assert "make new-job" not in str(caught.value)


def function_dir(tmp_path: Path, modules: dict[str, str]) -> Path:
    """A copy of function/ with a team's jobs/ of only `jobs/<name>.py` of the given source each."""
    source = kit_function(tmp_path / "function")
    (source / "jobs").mkdir()
    (source / "jobs" / "__init__.py").write_text("")
    for name, source_text in modules.items():
        (source / "jobs" / f"{name}.py").write_text(source_text)
    return source


def stack_naming(spec: str) -> dict[str, Any]:
    return {
        "gcp:project": "acme-scheduler-test",
        "gcp:region": "europe-west1",
        # Not delete-protected: a protected stack needs alerts.emails to deploy (and plan).
        "scheduler-dedup:deleteProtection": False,
        JOBS: [{"name": "send", "schedule": "0 3 * * *", "jobLogic": spec}],
    }


def check(spec: str, source_dir: Path) -> ConfigError:
    values = stack_naming(spec)
    with pytest.raises(ConfigError) as caught:
        checked_run(values, source_dir=source_dir, build_dir=source_dir.parent / "build")
    return caught.value


def test_a_job_modules_missing_dependency_is_named(tmp_path: Path) -> None:
    source = function_dir(tmp_path, {"invoices": "import no_such_package_xyz\ndef send(c): ...\n"})
    error = check("jobs.invoices:send", source)
    assert error.keys == (f"{JOBS}[0].jobLogic",)
    assert "needs 'no_such_package_xyz', which function/requirements.txt does not install" in (
        str(error)
    )
    assert ("add the package that provides it to function/jobs/requirements.in and run "
            "`make lock`") in str(error)


def test_a_module_that_fails_to_import_is_named(tmp_path: Path) -> None:
    source = function_dir(tmp_path, {"invoices": "raise KeyError('API_KEY')\n"})
    assert "importing jobs.invoices failed (KeyError: 'API_KEY')" in str(
        check("jobs.invoices:send", source)
    )


def test_a_non_callable_is_not_job_logic(tmp_path: Path) -> None:
    source = function_dir(tmp_path, {"invoices": "send = 3\ndef send_all(c): ...\n"})
    message = str(check("jobs.invoices:send", source))
    assert "module jobs.invoices has a non-callable 'send'" in message
    assert "did you mean jobs.invoices:send_all?" in message


def test_the_function_environment_is_function_dir_not_the_repository(tmp_path: Path) -> None:
    """The repository root (infra, tests, ...) is not importable where the function runs."""
    source = function_dir(tmp_path, {"ok": "def run(c): ...\n"})
    assert "no module 'infra'" in str(check("infra.config:load_config", source))
    assert [m for m in job_modules(source) if m.startswith("jobs.")] == ["jobs.ok"]  # + examples
    (source / "jobs" / "billing").mkdir()
    (source / "jobs" / "billing" / "__init__.py").write_text("")
    (source / "jobs" / "billing" / "invoices.py").write_text("def send(c): ...\n")
    assert [m for m in job_modules(source) if m.startswith("jobs.")] == [
        "jobs.billing", "jobs.billing.invoices", "jobs.ok"]
    assert "did you mean jobs.billing.invoices:send?" in str(
        check("jobs.billing.invoice:send", source)
    )
    values = stack_naming("jobs.ok:run")
    checked_run(values, source_dir=source, build_dir=tmp_path / "build")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("entry_point", sorted(ENTRY_POINTS))
def test_a_yaml_syntax_error_is_one_line_with_file_line_and_fix(
    entry_point: str, tmp_path: Path, kit_checkout: Path
) -> None:
    path = tmp_path / "Pulumi.broken.yaml"
    path.write_text("config:\n  gcp:project: acme-x\n\tgcp:region: europe-west1\n")
    code, output = run_entry_point(entry_point, path, kit_checkout)
    assert code == 2, output
    assert f"{path}:3:1: not valid YAML: " in output
    assert "Fix: indent with spaces, not tabs" in output
    assert "Traceback" not in output


@pytest.mark.timeout(240)
@pytest.mark.parametrize("entry_point", sorted(ENTRY_POINTS))
def test_a_key_without_namespace_fails_plan_and_policy_check(
    entry_point: str, tmp_path: Path, kit_checkout: Path
) -> None:
    path = dev_with(lambda config: config.update({"maxInstances": 3}), tmp_path)
    code, output = run_entry_point(entry_point, path, kit_checkout)
    assert code == 2, output
    assert "maxInstances: has no namespace" in output
    assert "did you mean scheduler-dedup:maxInstances?" in output

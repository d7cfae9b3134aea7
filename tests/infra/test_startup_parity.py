"""What `make plan` accepts, starts: every declared function is started offline from its
declared archive, with its declared environment, in a virtualenv of function/requirements.txt
alone (operator_tools/job_logic.py, function_startup.py). A fork without the kit's example
jobs that names its own job logic everywhere plans; a job falling back to the deleted
default, or importing a package only the kit's dev virtualenv has, fails naming the key or
the function, the module and the fix."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from infra.config import ConfigError, load_config
from infra.program import DEFAULT_SOURCE_DIR
from operator_tools.function_startup import REQUIREMENTS_FILE, declared_startups
from operator_tools.function_venv import function_python
from operator_tools.offline import checked_run, load_stack_config, run_offline
from tests.kit_tree import kit_function
from tests.stacks import FIXTURE_STACKS_DIR

JOBS = "scheduler-dedup:jobs"
BILLING = "from dedup import RunContext\n\n\ndef run(context: RunContext) -> dict:\n    return {}\n"
FIX = "add the package that provides it to function/jobs/requirements.in and run `make lock`"


def forked_function(tmp_path: Path, modules: dict[str, str]) -> Path:
    """function/ as a fork might have it: the kit's example job deleted, the team's
    modules added in jobs/."""
    source = kit_function(tmp_path / "function")
    (source / "example_jobs" / "example.py").unlink()
    (source / "jobs").mkdir()
    (source / "jobs" / "__init__.py").write_text("")
    for name, text in modules.items():
        (source / "jobs" / f"{name}.py").write_text(text)
    return source


def prod_naming(spec: str | None) -> dict[str, Any]:
    """The prod fixture (dedup function, proxy, watchdog), every job not proxied naming
    `spec` (None: the last falls back to defaultJobLogic, left at example_jobs.example:run)."""
    values = load_stack_config("prod", FIXTURE_STACKS_DIR)
    jobs = [dict(job) for job in values[JOBS]]
    own = [job for job in jobs if "proxy" not in job]
    for job in own:
        job["jobLogic"] = spec or "jobs.billing:run"
    if spec is None:
        del own[-1]["jobLogic"]
    values[JOBS] = jobs
    values.pop("scheduler-dedup:defaultJobLogic", None)
    return values


def check(values: dict[str, Any], source: Path) -> None:
    checked_run(values, source_dir=source, build_dir=source.parent / "build")


def failure(values: dict[str, Any], source: Path) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        check(values, source)
    return caught.value


def test_a_fork_without_the_example_that_names_its_own_job_logic_plans(tmp_path: Path) -> None:
    source = forked_function(tmp_path, {"billing": BILLING})
    values = prod_naming("jobs.billing:run")
    assert load_config(values).dedup.default_job_logic == "example_jobs.example:run"  # deleted
    check(values, source)  # every function starts: the unused default is never imported


def test_a_start_up_that_imports_the_deleted_default_fails(tmp_path: Path) -> None:
    """The function as it was (DEDUP_JOB imported whatever the routes): every job names its
    own logic, so only starting the function shows that it does not start."""
    source = forked_function(tmp_path, {"billing": BILLING})
    app = source / "dedup" / "entry" / "app.py"
    app.write_text(app.read_text().replace(
        "scheduled_jobs(settings.default_job, settings.job_routes)",
        "JobRegistry(settings.default_job, settings.job_routes)",
    ).replace("import scheduled_jobs", "import JobRegistry"))
    error = failure(prod_naming("jobs.billing:run"), source)
    assert error.keys == ("function scheduler-dedup (dedup-function, handle_scheduled_job)",)
    assert "does not start: importing 'example_jobs.example' fails (SettingsError: " \
        "DEDUP_JOB='example_jobs.example:run': cannot import 'example_jobs.example'" in str(error)
    assert ("'example_jobs.example' is part of function/ itself: restore it, or stop "
            "importing it") in str(error)


def test_a_job_falling_back_to_the_deleted_default_fails(tmp_path: Path) -> None:
    source = forked_function(tmp_path, {"billing": BILLING})
    error = failure(prod_naming(None), source)
    assert error.keys == ("scheduler-dedup:defaultJobLogic",)
    assert "'example_jobs.example:run': no module 'example_jobs.example' in function/" in str(error)
    assert ("name a module of function/jobs/ (example_jobs.flaky, example_jobs.retail, "
            "jobs.billing)") in str(error)


def test_a_job_importing_a_dev_only_package_fails(tmp_path: Path) -> None:
    assert importlib.util.find_spec("yaml") is not None  # the kit's dev virtualenv has it
    source = forked_function(tmp_path, {"billing": "import yaml\n" + BILLING})
    error = failure(prod_naming("jobs.billing:run"), source)
    assert error.keys == tuple(
        f"{JOBS}[{i}].jobLogic" for i, job in enumerate(prod_naming(None)[JOBS])
        if "proxy" not in job
    )
    message = str(error)
    assert "'jobs.billing:run': importing jobs.billing needs 'yaml', which " \
        "function/requirements.txt does not install" in message
    assert f"{FIX} (the kit's dev virtualenv has it; the function does not)" in message


def test_a_dev_only_import_in_one_functions_code_fails_that_function(tmp_path: Path) -> None:
    """Only the watchdog imports dedup/watchdog/ (main.py, at its start-up): the dedup
    function and the proxy start; the watchdog is named with the module and the fix."""
    source = forked_function(tmp_path, {"billing": BILLING})
    watchdog = source / "dedup" / "watchdog" / "tick.py"
    future = "from __future__ import annotations\n"
    watchdog.write_text(watchdog.read_text().replace(future, future + "\nimport yaml\n", 1))
    error = failure(prod_naming("jobs.billing:run"), source)
    assert error.keys == ("function scheduler-dedup-watchdog (watchdog-function, "
                          "watch_scheduled_runs)",)
    assert "does not start: importing 'yaml' fails (ModuleNotFoundError: No module named " \
        "'yaml')" in str(error)
    # The team's lock is not installed there: only the kit's lock can bring it.
    assert FIX not in str(error)
    assert ("add the package that provides it to the kit's function/requirements.in and run "
            "`make lock-kit` (kit maintainers): this function runs no job logic and installs "
            "the kit's lock alone") in str(error)


def test_the_watchdog_cannot_import_job_code(tmp_path: Path) -> None:
    """The watchdog's archive is the kit's code and lock alone (infra/source.py): a kit
    change that made its start-up import the team's jobs (or the kit's example jobs) fails
    the plan, naming the function and why, not a deploy."""
    source = forked_function(tmp_path, {"billing": BILLING})
    watchdog = source / "dedup" / "watchdog" / "tick.py"
    future = "from __future__ import annotations\n"
    watchdog.write_text(watchdog.read_text().replace(
        future, future + "\nimport jobs.billing\n", 1))
    error = failure(prod_naming("jobs.billing:run"), source)
    assert error.keys == ("function scheduler-dedup-watchdog (watchdog-function, "
                          "watch_scheduled_runs)",)
    assert ("'jobs' is in function/ but not in this function's archive, which holds only "
            "the kit's code (main.py, dedup/) and lock") in str(error)


def test_a_function_starts_with_its_declared_environment_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job reading a variable the plan's shell has but the function does not declare."""
    monkeypatch.setenv("BILLING_API_KEY", "from the developer's shell")
    source = forked_function(tmp_path, {
        "billing": "import os\nAPI_KEY = os.environ['BILLING_API_KEY']\n" + BILLING,
    })
    error = failure(prod_naming("jobs.billing:run"), source)
    assert "importing jobs.billing failed (KeyError: 'BILLING_API_KEY')" in str(error)


def test_each_function_starts_from_its_declared_archive_and_environment() -> None:
    values = load_stack_config("prod", FIXTURE_STACKS_DIR)
    run = run_offline(values)
    startups = {s.resource: s for s in declared_startups(run.resources)}
    assert set(startups) == {"dedup-function", "proxy-function", "watchdog-function"}
    for startup in startups.values():
        function = run.by_name(startup.resource)
        declared = function.props["serviceConfig"]["environmentVariables"]
        assert {k: startup.environment[k] for k in declared} == declared
        assert startup.environment["FUNCTION_TARGET"] == function.props["buildConfig"][
            "entryPoint"]
        object_name = function.props["buildConfig"]["source"]["storageSource"]["object"]
        assert startup.archive.name == object_name.rsplit("/", 1)[-1]
    # The proxy's token secret is a Secret Manager version: a placeholder of its shape.
    assert len(startups["proxy-function"].environment["DEDUP_TOKEN_SECRET"]) == 64


def test_the_function_environment_holds_the_lock_alone() -> None:
    python = function_python(DEFAULT_SOURCE_DIR / REQUIREMENTS_FILE)
    site = next((python.parent.parent / "lib").glob("python3.*/site-packages"))
    installed = {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}
    locked = {
        line.split("==")[0].lower().replace("-", "_")
        for line in (DEFAULT_SOURCE_DIR / REQUIREMENTS_FILE).read_text().splitlines()
        if "==" in line and not line.startswith((" ", "#"))
    }
    # The lock's packages, and pip (the installer) beside them: no pulumi, pytest or yaml.
    assert installed - {"pip", "setuptools"} == locked

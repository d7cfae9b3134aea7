"""The files generated from the config models (operator_tools/schema.py) are current, and the stack
files' JSON Schema accepts the example stacks and rejects broken ones."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from infra import KIT_ROOT as REPO_ROOT
from infra.config import DEFAULTS, ConfigError, load_config
from operator_tools import schema
from tests.stacks import FIXTURE_STACKS, fixture_stack_file

SCHEMA_COMMENT = "# yaml-language-server: $schema="
Stack = dict[str, Any]


def validator() -> Draft202012Validator:
    return Draft202012Validator(json.loads((REPO_ROOT / schema.SCHEMA_PATH).read_text()))


def stack_file(stack: str = "prod") -> Stack:
    data: Stack = yaml.safe_load(fixture_stack_file(stack).read_text())
    return data


def test_generated_files_are_current() -> None:
    stale = sorted(str(path.relative_to(REPO_ROOT)) for path in schema.stale())
    assert stale == [], f"{', '.join(stale)} drifted from infra/config/: run `make schema`"


def test_the_schema_is_a_valid_json_schema() -> None:
    Draft202012Validator.check_schema(json.loads((REPO_ROOT / schema.SCHEMA_PATH).read_text()))


@pytest.mark.parametrize("stack", FIXTURE_STACKS)
def test_example_stack_files_name_and_pass_the_schema(stack: str) -> None:
    path = fixture_stack_file(stack)
    text = path.read_text()
    first = text.splitlines()[0]
    assert first.startswith(SCHEMA_COMMENT)
    # The editor resolves the schema's path relative to the stack file.
    named = (path.parent / first.removeprefix(SCHEMA_COMMENT)).resolve()
    assert named == (REPO_ROOT / schema.SCHEMA_PATH).resolve()
    errors = [e.message for e in validator().iter_errors(yaml.safe_load(text))]
    assert errors == []


def kit(key: str, value: Any) -> Callable[[Stack], None]:
    def change(stack: Stack) -> None:
        stack["config"][f"scheduler-dedup:{key}"] = value

    return change


def job(key: str, value: Any) -> Callable[[Stack], None]:
    def change(stack: Stack) -> None:
        stack["config"]["scheduler-dedup:jobs"][0][key] = value

    return change


def drop(key: str) -> Callable[[Stack], None]:
    def change(stack: Stack) -> None:
        del stack["config"][key]

    return change


BROKEN: dict[str, Callable[[Stack], None]] = {
    "unknown-kit-key": kit("leaseSecond", 600),
    "lease-not-a-number": kit("leaseSeconds", "ten minutes"),
    "timeout-beyond-limit": kit("functionTimeoutSeconds", 7200),
    "delete-protection-not-boolean": kit("deleteProtection", "yes"),
    "bad-missing-schedule-time": kit("missingScheduleTime", "skip"),
    "bad-name-prefix": kit("namePrefix", "Scheduler_Dedup"),
    "no-jobs": kit("jobs", []),
    "jobs-missing": drop("scheduler-dedup:jobs"),
    "missing-project": drop("gcp:project"),
    "zone-not-region": lambda stack: stack["config"].update({"gcp:region": "europe-west1-b"}),
    "unknown-job-key": job("attemptDeadline", 300),
    "schedule-not-a-string": job("schedule", 5),
    "deadline-too-long": job("attemptDeadlineSeconds", 1801),
    "retry-count-six": job("retry", {"retryCount": 6}),
    "unknown-retry-key": job("retry", {"retries": 3}),
    "proxy-unknown-target": job("proxy", {"target": "cloud_function", "resource": "x"}),
    "proxy-unknown-key": job("proxy", {"target": "workflow", "resource": "x", "token": "t"}),
    "no-config": lambda stack: stack.pop("config"),
}


@pytest.mark.parametrize("change", BROKEN.values(), ids=BROKEN.keys())
def test_a_broken_stack_file_fails_the_schema_and_the_config(
    change: Callable[[Stack], None],
) -> None:
    broken = copy.deepcopy(stack_file())
    change(broken)
    assert not validator().is_valid(broken)
    with pytest.raises(ConfigError):
        load_config(broken.get("config", {}))


def test_provider_namespaces_and_stack_file_keys_pass() -> None:
    stack = copy.deepcopy(stack_file("dev"))
    stack["config"]["gcp:zone"] = "europe-west1-b"
    stack["config"]["pulumi:tags"] = {"team": "billing"}
    stack["encryptionsalt"] = "v1:abc"
    assert validator().is_valid(stack)
    load_config(stack["config"])


@pytest.mark.parametrize("key", ["maxInstances", "scheduler_dedup:maxInstances", "other:x"])
def test_keys_in_no_known_namespace_fail_the_schema_and_the_config(key: str) -> None:
    stack = copy.deepcopy(stack_file("dev"))
    stack["config"][key] = 3
    assert not validator().is_valid(stack)
    with pytest.raises(ConfigError) as caught:
        load_config(stack["config"])
    assert caught.value.keys == (key,)


def test_every_setting_has_a_one_line_description() -> None:
    for key, info in schema.documented_keys():
        assert info.description, key
        assert "\n" not in info.description, key


def test_pulumi_yaml_declares_the_defaults_of_the_models() -> None:
    declared = yaml.safe_load((REPO_ROOT / "Pulumi.yaml").read_text())["config"]
    assert {key: spec["default"] for key, spec in declared.items()} == dict(DEFAULTS)


def drifted_copy(tmp_path: Path) -> Path:
    """A copy of the generated files' homes, each generated part stale or missing."""
    (tmp_path / "docs").mkdir()
    for name in ("Pulumi.yaml", str(schema.REFERENCE_PATH)):
        shutil.copy(REPO_ROOT / name, tmp_path / name)
    pulumi_yaml = tmp_path / "Pulumi.yaml"
    pulumi_yaml.write_text(pulumi_yaml.read_text().replace("default: 604800", "default: 60"))
    readme = tmp_path / schema.REFERENCE_PATH
    readme.write_text(readme.read_text().replace("| `leaseSeconds` |", "| `leaseSecs` |"))
    return tmp_path


def test_make_schema_rewrites_what_drifted(tmp_path: Path) -> None:
    root = drifted_copy(tmp_path)
    generated = ("Pulumi.yaml", str(schema.REFERENCE_PATH), str(schema.SCHEMA_PATH),
                 str(schema.PACKAGE_SCHEMA_PATH), str(schema.PROVIDER_REQUIREMENTS_PATH))
    assert set(schema.stale(root)) == {root / name for name in generated}
    assert schema.main(["--check"], root=root) == 1
    assert schema.main([], root=root) == 0
    assert schema.stale(root) == {}
    for name in generated:
        assert (root / name).read_text() == (REPO_ROOT / name).read_text(), name
    assert schema.main(["--check"], root=root) == 0


def test_the_rewrite_keeps_everything_outside_the_markers(tmp_path: Path) -> None:
    root = drifted_copy(tmp_path)
    readme = root / schema.REFERENCE_PATH
    readme.write_text(readme.read_text().replace("## Stack configuration",
                                                 "## Stack configuration (edited)"))
    schema.main([], root=root)
    assert "## Stack configuration (edited)" in readme.read_text()
    assert "| `leaseSeconds` |" in readme.read_text()


def test_make_schema_runs_the_generator(kit_checkout: Path) -> None:
    dry_run = subprocess.run(
        ["make", "-n", "schema"], cwd=kit_checkout, capture_output=True, text=True, check=True
    )
    assert "scheduler-dedup schema" in dry_run.stdout

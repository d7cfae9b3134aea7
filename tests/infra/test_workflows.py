"""The GitHub Actions workflows: the deploy path (make test, then `pulumi up` of dev, then of
prod behind the `production` environment, policy pack enforced, Workload Identity
Federation, one update per stack at a time, outputs in the job summary) and the hardening
(actions pinned to commit SHAs, no persisted credentials, no expressions in scripts, least
permissions), and zizmor finds nothing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.program import REPO_ROOT

WORKFLOWS = REPO_ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))
PINNED = re.compile(r"^\s*(?:-\s+)?uses:\s+([\w.-]+/[\w./-]+)@([0-9a-f]{40}) # v\d+\.\d+\.\d+$")


def load(path: Path) -> dict[Any, Any]:
    document: dict[Any, Any] = yaml.safe_load(path.read_text("utf-8"))
    return document


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = job.get("steps", [])
    return found


def step(job: dict[str, Any], action: str) -> dict[str, Any]:
    return next(s for s in steps(job) if s.get("uses", "").split("@")[0] == action)


def test_there_are_the_ci_and_deploy_workflows() -> None:
    assert {p.name for p in FILES} == {"ci.yml", "deploy.yml"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_commit_with_its_release(path: Path) -> None:
    lines = [line for line in path.read_text("utf-8").splitlines() if "uses:" in line]
    assert lines
    for line in lines:
        assert PINNED.match(line), f"{path.name}: {line.strip()}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_hardening(path: Path) -> None:
    workflow = load(path)
    assert workflow["permissions"] == {}, "no permissions at the top: each job its own"
    for name, job in workflow["jobs"].items():
        assert "permissions" in job, name
        granted = {k: v for k, v in job["permissions"].items() if v != "none"}
        assert set(granted) <= {"contents", "id-token", "pull-requests"}, name
        assert granted.get("contents") == "read", name
        uses_auth = any(
            s.get("uses", "").startswith("google-github-actions/auth@") for s in steps(job)
        )
        assert ("id-token" in granted) == uses_auth, name
        for s in steps(job):
            if s.get("uses", "").startswith("actions/checkout@"):
                assert s["with"]["persist-credentials"] is False, name
            assert "${{" not in s.get("run", ""), f"{name}: expression inside run: {s}"


def test_deploy_runs_on_push_to_main_test_then_dev_then_prod() -> None:
    workflow = load(WORKFLOWS / "deploy.yml")
    assert workflow[True] == {"push": {"branches": ["main"]}}  # YAML 1.1: `on` reads as true
    jobs = workflow["jobs"]
    assert set(jobs) == {"test", "dev", "prod"}
    assert any(s.get("run") == ".ci/run" for s in steps(jobs["test"]))
    assert jobs["dev"]["needs"] == "test"
    assert jobs["prod"]["needs"] == "dev"
    # Each deploy in its environment, which holds its secrets: dev's (main only), prod's
    # (required reviewers, main only).
    assert jobs["dev"]["environment"] == "dev"
    assert jobs["prod"]["environment"] == "production"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_each_deploy_is_pulumi_up_with_the_policy_pack(stack: str) -> None:
    job = load(WORKFLOWS / "deploy.yml")["jobs"][stack]
    assert job["concurrency"] == {"group": f"pulumi-up-{stack}", "cancel-in-progress": False}
    assert job["permissions"] == {"contents": "read", "id-token": "write"}
    assert job["env"]["STACK"] == "${{ vars.PULUMI_STACK_PREFIX }}" + stack
    assert job["env"]["STACK_FILE"] == stack
    auth = step(job, "google-github-actions/auth")["with"]
    assert auth == {
        "workload_identity_provider": "${{ vars.GCP_WORKLOAD_IDENTITY_PROVIDER }}",
        "service_account": "${{ vars.GCP_DEPLOY_SERVICE_ACCOUNT }}",
    }
    names = [s.get("uses", s.get("run", "")).split("@")[0] for s in steps(job)]
    assert names.index("google-github-actions/auth") < names.index("pulumi/actions")
    up = step(job, "pulumi/actions")["with"]
    assert up["command"] == "up"
    assert up["stack-name"] == "${{ env.STACK }}"
    assert up["policyPacks"] == "policies"
    assert up["policyPackConfigs"] == "${{ steps.policy.outputs.config }}"
    summary = steps(job)[-1]["run"]
    assert 'pulumi stack output --json --stack "${STACK}"' in summary
    assert '>> "${GITHUB_STEP_SUMMARY}"' in summary


def test_zizmor_finds_nothing() -> None:
    zizmor = Path(sys.executable).parent / "zizmor"
    result = subprocess.run(
        [str(zizmor), "--offline", "--persona=pedantic", str(WORKFLOWS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings to report" in result.stdout + result.stderr


def pulumi_step(s: dict[str, Any]) -> bool:
    """A step that runs pulumi: the action, or a script calling the CLI."""
    return s.get("uses", "").startswith("pulumi/actions@") or "pulumi " in s.get("run", "")


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_secrets_reach_only_the_steps_that_run_pulumi(path: Path) -> None:
    """Not the workflow, not the job: checkout, the .venv build (which runs the packages it
    installs) and the Google sign-in never see them."""
    workflow = load(path)
    assert "secrets." not in str(workflow.get("env", {}))
    for name, job in workflow["jobs"].items():
        assert "secrets." not in str(job.get("env", {})), f"{name}: secrets in the job's env"
        for s in steps(job):
            if "secrets." in str(s):
                assert pulumi_step(s), f"{name}: a secret on a step that runs no pulumi: {s}"
                assert set(s["env"]) <= {"PULUMI_ACCESS_TOKEN", "PULUMI_CONFIG_PASSPHRASE"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_environments_are_fixed_names(path: Path) -> None:
    """An `environment:` per matrix entry would create unprotected environments on demand;
    `production` is for deploy.yml's `pulumi up` only, `preview` for ci.yml's previews."""
    expected = {"ci.yml": {"preview": "preview"},
                "deploy.yml": {"dev": "dev", "prod": "production"}}[path.name]
    jobs = load(path)["jobs"]
    assert {name: job["environment"] for name, job in jobs.items() if "environment" in job} == (
        expected)
    for name in expected:
        commands = {s["with"]["command"] for s in steps(jobs[name])
                    if s.get("uses", "").startswith("pulumi/actions@")}
        assert commands == {"preview" if path.name == "ci.yml" else "up"}, name


def test_the_preview_installs_before_any_credential_and_reads_only() -> None:
    job = load(WORKFLOWS / "ci.yml")["jobs"]["preview"]
    names = [s.get("name") or s.get("uses", "").split("@")[0] for s in steps(job)]
    build = names.index("Build .venv from the hash-locked deploy toolchain")
    auth = names.index("google-github-actions/auth")
    preview = names.index("pulumi/actions")
    assert build < auth < preview
    assert step(job, "google-github-actions/auth")["with"]["service_account"] == (
        "${{ vars.GCP_SERVICE_ACCOUNT }}")  # the read-only account, not the deployer
    up = steps(job)[preview]
    assert up["with"]["command"] == "preview"
    # Its own Pulumi token (read-only where the backend allows), never the deploy's.
    assert up["env"]["PULUMI_ACCESS_TOKEN"] == "${{ secrets.PULUMI_PREVIEW_ACCESS_TOKEN }}"
    assert "PULUMI_ACCESS_TOKEN }}" not in (WORKFLOWS / "ci.yml").read_text("utf-8").replace(
        "PULUMI_PREVIEW_ACCESS_TOKEN }}", "")

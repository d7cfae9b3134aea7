"""The GitHub Actions workflows: the deploy path (make test, the team's stacks listed by
operator_tools.ci_stacks, then `pulumi up` of each unreviewed stack in `dev`, then of each reviewed
one behind the `production` environment, with the same steps: policy pack enforced,
Workload Identity Federation, one update per stack at a time, outputs in the job summary)
and the hardening (actions pinned to commit SHAs, no persisted credentials, no expressions
in scripts, least permissions), and zizmor finds nothing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import KIT_ROOT as REPO_ROOT
from operator_tools.init import STARTER

WORKFLOWS = REPO_ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))
# The starter's (what `scheduler-dedup init` writes into a team's repository): the same
# workflows, on the installed kit (its `policy/` door, its `scheduler-dedup` command, the
# locks its `make lock` writes), held to the same hardening.
STARTER_WORKFLOWS = STARTER / ".github" / "workflows"
BOTH = [*FILES, *sorted(STARTER_WORKFLOWS.glob("*.yml"))]


def label(path: Path) -> str:
    return f"{'starter' if path.is_relative_to(STARTER) else 'kit'}/{path.name}"
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
    assert {p.name for p in STARTER_WORKFLOWS.glob("*.yml")} == {"ci.yml", "deploy.yml"}


@pytest.mark.parametrize("path", BOTH, ids=label)
def test_every_action_is_pinned_to_a_commit_with_its_release(path: Path) -> None:
    lines = [line for line in path.read_text("utf-8").splitlines() if "uses:" in line]
    assert lines
    for line in lines:
        assert PINNED.match(line), f"{path.name}: {line.strip()}"


@pytest.mark.parametrize("path", BOTH, ids=label)
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


DEPLOY_JOBS = {"up": "unreviewed", "up-reviewed": "reviewed"}
"""deploy.yml's `pulumi up` jobs, each with the operator_tools.ci_stacks list it runs over."""


def test_deploy_runs_on_push_to_main_test_then_unreviewed_then_reviewed() -> None:
    workflow = load(WORKFLOWS / "deploy.yml")
    assert workflow[True] == {"push": {"branches": ["main"]}}  # YAML 1.1: `on` reads as true
    jobs = workflow["jobs"]
    assert set(jobs) == {"test", "stacks", *DEPLOY_JOBS}
    assert any(s.get("run") == ".ci/run" for s in steps(jobs["test"]))
    assert set(jobs["up"]["needs"]) == {"test", "stacks"}
    assert set(jobs["up-reviewed"]["needs"]) == {"test", "stacks", "up"}
    # Each deploy in its environment, which holds its secrets: the unreviewed stacks' (main
    # only), the reviewed stacks' (required reviewers, main only).
    assert jobs["up"]["environment"] == "dev"
    assert jobs["up-reviewed"]["environment"] == "production"


def test_the_stacks_are_listed_by_the_kit_not_named_in_the_workflows() -> None:
    """No stack name in a workflow: the jobs run over operator_tools.ci_stacks's lists, from a job
    that holds no credential (contents: read; the hash-locked .venv, as the deploy jobs)."""
    for path in FILES:
        job = load(path)["jobs"]["stacks"]
        assert job["permissions"] == {"contents": "read"}, path.name
        (listing,) = [s for s in steps(job) if s.get("id") == "list"]
        assert listing["run"].strip() == (
            ".venv/bin/python -m operator_tools ci-stacks --github-output")
        names = [s.get("name") or s.get("uses", "").split("@")[0] for s in steps(job)]
        assert names.index("Build .venv from the hash-locked deploy toolchain") < names.index(
            listing["name"])
        text = path.read_text("utf-8")
        for stack in ("dev", "prod", "staging"):
            assert f"STACK_FILE: {stack}" not in text and f"pulumi-up-{stack}" not in text
    deploy = load(WORKFLOWS / "deploy.yml")["jobs"]["stacks"]["outputs"]
    assert deploy == {"reviewed": "${{ steps.list.outputs.reviewed }}",
                      "unreviewed": "${{ steps.list.outputs.unreviewed }}"}
    # Pull requests get the unreviewed list only.
    assert load(WORKFLOWS / "ci.yml")["jobs"]["stacks"]["outputs"] == {
        "names": "${{ steps.list.outputs.unreviewed }}"}


@pytest.mark.parametrize(("name", "listed"), DEPLOY_JOBS.items())
def test_each_deploy_is_pulumi_up_with_the_policy_pack(name: str, listed: str) -> None:
    job = load(WORKFLOWS / "deploy.yml")["jobs"][name]
    assert job["strategy"]["matrix"] == {
        "stack": "${{ fromJSON(needs.stacks.outputs." + listed + ") }}"}
    assert job["strategy"]["fail-fast"] is False
    assert job["concurrency"] == {"group": "pulumi-up-${{ matrix.stack }}",
                                  "cancel-in-progress": False}
    assert job["permissions"] == {"contents": "read", "id-token": "write"}
    assert job["env"]["STACK"] == "${{ vars.PULUMI_STACK_PREFIX }}${{ matrix.stack }}"
    assert job["env"]["STACK_FILE"] == "${{ matrix.stack }}"
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
    assert "work-dir" not in up  # the project's root: Pulumi.yaml finds stacks/ itself
    assert up["policyPacks"] == "policies"
    assert up["policyPackConfigs"] == "${{ steps.policy.outputs.config }}"
    (policy,) = [s for s in steps(job) if s.get("id") == "policy"]
    assert 'config="policies/policy-config.${STACK_FILE}.json"' in policy["run"]
    summary = steps(job)[-1]["run"]
    assert 'pulumi stack output --json --stack "${STACK}"' in summary
    assert '>> "${GITHUB_STEP_SUMMARY}"' in summary


def test_both_deploy_jobs_run_the_same_steps_through_a_yaml_anchor() -> None:
    """One list of steps (GitHub Actions reads YAML anchors and aliases, not merge keys)."""
    text = (WORKFLOWS / "deploy.yml").read_text("utf-8")
    jobs = load(WORKFLOWS / "deploy.yml")["jobs"]
    assert steps(jobs["up"]) == steps(jobs["up-reviewed"])
    assert "    steps: &pulumi-up-steps\n" in text
    assert "    steps: *pulumi-up-steps\n" in text
    for path in FILES:
        assert not re.search(r"^\s*<<\s*:", path.read_text("utf-8"), re.M), path.name


_STATUS = re.compile(r"\b(success|failure|always|cancelled)\(\)")


def evaluate(condition: str, needs: dict[str, dict[str, Any]], *,
             cancelled: bool = False) -> bool:
    """A job's `if:` as GitHub evaluates it, for the operators the workflows use; without a
    status function, `success() &&` is implied (every needed job succeeded)."""
    if not _STATUS.search(condition):
        condition = f"success() && ({condition})"
    python = (condition.replace("&&", " and ").replace("||", " or ")
              .replace("!=", "<>").replace("!", " not ").replace("<>", "!="))
    python = _STATUS.sub(lambda m: f"_{m.group(1)}", python)
    python = re.sub(r"needs\.([\w-]+)\.(result|outputs\.\w+)",
                    lambda m: repr(_lookup(needs, m.group(1), m.group(2))), python)
    scope = {"_success": not cancelled and all(j["result"] == "success" for j in needs.values()),
             "_failure": any(j["result"] == "failure" for j in needs.values()),
             "_always": True, "_cancelled": cancelled}
    result: bool = eval(python, {"__builtins__": {}}, scope)  # the workflow's own if:
    return result


def _lookup(needs: dict[str, dict[str, Any]], job: str, path: str) -> str:
    value: Any = needs[job]
    for part in path.split("."):
        value = value.get(part, "")
    return str(value)


def needs_of(stacks: str = "success", up: str = "success", test: str = "success",
             reviewed: str = '["prod"]', unreviewed: str = '["dev"]') -> dict[str, Any]:
    return {"test": {"result": test},
            "stacks": {"result": stacks,
                       "outputs": {"reviewed": reviewed, "unreviewed": unreviewed}
                       if stacks == "success" else {}},
            "up": {"result": up}}


@pytest.mark.parametrize(
    ("case", "needs", "cancelled", "runs"),
    [
        ("after the unreviewed stacks", needs_of(), False, True),
        ("every stack reviewed: up skipped", needs_of(up="skipped", unreviewed="[]"), False,
         True),
        ("an unreviewed stack's update failed", needs_of(up="failure"), False, False),
        ("make test failed (so up was skipped)", needs_of(test="failure", up="skipped"), False,
         False),
        ("the listing failed", needs_of(stacks="failure", up="skipped"), False, False),
        ("no reviewed stack", needs_of(reviewed="[]"), False, False),
        ("the run was cancelled", needs_of(up="cancelled"), True, False),
    ],
)
def test_the_reviewed_stacks_deploy_only_after_the_others_succeeded_or_were_none(
    case: str, needs: dict[str, Any], cancelled: bool, runs: bool
) -> None:
    job = load(WORKFLOWS / "deploy.yml")["jobs"]["up-reviewed"]
    assert evaluate(job["if"], needs, cancelled=cancelled) is runs, case


@pytest.mark.parametrize(
    ("case", "needs", "runs"),
    [
        ("after make test", needs_of(), True),
        ("make test failed", needs_of(test="failure"), False),
        ("no unreviewed stack", needs_of(unreviewed="[]"), False),
    ],
)
def test_the_unreviewed_stacks_deploy_after_make_test(case: str, needs: dict[str, Any],
                                                      runs: bool) -> None:
    job = load(WORKFLOWS / "deploy.yml")["jobs"]["up"]
    needs = {name: needs[name] for name in job["needs"]}
    assert evaluate(job["if"], needs) is runs, case


def test_zizmor_finds_nothing() -> None:
    zizmor = Path(sys.executable).parent / "zizmor"
    result = subprocess.run(
        [str(zizmor), "--offline", "--persona=pedantic", str(WORKFLOWS), str(STARTER_WORKFLOWS)],
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


@pytest.mark.parametrize("path", BOTH, ids=label)
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


@pytest.mark.parametrize("path", BOTH, ids=label)
def test_environments_are_fixed_names(path: Path) -> None:
    """An `environment:` per matrix entry would create unprotected environments on demand;
    `production` is for deploy.yml's `pulumi up` only, `preview` for ci.yml's previews."""
    expected = {"ci.yml": {"preview": "preview"},
                "deploy.yml": {"up": "dev", "up-reviewed": "production"}}[path.name]
    jobs = load(path)["jobs"]
    assert {name: job["environment"] for name, job in jobs.items() if "environment" in job} == (
        expected)
    for name in expected:
        commands = {s["with"]["command"] for s in steps(jobs[name])
                    if s.get("uses", "").startswith("pulumi/actions@")}
        assert commands == {"preview" if path.name == "ci.yml" else "up"}, name


@pytest.mark.parametrize("workflows", [WORKFLOWS, STARTER_WORKFLOWS], ids=["kit", "starter"])
def test_the_preview_installs_before_any_credential_and_reads_only(workflows: Path) -> None:
    job = load(workflows / "ci.yml")["jobs"]["preview"]
    names = [s.get("name") or s.get("uses", "").split("@")[0] for s in steps(job)]
    build = next(i for i, name in enumerate(names) if name.startswith("Build .venv from"))
    auth = names.index("google-github-actions/auth")
    preview = names.index("pulumi/actions")
    assert build < auth < preview
    assert step(job, "google-github-actions/auth")["with"]["service_account"] == (
        "${{ vars.GCP_SERVICE_ACCOUNT }}")  # the read-only account, not the deployer
    up = steps(job)[preview]
    assert up["with"]["command"] == "preview"
    # Its own Pulumi token (read-only where the backend allows), never the deploy's.
    assert up["env"]["PULUMI_ACCESS_TOKEN"] == "${{ secrets.PULUMI_PREVIEW_ACCESS_TOKEN }}"
    assert "PULUMI_ACCESS_TOKEN }}" not in (workflows / "ci.yml").read_text("utf-8").replace(
        "PULUMI_PREVIEW_ACCESS_TOKEN }}", "")


def test_the_starters_preview_is_the_kits_on_the_installed_kit() -> None:
    """docs/ci.md describes one pull-request preview: the starter's job is the kit's, step
    for step, but for what a team repository has instead (its Python, its locks, its
    `policy/` door, the installed kit's `scheduler-dedup` command)."""
    def as_team_has_it(job: dict[str, Any]) -> str:
        text = yaml.safe_dump(job, sort_keys=True)
        for kit, team in [('python-version: "3.11"', 'python-version: "3.12"'),
                          ("python-version: '3.11'", "python-version: '3.12'"),
                          (".github/requirements/bootstrap.txt", "requirements-bootstrap.txt"),
                          (".github/requirements/deploy.txt", "requirements-deploy.txt"),
                          ("hash-locked deploy toolchain", "hash-locked toolchain"),
                          ("policyPacks: policies", "policyPacks: policy"),
                          ("the team's unreviewed", "your unreviewed"),
                          (".venv/bin/python -m operator_tools ci-stacks",
                           ".venv/bin/scheduler-dedup ci-stacks")]:
            text = text.replace(kit, team)
        return text

    kit, team = load(WORKFLOWS / "ci.yml"), load(STARTER_WORKFLOWS / "ci.yml")
    assert team[True] == kit[True] == {"pull_request": None}
    assert set(team["jobs"]) == set(kit["jobs"]) == {"test", "stacks", "preview"}
    for name in ("stacks", "preview"):
        assert yaml.safe_dump(team["jobs"][name], sort_keys=True) == as_team_has_it(
            kit["jobs"][name]), name


"""The workflows' supply chain and who sees prod (issue 25, items 10 and 11).

- Installs: every install a workflow runs is pip in hash-checking mode (`--require-hashes`,
  `--no-deps`) from files that pin every package with its hashes (.github/requirements/,
  written by `make lock-kit`); never `pip install <name>`, `pip install --upgrade pip`, an
  unhashed file or the Makefile's unhashed `.venv`. A job that holds credentials (an OIDC
  token, a secret, an environment) installs nothing else and runs no `make`.
- Prod: a pull request never previews a production stack (one deploy.yml deploys in the
  `production` environment: a reviewed stack, `reviewBeforeUp`, unset: reviewed,
  as operator_tools.ci_stacks lists them), never runs in `production`, and a secret is only
  referenced by a job bound to an environment (environment secrets, which a branch's
  workflow cannot read without that environment's branch rules and reviewers). The
  listings are run, on stack files written for the test (never the team's).

The checks are functions over a workflow's parsed YAML, so each is also run on a workflow
as it was before these fixes (a step or job of it) and must report it. They hold two sets
of workflows: the kit's own (.github/workflows/) and the starter's
(examples/team-repo/.github/workflows/, what `scheduler-dedup init` writes into a team's
repository, whose deploy jobs hold that team's production deployer; issue 36): the
starter's installs its toolchain from locks its `make lock` writes with hashes.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import KIT_ROOT as REPO_ROOT
from operator_tools.init import STARTER
from tests.function.test_requirements_lock import closure as lock_closure
from tests.function.test_requirements_lock import pins, requirement_lines
from tests.infra.test_ci_stacks import write_stack

WORKFLOWS = REPO_ROOT / ".github" / "workflows"
LOCKS = REPO_ROOT / ".github" / "requirements"
BOOTSTRAP = LOCKS / "bootstrap.txt"
DEPLOY = LOCKS / "deploy.txt"
CONSTRAINTS = REPO_ROOT / "constraints.txt"
DEPLOY_ROOTS = [REPO_ROOT / "requirements.txt", REPO_ROOT / "function" / "requirements.in",
                REPO_ROOT / "policies" / "requirements.txt"]
FIX = "run `make lock-kit`"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)==([^\s\\;]+)")
_HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")
# The installer's own packages: pinned by bootstrap.in, not by constraints.txt.
INSTALLER = {"pip", "setuptools"}
# Commands that install packages. `make` builds the unhashed .venv (Makefile: pip install
# --upgrade pip, then requirements-dev.txt) for any target but help.
_INSTALL = re.compile(r"\b(?:pip3?|uv\s+pip|pipx|uv\s+tool|poetry|pipenv|npm|yarn|gem|go)"
                      r"\s+(?:install|sync|add|ci|get)\b")
_MAKE = re.compile(r"(?:^|[;&|]\s*)make\b(?!\s+help\b)")


def locked_by_make_lock(root: Path) -> frozenset[str]:
    """The files the `lock` target of `root`'s Makefile writes with every hash
    (`--generate-hashes ... --output-file <file>`): a team's, which a fresh starter has not
    got yet, held by the recipe that writes them. The kit's `make lock` writes none of its
    workflows' locks (those are `make lock-kit`'s, committed, read)."""
    text = re.sub(r"\\\n\s*", " ", (root / "Makefile").read_text("utf-8"))
    variables = dict(re.findall(r"(?m)^([A-Z_]+) :?= (.*)$", text))
    recipe = text.split("\nlock:", 1)[1].split("\n\n", 1)[0]
    found = set()
    for command in recipe.splitlines()[1:]:
        command = re.sub(r"\$\(([A-Z_]+)\)", lambda m: variables.get(m[1], m[0]), command)
        written = re.search(r"--output-file (\S+)", command)
        if written and "--generate-hashes" in command:
            found.add(written[1])
    return frozenset(found)


@dataclass(frozen=True)
class WorkflowSet:
    """A repository's workflows and the locks their jobs build the toolchain from."""

    name: str
    root: Path
    bootstrap: str
    """pip and setuptools, with hashes, relative to `root`."""
    deploy: str
    """The toolchain a credentialed job runs (the program, the policy pack), with hashes."""
    python: str
    """The workflows' Python (actions/setup-python), the one the locks are for."""

    @property
    def workflows(self) -> Path:
        return self.root / ".github" / "workflows"

    @property
    def files(self) -> list[Path]:
        return sorted(self.workflows.glob("*.yml"))


KIT = WorkflowSet("kit", REPO_ROOT, ".github/requirements/bootstrap.txt",
                  ".github/requirements/deploy.txt", "3.11")
TEAM = WorkflowSet("starter", STARTER, "requirements-bootstrap.txt",
                   "requirements-deploy.txt", "3.12")
WORKFLOW_SETS = [KIT, TEAM]
EVERY_WORKFLOW = [pytest.param(s, p, id=f"{s.name}/{p.name}") for s in WORKFLOW_SETS
                  for p in s.files]


def load(path: Path) -> dict[Any, Any]:
    document: dict[Any, Any] = yaml.safe_load(path.read_text("utf-8"))
    return document


def triggers(workflow: dict[Any, Any]) -> set[str]:
    on = workflow.get("on", workflow.get(True))  # YAML 1.1: `on` reads as true
    if isinstance(on, str):
        return {on}
    return {str(name) for name in on or {}}


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = job.get("steps", [])
    return found


def commands(script: str) -> list[str]:
    """A run: script's commands, `\\`-continued lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", script)
    lines = (line.split(" #", 1)[0].strip() for line in joined.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def unhashed(text: str) -> list[str]:
    """The lines of a requirements file that pip's hash-checking mode would not cover. The
    one index it names (`--index-url`, which `uv pip compile --emit-index-url` writes) says
    only where files come from: their hashes say which are accepted."""
    return [line[:80] for line in requirement_lines(text)
            if not line.startswith("--index-url ")
            and (not _PIN.match(line) or not _HASH.search(line))]


def holds_credentials(job: dict[str, Any]) -> bool:
    permissions = job.get("permissions", {})
    return ("environment" in job or "secrets." in str(job)
            or (isinstance(permissions, dict) and permissions.get("id-token") == "write"))


def install_problems(workflow: dict[Any, Any], root: Path = REPO_ROOT) -> list[str]:
    """Every install that is not pip's hash-checking mode over fully hashed files (in
    `root`, or written with hashes by its `make lock`)."""
    problems: list[str] = []
    locked_by_make = locked_by_make_lock(root)
    for name, job in workflow["jobs"].items():
        for s in steps(job):
            for command in commands(s.get("run", "")):
                where = f"{name}: {command[:100]!r}"
                if _MAKE.search(command):
                    problems.append(f"{where}: make builds the unhashed .venv")
                    continue
                if command.startswith(".ci/run") and holds_credentials(job):
                    problems.append(f"{where}: `make test` (unhashed .venv) in a job that "
                                    "holds credentials")
                if not _INSTALL.search(command):
                    continue
                words = shlex.split(command)
                if not re.search(r"\bpip3?\s+install\b", command) or "uv" in words:
                    problems.append(f"{where}: installs other than through pip's "
                                    "hash-checking mode")
                    continue
                for flag in ("--require-hashes", "--no-deps"):
                    if flag not in words:
                        problems.append(f"{where}: without {flag}")
                if "--upgrade" in words or "-U" in words:
                    problems.append(f"{where}: upgrades (to whatever the index serves)")
                files = [words[i + 1] for i, w in enumerate(words[:-1])
                         if w in ("-r", "--requirement")]
                after = words[words.index("install") + 1:]
                loose = [w for i, w in enumerate(after) if not w.startswith("-")
                         and (i == 0 or after[i - 1] not in ("-r", "--requirement", "-c",
                                                             "--constraint"))
                         and not (i and after[i - 1].startswith("--only-binary"))]
                if loose or not files:
                    problems.append(f"{where}: installs {loose or 'nothing'} named on the "
                                    "command line, not from a hashed file")
                for file in files:
                    path = root / file
                    if file in locked_by_make and not path.is_file():
                        continue  # a team's, once it ran `make lock`
                    if not path.is_file():
                        problems.append(f"{where}: {file} does not exist")
                    elif bad := unhashed(path.read_text("utf-8")):
                        problems.append(f"{where}: {file} has unhashed lines: {bad[:3]}")
    return problems


def secret_problems(workflow: dict[Any, Any]) -> list[str]:
    """A secret referenced outside a job bound to an environment."""
    problems = []
    if "secrets." in str(workflow.get("env", {})):
        problems.append("secrets in the workflow's env")
    for name, job in workflow["jobs"].items():
        if "secrets." in str(job) and "environment" not in job:
            problems.append(f"{name}: references a secret but is bound to no environment")
    return problems


PULL_REQUEST_TRIGGERS = {"pull_request", "pull_request_target", "pull_request_review",
                         "pull_request_review_comment", "issue_comment", "workflow_run"}


def write_fixture_stacks(directory: Path) -> None:
    """A team's stack directory: prod (reviewed by default), qa (unprotected, marked
    reviewed), dev and staging (unprotected, marked unreviewed), sandbox (protected but
    marked unreviewed)."""
    write_stack(directory, "prod")
    write_stack(directory, "qa", deleteProtection=False, reviewBeforeUp=True)
    write_stack(directory, "dev", deleteProtection=False, reviewBeforeUp=False)
    write_stack(directory, "staging", deleteProtection=False, reviewBeforeUp=False)
    write_stack(directory, "sandbox", reviewBeforeUp=False)


FIXTURE_REVIEWED = {"prod", "qa"}
FIXTURE_UNREVIEWED = {"dev", "staging", "sandbox"}


def listing_outputs(job: dict[str, Any], stack_dir: Path, out_dir: Path) -> dict[str, list[str]]:
    """Runs the job's listing step (`id: list`) in `stack_dir`, as a checkout whose stack
    directory it is: the kit's listing (`python -m operator_tools ci-stacks`, the test's Python)
    pointed at it with --stack-dir, any other script there as written. Its outputs."""
    (step,) = [s for s in steps(job) if s.get("id") == "list"]
    # The starter's: the installed kit's entry point, the same command.
    script = step["run"].replace(".venv/bin/scheduler-dedup ci-stacks",
                                 ".venv/bin/python -m operator_tools ci-stacks")
    script = script.replace(".venv/bin/python", shlex.quote(sys.executable)).replace(
        "-m operator_tools ci-stacks", "-m operator_tools ci-stacks --stack-dir .")
    handle, name = tempfile.mkstemp(prefix="github-output-", dir=out_dir)
    os.close(handle)
    env = {"PATH": os.environ["PATH"], "GITHUB_OUTPUT": name, "PYTHONPATH": str(REPO_ROOT),
           **step.get("env", {})}
    subprocess.run(["bash", "-eo", "pipefail", "-c", script], cwd=stack_dir, env=env,
                   check=True, timeout=60, stdout=subprocess.DEVNULL)
    outputs: dict[str, list[str]] = {}
    for line in Path(name).read_text().splitlines():
        key, _, value = line.partition("=")
        outputs[key] = json.loads(value)
    return outputs


_STEP_OUTPUT = re.compile(r"\$\{\{ steps\.list\.outputs\.(\w+) \}\}")
_MATRIX = re.compile(r"\$\{\{ fromJSON\(needs\.([\w-]+)\.outputs\.(\w+)\) \}\}")


def passed_on(job: dict[str, Any], stack_dir: Path, out_dir: Path) -> dict[str, list[str]]:
    """The lists a listing job passes on: its `outputs:` (each a listing output), or, with
    none declared, every list the listing wrote."""
    written = listing_outputs(job, stack_dir, out_dir)
    if "outputs" not in job:
        return written
    found = {}
    for name, expression in job["outputs"].items():
        match = _STEP_OUTPUT.fullmatch(expression)
        assert match, f"an output that is not the listing's: {name}: {expression}"
        found[name] = written.get(match.group(1), [])
    return found


def deployed_stacks(stack_dir: Path, out_dir: Path,
                    workflows: Path = WORKFLOWS) -> dict[str, set[str]]:
    """The stacks deploy.yml (of `workflows`) deploys in each environment, for the stack
    files of `stack_dir`: its listing run there, each environment's job's matrix resolved."""
    jobs = load(workflows / "deploy.yml")["jobs"]
    (lister,) = [name for name, job in jobs.items()
                 if any(s.get("id") == "list" for s in steps(job))]
    lists = passed_on(jobs[lister], stack_dir, out_dir)
    found: dict[str, set[str]] = {}
    for name, job in jobs.items():
        if "environment" not in job:
            continue
        match = _MATRIX.fullmatch(job.get("strategy", {}).get("matrix", {}).get("stack", ""))
        assert match and match.group(1) == lister, f"{name}: not a matrix over the listing"
        found.setdefault(job["environment"], set()).update(lists[match.group(2)])
    return found


@functools.cache
def production_stacks(workflows: Path = WORKFLOWS) -> frozenset[str]:
    """The fixture stacks deploy.yml deploys in the `production` environment (once)."""
    with tempfile.TemporaryDirectory() as temporary:
        write_fixture_stacks(Path(temporary) / "stacks")
        found = deployed_stacks(Path(temporary) / "stacks", Path(temporary), workflows)
    assert found.get("production") == FIXTURE_REVIEWED
    return frozenset(found["production"])


def pull_request_prod_problems(workflow: dict[Any, Any], tmp_path: Path,
                               workflows: Path = WORKFLOWS) -> list[str]:
    """A pull-request workflow's job in `production`, or a preview of a production stack
    (what deploy.yml of `workflows` deploys there)."""
    if not triggers(workflow) & PULL_REQUEST_TRIGGERS:
        return []
    stack_dir = tmp_path / "stacks"
    write_fixture_stacks(stack_dir)
    prod = production_stacks(workflows)
    problems = []
    if "pull_request_target" in triggers(workflow):
        problems.append("pull_request_target runs with the base repository's secrets")
    for name, job in workflow["jobs"].items():
        if job.get("environment") == "production":
            problems.append(f"{name}: runs in `production` on a pull request")
        if any(s.get("id") == "list" for s in steps(job)):
            previewed = set().union(*passed_on(job, stack_dir, tmp_path).values())
            if previewed & prod:
                problems.append(f"{name}: lists production stacks {sorted(prod)} for "
                                f"pull-request previews: {sorted(previewed)}")
            if not previewed >= FIXTURE_UNREVIEWED:
                problems.append(f"{name}: drops a non-prod stack: {sorted(previewed)}")
        # What a pulumi step runs on: its stack name, its script, its and its job's env.
        for s in steps(job):
            if not (s.get("uses", "").startswith("pulumi/actions@")
                    or "pulumi " in s.get("run", "")):
                continue
            target = " ".join(str(part) for part in (
                s.get("with", {}).get("stack-name", ""), s.get("run", ""), s.get("env", {}),
                job.get("env", {})))
            if any(re.search(rf"(?<![\w-]){re.escape(p)}(?![\w-])", target) for p in prod):
                problems.append(f"{name}: names a production stack: {target}")
    return problems


# --------------------------------------------------------------------------- the workflows


@pytest.mark.parametrize(("workflows", "path"), EVERY_WORKFLOW)
def test_every_install_is_hash_checked(workflows: WorkflowSet, path: Path) -> None:
    problems = install_problems(load(path), workflows.root)
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize(("workflows", "path"), EVERY_WORKFLOW)
def test_secrets_only_in_jobs_bound_to_an_environment(workflows: WorkflowSet,
                                                      path: Path) -> None:
    problems = secret_problems(load(path))
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize(("workflows", "path"), EVERY_WORKFLOW)
def test_pull_requests_never_reach_prod(workflows: WorkflowSet, path: Path,
                                        tmp_path: Path) -> None:
    problems = pull_request_prod_problems(load(path), tmp_path, workflows.workflows)
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("workflows", WORKFLOW_SETS, ids=lambda s: s.name)
def test_deploy_runs_each_reviewed_stack_in_production_and_every_other_in_dev(
    workflows: WorkflowSet, tmp_path: Path,
) -> None:
    """By the stacks' own settings (reviewBeforeUp, unset: reviewed), each once."""
    write_fixture_stacks(tmp_path / "stacks")
    assert deployed_stacks(tmp_path / "stacks", tmp_path, workflows.workflows) == {
        "production": FIXTURE_REVIEWED, "dev": FIXTURE_UNREVIEWED}


def test_a_stack_directory_without_stacks_deploys_and_previews_nothing(tmp_path: Path) -> None:
    (tmp_path / "stacks").mkdir()
    assert deployed_stacks(tmp_path / "stacks", tmp_path) == {"production": set(), "dev": set()}
    ci = load(WORKFLOWS / "ci.yml")["jobs"]["stacks"]
    assert passed_on(ci, tmp_path / "stacks", tmp_path) == {"names": []}


@pytest.mark.parametrize("workflows", WORKFLOW_SETS, ids=lambda s: s.name)
def test_the_pull_request_preview_has_secrets_of_its_own(workflows: WorkflowSet) -> None:
    """Names no deploy uses, so a missing `preview` secret never falls back to a deploy's."""
    ci = load(workflows.workflows / "ci.yml")
    deploy_secrets = set(re.findall(r"secrets\.(\w+)",
                                    (workflows.workflows / "deploy.yml").read_text()))
    preview_secrets = set(re.findall(r"secrets\.(\w+)", str(ci["jobs"])))
    assert preview_secrets == {"PULUMI_PREVIEW_ACCESS_TOKEN", "PULUMI_PREVIEW_CONFIG_PASSPHRASE"}
    assert not preview_secrets & deploy_secrets
    assert ci["jobs"]["preview"]["environment"] == "preview"


def toolchain_steps(job: dict[str, Any], workflows: WorkflowSet = KIT) -> list[int]:
    return [i for i, s in enumerate(steps(job)) if workflows.deploy in s.get("run", "")]


@pytest.mark.parametrize("workflows", WORKFLOW_SETS, ids=lambda s: s.name)
def test_every_credentialed_job_builds_the_same_hashed_toolchain_before_any_credential(
    workflows: WorkflowSet,
) -> None:
    """And the listing jobs, which run the kit's config models, build that one too."""
    scripts = set()
    for path in workflows.files:
        for name, job in load(path)["jobs"].items():
            if name == "stacks":
                (build,) = toolchain_steps(job, workflows)
                scripts.add(steps(job)[build]["run"])
            if not holds_credentials(job):
                continue
            (build,) = toolchain_steps(job, workflows)
            scripts.add(steps(job)[build]["run"])
            for s in steps(job)[:build + 1]:
                assert "secrets." not in str(s), name
                assert not s.get("uses", "").startswith("google-github-actions/auth@"), name
            python = [s for s in steps(job) if s.get("uses", "").startswith(
                "actions/setup-python@")]
            assert python and python[0]["with"]["python-version"] == workflows.python, name
    assert len(scripts) == 1, "one install, the same in every job"
    (script,) = scripts
    bootstrap, deploy = [c for c in commands(script) if " install " in c]
    assert bootstrap.endswith(f"-r {workflows.bootstrap}")
    assert "--only-binary :all:" in bootstrap  # pip and setuptools: wheels only
    assert deploy.endswith(f"-r {workflows.deploy}")
    # The one source distribution is built with the locked setuptools: pip fetches no
    # build tools, which its hash-checking mode would not check.
    assert "--no-build-isolation" in deploy


# --------------------------------------------------------------------------- the locks


def closure(roots: list[str]) -> set[str]:
    """Every distribution `roots` need on Linux under this Python (the workflows' 3.11),
    from the installed packages' metadata (the test environment installs them all)."""
    return lock_closure(roots, {"sys_platform": "linux", "platform_system": "Linux",
                                "os_name": "posix", "platform_machine": "x86_64"})


def lock_problems(lock_text: str, constraints_text: str, roots: list[str],
                  installer: dict[str, str]) -> list[str]:
    problems = [f"{line!r} is not a `name==version` pin with --hash: {FIX}"
                for line in unhashed(lock_text)]
    locked = pins(lock_text)
    constrained = pins(constraints_text)
    for name, version in sorted(locked.items()):
        if name in installer:
            if installer[name] != version:
                problems.append(f"{name} is {version} in deploy.txt but {installer[name]} in "
                                f"bootstrap.txt: {FIX}")
        elif constrained.get(name) != version:
            problems.append(f"{name}=={version} is not constraints.txt's "
                            f"({constrained.get(name)}): {FIX}")
    needed = closure(roots) | set(installer)
    for name in sorted(needed - set(locked)):
        problems.append(f"{name} is needed by the deploy toolchain but not locked: {FIX}")
    for name in sorted(set(locked) - needed):
        problems.append(f"{name} is locked but the deploy toolchain does not need it: {FIX}")
    return problems


def deploy_roots() -> list[str]:
    return [line for path in DEPLOY_ROOTS for line in requirement_lines(path.read_text())]


def test_the_bootstrap_lock_pins_pip_and_setuptools_with_hashes() -> None:
    text = BOOTSTRAP.read_text()
    assert unhashed(text) == []
    assert set(pins(text)) == INSTALLER


def test_the_deploy_lock_is_current_and_has_a_hash_for_every_pin() -> None:
    problems = lock_problems(DEPLOY.read_text(), CONSTRAINTS.read_text(), deploy_roots(),
                             pins(BOOTSTRAP.read_text()))
    assert problems == [], "\n".join(problems)
    assert len(pins(DEPLOY.read_text())) > 50


def test_make_lock_writes_both_for_the_workflows_python() -> None:
    recipe = (REPO_ROOT / "Makefile").read_text().split("\nlock-kit:", 1)[1].split("\n\n", 1)[0]
    assert "for lock in bootstrap deploy" in recipe
    deploy_part = recipe.split("for lock in", 1)[1]
    for flag in ("--generate-hashes", "--python-version 3.11", "--python-platform linux",
                 "--constraint constraints.txt", "--output-file .github/requirements/$$lock.txt"):
        assert flag in deploy_part, flag
    deploy_in = requirement_lines((LOCKS / "deploy.in").read_text())
    assert deploy_in == ["-r ../../requirements.txt", "-r ../../function/requirements.in",
                         "-r ../../policies/requirements.txt", "-r bootstrap.in"]


def test_the_starters_make_lock_writes_both_with_hashes_for_its_workflows_python() -> None:
    """A team's locks are its own (the kit's wheel is built at release, so its hash is not
    known here): the starter ships the recipe, and CI installs nothing else."""
    assert locked_by_make_lock(TEAM.root) == {TEAM.bootstrap, TEAM.deploy}
    assert locked_by_make_lock(KIT.root) == frozenset()
    text = (STARTER / "Makefile").read_text()
    assert f"DEPLOY_PYTHON := {TEAM.python}" in text
    assert "--python-platform linux" in text
    recipe = text.split("\nlock:", 1)[1].split("\n\n", 1)[0]
    # The kit (requirements.txt), the installer and the team's jobs' dependencies, at its
    # function lock's versions: what the test job imports.
    for source in ("requirements.txt requirements-bootstrap.in", "function/jobs/requirements.in",
                   "--constraint function/jobs/requirements.txt"):
        assert source in recipe, source


def test_the_starters_installer_is_the_kits() -> None:
    starter = requirement_lines((STARTER / "requirements-bootstrap.in").read_text())
    assert starter == requirement_lines((LOCKS / "bootstrap.in").read_text())
    assert set(pins("\n".join(starter))) == INSTALLER


DEPLOY_TEXT = DEPLOY.read_text()
PULUMI_PIN = pins(DEPLOY_TEXT)["pulumi"]


@pytest.mark.parametrize(
    ("case", "lock_text", "expected"),
    [
        ("a hash removed",
         re.sub(r"(pulumi==\S+) \\\n(\s*--hash=\S+ \\\n)*\s*--hash=\S+", r"\1", DEPLOY_TEXT),
         f"'pulumi=={PULUMI_PIN}' is not a `name==version` pin with --hash"),
        ("a loose line", DEPLOY_TEXT + "\nsomething>=1\n", "'something>=1' is not"),
        ("a version moved", DEPLOY_TEXT.replace(f"pulumi=={PULUMI_PIN}", "pulumi==0.0.1"),
         "pulumi==0.0.1 is not constraints.txt's"),
        ("a package dropped", re.sub(r"\ncroniter==\S+ \\\n(\s*--hash=\S+ \\?\n)+", "\n",
                                     DEPLOY_TEXT),
         "croniter is needed by the deploy toolchain but not locked"),
    ],
)
def test_a_stale_or_unhashed_deploy_lock_is_reported(case: str, lock_text: str,
                                                     expected: str) -> None:
    problems = lock_problems(lock_text, CONSTRAINTS.read_text(), deploy_roots(),
                             pins(BOOTSTRAP.read_text()))
    assert any(expected in problem for problem in problems), (case, problems)


# ------------------------------------------------- the workflows as they were: reported


def workflow(on: Any, **jobs: dict[str, Any]) -> dict[Any, Any]:
    return {True: on, "permissions": {}, "jobs": jobs}


def run_job(script: str, **extra: Any) -> dict[str, Any]:
    return {"runs-on": "ubuntu-latest", "permissions": {"contents": "read"},
            "steps": [{"run": script}], **extra}


DEPLOYER = {"permissions": {"contents": "read", "id-token": "write"}}


@pytest.mark.parametrize(
    ("case", "script", "expected"),
    [
        ("the Makefile's .venv (before: every deploy job)", "make .venv/stamp",
         "make builds the unhashed .venv"),
        ("pip upgraded from the index", "python -m pip install --upgrade pip",
         "without --require-hashes"),
        ("an unhashed file", "pip install --require-hashes --no-deps -r requirements-dev.txt",
         "requirements-dev.txt has unhashed lines"),
        ("dependencies resolved unhashed",
         "pip install --require-hashes -r .github/requirements/deploy.txt", "without --no-deps"),
        ("a package on the command line",
         "pip install --require-hashes --no-deps -r .github/requirements/deploy.txt pulumi",
         "installs ['pulumi'] named on the command line"),
        ("another installer", "uv pip install -r .github/requirements/deploy.txt",
         "other than through pip's hash-checking mode"),
        ("make test where credentials are", ".ci/run", "`make test` (unhashed .venv)"),
    ],
)
def test_an_unhashed_install_is_reported(case: str, script: str, expected: str) -> None:
    problems = install_problems(workflow({"push": {}}, dev=run_job(script, **DEPLOYER)))
    assert any(expected in problem for problem in problems), (case, problems)


@pytest.mark.parametrize(
    ("case", "script", "expected"),
    [
        ("the starter's Makefile .venv (before: its test, listing and deploy jobs)",
         "make .venv/stamp", "make builds the unhashed .venv"),
        ("the kit by version, its closure unhashed",
         "pip install --require-hashes --no-deps -r requirements.txt",
         "requirements.txt has unhashed lines"),
        ("a lock no recipe writes", "pip install --require-hashes --no-deps -r requirements.lock",
         "requirements.lock does not exist"),
    ],
)
def test_an_unhashed_install_in_the_starter_is_reported(case: str, script: str,
                                                        expected: str) -> None:
    problems = install_problems(workflow({"push": {}}, dev=run_job(script, **DEPLOYER)),
                                TEAM.root)
    assert any(expected in problem for problem in problems), (case, problems)


def test_make_test_without_credentials_is_not_an_install_problem() -> None:
    assert install_problems(workflow({"push": {}}, test=run_job(".ci/run"))) == []


BEFORE_PREVIEW = run_job("true", permissions={"contents": "read", "id-token": "write"},
                         steps=[{"env": {"PULUMI_CONFIG_PASSPHRASE":
                                         "${{ secrets.PULUMI_CONFIG_PASSPHRASE }}"},
                                 "uses": "pulumi/actions@x", "with": {"command": "preview"}}])
BEFORE_LIST = run_job(
    "names=$(python3 -c 'import glob, json; print(json.dumps(sorted(p[len(\"Pulumi.\"):"
    "-len(\".yaml\")] for p in glob.glob(\"Pulumi.*.yaml\"))))')\n"
    'echo "names=${names}" >> "$GITHUB_OUTPUT"\n')
BEFORE_LIST["steps"][0]["id"] = "list"
# Before: root Pulumi.*.yaml files but a hard-coded list of production stacks, so a stack
# a team marks reviewed (reviewBeforeUp) was previewed unless it also edited ci.yml.
BEFORE_HARD_CODED = run_job(
    "names=$(python3 -c 'import glob, json, os; prod = os.environ[\"PRODUCTION_STACKS\"]"
    ".split(); print(json.dumps(sorted(s for s in (p[len(\"Pulumi.\"):-len(\".yaml\")] "
    "for p in glob.glob(\"Pulumi.*.yaml\")) if s not in prod)))')\n"
    'echo "names=${names}" >> "$GITHUB_OUTPUT"\n', outputs={
        "names": "${{ steps.list.outputs.names }}"})
BEFORE_HARD_CODED["steps"][0].update(id="list", env={"PRODUCTION_STACKS": "prod"})


def test_the_preview_as_it_was_is_reported(tmp_path: Path) -> None:
    """Before: every stack file previewed on pull requests, prod included, with the config
    passphrase in a job bound to no environment."""
    before = workflow({"pull_request": None}, stacks=BEFORE_LIST, preview=BEFORE_PREVIEW)
    assert secret_problems(before) == [
        "preview: references a secret but is bound to no environment"]
    problems = pull_request_prod_problems(before, tmp_path)
    assert any("lists production stacks ['prod', 'qa']" in p for p in problems), problems


def test_a_hard_coded_list_of_production_stacks_is_reported(tmp_path: Path) -> None:
    """Before: PRODUCTION_STACKS=prod in ci.yml; the fixture's qa, marked reviewBeforeUp,
    was previewed on pull requests."""
    before = workflow({"pull_request": None}, stacks=BEFORE_HARD_CODED)
    problems = pull_request_prod_problems(before, tmp_path)
    assert any("lists production stacks" in p and "'qa'" in p.rsplit(":", 1)[1]
               for p in problems), problems


@pytest.mark.parametrize(
    ("case", "job", "expected"),
    [
        ("prod's environment on a pull request",
         run_job("true", environment="production"), "runs in `production` on a pull request"),
        ("prod named as the stack",
         run_job("true", steps=[{"uses": "pulumi/actions@x",
                                 "with": {"command": "preview", "stack-name": "acme/prod"}}]),
         "names a production stack"),
    ],
)
def test_a_pull_request_job_reaching_prod_is_reported(case: str, job: dict[str, Any],
                                                      expected: str, tmp_path: Path) -> None:
    problems = pull_request_prod_problems(workflow({"pull_request": None}, job=job), tmp_path)
    assert any(expected in problem for problem in problems), (case, problems)


def test_pull_request_target_is_reported(tmp_path: Path) -> None:
    problems = pull_request_prod_problems(
        workflow({"pull_request_target": None}, job=run_job("true")), tmp_path)
    assert any("pull_request_target" in problem for problem in problems)

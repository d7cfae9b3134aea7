"""An upstream release merges into a fork without a conflict.

In a scratch git history: "upstream" commits the kit's files (this checkout's, minus any
team file: operator_tools/team_files.py); a fork clones it and adds what a team adds, in each of the
team's places only (stacks, jobs with their dependencies and lock, job tests, a policy
config). Upstream then releases a change to every file the kit ships, adds an example
stack, an example job and a module, and removes a file; `git merge` in the fork completes
on its own, keeps every team file as the team wrote it, and takes every kit file as
upstream released it. docs/adopting.md lists the same team places.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from infra import KIT_ROOT as REPO_ROOT
from operator_tools.team_files import TEAM_PLACES, is_team_file
from tests.kit_tree import kit_files

ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
}

# What a team adds, in its places only.
TEAM_FILES = {
    "stacks/Pulumi.staging.yaml": "config:\n  gcp:project: acme-staging\n",
    "stacks/Pulumi.prod.yaml": "config:\n  gcp:project: acme-prod\n",
    "function/jobs/__init__.py": '"""The team\'s jobs."""\n',
    "function/jobs/invoices.py": "def send(context: object) -> None: ...\n",
    "function/jobs/requirements.in": "jsonschema\n",
    "function/jobs/requirements.txt": "jsonschema==4.26.0 --hash=sha256:" + "0" * 64 + "\n",
    "tests/jobs/__init__.py": "",
    "tests/jobs/test_invoices.py": "def test_send() -> None: ...\n",
    "policies/policy-config.staging.json": '{"dedup-alerts-notify": "advisory"}\n',
}


def git(cwd: Path, *args: str) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, env=ENV, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, f"git {' '.join(args)}: {result.stdout}{result.stderr}"
    return result.stdout


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


def test_the_teams_places_hold_none_of_the_kits_files() -> None:
    assert is_team_file("stacks/Pulumi.dev.yaml")
    assert not is_team_file("examples/stacks/Pulumi.dev.yaml")
    assert not is_team_file("function/example_jobs/example.py")
    assert not is_team_file("policies/policy-config.example.json")
    assert not is_team_file("function/requirements.in")


def test_docs_adopting_lists_the_teams_places() -> None:
    text = (REPO_ROOT / "docs" / "adopting.md").read_text(encoding="utf-8")
    table = text.split("## Which files are yours", 1)[1].split("\n\n", 2)[1]
    listed = re.findall(r"^\| `([^`]+)` \|", table, flags=re.MULTILINE)
    assert listed == [place.pattern for place in TEAM_PLACES]


def test_an_upstream_release_touching_every_kit_file_merges_into_a_fork(tmp_path: Path) -> None:
    upstream, fork = tmp_path / "upstream", tmp_path / "fork"
    upstream.mkdir()
    git(upstream, "init", "-q", "-b", "main")
    shipped = kit_files()
    for name in shipped:
        (upstream / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, upstream / name)
    git(upstream, "add", "-A")
    git(upstream, "commit", "-q", "-m", "the kit, as released")

    git(tmp_path, "clone", "-q", str(upstream), str(fork))
    write(fork, TEAM_FILES)
    git(fork, "add", "-A")
    git(fork, "commit", "-q", "-m", "the team's stacks, jobs, dependencies and tests")

    # The next release: every shipped file changed, new kit files, one removed.
    for name in shipped:
        with (upstream / name).open("ab") as out:
            out.write(b"\n# changed by the next release\n")
    write(upstream, {
        "examples/stacks/Pulumi.staging.yaml": "config:\n  gcp:project: example-staging\n",
        "function/example_jobs/report.py": "def run(context: object) -> None: ...\n",
        "infra/new_module.py": '"""A module of the next release."""\n',
    })
    removed = "examples/workflow.yaml"
    assert removed in shipped
    (upstream / removed).unlink()
    git(upstream, "add", "-A")
    git(upstream, "commit", "-q", "-m", "the next release")

    git(fork, "pull", "-q", "--no-rebase", "--no-edit", "origin", "main")
    assert git(fork, "status", "--porcelain") == ""
    for name, text in TEAM_FILES.items():
        assert (fork / name).read_text(encoding="utf-8") == text, name
    for name in [*shipped, "infra/new_module.py"]:
        if name != removed:
            assert (fork / name).read_bytes() == (upstream / name).read_bytes(), name
    assert not (fork / removed).exists()


def changelog_move_script() -> str:
    """The shell lines of CHANGELOG.md's one-time move of a fork's files."""
    text = (REPO_ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    item = text.split("**Your files move out of the kit's places, once**", 1)[1]
    block = item.split("```sh\n", 1)[1].split("```", 1)[0]
    return "\n".join(line.strip() for line in block.splitlines())


NEW_SINCE_1_0_0 = frozenset({"examples/stacks/Pulumi.retail.yaml",
                             "function/example_jobs/retail.py"})
"""Files of the kit that 1.0.0 did not have (its fork cannot hold them at the root)."""


def old_layout(kit: dict[str, bytes]) -> dict[str, bytes]:
    """1.0.0's layout of the same files: the example stacks at the root as the team's, the
    example jobs in function/jobs/ as `jobs.*`, no stackConfigDir."""
    old: dict[str, bytes] = {}
    for name, data in kit.items():
        if name in NEW_SINCE_1_0_0:
            continue
        if name.startswith("examples/stacks/"):
            text = data.decode().replace("example_jobs.", "jobs.")
            old[name.removeprefix("examples/stacks/")] = text.replace(
                "$schema=../../schema/", "$schema=schema/").encode()
        elif name.startswith("function/example_jobs/"):
            old["function/jobs/" + name.removeprefix("function/example_jobs/")] = data
        elif name == "Pulumi.yaml":
            lines = data.decode().splitlines(keepends=True)
            old[name] = "".join(line for line in lines if not line.startswith(
                ("stackConfigDir:", "# The team's stack files", "# `pulumi stack init`"))).encode()
        else:
            old[name] = data
    return old


def commit_tree(repo: Path, files: dict[str, bytes], message: str) -> None:
    for path in repo.iterdir():
        if path.name != ".git":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    for name, data in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def test_changelogs_one_time_move_takes_a_1_0_0_fork_to_the_team_places(tmp_path: Path) -> None:
    kit = {name: (REPO_ROOT / name).read_bytes() for name in kit_files()}
    upstream, fork = tmp_path / "upstream", tmp_path / "fork"
    upstream.mkdir()
    git(upstream, "init", "-q", "-b", "main")
    commit_tree(upstream, old_layout(kit), "1.0.0")
    git(tmp_path, "clone", "-q", "--origin", "upstream", str(upstream), str(fork))
    # The team, on 1.0.0: its own defaultJobLogic on a line the release also changes (so
    # both sides' moves of the file conflict), a stack, a job, a dependency in the kit's file.
    dev = fork / "Pulumi.dev.yaml"
    ours = dev.read_text().replace("defaultJobLogic: jobs.example:run",
                                   "defaultJobLogic: jobs.billing:run")
    assert ours != dev.read_text()
    dev.write_text(ours)
    write(fork, {"Pulumi.staging.yaml": "config:\n  gcp:project: acme-staging\n",
                 "function/jobs/billing.py": "def run(context: object) -> None: ...\n"})
    with (fork / "function" / "requirements.in").open("a") as out:
        out.write("jsonschema==4.26.0\n")
    git(fork, "add", "-A")
    git(fork, "commit", "-q", "-m", "the team's work on 1.0.0")
    before = {p: (fork / p).read_bytes() for p in ("Pulumi.dev.yaml", "Pulumi.staging.yaml")}

    commit_tree(upstream, kit, "this release")
    result = subprocess.run(["bash", "-e", "-c", changelog_move_script()], cwd=fork, env=ENV,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "conflict markers above" not in result.stdout

    assert git(fork, "status", "--porcelain") == ""
    assert len(git(fork, "log", "-1", "--format=%P").split()) == 2  # the merge is committed
    for name, data in before.items():  # the team's stack files, exactly as it had them
        assert (fork / "stacks" / name).read_bytes() == data
    assert not list(fork.glob("Pulumi.*.yaml"))
    for name, data in kit.items():  # the kit's files as released (the one the team edited:
        if name != "function/requirements.in":  # merged, its line moved by hand after)
            assert (fork / name).read_bytes() == data, name
    assert (fork / "function" / "jobs" / "billing.py").is_file()
    assert (fork / "function" / "jobs" / "__init__.py").is_file()
    markers = subprocess.run(["git", "grep", "-l", "-e", "^<<<<<<< "], cwd=fork, env=ENV,
                             capture_output=True, text=True, check=False)
    assert markers.stdout == ""

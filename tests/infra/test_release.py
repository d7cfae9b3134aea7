"""Releases: the kit's version declared once (function/dedup/version.py) and equal to
CHANGELOG.md's latest release, reported in every log line the functions write and in the
stack outputs; `make upgrade-check FROM=...` printing the Upgrading steps between releases."""

from __future__ import annotations

import ast
import io
import json
import re
import subprocess
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest
import requests

from dedup.entry.http import emit_log_line
from dedup.version import __version__
from infra import KIT_ROOT as REPO_ROOT
from local_stack import FunctionServer
from local_stack.deliveries import function_env, scheduler_headers
from operator_tools.upgrade_check import (
    AUDIENCES,
    BY_VERSION,
    CHANGELOG,
    FORK,
    UNVERSIONED,
    UpgradeCheckError,
    current_version,
    development_of,
    main,
    parse_changelog,
    split_steps,
    upgrade_steps,
    version_key,
)
from tests.infra.helpers import StackUnderTest
from tests.infra.test_makefile import make
from tests.kit_tree import kit_files
from tests.waiting import wait_until

VERSION_FILE = REPO_ROOT / "function" / "dedup" / "version.py"
# Keep a Changelog's kinds of change, and the kit's own "Upgrading".
SECTIONS = {"Upgrading", "Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


# --- declared once ------------------------------------------------------------------------


def test_the_version_is_changelogs_latest_release_or_the_next_ones_development() -> None:
    """tests/infra/test_release_cut.py: which of the two, and the rule between releases."""
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev0)?", __version__)
    assert current_version() == __version__
    changelog = parse_changelog(CHANGELOG.read_text())
    upcoming = development_of(__version__)
    if upcoming is None:
        assert changelog.versions[0] == __version__, "bump version.py and CHANGELOG.md together"
    else:
        assert version_key(upcoming) > version_key(changelog.versions[0])


def test_no_other_file_declares_the_version() -> None:
    """No second `__version__` or copy of the number in the kit's code or packaging."""
    others = []
    roots = ("function", "infra", "operator_tools", "policies", "local_stack",
             "scheduler_emulator", "demo", "bench", "simulation", "examples")
    for path in (REPO_ROOT / name for name in kit_files()
                 if name.endswith(".py") and name.split("/", 1)[0] in roots):
        if path == VERSION_FILE:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [t.id for t in getattr(node, "targets", [getattr(node, "target", None)])
                     if isinstance(t, ast.Name)]
            if "__version__" in names or (
                isinstance(node, ast.Constant) and node.value == __version__
            ):
                others.append(f"{path.relative_to(REPO_ROOT)}:{getattr(node, 'lineno', 0)}")
    assert others == []
    # pyproject.toml reads it from version.py instead of declaring its own (hatchling's
    # regex source: its pattern finds this very version there).
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    source = project["tool"]["hatch"]["version"]
    assert REPO_ROOT / source["path"] == VERSION_FILE
    found = re.search(source["pattern"], VERSION_FILE.read_text(), re.M)
    assert found is not None and found["version"] == __version__


def test_the_function_reads_no_package_metadata_for_it() -> None:
    """A constant: nothing but `typing` imported, no importlib.metadata on the hot path."""
    tree = ast.parse(VERSION_FILE.read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "typing"}
    assert not any(isinstance(node, ast.Import) for node in ast.walk(tree))


# --- CHANGELOG.md -------------------------------------------------------------------------


def test_changelog_keeps_a_changelogs_form_with_upgrading_steps_per_release() -> None:
    text = CHANGELOG.read_text()
    assert text.startswith("# Changelog\n")
    assert "https://keepachangelog.com/en/1.1.0/" in text
    changelog = parse_changelog(text)
    assert changelog.unreleased is not None, "an Unreleased section on top"
    headings = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert headings == ["Unreleased", *changelog.versions]
    for release in changelog.releases:
        assert release.date is not None and re.fullmatch(r"\d{4}-\d{2}-\d{2}", release.date)
        assert release.upgrading, f"{release.name} has an Upgrading section with its steps"
    sections = set(re.findall(r"^### (.+?)\s*$", text, re.M))
    assert sections <= SECTIONS, sections - SECTIONS


def test_the_first_releases_steps_name_what_a_running_deployment_needs() -> None:
    first = parse_changelog(CHANGELOG.read_text()).releases[-1]
    assert first.upgrading is not None
    for step in ("make migrate-proxy-records", "X-Dedup-Schedule", "X-Dedup-Forced-Runs",
                 "dstRepeated", "dstSkipped", "forcedRuns", "pulumi up", "dedup.job_logic",
                 "make lock", "DEDUP_TOKEN_SECRET", "roles/cloudtasks.admin",
                 "environment:<name>"):
        assert step in first.upgrading, step
    # Every commit a step names is one of the kit's: a fork tests for it by its hash.
    commits = re.findall(r"`([0-9a-f]{7})`", first.upgrading)
    assert commits
    if git("rev-parse", "--is-shallow-repository") != "false":
        pytest.skip("a shallow clone (CI's checkout) lacks the history the steps name")
    for commit in commits:
        assert git("cat-file", "-t", commit) == "commit", commit


def git(*args: str) -> str:
    result = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=30, check=False)
    return result.stdout.strip() if result.returncode == 0 else ""


# --- reported -----------------------------------------------------------------------------


def test_every_log_line_carries_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    emit_log_line({"severity": "INFO", "message": "hello"})
    emit_log_line({"severity": "INFO", "message": "spoofed", "kit_version": "0.0.1"})
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines == [
        {"severity": "INFO", "message": "hello", "kit_version": __version__},
        {"severity": "INFO", "message": "spoofed", "kit_version": __version__},
    ]


JOB_MODULE = '''
import logging


def run(context):
    logging.getLogger(__name__).info("syncing")
    return {"ok": True}
'''


@pytest.mark.usefixtures("firestore_emulator")
def test_the_served_functions_lines_carry_the_version(
    collection_name: str, tmp_path: Path
) -> None:
    """As deployed: the request's line and the job's own `logging` line alike."""
    (tmp_path / "versioned_job.py").write_text(textwrap.dedent(JOB_MODULE))
    env = function_env(collection_name, tmp_path / "ledger.jsonl", DEDUP_JOB="versioned_job:run")
    with FunctionServer(env, workers=1, threads=2, extra_pythonpath=[tmp_path]) as server:
        reply = requests.post(server.url, headers=scheduler_headers(), data="{}", timeout=30)
        assert reply.status_code == 200, reply.text

        def logged() -> list[dict[str, Any]]:
            written = [json.loads(line) for line in server.log_text.splitlines()
                       if line.startswith("{")]
            loggers = {e.get("logger") for e in written}
            done = any(e.get("outcome") == "completed" for e in written)
            return written if {"versioned_job", None} <= loggers and done else []

        written = wait_until(logged, what="the job's line and the request's line in the log")
    job_lines = [e for e in written if e.get("logger") == "versioned_job"]
    request_lines = [e for e in written if e.get("outcome") == "completed"]
    assert job_lines and request_lines
    assert {e["kit_version"] for e in written} == {__version__}


def test_the_stack_outputs_carry_the_version(stack: StackUnderTest) -> None:
    assert stack.run.outputs["kitVersion"] == __version__


# --- make upgrade-check -------------------------------------------------------------------

SAMPLE = """\
# Changelog

## [Unreleased]

## [2.0.0] - 2027-03-01

### Upgrading

1. Rename `alerts.email` to `alerts.emails`.

### Changed

- Something.

## [1.1.0] - 2027-02-01

### Added

- A key.

### Upgrading

1. `make migrate-proxy-records STACK=<stack>` after `pulumi up`.

## [1.0.0] - 2027-01-01

### Upgrading

1. The first steps.

[Unreleased]: https://example.com/compare/v2.0.0...HEAD
[2.0.0]: https://example.com/compare/v1.1.0...v2.0.0
"""


def test_steps_of_every_release_after_from_oldest_first() -> None:
    changelog = parse_changelog(SAMPLE)
    assert changelog.versions == ["2.0.0", "1.1.0", "1.0.0"]
    printed = upgrade_steps(changelog, "1.0.0", "2.0.0")
    assert "The first steps" not in printed
    assert printed.index("== 1.1.0 (2027-02-01) ==") < printed.index("== 2.0.0 (2027-03-01) ==")
    assert "make migrate-proxy-records STACK=<stack>" in printed
    assert "Rename `alerts.email`" in printed
    assert "Something." not in printed and "A key." not in printed, "Upgrading only"
    assert "example.com" not in printed, "link definitions are not steps"
    assert upgrade_steps(changelog, "v1.1.0", "2.0.0") == upgrade_steps(
        changelog, "1.1.0", "2.0.0"
    )
    everything = upgrade_steps(changelog, UNVERSIONED, "2.0.0")
    assert everything.index("The first steps") < everything.index("make migrate-proxy")


def test_from_the_current_version_there_is_nothing_to_do() -> None:
    changelog = parse_changelog(SAMPLE)
    assert upgrade_steps(changelog, "2.0.0", "2.0.0").startswith("Nothing to do")
    latest = parse_changelog(CHANGELOG.read_text()).versions[0]
    out, err = io.StringIO(), io.StringIO()
    assert main([latest], out, err) == 0
    assert err.getvalue() == ""
    assert out.getvalue().startswith(
        "Nothing to do" if latest == __version__ else f"No release since {latest}")


def test_a_development_version_is_the_release_below_it_and_its_changes() -> None:
    """A checkout (or a deployment) built between releases: `2.1.0.dev0` after 2.0.0."""
    pending = SAMPLE.replace("## [Unreleased]\n",
                             "## [Unreleased]\n\n### Upgrading\n\n1. Move your stacks.\n")
    changelog = parse_changelog(pending)
    printed = upgrade_steps(changelog, "1.1.0", "3.0.0.dev0")
    assert printed.startswith("Upgrading from 1.1.0 to 3.0.0.dev0: the steps of 2.0.0")
    assert printed.index("Rename `alerts.email`") < printed.index("Move your stacks.")
    since = upgrade_steps(changelog, "2.0.0", "3.0.0.dev0")
    assert since.startswith("No release since 2.0.0: this checkout (3.0.0.dev0) is 2.0.0 and")
    assert "Move your stacks." in since
    deployed = upgrade_steps(changelog, "v2.0.0.dev0", "3.0.0.dev0")
    assert deployed.startswith("2.0.0.dev0 is a development build after 1.1.0: it may have "
                               "taken some of the Unreleased steps")
    assert "Rename `alerts.email`" in deployed and "Move your stacks." in deployed
    with pytest.raises(UpgradeCheckError, match=r"latest release is 2\.0\.0 but .* 2\.0\.0\.dev0"):
        upgrade_steps(changelog, "1.1.0", "2.0.0.dev0")  # a development of a release made


def test_unreleased_steps_are_shown_apart() -> None:
    pending = SAMPLE.replace("## [Unreleased]\n",
                             "## [Unreleased]\n\n### Upgrading\n\n1. Move your stacks.\n")
    printed = upgrade_steps(parse_changelog(pending), "2.0.0", "2.0.0")
    assert printed.startswith("Nothing to do")
    assert "== Unreleased (merged into this checkout, not in a release yet) ==" in printed
    assert "Move your stacks." in printed


@pytest.mark.parametrize("bad", ["0.9.0", "1.0", "latest", "3.0.0", ""])
def test_a_from_that_is_no_release_is_refused_with_the_releases(bad: str) -> None:
    with pytest.raises(UpgradeCheckError, match=r"unversioned, 1\.0\.0, 1\.1\.0, 2\.0\.0"):
        upgrade_steps(parse_changelog(SAMPLE), bad, "2.0.0")


def test_a_changelog_out_of_step_with_the_version_is_refused() -> None:
    with pytest.raises(UpgradeCheckError, match=r"latest release is 2\.0\.0 but .* says 2\.1\.0"):
        upgrade_steps(parse_changelog(SAMPLE), "1.0.0", "2.1.0")
    for broken, reason in [
        (SAMPLE.replace("## [1.1.0] - 2027-02-01", "## [1.1] - 2027-02-01"), "MAJOR.MINOR"),
        (SAMPLE.replace("## [1.1.0] - 2027-02-01", "## [1.1.0]"), "no date"),
        (SAMPLE.replace("## [1.1.0]", "## [2.1.0]"), "newest release first"),
        (SAMPLE.replace("## [1.1.0]", "## [1.0.0]"), "listed twice"),
    ]:
        with pytest.raises(UpgradeCheckError, match=reason):
            parse_changelog(broken)


def test_every_upgrade_step_says_whom_it_is_for() -> None:
    """`1. [fork] ...`, `[by version]` or `[both]`: upgrade-check prints each to its own."""
    changelog = parse_changelog(CHANGELOG.read_text())
    sections = [r for r in (changelog.unreleased, *changelog.releases) if r and r.upgrading]
    for release in sections:
        assert release.upgrading is not None
        _, steps = split_steps(release.upgrading)
        assert steps, f"{release.name}: its Upgrading section lists no numbered step"
        untagged = [s.number for s in steps if s.audience not in AUDIENCES]
        assert untagged == [], f"{release.name}: steps {untagged} name no audience"


BY_KIND = (
    SAMPLE.replace("1. Rename `alerts.email`", "1. [by version] Rename `alerts.email`")
    .replace("1. `make migrate-proxy-records",
             "Before you start.\n\n1. [fork] `make migrate-proxy-records")
    .replace("## [Unreleased]\n", "## [Unreleased]\n\n### Upgrading\n\n"
             "1. [both] Move your stacks.\n2. [fork] Merge the workflows.\n")
)


def test_upgrade_check_prints_the_steps_for_the_repository_it_runs_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    changelog = parse_changelog(BY_KIND)
    fork = upgrade_steps(changelog, "1.0.0", "2.0.0", FORK)
    assert "The steps for a fork of the kit, where this runs" in fork
    assert "Before you start.\n\n1. [fork] `make migrate-proxy-records" in fork
    assert "Rename `alerts.email`" not in fork
    assert "No step for a fork of the kit: nothing to do beyond taking the release." in fork
    assert "Move your stacks." in fork and "Merge the workflows." in fork

    by_version = upgrade_steps(changelog, "1.0.0", "2.0.0", BY_VERSION)
    assert "The steps for a repository that depends on the kit by version" in by_version
    assert "make migrate-proxy-records" not in by_version and "Before you start" not in by_version
    assert "== 1.1.0 (2027-02-01) ==\n\nNo step for a repository that depends on the kit by " \
        "version" in by_version
    assert "1. [by version] Rename `alerts.email`" in by_version
    assert "Move your stacks." in by_version and "Merge the workflows." not in by_version

    # The default is the repository it runs in: a checkout is a fork, the installed kit's
    # command runs in a repository that depends on it by version.
    monkeypatch.setattr("operator_tools.upgrade_check.KIT_INSTALLED", True)
    out, err = io.StringIO(), io.StringIO()
    assert main([parse_changelog(CHANGELOG.read_text()).versions[0]], out, err) == 0, err
    assert "depends on the kit by version" in out.getvalue()
    assert "[fork]" not in out.getvalue()


def test_make_upgrade_check(kit_checkout: Path) -> None:
    """The target, as a team runs it (the virtualenv taken as built), in a clone of the kit."""
    latest = parse_changelog(CHANGELOG.read_text()).versions[0]
    current = make(kit_checkout, "upgrade-check", f"FROM={latest}", dry_run=False)
    assert current.returncode == 0, current.stderr
    assert current.stdout.startswith(
        f"Nothing to do: {latest} is this checkout's version" if latest == __version__
        else f"No release since {latest}: this checkout ({__version__})")
    first = make(kit_checkout, "upgrade-check", f"FROM={UNVERSIONED}", dry_run=False)
    assert first.returncode == 0, first.stderr
    assert f"== {latest} (" in first.stdout
    assert "make migrate-proxy-records STACK=<stack>" in first.stdout
    for bad in ("FROM=0.0.1", None):
        refused = make(kit_checkout, "upgrade-check", *([bad] if bad else []), dry_run=False)
        assert refused.returncode == 2
        assert f"{UNVERSIONED}, {latest}" in refused.stderr
        assert "Traceback" not in refused.stderr
    # FOR= names the other kind of repository (--for): a fork's checkout, by version's steps.
    other = make(kit_checkout, "upgrade-check", f"FROM={UNVERSIONED}", "FOR=by version",
                 dry_run=False)
    assert other.returncode == 0, other.stderr
    assert "depends on the kit by version" in other.stdout and "[fork]" not in other.stdout
    assert "[by version]" in other.stdout
    wrong = make(kit_checkout, "upgrade-check", f"FROM={latest}", "FOR=forks", dry_run=False)
    assert wrong.returncode == 2 and "invalid choice: 'forks'" in wrong.stderr


def test_the_starters_make_upgrade_check_passes_for_through(tmp_path: Path) -> None:
    """The starter's target as make runs it (dry run, its virtualenv taken as built)."""
    from operator_tools.init import STARTER

    for name in ("Makefile", "Pulumi.yaml"):  # a project of its own, not the checkout
        (tmp_path / name).write_bytes((STARTER / name).read_bytes())
    for args, command in [
        ((), '.venv/bin/scheduler-dedup upgrade-check "1.0.0"'),
        (("FOR=fork",), '.venv/bin/scheduler-dedup upgrade-check "1.0.0" --for "fork"'),
        (("FOR=by version",),
         '.venv/bin/scheduler-dedup upgrade-check "1.0.0" --for "by version"'),
    ]:
        ran = make(tmp_path, "upgrade-check", "FROM=1.0.0", *args)
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip().splitlines()[-1] == command

"""Versions that mean one thing (operator_tools/release.py): a checkout with unreleased changes
carries the next release's development version, `make dist` refuses a release version that
CHANGELOG.md does not describe, and `make release VERSION=` cuts a release, refusing a number
that breaks CHANGELOG.md's own versioning rule, which every section of it keeps."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from dedup.version import __version__
from infra.component_host import PACKAGE_VERSION, package_version
from operator_tools.release import (
    ReleaseError,
    allowed_releases,
    check_version,
    cut_release,
    development_version,
    history_problems,
    main,
    next_releases,
    released_changelog,
)
from operator_tools.upgrade_check import CHANGELOG, parse_changelog
from tests.infra.test_makefile import make
from tests.kit_tree import kit_clone

HEADER = "# Changelog\n\nThe rule: Upgrading steps bump the major version.\n\n"
WITH_STEPS = HEADER + """\
## [Unreleased]

### Upgrading

1. Rename `alerts.email` to `alerts.emails`.

### Added

- A key.

## [1.0.0] - 2027-01-01

### Upgrading

1. The first steps.

[Unreleased]: #unreleased
[1.0.0]: #100---2027-01-01
"""
ADDITIONS_ONLY = WITH_STEPS.replace(
    "### Upgrading\n\n1. Rename `alerts.email` to `alerts.emails`.\n\n", "", 1)
NOTHING_PENDING = WITH_STEPS.split("## [Unreleased]")[0] + "## [Unreleased]\n\n" + \
    "## [1.0.0]" + WITH_STEPS.split("## [1.0.0]", 1)[1]


# --- the kit's own CHANGELOG.md and version -----------------------------------------------


def test_every_release_of_the_changelog_keeps_its_versioning_rule() -> None:
    """The header states the rule this checks: steps to upgrade make a major release."""
    text = CHANGELOG.read_text()
    assert "bumps the major version" in text.split("## [", 1)[0]
    assert history_problems(parse_changelog(text)) == []


def test_the_checkouts_version_says_what_it_holds() -> None:
    """Unreleased changes: the next release's development version, never 1.0.0's number."""
    changelog = parse_changelog(CHANGELOG.read_text())
    check_version(changelog, __version__)
    if changelog.unreleased and changelog.unreleased.changes:
        assert __version__.endswith(".dev0") and __version__ not in changelog.versions


def test_the_component_package_carries_it_as_a_semantic_version() -> None:
    """Pulumi's package schema takes Semantic Versions; PEP 440's `.dev0` is not one."""
    assert package_version("2.0.0.dev0") == "2.0.0-dev.0"
    assert package_version("2.1.3") == "2.1.3"
    assert package_version(__version__) == PACKAGE_VERSION


# --- the rule -----------------------------------------------------------------------------


def test_a_release_with_steps_is_the_next_major_and_none_skips_a_number() -> None:
    assert allowed_releases("1.4.2", with_steps=True) == ["2.0.0"]
    assert allowed_releases("1.4.2", with_steps=False) == ["2.0.0", "1.5.0", "1.4.3"]
    assert next_releases(parse_changelog(WITH_STEPS)) == ["2.0.0"]
    assert development_version(parse_changelog(WITH_STEPS)) == "2.0.0.dev0"
    assert development_version(parse_changelog(ADDITIONS_ONLY)) == "1.0.1.dev0"


@pytest.mark.parametrize("released", ["1.1.0", "1.0.1", "3.0.0"])
def test_the_history_check_finds_a_release_that_broke_the_rule(released: str) -> None:
    broken = parse_changelog(released_changelog(WITH_STEPS, released, "2027-02-01"))
    assert history_problems(broken) == [
        f"release {released} follows 1.0.0: it must be one of 2.0.0 (its Upgrading section "
        "lists steps, and CHANGELOG.md's rule makes that a major release)"]
    skipping = parse_changelog(released_changelog(ADDITIONS_ONLY, "1.2.0", "2027-02-01"))
    assert history_problems(skipping) == [
        "release 1.2.0 follows 1.0.0: it must be one of 2.0.0, 1.1.0, 1.0.1 (Semantic "
        "Versioning skips no number)"]
    fine = parse_changelog(released_changelog(ADDITIONS_ONLY, "1.1.0", "2027-02-01"))
    assert history_problems(fine) == []


@pytest.mark.parametrize(("text", "version", "fix"), [
    (WITH_STEPS, "1.0.0", "`scheduler-dedup release --dev` (it writes 2.0.0.dev0)"),
    (WITH_STEPS, "1.1.0", "has no section `## [1.1.0] - <date>`: a wheel would be a release "
                          "nobody described. Fix: `make release VERSION=1.1.0`"),
    (WITH_STEPS, "1.1.0.dev0", "must be one of 2.0.0. Fix: `scheduler-dedup release --dev`"),
    (NOTHING_PENDING, "1.0.1", "has no section `## [1.0.1] - <date>`"),
])
def test_a_version_that_does_not_say_what_the_checkout_holds_is_refused(
    text: str, version: str, fix: str,
) -> None:
    with pytest.raises(ReleaseError) as refused:
        check_version(parse_changelog(text), version)
    assert fix in str(refused.value)


def test_the_versions_that_say_what_the_checkout_holds_pass() -> None:
    check_version(parse_changelog(WITH_STEPS), "2.0.0.dev0")
    check_version(parse_changelog(ADDITIONS_ONLY), "1.1.0.dev0")
    check_version(parse_changelog(NOTHING_PENDING), "1.0.0")


# --- cutting a release, in a clone of the kit -----------------------------------------------


def scheduler_dedup(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The command as the Makefile runs it there (its checkout first on the path)."""
    return subprocess.run(
        [str(checkout / ".venv" / "bin" / "scheduler-dedup"), *args], cwd=checkout,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(checkout)},
        capture_output=True, text=True, timeout=120, check=False)


def test_make_release_cuts_one_commits_worth_and_make_dist_refuses_a_bare_bump(
    tmp_path: Path,
) -> None:
    checkout = kit_clone(tmp_path / "kit")
    before = parse_changelog((checkout / "CHANGELOG.md").read_text())
    assert before.unreleased is not None and before.unreleased.changes
    major = allowed_releases(before.versions[0], with_steps=True)[0]
    minor = allowed_releases(before.versions[0], with_steps=False)[1]

    # Bumping version.py alone, as the newcomer did: make dist refuses before it builds.
    version_file = checkout / "function" / "dedup" / "version.py"
    dev_text = version_file.read_text()
    version_file.write_text(re.sub(r'= "[^"]+"', f'= "{minor}"', dev_text))
    refused = make(checkout, "dist", dry_run=False)
    assert refused.returncode != 0
    assert f"make release VERSION={minor}" in refused.stderr, refused.stderr
    assert not (checkout / "dist").exists()
    version_file.write_text(dev_text)

    # A number the rule forbids (the Unreleased section lists upgrade steps).
    forbidden = make(checkout, "release", f"VERSION={minor}", dry_run=False)
    assert forbidden.returncode != 0
    assert f"the next release is one of {major}" in forbidden.stderr, forbidden.stderr
    assert "makes that a major release" in forbidden.stderr

    cut = make(checkout, "release", f"VERSION={major}", dry_run=False)
    assert cut.returncode == 0, cut.stderr
    written = set(re.findall(r"(?m)^wrote (\S+)$", cut.stdout))
    assert written == {"CHANGELOG.md", "function/dedup/version.py", "provider/requirements.txt",
                       "provider/schema.json", "provider/schema.released.json",
                       "examples/team-repo/requirements.txt"}
    after = parse_changelog((checkout / "CHANGELOG.md").read_text())
    assert after.versions == [major, *before.versions]
    assert after.releases[0].upgrading == before.unreleased.upgrading
    assert after.unreleased is not None and not after.unreleased.changes
    assert f'__version__: Final = "{major}"' in version_file.read_text()
    starter = (checkout / "examples/team-repo/requirements.txt").read_text()
    assert f"\nscheduler-dedup-kit=={major}\n" in starter
    assert f"download/v{major}/scheduler_dedup_kit-{major}-py3-none-any.whl" in starter
    schema = json.loads((checkout / "provider/schema.json").read_text())
    assert schema["version"] == major
    assert (checkout / "provider/schema.released.json").read_text() == \
        (checkout / "provider/schema.json").read_text()

    # What follows is consistent: the checks pass, in a fresh process that reads the new
    # version, and the generated files are what `make schema` writes.
    assert scheduler_dedup(checkout, "release", "--check").returncode == 0
    schema_check = scheduler_dedup(checkout, "schema", "--check")
    assert schema_check.returncode == 0, schema_check.stderr
    current = scheduler_dedup(checkout, "upgrade-check", major)
    assert current.stdout.startswith(f"Nothing to do: {major} is this checkout's version")
    # A team repository by version upgrading to it is shown its steps, and no fork's.
    upgrade = scheduler_dedup(checkout, "upgrade-check", before.versions[0], "--for",
                              "by version")
    assert upgrade.returncode == 0, upgrade.stderr
    assert upgrade.stdout.startswith(f"Upgrading from {before.versions[0]} to {major}")
    assert f"== {major} (" in upgrade.stdout and "[by version]" in upgrade.stdout
    assert "[fork]" not in upgrade.stdout and "== Unreleased" not in upgrade.stdout

    # Nothing left to release; the next change makes it a development version again.
    again = scheduler_dedup(checkout, "release", f"{major[0]}.0.1")
    assert again.returncode == 2 and "lists nothing: no release to cut" in again.stderr


def test_a_release_date_is_checked(tmp_path: Path) -> None:
    (tmp_path / "CHANGELOG.md").write_text(WITH_STEPS)
    with pytest.raises(ReleaseError, match="YYYY-MM-DD"):
        cut_release(tmp_path, "2.0.0", "1 Feb 2027")


def test_release_needs_a_version_or_a_mode(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as usage:
        main([])
    assert usage.value.code == 2
    assert "give VERSION, or --check, or --dev" in capsys.readouterr().err

"""`scheduler-dedup release VERSION` (`make release VERSION=`): a release cut in one commit's
worth of file changes, and the check that the checkout's version means one thing.

    scheduler-dedup release 2.0.0 [--date YYYY-MM-DD]   # cut a release (the person commits)
    scheduler-dedup release --dev                       # the next release's development version
    scheduler-dedup release --check                     # `make dist` runs it first

What a version says (`check_version`): a checkout whose CHANGELOG.md lists changes under
`## [Unreleased]` carries the development version of the next release (PEP 440's
`2.0.0.dev0`), never the last release's number; one without carries its latest release's.
A release version that CHANGELOG.md has no section for is refused, naming the fix.

Which numbers a release may take (`allowed_releases`): CHANGELOG.md's header states the
kit's rule, "a release whose Upgrading steps require more than `git merge upstream/main` and
`pulumi up` bumps the major version", and every step the kit lists is such a step; so a
release with an Upgrading step is the next major version, one without the next major, minor
or patch version (Semantic Versioning: no number skipped). `history_problems` checks every
section of CHANGELOG.md against it (tests/infra/test_release.py).

Cutting a release (`cut_release`) moves the Unreleased section under `## [VERSION] - DATE`,
and writes the version into function/dedup/version.py, the component package's schema and
pin (provider/schema.json, provider/requirements.txt), the released schema the
breaking-change test compares with (provider/schema.released.json) and the starter's pin
(examples/team-repo/requirements.txt). It edits files only: the person reviews and commits
them as one commit, then tags it `vVERSION` (docs/by-version.md).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from infra import KIT_ROOT
from operator_tools.upgrade_check import (
    UNRELEASED,
    Changelog,
    Release,
    UpgradeCheckError,
    current_version,
    development_of,
    parse_changelog,
    version_key,
)

CHANGELOG_PATH: Final = Path("CHANGELOG.md")
VERSION_PATH: Final = Path("function/dedup/version.py")
STARTER_REQUIREMENTS_PATH: Final = Path("examples/team-repo/requirements.txt")
_VERSION_LINE: Final = re.compile(r'(?m)^__version__: Final = "[^"]+"$')
_STARTER_PIN: Final = re.compile(r"(?m)^scheduler-dedup-kit==\S+$")
# The starter's example of a release's wheel by URL: its tag and file name.
_STARTER_WHEEL_URL: Final = re.compile(
    r"releases/download/v[^/\s]+/scheduler_dedup_kit-[^-\s]+-py3-none-any\.whl")
_STEP: Final = re.compile(r"(?m)^\d+\.\s")


class ReleaseError(Exception):
    """One line: what is refused, and the fix."""


def has_upgrade_steps(release: Release) -> bool:
    """Whether the release's Upgrading section lists a step (a numbered item)."""
    return bool(release.upgrading and _STEP.search(release.upgrading))


def allowed_releases(latest: str, with_steps: bool) -> list[str]:
    """The numbers the release after `latest` may take (see the module's docstring)."""
    major, minor, patch = version_key(latest)
    bumps = [f"{major + 1}.0.0"]
    if not with_steps:
        bumps += [f"{major}.{minor + 1}.0", f"{major}.{minor}.{patch + 1}"]
    return bumps


def _why(with_steps: bool) -> str:
    return ("its Upgrading section lists steps, and CHANGELOG.md's rule makes that a major "
            "release" if with_steps else "Semantic Versioning skips no number")


def history_problems(changelog: Changelog) -> list[str]:
    """Each release of CHANGELOG.md whose number breaks the rule, against the one below it."""
    problems: list[str] = []
    ordered = list(reversed(changelog.releases))
    for older, newer in itertools.pairwise(ordered):
        steps = has_upgrade_steps(newer)
        allowed = allowed_releases(older.name, steps)
        if newer.name not in allowed:
            problems.append(f"release {newer.name} follows {older.name}: it must be one of "
                            f"{', '.join(allowed)} ({_why(steps)})")
    return problems


def unreleased_changes(changelog: Changelog) -> bool:
    return changelog.unreleased is not None and bool(changelog.unreleased.changes)


def next_releases(changelog: Changelog) -> list[str]:
    """The numbers the next release may take, from the latest and the Unreleased section."""
    if not changelog.releases:
        raise ReleaseError("CHANGELOG.md lists no release")
    pending = changelog.unreleased
    return allowed_releases(changelog.releases[0].name,
                            pending is not None and has_upgrade_steps(pending))


def development_version(changelog: Changelog) -> str:
    """What a checkout with unreleased changes carries: the smallest next release's `.dev0`."""
    return f"{min(next_releases(changelog), key=version_key)}.dev0"


def check_version(changelog: Changelog, version: str) -> None:
    """Refuse a version that does not say what the checkout holds (ReleaseError, the fix)."""
    latest = changelog.releases[0].name if changelog.releases else None
    upcoming = development_of(version)
    if upcoming is not None:
        if upcoming not in next_releases(changelog):
            raise ReleaseError(
                f"{VERSION_PATH} says {version}, a development version of {upcoming}, but the "
                f"release after {latest} must be one of {', '.join(next_releases(changelog))}. "
                "Fix: `scheduler-dedup release --dev` (it writes "
                f"{development_version(changelog)})")
        return
    if version not in (r.name for r in changelog.releases):
        raise ReleaseError(
            f"{VERSION_PATH} says {version} but {CHANGELOG_PATH} has no section "
            f"`## [{version}] - <date>`: a wheel would be a release nobody described. Fix: "
            f"`make release VERSION={version}` (it moves the Unreleased section there and "
            f"writes the version everywhere), or `scheduler-dedup release --dev` for a build "
            f"that is no release")
    if version != latest:
        raise ReleaseError(f"{VERSION_PATH} says {version} but the latest release in "
                           f"{CHANGELOG_PATH} is {latest}: a release bumps both together")
    if unreleased_changes(changelog):
        raise ReleaseError(
            f"{VERSION_PATH} says {version}, the last release's number, but {CHANGELOG_PATH}'s "
            f"Unreleased section lists changes: a build would pass for {version} without being "
            f"it. Fix: `scheduler-dedup release --dev` (it writes "
            f"{development_version(changelog)}), or cut the release: `make release "
            f"VERSION={next_releases(changelog)[0]}`")


def _anchor(version: str, date: str) -> str:
    """The docs site's anchor of `## [1.0.0] - 2026-12-01`: `#100---2026-12-01`."""
    return f"#{version.replace('.', '')}---{date}"


def released_changelog(text: str, version: str, date: str) -> str:
    """CHANGELOG.md with the Unreleased section's content under `## [version] - date`."""
    heading = f"## [{UNRELEASED}]\n"
    if heading not in text:
        raise ReleaseError(f"{CHANGELOG_PATH} has no `## [{UNRELEASED}]` heading")
    text = text.replace(heading, f"{heading}\n## [{version}] - {date}\n", 1)
    link = re.search(rf"(?m)^\[{UNRELEASED}\]:.*\n", text)
    if link is not None:
        text = (text[:link.end()] + f"[{version}]: {_anchor(version, date)}\n"
                + text[link.end():])
    return text


def _replace_once(pattern: re.Pattern[str], text: str, by: str, path: Path) -> str:
    replaced, count = pattern.subn(by, text)
    if count == 0:
        raise ReleaseError(f"{path}: found nothing matching {pattern.pattern!r} to update")
    return replaced


def versioned_files(root: Path, version: str) -> dict[Path, str]:
    """Each file that names the kit's version, under `root`, with `version` written in."""
    from infra.component_host import package_version
    from operator_tools.schema import (
        PACKAGE_SCHEMA_PATH,
        PROVIDER_REQUIREMENTS_PATH,
        RELEASED_SCHEMA_PATH,
        package_schema,
        provider_requirements,
    )

    version_file, starter = root / VERSION_PATH, root / STARTER_REQUIREMENTS_PATH
    starter_text = _replace_once(_STARTER_PIN, starter.read_text(encoding="utf-8"),
                                 f"scheduler-dedup-kit=={version}", starter)
    if development_of(version) is None:  # a development version has no release to download
        starter_text = _STARTER_WHEEL_URL.sub(
            f"releases/download/v{version}/scheduler_dedup_kit-{version}-py3-none-any.whl",
            starter_text)
    files = {
        version_file: _replace_once(_VERSION_LINE, version_file.read_text(encoding="utf-8"),
                                    f'__version__: Final = "{version}"', version_file),
        starter: starter_text,
        root / PROVIDER_REQUIREMENTS_PATH: provider_requirements(version),
    }
    # The package's schema is the component's, only its version changes with the kit's.
    schema = {**package_schema(), "version": package_version(version)}
    files[root / PACKAGE_SCHEMA_PATH] = json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
    if development_of(version) is None:
        files[root / RELEASED_SCHEMA_PATH] = files[root / PACKAGE_SCHEMA_PATH]
    return files


def cut_release(root: Path, version: str, date: str) -> list[Path]:
    """Write release `version` into the checkout at `root`; the files changed."""
    changelog_path = root / CHANGELOG_PATH
    text = changelog_path.read_text(encoding="utf-8")
    changelog = parse_changelog(text)
    if not unreleased_changes(changelog):
        raise ReleaseError(f"{CHANGELOG_PATH}'s Unreleased section lists nothing: no release "
                           "to cut")
    allowed = next_releases(changelog)
    if version not in allowed:
        pending = changelog.unreleased
        raise ReleaseError(
            f"{version} cannot follow {changelog.releases[0].name}: the next release is one of "
            f"{', '.join(allowed)} ({_why(pending is not None and has_upgrade_steps(pending))})")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
        raise ReleaseError(f"--date {date}: write it YYYY-MM-DD")
    files = {changelog_path: released_changelog(text, version, date),
             **versioned_files(root, version)}
    return _write(files)


def set_development_version(root: Path) -> list[Path]:
    """Write the next release's development version into the checkout; the files changed."""
    changelog = parse_changelog((root / CHANGELOG_PATH).read_text(encoding="utf-8"))
    return _write(versioned_files(root, development_version(changelog)))


def _write(files: dict[Path, str]) -> list[Path]:
    changed = [path for path, text in files.items()
               if not path.exists() or path.read_text(encoding="utf-8") != text]
    for path in changed:
        path.write_text(files[path], encoding="utf-8")
    return changed


def main(argv: Sequence[str] | None = None, root: Path = KIT_ROOT) -> int:
    parser = argparse.ArgumentParser(
        prog="scheduler-dedup release",
        description="Cut release VERSION (CHANGELOG.md's Unreleased section becomes its "
        "section; the version, the component schema and the starter's pin follow), or "
        "--check the checkout's version, or set the next release's --dev version.")
    parser.add_argument("version", metavar="VERSION", nargs="?",
                        help="the release, MAJOR.MINOR.PATCH")
    parser.add_argument("--date", default=datetime.datetime.now(datetime.UTC).date().isoformat(),
                        help="the release's date, YYYY-MM-DD (default: today, UTC)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="only check that the version says what the checkout holds")
    mode.add_argument("--dev", action="store_true",
                      help="write the next release's development version (X.Y.Z.dev0)")
    args = parser.parse_args(argv)
    if bool(args.version) == (args.check or args.dev):
        parser.error("give VERSION, or --check, or --dev")
    try:
        if args.check:
            changelog = parse_changelog((root / CHANGELOG_PATH).read_text(encoding="utf-8"))
            check_version(changelog, current_version(root / VERSION_PATH))
            return 0
        written = (set_development_version(root) if args.dev
                   else cut_release(root, args.version, args.date))
    except (ReleaseError, UpgradeCheckError, OSError) as exc:
        print(f"scheduler-dedup release: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path.relative_to(root)}")
    if args.version:
        print(f"Review, then commit these files together and tag the commit: git commit -am "
              f"'Release {args.version}' && git tag v{args.version} (docs/by-version.md)")
    return 0


if __name__ == "__main__":  # the entry point is scheduler-dedup (operator_tools.__main__)
    from operator_tools import not_an_entry_point

    not_an_entry_point("release")

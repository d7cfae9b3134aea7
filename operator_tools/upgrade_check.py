"""`make upgrade-check FROM=1.0.0`: the steps a running deployment needs to reach this
checkout's release, from CHANGELOG.md's "Upgrading" sections.

    scheduler-dedup upgrade-check FROM [--for fork|"by version"] [--changelog PATH]

FROM is the release the deployment runs (`pulumi stack output kitVersion --stack <stack>`),
or `unversioned` for a checkout from before the first release. Printed: the "Upgrading"
section of every release after FROM up to this checkout's version
(function/dedup/version.py), oldest first, the order to apply them in; then the
Unreleased section's steps, if it has any (changes merged here, not yet released). FROM
equal to this version prints "nothing to do". A checkout with unreleased changes carries
the development version of the next release (`2.0.0.dev0`, operator_tools/release.py); as
FROM, such a version stands for the release below it, and the Unreleased steps are said to
be possibly done already. A FROM that is no released version, or a changelog out of step
with the version, is one line naming what is wrong and the versions there are (exit 2).

Each step says whom it is for (`1. [fork] ...`, `[by version]`, `[both]`): only the steps
for the kind of repository this runs in are printed (by version where the kit runs from its
wheel, a fork in a checkout; `--for` names the other), and a release with none for it says
so.

Standard library only: no Pulumi, no Google client, and the version is read from its one
file without importing the function's package.
"""

from __future__ import annotations

import argparse
import re
import runpy
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

from infra import KIT_FUNCTION_DIR, KIT_INSTALLED, KIT_ROOT

CHANGELOG: Final = KIT_ROOT / "CHANGELOG.md"
VERSION_FILE: Final = KIT_FUNCTION_DIR / "dedup" / "version.py"
UNRELEASED: Final = "Unreleased"
# FROM for a deployment of a checkout older than the first release.
UNVERSIONED: Final = "unversioned"
UPGRADING: Final = "Upgrading"
# Whom a step is for: the tag that starts it (`1. [fork] ...`), and the repositories it fits.
FORK: Final = "fork"
BY_VERSION: Final = "by version"
AUDIENCES: Final = {FORK: {FORK}, BY_VERSION: {BY_VERSION}, "both": {FORK, BY_VERSION}}
REPOSITORY_KINDS: Final = {FORK: "a fork of the kit", BY_VERSION: "a repository that depends on "
                           "the kit by version"}

_RELEASE = re.compile(r"^## \[(?P<name>[^\]]+)\](?:\s+-\s+(?P<date>\d{4}-\d{2}-\d{2}))?\s*$")
_SECTION = re.compile(r"^### (?P<title>.+?)\s*$")
_LINK_DEFINITION = re.compile(r"^\[[^\]]+\]:\s")
_VERSION = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
# PEP 440's development release of a version: what a checkout with unreleased changes carries.
_DEVELOPMENT = re.compile(r"^(?P<release>\d+\.\d+\.\d+)\.dev(0|[1-9]\d*)$")
_HEADING = re.compile(r"^#{1,6}\s")
_STEP = re.compile(r"^(?P<number>\d+)\.\s+(?:\[(?P<audience>[^\]]+)\]\s)?")


class UpgradeCheckError(Exception):
    """One line: what is wrong with FROM or the changelog, and what would be right."""


@dataclass(frozen=True)
class Release:
    name: str  # "1.0.0", or "Unreleased"
    date: str | None
    upgrading: str | None  # the "### Upgrading" text, stripped; None without that section
    changes: str = ""  # every line under the release's heading but headings and links, stripped


@dataclass(frozen=True)
class Changelog:
    unreleased: Release | None
    releases: tuple[Release, ...]  # newest first, as the file lists them

    @property
    def versions(self) -> list[str]:
        return [r.name for r in self.releases]


def version_key(version: str) -> tuple[int, int, int]:
    match = _VERSION.match(version)
    if match is None:
        raise UpgradeCheckError(f"{version!r} is not a version of the form MAJOR.MINOR.PATCH")
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def development_of(version: str) -> str | None:
    """The release a development version leads to (`2.0.0.dev0` -> `2.0.0`), else None."""
    match = _DEVELOPMENT.match(version)
    return None if match is None else match["release"]


def parse_changelog(text: str) -> Changelog:
    """The releases of a Keep a Changelog file (`## [1.0.0] - 2026-12-01`), each with its
    "### Upgrading" text; `## [Unreleased]` apart."""
    found: list[tuple[str, str | None, list[str]]] = []
    for line in text.splitlines():
        heading = _RELEASE.match(line)
        if heading is not None:
            found.append((heading["name"], heading["date"], []))
        elif found:
            found[-1][2].append(line)
    unreleased: Release | None = None
    releases: list[Release] = []
    for name, date, lines in found:
        changes = "\n".join(line for line in lines
                            if not _HEADING.match(line) and not _LINK_DEFINITION.match(line))
        release = Release(name, date, _section(lines, UPGRADING), changes.strip())
        if name.lower() == UNRELEASED.lower():
            if unreleased is not None or releases:
                raise UpgradeCheckError(f"## [{UNRELEASED}] must come once, above every release")
            unreleased = release
            continue
        version_key(name)  # a heading like "## [1.0]" is an error, not skipped
        if date is None:
            raise UpgradeCheckError(f"release {name} has no date: write `## [{name}] - YYYY-MM-DD`")
        if name in (r.name for r in releases):
            raise UpgradeCheckError(f"release {name} is listed twice")
        if releases and version_key(name) >= version_key(releases[-1].name):
            raise UpgradeCheckError(
                f"release {name} is listed below {releases[-1].name}: newest release first"
            )
        releases.append(release)
    return Changelog(unreleased, tuple(releases))


def _section(lines: Sequence[str], title: str) -> str | None:
    """The text under `### <title>` up to the next heading or link definition."""
    collected: list[str] | None = None
    for line in lines:
        heading = _SECTION.match(line)
        if heading is not None:
            if collected is not None:
                break
            if heading["title"].lower() == title.lower():
                collected = []
            continue
        if collected is not None:
            if _LINK_DEFINITION.match(line):
                break
            collected.append(line)
    return None if collected is None else "\n".join(collected).strip()


@dataclass(frozen=True)
class Step:
    number: str
    audience: str | None  # "fork", "by version" or "both"; None when the step names none
    text: str


def split_steps(upgrading: str) -> tuple[str, list[Step]]:
    """An Upgrading section's text before its first step, and its numbered steps."""
    preamble: list[str] = []
    steps: list[tuple[str, str | None, list[str]]] = []
    for line in upgrading.splitlines():
        step = _STEP.match(line)
        if step is not None:
            steps.append((step["number"], step["audience"], [line]))
        elif steps:
            steps[-1][2].append(line)
        else:
            preamble.append(line)
    return ("\n".join(preamble).strip(),
            [Step(number, audience, "\n".join(lines).strip()) for number, audience, lines in steps])


def steps_for(upgrading: str, kind: str) -> str | None:
    """The section as `kind` of repository needs it: its steps for that kind (an untagged
    step counts for both), with the text before them; None if no step is for it."""
    preamble, steps = split_steps(upgrading)
    if not steps:
        return upgrading
    kept = [s.text for s in steps if kind in AUDIENCES.get(s.audience or "both", {kind})]
    if not kept:
        return None
    return "\n".join([*([preamble, ""] if preamble else []), *kept])


def repository_kind() -> str:
    """The kind of repository this runs in: by version where the kit is installed."""
    return BY_VERSION if KIT_INSTALLED else FORK


def current_version(version_file: Path = VERSION_FILE) -> str:
    """`__version__` of function/dedup/version.py, run as a file (not the package)."""
    value = runpy.run_path(str(version_file)).get("__version__")
    if not isinstance(value, str):
        raise UpgradeCheckError(f"{version_file} declares no __version__ string")
    return value


def _choices(changelog: Changelog) -> str:
    return ", ".join([UNVERSIONED, *reversed(changelog.versions)])


def upgrade_steps(changelog: Changelog, from_version: str, current: str,
                  kind: str = FORK) -> str:
    """What to print for a deployment at `from_version` reaching `current`, in `kind` of
    repository (FORK, BY_VERSION): the steps for it alone."""
    if not changelog.releases:
        raise UpgradeCheckError("CHANGELOG.md lists no release")
    latest = changelog.releases[0].name
    upcoming = development_of(current)
    if latest != current and (upcoming is None or version_key(upcoming) <= version_key(latest)):
        raise UpgradeCheckError(
            f"CHANGELOG.md's latest release is {latest} but function/dedup/version.py says "
            f"{current}: a release bumps both together (`scheduler-dedup release --check`)"
        )
    wanted = from_version.strip()
    if wanted[:1] in ("v", "V") and (_VERSION.match(wanted[1:]) or development_of(wanted[1:])):
        wanted = wanted[1:]
    if wanted.lower() == UNVERSIONED:
        wanted = UNVERSIONED
    development_build, built = development_of(wanted), wanted
    if development_build is not None:
        # A build with unreleased changes holds the release below it, and perhaps some of
        # the Unreleased steps (which ones, its version cannot say).
        below = [r.name for r in changelog.releases
                 if version_key(r.name) < version_key(development_build)]
        wanted = below[0] if below else UNVERSIONED
    if not wanted:
        raise UpgradeCheckError(
            "make upgrade-check needs FROM=<the version you run> (`pulumi stack output "
            f"kitVersion --stack <stack>`): one of {_choices(changelog)}"
        )
    if wanted != UNVERSIONED and wanted not in changelog.versions:
        raise UpgradeCheckError(
            f"FROM={from_version} is not a released version; the releases are "
            f"{_choices(changelog)} (CHANGELOG.md; `unversioned` for a checkout from before "
            "the first release)"
        )
    newer = [r for r in reversed(changelog.releases)
             if wanted == UNVERSIONED or version_key(r.name) > version_key(wanted)]
    pending = changelog.unreleased.upgrading if changelog.unreleased else None
    shown = "an unversioned checkout" if wanted == UNVERSIONED else wanted
    parts: list[str] = []
    if development_build is not None:
        parts.append(f"{built} is a development build after {shown}: it may "
                     f"have taken some of the Unreleased steps; the releases' steps apply.")
    if not newer:
        parts.append(f"Nothing to do: {shown} is this checkout's version ({current})."
                     if current == wanted else
                     f"No release since {shown}: this checkout ({current}) is {shown} and "
                     "the changes not in a release yet.")
    else:
        names = ", ".join(r.name for r in newer)
        parts.append(
            f"Upgrading from {shown} to {current}: the steps of {names}, in this order "
            "(CHANGELOG.md)."
        )
    if newer or pending:
        parts.append(f"The steps for {REPOSITORY_KINDS[kind]}, where this runs; the others' "
                     "are left out.")
    for release in newer:
        parts.append(f"== {release.name} ({release.date}) ==")
        parts.append(_for_kind(release.upgrading, kind))
    if pending:
        parts.append(f"== {UNRELEASED} (merged into this checkout, not in a release yet) ==")
        parts.append(_for_kind(pending, kind))
    return "\n\n".join(parts) + "\n"


def _for_kind(upgrading: str | None, kind: str) -> str:
    if not upgrading:
        return "No steps beyond `git merge` and `pulumi up`."
    kept = steps_for(upgrading, kind)
    if kept is None:
        return f"No step for {REPOSITORY_KINDS[kind]}: nothing to do beyond taking the release."
    return kept


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout,
         err: TextIO = sys.stderr) -> int:
    parser = argparse.ArgumentParser(
        prog="scheduler-dedup upgrade-check",
        description="The Upgrading steps of every release after FROM (CHANGELOG.md).",
    )
    parser.add_argument("from_version", metavar="FROM", nargs="?", default="",
                        help=f"the release you run, or {UNVERSIONED}")
    parser.add_argument("--changelog", type=Path, default=CHANGELOG)
    parser.add_argument("--for", dest="kind", choices=sorted(REPOSITORY_KINDS),
                        default=repository_kind(),
                        help="the kind of repository whose steps to print (default: this one's, "
                        f"{repository_kind()!r})")
    args = parser.parse_args(argv)
    try:
        changelog = parse_changelog(args.changelog.read_text(encoding="utf-8"))
        out.write(upgrade_steps(changelog, args.from_version, current_version(), args.kind))
    except (UpgradeCheckError, OSError) as exc:
        err.write(f"upgrade-check: {exc}\n")
        return 2
    return 0


if __name__ == "__main__":
    from operator_tools import not_an_entry_point

    not_an_entry_point("upgrade-check")

"""The wheel's Requires-Dist (`make dist`, pyproject.toml's [tool.hatch.metadata.hooks.custom]):
the kit's runtime needs, read at build time from the files that already declare them, so a
pin is written once and a changed pin changes the wheel.

Each file pins exactly (`name==version`); a package named by several (croniter by three) is
listed once, and two different pins of it fail the build naming both files. The packages
those need in turn are pinned too, from requirements-dist.txt (`make lock-kit`: the
declaring files resolved at constraints.txt's versions), so a team's install gets the
versions the kit was tested with, all the way down, as the function's lock does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from hatchling.metadata.plugin.interface import MetadataHookInterface
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

# What each runs, in the order Requires-Dist lists them.
DECLARING_FILES: Final = (
    "requirements.txt",  # the Pulumi program
    "function/requirements.in",  # the function's direct dependencies
    "policies/requirements.txt",  # the policy pack
    "requirements-tools.txt",  # what the tools import, or run (uv), and nothing else pins
)
CLOSURE_FILE: Final = "requirements-dist.txt"
"""Everything the declaring files need, transitively, pinned (`make lock-kit`)."""


def requirement_lines(path: Path) -> list[str]:
    """A requirements file's requirements: no comments, no options (`-r`, `-c`, `--hash`),
    continuation lines joined."""
    lines: list[str] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = (pending + line).strip(), ""
        # `--hash=...` after the requirement: pip's option, not part of it.
        line = " ".join(word for word in line.split() if not word.startswith("--"))
        if line and not line.startswith("-"):
            lines.append(line)
    return lines


def pinned_requirements(root: Path, files: tuple[str, ...] = DECLARING_FILES) -> list[str]:
    """Every requirement of `files` (relative to `root`) once, as `name==version`."""
    pins: dict[str, tuple[str, str]] = {}  # canonical name -> (requirement, its file)
    for relative in files:
        for line in requirement_lines(root / relative):
            try:
                requirement = Requirement(line)
            except InvalidRequirement as error:
                raise ValueError(f"{relative}: {line!r} is not a requirement: {error}") from None
            specifiers = list(requirement.specifier)
            if len(specifiers) != 1 or specifiers[0].operator != "==":
                raise ValueError(f"{relative}: {line!r} is not pinned exactly (name==version)")
            name = canonicalize_name(requirement.name)
            if name in pins and Requirement(pins[name][0]).specifier != requirement.specifier:
                raise ValueError(f"{name} is pinned twice, differently: {pins[name][0]!r} in "
                                 f"{pins[name][1]}, {str(requirement)!r} in {relative}")
            pins.setdefault(name, (str(requirement), relative))
    return [requirement for requirement, _ in pins.values()]


class PinnedDependencies(MetadataHookInterface):
    """hatchling's custom metadata hook (https://hatch.pypa.io/latest/plugins/metadata-hook/custom/)."""

    PLUGIN_NAME = "custom"

    def update(self, metadata: dict[str, Any]) -> None:
        metadata["dependencies"] = pinned_requirements(
            Path(self.root), (*DECLARING_FILES, CLOSURE_FILE))

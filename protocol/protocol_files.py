"""What the protocol's wheel carries (`make protocol-dist`, pyproject.toml's
[tool.hatch.build.targets.wheel.hooks.custom]): the kit's function/dedup as `dedup`, file
by file, but dedup/watchdog/ (the kit's watchdog function: a service never runs it) and
caches, and PEP 561's py.typed marker (dedup is typed: a service's mypy reads its hints).
A hook, because the package lives outside this folder: hatchling maps such a path only by
force-include, and force-include takes no exclusions."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PACKAGE: Final = "dedup"
SOURCE: Final = Path("..") / "function" / PACKAGE
LEFT_OUT: Final = ("watchdog",)
"""Subpackages of dedup/ a service never imports (tests/adapters/test_install_bounds.py
imports every module the wheel carries, alone)."""
TYPED_MARKER: Final = "py.typed"
"""Kept here (protocol/py.typed), not in function/dedup: the kit's function needs none."""


def shipped_files(source: Path) -> dict[str, str]:
    """{file: its path in the wheel} for every source file of `source` but LEFT_OUT's."""
    return {
        str(path): f"{PACKAGE}/{path.relative_to(source).as_posix()}"
        for path in sorted(source.rglob("*.py"))
        if path.relative_to(source).parts[0] not in LEFT_OUT and "__pycache__" not in path.parts
    }


class ProtocolFiles(BuildHookInterface):  # type: ignore[type-arg]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        build_data["force_include"].update(shipped_files(Path(self.root) / SOURCE))
        build_data["force_include"][str(Path(self.root) / TYPED_MARKER)] = (
            f"{PACKAGE}/{TYPED_MARKER}")

"""docs/layout.md is the map of the house: a room per row, and what each may import. These
tests hold the code to it: every module is in a room, and every import of a kit module
(module-level or inside a function) goes to the module's own room or one the map allows."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
LAYOUT = REPO_ROOT / "docs" / "layout.md"
# Where `import x` finds the kit's modules: function/ is the Cloud Run source root
# (pyproject.toml's pythonpath), then the repository.
IMPORT_ROOTS = (REPO_ROOT / "function", REPO_ROOT)
# hatch_build.py: the wheel's build hook (docs/layout.md, "Outside the rooms"), run by
# hatchling, never imported by the kit.
NOT_ROOMS = (".", "build", "dist", "site", "node_modules", "hatch_build.py")


@dataclass(frozen=True)
class Room:
    path: str  # "infra/" (a folder) or "function/main.py" (a file)
    may_import: frozenset[str]

    def holds(self, relative: str) -> bool:
        return relative.startswith(self.path) if self.path.endswith("/") else relative == self.path


def rooms() -> list[Room]:
    """The map's rows. The last column names rooms in backticks; "`x/` and its
    subpackages" is x/ and every room under it; "every room above" every earlier row; "any
    room" every row; "but `x/`" takes x/ out again."""
    rows = [line for line in LAYOUT.read_text(encoding="utf-8").splitlines()
            if line.startswith("| `")]
    paths = [re.findall(r"`([^`]+)`", row.split("|")[1])[0] for row in rows]
    found: list[Room] = []
    for index, row in enumerate(rows):
        cell = row.split("|")[3]
        allowed: set[str] = set()
        if "every room above" in cell:
            allowed |= set(paths[:index])
        if "any room" in cell:
            allowed |= set(paths)
        for name, subpackages in re.findall(r"`([^`]+)`( and its subpackages)?", cell):
            if f"but `{name}`" in cell:
                allowed -= {p for p in paths if p.startswith(name)}
                continue
            allowed |= {p for p in paths if p.startswith(name)} if subpackages else {name}
        found.append(Room(paths[index], frozenset(allowed)))
    return found


def room_of(relative: str, all_rooms: list[Room]) -> Room | None:
    holding = [room for room in all_rooms if room.holds(relative)]
    return max(holding, key=lambda room: len(room.path)) if holding else None


def module_file(name: str) -> str | None:
    """The repository-relative file of kit module `name`, None for any other module."""
    parts = name.split(".")
    for root in IMPORT_ROOTS:
        for candidate in (root.joinpath(*parts).with_suffix(".py"),
                          root.joinpath(*parts, "__init__.py")):
            if candidate.is_file():
                return candidate.relative_to(REPO_ROOT).as_posix()
    return None


DOTTED = re.compile(r"[a-z_]+(\.[a-z_]+)+")


def imported_files(path: Path) -> set[str]:
    """The kit modules `path` imports, anywhere in it (`from pkg import module` included),
    and those it names as a string to import by name (operator_tools' COMMANDS)."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and DOTTED.fullmatch(node.value):
            names = [node.value]
        targets |= {file for name in names if (file := module_file(name)) is not None}
    return targets


def kit_modules() -> list[str]:
    """Every .py file of the checkout, outside virtualenvs, caches and build output (never
    walked into: a .venv holds tens of thousands)."""
    tops = [p for p in REPO_ROOT.iterdir() if not p.name.startswith(NOT_ROOMS)]
    paths = [p for top in tops for p in ([top] if top.is_file() else top.rglob("*.py"))]
    return sorted(
        path.relative_to(REPO_ROOT).as_posix() for path in paths
        if path.suffix == ".py" and "__pycache__" not in path.parts
    )


def test_every_row_of_the_map_is_a_room_that_exists() -> None:
    missing = [room.path for room in rooms() if not (REPO_ROOT / room.path).exists()
               and room.path not in ("function/jobs/",)]  # the team's, made by make new-job
    assert not missing, f"docs/layout.md names rooms that do not exist: {missing}"


def test_every_module_is_in_a_room() -> None:
    all_rooms = rooms()
    homeless = [module for module in kit_modules() if room_of(module, all_rooms) is None]
    assert not homeless, f"modules in no room of docs/layout.md (add a row): {homeless}"


def test_every_import_goes_where_the_map_allows() -> None:
    all_rooms = rooms()
    crossings: list[str] = []
    for module in kit_modules():
        own = room_of(module, all_rooms)
        assert own is not None, module
        for target in sorted(imported_files(REPO_ROOT / module)):
            theirs = room_of(target, all_rooms)
            if theirs is not None and theirs != own and theirs.path not in own.may_import:
                crossings.append(f"{module} ({own.path}) imports {target} ({theirs.path})")
    assert not crossings, "imports docs/layout.md does not allow:\n" + "\n".join(crossings)


def test_the_map_catches_an_import_it_does_not_allow(tmp_path: Path) -> None:
    """The check itself can fail: the protocol room importing the watchdog is refused."""
    all_rooms = rooms()
    protocol = room_of("function/dedup/keys.py", all_rooms)
    watchdog = room_of("function/dedup/watchdog/reruns.py", all_rooms)
    assert protocol is not None and watchdog is not None
    assert watchdog.path not in protocol.may_import
    probe = tmp_path / "probe.py"
    probe.write_text("from dedup.watchdog import reruns\n")
    assert imported_files(probe) == {"function/dedup/watchdog/reruns.py",
                                     "function/dedup/watchdog/__init__.py"}
    # a module named to be imported by name counts too (operator_tools' COMMANDS)
    probe.write_text('COMMANDS = {"demo": ("demo.cli", "command")}\n')
    assert imported_files(probe) == {"demo/cli.py"}

"""docs/layout.md is the map of the house: a room per row, and what each may import. These
tests hold the code to it: every module is in a room, and every import of a kit module
(module-level or inside a function) goes to the module's own room or one the map allows.
And the house rules a map cannot show: no import circle, no source file over 600 lines."""

from __future__ import annotations

import ast
import functools
import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from operator_tools.team_files import is_team_file
from tests.kit_tree import kit_files

REPO_ROOT = Path(__file__).resolve().parent.parent
LAYOUT = REPO_ROOT / "docs" / "layout.md"
# Where `import x` finds the kit's modules: function/ is the Cloud Run source root
# (pyproject.toml's pythonpath), then the repository.
IMPORT_ROOTS = (REPO_ROOT / "function", REPO_ROOT)
# hatch_build.py: the wheel's build hook (docs/layout.md, "Outside the rooms"), run by
# hatchling, never imported by the kit.
NOT_ROOMS = (".", "build", "dist", "site", "node_modules", "hatch_build.py")
# The most lines a source file may have: past it, a file holds more than one idea.
MAX_LINES = 600
# The size rule holds the kit's code, not its tests: a test module is a list of cases, and
# several are longer (the policy pack's case table most of all); the circle rule holds them.
NOT_SIZED = ("tests/",)


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


@functools.cache  # the same few hundred names, asked for by every module
def module_file(name: str) -> str | None:
    """The repository-relative file of kit module `name`, None for any other module (a
    team's, `jobs.billing`, included: not looked for)."""
    path = name.replace(".", "/")
    for root in IMPORT_ROOTS:
        prefix = f"{root.relative_to(REPO_ROOT).as_posix()}/".removeprefix("./")
        for relative in (f"{prefix}{path}.py", f"{prefix}{path}/__init__.py"):
            if not is_team_file(relative) and (REPO_ROOT / relative).is_file():
                return relative
    return None


DOTTED = re.compile(r"[a-z_]+(\.[a-z_]+)+")


@functools.cache  # by the source text: the room and circle checks read each file once
def imports_in(source: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each import in `source`, anywhere in it, as (module, names): `import a.b` is
    ("a.b", ()), `from a import b, c` ("a", ("b", "c")), and a string naming a module to
    import by name (operator_tools' COMMANDS) (the string, ())."""
    found: list[tuple[str, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, tuple(alias.name for alias in node.names)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and DOTTED.fullmatch(node.value):
            found.append((node.value, ()))
    return tuple(found)


def imported_files(path: Path, *, submodule_alone: bool = False) -> set[str]:
    """The kit modules `path` imports, anywhere in it (`from pkg import module` included),
    and those it names as a string to import by name (operator_tools' COMMANDS).

    `from pkg import module` imports pkg's `__init__` and the module, the room check's
    reading; with `submodule_alone`, the module only, the circle check's: the statement
    uses none of `__init__`'s names, and a package's `__init__` runs before any of its
    modules whatever they import (so a package that imports its own modules, each naming a
    sibling this way, is no circle)."""
    targets: set[str] = set()
    for module, names in imports_in(path.read_text(encoding="utf-8")):
        members = [f"{module}.{name}" for name in names]
        if not names:
            wanted = [module]
        elif submodule_alone:
            wanted = [member if module_file(member) else module for member in members]
        else:
            wanted = [module, *members]
        targets |= {file for name in wanted if (file := module_file(name)) is not None}
    return targets


def kit_modules() -> list[str]:
    """Every .py file of the kit (as git lists the checkout: no virtualenv, cache or build
    output, and no team's file: a fork's jobs are not rooms of the kit's house)."""
    return [name for name in kit_files()
            if name.endswith(".py") and not name.split("/", 1)[0].startswith(NOT_ROOMS)]


def test_every_row_of_the_map_is_a_room_that_exists() -> None:
    # function/jobs/ is the team's, made by make new-job: not looked for.
    missing = [room.path for room in rooms()
               if not is_team_file(room.path) and not (REPO_ROOT / room.path).exists()]
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


def import_graph() -> dict[str, set[str]]:
    """Each kit module (tests included) and the kit modules it imports, anywhere in it."""
    return {module: imported_files(REPO_ROOT / module, submodule_alone=True) - {module}
            for module in kit_modules()}


def reachable(graph: Mapping[str, Iterable[str]], start: str) -> set[str]:
    """The modules `start` imports, directly or through others (itself if in a circle)."""
    found: set[str] = set()
    todo = deque(graph.get(start, ()))
    while todo:
        module = todo.popleft()
        if module not in found:
            found.add(module)
            todo.extend(graph.get(module, ()))
    return found


def import_circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The graph's circles: each set of modules that all reach each other (a strongly
    connected component of two or more), sorted."""
    reach = {module: reachable(graph, module) for module in graph}
    circles: list[list[str]] = []
    placed: set[str] = set()
    for module in sorted(graph):
        if module in placed or module not in reach[module]:
            continue
        members = sorted(other for other in reach[module] if module in reach[other])
        placed.update(members)
        circles.append(members)
    return circles


def shortest_circle(graph: Mapping[str, Iterable[str]], members: list[str]) -> list[str]:
    """One circle through the first of `members`, as short as any: a -> b -> a."""
    start, inside = members[0], set(members)
    came_from: dict[str, str] = {}
    todo = deque([start])
    while todo:
        module = todo.popleft()
        for target in sorted(set(graph.get(module, ())) & inside):
            if target == start:
                path = [module]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if target not in came_from:
                came_from[target] = module
                todo.append(target)
    raise ValueError(f"no circle through {start}")


def describe_circle(graph: Mapping[str, Iterable[str]], members: list[str]) -> str:
    return (f"{', '.join(members)}: e.g. " + " -> ".join(shortest_circle(graph, members)))


def test_no_import_circle() -> None:
    """No two modules import each other, directly or around (module-level, inside a
    function and under TYPE_CHECKING alike): a circle means two ideas are tangled, and
    which one loads first depends on who is imported first."""
    graph = import_graph()
    circles = import_circles(graph)
    assert not circles, (
        "import circles (each: the modules that import each other, directly or around; "
        "break it: move what both need to a module of its own, or the import to the "
        "side that owns the idea):\n"
        + "\n".join(f"  {describe_circle(graph, members)}" for members in circles))


def test_the_circle_check_catches_a_circle(tmp_path: Path) -> None:
    """The check itself can fail: a -> b -> c -> a is one circle, d (which only imports
    a) is in none, and the circle is named module by module."""
    graph = {"a.py": {"b.py"}, "b.py": {"c.py"}, "c.py": {"a.py", "e.py"}, "d.py": {"a.py"},
             "e.py": set()}
    assert import_circles(graph) == [["a.py", "b.py", "c.py"]]
    assert describe_circle(graph, ["a.py", "b.py", "c.py"]) == (
        "a.py, b.py, c.py: e.g. a.py -> b.py -> c.py -> a.py")
    assert import_circles({"a.py": {"b.py"}, "b.py": set()}) == []
    # `from pkg import module` is the module alone for the circle check
    probe = tmp_path / "probe.py"
    probe.write_text("from dedup.watchdog import reruns\n")
    assert imported_files(probe, submodule_alone=True) == {"function/dedup/watchdog/reruns.py"}
    probe.write_text("from dedup.watchdog import reruns, not_a_module\n")
    assert imported_files(probe, submodule_alone=True) == {
        "function/dedup/watchdog/reruns.py", "function/dedup/watchdog/__init__.py"}


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_source_file_is_over_600_lines() -> None:
    over = [f"  {module}: {lines} lines" for module in kit_modules()
            if not module.startswith(NOT_SIZED)
            and (lines := line_count(REPO_ROOT / module)) > MAX_LINES]
    assert not over, (
        f"source files over {MAX_LINES} lines (split each along the ideas it holds, not by "
        "line count):\n" + "\n".join(over))


def test_the_size_check_counts_lines(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("x = 1\n" * (MAX_LINES + 1))
    assert line_count(probe) == MAX_LINES + 1
    assert "tests/" in NOT_SIZED and not any(room.startswith(NOT_SIZED) for room in (
        "demo/", "function/dedup/", "infra/", "scheduler_emulator/"))


def private_imports(path: Path) -> list[str]:
    """Each `_private` name `path` takes from another kit module (`from m import _x`):
    a private name is its module's own, so whoever needs it is owed a public one."""
    own = path.resolve().relative_to(REPO_ROOT).as_posix() if path.is_relative_to(
        REPO_ROOT) else None
    found: list[str] = []
    for module, names in imports_in(path.read_text(encoding="utf-8")):
        target = module_file(module)
        if target is None or target == own:
            continue
        found += [f"{module}.{name}" for name in names
                  if name.startswith("_") and not name.startswith("__")]
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    taken = [f"  {module}: {', '.join(names)}" for module in kit_modules()
             if (names := private_imports(REPO_ROOT / module))]
    assert not taken, (
        "modules importing another module's private (_x) names (make the name public in "
        "its module, or move what both need to a module of its own):\n" + "\n".join(taken))


def test_the_private_name_check_catches_one(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from infra.config.errors import invalid, _hidden\n"
                     "from pulumi.runtime.sync_await import _sync_await\n")
    assert private_imports(probe) == ["infra.config.errors._hidden"]  # the kit's only

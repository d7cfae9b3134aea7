"""Which files of the team's `jobs/` a function's jobs need: the modules their job logic
names and, transitively, every `jobs.*` module those import, so that a runtime's source
archive (infra/source.py) holds only its own jobs' code (issue 35).

Found statically, from each module's syntax tree (`ast`): the program never imports or runs
the team's code. Followed: `import jobs.x`, `from jobs import x`, `from jobs.x import y`,
the relative forms (`from . import x`, `from .x import y`, `from .. import z`), wherever they
are (inside a function, a `try`, `if TYPE_CHECKING`: conservative, an extra file is harmless
and a missing one breaks the job), and `importlib.import_module("jobs.x")` /
`__import__("jobs.x")` with a literal name. A name computed at run time cannot be seen: such
a module must be imported plainly somewhere, or named by a job.

What ships of `jobs/`:
- each module found, and the `__init__.py` of every package on its path (importing
  `jobs.reports.weekly` runs `jobs/__init__.py` and `jobs/reports/__init__.py`, whose
  imports are followed too);
- a package a job names (`jobLogic: jobs.reports:run`): all of its files, sub-packages and
  data included;
- data (every file that is not `.py`) travels with the packages: a file ships when its
  folder, or the nearest folder above it holding Python (a `templates/` folder belongs to
  the package above it), is a shipped module's folder or a folder above one. So `jobs/`'s own
  files (`requirements.in` and the team's lock, `make lock`) ship with any `jobs.*` module;
  what Cloud Build installs is the archive's root `requirements.txt` (infra/lock.py's
  `deployed_requirements`), the same for every function that runs job logic.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Final

__all__ = ["JOBS_DIR", "JobModuleError", "job_module_files", "modules_of"]

JOBS_DIR: Final = "jobs"
"""The team's package in function/ (`jobLogic: jobs.<module>:<function>`): its folder's
name and its import name."""
INIT: Final = "__init__.py"
DYNAMIC_IMPORTS: Final = frozenset({"import_module", "__import__"})


class JobModuleError(ValueError):
    """A module a job names is not in `jobs/`, or a module to ship cannot be parsed."""


def modules_of(job_logic: Iterable[str]) -> tuple[str, ...]:
    """The modules of `module:function` job-logic specs, each once, sorted: what a
    function's archive must carry of the team's code (`job_modules`)."""
    return tuple(sorted({spec.partition(":")[0] for spec in job_logic}))


def job_module_files(
    jobs_dir: Path,
    files: Sequence[tuple[str, Path]],
    modules: Collection[str],
) -> list[tuple[str, Path]]:
    """The entries of `files` (the team's `jobs_dir` as the archive lists it: name relative
    to `jobs_dir`, path; caches and hidden files already left out) that the `jobs.*`
    modules among `modules` need (see the module's docstring), sorted by name. Other
    modules (`example_jobs.example`, the kit's) are not the team's: ignored here.

    Raises JobModuleError for a named `jobs.*` module with no file, naming the files
    looked for, and for a module to ship that does not parse, naming its file and line.
    """
    listed = {name: path for name, path in files}
    named = sorted({m for m in modules if _is_team_module(m)})
    whole: set[str] = set()  # the folders of the named packages, which ship whole
    pending = list(named)
    for module in named:
        found = _module_file(module, listed)
        if found is None:
            raise JobModuleError(
                f"job module {module!r} is not in {jobs_dir}: no "
                + " nor ".join(str(jobs_dir / name) for name in _candidates(module))
                + " (check the job's jobLogic)")
        if found.endswith(INIT):
            folder = found.rpartition("/")[0]
            whole.add(folder)
            # Its modules' imports are followed too: they ship.
            pending.extend(_module_name(n) for n in sorted(listed)
                           if n.endswith(".py") and _within(n, folder))

    shipped: set[str] = set()  # the .py files to ship, relative to jobs_dir
    seen: set[str] = set()
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        seen.add(module)
        found = _module_file(module, listed)
        if found is None:  # imported but not a file of jobs/ (a name, a guarded import)
            continue
        shipped.add(found)
        pending.extend(_ancestors(module))
        pending.extend(_imported(module, found, listed[found]))

    on_path = {folder for name in shipped for folder in _folders_above(name)}
    data_home = _data_homes(listed)
    kept = [name for name in sorted(listed)
            if name in shipped
            or any(_within(name, folder) for folder in whole)
            or data_home.get(name) in on_path]
    return [(name, listed[name]) for name in kept]


def _candidates(module: str) -> list[str]:
    """The files (relative to jobs/) `module` may be: `jobs.a.b` -> `a/b/__init__.py`,
    `a/b.py`; `jobs` -> `__init__.py`."""
    parts = module.split(".")[1:]
    return ["/".join([*parts, INIT]), *(["/".join(parts) + ".py"] if parts else [])]


def _folders_above(name: str) -> Iterator[str]:
    """The folders holding the file `name` (relative to jobs/), nearest first:
    `a/b/c.txt` -> `a/b`, `a`, "" (jobs/ itself)."""
    while name:
        name = name.rpartition("/")[0]
        yield name


def _is_team_module(module: str) -> bool:
    return module == JOBS_DIR or module.startswith(f"{JOBS_DIR}.")


def _module_file(module: str, listed: Collection[str]) -> str | None:
    """The file (relative to jobs/) Python would import `module` from: a package's
    `__init__.py` first (a regular package wins over a module of the same name), else
    `<name>.py`; None if neither is listed (a namespace folder, a name, an absent module)."""
    if not _is_team_module(module):
        return None
    return next((name for name in _candidates(module) if name in listed), None)


def _module_name(name: str) -> str:
    """`reports/weekly.py` -> `jobs.reports.weekly`; `reports/__init__.py` -> `jobs.reports`."""
    parts = name.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([JOBS_DIR, *parts])


def _ancestors(module: str) -> Iterator[str]:
    """The packages importing `module` runs first: `jobs.a.b` -> `jobs`, `jobs.a`."""
    parts = module.split(".")
    for end in range(1, len(parts)):
        yield ".".join(parts[:end])


def _within(name: str, folder: str) -> bool:
    """Whether the file `name` is in `folder` or below ("" is jobs/ itself)."""
    return not folder or name.startswith(f"{folder}/")


def _imported(module: str, name: str, path: Path) -> Iterator[str]:
    """Every module name the file `name` (the module `module`) may import: for
    `from a import b`, both `a` and `a.b` (b may be a submodule or a name in a)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError) as exc:  # ValueError: a null byte on older Pythons
        line = getattr(exc, "lineno", None)
        where = f"{path}:{line}" if line else str(path)
        message = getattr(exc, "msg", None) or str(exc)
        raise JobModuleError(
            f"cannot read the job module {module!r} ({where}): {message}") from exc
    # The package a relative import starts from: the module's own for a package.
    package = module if name.endswith(INIT) else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _import_base(node, package)
            if base is None:
                continue
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call) and _is_dynamic_import(node):
            argument = node.args[0]
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                yield argument.value


def _import_base(node: ast.ImportFrom, package: str) -> str | None:
    """The module `from <...> import` names, absolute: None when a relative import climbs
    out of `jobs` (it would fail at run time; nothing to ship)."""
    if node.level == 0:
        return node.module
    parts = package.split(".")
    if node.level > len(parts):
        return None
    base = ".".join(parts[: len(parts) - node.level + 1])
    return f"{base}.{node.module}" if node.module else base


def _is_dynamic_import(node: ast.Call) -> bool:
    function = node.func
    called = (function.attr if isinstance(function, ast.Attribute)
              else function.id if isinstance(function, ast.Name) else None)
    return called in DYNAMIC_IMPORTS and bool(node.args)


def _data_homes(listed: Collection[str]) -> dict[str, str]:
    """For each listed file that is not Python, the folder its data belongs to: its own
    folder, or the nearest one above it that holds Python in its tree (a `templates/`
    folder holds none: its files are the package's above)."""
    python_dirs = {folder for name in listed if name.endswith(".py")
                   for folder in _folders_above(name)}
    return {name: next((f for f in _folders_above(name) if f in python_dirs), "")
            for name in listed if not name.endswith(".py")}

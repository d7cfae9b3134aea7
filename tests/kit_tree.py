"""The kit's own files, for the kit's tests: never the team's.

A fork's checkout holds the team's places too (operator_tools/team_files.py: its stack
files, `function/jobs/` and their lock, `tests/jobs/`), so a kit test that took the
checkout's function/ or ran a tool on the checkout would pass or fail with the team's files.
The kit's tests take their trees from here instead:

- `kit_function(into)`: a copy of the kit's function/ without the team's `jobs/` (nor the
  lock inside it), for the program, `make plan`'s start-up check or a fork of their own;
- `kit_clone(into)`: the kit's files as a clean clone has them, for a process that works on
  its checkout (make, plan, policy-check, new-job): its project is the clone;
- `kit_project_defaults`: such a copy, and a stack directory with no stack file, as the
  defaults of the kit's tools, for a kit test that runs them in its process.

tests/team_places_guard.py fails a kit test that reads the checkout's team places, copies
or lists the kit's function/, or starts a kit tool on the checkout; tests/test_fork.py runs
its tests in a fork.
"""

from __future__ import annotations

import contextvars
import inspect
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from infra import KIT_FUNCTION_DIR, KIT_ROOT
from infra.job_modules import JOBS_DIR
from operator_tools.team_files import is_team_file

COPYING_THE_KITS_FUNCTION: Final = contextvars.ContextVar("copying_the_kits_function",
                                                          default=False)
"""Set while `kit_function` copies function/ (leaving out jobs/): the guard allows it."""


@contextmanager
def copying_the_kits_function() -> Iterator[None]:
    token = COPYING_THE_KITS_FUNCTION.set(True)
    try:
        yield
    finally:
        COPYING_THE_KITS_FUNCTION.reset(token)


def _kit_files_only(directory: str, names: list[str]) -> set[str]:
    """copytree's ignore: caches anywhere, and the team's jobs/ at function/'s top."""
    skipped = {name for name in names if name == "__pycache__"}
    if Path(directory) == KIT_FUNCTION_DIR:
        skipped |= {JOBS_DIR} & set(names)
    return skipped


def kit_function(into: Path) -> Path:
    """A copy of the kit's function/ at `into` (which must not exist): dedup/, example_jobs/,
    main.py and the kit's lock; no jobs/, so no team job and no team lock."""
    with copying_the_kits_function():
        shutil.copytree(KIT_FUNCTION_DIR, into, ignore=_kit_files_only)
    return into


def kit_files() -> list[str]:
    """The kit's files of this checkout (tracked, and new ones not ignored: a clone plus
    work in progress), relative and `/`-separated; never a team file."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=KIT_ROOT, capture_output=True, text=True, check=True,
    ).stdout.split("\0")
    # The team's files are left out before anything looks at them.
    return sorted({n for n in listed if n and not is_team_file(n) and (KIT_ROOT / n).is_file()})


def kit_clone(into: Path, *, mypy_cache: bool = False) -> Path:
    """The kit's files as a clean clone has them (`kit_files`) at `into`, as `make` leaves
    it: `.venv` is the virtualenv running this; with this checkout's function virtualenvs
    (named by their lock and Python version: a process there builds none it has) and, if
    asked, a copy of its mypy cache."""
    for name in kit_files():
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(KIT_ROOT / name, into / name)
    (into / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    (into / ".cache").mkdir(exist_ok=True)
    venvs = KIT_ROOT / ".cache" / "function-venv"
    venvs.mkdir(parents=True, exist_ok=True)
    (into / ".cache" / "function-venv").symlink_to(venvs)
    if mypy_cache and (KIT_ROOT / ".mypy_cache").is_dir():
        shutil.copytree(KIT_ROOT / ".mypy_cache", into / ".mypy_cache")
    return into


Replacement = tuple[object, str, Any]
"""(a function or module, the attribute to set, its value): one monkeypatch.setattr."""


def _defaults_replaced(function: Callable[..., Any],
                       replaced: dict[str, tuple[Path, Path]]) -> list[Replacement]:
    """`function`'s __defaults__ and __kwdefaults__ with the default of each parameter
    named in `replaced`, which must still be the first path, replaced by the second (a
    default that moved on is an error here, seen at once)."""
    parameters = inspect.signature(function).parameters
    for name, (was, _) in replaced.items():
        if parameters[name].default != was:
            raise AssertionError(f"{function.__qualname__}'s {name} no longer defaults to "
                                 f"{was}: update tests/kit_tree.py")
    positional = [p for p in parameters.values()
                  if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty]
    keyword = {name: p.default for name, p in parameters.items()
               if p.kind is p.KEYWORD_ONLY and p.default is not p.empty}
    defaults = tuple(replaced[p.name][1] if p.name in replaced else p.default
                     for p in positional)
    keyword = {name: replaced[name][1] if name in replaced else value
               for name, value in keyword.items()}
    return [(function, "__defaults__", defaults or None),
            (function, "__kwdefaults__", keyword or None)]


def kit_project_defaults(function_dir: Path, stack_dir: Path) -> list[Replacement]:
    """What to set so that the kit's tools, run in a test's process with their defaults,
    work on the kit as it ships: `function_dir` (a `kit_function` copy) as the program's,
    plan's and policy-check's function/, `stack_dir` (a folder with no stack file) as the
    team's stack directory; not the checkout's, which in a fork hold the team's jobs, lock
    and stacks."""
    from infra.component import SchedulerDedup
    from infra.program import build, main
    from operator_tools import offline, plan, stack_files
    from operator_tools.job_logic import check_job_logic, job_modules
    from scheduler_emulator import stack as emulator_stack

    taking_function_dir: list[Callable[..., Any]] = [
        build, main, SchedulerDedup.__init__, check_job_logic, job_modules,
        offline.declare_stack, offline.load_checked_stack, offline.run_checked_stack,
        offline.run_offline,
    ]
    taking_stack_dir: list[Callable[..., Any]] = [
        stack_files.stack_file, stack_files.stack_names, stack_files.checked_stack_files,
        stack_files.stack_path, stack_files.load_stack_config, offline.load_checked_stack,
        offline.run_checked_stack, offline.iter_stacks,
    ]
    naming_stack_dir = [stack_files, offline, plan, emulator_stack]
    was = stack_files.STACK_FILE_DIR
    replaced: dict[Callable[..., Any], dict[str, tuple[Path, Path]]] = {}
    for function in taking_function_dir:
        replaced.setdefault(function, {})["source_dir"] = (KIT_FUNCTION_DIR, function_dir)
    for function in taking_stack_dir:
        replaced.setdefault(function, {})["directory"] = (was, stack_dir)
    # The stacks' policy configs (policies/policy-config.<stack>.json): none, as in the kit.
    replaced[stack_files.stack_policy_config] = {
        "directory": (stack_files.POLICY_CONFIG_DIR, stack_dir.parent / "policies")}
    return [
        *(r for function, its in replaced.items() for r in _defaults_replaced(function, its)),
        *((module, "STACK_FILE_DIR", stack_dir) for module in naming_stack_dir),
    ]

"""A kit test never reads the team's places: the guard that fails one that does.

A fork's checkout holds the team's files in the places operator_tools/team_files.py declares
(`stacks/`, `function/jobs/` with its lock, `tests/jobs/`, `policies/policy-config.*.json`);
a kit test that read them would pass or fail with the team's files. While a kit test runs
(its setup, call and teardown; not the team's tests in `tests/jobs/`, not collection), this
sees, in the test's process, every file opened, stat'ed (os.stat, wrapped: a stat is not
an audited event; exists(), is_file(); not os.lstat nor resolve()'s stat: a path's
spelling, not a look-up), listed, copied or written and every process started (an audit hook,
sys.addaudithook), and fails the test, naming what it did and where, when it:

- touches a path in one of the checkout's team places: in the kit's own checkout they do
  not exist, and the look-up is seen all the same (a fork's lock looked for, say);
- lists, walks or copies the kit's function/ itself, which in a fork holds the team's
  `jobs/` and lock (but for Python's importer, and tests.kit_tree.kit_function, which
  leaves them out): the program's default source, a copy of function/ for a test's fork;
- starts a kit process (make, scheduler-dedup, pulumi, or Python running a kit tool:
  `-m operator_tools`, `-c` importing one) whose project is the checkout: it would read
  the checkout's stacks, jobs and lock as its own (infra.PROJECT_DIR: the nearest
  Pulumi.yaml from its working directory, else the checkout; SCHEDULER_DEDUP_PROJECT names
  another). Such a process works in a kit_clone, or is given a project of its own.

Where each place goes instead: tests/kit_tree.py. tests/test_fork.py runs this guard's own
tests (tests/test_team_places_guard.py) in a fork, where the places exist and hold the
team's files (and a job module that raises if a kit test imports it).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import threading
import traceback
from collections.abc import Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, Final

import pytest

from infra import KIT_FUNCTION_DIR, KIT_ROOT, PROJECT_DIR_ENV
from operator_tools.team_files import is_team_file
from tests.kit_tree import COPYING_THE_KITS_FUNCTION

ROOT: Final = str(KIT_ROOT)
ROOT_PREFIX: Final = ROOT + os.sep
OUR_PREFIX: Final = os.path.realpath(sys.prefix)  # the virtualenv running the tests
FUNCTION: Final = str(KIT_FUNCTION_DIR)
FIX: Final = ("Fix: build what the test needs in its own tree (tests/kit_tree.py: kit_function, "
              "kit_clone; a tmp_path; SCHEDULER_DEDUP_PROJECT), never the checkout's")

OF_THE_KITS_FUNCTION: Final = ("of the kit's function/ (in a fork it holds the team's jobs/ "
                                "and lock): use tests.kit_tree.kit_function")
KIT_TOOLS: Final = ("infra", "operator_tools", "policies", "scheduler_emulator", "demo",
                    "local_stack", "bench", "scheduler_dedup_kit", "tests")
"""The packages whose code reads a project (infra.PROJECT_DIR); function/'s do not."""
# A `python -c` program that imports one of them, or runs a file (runpy: infra/__main__.py).
RUNS_A_KIT_TOOL: Final = re.compile(rf"\b(?:(?:from|import)\s+(?:{'|'.join(KIT_TOOLS)})\b|runpy\b)")
KIT_PROGRAMS: Final = frozenset({"make", "scheduler-dedup", "pulumi"})

# Events whose first argument is a path read, listed or written; copies name two.
PATH_EVENTS: Final = frozenset({
    "open", "stat", "os.listdir", "os.scandir", "os.walk", "os.mkdir", "os.remove", "os.rmdir",
    "os.chmod", "os.utime", "shutil.copyfile", "shutil.copytree", "shutil.copystat",
    "os.rename", "pathlib.Path.glob", "pathlib.Path.rglob", "pathlib.Path.walk",
    "glob.glob", "glob.glob/2",
})
WATCHED: Final = PATH_EVENTS | {"subprocess.Popen"}
TWO_PATH_EVENTS: Final = frozenset({"shutil.copyfile", "shutil.copytree", "shutil.copystat",
                                    "os.rename"})
# Where an event says a path is relative to a directory's descriptor (shutil.rmtree's
# walk, say): not a path of the working directory, so not judged.
DIR_FD_ARGUMENT: Final = {"os.mkdir": 2, "os.remove": 1, "os.rmdir": 1, "os.chmod": 2,
                          "os.utime": 3, "os.rename": 2}
LISTING_EVENTS: Final = frozenset({"os.listdir", "os.scandir", "os.walk", "shutil.copytree",
                                   "pathlib.Path.glob", "pathlib.Path.rglob",
                                   "pathlib.Path.walk", "glob.glob", "glob.glob/2"})


class _State(threading.local):
    busy = False  # inside the hook: what it calls itself is not the test's


_state = _State()
_hits: list[str] | None = None  # the running kit test's findings; None: no kit test runs


def _path(value: object) -> str | None:
    """An event's path argument as an absolute, normalized string (None: not a path)."""
    if isinstance(value, bytes):
        value = os.fsdecode(value)
    elif isinstance(value, os.PathLike):
        value = os.fspath(value)
        if isinstance(value, bytes):
            value = os.fsdecode(value)
    if not isinstance(value, str) or not value:
        return None
    if "*" in value or "?" in value or "[" in value:  # a glob pattern: its fixed part
        value = os.path.dirname(re.split(r"[*?[]", value, maxsplit=1)[0]) or "."
    return os.path.normpath(os.path.join(os.getcwd(), value))


def team_place_of(path: str) -> str | None:
    """`path` relative to the checkout, if it is in (or is) one of the team's places."""
    if not path.startswith(ROOT + os.sep):
        return None
    relative = path[len(ROOT) + 1 :].replace(os.sep, "/")
    return relative if is_team_file(relative) or is_team_file(relative + "/") else None


def _by_the_importer(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _where(frame: FrameType | None) -> str:
    """The innermost frames of the kit's code (tests included) that led here."""
    summary = traceback.StackSummary.extract(traceback.walk_stack(frame), lookup_lines=False)
    ours = [f"{Path(f.filename).relative_to(KIT_ROOT)}:{f.lineno} in {f.name}" for f in summary
            if f.filename.startswith(ROOT + os.sep) and f.filename != __file__
            and "/.venv" not in f.filename]
    return "; ".join(ours[:4]) or "(outside the kit's code)"


def project_of(cwd: str | None, env: Mapping[str, str] | None) -> Path:
    """The project a kit process started in `cwd` with `env` works on, as infra finds it:
    the folder SCHEDULER_DEDUP_PROJECT names, else the nearest with a Pulumi.yaml, or with
    a kit tree of its own (infra/: it runs that kit, whose checkout is its project), from
    `cwd` up; else this checkout (whose kit it then runs)."""
    named = (os.environ if env is None else env).get(PROJECT_DIR_ENV)
    if named:
        return Path(named).resolve()
    here = Path(cwd or os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "Pulumi.yaml").is_file() or (folder / "infra" / "__init__.py").is_file():
            return folder
    return KIT_ROOT


def _another_installation(program: str) -> bool:
    """A program of another virtualenv (an installed kit's, tests/test_dist.py): the kit it
    runs is that one, whose project is never this checkout."""
    return os.path.isabs(program) and not program.startswith((sys.prefix, OUR_PREFIX, ROOT))


def kit_process(argv: Sequence[str]) -> bool:
    """Does `argv` run this checkout's kit tools (which read their project)?"""
    if not argv or _another_installation(argv[0]):
        return False
    program = os.path.basename(argv[0])
    if program in KIT_PROGRAMS:
        return True
    if not (program.startswith("python") or argv[0] == sys.executable):
        return False
    rest = list(argv[1:])
    if "-I" in rest:  # isolated: neither its working directory nor PYTHONPATH is on its path
        return False
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
        rest = rest[2:] if rest[0] in ("-W", "-X") else rest[1:]
    if len(rest) >= 2 and rest[0] == "-m":
        return rest[1].split(".")[0] in KIT_TOOLS
    if len(rest) >= 2 and rest[0] == "-c":
        return RUNS_A_KIT_TOOL.search(rest[1]) is not None
    return bool(rest) and _path(rest[0]) is not None and str(_path(rest[0])).startswith(ROOT)


def _process_findings(args: tuple[Any, ...]) -> list[str]:
    _, command, cwd, env = args
    argv = shlex.split(command) if isinstance(command, str) else [os.fsdecode(a) for a in command]
    shown = " ".join(argv[:4]) + (" ..." if len(argv) > 4 else "")
    found = [f"started `{shown}` naming {place}: a team's place" for place in
             (team_place_of(os.path.normpath(a)) for a in argv[1:] if os.path.isabs(a))
             if place is not None]
    if kit_process(argv) and project_of(cwd and os.fsdecode(cwd), env) == KIT_ROOT:
        found.append(f"started `{shown}` with the checkout as its project (cwd "
                     f"{cwd or os.getcwd()}): it reads the checkout's stacks, jobs and lock; "
                     f"run it in a kit_clone or give it a project of its own ({PROJECT_DIR_ENV})")
    return found


def findings_of(event: str, args: tuple[Any, ...], frame: FrameType | None) -> list[str]:
    """What `event` (with `args`) does that a kit test must not (see the module docstring)."""
    if event == "subprocess.Popen":
        return _process_findings(args)
    if event not in PATH_EVENTS or not args:
        return []
    at = DIR_FD_ARGUMENT.get(event)
    if at is not None and len(args) > at and args[at] not in (None, -1):
        return []
    if event == "open" and len(args) > 1 and args[1] is None and not os.path.isabs(args[0]):
        return []  # os.open's (mode None): with a dir_fd, or not, the event cannot say
    paths = [_path(a) for a in (args[:2] if event in TWO_PATH_EVENTS else args[:1])]
    found = []
    for path in (p for p in paths if p is not None):
        place = team_place_of(path)
        if place is not None:
            found.append(f"{event} {place}: a team's place")
        elif (path == FUNCTION and event in LISTING_EVENTS
              and not COPYING_THE_KITS_FUNCTION.get() and not _by_the_importer(frame)):
            found.append(f"{event} {OF_THE_KITS_FUNCTION}")
    return found


def _record(findings: list[str], frame: FrameType | None) -> None:
    hits = _hits
    if hits is not None:
        hits.extend(f"{finding} (at {_where(frame)})" for finding in findings)


def _may_be_ours(value: object) -> bool:
    """Cheap, first: a path that cannot be the checkout's is not looked at further."""
    text = value if isinstance(value, str) else str(value) if isinstance(value, Path) else None
    if text is None:
        return not isinstance(value, int)  # bytes, another os.PathLike: judged in full
    return not text.startswith("/") or text.startswith(ROOT_PREFIX) or text == ROOT


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if (_hits is None or event not in WATCHED or not args or _state.busy
            or (event != "subprocess.Popen" and not any(_may_be_ours(a) for a in args[:2]))):
        return
    _state.busy = True
    try:
        frame = sys._getframe(1)
        found = findings_of(event, args, frame)
        if found:
            _record(found, frame)
    except Exception as exc:  # the guard never breaks what it watches; it says it failed
        _record([f"the guard could not judge {event}: {exc!r}"], None)
    finally:
        _state.busy = False


_real_stat = os.stat
RESOLVE: Final = Path.resolve.__code__


def _in_resolve(frame: FrameType | None) -> bool:
    """Is this stat resolve()'s check for a symlink loop (Path.stat, called by it)?"""
    return frame is not None and frame.f_back is not None and frame.f_back.f_code is RESOLVE


def _guarded(real: Any) -> Any:
    def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if (_hits is not None and kwargs.get("dir_fd") is None and _may_be_ours(path)
                and not _in_resolve(sys._getframe(1))):
            _audit("stat", (path,))
        return real(path, *args, **kwargs)  # type: ignore[no-any-return]

    return stat


_guarded_stat = _guarded(_real_stat)
# What os says a function supports is asked of the function (`os.stat in
# os.supports_follow_symlinks`): the wrappers are where their functions are.
SUPPORTS: Final = (os.supports_dir_fd, os.supports_fd, os.supports_follow_symlinks,
                   os.supports_effective_ids)
_installed = False


def install() -> None:
    """Once per process: the audit hook (it cannot be removed) and the stat wrapper."""
    global _installed
    if not _installed:
        sys.addaudithook(_audit)
        _installed = True
    for supported in SUPPORTS:
        if _real_stat in supported:
            supported.add(_guarded_stat)
    os.stat = _guarded_stat


def uninstall() -> None:
    os.stat = _real_stat
    for supported in SUPPORTS:
        supported.discard(_guarded_stat)


@contextmanager
def recording() -> Iterator[list[str]]:
    """Collect what the code run inside does that a kit test must not, instead of failing
    the running test on it (the guard's own tests)."""
    global _hits
    before, _hits = _hits, []
    try:
        yield _hits
    finally:
        _hits = before


# --------------------------------------------------------------------------- pytest's hooks


def kit_test(item: pytest.Item) -> bool:
    """Is `item` one of the kit's tests (not the team's, in tests/jobs/)?"""
    try:
        relative = item.path.resolve().relative_to(KIT_ROOT).as_posix()
    except ValueError:
        return True
    return not is_team_file(relative)


@contextmanager
def _guarding(item: pytest.Item) -> Iterator[None]:
    global _hits
    _hits = [] if kit_test(item) else None
    try:
        yield
    finally:
        item.stash[_FINDINGS] = _hits or []
        _hits = None


_FINDINGS: Final = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    install()


def pytest_unconfigure(config: pytest.Config) -> None:
    uninstall()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with _guarding(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with _guarding(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    with _guarding(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    findings = item.stash.get(_FINDINGS, [])
    item.stash[_FINDINGS] = []
    if findings:
        unique = list(dict.fromkeys(findings))
        shown = "\n  ".join(unique[:8]) + (f"\n  ... {len(unique) - 8} more" if len(unique) > 8
                                            else "")
        message = (f"this kit test reaches the team's places (tests/team_places_guard.py) "
                   f"during {report.when}:\n  {shown}\n{FIX}")
        if report.failed:  # its own failure stays the report's; this is said beside it
            report.sections.append(("team places guard", message))
        else:
            report.outcome = "failed"
            report.longrepr = message
    return report

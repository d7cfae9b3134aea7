"""No test waits by sleeping (docs/testing.md, "How a test waits"): every kit module under
tests/ is parsed (not the team's, in tests/jobs/: the kit's tests never read them), and a
direct sleep anywhere but tests/waiting.py is refused, named by file and line with the
fix. A sleep is a guess at how long something takes; a loaded machine makes the guess
wrong, and a correct program then fails its test."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from infra import KIT_ROOT
from tests.kit_tree import kit_files

TESTS = Path(__file__).resolve().parent
WAITING_MODULE = TESTS / "waiting.py"  # the one place allowed to call time.sleep
FIX = ("wait for the event with tests.waiting.wait_until (a record, a log line, a "
       "request, a thread's result); for a fake's simulated work use job_works_for; for "
       "time that must pass (a lease lapsing) use let_time_pass(seconds, why)")


@dataclass(frozen=True)
class Sleep:
    path: Path
    line: int
    call: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.call}"


def _is_zero(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value in (0, 0.0)


def _name_of(func: ast.expr) -> str:
    """`sleep` of `time.sleep` and of `sleep`; '' for anything else called."""
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


class _SleepFinder(ast.NodeVisitor):
    """Direct sleeps: time.sleep (also through `import time as t`), a `sleep` imported
    from time, asyncio.sleep of anything but 0 (0 only yields to the loop), and a
    throw-away Event's wait (`threading.Event().wait(1)`: a sleep in disguise)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.found: list[Sleep] = []
        self.time_modules = {"time"}
        self.asyncio_modules = {"asyncio"}
        self.sleep_names: set[str] = set()

    def _add(self, node: ast.AST, call: str) -> None:
        self.found.append(Sleep(self.path, getattr(node, "lineno", 0), call))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "time":
                self.time_modules.add(alias.asname or "time")
            elif alias.name == "asyncio":
                self.asyncio_modules.add(alias.asname or "asyncio")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module == "time":
            for alias in node.names:
                if alias.name in ("sleep", "*"):
                    self.sleep_names.add(alias.asname or "sleep")
                    self._add(node, "from time import sleep")

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and func.attr == "sleep"):
            owner = func.value.id
            yields = owner in self.asyncio_modules and bool(node.args) and _is_zero(node.args[0])
            if owner in self.time_modules | self.asyncio_modules and not yields:
                self._add(node, f"{owner}.sleep()")
        elif isinstance(func, ast.Name) and func.id in self.sleep_names:
            self._add(node, f"{func.id}()")
        if (isinstance(func, ast.Attribute) and func.attr == "wait"
                and isinstance(func.value, ast.Call) and _name_of(func.value.func) == "Event"):
            self._add(node, "Event().wait()")
        self.generic_visit(node)


def sleeps_in(path: Path) -> list[Sleep]:
    """Every direct sleep in the module at `path`."""
    finder = _SleepFinder(path)
    finder.visit(ast.parse(path.read_text(), filename=str(path)))
    return finder.found


def sleeps_under(folder: Path) -> list[Sleep]:
    return [sleep for path in sorted(folder.rglob("*.py")) if path != WAITING_MODULE
            for sleep in sleeps_in(path)]


def test_no_test_module_sleeps_outside_the_waiting_module() -> None:
    kit_tests = [KIT_ROOT / name for name in kit_files()
                 if name.startswith("tests/") and name.endswith(".py")]
    assert WAITING_MODULE in kit_tests and Path(__file__) in kit_tests
    found = [sleep for path in kit_tests if path != WAITING_MODULE for sleep in sleeps_in(path)]
    assert found == [], "\n".join(
        ["a test sleeps instead of waiting for an event:", *map(str, found), f"fix: {FIX}"])


def test_the_check_finds_a_planted_sleep_of_every_spelling(tmp_path: Path) -> None:
    planted = tmp_path / "test_planted.py"
    planted.write_text(
        "import asyncio\n"
        "import threading\n"
        "import time\n"
        "import time as clock_module\n"
        "from time import sleep as nap\n"
        "\n"
        "def test_it() -> None:\n"
        "    time.sleep(0.5)\n"  # line 8
        "    clock_module.sleep(1)\n"  # 9
        "    nap(2)\n"  # 10
        "    threading.Event().wait(0.3)\n"  # 11
        "\n"
        "async def test_async() -> None:\n"
        "    await asyncio.sleep(0.1)\n"  # 14
        "    await asyncio.sleep(0)\n"  # a yield to the loop: allowed
    )
    found = sleeps_in(planted)
    assert [(s.line, s.call) for s in found] == [
        (5, "from time import sleep"), (8, "time.sleep()"), (9, "clock_module.sleep()"),
        (10, "nap()"), (11, "Event().wait()"), (14, "asyncio.sleep()"),
    ]
    assert str(found[1]) == f"{planted}:8: time.sleep()"
    assert sleeps_under(tmp_path) == found  # and the folder scan sees it


def test_the_check_leaves_waits_that_are_not_sleeps_alone(tmp_path: Path) -> None:
    fine = tmp_path / "test_fine.py"
    fine.write_text(
        "import threading\n"
        "from tests.waiting import job_works_for, let_time_pass, wait_until\n"
        "\n"
        "def test_it(clock, event: threading.Event) -> None:\n"
        "    clock.sleep(100)  # an injected clock: simulated time\n"
        "    assert event.wait(30)  # an event the code under test sets\n"
        "    wait_until(event.is_set, timeout=30, what='the event')\n"
        "    job_works_for(0.1)\n"
        "    let_time_pass(1.2, 'the 1 s lease lapses')\n"
    )
    assert sleeps_in(fine) == []

"""Every command a team is told to run exists where it runs (issue 38): each `make <target>`
and `scheduler-dedup <command>` named in the operator tools' messages and in the docs a team
reads is a target of the Makefile it has (the kit's in a fork, the starter's in a team
repository made by `scheduler-dedup init`) and a command of the CLI's table; a target only the
kit's own Makefile has is named only where the text says whom it is for. No message names
`python -m operator_tools`, which a team repository's environment does not have. In a
repository `scheduler-dedup init` wrote, each of its targets' commands answers `--help`."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from infra import KIT_ROOT
from operator_tools.__main__ import COMMANDS
from operator_tools.init import main as init_main

STARTER: Final = KIT_ROOT / "examples" / "team-repo"

# The kit's targets a team repository does not have, by design: its maintainers' (a release,
# the wheels, the kit's locks, schema, docs site, benchmark, the simulation of the kit's own
# protocol) and its repository's own chores.
KIT_ONLY_TARGETS: Final = frozenset({
    "help", "workflow-lint", "lock-kit", "bench", "schema", "docs", "docs-serve", "dist",
    "release", "clean", "simulate", "protocol-dist",
})
# What may follow "make" in prose and is no target ("its make target").
NOT_TARGETS: Final = frozenset({
    "target", "targets", "your", "each", "the", "another", "any", "every", "sure",
})
# Where a text that names a kit-only target says whom it is for.
FOR_WHOM: Final = re.compile(
    r"kit maintainers|\bforks?\b|the kit's (?:own )?(?:CI|repository|checkout|tests|workflows)"
    r"|(?:checkout|clone) of the kit|in this repository|this repository's", re.I)
# The pages about the kit's own repository, which say so in their first paragraph: the
# kit's targets may be named anywhere in them.
KIT_PAGES: Final = frozenset({"benchmark.md"})
# The operator tools whose commands only the kit's maintainers run (no starter target).
MAINTAINER_MODULES: Final = frozenset({"release.py", "schema.py"})

MAKE: Final = re.compile(r"\bmake ([a-z][a-z0-9-]*)")
CLI: Final = re.compile(r"\bscheduler-dedup ([a-z][a-z0-9-]*)")
CODE: Final = re.compile(r"```.*?```|`[^`\n]+`", re.S)


def targets(makefile: Path) -> set[str]:
    return set(re.findall(r"^([a-z][a-z0-9-]*):", makefile.read_text(encoding="utf-8"), re.M))


KIT_TARGETS: Final = targets(KIT_ROOT / "Makefile")
STARTER_TARGETS: Final = targets(STARTER / "Makefile")


def messages(module: Path) -> Iterator[tuple[int, str]]:
    """The string literals a module can print: every one but its docstrings."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value) for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                id(node) not in docstrings):
            yield node.lineno, node.value


MESSAGE_MODULES: Final = [
    *sorted((KIT_ROOT / "operator_tools").glob("*.py")),
    KIT_ROOT / "policies" / "offline_check.py", KIT_ROOT / "demo" / "serve.py",
    KIT_ROOT / "demo" / "cli.py", KIT_ROOT / "infra" / "lock.py",
]
TEAM_PAGES: Final = sorted((KIT_ROOT / "docs").glob("*.md"))


def test_the_kit_only_targets_are_declared() -> None:
    """A new target of the kit's Makefile is either the starter's too or declared kit-only
    here (so the checks below know which texts must say whom it is for)."""
    assert STARTER_TARGETS <= KIT_TARGETS, STARTER_TARGETS - KIT_TARGETS
    assert KIT_TARGETS - STARTER_TARGETS == KIT_ONLY_TARGETS


def relative(path: Path) -> str:
    return path.relative_to(KIT_ROOT).as_posix()


@pytest.mark.parametrize("module", MESSAGE_MODULES, ids=relative)
def test_the_tools_messages_name_commands_that_exist(module: Path) -> None:
    wrong = []
    for line, text in messages(module):
        where = f"{module.relative_to(KIT_ROOT)}:{line}"
        if "python -m operator_tools" in text:
            wrong.append(f"{where} names `python -m operator_tools`: {text!r}")
        for target in set(MAKE.findall(text)) - NOT_TARGETS:
            if target not in KIT_TARGETS:
                wrong.append(f"{where}: no `make {target}` in the kit's Makefile")
            elif target not in STARTER_TARGETS and module.name not in MAINTAINER_MODULES and (
                    not FOR_WHOM.search(text)):
                wrong.append(f"{where}: `make {target}` is not the starter's, and {text!r} "
                             "does not say whom it is for")
        wrong += [f"{where}: no command `scheduler-dedup {command}`"
                  for command in CLI.findall(text) if command not in COMMANDS]
    assert not wrong, "\n".join(wrong)


def paragraphs(text: str) -> Iterator[tuple[int, str, str]]:
    """Each paragraph of a page (a fenced block is one), its first line and the paragraph
    before it (which introduces a fenced block)."""
    lines: list[str] = []
    first, before, fenced = 1, "", False
    for number, line in enumerate([*text.splitlines(), ""], start=1):
        if line.startswith("```"):
            fenced = not fenced
        if line.strip() or fenced:
            if not lines:
                first = number
            lines.append(line)
        elif lines:
            paragraph = "\n".join(lines)
            yield first, paragraph, before
            lines, before = [], paragraph


@pytest.mark.parametrize("page", [*TEAM_PAGES, STARTER / "README.md"],
                         ids=relative)
def test_the_docs_name_commands_that_exist(page: Path) -> None:
    """Each `make <target>` in a page's code is a target of the kit's Makefile, and of the
    starter's unless its paragraph (or the one introducing it) says it is the kit's or a
    fork's; the starter's README names the starter's targets alone. Each
    `scheduler-dedup <command>` is a command."""
    in_team_repository = page.parent == STARTER
    found = list(paragraphs(page.read_text(encoding="utf-8")))
    kit_page = not in_team_repository and page.name in KIT_PAGES
    if kit_page:  # its first paragraph after the title says whom the page is for
        assert FOR_WHOM.search(found[1][1]), f"{page.name} does not open saying it is the kit's"
    wrong = []
    for line, paragraph, before in found:
        code = " ".join(m.group() for m in CODE.finditer(paragraph))
        for target in sorted(set(MAKE.findall(code))):
            where = f"{page.relative_to(KIT_ROOT)}:{line}: `make {target}`"
            if target not in KIT_TARGETS:
                wrong.append(f"{where} is no target of the kit's Makefile")
            elif target not in STARTER_TARGETS and (in_team_repository or not (
                    kit_page or FOR_WHOM.search(before + paragraph))):
                wrong.append(f"{where} is not the starter's, and the text does not say "
                             "whom it is for")
        wrong += [f"{page.relative_to(KIT_ROOT)}:{line}: no command `scheduler-dedup {c}`"
                  for c in CLI.findall(code) if c not in COMMANDS]
    assert not wrong, "\n".join(wrong)


def test_each_starter_target_runs_a_command_that_answers_in_a_team_repository(
    tmp_path: Path,
) -> None:
    """In a repository `scheduler-dedup init` wrote: each of its make targets (as make would
    run them, dry) calls `scheduler-dedup <command>` with a command of the table, and each
    such command answers `--help` there, run as the installed kit's console entry runs it
    (`python -m scheduler_dedup_kit`, the project found from the working directory)."""
    team = tmp_path / "our-jobs"
    assert init_main([str(team)]) == 0
    env = {**os.environ, "PYTHONPATH": str(KIT_ROOT)}
    called: dict[str, str] = {}
    for target in sorted(STARTER_TARGETS):
        dry = subprocess.run(["make", "--no-print-directory", "-n", "-o", ".venv/stamp",
                              target], cwd=team, env=env, capture_output=True, text=True,
                             timeout=60, check=False)
        assert dry.returncode == 0, (target, dry.stderr)
        for command in re.findall(r"\.venv/bin/scheduler-dedup ([a-z][a-z0-9-]*)", dry.stdout):
            assert command in COMMANDS, f"make {target} calls scheduler-dedup {command}"
            called.setdefault(command, target)
    assert {"plan", "policy-check", "rerun", "upgrade-check", "lock", "new-job"} <= set(called)
    for command, target in sorted(called.items()):
        answered = subprocess.run([sys.executable, "-m", "scheduler_dedup_kit", command,
                                   "--help"], cwd=team, env=env, capture_output=True,
                                  text=True, timeout=120, check=False)
        assert answered.returncode == 0, (target, command, answered.stderr[-2000:])
        assert answered.stdout.startswith(f"usage: scheduler-dedup {command}"), (
            target, answered.stdout[:200])

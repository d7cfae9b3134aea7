"""Helpers for the tests of the team's code: the README's first job, `make new-job`.

The team's code is held to what `make lint` and `make typecheck` run (ruff, mypy with
pyproject.toml's settings); these run the same tools, on given files of a checkout.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from infra import KIT_ROOT as REPO_ROOT
from tests.kit_tree import kit_function

README = REPO_ROOT / "README.md"
FIRST_JOB_SECTION = "## Add your first job in five steps"


def first_job_blocks() -> list[tuple[str, str]]:
    """The README's five steps' code blocks, in order: (language, text, dedented)."""
    text = README.read_text(encoding="utf-8")
    start = text.index(FIRST_JOB_SECTION)
    end = text.find("\n## ", start + len(FIRST_JOB_SECTION))
    section = text[start : end if end != -1 else len(text)]
    blocks = []
    for match in re.finditer(r"^( *)```(\w+)\n(.*?)^\1```$", section, re.M | re.S):
        indent, language, body = match.group(1), match.group(2), match.group(3)
        lines = [line.removeprefix(indent) for line in body.splitlines()]
        blocks.append((language, "\n".join(lines) + "\n"))
    return blocks


def first_job_block(language: str) -> tuple[str, str]:
    """The one block of `language`: (the path its first line names, its text)."""
    (text,) = [body for lang, body in first_job_blocks() if lang == language]
    first = text.splitlines()[0]
    path = re.match(r"^# (\S+)", first)
    assert path is not None, f"the README's {language} block starts with '# <its file>'"
    return path.group(1), text


def minimal_checkout(into: Path) -> Path:
    """What the team's code is checked and tested with: the kit's function/ (no team's
    jobs), pyproject.toml (the tools' settings, pytest's paths) and the tests package."""
    kit_function(into / "function")
    shutil.copy2(REPO_ROOT / "pyproject.toml", into / "pyproject.toml")
    (into / "tests").mkdir(exist_ok=True)
    shutil.copy2(REPO_ROOT / "tests" / "__init__.py", into / "tests" / "__init__.py")
    return into


def _run(args: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def kit_checks(checkout: Path, *files: str, mypy_cache: Path | None = None) -> None:
    """ruff and mypy, as `make lint` and `make typecheck` run them (pyproject.toml's
    settings: mypy's strict, ruff's rules), on `files` of `checkout`. `mypy_cache`: a cache
    shared by several checks (mypy rechecks what changed, by content; a cold cache costs
    seconds of typeshed), else the checkout's own."""
    ruff = _run([sys.executable, "-m", "ruff", "check", "--no-cache", *files], checkout)
    assert ruff.returncode == 0, ruff.stdout + ruff.stderr
    cache = mypy_cache or checkout / ".cache" / "mypy"
    mypy = _run([sys.executable, "-m", "mypy", "--cache-dir", str(cache), *files], checkout)
    assert mypy.returncode == 0, mypy.stdout + mypy.stderr


def pytest_in(checkout: Path, *paths: str) -> subprocess.CompletedProcess[str]:
    """pytest in `checkout`, with its pyproject.toml's settings (testpaths, pythonpath)."""
    return _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *paths],
                checkout)


def make_in(checkout: Path, *args: str) -> tuple[int, str]:
    """`make` in `checkout` with this checkout's virtualenv, its stamp taken as current."""
    venv = Path(sys.prefix)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STACK", "NAME")}
    result = subprocess.run(
        ["make", "--no-print-directory", "-o", f"{venv}/stamp", "-o", ".venv/stamp",
         f"VENV={venv}", *args],
        cwd=checkout, env=env, capture_output=True, text=True, timeout=240, check=False,
    )
    return result.returncode, result.stdout + result.stderr

"""`scheduler-dedup init DIR`: the starter copied, its first job written, never over a file,
and the kit pinned at this version (tests/test_by_version.py runs what it writes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dedup.version import __version__ as KIT_VERSION
from infra import KIT_ROOT as REPO_ROOT
from operator_tools.init import FIRST_JOB, KIT_PIN, STARTER, main


def test_init_writes_the_starter_and_its_first_job(tmp_path: Path) -> None:
    target = tmp_path / "our-jobs"
    assert main([str(target)]) == 0
    starter = {p.relative_to(STARTER) for p in STARTER.rglob("*") if p.is_file()}
    written = {p.relative_to(target) for p in target.rglob("*") if p.is_file()}
    job = {Path(f"function/jobs/{FIRST_JOB}.py"), Path(f"tests/jobs/test_{FIRST_JOB}.py"),
           Path("function/jobs/__init__.py"), Path("tests/jobs/__init__.py")}
    assert written == starter | job
    for name in starter:
        assert (target / name).read_bytes() == (STARTER / name).read_bytes()
    stack = (target / "stacks" / "Pulumi.dev.yaml").read_text(encoding="utf-8")
    assert f"jobLogic: jobs.{FIRST_JOB}:run" in stack


def test_the_starter_pins_this_kit_version() -> None:
    """A release bumps the starter's pin with the version (function/dedup/version.py)."""
    lines = (STARTER / "requirements.txt").read_text(encoding="utf-8").splitlines()
    assert f"scheduler-dedup-kit=={KIT_VERSION}" == KIT_PIN and KIT_PIN in lines


@pytest.mark.parametrize("existing", ["file", "folder with a file"])
def test_init_never_writes_over_anything(
    tmp_path: Path, existing: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "our-jobs"
    if existing == "file":
        target.write_text("mine")
    else:
        target.mkdir()
        (target / "notes.txt").write_text("mine")
    assert main([str(target)]) == 2
    assert "is not an empty folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.rglob("*")) in (["our-jobs"], ["notes.txt", "our-jobs"])


def _commands(makefile: Path, call: str) -> dict[str, str]:
    """target -> the scheduler-dedup command line of its recipe (what follows the call)."""
    found: dict[str, str] = {}
    target = ""
    for line in makefile.read_text(encoding="utf-8").splitlines():
        if line and not line[0].isspace() and ":" in line and not line.startswith("#"):
            target = line.split(":", 1)[0]
        elif call in line:
            found[target] = line.split(call, 1)[1].strip()
    return found


def test_the_starters_make_targets_are_the_kits_with_the_same_arguments() -> None:
    """Every message that says `make <target> VAR=...` holds in a team repository too."""
    kit = _commands(REPO_ROOT / "Makefile", "$(SCHEDULER_DEDUP)")
    starter = _commands(STARTER / "Makefile", "$(BIN)/scheduler-dedup")
    for own in ("schema", "release", "dist"):  # the kit maintainers' own (the kit's files)
        kit.pop(own)
    assert starter == kit

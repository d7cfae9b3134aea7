"""`make new-job NAME=<name>`: a job module and its test, written from the kit's templates.

    python -m operator_tools new-job send_invoices            # function/jobs/send_invoices.py and
                                                     # tests/jobs/test_send_invoices.py
    python -m operator_tools new-job send_invoices --root DIR # the same under another checkout

The module (operator_tools/templates/job.py.template) is job logic a stack names with
`jobLogic: jobs.<name>:run`; its test (test_job.py.template) goes where the kit's pytest
collects it (tests/, pyproject.toml's testpaths), in tests/jobs/, the team's test folder,
so `make test` runs it. Both pass the checks `make test` holds the team's code to (ruff,
mypy --strict). A name that is not a Python module name, or whose module or test already
exists, is refused with the fix, and nothing is written (exit status 2). Standard library
only.
"""

from __future__ import annotations

import argparse
import keyword
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from string import Template
from typing import Final

from infra import PROJECT_DIR

TEMPLATES: Final = Path(__file__).resolve().parent / "templates"
JOB_TEMPLATE: Final = TEMPLATES / "job.py.template"
TEST_TEMPLATE: Final = TEMPLATES / "test_job.py.template"
JOBS_DIR: Final = Path("function") / "jobs"
"""Where job modules live, relative to the project: they import as `jobs.<name>`."""
TESTS_DIR: Final = Path("tests") / "jobs"
"""The team's job tests, under the kit's pytest testpaths (tests/)."""
_NAME: Final = re.compile(r"^[a-z][a-z0-9_]*$")


class NewJobError(ValueError):
    """A name `make new-job` refuses: what is wrong, and the fix."""

    def __init__(self, name: str, problem: str, fix: str) -> None:
        super().__init__(f"NAME={name!r} {problem}. Fix: {fix}")


def job_paths(name: str, root: Path = PROJECT_DIR) -> tuple[Path, Path]:
    """The job module and its test for `name`."""
    return root / JOBS_DIR / f"{name}.py", root / TESTS_DIR / f"test_{name}.py"


def check_name(name: str, root: Path = PROJECT_DIR) -> None:
    """Raise `NewJobError` unless `name` makes a new module `jobs.<name>` and a new test."""
    if not name:
        raise NewJobError(name, "is empty", "give the module's name: make new-job "
                          "NAME=<name>, e.g. NAME=send_invoices")
    if not _NAME.match(name) or keyword.iskeyword(name):
        meant = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_")
        meant = re.sub(r"^[0-9_]+", "", meant)
        example = meant if meant and _NAME.match(meant) and not keyword.iskeyword(meant) else (
            "send_invoices")
        what = "is a Python keyword" if keyword.iskeyword(name) else "is not a Python module name"
        raise NewJobError(name, f"{what} (it becomes jobs.<name>, imported by jobLogic)",
                          f"use lowercase letters, digits and '_', starting with a letter, "
                          f"e.g. NAME={example}")
    module, test = job_paths(name, root)
    for existing in (module, module.with_suffix(""), test):
        if existing.exists():
            shown = existing.relative_to(root)
            raise NewJobError(name, f"already exists: {shown}", "choose another name, or "
                              f"edit {shown} (make new-job never overwrites a file)")


def write_job(name: str, root: Path = PROJECT_DIR) -> list[Path]:
    """Write the job module and its test for `name` under `root`; the paths written."""
    check_name(name, root)
    module, test = job_paths(name, root)
    written: list[Path] = []
    # The team's two packages, which the kit never ships: `jobs` (imported by jobLogic) and
    # `tests.jobs` (test modules named like the kit's test folders).
    for package, docstring in (
        (module.parent / "__init__.py", "The team's job logic (jobLogic: jobs.<module>:run)."),
        (test.parent / "__init__.py", "The team's job tests (make new-job writes one per job)."),
    ):
        if not package.exists():
            package.parent.mkdir(parents=True, exist_ok=True)
            package.write_text(f'"""{docstring}"""\n', encoding="utf-8")
            written.append(package)
    for template, target in ((JOB_TEMPLATE, module), (TEST_TEMPLATE, test)):
        text = Template(template.read_text(encoding="utf-8")).substitute(name=name)
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("x", encoding="utf-8") as out:  # never over a file
            out.write(text)
        written.append(target)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scheduler-dedup new-job",
        description="Write a job module (function/jobs/<name>.py) and its test "
        "(tests/jobs/test_<name>.py) from the kit's templates.",
    )
    parser.add_argument("name", help="the module's name: jobs.<name>, e.g. send_invoices")
    parser.add_argument("--root", type=Path, default=PROJECT_DIR,
                        help="the checkout to write into (default: this one)")
    args = parser.parse_args(argv)
    try:
        written = write_job(args.name, args.root)
    except NewJobError as exc:
        print(f"make new-job: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path.relative_to(args.root)}")
    print(f"Next: write the job in {JOBS_DIR / args.name}.py, name it in a stack file "
          f"(jobLogic: jobs.{args.name}:run), and run make test (it runs "
          f"{TESTS_DIR / f'test_{args.name}.py'} too).")
    return 0


if __name__ == "__main__":
    from operator_tools import not_an_entry_point

    not_an_entry_point("new-job")

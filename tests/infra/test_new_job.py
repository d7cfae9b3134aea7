"""`make new-job NAME=<name>`: a job module and its test from the kit's templates, held to
the kit's checks, the test collected and passing; a bad or taken name refused with the fix
and nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra import KIT_ROOT as REPO_ROOT
from operator_tools.new_job import NewJobError, main, write_job
from tests.infra.team_code import kit_checks, make_in, minimal_checkout, pytest_in
from tests.kit_tree import kit_clone


def written_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_a_new_job_passes_the_kits_checks_and_its_test_passes(tmp_path: Path) -> None:
    checkout = minimal_checkout(tmp_path)
    written = write_job("send_invoices", checkout)
    assert [str(p.relative_to(checkout)) for p in written] == [
        "function/jobs/__init__.py",
        "tests/jobs/__init__.py",
        "function/jobs/send_invoices.py",
        "tests/jobs/test_send_invoices.py",
    ]
    module = (checkout / "function/jobs/send_invoices.py").read_text(encoding="utf-8")
    assert "jobLogic: jobs.send_invoices:run" in module
    assert "def run(context: RunContext) -> dict[str, str]:" in module
    kit_checks(checkout, "function/jobs/send_invoices.py", "tests/jobs/test_send_invoices.py",
               "function/jobs/__init__.py", "tests/jobs/__init__.py")
    # Collected as pyproject.toml's testpaths say, as `make test` runs them.
    result = pytest_in(checkout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "2 passed" in result.stdout
    # A second job beside it: the packages' __init__.py are kept, not rewritten.
    assert [p.name for p in write_job("reports", checkout)] == ["reports.py", "test_reports.py"]
    result = pytest_in(checkout)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "4 passed" in result.stdout


def test_the_generated_test_fails_a_job_whose_result_is_not_stored(tmp_path: Path) -> None:
    """Not vacuous: a job returning what the record cannot store fails its test."""
    checkout = minimal_checkout(tmp_path)
    write_job("broken", checkout)
    module = checkout / "function/jobs/broken.py"
    module.write_text(module.read_text(encoding="utf-8").replace(
        'return {"scheduled_for": context.schedule_time.isoformat()}',
        'return {"scheduled_for": context.schedule_time}  # type: ignore[dict-item]'),
        encoding="utf-8")
    result = pytest_in(checkout, "tests/jobs")
    assert result.returncode == 1, result.stdout[-3000:]
    assert "1 failed, 1 passed" in result.stdout


@pytest.mark.parametrize(
    ("name", "problem", "fix"),
    [
        ("send-invoices", "is not a Python module name", "e.g. NAME=send_invoices"),
        ("Billing", "is not a Python module name", "e.g. NAME=billing"),
        ("2fa_reset", "is not a Python module name", "e.g. NAME=fa_reset"),
        ("_private", "is not a Python module name", "e.g. NAME=private"),
        ("jobs.billing", "is not a Python module name", "e.g. NAME=jobs_billing"),
        ("class", "is a Python keyword", "starting with a letter"),
        ("", "is empty", "make new-job NAME=<name>"),
    ],
)
def test_a_bad_name_is_refused_with_the_fix(
    name: str, problem: str, fix: str, tmp_path: Path
) -> None:
    checkout = minimal_checkout(tmp_path)
    before = written_files(checkout)
    with pytest.raises(NewJobError) as caught:
        write_job(name, checkout)
    message = str(caught.value)
    assert message.startswith(f"NAME={name!r} {problem}")
    assert "Fix: " in message and fix in message
    assert written_files(checkout) == before


@pytest.mark.parametrize(
    ("existing", "shown"),
    [
        ("function/jobs/billing.py", "function/jobs/billing.py"),
        ("function/jobs/billing/__init__.py", "function/jobs/billing"),
        ("tests/jobs/test_billing.py", "tests/jobs/test_billing.py"),
    ],
)
def test_an_existing_job_or_test_is_never_overwritten(
    existing: str, shown: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkout = minimal_checkout(tmp_path)
    (checkout / existing).parent.mkdir(parents=True, exist_ok=True)
    (checkout / existing).write_text("# the team's\n", encoding="utf-8")
    before = written_files(checkout)
    assert main(["billing", "--root", str(checkout)]) == 2
    err = capsys.readouterr().err
    assert f"make new-job: NAME='billing' already exists: {shown}. Fix: choose another name" in err
    assert written_files(checkout) == before
    assert (checkout / existing).read_text(encoding="utf-8") == "# the team's\n"


def test_make_new_job_refuses_a_missing_name(tmp_path: Path) -> None:
    """In a clone of the kit: refused before anything is written (the kit ships no
    function/jobs/ or tests/jobs/: they are the team's, created by its first make new-job)."""
    checkout = kit_clone(tmp_path)
    assert not (checkout / "function" / "jobs").exists()
    code, output = make_in(checkout, "new-job")
    assert code != 0
    assert "make new-job needs a name: make new-job NAME=<module name" in output
    assert not (checkout / "function" / "jobs").exists()
    assert not (checkout / "tests" / "jobs").exists()


def test_make_new_job_writes_into_a_checkout(tmp_path: Path) -> None:
    checkout = minimal_checkout(tmp_path)
    (checkout / "Makefile").write_text((REPO_ROOT / "Makefile").read_text(encoding="utf-8"))
    tools = checkout / "operator_tools"
    (tools / "templates").mkdir(parents=True)
    for name in ("__init__.py", "__main__.py", "new_job.py"):
        (tools / name).write_text((REPO_ROOT / "operator_tools" / name).read_text())
    for template in (REPO_ROOT / "operator_tools" / "templates").iterdir():
        (tools / "templates" / template.name).write_text(template.read_text())
    (checkout / "infra").mkdir()  # operator_tools imports infra (function/ on sys.path)
    (checkout / "infra" / "__init__.py").write_text((REPO_ROOT / "infra/__init__.py").read_text())
    # make runs the kit's door, scheduler-dedup, on the checkout's own (else the venv's
    # editable install would find this one's, and write the job here).
    door = checkout / "scheduler_dedup_kit"
    door.mkdir()
    for name in ("__init__.py", "__main__.py", "cli.py"):
        (door / name).write_text((REPO_ROOT / "scheduler_dedup_kit" / name).read_text())
    code, output = make_in(checkout, "new-job", "NAME=nightly_export")
    assert code == 0, output
    assert "wrote function/jobs/nightly_export.py" in output
    assert "wrote tests/jobs/test_nightly_export.py" in output
    assert "jobLogic: jobs.nightly_export:run" in output
    assert (checkout / "function/jobs/nightly_export.py").is_file()

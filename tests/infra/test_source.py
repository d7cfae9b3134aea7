"""Each function's source zip: deterministic, content-hashed, and a code change or a change
of that function's job table (only those) renames its object, which redeploys it."""

from __future__ import annotations

import copy
import io
import json
import os
import shutil
import zipfile
from pathlib import Path
from typing import Any, Final

import pytest

from infra.job_modules import JobModuleError
from infra.source import (
    JOB_ROUTES_TABLE,
    ZIP_EPOCH,
    SourceArchive,
    build_source_archive,
    read_archive_table,
    source_files,
    table_files,
    write_source_archive,
)
from operator_tools.offline import load_stack_config, run_offline
from tests.infra.helpers import OBJECT
from tests.kit_tree import kit_function
from tests.stacks import FIXTURE_STACKS_DIR


@pytest.fixture
def source_copy(tmp_path: Path) -> Path:
    """A private copy of the kit's function/ (the real one may change while tests run, and
    in a fork holds the team's jobs)."""
    return kit_function(tmp_path / "function")


def make_tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "main.py").write_text("def handle_scheduled_job(request):\n    return 'ok'\n")
    (root / "requirements.txt").write_text("functions-framework==3.10.2\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text("X = 1\n")
    return root


TEAM_JOBS: dict[str, str] = {
    "__init__.py": "",
    "requirements.in": "humanize\n",
    "requirements.txt": "humanize==4.15.0 \\\n    --hash=sha256:00\n",
    "inventory.py": "from jobs import common\n\ndef run(context):\n    return common.X\n",
    "common.py": "X = 1\n",
    "export.py": "import jobs.common\n\ndef run(context):\n    return {}\n",
    "reports/__init__.py": "",
    "reports/weekly.py": "from . import render\n\ndef run(context):\n    return {}\n",
    "reports/render.py": "TEMPLATE = 'templates/weekly.html'\n",
    "reports/templates/weekly.html": "<p>{{ total }}</p>\n",
}
"""A team's jobs/: three jobs, a module two of them share, a package with a template, the
team's requirements and lock."""


def make_team_tree(root: Path) -> Path:
    make_tree(root)
    for name, text in TEAM_JOBS.items():
        path = root / "jobs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def archive_names(archive: SourceArchive) -> list[str]:
    with zipfile.ZipFile(io.BytesIO(archive.data)) as zf:
        return zf.namelist()


def test_archive_is_deterministic_and_sorted(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "src")
    first = build_source_archive(root)
    second = build_source_archive(root)
    assert first == second
    with zipfile.ZipFile(io.BytesIO(first.data)) as zf:
        names = zf.namelist()
        assert (
            names
            == sorted(names)
            == ["main.py", "pkg/__init__.py", "pkg/mod.py", "requirements.txt"]
        )
        for info in zf.infolist():
            assert info.date_time == ZIP_EPOCH
            assert (info.external_attr >> 16) & 0o777 == 0o644
        assert zf.read("pkg/mod.py") == b"X = 1\n"


def test_caches_and_hidden_files_are_skipped(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "src")
    before = build_source_archive(root)
    (root / "pkg" / "__pycache__").mkdir()
    (root / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\x00compiled")
    (root / "stray.pyc").write_bytes(b"\x00")
    (root / ".pytest_cache").mkdir()
    (root / ".pytest_cache" / "README.md").write_text("cache")
    (root / ".env").write_text("SECRET=1")
    after = build_source_archive(root)
    assert after.sha256 == before.sha256
    assert [name for name, _ in source_files(root)] == [
        "main.py",
        "pkg/__init__.py",
        "pkg/mod.py",
        "requirements.txt",
    ]


def test_timestamps_do_not_change_the_hash(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "src")
    before = build_source_archive(root).sha256
    os.utime(root / "main.py", (1_000_000_000, 1_000_000_000))
    assert build_source_archive(root).sha256 == before


@pytest.mark.parametrize("edit", ["change", "add", "remove", "rename"])
def test_any_code_change_changes_the_hash(tmp_path: Path, edit: str) -> None:
    root = make_tree(tmp_path / "src")
    before = build_source_archive(root)
    if edit == "change":
        (root / "pkg" / "mod.py").write_text("X = 2\n")
    elif edit == "add":
        (root / "pkg" / "new.py").write_text("")
    elif edit == "remove":
        (root / "pkg" / "mod.py").unlink()
    else:
        (root / "pkg" / "mod.py").rename(root / "pkg" / "mod2.py")
    after = build_source_archive(root)
    assert after.sha256 != before.sha256
    assert after.object_name != before.object_name


def test_written_archive_is_content_addressed(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "src")
    archive, path = write_source_archive(root, tmp_path / "build")
    assert path.name == f"{archive.sha256}.zip"
    assert path.read_bytes() == archive.data
    again, same_path = write_source_archive(root, tmp_path / "build")
    assert (again, same_path) == (archive, path)
    assert archive.object_name == f"function-source/{archive.sha256}.zip"


def test_missing_source_dir_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        build_source_archive(tmp_path / "nope")


# The archive of make_team_tree with the routes below, as the kit built it before runtimes
# (commit a53a7f0): a stack without runtimes keeps its object name, so `pulumi up`
# redeploys nothing.
ROUTES_BEFORE_RUNTIMES: Final = {"j-inventory": "jobs.inventory:run"}
SHA256_BEFORE_RUNTIMES: Final = "a911f86b2937af918442a3c3d641a47ba5354a371926a5081630bbe928aba42e"


def test_without_job_modules_the_archive_is_the_bytes_it_always_was(tmp_path: Path) -> None:
    root = make_team_tree(tmp_path / "src")
    table = table_files(JOB_ROUTES_TABLE, ROUTES_BEFORE_RUNTIMES)
    archive = build_source_archive(root, table)
    assert archive.sha256 == SHA256_BEFORE_RUNTIMES
    assert write_source_archive(root, tmp_path / "build", table)[0] == archive
    # Every job module named, every file of jobs/ is needed: the very same bytes.
    every_job = ["jobs.inventory", "jobs.export", "jobs.reports.weekly", "example_jobs.x"]
    assert build_source_archive(root, table, job_modules=every_job) == archive


def test_a_runtimes_archive_holds_only_its_jobs_code(tmp_path: Path) -> None:
    root = make_team_tree(tmp_path / "src")
    kit = ["job_tables/job_routes.json", "main.py", "pkg/__init__.py", "pkg/mod.py",
           "requirements.txt"]
    lock = ["jobs/requirements.in", "jobs/requirements.txt"]
    routes = {"j-weekly": "jobs.reports.weekly:run"}
    archive, path = write_source_archive(
        root, tmp_path / "build", table_files(JOB_ROUTES_TABLE, routes),
        job_modules=["jobs.reports.weekly"])
    assert archive_names(archive) == sorted([
        *kit, *lock, "jobs/__init__.py", "jobs/reports/__init__.py",
        "jobs/reports/render.py", "jobs/reports/templates/weekly.html",
        "jobs/reports/weekly.py"])
    assert path.read_bytes() == archive.data
    assert json.loads(read_archive_table(path, JOB_ROUTES_TABLE) or "") == routes
    inventory = build_source_archive(
        root, table_files(JOB_ROUTES_TABLE, {"j-inventory": "jobs.inventory:run"}),
        job_modules=["jobs.inventory"])
    assert archive_names(inventory) == sorted([
        *kit, *lock, "jobs/__init__.py", "jobs/common.py", "jobs/inventory.py"])
    # What Cloud Build installs is the same union of the locks for every function.
    with zipfile.ZipFile(io.BytesIO(inventory.data)) as zf, \
            zipfile.ZipFile(io.BytesIO(archive.data)) as other:
        assert zf.read("requirements.txt") == other.read("requirements.txt")
        assert zf.read("requirements.txt").endswith(TEAM_JOBS["requirements.txt"].encode())
    # A runtime of the kit's example jobs only: none of the team's.
    assert [n for n in archive_names(build_source_archive(
        root, job_modules=["example_jobs.example"])) if n.startswith("jobs/")] == []
    # A change to a module another runtime imports leaves this archive alone.
    before = build_source_archive(root, job_modules=["jobs.reports.weekly"]).sha256
    (root / "jobs" / "common.py").write_text("X = 2\n")
    assert build_source_archive(root, job_modules=["jobs.reports.weekly"]).sha256 == before
    assert build_source_archive(root, job_modules=["jobs.inventory"]) != inventory


def test_a_runtimes_archive_names_a_missing_or_broken_job_module(tmp_path: Path) -> None:
    root = make_team_tree(tmp_path / "src")
    with pytest.raises(JobModuleError, match=r"'jobs\.gone'.*gone\.py"):
        build_source_archive(root, job_modules=["jobs.gone"])
    (root / "jobs" / "common.py").write_text("def broken(:\n")
    with pytest.raises(JobModuleError, match=r"common\.py:1"):
        build_source_archive(root, job_modules=["jobs.inventory"])


def _object_name(source_dir: Path, build_dir: Path) -> tuple[str, str]:
    run = run_offline(
        load_stack_config("dev", FIXTURE_STACKS_DIR),
        stack="dev",
        source_dir=source_dir,
        build_dir=build_dir,
    )
    obj = run.by_name("dedup-source").props["name"]
    assert run.by_name("dedup-source").type == OBJECT
    build = run.by_name("dedup-function").props["buildConfig"]
    deployed = build["source"]["storageSource"]["object"]
    return obj, deployed


def test_code_change_renames_the_source_object(source_copy: Path, tmp_path: Path) -> None:
    build_dir = tmp_path / "build"
    name, deployed = _object_name(source_copy, build_dir)
    assert deployed == name

    # Unchanged tree: same object name, so `pulumi up` leaves the function alone.
    assert _object_name(source_copy, build_dir) == (name, deployed)
    twin = tmp_path / "twin"
    shutil.copytree(source_copy, twin)
    assert _object_name(twin, build_dir)[0] == name

    # A change under function/ renames the object, which the function deploys from.
    target = source_copy / "main.py"
    target.write_text(target.read_text() + "\n# changed\n")
    changed, changed_deployed = _object_name(source_copy, build_dir)
    assert changed != name
    assert changed_deployed == changed


def test_the_job_table_is_in_the_archive_and_in_its_hash(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "src")
    routes = {"p-export": "example_jobs.example:run"}
    archive = build_source_archive(root, table_files(JOB_ROUTES_TABLE, routes))
    assert archive.sha256 == build_source_archive(
        root, table_files(JOB_ROUTES_TABLE, dict(reversed(routes.items())))).sha256
    assert archive.sha256 != build_source_archive(root).sha256
    assert archive.sha256 != build_source_archive(
        root, table_files(JOB_ROUTES_TABLE, {"p-export": "jobs.other:run"})).sha256
    _, path = write_source_archive(root, tmp_path / "build", table_files(JOB_ROUTES_TABLE, routes))
    assert path.is_absolute()  # the policy pack opens it from another working directory
    assert json.loads(read_archive_table(path, JOB_ROUTES_TABLE) or "") == routes
    assert read_archive_table(path, "watch_jobs.json") is None


def test_a_local_job_tables_directory_never_ships(tmp_path: Path) -> None:
    """Only the tables generated for a function ship: a stale local one (another function's
    table, say) would otherwise be read as this function's."""
    root = make_tree(tmp_path / "src")
    (root / "job_tables").mkdir()
    (root / "job_tables" / "proxy_routes.json").write_text("{}")
    archive = build_source_archive(root, table_files(JOB_ROUTES_TABLE, {}))
    names = zipfile.ZipFile(io.BytesIO(archive.data)).namelist()
    assert [n for n in names if n.startswith("job_tables/")] == ["job_tables/job_routes.json"]


def _objects(raw: dict[str, Any], stack: str, build_dir: Path) -> dict[str, str]:
    run = run_offline(raw, stack=stack, build_dir=build_dir)
    return {o.name: o.props["name"] for o in run.of_type(OBJECT)}


def _with_job(raw: dict[str, Any], name: str, **changes: Any) -> dict[str, Any]:
    changed = copy.deepcopy(raw)
    for job in changed["scheduler-dedup:jobs"]:
        if job["name"] == name:
            job.update(changes)
    return changed


def test_a_job_change_redeploys_exactly_the_functions_whose_table_changed(
    tmp_path: Path,
) -> None:
    prod = load_stack_config("prod", FIXTURE_STACKS_DIR)
    before = _objects(prod, "prod", tmp_path)
    assert set(before) == {"dedup-source", "proxy-source", "watchdog-source"}

    def changed(raw: dict[str, Any]) -> set[str]:
        after = _objects(raw, "prod", tmp_path)
        return {name for name in before if after[name] != before[name]}

    plain = next(j["name"] for j in prod["scheduler-dedup:jobs"] if "proxy" not in j)
    proxied = next(j for j in prod["scheduler-dedup:jobs"] if "proxy" in j)
    # A schedule is the watchdog's only (the functions route by job ID, not by time).
    assert changed(_with_job(prod, plain, schedule="1 2 * * *")) == {"watchdog-source"}
    # Job logic is the dedup function's only.
    assert changed(_with_job(prod, plain, jobLogic="example_jobs.example:run_other")) == {
        "dedup-source"}
    # A proxied job's target is the proxy's only.
    target = {**proxied["proxy"], "resource": proxied["proxy"]["resource"] + "-v2"}
    assert changed(_with_job(prod, proxied["name"], proxy=target)) == {"proxy-source"}

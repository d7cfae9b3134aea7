"""Which files of the team's jobs/ a function's jobs need (infra/job_modules.py): the named
modules and, transitively, what they import, read from the syntax tree, never run."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.job_modules import JobModuleError, job_module_files


def make_jobs(root: Path, files: dict[str, str]) -> Path:
    """A team's jobs/ folder in `root` holding `files` (name relative to jobs/ -> text)."""
    jobs = root / "jobs"
    jobs.mkdir(parents=True)
    for name, text in files.items():
        path = jobs / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return jobs


def needed(jobs: Path, *modules: str) -> list[str]:
    """The names `job_module_files` keeps of every file in `jobs`."""
    files = [(p.relative_to(jobs).as_posix(), p) for p in sorted(jobs.rglob("*")) if p.is_file()]
    kept = job_module_files(jobs, files, modules)
    assert kept == sorted(kept)
    assert all(path == jobs / name for name, path in kept)
    return [name for name, _ in kept]


def test_absolute_imports_are_followed_transitively(tmp_path: Path) -> None:
    jobs = make_jobs(tmp_path, {
        "__init__.py": "",
        "inventory.py": "import jobs.client\n\ndef run(context):\n    return {}\n",
        "client.py": "from jobs.auth import token\n",
        "auth.py": "from jobs import config\n\ndef token() -> str:\n    return ''\n",
        "config.py": "from jobs.shared import retry as r\n",
        "shared/__init__.py": "",
        "shared/retry.py": "X = 1\n",
        "shared/unused.py": "X = 2\n",
        "export.py": "import jobs.bucket\n",
        "bucket.py": "",
    })
    assert needed(jobs, "jobs.inventory") == [
        "__init__.py", "auth.py", "client.py", "config.py", "inventory.py",
        "shared/__init__.py", "shared/retry.py"]
    assert needed(jobs, "jobs.export") == ["__init__.py", "bucket.py", "export.py"]
    assert needed(jobs, "jobs.export", "jobs.inventory") == sorted(
        {*needed(jobs, "jobs.export"), *needed(jobs, "jobs.inventory")})


def test_relative_imports_are_followed(tmp_path: Path) -> None:
    jobs = make_jobs(tmp_path, {
        "__init__.py": "",
        "top.py": "",
        "other.py": "",
        "reports/__init__.py": "",
        "reports/weekly.py": "from . import render\nfrom .fmt import money\n",
        "reports/render.py": "from .. import top\n",
        "reports/fmt.py": "def money(x: int) -> str:\n    return str(x)\n",
        "reports/daily.py": "",
        "reports/sub/__init__.py": "from . import leaf\n",
        "reports/sub/leaf.py": "from ..fmt import money\n",
        "reports/deep.py": "from .sub.leaf import money\n",
    })
    assert needed(jobs, "jobs.reports.weekly") == [
        "__init__.py", "reports/__init__.py", "reports/fmt.py", "reports/render.py",
        "reports/weekly.py", "top.py"]
    # An __init__ is its own package: `from . import leaf` there is reports.sub.leaf.
    assert needed(jobs, "jobs.reports.deep") == [
        "__init__.py", "reports/__init__.py", "reports/deep.py", "reports/fmt.py",
        "reports/sub/__init__.py", "reports/sub/leaf.py"]


def test_a_modules_packages_come_with_it_and_their_imports_too(tmp_path: Path) -> None:
    jobs = make_jobs(tmp_path, {
        "__init__.py": "from jobs import logging_setup\n",
        "logging_setup.py": "",
        "reports/__init__.py": "from .shared import X\n",
        "reports/shared.py": "X = 1\n",
        "reports/weekly.py": "",
        "reports/monthly.py": "",
    })
    assert needed(jobs, "jobs.reports.weekly") == [
        "__init__.py", "logging_setup.py", "reports/__init__.py", "reports/shared.py",
        "reports/weekly.py"]


def test_a_named_package_ships_whole_with_its_data(tmp_path: Path) -> None:
    jobs = make_jobs(tmp_path, {
        "reports/__init__.py": "def run(context):\n    return {}\n",
        "reports/unimported.py": "from jobs import helper\n",
        "reports/templates/weekly.html": "<p/>\n",
        "reports/sub/__init__.py": "",
        "reports/sub/more.py": "",
        "reports/sub/data.csv": "a,b\n",
        "helper.py": "",
        "inventory.py": "",
        "other/__init__.py": "",
        "other/data.json": "{}\n",
    })
    # Its modules' imports are followed as well (helper.py); siblings stay out.
    assert needed(jobs, "jobs.reports") == [
        "helper.py", "reports/__init__.py", "reports/sub/__init__.py", "reports/sub/data.csv",
        "reports/sub/more.py", "reports/templates/weekly.html", "reports/unimported.py"]


def test_data_travels_with_the_folders_of_the_shipped_modules(tmp_path: Path) -> None:
    jobs = make_jobs(tmp_path, {
        "requirements.in": "humanize\n",
        "requirements.txt": "humanize==4.15.0 \\\n    --hash=sha256:00\n",
        "templates/banner.txt": "hello\n",
        "inventory.py": "",
        "reports/__init__.py": "",
        "reports/weekly.py": "",
        "reports/templates/weekly.html": "<p/>\n",
        "reports/templates/parts/footer.html": "<hr/>\n",
        "export/__init__.py": "",
        "export/job.py": "",
        "export/schema.json": "{}\n",
    })
    # jobs/'s own files (the team's lock, a python-free templates/) come with any module.
    assert needed(jobs, "jobs.inventory") == [
        "inventory.py", "requirements.in", "requirements.txt", "templates/banner.txt"]
    assert needed(jobs, "jobs.reports.weekly") == [
        "reports/__init__.py", "reports/templates/parts/footer.html",
        "reports/templates/weekly.html", "reports/weekly.py", "requirements.in",
        "requirements.txt", "templates/banner.txt"]


def test_a_cycle_between_two_modules_ships_both_once(tmp_path: Path) -> None:
    jobs = make_jobs(tmp_path, {
        "a.py": "import jobs.b\n",
        "b.py": "from jobs import a\n",
        "c.py": "",
    })
    assert needed(jobs, "jobs.a") == needed(jobs, "jobs.b") == ["a.py", "b.py"]


def test_without_init_files_the_namespace_folders_still_resolve(tmp_path: Path) -> None:
    jobs = make_jobs(tmp_path, {
        "reports/weekly.py": "from jobs.reports import render\n",
        "reports/render.py": "",
        "reports/monthly.py": "",
    })
    assert needed(jobs, "jobs.reports.weekly") == ["reports/render.py", "reports/weekly.py"]


def test_imports_anywhere_and_literal_dynamic_imports_count(tmp_path: Path) -> None:
    jobs = make_jobs(tmp_path, {
        "job.py": (
            "import importlib\n"
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from jobs.types import Row\n"
            "try:\n"
            "    import jobs.optional_missing\n"  # guarded and absent: nothing to ship
            "except ImportError:\n"
            "    pass\n"
            "def run(context):\n"
            "    from jobs import late\n"
            "    plugin = importlib.import_module('jobs.plugin')\n"
            "    return __import__('jobs.legacy')\n"
        ),
        "types.py": "", "late.py": "", "plugin.py": "", "legacy.py": "", "unrelated.py": "",
    })
    assert needed(jobs, "jobs.job") == ["job.py", "late.py", "legacy.py", "plugin.py",
                                        "types.py"]


def test_the_kits_modules_are_not_the_teams(tmp_path: Path) -> None:
    jobs = make_jobs(tmp_path, {"__init__.py": "", "x.py": "", "requirements.txt": ""})
    assert needed(jobs, "example_jobs.example", "dedup.protocol", "jobsmith.x") == []
    assert needed(jobs) == []
    assert needed(jobs, "jobs") == ["__init__.py", "requirements.txt", "x.py"]


def test_the_teams_code_is_read_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    jobs = make_jobs(tmp_path / "team", {
        "boom.py": f"open({str(marker)!r}, 'w').close()\nraise SystemExit('ran')\n",
    })
    assert needed(jobs, "jobs.boom") == ["boom.py"]
    assert not marker.exists()


def test_a_named_module_that_is_not_there_is_a_clear_error(tmp_path: Path) -> None:
    jobs = make_jobs(tmp_path, {"inventory.py": ""})
    with pytest.raises(JobModuleError) as raised:
        needed(jobs, "jobs.inventory", "jobs.reports.weekly")
    message = str(raised.value)
    assert "'jobs.reports.weekly'" in message
    assert str(jobs / "reports" / "weekly.py") in message
    assert str(jobs / "reports" / "weekly" / "__init__.py") in message
    with pytest.raises(JobModuleError, match=r"'jobs\.missing'"):
        needed(tmp_path / "nowhere", "jobs.missing")


def test_a_module_that_does_not_parse_is_named_with_its_line(tmp_path: Path) -> None:
    jobs = make_jobs(tmp_path, {
        "inventory.py": "from jobs import broken\n",
        "broken.py": "X = 1\n\ndef run(context)\n    return {}\n",
    })
    with pytest.raises(JobModuleError) as raised:
        needed(jobs, "jobs.inventory")
    assert f"{jobs / 'broken.py'}:3" in str(raised.value)
    assert "'jobs.broken'" in str(raised.value)

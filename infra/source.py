"""Each function's source archive: a deterministic zip of `function/` plus that function's
job table (dedup/tables.py), named by its hash. Its `requirements.txt` is the kit's lock and
the team's (infra/lock.py), what Cloud Build installs. `function/` is the kit's (dedup,
main.py, its lock) and the team's `jobs/`: one folder in a fork, and, when the kit is
installed, the installed kit's function/ plus the `function/jobs/` of the team's repository
(`team_dir`), so a new kit version is a new archive and redeploys. A runtime's archive
(`job_modules` given: its jobs' modules) holds of `jobs/` only what those jobs import
(infra/job_modules.py); without it, all of `jobs/` ships, as it always has.

The same tree and table always give the same bytes (entries sorted, fixed timestamps and
permissions, caches skipped, the table's JSON with sorted keys), so the object name
`function-source/<sha256>.zip` changes exactly when the code or that function's table
changes: the object is replaced, which redeploys that function and no other; an unchanged
tree and table keep the name and `pulumi up` does nothing. Per-job data travels here, not in
environment variables, which Cloud Run caps at 32 KiB per function (docs/limits.md).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from dedup.tables import (
    JOB_ROUTES_TABLE,
    PROXY_ROUTES_TABLE,
    TABLES_DIR,
    WATCH_JOBS_TABLE,
    archive_path,
)
from infra.job_modules import JOBS_DIR, job_module_files
from infra.lock import deployed_requirements

__all__ = [
    "JOB_ROUTES_TABLE",
    "PROXY_ROUTES_TABLE",
    "WATCH_JOBS_TABLE",
    "SourceArchive",
    "build_source_archive",
    "read_archive_table",
    "table_files",
    "write_source_archive",
]

# 1980-01-01 00:00:00, the earliest time a zip entry can carry.
ZIP_EPOCH: Final = (1980, 1, 1, 0, 0, 0)
FILE_MODE: Final = 0o644
SKIPPED_DIRS: Final = frozenset({"__pycache__", "node_modules"})
SKIPPED_SUFFIXES: Final = (".pyc", ".pyo")
SKIPPED_FILES: Final = frozenset({".DS_Store"})
OBJECT_PREFIX: Final = "function-source/"


@dataclass(frozen=True)
class SourceArchive:
    """The zip bytes and their SHA-256 (hex)."""

    data: bytes
    sha256: str

    @property
    def object_name(self) -> str:
        """The content-hashed Cloud Storage object name."""
        return f"{OBJECT_PREFIX}{self.sha256}.zip"


def source_files(
    source_dir: Path,
    team_dir: Path | None = None,
    *,
    job_modules: Collection[str] | None = None,
) -> list[tuple[str, Path]]:
    """(archive name, path) of every file to ship, sorted by archive name: `source_dir`'s,
    and when the team's function/ is another folder (`team_dir`, an installed kit), its
    `jobs/` instead of any in `source_dir`. With `job_modules` (the `module` parts of a
    function's `module:function` job logic), only the files of `jobs/` those modules need
    (infra/job_modules.py); the kit's files ship all the same.

    Skips `__pycache__`, compiled files and hidden files or directories (tool caches,
    virtual environments, editor files).
    """
    files = _all_files(source_dir, team_dir)
    if job_modules is None:
        return files
    prefix = f"{JOBS_DIR}/"
    kit = [(name, path) for name, path in files if not name.startswith(prefix)]
    jobs = [(name.removeprefix(prefix), path) for name, path in files
            if name.startswith(prefix)]
    needed = job_module_files((team_dir or source_dir) / JOBS_DIR, jobs, job_modules)
    return sorted(kit + [(f"{prefix}{name}", path) for name, path in needed])


def _all_files(source_dir: Path, team_dir: Path | None) -> list[tuple[str, Path]]:
    if team_dir is None or team_dir.resolve() == source_dir.resolve():
        return _tree_files(source_dir)
    kit = [(name, path) for name, path in _tree_files(source_dir)
           if not name.startswith(f"{JOBS_DIR}/")]
    jobs = team_dir / JOBS_DIR
    team = _tree_files(jobs) if jobs.is_dir() else []
    return sorted(kit + [(f"{JOBS_DIR}/{name}", path) for name, path in team])


def _tree_files(source_dir: Path) -> list[tuple[str, Path]]:
    if not source_dir.is_dir():
        raise FileNotFoundError(f"function source directory {source_dir} does not exist")
    found: list[tuple[str, Path]] = []
    for root, dirs, files in os.walk(source_dir):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("."))
        for name in files:
            if name in SKIPPED_FILES or name.startswith(".") or name.endswith(SKIPPED_SUFFIXES):
                continue
            path = Path(root) / name
            if not path.is_file():
                continue
            found.append((path.relative_to(source_dir).as_posix(), path))
    return sorted(found)


def table_files(table: str, content: object) -> dict[str, bytes]:
    """A function's job table as its archive carries it: job_tables/<table>, compact JSON
    with sorted keys (the same table, the same bytes)."""
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return {archive_path(table): text.encode("utf-8")}


def build_source_archive(
    source_dir: Path,
    extra_files: Mapping[str, bytes] | None = None,
    team_dir: Path | None = None,
    *,
    job_modules: Collection[str] | None = None,
) -> SourceArchive:
    """Zip `source_dir` (with `team_dir`'s jobs, those `job_modules` need when given: see
    `source_files`) and `extra_files` (archive name -> bytes: a function's job table)
    deterministically; return the bytes and their SHA-256."""
    extra = dict(extra_files or {})
    # Only the tables generated for this function ship: never a local job_tables/ (a stale
    # table of another function would be read as this one's).
    entries: dict[str, Path | bytes] = {
        arcname: path
        for arcname, path in source_files(source_dir, team_dir, job_modules=job_modules)
        if not arcname.startswith(f"{TABLES_DIR}/")
    }
    if "requirements.txt" in entries:  # what Cloud Build installs: the kit's and the team's
        entries["requirements.txt"] = deployed_requirements(source_dir, team_dir)
    entries.update(extra)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for arcname in sorted(entries):
            content = entries[arcname]
            info = zipfile.ZipInfo(arcname, date_time=ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100000 | FILE_MODE) << 16  # regular file, rw-r--r--
            info.create_system = 3  # unix, so the attributes above are honoured
            zf.writestr(info, content if isinstance(content, bytes) else content.read_bytes())
    data = buffer.getvalue()
    return SourceArchive(data=data, sha256=hashlib.sha256(data).hexdigest())


def write_source_archive(
    source_dir: Path,
    build_dir: Path,
    extra_files: Mapping[str, bytes] | None = None,
    team_dir: Path | None = None,
    *,
    job_modules: Collection[str] | None = None,
) -> tuple[SourceArchive, Path]:
    """Build the archive and write it to `build_dir/<sha256>.zip` (atomically, once).

    Pulumi uploads the object from this file (a FileAsset, by its absolute path: the policy
    pack reads the job tables from it too); the name is content-addressed, so concurrent or
    repeated runs write identical files.
    """
    archive = build_source_archive(source_dir, extra_files, team_dir,
                                   job_modules=job_modules)
    build_dir.mkdir(parents=True, exist_ok=True)
    path = build_dir.resolve() / f"{archive.sha256}.zip"
    if not path.exists() or path.read_bytes() != archive.data:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(archive.data)
        os.replace(tmp, path)
    return archive, path


def read_archive_table(archive: str | Path, table: str) -> str | None:
    """The job table `table` in the source archive at `archive` (text), None if the archive
    has none. Raises OSError or zipfile.BadZipFile for an archive that cannot be read."""
    with zipfile.ZipFile(archive) as zf:
        try:
            return zf.read(archive_path(table)).decode("utf-8")
        except KeyError:
            return None

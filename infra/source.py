"""Each function's source archive: a deterministic zip of `function/` plus that function's
job table (dedup/tables.py), named by its hash. `function/` is the kit's (dedup, main.py,
example_jobs, its lock) and the team's `jobs/`: one folder in a fork, and, when the kit is
installed, the installed kit's function/ plus the `function/jobs/` of the team's repository
(`team_dir`), so a new kit version is a new archive and redeploys.

What an archive holds follows what its function is trusted with:

- a function that runs job logic (the dedup function, each runtime) ships function/, the
  team's `jobs/` included, and as `requirements.txt` the kit's lock and the team's
  (infra/lock.py `deployed_requirements`), what Cloud Build installs. A runtime's archive
  (`job_modules` given: its jobs' modules) holds of `jobs/` only what those jobs import
  (infra/job_modules.py); without it, all of `jobs/` ships, as it always has;
- a function that runs none (`kit_only`: the proxy, the watchdog, which hold the token
  secret, the queue and the watchdog's identity) ships only the kit's code (`KIT_CODE`)
  and the kit's lock alone (`kit_requirements`): no team module and no team package is
  built, installed or importable there, so neither an import nor an install hook of the
  team's runs with their identities. Nor the kit's `example_jobs/`: it is job logic, which
  neither entry point imports (function/main.py; the proxy's job logic is its own,
  dedup/proxy/handler.py).

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
from infra.lock import KIT_LOCK, deployed_requirements, kit_requirements

__all__ = [
    "JOB_ROUTES_TABLE",
    "KIT_CODE",
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
KIT_CODE: Final = ("main.py", "dedup/")
"""What of function/ a kit-only archive ships besides the kit's lock: the entry points
(main.py) and the kit's package (a folder ends with `/`); nothing else a fork may keep in
function/ (its `jobs/`, the kit's `example_jobs/`, a module of its own)."""


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
    kit_only: bool = False,
) -> list[tuple[str, Path]]:
    """(archive name, path) of every file to ship, sorted by archive name: `source_dir`'s,
    and when the team's function/ is another folder (`team_dir`, an installed kit), its
    `jobs/` instead of any in `source_dir`. With `job_modules` (the `module` parts of a
    function's `module:function` job logic), only the files of `jobs/` those modules need
    (infra/job_modules.py); the kit's files ship all the same. `kit_only`: `source_dir`'s
    `KIT_CODE` and the kit's lock alone, whatever `team_dir` holds.

    Skips `__pycache__`, compiled files and hidden files or directories (tool caches,
    virtual environments, editor files).
    """
    if kit_only:
        if job_modules is not None:
            raise ValueError("a kit-only archive carries no job modules")
        return [(name, path) for name, path in _tree_files(source_dir)
                if name == KIT_LOCK.name or _is_kit_code(name)]
    files = _all_files(source_dir, team_dir)
    if job_modules is None:
        return files
    prefix = f"{JOBS_DIR}/"
    kit = [(name, path) for name, path in files if not name.startswith(prefix)]
    jobs = [(name.removeprefix(prefix), path) for name, path in files
            if name.startswith(prefix)]
    needed = job_module_files((team_dir or source_dir) / JOBS_DIR, jobs, job_modules)
    return sorted(kit + [(f"{prefix}{name}", path) for name, path in needed])


def _is_kit_code(name: str) -> bool:
    return any(name == kit or (kit.endswith("/") and name.startswith(kit)) for kit in KIT_CODE)


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
    kit_only: bool = False,
) -> SourceArchive:
    """Zip `source_dir` (with `team_dir`'s jobs, those `job_modules` need when given;
    `kit_only`: the kit's code alone, see `source_files`) and `extra_files` (archive name
    -> bytes: a function's job table) deterministically; return the bytes and their
    SHA-256."""
    extra = dict(extra_files or {})
    # Only the tables generated for this function ship: never a local job_tables/ (a stale
    # table of another function would be read as this one's).
    entries: dict[str, Path | bytes] = {
        arcname: path
        for arcname, path in source_files(source_dir, team_dir, job_modules=job_modules,
                                          kit_only=kit_only)
        if not arcname.startswith(f"{TABLES_DIR}/")
    }
    if KIT_LOCK.name in entries:  # what Cloud Build installs: the kit's (and the team's)
        entries[KIT_LOCK.name] = (kit_requirements(source_dir) if kit_only
                                  else deployed_requirements(source_dir, team_dir))
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
    kit_only: bool = False,
) -> tuple[SourceArchive, Path]:
    """Build the archive and write it to `build_dir/<sha256>.zip` (atomically, once).

    Pulumi uploads the object from this file (a FileAsset, by its absolute path: the policy
    pack reads the job tables from it too); the name is content-addressed, so concurrent or
    repeated runs write identical files.
    """
    archive = build_source_archive(source_dir, extra_files, team_dir,
                                   job_modules=job_modules, kit_only=kit_only)
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

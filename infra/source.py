"""Each function's source archive: a deterministic zip of `function/` plus that function's
job table (dedup/tables.py), named by its hash. Its `requirements.txt` is the kit's lock and
the team's (infra/lock.py), what Cloud Build installs.

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
from collections.abc import Mapping
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


def source_files(source_dir: Path) -> list[tuple[str, Path]]:
    """(archive name, path) of every file to ship, sorted by archive name.

    Skips `__pycache__`, compiled files and hidden files or directories (tool caches,
    virtual environments, editor files).
    """
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
    source_dir: Path, extra_files: Mapping[str, bytes] | None = None
) -> SourceArchive:
    """Zip `source_dir` and `extra_files` (archive name -> bytes: a function's job table)
    deterministically; return the bytes and their SHA-256."""
    extra = dict(extra_files or {})
    # Only the tables generated for this function ship: never a local job_tables/ (a stale
    # table of another function would be read as this one's).
    entries: dict[str, Path | bytes] = {
        arcname: path for arcname, path in source_files(source_dir)
        if not arcname.startswith(f"{TABLES_DIR}/")
    }
    if "requirements.txt" in entries:  # what Cloud Build installs: the kit's and the team's
        entries["requirements.txt"] = deployed_requirements(source_dir)
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
    source_dir: Path, build_dir: Path, extra_files: Mapping[str, bytes] | None = None
) -> tuple[SourceArchive, Path]:
    """Build the archive and write it to `build_dir/<sha256>.zip` (atomically, once).

    Pulumi uploads the object from this file (a FileAsset, by its absolute path: the policy
    pack reads the job tables from it too); the name is content-addressed, so concurrent or
    repeated runs write identical files.
    """
    archive = build_source_archive(source_dir, extra_files)
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

"""The function's source archive: a deterministic zip of `function/`, named by its hash.

The same tree always gives the same bytes (entries sorted, fixed timestamps and
permissions, caches skipped), so the object name `function-source/<sha256>.zip` changes
exactly when the code changes: a code change replaces the object, which redeploys the
function; an unchanged tree keeps the name and `pulumi up` does nothing.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

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


def build_source_archive(source_dir: Path) -> SourceArchive:
    """Zip `source_dir` deterministically; return the bytes and their SHA-256."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for arcname, path in source_files(source_dir):
            info = zipfile.ZipInfo(arcname, date_time=ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100000 | FILE_MODE) << 16  # regular file, rw-r--r--
            info.create_system = 3  # unix, so the attributes above are honoured
            zf.writestr(info, path.read_bytes())
    data = buffer.getvalue()
    return SourceArchive(data=data, sha256=hashlib.sha256(data).hexdigest())


def write_source_archive(source_dir: Path, build_dir: Path) -> tuple[SourceArchive, Path]:
    """Build the archive and write it to `build_dir/<sha256>.zip` (atomically, once).

    Pulumi uploads the object from this file (a FileAsset); the name is content-addressed,
    so concurrent or repeated runs write identical files.
    """
    archive = build_source_archive(source_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    path = build_dir / f"{archive.sha256}.zip"
    if not path.exists() or path.read_bytes() != archive.data:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(archive.data)
        os.replace(tmp, path)
    return archive, path

"""Job tables for functions run locally (tests, demo, bench).

Deployed, each function reads its job table from its own source archive (infra/source.py);
a function run from this checkout reads it from the directory DEDUP_TABLES_DIR names
(function/dedup/tables.py), which this writes.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from dedup.tables import JOB_ROUTES_TABLE, PROXY_ROUTES_TABLE, TABLES_DIR_ENV, WATCH_JOBS_TABLE

TableContent = object
"""A table's JSON value, or its raw text (a str, written as is: malformed tables in tests)."""


def write_job_tables(
    directory: Path,
    *,
    job_routes: TableContent | None = None,
    proxy_routes: TableContent | None = None,
    watch_jobs: TableContent | None = None,
) -> dict[str, str]:
    """Write the given tables into `directory` (created); return the environment entry that
    points a function at them ({DEDUP_TABLES_DIR: directory})."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in (
        (JOB_ROUTES_TABLE, job_routes),
        (PROXY_ROUTES_TABLE, proxy_routes),
        (WATCH_JOBS_TABLE, watch_jobs),
    ):
        if content is None:
            continue
        text = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
        (directory / name).write_text(text, encoding="utf-8")
    return {TABLES_DIR_ENV: str(directory)}


def job_tables_env(
    *,
    job_routes: TableContent | None = None,
    proxy_routes: TableContent | None = None,
    watch_jobs: TableContent | None = None,
) -> dict[str, str]:
    """write_job_tables into a fresh temporary directory (left for the OS to clean: a few
    bytes per call), for environments built where no test directory is at hand."""
    directory = Path(tempfile.mkdtemp(prefix="dedup-tables-"))
    return write_job_tables(
        directory, job_routes=job_routes, proxy_routes=proxy_routes, watch_jobs=watch_jobs
    )

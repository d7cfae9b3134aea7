"""The job tables: per-job data each function reads at start-up, shipped with its code.

Environment variables are capped at 32 KiB per Cloud Run function, about 100 jobs' worth of
the watchdog's list; Scheduler allows up to 5,000 jobs per region. So infra writes each
function's table as a JSON file into that function's own source archive (infra/source.py),
under TABLES_DIR beside main.py: a change of jobs changes exactly the archives, and so
redeploys exactly the functions, whose table changed. Only names here (no parsing): infra
and the policy pack import them, the function's settings read the files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

TABLES_DIR: Final = "job_tables"
"""The tables' directory in a function's source archive (beside main.py)."""
TABLES_DIR_ENV: Final = "DEDUP_TABLES_DIR"
"""Where the tables are instead (local servers, tests): the only way to give them but the
archive."""
JOB_ROUTES_TABLE: Final = "job_routes.json"
"""The dedup function's: {"job-id": "module:function"} (settings.Settings.job_routes)."""
PROXY_ROUTES_TABLE: Final = "proxy_routes.json"
"""The proxy's: {"job-id": {"target", "resource", ...}} (proxy.ProxySettings.routes)."""
WATCH_JOBS_TABLE: Final = "watch_jobs.json"
"""The watchdog's: [{"name", "schedule", ...}] (watchdog.parse_watch_jobs)."""

SOURCE_ROOT: Final = Path(__file__).resolve().parent.parent
"""The function's source root (main.py's directory), wherever the runtime unpacked it."""


def archive_path(table: str) -> str:
    """The table's path inside a source archive."""
    return f"{TABLES_DIR}/{table}"

"""The function's settings, read once at start-up: from the environment, and its job table
from the file shipped with its code (dedup/tables.py).

A bad value fails the start-up with a message naming the variable (or the file) and the
fix, rather than failing requests one by one.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from dedup.tables import JOB_ROUTES_TABLE, SOURCE_ROOT, TABLES_DIR, TABLES_DIR_ENV

ALLOWED_CALLERS_ENV = "DEDUP_ALLOWED_CALLERS"
DEFAULT_JOB_ENV = "DEDUP_JOB"
"""The `module:function` a function runs for a job its job table does not name."""
FORCED_RUN_MARGIN_ENV = "DEDUP_FORCED_RUN_MARGIN_SECONDS"
VERIFY_TOKEN_AUDIENCE_ENV = "DEDUP_VERIFY_TOKEN_AUDIENCE"
MAX_BODY_BYTES_ENV = "DEDUP_MAX_BODY_BYTES"
# 1 MiB: far above any Scheduler job body (a few hundred bytes in the kit's jobs), far below
# what starves an instance (a 32 MiB JSON body costs about 800 MiB once parsed).
DEFAULT_MAX_BODY_BYTES = 1 << 20
# The origin a Cloud Run service's tokens name as audience: https, a lower-case host name,
# an optional port, nothing after it (the jobs and the watchdog send the service's URL).
_HTTPS_ORIGIN = re.compile(
    r"https://[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)+"
    r"(?::[0-9]{1,5})?"
)
# An e-mail address as Google writes service accounts' (and users'): local@domain.tld, no
# wildcards or other punctuation a reader could take for a pattern.
_EMAIL = re.compile(
    r"[A-Za-z0-9._%+-]+@"
    r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+"
)


class SettingsError(ValueError):
    """A DEDUP_* environment variable is missing or malformed."""


class MissingScheduleTime(StrEnum):
    """What to do with a delivery that has no X-CloudScheduler-ScheduleTime header."""

    REJECT = "reject"  # 400: nothing runs (the default)
    RUN = "run"  # run the job without dedup: every such delivery executes


def number_setting(
    env: Mapping[str, str], name: str, default: float, minimum: float, unit: str = "seconds"
) -> float:
    """A numeric DEDUP_* setting: `default` when unset or empty, else a finite number of at
    least `minimum`; anything else stops the start-up naming the variable."""
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a number of {unit}") from None
    if not math.isfinite(value):
        # A NaN lease would never expire: every comparison with it is false.
        raise SettingsError(f"{name}={raw!r} must be a finite number")
    if value < minimum:
        raise SettingsError(f"{name}={raw!r} must be at least {minimum:g}")
    return value


def max_body_bytes_setting(env: Mapping[str, str]) -> int:
    """DEDUP_MAX_BODY_BYTES: the largest request body any entry point reads (read here for
    Settings, and by main.py for every entry point, the watchdog's too)."""
    return int(number_setting(env, MAX_BODY_BYTES_ENV, DEFAULT_MAX_BODY_BYTES, 1, "bytes"))


@dataclass(frozen=True)
class Settings:
    project: str
    location: str
    database: str = "(default)"
    collection: str = "scheduler_runs"
    lease_seconds: float = 60.0
    retention_seconds: float = 7 * 24 * 3600.0
    missing_schedule_time: MissingScheduleTime = MissingScheduleTime.REJECT
    default_job: str = "example_jobs.example:run"
    job_routes: Mapping[str, str] = field(default_factory=dict)
    store_timeout_seconds: float = 10.0
    cache_size: int = 10_000
    # A delivery whose schedule time is more than this ahead of the instance's clock is a
    # forced run (keys.is_forced_run): covers clock skew, and Scheduler's own slack.
    forced_run_margin_seconds: float = 10.0
    allowed_callers: frozenset[str] = frozenset()
    """DEDUP_ALLOWED_CALLERS, lower-cased: the only callers served (callers.py); empty:
    every caller Cloud Run lets through."""
    verify_token_audience: str | None = None
    """DEDUP_VERIFY_TOKEN_AUDIENCE: when set, the caller's token is verified here (Google's
    signature, issuer, expiry, this audience, email_verified: entry/id_tokens.py) before
    its `email` is believed; for a service Cloud Run does not verify tokens for."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """DEDUP_MAX_BODY_BYTES: a larger request body is refused (413) unread."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ

        project = env.get("DEDUP_PROJECT") or env.get("GOOGLE_CLOUD_PROJECT") or ""
        if not project:
            raise SettingsError(
                "DEDUP_PROJECT is not set (nor GOOGLE_CLOUD_PROJECT): set it to the "
                "function's own project ID"
            )
        location = env.get("DEDUP_LOCATION", "")
        if not location:
            raise SettingsError("DEDUP_LOCATION is not set: set it to the function's region")

        lease = number_setting(env, "DEDUP_LEASE_SECONDS", cls.lease_seconds, 1)
        retention = number_setting(env, "DEDUP_RETENTION_SECONDS", cls.retention_seconds, 60)
        if retention <= lease:
            raise SettingsError(
                f"DEDUP_RETENTION_SECONDS={retention:g} is not longer than "
                f"DEDUP_LEASE_SECONDS={lease:g}: records must outlive the lease; set "
                f"DEDUP_RETENTION_SECONDS > {lease:g}"
            )
        raw_mode = env.get("DEDUP_MISSING_SCHEDULE_TIME", MissingScheduleTime.REJECT.value)
        try:
            mode = MissingScheduleTime(raw_mode)
        except ValueError:
            choices = ", ".join(m.value for m in MissingScheduleTime)
            raise SettingsError(
                f"DEDUP_MISSING_SCHEDULE_TIME={raw_mode!r} must be one of: {choices}"
            ) from None
        table = read_table(env, JOB_ROUTES_TABLE)
        routes = parse_job_routes(*table) if table is not None else {}
        cache_size = int(number_setting(env, "DEDUP_CACHE_SIZE", cls.cache_size, 0))
        allowed_callers = parse_allowed_callers(env.get(ALLOWED_CALLERS_ENV, ""))
        audience = parse_verify_token_audience(env.get(VERIFY_TOKEN_AUDIENCE_ENV, ""))
        if audience is not None and not allowed_callers:
            raise SettingsError(
                f"{VERIFY_TOKEN_AUDIENCE_ENV} is set but {ALLOWED_CALLERS_ENV} is not: a "
                "verified token of any Google account would be served, which is no "
                f"boundary; set {ALLOWED_CALLERS_ENV} to the e-mails of the accounts the "
                "Scheduler jobs (and the watchdog) send tokens of"
            )
        return cls(
            project=project,
            location=location,
            database=env.get("DEDUP_DATABASE") or cls.database,
            collection=env.get("DEDUP_COLLECTION") or cls.collection,
            lease_seconds=lease,
            retention_seconds=retention,
            missing_schedule_time=mode,
            default_job=env.get(DEFAULT_JOB_ENV) or cls.default_job,
            job_routes=routes,
            store_timeout_seconds=number_setting(
                env, "DEDUP_STORE_TIMEOUT_SECONDS", cls.store_timeout_seconds, 0.1
            ),
            cache_size=cache_size,
            forced_run_margin_seconds=number_setting(
                env, FORCED_RUN_MARGIN_ENV, cls.forced_run_margin_seconds, 0
            ),
            allowed_callers=allowed_callers,
            verify_token_audience=audience,
            max_body_bytes=max_body_bytes_setting(env),
        )


def table_path(env: Mapping[str, str], table: str) -> Path:
    """Where the job table file `table` is: in DEDUP_TABLES_DIR when set, else in the source
    archive's job_tables/ (infra writes it there)."""
    directory = env.get(TABLES_DIR_ENV) or ""
    if directory and not Path(directory).is_dir():
        raise SettingsError(
            f"{TABLES_DIR_ENV}={directory!r} is not a directory: point it at the directory "
            f"holding the job tables ({table}), or unset it to read the ones deployed with "
            "the code"
        )
    return Path(directory) / table if directory else SOURCE_ROOT / TABLES_DIR / table


def read_table(env: Mapping[str, str], table: str) -> tuple[str, str] | None:
    """(text, path) of the job table file `table` (table_path); None when there is none."""
    path = table_path(env, table)
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"the job table {path} cannot be read: {exc}") from None


def parse_job_routes(raw: str, where: str = JOB_ROUTES_TABLE) -> dict[str, str]:
    """The dedup function's job table: {"job-id": "module:function"}; `where` names the file
    in errors."""
    try:
        routes = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(routes, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in routes.items()
    ):
        raise SettingsError(f'{where} must be a JSON object {{"job-id": "module:function"}}')
    return routes


def parse_allowed_callers(raw: str) -> frozenset[str]:
    """DEDUP_ALLOWED_CALLERS: comma-separated e-mails (spaces around them ignored), lower-cased.

    Blank means "not set": every caller Cloud Run lets through is served. An empty entry or
    one that is not an e-mail address stops the start-up: a typo must not quietly lock out
    the jobs, or (worse) read as "not set".
    """
    if not raw.strip():
        return frozenset()
    emails: set[str] = set()
    for position, entry in enumerate((e.strip() for e in raw.split(",")), start=1):
        if not entry:
            raise SettingsError(
                f"{ALLOWED_CALLERS_ENV}={raw!r} has an empty entry (#{position}): list "
                "service-account e-mails separated by single commas, e.g. "
                "'jobs-invoker@my-project.iam.gserviceaccount.com'"
            )
        if not _EMAIL.fullmatch(entry):
            raise SettingsError(
                f"{ALLOWED_CALLERS_ENV}: entry #{position} {entry[:80]!r} is not an e-mail "
                "address: list the service-account e-mails the Scheduler jobs' OIDC tokens "
                "carry, e.g. 'jobs-invoker@my-project.iam.gserviceaccount.com'"
            )
        emails.add(entry.lower())
    return frozenset(emails)


def parse_verify_token_audience(raw: str) -> str | None:
    """DEDUP_VERIFY_TOKEN_AUDIENCE: the service's https URL, origin only; None when blank."""
    value = raw.strip()
    if not value:
        return None
    if not _HTTPS_ORIGIN.fullmatch(value):
        raise SettingsError(
            f"{VERIFY_TOKEN_AUDIENCE_ENV}={raw[:120]!r} is not an https URL origin: set it to "
            "the service's own URL, lower-case, with no path, query or trailing slash "
            "(e.g. 'https://reports-abc123xyz-ew.a.run.app'): the audience its Scheduler "
            "jobs' and the watchdog's tokens carry; leave it unset on a service that "
            "requires authentication (Cloud Run verifies the token there)"
        )
    return value

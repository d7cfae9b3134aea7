"""Job logic is pluggable: `module:function` names a callable in function/ (e.g.
`example_jobs.example:run`), imported once at start-up; each call runs with its run's log fields.

Only what can run is imported: with routes (a deployed stack routes every job it declares,
its `defaultJobLogic` already filled in), the routes' specs and nothing else; with none,
DEDUP_JOB. `make plan` and `make policy-check` start each declared function offline, in an
environment of function/requirements.txt alone (operator_tools/job_logic.py), so what they accept
starts.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from typing import Any

from dedup.logs import run_fields
from dedup.run_context import Job, RunContext
from dedup.settings import SettingsError
from dedup.tables import JOB_ROUTES_TABLE


def load_job(spec: str, setting: str) -> Job:
    """Import `module:function`; a bad spec fails start-up naming the setting."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise SettingsError(f"{setting}={spec!r} must look like 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SettingsError(f"{setting}={spec!r}: cannot import {module_name!r}: {exc}") from exc
    job = getattr(module, attribute, None)
    if not callable(job):
        raise SettingsError(f"{setting}={spec!r}: {module_name} has no callable {attribute!r}")
    return job  # type: ignore[no-any-return]


def with_run_log_fields(job: Job) -> Job:
    """`job`, logging with its run's fields (dedup.logs) attached to every line."""

    @functools.wraps(job)
    def run(context: RunContext) -> Any:
        with run_fields(
            run_id=context.run_id,
            job=context.job_name,
            attempt=context.attempt,
            trigger="forced" if context.forced else "scheduled",
        ):
            return job(context)

    return run


def _resolve(spec: str | Job, setting: str) -> Job:
    return with_run_log_fields(load_job(spec, setting) if isinstance(spec, str) else spec)


class UnroutedJob(LookupError):
    """A delivery for a job the routes do not list: nothing of it runs."""


def refuse_unrouted(context: RunContext) -> Any:
    """The job logic of a job the routes do not list."""
    # Raised, so the run is recorded failed and released: Scheduler's retry may reach a
    # newer revision whose routes list the job (one deployed after this instance started).
    raise UnroutedJob(
        f"job {context.job_name!r} is not in this function's routes ({JOB_ROUTES_TABLE}), "
        "which list every job of the stack that deployed it: declare the job in that stack "
        "(its retries reach the new revision once deployed)"
    )


class JobRegistry:
    """The job logic for each job ID: a per-job route, else the default. Each is a
    `module:function` spec, imported here, or a callable (the proxy builds its own)."""

    def __init__(self, default: str | Job, routes: Mapping[str, str | Job]) -> None:
        self._default = _resolve(default, "DEDUP_JOB")
        self._routes = {
            job_id: _resolve(spec, f"DEDUP_JOB_ROUTES[{job_id!r}]")
            for job_id, spec in routes.items()
        }

    def for_job(self, job_id: str) -> Job:
        return self._routes.get(job_id, self._default)


def scheduled_jobs(default: str, routes: Mapping[str, str]) -> JobRegistry:
    """The dedup function's job logic: DEDUP_JOB (`default`) for every job when there are
    no routes (a function deployed by hand, the local servers); with routes (its job
    table), the routes alone. A deployed stack routes every job it declares, its
    `defaultJobLogic` already filled in, so a default that no route names is never
    imported (a fork may have deleted it), and a job without a route is refused
    (`refuse_unrouted`) rather than run with some other job's logic."""
    return JobRegistry(refuse_unrouted if routes else default, routes)

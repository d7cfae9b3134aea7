"""The jobs the emulator delivers, read from a Pulumi stack file.

The stack file is parsed and validated by the kit's own config loader
(`infra.config.load_config`), the same one the Pulumi program uses, so the emulator
delivers exactly the jobs a `pulumi up` would create. `Stack` and `Job` are the
emulator's small view of that config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from infra.config import ConfigError, StackConfig, load_config
from infra.scheduler_rules import ATTEMPT_DEADLINE_DEFAULT_SECONDS, RetrySettings


class StackError(ValueError):
    """A stack file the emulator cannot use, with the reason."""


@dataclass(frozen=True)
class Job:
    """One Cloud Scheduler job, as the emulator needs it."""

    name: str
    schedule: str
    time_zone: str = "Etc/UTC"
    attempt_deadline_seconds: float = ATTEMPT_DEADLINE_DEFAULT_SECONDS
    retry: RetrySettings = field(default_factory=RetrySettings)
    body: bytes | None = None
    content_type: str | None = None
    http_method: str = "POST"
    job_logic: str = "jobs.example:run"
    paused: bool = False


@dataclass(frozen=True)
class Stack:
    """A stack's project, region, jobs and the dedup settings the local function needs."""

    project: str
    region: str
    jobs: tuple[Job, ...]
    lease_seconds: float = 600
    retention_seconds: float = 604800
    collection: str = "scheduler_runs"
    database_name: str = "scheduler-dedup"
    missing_schedule_time: str = "reject"
    function_timeout_seconds: float = 540
    store_timeout_seconds: float = 10
    cache_size: int = 10000
    # The Scheduler jobs' OIDC identity (the invoker account): the emulator's token carries
    # it, and the local function serves only it (DEDUP_ALLOWED_CALLERS), as deployed.
    invoker_email: str = ""
    source: str = ""

    def job(self, name: str) -> Job:
        for job in self.jobs:
            if job.name == name:
                return job
        known = ", ".join(j.name for j in self.jobs)
        raise StackError(f"{self.source or 'stack'}: no job named {name!r} (jobs: {known})")

    def only(self, names: list[str] | tuple[str, ...]) -> Stack:
        """The same stack with just the named jobs (all of them if `names` is empty)."""
        if not names:
            return self
        return replace(self, jobs=tuple(self.job(name) for name in names))

    @property
    def active_jobs(self) -> tuple[Job, ...]:
        """Jobs Scheduler delivers: a paused job sends nothing."""
        return tuple(job for job in self.jobs if not job.paused)


def load_stack(path: str | Path) -> Stack:
    """Read and validate a stack file (e.g. Pulumi.dev.yaml); raise `StackError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise StackError(
            f"stack file {path} not found (give one with --stack, e.g. Pulumi.dev.yaml)"
        ) from exc
    except OSError as exc:
        raise StackError(f"cannot read stack file {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise StackError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, Mapping) or not isinstance(data.get("config") or {}, Mapping):
        raise StackError(f"{path}: expected a mapping with a 'config:' mapping")
    return parse_stack_config(data.get("config") or {}, source=str(path))


def parse_stack_config(config: Mapping[str, Any], source: str = "stack") -> Stack:
    """Build a `Stack` from a stack file's `config:` mapping, validated by infra.config."""
    try:
        validated = load_config(config)
    except ConfigError as exc:
        raise StackError(f"{source}: {exc}") from exc
    return from_stack_config(validated, source)


def from_stack_config(config: StackConfig, source: str = "stack") -> Stack:
    # Jobs with `proxy:` call the idempotent proxy, which starts Google Cloud executions:
    # nothing local can serve them, so the emulator replays the dedup function's jobs only.
    jobs = tuple(
        Job(
            name=job.name,
            schedule=job.schedule,
            time_zone=job.time_zone,
            attempt_deadline_seconds=float(job.attempt_deadline_seconds),
            retry=job.retry,
            body=job.body_json.encode() if job.body_json is not None else None,
            content_type="application/json" if job.body_json is not None else None,
            job_logic=job.job_logic,
            paused=job.paused,
        )
        for job in config.jobs
        if job.proxy is None
    )
    dedup = config.dedup
    return Stack(
        project=config.project,
        region=config.region,
        jobs=jobs,
        lease_seconds=float(dedup.lease_seconds),
        retention_seconds=float(dedup.retention_seconds),
        collection=dedup.collection,
        database_name=dedup.database_name,
        missing_schedule_time=dedup.missing_schedule_time,
        function_timeout_seconds=float(config.function.timeout_seconds),
        store_timeout_seconds=float(dedup.store_timeout_seconds),
        cache_size=dedup.cache_size,
        invoker_email=config.invoker_email,
        source=source,
    )

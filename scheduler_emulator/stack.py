"""The jobs the emulator delivers, read from a Pulumi stack file.

The stack file is read by `operator_tools.stack_files` (as `make plan` and the policy check read it)
and validated by the kit's own config loader (`infra.config.load_config`), the same one the
Pulumi program uses, and each job's deployed ID, httpTarget headers and body come from the
Pulumi program's own code (`infra.config.scheduler_job_id`,
`infra.scheduled_job.ScheduledJobArgs`), so the emulator delivers exactly the jobs a
`pulumi up` would create. `Stack` and `Job` are the
emulator's small view of that config.

A job with `runtime:` runs in that runtime's own function (`Job.runtime`): it is one of
`Stack.jobs`, and the emulator delivers it to its runtime's URL (`runtime_urls`), as the
deployed job's httpTarget names that function's.

A job with `proxy:` calls the idempotent proxy (`proxy_scheduled_job`), not the dedup
function: it is kept apart, in `Stack.proxied_jobs` (its `Job.proxy` says what the proxy
starts), so a replay against the dedup function (`Stack.jobs`) never sends it there; the
demo replays it against the proxy, served next to the function, pointing at fake Google
APIs (demo/local_proxy.py, demo/proxied.py).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dedup.business_runs import BusinessSchedule, business_schedule
from infra.config import (
    PROXY_TARGET_BUILD_TRIGGER,
    ConfigError,
    JobSettings,
    ProxyTarget,
    StackConfig,
    load_config,
    scheduler_job_id,
)
from infra.scheduled_job import ScheduledJobArgs
from infra.scheduler_rules import ATTEMPT_DEADLINE_DEFAULT_SECONDS, RetrySettings
from operator_tools.stack_files import (
    EXAMPLE_STACKS_DIR,
    EXAMPLES_STAND_IN,
    STACK_FILE_DIR,
    StackFileError,
    load_stack_config,
    stack_file,
    stack_names,
)


class StackError(ValueError):
    """A stack file the emulator cannot use, with the reason."""


@dataclass(frozen=True)
class ProxyRoute:
    """What the proxy starts for a proxied job (`jobs[].proxy`), as its job table holds it
    (`proxy_routes.json`, infra/dedup_proxy.py): a build trigger's entry also names the
    Pub/Sub topic the proxy publishes to."""

    target: str  # workflow | run_job | build_trigger
    resource: str
    token_name: str | None = None
    container: str | None = None
    topic: str | None = None  # build_trigger: projects/P/topics/<namePrefix>-build-<ID>

    def route(self) -> dict[str, str]:
        """The job's entry of the proxy's routes table (the keys the proxy reads)."""
        entry = {"target": self.target, "resource": self.resource, "tokenName": self.token_name,
                 "container": self.container, "topic": self.topic}
        return {key: value for key, value in entry.items() if value is not None}

    @property
    def started_resource(self) -> str:
        """What a start request names: the resource, or a build trigger's topic."""
        return self.topic or self.resource


@dataclass(frozen=True)
class Job:
    """One Cloud Scheduler job, as the emulator needs it."""

    name: str  # the stack's `jobs[].name`
    schedule: str
    time_zone: str = "Etc/UTC"
    attempt_deadline_seconds: float = ATTEMPT_DEADLINE_DEFAULT_SECONDS
    retry: RetrySettings = field(default_factory=RetrySettings)
    body: bytes | None = None
    # The httpTarget's own headers (Content-Type, X-Dedup-*), as the job is declared.
    http_headers: tuple[tuple[str, str], ...] = ()
    http_method: str = "POST"
    job_logic: str = "example_jobs.example:run"
    paused: bool = False
    # The deployed Scheduler job ID (`<namePrefix>-<name>`); empty: `name` (a bare job).
    deployed_id: str = ""
    # Business runs and forced runs (dedup.business_runs, dedup.keys): None: as BSD cron -s.
    dst_repeated: str | None = None
    dst_skipped: str | None = None
    forced_runs: str = "separate"
    # A proxied job (`jobs[].proxy`): what the proxy starts; None: the dedup function's job.
    proxy: ProxyRoute | None = None
    # The runtime it runs in (`jobs[].runtime`): delivered to that runtime's function, not
    # the dedup function's (SchedulerEmulator's runtime_urls); None: the dedup function.
    runtime: str | None = None

    @property
    def business(self) -> BusinessSchedule:
        """What its schedule times mean: the function keys deliveries by the same."""
        return business_schedule(self.schedule, self.time_zone, self.dst_repeated,
                                 self.dst_skipped)

    @property
    def job_id(self) -> str:
        """The Scheduler job ID: what the function receives and keys its runs by."""
        return self.deployed_id or self.name


@dataclass(frozen=True)
class Stack:
    """A stack's project, region, jobs and the dedup settings the local function needs."""

    project: str
    region: str
    jobs: tuple[Job, ...]  # the jobs the kit's functions run: the dedup function's and the
    # runtimes' (each Job.runtime says which function; SchedulerEmulator delivers it there)
    lease_seconds: float = 600
    retention_seconds: float = 604800
    collection: str = "scheduler_runs"
    database_name: str = "scheduler-dedup"
    missing_schedule_time: str = "reject"
    function_timeout_seconds: float = 540
    store_timeout_seconds: float = 10
    cache_size: int = 10000
    # A delivery whose schedule time is further ahead of the function's clock is forced.
    forced_run_margin_seconds: float = 10
    # The Scheduler jobs' OIDC identity (the invoker account): the emulator's token carries
    # it, and the local function serves only it (DEDUP_ALLOWED_CALLERS), as deployed.
    invoker_email: str = ""
    name_prefix: str = ""
    source: str = ""
    # The validated stack config it was built from (None: a hand-built Stack): what
    # infra derives from it (the watchdog's jobs, `make rerun`), for the demo.
    config: StackConfig | None = field(default=None, compare=False, repr=False)
    # Jobs with `proxy:` (Job.proxy set): delivered to the proxy, never with `jobs`.
    proxied_jobs: tuple[Job, ...] = ()
    # The stack's proxyTimeoutSeconds: the proxy's bound on one start request.
    proxy_timeout_seconds: float = 30

    def job(self, name: str) -> Job:
        for job in (*self.jobs, *self.proxied_jobs):
            if job.name == name:
                return job
        known = ", ".join(j.name for j in (*self.jobs, *self.proxied_jobs))
        raise StackError(f"{self.source or 'stack'}: no job named {name!r} (jobs: {known})")

    def only(self, names: list[str] | tuple[str, ...]) -> Stack:
        """The same stack with just the named jobs (all of them if `names` is empty)."""
        if not names:
            return self
        chosen = [self.job(name) for name in names]
        return replace(
            self,
            jobs=tuple(job for job in chosen if job.proxy is None),
            proxied_jobs=tuple(job for job in chosen if job.proxy is not None),
        )

    @property
    def active_jobs(self) -> tuple[Job, ...]:
        """Jobs Scheduler delivers to the kit's functions (the dedup function's and the
        runtimes'): a paused job sends nothing."""
        return tuple(job for job in self.jobs if not job.paused)

    @property
    def active_runtimes(self) -> tuple[str, ...]:
        """The runtimes Scheduler delivers to (an active job of theirs), in job order."""
        return tuple(dict.fromkeys(job.runtime for job in self.active_jobs if job.runtime))

    @property
    def active_proxied_jobs(self) -> tuple[Job, ...]:
        """Proxied jobs Scheduler delivers (to the proxy)."""
        return tuple(job for job in self.proxied_jobs if not job.paused)

    def proxy_routes(self) -> dict[str, dict[str, str]]:
        """The proxy's job table (proxy_routes.json): deployed job ID -> its route."""
        return {job.job_id: job.proxy.route() for job in self.proxied_jobs if job.proxy}


def resolve_stack(choice: str | Path, directories: tuple[Path, ...] | None = None) -> Path:
    """The stack file `choice` names: a stack name (`staging` -> Pulumi.staging.yaml, looked
    up in the working directory, then the team's stack directory, then the kit's examples)
    or a path to a stack file."""
    text = str(choice)
    places = (
        directories if directories is not None
        else (Path(), STACK_FILE_DIR, *([EXAMPLE_STACKS_DIR] if EXAMPLES_STAND_IN else []))
    )
    looks_like_path = "/" in text or text.endswith((".yaml", ".yml"))
    candidates = [Path(text)] if looks_like_path else [stack_file(text, p) for p in places]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    known = dict.fromkeys(name for place in places for name in stack_names(place))
    listed = ", ".join(known) or "none found"
    what = f"stack file {text}" if looks_like_path else f"stack {text!r} (no Pulumi.{text}.yaml)"
    raise StackError(
        f"{what} not found; stacks: {listed} (give --stack NAME, e.g. --stack dev, or a path "
        "to a stack file)"
    )


def load_stack(path: str | Path) -> Stack:
    """Read and validate a stack file (e.g. Pulumi.dev.yaml); raise `StackError`.

    The file is read by `operator_tools.stack_files` (as `make plan` and the policy check read it),
    so a broken file gives the same one-line error (file, line, column, fix) everywhere.
    """
    path = Path(path)
    if path.suffix not in (".yaml", ".yml"):
        raise StackError(f"{path}: not a stack file (give a Pulumi.<stack>.yaml file)")
    try:
        config = load_stack_config(path)
    except FileNotFoundError as exc:
        raise StackError(
            f"stack file {path} not found (give one with --stack, e.g. Pulumi.dev.yaml)"
        ) from exc
    except StackFileError as exc:
        raise StackError(str(exc)) from None
    except OSError as exc:
        raise StackError(f"cannot read stack file {path}: {exc.strerror or exc}") from exc
    return parse_stack_config(config, source=str(path))


def parse_stack_config(config: Mapping[str, Any], source: str = "stack") -> Stack:
    """Build a `Stack` from a stack file's `config:` mapping, validated by infra.config."""
    try:
        validated = load_config(config)
    except ConfigError as exc:
        raise StackError(f"{source}: {exc}") from exc
    return from_stack_config(validated, source)


def job_from_settings(
    job: JobSettings, *, project: str, region: str, name_prefix: str
) -> Job:
    """The emulator's view of one job, its headers and body built by the Pulumi program's
    own ScheduledJobArgs (the httpTarget it declares), its ID by `scheduler_job_id`."""
    job_id = scheduler_job_id(name_prefix, job.name) if name_prefix else job.name
    target = ScheduledJobArgs(
        job=job, project=project, region=region, target_uri="", invoker_email="", job_id=job_id
    )
    body = target.body_base64()
    return Job(
        name=job.name,
        schedule=job.schedule,
        time_zone=job.time_zone,
        attempt_deadline_seconds=float(job.attempt_deadline_seconds),
        retry=job.retry,
        body=base64.b64decode(body) if body is not None else None,
        http_headers=tuple(target.headers().items()),
        job_logic=job.job_logic or "",  # none for a proxied job
        paused=job.paused,
        deployed_id=target.scheduler_job_id,
        dst_repeated=job.dst_repeated,
        dst_skipped=job.dst_skipped,
        forced_runs=job.forced_runs or "separate",
        proxy=None if job.proxy is None else proxy_route(job.proxy, name_prefix),
        runtime=job.runtime,
    )


def proxy_route(target: ProxyTarget, name_prefix: str) -> ProxyRoute:
    """A proxied job's route as infra/dedup_proxy.py writes it (DedupProxyArgs.route): a
    build trigger's names its topic, `<namePrefix>-build-<trigger ID>` (at most 255)."""
    topic = None
    if target.target == PROXY_TARGET_BUILD_TRIGGER:
        topic_id = f"{name_prefix}-build-{target.resource_id}"[:255]
        topic = f"projects/{target.project}/topics/{topic_id}"
    return ProxyRoute(target.target, target.resource, target.token_name, target.container,
                      topic)


def from_stack_config(config: StackConfig, source: str = "stack") -> Stack:
    # Jobs with `proxy:` call the idempotent proxy, which starts Google Cloud executions:
    # kept apart (proxied_jobs), for a replay against the proxy (the demo's, on fake APIs).
    # Jobs aimed at a team's own service (`service:`) run that service's code, which is not
    # served here: the emulator leaves them out.
    jobs = tuple(
        job_from_settings(
            job, project=config.project, region=config.region, name_prefix=config.name_prefix
        )
        for job in config.jobs if job.service is None
    )
    dedup = config.dedup
    return Stack(
        project=config.project,
        region=config.region,
        jobs=tuple(job for job in jobs if job.proxy is None),
        proxied_jobs=tuple(job for job in jobs if job.proxy is not None),
        proxy_timeout_seconds=float(config.proxy_timeout_seconds),
        lease_seconds=float(dedup.lease_seconds),
        retention_seconds=float(dedup.retention_seconds),
        collection=dedup.collection,
        database_name=dedup.database_name,
        missing_schedule_time=dedup.missing_schedule_time,
        function_timeout_seconds=float(config.function.timeout_seconds),
        store_timeout_seconds=float(dedup.store_timeout_seconds),
        cache_size=dedup.cache_size,
        forced_run_margin_seconds=float(dedup.forced_run_margin_seconds),
        invoker_email=config.invoker_email,
        name_prefix=config.name_prefix,
        source=source,
        config=config,
    )

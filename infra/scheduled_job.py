"""ScheduledJob: one Cloud Scheduler job that calls the dedup function (or, for a job with
`proxy:`, the idempotent proxy; for a job with `service:`, a team's own service) with an
OIDC token, or, for a team's App Engine service, through an App Engine HTTP target (which
carries no token: App Engine targets have none).

The job sends `X-Dedup-Project` and `X-Dedup-Location` (its own project and region), so
one function can serve jobs of several projects or regions that share a job ID, and
authenticates as the dedicated invoker account with the function's run.app URL as the
token audience (Cloud Run checks it; the function never trusts the headers for auth).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import pulumi

from infra import gcp
from infra.config import AppEngineTarget, JobSettings
from infra.scheduler_rules import duration_string

COMPONENT_TYPE: Final = "scheduler-dedup:index:ScheduledJob"
HEADER_PROJECT: Final = "X-Dedup-Project"
HEADER_LOCATION: Final = "X-Dedup-Location"
# The function's names for them (dedup.keys), spelled as Scheduler's console shows them.
HEADER_SCHEDULE: Final = "X-Dedup-Schedule"
HEADER_TIME_ZONE: Final = "X-Dedup-Time-Zone"
HEADER_DST_REPEATED: Final = "X-Dedup-Dst-Repeated"
HEADER_DST_SKIPPED: Final = "X-Dedup-Dst-Skipped"
HEADER_FORCED_RUNS: Final = "X-Dedup-Forced-Runs"
HEADER_ATTEMPT_DEADLINE: Final = "X-Dedup-Attempt-Deadline"
HEADER_OVERLAP: Final = "X-Dedup-Overlap"


def duration(seconds: float) -> str:
    """A google.protobuf.Duration string in whole seconds: 180 -> "180s", 1000000 ->
    "1000000s" (see infra.scheduler_rules.duration_string)."""
    return duration_string(seconds)


def job_headers(project: str, region: str, job: JobSettings) -> dict[str, str]:
    """The HTTP headers a Scheduler job of the kit sends (the watchdog sends the same when it
    delivers a run itself: catch-up, re-runs): where it runs, and what its schedule times
    mean (its business runs and forced-run choice, dedup.business_runs and dedup.keys)."""
    choices = {HEADER_DST_REPEATED: job.dst_repeated, HEADER_DST_SKIPPED: job.dst_skipped,
               HEADER_FORCED_RUNS: job.forced_runs,
               # `allow` is what no header means: the jobs of a stack that keeps it send none
               HEADER_OVERLAP: None if job.overlap == "allow" else job.overlap,
               }  # StackConfig fills them for every job
    return {
        "Content-Type": "application/json",
        HEADER_PROJECT: project,
        HEADER_LOCATION: region,
        HEADER_SCHEDULE: job.schedule,
        HEADER_TIME_ZONE: job.time_zone,
        HEADER_ATTEMPT_DEADLINE: str(job.attempt_deadline_seconds),
        **{name: value for name, value in choices.items() if value is not None},
    }


def default_description(job: JobSettings) -> str:
    if job.service is not None:
        return f"{job.name}: POSTs {job.service_path} of service {job.service} once per schedule"
    if job.proxy is not None:
        return (
            f"{job.name}: starts {job.proxy.target} {job.proxy.resource} once per schedule "
            "(idempotent proxy)"
        )
    return f"{job.name}: runs {job.job_logic} once per schedule"


@dataclass(frozen=True)
class ScheduledJobArgs:
    """One job's settings and the function it targets."""

    job: JobSettings
    project: str
    region: str
    """The job's Scheduler location; also sent as X-Dedup-Location."""
    target_uri: pulumi.Input[str]
    """The run.app URL of the dedup function, or of the proxy for a proxied job."""
    invoker_email: pulumi.Input[str]
    """The service account whose OIDC token the job sends."""
    audience: pulumi.Input[str] | None = None
    """OIDC audience; defaults to `target_uri` (what Cloud Run expects)."""
    job_id: str | None = None
    """The Scheduler job ID; None: `job.name`. The kit's program passes
    `<namePrefix>-<name>` (StackConfig.job_id), so stacks sharing a project never collide;
    the function's routes are keyed by this ID (X-CloudScheduler-JobName)."""
    depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)
    """E.g. the Cloud Scheduler API and the invoker binding."""
    app_engine: AppEngineTarget | None = None
    """A team's App Engine service: an App Engine HTTP target to `job.service_path` there
    (`target_uri`, `invoker_email` and `audience` unused)."""

    @property
    def scheduler_job_id(self) -> str:
        return self.job_id if self.job_id is not None else self.job.name

    def headers(self) -> dict[str, str]:
        return job_headers(self.project, self.region, self.job)

    def body_base64(self) -> str | None:
        if self.job.body_json is None:
            return None
        return base64.b64encode(self.job.body_json.encode("utf-8")).decode("ascii")


def app_engine_target(
    args: ScheduledJobArgs, app_engine: AppEngineTarget
) -> gcp.cloudscheduler.JobAppEngineHttpTargetArgs:
    """The App Engine HTTP target of a job aimed at a team's App Engine service: the same
    method, headers and body as every job of the kit, routed to its service (and version)."""
    return gcp.cloudscheduler.JobAppEngineHttpTargetArgs(
        relative_uri=args.job.service_path,
        app_engine_routing=gcp.cloudscheduler.JobAppEngineHttpTargetAppEngineRoutingArgs(
            service=app_engine.service, version=app_engine.version),
        http_method="POST",
        body=args.body_base64(),
        headers=args.headers(),
    )


class ScheduledJob(pulumi.ComponentResource):
    """A Cloud Scheduler HTTP job that targets the dedup function.

    Its attributes are typed where they are set, not as class annotations: the SDK reads a
    component's class annotations as its output types each time one registers (a
    `get_type_hints` per job, 45 us each, 3% of a 5,000-job plan), and a ScheduledJob has
    no outputs of its own to type."""

    def __init__(
        self,
        name: str,
        args: ScheduledJobArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, None, opts)
        job = args.job
        retry = job.retry
        self.job: gcp.cloudscheduler.Job = gcp.cloudscheduler.Job(
            f"{name}-job",
            project=args.project,
            region=args.region,
            name=args.scheduler_job_id,
            description=(job.description or default_description(job))[:500],
            schedule=job.schedule,
            time_zone=job.time_zone,
            paused=job.paused,
            attempt_deadline=duration(job.attempt_deadline_seconds),
            retry_config=gcp.cloudscheduler.JobRetryConfigArgs(
                retry_count=retry.retry_count,
                max_retry_duration=duration(retry.max_retry_duration_seconds),
                min_backoff_duration=duration(retry.min_backoff_seconds),
                max_backoff_duration=duration(retry.max_backoff_seconds),
                max_doublings=retry.max_doublings,
            ),
            http_target=None if args.app_engine is not None else (
                gcp.cloudscheduler.JobHttpTargetArgs(
                    uri=args.target_uri,
                    http_method="POST",
                    body=args.body_base64(),
                    headers=args.headers(),
                    oidc_token=gcp.cloudscheduler.JobHttpTargetOidcTokenArgs(
                        service_account_email=args.invoker_email,
                        audience=args.audience if args.audience is not None
                        else args.target_uri,
                    ),
                )),
            app_engine_http_target=None if args.app_engine is None else (
                app_engine_target(args, args.app_engine)),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.job_name: pulumi.Output[str] = self.job.name
        self.register_outputs({"jobName": self.job_name})

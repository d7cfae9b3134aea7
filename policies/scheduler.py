"""Resource policies for Cloud Scheduler jobs (gcp:cloudscheduler/job:Job).

A job has one target (Google's Job reference: httpTarget, appEngineHttpTarget and
pubsubTarget are mutually exclusive). An HTTP target authenticates with an OIDC token and
its attemptDeadline lies within 15 s..30 min; an App Engine HTTP target has no token field
at all (Scheduler calls the project's own app, from 0.1.0.2/32, which the app's firewall
must admit: https://cloud.google.com/scheduler/docs/creating), its attemptDeadline may
reach 24 h, its relativeUri must begin with "/", and a 503 it answers is retried
regardless of retryConfig and not counted against retryCount:
https://cloud.google.com/scheduler/docs/reference/rest/v1/projects.locations.jobs
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from infra.scheduler_rules import (
    APP_ENGINE_ATTEMPT_DEADLINE_MAX_SECONDS,
    ATTEMPT_DEADLINE_MAX_SECONDS,
    ATTEMPT_DEADLINE_MIN_SECONDS,
    HazardKind,
    ScheduleError,
    chosen_kinds,
    dst_advisory,
    validate_cron,
    validate_time_zone,
)
from policies.gcp import SCHEDULER_JOB, is_default_runtime_account, parse_duration_seconds
from policies.team_services import APP_ENGINE_TARGET
from policies.urls import origin
from policies.values import MISSING, get, is_unknown, known_str

# A stack repeats schedules (a 5,000-job stack has a few hundred distinct ones): each is
# judged once per check, not once per job.
_SCHEDULES_REMEMBERED: Final = 4096


@functools.lru_cache(maxsize=_SCHEDULES_REMEMBERED)
def _cron_problem(schedule: str) -> str | None:
    try:
        validate_cron(schedule)
    except ScheduleError as exc:
        return f"{exc}; set schedule to a 5-field unix-cron expression"
    return None


@functools.lru_cache(maxsize=_SCHEDULES_REMEMBERED)
def _dst_advisory_from(schedule: str, zone: str, minute: int,
                       chosen: frozenset[HazardKind] = frozenset()) -> str | None:
    """The DST advisory of the year from the start of `minute` (minutes since the epoch):
    the same for every job of one check with the same schedule, zone and choices."""
    return dst_advisory(schedule, zone, datetime.fromtimestamp(minute * 60, UTC),
                        chosen=chosen)


def _http_target(resource_type: str, props: Mapping[str, Any]) -> Any:
    """The job's httpTarget (possibly UNKNOWN), or MISSING for other types and targets."""
    if resource_type != SCHEDULER_JOB:
        return MISSING
    return get(props, "httpTarget")


def app_engine_target(resource_type: str, props: Mapping[str, Any]) -> Any:
    """The job's appEngineHttpTarget (possibly UNKNOWN), or MISSING for other types and
    targets."""
    if resource_type != SCHEDULER_JOB:
        return MISSING
    return get(props, APP_ENGINE_TARGET)


def unix_cron_schedule(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type != SCHEDULER_JOB:
        return []
    schedule = get(props, "schedule")
    if is_unknown(schedule):
        return []
    if schedule is MISSING or not isinstance(schedule, str) or not schedule.strip():
        return ["the job has no schedule: set a 5-field unix-cron schedule, e.g. '0 3 * * *'"]
    problem = _cron_problem(schedule)
    return [] if problem is None else [problem]


def time_zone(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type != SCHEDULER_JOB:
        return []
    zone = get(props, "timeZone")
    if is_unknown(zone) or zone is MISSING:
        return []  # Scheduler's default, Etc/UTC
    if not isinstance(zone, str):
        return [f"timeZone {zone!r} is not an IANA time zone name: set e.g. 'Etc/UTC'"]
    try:
        validate_time_zone(zone)
    except ScheduleError as exc:
        return [str(exc)]
    return []


DST_POLICY: Final = "scheduler-job-dst-change"


def dst_changes_unless_chosen(
    chosen_by_job_id: Mapping[str, frozenset[str]],
) -> Callable[[str, Mapping[str, Any]], list[str]]:
    """dst_changes leaving out the DST changes whose behaviour the job's stack file chose
    (Scheduler job ID -> "repeat", "gap"): what the offline check knows of the stack file."""

    def check(resource_type: str, props: Mapping[str, Any]) -> list[str]:
        job_id = get(props, "name")
        return dst_changes(resource_type, props, chosen_kinds(
            chosen_by_job_id.get(job_id) if isinstance(job_id, str) else None))

    return check


def dst_changes(resource_type: str, props: Mapping[str, Any],
                chosen: frozenset[HazardKind] = frozenset()) -> list[str]:
    """A schedule that fires at a local time a DST change skips or repeats within the next
    year (infra.scheduler_rules.dst_advisory, the same as `make plan`'s advisory), but the
    kinds of change `chosen` (dstRepeated: "repeat", dstSkipped: "gap")."""
    if resource_type != SCHEDULER_JOB:
        return []
    zone = get(props, "timeZone")
    schedule = known_str(get(props, "schedule"))
    zone_name = known_str("Etc/UTC" if zone is MISSING else zone)  # Scheduler's default
    if schedule is None or zone_name is None:
        return []  # unknown until applied, or another scheduler policy's violation
    try:
        advisory = _dst_advisory_from(schedule, zone_name, int(time.time() // 60), chosen)
    except ScheduleError:
        return []  # scheduler-job-unix-cron-schedule / scheduler-job-time-zone report it
    return [] if advisory is None else [advisory]


def oidc_authentication(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    target = _http_target(resource_type, props)
    if target is MISSING or is_unknown(target):
        return []
    problems: list[str] = []
    oauth = get(target, "oauthToken")
    if oauth is not MISSING and not is_unknown(oauth):  # an unknown block may resolve to null
        problems.append(
            "httpTarget uses an oauthToken (meant for *.googleapis.com targets): remove it and "
            "authenticate with httpTarget.oidcToken of a dedicated service account"
        )
    oidc = get(target, "oidcToken")
    if oidc is MISSING:
        problems.append(
            "httpTarget sends no OIDC token, so the function's IAM check rejects it (or the "
            "endpoint is public): set httpTarget.oidcToken.serviceAccountEmail to a dedicated "
            "invoker service account"
        )
        return problems
    if is_unknown(oidc):
        return problems
    email = get(oidc, "serviceAccountEmail")
    if email is MISSING or (isinstance(email, str) and not email.strip()):
        problems.append(
            "httpTarget.oidcToken has no serviceAccountEmail: set it to a dedicated invoker "
            "service account"
        )
    elif known_str(email) and is_default_runtime_account(email):
        problems.append(
            f"httpTarget.oidcToken.serviceAccountEmail {email!r} is a default service account "
            "(broad project roles): use a dedicated invoker account holding only "
            "roles/run.invoker on the function"
        )
    return problems


def oidc_audience(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    target = _http_target(resource_type, props)
    if target is MISSING or is_unknown(target):
        return []
    oidc = get(target, "oidcToken")
    if oidc is MISSING or is_unknown(oidc):
        return []  # no token at all is scheduler-job-oidc-auth's violation
    audience = get(oidc, "audience")
    if is_unknown(audience):
        return []
    if audience is MISSING or not isinstance(audience, str) or not audience.strip():
        return [
            "httpTarget.oidcToken.audience is not set: set it to the function's run.app URL "
            "(the audience Cloud Run checks)"
        ]
    return _audience_origin_problems(get(target, "uri"), audience)


def _audience_origin_problems(uri: Any, audience: str) -> list[str]:
    """A token is only ever sent where it is valid: the audience is the URI's origin (the
    URI itself, as the kit sets it, or its scheme://host[:port]). Not judged while the
    URI is unknown (an output of the function created in the same update)."""
    target = known_str(uri)
    if target is None:
        return []
    sent_to, valid_for = origin(target), origin(audience)
    if sent_to is None:
        return [
            f"httpTarget.uri {target!r} is not a plain http(s) URL (user info, backslashes, "
            "percent-encoding or non-ASCII in its host): set it to the function's run.app URL"
        ]
    if valid_for is None or valid_for != sent_to:
        return [
            f"httpTarget.oidcToken.audience {audience!r} is not the origin of the job's "
            f"uri {target!r}: the receiver would get, at every run, a token valid for "
            "another service (e.g. the dedup function, which would run any job at any time "
            "for it); set audience to the uri's origin (the kit sets it to the uri itself)"
        ]
    return []


# The attemptDeadline Scheduler accepts, by target (Job reference); a Pub/Sub target
# ignores it.
_DEADLINE_BOUNDS: Final = {
    "httpTarget": (ATTEMPT_DEADLINE_MIN_SECONDS, ATTEMPT_DEADLINE_MAX_SECONDS, "HTTP targets"),
    APP_ENGINE_TARGET: (ATTEMPT_DEADLINE_MIN_SECONDS,
                            APP_ENGINE_ATTEMPT_DEADLINE_MAX_SECONDS, "App Engine HTTP targets"),
}


def attempt_deadline(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type != SCHEDULER_JOB:
        return []
    bounds = next((b for key, b in _DEADLINE_BOUNDS.items() if get(props, key) is not MISSING),
                  None)
    if bounds is None:
        return []  # a Pub/Sub target: Scheduler ignores the deadline
    low, high, targets = bounds
    deadline = get(props, "attemptDeadline")
    if deadline is MISSING or is_unknown(deadline):
        return []  # Scheduler's default (180 s; App Engine: by the service's scaling type)
    try:
        seconds = parse_duration_seconds(deadline)
    except ValueError as exc:
        return [f"attemptDeadline {exc}: set attemptDeadlineSeconds ({low}..{high})"]
    if not low <= seconds <= high:
        return [
            f"attemptDeadline {deadline!r} is outside {low}s..{high}s, the range Cloud "
            f"Scheduler accepts for {targets}: set attemptDeadlineSeconds within it"
        ]
    return []


APP_ENGINE_METHOD: Final = "POST"
"""What a kit job sends (the body is the run's payload); Scheduler's default when unset."""


def app_engine_http_target(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """An App Engine HTTP target the service can answer: a relativeUri that begins with
    "/" (AppEngineHttpTarget.relativeUri; the kit aims it at a `/tasks/...` route) and the
    POST method. A 503 from App Engine is retried regardless of retryConfig and not
    counted against retryCount, so the protocol answers 409 (never 503) while another
    attempt holds the claim; the X-Dedup-* headers are dedup-job-headers'."""
    target = app_engine_target(resource_type, props)
    if target is MISSING or is_unknown(target):
        return []
    problems: list[str] = []
    uri = get(target, "relativeUri")
    if not is_unknown(uri) and uri is not MISSING and (
        not isinstance(uri, str) or not uri.startswith("/") or any(c.isspace() for c in uri)
    ):
        problems.append(
            f"appEngineHttpTarget.relativeUri {uri!r} does not begin with '/' (or holds "
            "spaces): set it to the service's route, e.g. '/tasks/export'"
        )
    method = get(target, "httpMethod")
    if not is_unknown(method) and method is not MISSING and method != APP_ENGINE_METHOD:
        problems.append(
            f"appEngineHttpTarget.httpMethod {method!r} is not POST, which a kit job sends "
            "(its body is the run's payload): set httpMethod to POST"
        )
    return problems

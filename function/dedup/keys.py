"""Turn a delivery's headers into the key of one scheduled run, or a one-line reason why not."""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dedup.business_runs import DST_REPEATED, DST_SKIPPED, BusinessSchedule, business_schedule

JOB_NAME_HEADER = "x-cloudscheduler-jobname"
SCHEDULE_TIME_HEADER = "x-cloudscheduler-scheduletime"
PROJECT_HEADER = "x-dedup-project"
LOCATION_HEADER = "x-dedup-location"
# A re-run's generation (`make rerun`; the watchdog sends it): absent or 0 is the run itself.
GENERATION_HEADER = "x-dedup-generation"
# Generations are counted one re-run at a time: far beyond any real count, short to read.
MAX_GENERATION = 1_000_000
# The watchdog's deliveries through Cloud Tasks (catch-up, re-runs) say how late they may
# still run: seconds after the task's ETA (X-CloudTasks-TaskETA, set by Cloud Tasks, seconds
# since the epoch). A task that arrives later (a paused or backlogged queue) is answered
# 200 "expired" and runs nothing: by then the watchdog has reported the run (watchdog.py).
DELIVER_WITHIN_HEADER = "x-dedup-deliver-within"
TASK_ETA_HEADER = "x-cloudtasks-tasketa"
# What a delivery's schedule time means (dedup.business_runs): the job's own schedule, time
# zone and choices, sent by its Scheduler job (and by the watchdog, which sends the job's
# headers). The delivery carries the schedule that produced it: no table to fall out of
# step with a job changed by another `pulumi up`. Without X-Dedup-Schedule the schedule
# time is its own run (a manual POST), as before.
SCHEDULE_HEADER = "x-dedup-schedule"
TIME_ZONE_HEADER = "x-dedup-time-zone"
DST_REPEATED_HEADER = "x-dedup-dst-repeated"
DST_SKIPPED_HEADER = "x-dedup-dst-skipped"
FORCED_RUNS_HEADER = "x-dedup-forced-runs"
# The job's attemptDeadline in seconds: how long an answer may take (dedup.claiming
# resolves a claim whose outcome is unknown within it).
ATTEMPT_DEADLINE_HEADER = "x-dedup-attempt-deadline"
# forcedRuns: what a forced run ("Run now") is.
FORCED_SEPARATE = "separate"  # a run of its own; the scheduled run still runs at its time
FORCED_REPLACE_NEXT = "replaceNext"  # the upcoming scheduled run itself, run now
FORCED_REFUSE = "refuse"  # refused (400): nothing runs
FORCED_RUNS = (FORCED_SEPARATE, FORCED_REPLACE_NEXT, FORCED_REFUSE)
# overlap: what a run does while another run of the same job holds a live claim
# (dedup/overlap.py). Absent is `allow`, as before the header existed.
OVERLAP_HEADER = "x-dedup-overlap"
OVERLAP_ALLOW = "allow"  # it runs (no per-job document is read or written)
OVERLAP_FORBID = "forbid"  # 200 skipped, recorded `skipped` naming the blocking run
OVERLAP_WAIT = "wait"  # 409 until that run ends; Scheduler's retries start it then
OVERLAP_REPLACE = "replace"  # that run is asked to stop (claim_lost); 409 until it did
OVERLAP_POLICIES = (OVERLAP_ALLOW, OVERLAP_FORBID, OVERLAP_WAIT, OVERLAP_REPLACE)

# Scheduler job IDs: letters, digits, hyphens, underscores, at most 500 characters.
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,500}")
# Project IDs (optionally domain-scoped, "example.com:my-project") and region names.
_PROJECT_ID = re.compile(r"(?:[a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]")
_LOCATION_ID = re.compile(r"[a-z][a-z0-9-]{1,62}")
_FULL_JOB_NAME = re.compile(r"projects/([^/]+)/locations/([^/]+)/jobs/([^/]+)")
# RFC 3339 date-time: the offset is mandatory, fractional seconds optional.
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})"
)


class BadDelivery(ValueError):
    """The delivery cannot identify a scheduled run; the message is the 400's reason."""


# Marks a forced run's canonical tuple, so its run_id never equals a scheduled run's.
_FORCED_MARKER = "forced"
# Marks a re-run's canonical tuple (["rerun", generation]): each generation its own run_id.
_RERUN_MARKER = "rerun"


@dataclass(frozen=True)
class RunKey:
    """One run: the tuple the dedup key is made of.

    `forced`: a forced run ("Run now", `gcloud scheduler jobs run`), which Scheduler
    delivers with the *next* scheduled time as its schedule time (see `is_forced_run`).
    It is deduplicated under its own run_id, so it does not consume that scheduled run.
    """

    project: str
    location: str
    job_id: str
    schedule_time: datetime  # aware, UTC
    forced: bool = False
    # A re-run of the same run (`make rerun`): generation g > 0 executes once more, under
    # its own run_id, and leaves the records of the earlier generations as they are.
    generation: int = 0
    # forcedRuns: replaceNext: a forced run that stands in for the scheduled run of its
    # schedule time: keyed as that run (not in run_id), recorded and logged as forced.
    early: bool = False

    @functools.cached_property  # read by every step of a delivery: hashed once
    def run_id(self) -> str:
        """SHA-256 hex of the canonical tuple: fixed length, evenly spread document IDs.
        A scheduled run's tuple is unchanged since records were first written (existing
        records stay valid); a forced run's tuple carries one more element, and so does a
        re-run's (["rerun", generation]; generation 0 adds nothing)."""
        parts: list[Any] = [
            self.project, self.location, self.job_id, format_instant(self.schedule_time)
        ]
        if self.forced:
            parts.append(_FORCED_MARKER)
        if self.generation:
            parts.append([_RERUN_MARKER, self.generation])
        canonical = json.dumps(parts, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @property
    def trigger(self) -> str:
        """How the run was started, as the reply and the log line say it."""
        return "forced" if self.forced or self.early else "scheduled"


def is_forced_run(schedule_time: datetime, now: datetime, margin_seconds: float) -> bool:
    """A delivery whose schedule time is more than `margin_seconds` ahead of `now` (this
    instance's clock) is a forced run: Scheduler never delivers a scheduled run early, and
    a forced run carries the job's next scheduled time.

    Caveats, all from Scheduler's headers alone:
    - two forced runs before the same next tick carry the same headers: they are one
      forced run (the second is answered as its duplicate);
    - a forced run within the margin of the next tick is taken for that scheduled run
      (the scheduled delivery that follows is then its duplicate);
    - a retry of a forced run that arrives once its schedule time is within the margin (or
      past) is taken as the scheduled delivery of that time: whichever of it and
      Scheduler's own delivery comes first runs the scheduled run, the other is answered
      as its duplicate (409 while it runs). The job runs once for both; the forced record
      keeps the outcome its earlier attempts left (e.g. failed);
    - the margin also absorbs this instance's clock skew: an instance whose clock lags by
      more than the margin would take scheduled deliveries for forced ones.
    """
    return (schedule_time - now).total_seconds() > margin_seconds


def format_instant(instant: datetime) -> str:
    """Canonical UTC spelling of an instant, microsecond precision."""
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lower_keys(headers: Mapping[str, str]) -> dict[str, str]:
    """Header names vary in case across HTTP versions: look them up lower-cased."""
    return {name.lower(): value for name, value in headers.items()}


def parse_schedule_time(value: str) -> datetime:
    """Parse an RFC 3339 timestamp into an aware UTC datetime, or raise BadDelivery."""
    text = value.strip()
    shown = _shown(value)
    match = _RFC3339.fullmatch(text)
    if not match:
        raise BadDelivery(
            f"X-CloudScheduler-ScheduleTime {shown} is not an RFC 3339 timestamp "
            "such as 2026-10-16T12:00:00Z"
        )
    fraction = match.group(7) or ""
    # datetime takes at most microseconds; nanosecond digits beyond that are dropped.
    iso = text[: match.start(7)] if fraction else text[: match.start(8)]
    iso += fraction[:7]
    offset = match.group(8)
    iso += "+00:00" if offset in ("Z", "z") else offset
    try:
        return datetime.fromisoformat(iso.replace("t", "T")).astimezone(UTC)
    except ValueError as exc:
        raise BadDelivery(
            f"X-CloudScheduler-ScheduleTime {shown} is not a real instant: {exc}"
        ) from None
    except OverflowError:
        # 0001-01-01T00:30:00+01:00 or 9999-12-31T23:59:59-01:00: no UTC instant exists.
        raise BadDelivery(
            f"X-CloudScheduler-ScheduleTime {shown} is outside years 1-9999 in UTC"
        ) from None


def _shown(value: str, limit: int = 80) -> str:
    """A header value quoted for a one-line reason, cut to a readable length."""
    return repr(value if len(value) <= limit else value[:limit] + "...")


@dataclass(frozen=True)
class DeliveryHeaders:
    """What the headers say, before the schedule-time policy is applied."""

    project: str
    location: str
    job_id: str
    schedule_time: datetime | None
    generation: int = 0
    business: BusinessSchedule | None = None  # X-Dedup-Schedule and its companions
    forced_runs: str = FORCED_SEPARATE
    attempt_deadline_seconds: float | None = None  # X-Dedup-Attempt-Deadline
    overlap: str = OVERLAP_ALLOW  # X-Dedup-Overlap


def parse_business(lowered: Mapping[str, str]) -> BusinessSchedule | None:
    """X-Dedup-Schedule, -Time-Zone, -Dst-Repeated, -Dst-Skipped: the job's business runs;
    None without X-Dedup-Schedule. A value the kit cannot use is a BadDelivery."""
    schedule = lowered.get(SCHEDULE_HEADER)
    if schedule is None:
        return None
    time_zone = lowered.get(TIME_ZONE_HEADER, "Etc/UTC").strip()
    choices: list[str | None] = []
    for header, label, allowed in ((DST_REPEATED_HEADER, "X-Dedup-Dst-Repeated", DST_REPEATED),
                                   (DST_SKIPPED_HEADER, "X-Dedup-Dst-Skipped", DST_SKIPPED)):
        value = lowered.get(header, "").strip() or None
        if value is not None and value not in allowed:
            raise BadDelivery(f"{label} {_shown(value)} is not one of {', '.join(allowed)}")
        choices.append(value)
    try:
        return business_schedule(" ".join(schedule.split()), time_zone, *choices)
    except (ValueError, KeyError) as exc:  # ZoneInfoNotFoundError is a KeyError
        raise BadDelivery(
            f"X-Dedup-Schedule {_shown(schedule)} with X-Dedup-Time-Zone {_shown(time_zone)} "
            f"cannot be used ({str(exc).strip(chr(39))}): send the job's own 5-field "
            "schedule and IANA time zone, as the kit's Scheduler job does"
        ) from None


def parse_attempt_deadline(value: str | None) -> float | None:
    """X-Dedup-Attempt-Deadline: whole seconds from 1 to 3600, or absent."""
    if value is None:
        return None
    text = value.strip()
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= 3600):
        raise BadDelivery(f"X-Dedup-Attempt-Deadline {_shown(value)} is not a whole number of "
                          "seconds from 1 to 3600 (the job's attemptDeadline)")
    return float(text)


def _parse_choice(header: str, value: str | None, choices: tuple[str, ...], absent: str,
                  what: str = "") -> str:
    """A header naming one of a job's choices (the stack config's), `absent` when unset."""
    if value is None:
        return absent
    text = value.strip()
    if text not in choices:
        raise BadDelivery(f"{header} {_shown(value)} is not one of {', '.join(choices)}{what}")
    return text


def parse_forced_runs(value: str | None) -> str:
    """X-Dedup-Forced-Runs: absent is `separate`."""
    return _parse_choice("X-Dedup-Forced-Runs", value, FORCED_RUNS, FORCED_SEPARATE)


def parse_overlap(value: str | None) -> str:
    """X-Dedup-Overlap: absent is `allow`."""
    return _parse_choice("X-Dedup-Overlap", value, OVERLAP_POLICIES, OVERLAP_ALLOW,
                         " (the job's overlap policy)")


def parse_generation(value: str | None) -> int:
    """X-Dedup-Generation: absent is 0 (the run itself); else a non-negative integer."""
    if value is None:
        return 0
    text = value.strip()
    if not text.isdigit() or not text.isascii() or int(text) > MAX_GENERATION:
        raise BadDelivery(
            f"X-Dedup-Generation {_shown(value)} is not a whole number from 0 to "
            f"{MAX_GENERATION}: send the re-run's generation (1 for the first re-run), or "
            "leave the header out for the scheduled run itself"
        )
    return int(text)


def delivered_late(headers: Mapping[str, str], now: datetime) -> float | None:
    """How many seconds a queued delivery is past its X-Dedup-Deliver-Within (counted
    from its X-CloudTasks-TaskETA), or None when it is not late (or carries no bound: a
    direct POST). A bound that is not a number of seconds is a BadDelivery."""
    lowered = lower_keys(headers)
    raw = lowered.get(DELIVER_WITHIN_HEADER)
    if raw is None:
        return None
    try:
        within = float(raw)
    except ValueError:
        within = -1.0
    if not (0 <= within < 10**9):
        raise BadDelivery(
            f"X-Dedup-Deliver-Within {_shown(raw)} is not a number of seconds (0 or more)")
    try:
        eta = float(lowered.get(TASK_ETA_HEADER, ""))
    except ValueError:
        return None  # not a queued delivery: nothing to be late against
    late = now.timestamp() - eta - within
    return late if late > 0 else None


def parse_delivery(
    headers: Mapping[str, str], default_project: str, default_location: str
) -> DeliveryHeaders:
    """Validate the Scheduler and dedup headers (case-insensitive) of one delivery."""
    lowered = lower_keys(headers)
    raw_job = lowered.get(JOB_NAME_HEADER, "").strip()
    if not raw_job:
        raise BadDelivery("missing X-CloudScheduler-JobName header")
    header_project = lowered.get(PROJECT_HEADER, "").strip() or None
    header_location = lowered.get(LOCATION_HEADER, "").strip() or None

    full = _FULL_JOB_NAME.fullmatch(raw_job)
    if full:
        name_project, name_location, job_id = full.groups()
        for label, from_name, from_header in (
            ("X-Dedup-Project", name_project, header_project),
            ("X-Dedup-Location", name_location, header_location),
        ):
            if from_header is not None and from_header != from_name:
                raise BadDelivery(
                    f"{label} {from_header!r} contradicts the job name {raw_job!r}"
                )
        project, location = name_project, name_location
    elif "/" in raw_job:
        raise BadDelivery(
            f"X-CloudScheduler-JobName {raw_job!r} is neither a job ID nor "
            "projects/PROJECT/locations/LOCATION/jobs/JOB"
        )
    else:
        job_id = raw_job
        project = header_project or default_project
        location = header_location or default_location

    if not _JOB_ID.fullmatch(job_id):
        raise BadDelivery(
            f"job ID {job_id[:80]!r} is not a Cloud Scheduler job ID "
            "(1-500 letters, digits, hyphens or underscores)"
        )
    if not _PROJECT_ID.fullmatch(project):
        raise BadDelivery(f"project {project[:80]!r} is not a Google Cloud project ID")
    if not _LOCATION_ID.fullmatch(location):
        raise BadDelivery(f"location {location[:80]!r} is not a Google Cloud location ID")

    raw_time = lowered.get(SCHEDULE_TIME_HEADER)
    # Absent is a policy question (manual runs); present but malformed is always a 400.
    schedule_time = None if raw_time is None else parse_schedule_time(raw_time)
    generation = parse_generation(lowered.get(GENERATION_HEADER))
    return DeliveryHeaders(
        project, location, job_id, schedule_time, generation, parse_business(lowered),
        parse_forced_runs(lowered.get(FORCED_RUNS_HEADER)),
        parse_attempt_deadline(lowered.get(ATTEMPT_DEADLINE_HEADER)),
        parse_overlap(lowered.get(OVERLAP_HEADER)),
    )

"""`make rerun STACK=prod JOB=invoice-sync TIME=2026-11-30T09:15:00+01:00 REASON="..."`:
ask for one run of a job to be executed once more.

    python -m operator_tools rerun STACK --job NAME --time RFC3339 --reason TEXT
        [--requested-by WHO]

TIME must be one of the job's scheduled times (its cron in its time zone, as the watchdog
computes them) and not in the future. The run's records are read by ID (generation 0, the
run itself, and every re-run generation after it) and its requests by their base run; the
request is refused while the latest generation is in progress or an earlier request is
still pending, and, for a run that is not completed, until its retry window + the
watchdog's grace has passed (Scheduler may retry generation 0 until then: a re-run next to
that retry would execute the run twice). Otherwise a request for the generation past every
record and every request of the run (refused and failed ones too) is created (a
conditional create in `<collection>_reruns` of the watchdog's own database,
`<databaseName>-watchdog`, its ID the new generation's run_id) with who
asked and why, and the watchdog delivers it at its next tick, exactly once however often it
is delivered (the dedup protocol); the records of the earlier generations are kept. A run
that never ran at all (missed) gets generation 0: it is delivered late, once, as catch-up
would (the same run_id as Scheduler's retries: the protocol runs it once with them).

A run that re-runs already executed (a generation past 0 completed, or a request of it
`done`) is asked for once more only when the operator confirms, `--again`
(`make rerun ... CONFIRM=1`): otherwise the refusal names the generations already run, who
asked for them and why. A failed or refused re-run needs no confirmation: asking again is
its remedy.

With `--now WATCHDOG_URL` (`make rerun ... NOW=1 WATCHDOG_URL=...`) the watchdog is asked
for a tick right away, where the operator can reach it: a local or demo watchdog over
plain http (no token), or one that accepts the ID token of the operator's credentials. A
deployed watchdog serves only its Scheduler job's account (and internal traffic): there
the request simply waits for the next tick.

Firestore is the emulator when FIRESTORE_EMULATOR_HOST is set, otherwise the stack's
database with Application Default Credentials (as `make runs`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO
from zoneinfo import ZoneInfo

from croniter import croniter

from dedup.keys import RunKey
from dedup.store import MalformedRun, RecordExists, RunStatus, StoredRun, StoreError
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.due import WatchedJob, verdict_due_at
from dedup.watchdog.reruns import (
    DONE,
    PENDING,
    RerunRequest,
    retries_may_execute,
)
from infra.config import StackConfig
from operator_tools.runs import (
    RunsError,
    RunStores,
    first_line,
    job_records,
    open_store,
    stack_config,
    stack_job,
    store_failure,
    watched_jobs,
)

# Generations read per batch while looking for the latest one.
_GENERATION_BATCH = 16


class RerunRefused(Exception):
    """A one-line reason the re-run cannot be requested (and what to do instead)."""


@dataclass(frozen=True)
class Requested:
    request: RerunRequest
    previous: StoredRun | None  # the latest generation's record before this request
    # The generations re-runs had already executed (asked anyway: `again`), one phrase each.
    already: tuple[str, ...] = ()


def parse_time(text: str) -> datetime:
    """TIME: an RFC 3339 instant with its UTC offset (Z or +01:00)."""
    try:
        instant = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise RerunRefused(
            f"TIME {text!r} is not an RFC 3339 time: give the run's schedule time with its "
            "offset, e.g. 2026-11-30T09:15:00+01:00 or 2026-11-30T08:15:00Z"
        ) from None
    if instant.tzinfo is None:
        raise RerunRefused(
            f"TIME {text!r} has no UTC offset: add it (e.g. {text.strip()}+01:00 or "
            f"{text.strip()}Z), so the instant is unambiguous"
        )
    return instant.astimezone(UTC)


def check_scheduled(job: WatchedJob, instant: datetime, now: datetime) -> None:
    """TIME is one of the job's scheduled times, at or before now."""
    if not job.is_scheduled(instant):  # the watchdog checks it again before delivering
        zone = ZoneInfo(job.time_zone)
        it = croniter(job.schedule, instant.astimezone(zone))
        before: datetime = it.get_prev(datetime)
        after: datetime = croniter(job.schedule, instant.astimezone(zone)).get_next(datetime)
        raise RerunRefused(
            f"{local_and_utc(instant, zone)} is not a scheduled time of job {job.name} "
            f"({job.schedule!r} in {job.time_zone}): the nearest are {local_and_utc(before, zone)} "
            f"and {local_and_utc(after, zone)}"
        )
    if instant > now:
        raise RerunRefused(
            f"{local_and_utc(instant, ZoneInfo(job.time_zone))} is in the future: only a run that "
            "was due can be re-run"
        )


def local_and_utc(instant: datetime, zone: ZoneInfo, timespec: str = "minutes") -> str:
    local = instant.astimezone(zone).isoformat(timespec=timespec)
    return f"{local} ({instant.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')})"


def generations(
    runs: FirestoreRunStore, project: str, location: str, job: str, instant: datetime,
    through: int = 0,
) -> dict[int, StoredRun]:
    """Every generation of the run that has a record, by generation (0: the run itself),
    read at least through generation `through` (a refused request leaves a gap)."""
    return generations_of(runs, project, location, job, {instant: through})[instant]


def generations_of(
    runs: FirestoreRunStore, project: str, location: str, job: str,
    through: Mapping[datetime, int],
) -> dict[datetime, dict[int, StoredRun]]:
    """`generations` of many runs at once (run -> its records by generation), each read at
    least through its `through`: generations 0 and 1 of every run first, then the next
    _GENERATION_BATCH of the runs that may have more, in one batched read per round.
    RerunRefused if one is a document that is no run record: nothing is asked of a run
    while its generations cannot be known (the runbook says what to do with it)."""
    found: dict[datetime, dict[int, StoredRun]] = {t: {} for t in through}
    reading = {t: (0, 2) for t in through}  # run -> the generations [start, end) to read
    while reading:
        keys = {
            (t, g): RunKey(project, location, job, t, generation=g).run_id
            for t, (start, end) in reading.items() for g in range(start, end)
        }
        read = runs.get_many(list(keys.values()))
        records: dict[str, StoredRun] = {}
        for run_id, stored in read.items():
            if isinstance(stored, MalformedRun):
                raise RerunRefused(
                    f"{stored}: it was not written by the kit, and nothing is re-run over "
                    "it; see the runbook \"The watchdog refused a malformed document\"")
            records[run_id] = stored
        more: dict[datetime, tuple[int, int]] = {}
        for t, (start, end) in reading.items():
            batch = {g: records[keys[(t, g)]] for g in range(start, end)
                     if keys[(t, g)] in records}
            found[t].update(batch)
            if max(batch, default=-1) == end - 1 or end <= through[t]:
                more[t] = (end, end + _GENERATION_BATCH)
        reading = more
    return found


def rerun_job(cfg: StackConfig, job_name: str, reason: str) -> WatchedJob:
    """The job a re-run (or a backfill) asks for, if it may: a reason, and re-runs on."""
    if not reason.strip():
        raise RerunRefused('REASON is required: say why the run must execute again, e.g. '
                           'REASON="invoice import fixed, re-sync 09:15"')
    [job] = watched_jobs(cfg, job_name)
    if not job.reruns:  # its watchdog checks the same flag before it delivers a request
        raise RerunRefused(
            f"stack {cfg.name_prefix!r}'s watchdog does not deliver re-runs: set "
            "watchdog.reruns: true in the stack file (and `pulumi up`), so the watchdog may "
            "call the job's function"
        )
    return job


@dataclass(frozen=True)
class RerunPlan:
    """The generation a re-run of one run asks for, once it passed every check."""

    generation: int
    previous: StoredRun | None  # the latest generation's record
    already: tuple[str, ...] = ()  # the generations re-runs executed already (`again`)


def plan_rerun(
    job: WatchedJob, instant: datetime, asked: Sequence[RerunRequest],
    found: Mapping[int, StoredRun], *, now: datetime, grace_seconds: float,
    again: bool = False,
) -> RerunPlan:
    """`make rerun`'s checks of one run, from its requests (`asked`, every status) and its
    records by generation (`found`); RerunRefused says why not. A run already re-run is
    asked for once more only with `again`."""
    highest_asked = max((r.generation for r in asked), default=-1)
    latest = max(found, default=-1)
    pending = [r for r in asked if r.status == PENDING]
    zone = ZoneInfo(job.time_zone)
    when = local_and_utc(instant, zone)
    if pending:
        first = pending[0]
        raise RerunRefused(
            f"a re-run of {job.name} @ {when} (generation {first.generation}, asked by "
            f"{first.requested_by} at {first.requested_at:%Y-%m-%d %H:%M}Z) is still pending: "
            "the watchdog delivers it at its next tick; see `make runs`"
        )
    previous = found.get(latest)
    if previous is not None and previous.record.status is RunStatus.IN_PROGRESS and not (
        previous.lease_expired
    ):
        raise RerunRefused(
            f"generation {latest} of {job.name} @ {when} is in progress (attempt "
            f"{previous.record.attempts}): wait until it has finished (see `make runs`), "
            "then ask again"
        )
    generation = max(latest, highest_asked) + 1
    run = found.get(0)
    possible_at = verdict_due_at(job, instant, grace_seconds)
    if generation > 0 and retries_may_execute(run) and now < possible_at:
        # Scheduler stops retrying a run only once it got a 2xx: until the retry window
        # has passed, a retry may take generation 0 over while generation g runs.
        status = "no record" if run is None else str(run.record.status) + (
            ", its lease lapsed" if run.record.status is RunStatus.IN_PROGRESS
            and run.lease_expired else "")
        raise RerunRefused(
            f"{job.name} @ {when} has not completed ({status}) and Scheduler may still "
            f"retry it until its retry window ({job.retry_window_seconds:g} s) + the "
            f"watchdog's grace ({grace_seconds:g} s) have passed: a re-run "
            "now could execute next to that retry; ask again at or after "
            f"{local_and_utc(possible_at, zone, 'seconds')}"
        )
    already = already_run(asked, found)
    if already and not again:
        raise RerunRefused(
            f"{job.name} @ {when} has been re-run already: {'; '.join(already)}. Another "
            f"re-run executes it once more, as generation {generation}: if that is what "
            "you want, ask again with CONFIRM=1 (`make rerun ... CONFIRM=1`, or "
            "`scheduler-dedup rerun ... --again`)"
        )
    return RerunPlan(generation, previous, tuple(already))


def request_rerun(
    cfg: StackConfig,
    stores: RunStores,
    *,
    job_name: str,
    time_text: str,
    reason: str,
    requested_by: str,
    now: datetime | None = None,
    again: bool = False,
) -> Requested:
    """Validate and record one re-run request; RerunRefused says why not. A run already
    re-run (a generation past 0 completed, or a request of it done) is asked for once more
    only with `again` (the operator confirmed: CONFIRM=1, --again)."""
    now = now or datetime.now(UTC)
    job = rerun_job(cfg, job_name, reason)
    instant = parse_time(time_text)
    check_scheduled(job, instant, now)
    project, location = cfg.project, cfg.region
    queue = stores.reruns()  # in the watchdog's own database
    # Every request of the run, whatever its status: a refused one left no record for its
    # generation, and the next request must still be numbered past it (IDs are per generation).
    asked = queue.for_run(RunKey(project, location, job.name, instant).run_id)
    highest_asked = max((r.generation for r in asked), default=-1)
    # The job's own records only (its runtime's database, the proxy's, or the dedup one):
    # a record of the same run_id elsewhere was not written by the function that runs it.
    found = generations(job_records(cfg, stores, stack_job(cfg, job.name)), project, location,
                        job.name, instant, through=highest_asked)
    plan = plan_rerun(job, instant, asked, found, now=now,
                      grace_seconds=float(cfg.watchdog.grace_seconds), again=again)
    request = RerunRequest(
        project=project, location=location, job=job.name, schedule_time=instant,
        generation=plan.generation, requested_by=requested_by, reason=reason.strip(),
        requested_at=now, expire_at=now + timedelta(seconds=cfg.dedup.retention_seconds),
    )
    try:
        queue.create(request)
    except RecordExists:
        raise RerunRefused(
            f"a re-run request for generation {request.generation} of {job.name} @ "
            f"{local_and_utc(instant, ZoneInfo(job.time_zone))} was created a moment ago by "
            "someone else: see `make runs`"
        ) from None
    return Requested(request, plan.previous, plan.already)


def already_run(asked: Sequence[RerunRequest], found: Mapping[int, StoredRun]) -> list[str]:
    """The generations of a run that re-runs already executed, lowest first, one phrase
    each: every request `done` (generation 0 too: a missed run delivered late) and every
    generation past 0 whose record is completed (its request may be gone: TTL, or written
    by other means). Failed and refused ones are not: asking again is their remedy."""
    done = {r.generation: r for r in asked if r.status == DONE}
    completed = {g for g, run in found.items()
                 if g > 0 and run.record.status is RunStatus.COMPLETED}
    if 0 in found and found[0].record.status is RunStatus.COMPLETED:
        completed.add(0)  # shown as completed when a done request asked for it
    phrases = []
    for g in sorted(done.keys() | (completed - {0})):
        phrase = f"generation {g} {'completed' if g in completed else 'done'}"
        if (request := done.get(g)) is not None:
            phrase += (f" (asked by {request.requested_by} at "
                       f"{request.requested_at:%Y-%m-%d %H:%M}Z: {request.reason})")
        phrases.append(phrase)
    return phrases


def tick_now(url: str, timeout_seconds: float = 300) -> str:
    """Ask the watchdog at `url` for a tick now; one line saying what became of it. Over
    https with an ID token for `url` from the operator's credentials; over http (a local
    watchdog) without one."""
    import requests

    from dedup.watchdog.delivery import fetch_id_token

    headers: dict[str, str] = {}
    if url.startswith("https://"):
        try:
            headers["Authorization"] = f"Bearer {fetch_id_token(url)}"
        except Exception as exc:  # user credentials cannot mint ID tokens, no ADC, ...
            return (f"no tick now: no ID token for {url} ({first_line(exc)}); the watchdog "
                    "delivers the request at its next tick")
    try:
        reply = requests.post(url, headers=headers, timeout=timeout_seconds)
    except requests.RequestException as exc:
        return f"no tick now: POST {url} failed ({first_line(exc)}); it waits for the next tick"
    if reply.status_code != 200:
        return (f"no tick now: the watchdog answered HTTP {reply.status_code} "
                f"({reply.text[:200].strip()}); the request waits for its next tick")
    delivered = reply.json().get("reruns", [])
    shown = ", ".join(
        f"{d['job']} @ {d['schedule_time']} generation {d['generation']}: {d['status']}"
        for d in delivered
    )
    return f"tick now: the watchdog delivered {len(delivered)} re-run(s)" + (
        f": {shown}" if shown else ""
    )


def confirmed() -> bool:
    """CONFIRM in the environment (`make rerun ... CONFIRM=1`: make passes command-line
    variables to its recipes' environment): yes unless empty, 0, no or false."""
    return os.environ.get("CONFIRM", "").strip().lower() not in ("", "0", "no", "false")


def who_asks(explicit: str | None) -> str:
    """REQUESTED_BY, else the Application Default Credentials' account (not against the
    emulator), else git's `user.email`, else $USER; "unknown" only when none says."""
    if explicit and explicit.strip():
        return explicit.strip()
    if not os.environ.get("FIRESTORE_EMULATOR_HOST"):
        try:
            import google.auth

            credentials, _ = google.auth.default()
            email = getattr(credentials, "service_account_email", None)
            if isinstance(email, str) and "@" in email:
                return email
        except Exception:  # no ADC: the store open below says so, with the fix
            pass
    return git_user_email() or os.environ.get("USER", "").strip() or "unknown"


def git_user_email() -> str | None:
    """`git config user.email` where the command runs (the repository's, else the user's
    global setting); None without git or without the setting."""
    try:
        found = subprocess.run(["git", "config", "user.email"], capture_output=True,
                               text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    email = found.stdout.strip()
    return email if found.returncode == 0 and email else None


def main(
    argv: Sequence[str] | None = None,
    *,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    now: datetime | None = None,
    client_factory: Callable[..., Any] | None = None,
) -> int:
    parser = argparse.ArgumentParser(
        prog="scheduler-dedup rerun",
        description="Ask for one run of a job to be executed "
        "once more (the watchdog delivers it, exactly once).")
    parser.add_argument("stack", help="stack name (Pulumi.<stack>.yaml) or stack file path")
    parser.add_argument("--job", required=True, help="the job (jobs[].name)")
    parser.add_argument("--time", required=True, metavar="RFC3339",
                        help="the run's schedule time, e.g. 2026-11-30T09:15:00+01:00")
    parser.add_argument("--reason", required=True, help="why the run must execute again")
    parser.add_argument("--requested-by", default=os.environ.get("REQUESTED_BY"),
                        help="who asks (default: REQUESTED_BY, the ADC account, "
                        "git's user.email or $USER)")
    parser.add_argument("--now", metavar="WATCHDOG_URL",
                        help="then ask the watchdog at this URL for a tick right away")
    parser.add_argument("--again", action="store_true", default=confirmed(),
                        help="queue another generation of a run re-runs already executed "
                        "(default: CONFIRM=1 in the environment, as make rerun CONFIRM=1 "
                        "sets it)")
    args = parser.parse_args(argv)
    import google.auth.exceptions

    try:
        cfg = stack_config(args.stack)
        stores = open_store(cfg, client_factory)
        done = request_rerun(
            cfg, stores, job_name=args.job, time_text=args.time, reason=args.reason,
            requested_by=who_asks(args.requested_by), now=now, again=args.again,
        )
    except (RunsError, RerunRefused) as exc:
        err.write(f"make rerun: {exc}\n")
        return 2
    except (StoreError, google.auth.exceptions.GoogleAuthError) as exc:
        err.write(store_failure("make rerun", "read or write the runs", cfg, exc))
        return 1
    request = done.request
    before = ("no record (never ran)" if done.previous is None
              else f"{done.previous.record.status}")
    # A job in a runtime says so, and where the watchdog delivers it (that runtime's
    # function); a job of the default function or the proxy reads as it always has.
    runtime = cfg.runtime_of(stack_job(cfg, request.job))
    in_runtime = f" (runtime {runtime.name})" if runtime else ""
    to_runtime = (f" to runtime {runtime.name}'s function {cfg.runtime_function_name(runtime)}"
                  if runtime else "")
    out.write(
        f"re-run requested: {request.job}{in_runtime} @ "
        f"{request.schedule_time.strftime('%Y-%m-%dT%H:%M:%SZ')}, generation "
        f"{request.generation} (run_id {request.request_id}); latest before: {before}; "
        f"asked by {request.requested_by}: {request.reason}\n"
        f"The watchdog delivers it{to_runtime} at its next tick (schedule "
        f"{cfg.watchdog.schedule!r}, {cfg.watchdog.time_zone}); `make runs "
        f"STACK={args.stack}` shows it.\n"
    )
    if done.already:
        out.write(f"Confirmed: this run had been re-run already ({'; '.join(done.already)}).\n")
    if args.now:
        out.write(tick_now(args.now) + "\n")
    return 0


if __name__ == "__main__":
    from operator_tools import not_an_entry_point

    not_an_entry_point("rerun")

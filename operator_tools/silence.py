"""`make silence STACK=prod [JOB=invoice-sync] UNTIL=... REASON="..."`: a maintenance window
set now, without a deploy; `make silence-remove STACK=prod [JOB=...]` lifts it, `make
silences STACK=prod` lists them.

    python -m operator_tools silence STACK [--job NAME] --until RFC3339 --reason TEXT
    python -m operator_tools silence STACK [--job NAME] --remove     (make silence-remove)
    python -m operator_tools silence STACK --list                    (make silences)

From now until UNTIL the watchdog judges, records and logs the job's problems (without
JOB: every job of the stack), each line marked `silenced`, and pages nobody; an incident
still open when the silence ends pages at the first tick after it
(function/dedup/watchdog/silences.py). The runs run as ever (to stop them, pause the job).
The silence is written to `<collection>_silences` of the watchdog's own database, with who
asks (REQUESTED_BY, else the Application Default Credentials' account, else $USER, as
`make rerun` records it) and why; a new one of the same scope (the job, or the stack)
replaces it. UNTIL must be in the future and at most MAX_DURATION_SECONDS away (a month;
beyond, a declared window or `paused` says what is meant); JOB must be a job of the stack.
Windows planned ahead belong in the stack config (`jobs[].silences`, `watchdog.silences`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from dedup.store import StoreError
from dedup.watchdog.due import rfc3339
from dedup.watchdog.silences import FirestoreSilences, OperatorSilence, silences_collection
from dedup.watchdog.windows import MAX_DURATION_SECONDS, MAX_REASON_LENGTH, parse_instant
from infra.config import StackConfig
from operator_tools.rerun import who_asks
from operator_tools.runs import (
    RunsError,
    RunStores,
    open_store,
    stack_config,
    store_failure,
    watched_jobs,
)


class SilenceRefused(Exception):
    """A one-line reason the silence was not written."""


def silences_of(cfg: StackConfig, stores: RunStores) -> FirestoreSilences:
    """The stack's operator silences, in the watchdog's own database."""
    if not cfg.watchdog.enabled:
        raise SilenceRefused("the stack has no watchdog (watchdog.enabled: false): nothing "
                             "pages, so there is nothing to silence")
    return FirestoreSilences(stores.watch, silences_collection(cfg.dedup.collection))


def job_scope(cfg: StackConfig, job: str | None) -> str | None:
    """The deployed job ID JOB names (jobs[].name or the ID); None: the whole stack."""
    if job is None or not job.strip():
        return None
    [watched] = watched_jobs(cfg, job.strip())  # RunsError naming the stack's jobs
    return watched.name


def plan_silence(
    cfg: StackConfig, *, job: str | None, until_text: str, reason: str, requested_by: str,
    now: datetime,
) -> OperatorSilence:
    """The silence asked for, checked; SilenceRefused (or RunsError) saying the fix."""
    until = parse_instant(until_text)
    if until is None:
        raise SilenceRefused(f"UNTIL {until_text!r} is not an RFC 3339 time with its offset, "
                             "e.g. UNTIL=2026-12-06T04:00:00+01:00")
    if until <= now:
        raise SilenceRefused(f"UNTIL {rfc3339(until)} is not in the future (now "
                             f"{rfc3339(now)}): give when the silence ends")
    if until - now > timedelta(seconds=MAX_DURATION_SECONDS):
        raise SilenceRefused(f"UNTIL {rfc3339(until)} is more than {MAX_DURATION_SECONDS // 86400}"
                             " days away: declare a window in the stack config "
                             "(jobs[].silences) or pause the job")
    reason = reason.strip()
    if not reason or len(reason) > MAX_REASON_LENGTH:
        raise SilenceRefused(f"REASON must say why (1 to {MAX_REASON_LENGTH} characters)")
    return OperatorSilence(job_scope(cfg, job), until, reason, requested_by, now)


def describe(silence: OperatorSilence, now: datetime | None = None) -> str:
    scope = silence.job or "every job of the stack"
    state = "" if now is None or silence.until > now else " (over)"
    return (f"{scope} silenced until {rfc3339(silence.until)}{state} by "
            f"{silence.requested_by}: {silence.reason}")


def main(
    argv: Sequence[str] | None = None, *, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
    now: datetime | None = None, client_factory: Callable[..., Any] | None = None,
) -> int:
    parser = argparse.ArgumentParser(
        prog="scheduler-dedup silence", description="Silence a job (or the stack) until a "
        "time: problems are logged and shown, nothing is paged; an incident still open at "
        "the end pages then.")
    parser.add_argument("stack", help="stack name (Pulumi.<stack>.yaml) or stack file path")
    parser.add_argument("--job", help="the job (jobs[].name); unset: every job of the stack")
    parser.add_argument("--until", metavar="RFC3339",
                        help="when the silence ends, e.g. 2026-12-06T04:00:00+01:00")
    parser.add_argument("--reason", default="", help="why (on every line it marks)")
    parser.add_argument("--requested-by", default=os.environ.get("REQUESTED_BY"),
                        help="who asks (default: REQUESTED_BY, the ADC account, "
                        "git's user.email or $USER)")
    parser.add_argument("--remove", action="store_true", help="lift the silence")
    parser.add_argument("--list", action="store_true", help="list the silences")
    args = parser.parse_args(argv)
    import google.auth.exceptions

    moment = now or datetime.now(UTC)
    cfg: StackConfig | None = None
    try:
        cfg = stack_config(args.stack)
        if args.list:
            silences, refused = silences_of(cfg, open_store(cfg, client_factory)).read_all()
            for silence in sorted(silences, key=lambda s: s.job or ""):
                out.write(describe(silence, moment) + "\n")
            for document, why in refused:
                out.write(f"{document}: unreadable, silences nothing ({why})\n")
            if not silences and not refused:
                out.write("no silences set by `make silence` (declared windows are in the "
                          "stack config)\n")
            return 0
        if args.remove:
            scope = job_scope(cfg, args.job)
            removed = silences_of(cfg, open_store(cfg, client_factory)).remove(scope)
            out.write(f"removed: {describe(removed)}\n" if removed is not None else
                      f"{scope or 'the stack'}: no silence to remove\n")
            return 0
        if not args.until:
            raise SilenceRefused("UNTIL is required: when the silence ends, e.g. "
                                 "UNTIL=2026-12-06T04:00:00+01:00")
        silence = plan_silence(cfg, job=args.job, until_text=args.until, reason=args.reason,
                               requested_by=who_asks(args.requested_by), now=moment)
        silences_of(cfg, open_store(cfg, client_factory)).put(silence)
        out.write(f"{describe(silence)}\nProblems are still logged (marked silenced) and "
                  "shown by `make runs`; an incident still open at the end pages then. "
                  f"`make silence-remove STACK={args.stack}"
                  f"{f' JOB={args.job}' if args.job else ''}` lifts it.\n")
        return 0
    except (RunsError, SilenceRefused) as exc:
        err.write(f"make silence: {exc}\n")
        return 2
    except (StoreError, google.auth.exceptions.GoogleAuthError) as exc:
        if cfg is None:
            raise
        err.write(store_failure("make silence", "read or write the silences", cfg, exc))
        return 1


if __name__ == "__main__":
    from operator_tools import not_an_entry_point

    not_an_entry_point("silence")

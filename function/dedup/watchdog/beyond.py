"""Runs beyond the schedule, as a tick judges them: `unexplained_run`, `too_many_forced_runs`.

The function notes each run that is no business run of the schedule its delivery carries,
and each forced run, in its job's ledger of the day (dedup/beyond.py). For every job whose
`runsBeyondSchedule` is `log` or `page`, a tick reads the ledgers of yesterday and today
(UTC; two documents per job, in the batch of its database: one round trip per database) and
judges each note it has not judged before (the cursor's `beyond_seen`, pruned to the
ledgers read):

- `unscheduled`: reported `unexplained_run` unless the schedule time is a business run of
  the job as the watchdog's table holds it (the delivery carried another schedule: an edit
  between deploys) — an execution no business run, forced-run policy or re-run explains: a
  second Scheduler job or another caller sending the job's headers;
- `forced`: reported `too_many_forced_runs` when it is more than the job's
  `maxForcedRunsPerDay`-th forced run within 24 hours of its arrival (each one beyond is).

`page`: they are counted in the job's `beyond_schedule` incident streak (opened at once,
closed by recoveryThreshold good runs: dedup.watchdog.incidents); `log`: their problem
lines are logged (and counted by the problem metric), nothing pages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from dedup.beyond import (
    BEYOND_OFF,
    FORCED,
    TOO_MANY_FORCED_RUNS,
    UNEXPLAINED_RUN,
    UNSCHEDULED,
    BeyondNote,
    ledger_id,
)
from dedup.watchdog.cursors import Cursor, WatchStore
from dedup.watchdog.due import WatchedJob, rfc3339
from dedup.watchdog.settings import WatchSettings
from dedup.watchdog.verdicts import JobTick, Problem

FORCED_RUNS_WINDOW = timedelta(days=1)


@runtime_checkable
class ReadsLedgers(Protocol):
    """A WatchStore that reads the ledgers too (FirestoreWatchStore; a store that cannot,
    as some tests' fakes, judges no run beyond the schedule)."""

    def get_ledgers(
        self, ledger_ids: Sequence[str], database: str | None = None
    ) -> Mapping[str, Mapping[str, Any]]:
        ...


class RunsBeyond:
    """The Watchdog's judging of runs beyond the schedule (dedup/watchdog/tick.py)."""

    _settings: WatchSettings
    _store: WatchStore

    def _runs_beyond(
        self, judged: Sequence[tuple[WatchedJob, Cursor, JobTick]], now: datetime
    ) -> None:
        """Each watching job's new notes judged into its tick's problems and its cursor."""
        wanted = [(job, cursor, tick) for job, cursor, tick in judged
                  if job.runs_beyond_schedule != BEYOND_OFF]
        if not wanted or not isinstance(self._store, ReadsLedgers):
            return
        today = now.astimezone(UTC).date()
        days = (today - timedelta(days=1), today)
        store = self._settings.store
        ids = {job.name: [ledger_id(store.project, store.location, job.name, day)
                          for day in days] for job, _, _ in wanted}
        by_database: dict[str | None, list[str]] = {}
        for job, _, _ in wanted:
            by_database.setdefault(job.database, []).extend(ids[job.name])
        ledgers: dict[str, Mapping[str, Any]] = {}
        for database, wanted_ids in by_database.items():
            ledgers.update(self._store.get_ledgers(wanted_ids, database))
        oldest = datetime.combine(days[0], datetime.min.time(), UTC)
        for job, cursor, tick in wanted:
            tick.reads += len(ids[job.name])
            notes = notes_of([ledgers[i] for i in ids[job.name] if i in ledgers])
            tick.problems += judge_notes(job, cursor.beyond_seen, notes)
            # Only notes of the ledgers still read are remembered (an older one is never
            # read again).
            cursor.beyond_seen = {r: t for r, t in cursor.beyond_seen.items() if t >= oldest}


def notes_of(ledgers: Sequence[Mapping[str, Any]]) -> dict[str, BeyondNote]:
    """The notes of a job's ledgers by run ID (a run noted on two days: its first note);
    an entry that is no note is left out (job code can write the records database)."""
    notes: dict[str, BeyondNote] = {}
    for ledger in ledgers:
        runs = ledger.get("runs")
        if not isinstance(runs, Mapping):
            continue
        for run_id, data in runs.items():
            note = BeyondNote.from_document(str(run_id), data)
            if note is not None and (run_id not in notes
                                     or note.arrived_at < notes[run_id].arrived_at):
                notes[str(run_id)] = note
    return notes


def judge_notes(
    job: WatchedJob, seen: dict[str, datetime], notes: Mapping[str, BeyondNote]
) -> list[Problem]:
    """The problems of the notes not in `seen` (which records them as judged)."""
    problems: list[Problem] = []
    forced = sorted(n.arrived_at for n in notes.values() if n.why == FORCED)
    for note in sorted(notes.values(), key=lambda n: (n.arrived_at, n.run_id)):
        if note.run_id in seen:
            continue
        seen[note.run_id] = note.arrived_at
        if note.why == UNSCHEDULED and not job.is_scheduled(note.schedule_time):
            problems.append(Problem(
                job.name, note.schedule_time, UNEXPLAINED_RUN, note.run_id,
                error=f"executed at {rfc3339(note.arrived_at)} for schedule time "
                f"{rfc3339(note.schedule_time)}, which is no run of the job's schedule "
                f"{job.schedule!r} ({job.time_zone}), nor a forced run or a re-run: another "
                "Scheduler job or caller sends the job's headers"))
        elif note.why == FORCED and job.max_forced_runs_per_day is not None:
            within = sum(note.arrived_at - FORCED_RUNS_WINDOW < t <= note.arrived_at
                         for t in forced)
            if within > job.max_forced_runs_per_day:
                problems.append(Problem(
                    job.name, note.schedule_time, TOO_MANY_FORCED_RUNS, note.run_id,
                    error=f"forced run {within} within 24 hours (at "
                    f"{rfc3339(note.arrived_at)}); maxForcedRunsPerDay is "
                    f"{job.max_forced_runs_per_day}"))
    return problems

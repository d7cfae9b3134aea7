"""Judging one job at a tick: the runs it reads, its verdicts, its cursor moved.

Each tick, for every job that is not paused: the schedule times whose verdict became due
since the previous tick (schedule time + retry window + grace <= now:
dedup/watchdog/due.py), bounded by the lookback, are read by ID in batches and judged
(dedup/watchdog/verdicts.py): no record -> `missed` (or set aside for catch-up:
dedup/watchdog/catch_up.py); `failed` -> `failed`; `completed` -> fine; `in_progress` ->
watched until it finishes, `overlong` once it has run longer than its attempt deadline +
grace (reported once); a document that is no record (job code wrote it) -> `malformed`
(reported once, not judged). Runs before the job's first recorded run are not judged (the
job did not exist yet); a job with no record at all is reported once as `never_ran`. What
was judged moves the job's cursor (dedup/watchdog/cursors.py), written by the tick.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from dedup.keys import RunKey
from dedup.store import MalformedRun, RunStatus, StoredRun
from dedup.store.firestore import GET_MANY_BATCH
from dedup.watchdog.catch_up import CatchUp
from dedup.watchdog.cursors import Cursor, in_parallel
from dedup.watchdog.due import WatchedJob
from dedup.watchdog.ran_twice import RAN_TWICE, second_execution
from dedup.watchdog.schedule_edits import EditWindow, due_times, edit_windows, note_table, unsure
from dedup.watchdog.verdicts import (
    BEFORE_FIRST_RUN,
    FAILED,
    FINE,
    MISSED,
    NEVER_RAN,
    NOT_DUE,
    OVERLONG,
    RUNNING,
    SKIPPED,
    ForcedRun,
    JobTick,
    Problem,
    classify_run,
    is_overlong,
    running_seconds,
)


@dataclass(frozen=True)
class JobReads:
    """What judging one job reads, planned before the tick reads every job's records in a
    few batches (a read per job was a round trip each: over 10 s for 1,000 jobs)."""

    lookback_start: datetime
    horizon: datetime
    start: datetime
    due: list[datetime]
    due_ids: dict[str, datetime]
    early: dict[str, datetime]
    watching: dict[str, datetime]
    ids: list[str]
    # The windows of the job's schedule edits still judged (dedup/watchdog/schedule_edits.py),
    # their runs read too: their records say which schedule was in force.
    windows: list[EditWindow] = field(default_factory=list)
    window_ids: dict[str, datetime] = field(default_factory=dict)


class JobJudging(CatchUp):
    """The Watchdog's judging of one job (dedup/watchdog/tick.py): what it reads, and its
    verdicts on them, into the job's cursor and the tick's problems."""

    def _horizon(self, job: WatchedJob, now: datetime) -> datetime:
        """Runs scheduled at or before this have had their whole retry window + grace."""
        return now - timedelta(seconds=job.retry_window_seconds + self._settings.grace_seconds)

    def _read_all(
        self, jobs: Sequence[WatchedJob], reads: Sequence[JobReads]
    ) -> dict[str, StoredRun | MalformedRun]:
        """Every job's records in one get_many per database (batched by the store); a
        document that is no record is its MalformedRun, judged for its own run only."""
        by_database: dict[str | None, list[str]] = {}
        for job, planned in zip(jobs, reads, strict=True):
            by_database.setdefault(job.database, []).extend(planned.ids)
        chunks = [
            (database, ids[start:start + GET_MANY_BATCH])
            for database, ids in by_database.items()
            for start in range(0, len(ids), GET_MANY_BATCH)
        ]
        found: dict[str, StoredRun | MalformedRun] = {}
        for part in in_parallel(lambda c: self._store.get_many(c[1], c[0]), chunks):
            found.update(part)
        return found

    def _reads(self, job: WatchedJob, cursor: Cursor, now: datetime) -> JobReads:
        """The runs judging the job reads (run IDs are unique across jobs)."""
        lookback_start = now - timedelta(seconds=self._settings.lookback_seconds)
        horizon = self._horizon(job, now)
        if cursor.watch_from is None:
            cursor.watch_from = now  # the first tick that watches this job
        start = lookback_start
        if cursor.judged_through is not None and cursor.judged_through > start:
            start = cursor.judged_through
        note_table(job, cursor.schedules, now, lookback_start)
        due = due_times(job, cursor.schedules, start, horizon)
        due_ids = {self._run_id(job, t): t for t in due}
        ids = list(due_ids)
        windows = edit_windows(job, cursor.schedules, start) if cursor.schedules.past else []
        window_ids = {self._run_id(job, t): t for w in windows
                      for t in w.old_only | w.new_only}
        ids += [r for r in window_ids if r not in due_ids]
        # Until the job's first run is known, the runs not yet due are read too: a job
        # created a moment ago has records only there, and is not `never_ran`.
        early: dict[str, datetime] = {}
        if cursor.first_run is None and not cursor.never_ran_reported:
            early = {
                self._run_id(job, t): t for t in job.schedule_times(max(start, horizon), now)
            }
            ids += list(early)
        watching = {r: t for r, t in cursor.watching.items() if t >= lookback_start}
        ids += [r for r in watching if r not in due_ids and r not in early
                and r not in window_ids]
        return JobReads(lookback_start, horizon, start, due, due_ids, early, watching, ids,
                        windows, window_ids)

    def _judge_job(
        self, job: WatchedJob, cursor: Cursor, now: datetime, reads: JobReads,
        read: Mapping[str, StoredRun | MalformedRun],
    ) -> JobTick:
        """Judge the job's due runs from `read` (the tick's reads) and update its cursor
        (written by the caller). A run whose document is no record is reported
        `malformed` and judged no further (never the job's first run, never caught up)."""
        grace = self._settings.grace_seconds
        lookback_start, horizon, start = reads.lookback_start, reads.horizon, reads.start
        due, due_ids, early, watching = reads.due, reads.due_ids, reads.early, reads.watching
        tick = JobTick(reads=len(reads.ids))
        assert cursor.watch_from is not None  # _reads set it
        found: dict[str, StoredRun] = {}
        malformed: dict[str, MalformedRun] = {}
        for run_id in reads.ids:
            if isinstance(stored := read.get(run_id), StoredRun):
                found[run_id] = stored
            elif stored is not None:
                malformed[run_id] = stored

        if cursor.first_run is None:
            recorded = [t for r, t in [*due_ids.items(), *early.items()] if r in found]
            if recorded:
                cursor.first_run = min(recorded)
            elif any(t >= cursor.watch_from for t in due) and not cursor.never_ran_reported:
                # A run scheduled after the watchdog began watching the job is due, and
                # the job has no record at all: reported once.
                tick.problems.append(Problem(job.name, None, NEVER_RAN))
                cursor.never_ran_reported = True

        # The schedules the records found were run under (schedule_edits.py), once per job.
        seen_windows = {w for r, w in reads.window_ids.items() if r in found}
        for run_id, t in due_ids.items():
            if run_id in malformed:
                tick.checked += 1
                tick.problems.append(self._malformed_run(job, t, malformed[run_id]))
                watching.pop(run_id, None)
                continue
            stored = found.get(run_id)
            if stored is not None and stored.record.forced:
                tick.forced.append(ForcedRun(job.name, t, str(stored.record.status), True,
                                             run_id))
            verdict = classify_run(job, t, stored, now, grace, cursor.first_run)
            if verdict in (BEFORE_FIRST_RUN, NOT_DUE):
                continue  # before the job's first recorded run: it did not exist yet (a due
                # run is never not_due)
            if verdict == MISSED and reads.windows and unsure(t, reads.windows, seen_windows):
                continue  # around a schedule edit, with no record saying it was in force
            tick.checked += 1
            tick.skipped += verdict == SKIPPED
            self._ran_twice(job, t, run_id, stored, tick)
            if verdict == FINE:
                tick.good[run_id] = t
            elif verdict == MISSED and self._catches_up(job, t, now):
                tick.to_catch_up[run_id] = t
            elif verdict == MISSED:
                tick.problems.append(Problem(job.name, t, MISSED, run_id))
            elif verdict == FAILED and stored is not None:
                tick.problems.append(self._failed(job, t, run_id, stored))
            elif verdict in (RUNNING, OVERLONG):
                watching[run_id] = t  # judged below, and at every tick until it ends

        for run_id, t in list(watching.items()):
            stored = found.get(run_id)
            if run_id not in due_ids:
                tick.checked += 1  # an in-progress run from an earlier tick, re-checked
            if run_id in cursor.overlong:
                tick.counted.add(run_id)  # its streak counted it when reported overlong
            if run_id in malformed:  # rewritten since: watched no more, reported once
                watching.pop(run_id)
                cursor.catch_ups.pop(run_id, None)
                tick.problems.append(self._malformed_run(job, t, malformed[run_id]))
                continue
            pending = cursor.catch_ups.get(run_id)
            if pending is not None and (stored is None or (
                    stored.record.status is RunStatus.IN_PROGRESS and stored.lease_expired)):
                # A catch-up that has not executed: no record (never reached, or a 5xx that
                # wrote nothing), or its instance stopped mid-run (the lease lapsed).
                self._judge_pending(job, run_id, t, pending, stored, cursor, tick, now)
                continue
            if stored is None or stored.record.status in (RunStatus.COMPLETED,
                                                           RunStatus.SKIPPED):
                watching.pop(run_id)
                cursor.catch_ups.pop(run_id, None)
                if stored is not None:
                    if stored.record.status is RunStatus.COMPLETED:  # a skip is no recovery
                        tick.good[run_id] = t
                    self._ran_twice(job, t, run_id, stored, tick)
            elif stored.record.status is RunStatus.FAILED:
                watching.pop(run_id)
                cursor.catch_ups.pop(run_id, None)
                tick.problems.append(self._failed(job, t, run_id, stored))
                self._ran_twice(job, t, run_id, stored, tick)
            elif run_id not in cursor.overlong and is_overlong(job, t, stored, now, grace):
                tick.problems.append(Problem(
                    job.name, t, OVERLONG, run_id, stored.record.attempts,
                    running_seconds=round(running_seconds(t, stored, now), 1),
                ))
                cursor.overlong[run_id] = t

        cursor.watching = watching
        cursor.catch_ups = {r: c for r, c in cursor.catch_ups.items() if r in watching}
        cursor.overlong = {r: t for r, t in cursor.overlong.items() if t >= lookback_start}
        if horizon > start:
            cursor.judged_through = horizon  # every run in (start, horizon] is judged
        return tick

    def _run_id(self, job: WatchedJob, instant: datetime) -> str:
        return RunKey(self._project, self._location, job.name, instant).run_id

    @staticmethod
    def _ran_twice(
        job: WatchedJob, t: datetime, run_id: str, stored: StoredRun | None, tick: JobTick
    ) -> None:
        """A finished run whose record shows a second execution (dedup.watchdog.ran_twice): a
        problem of its own, judged once (when the run is judged finished)."""
        why = second_execution(stored)
        if why is not None and stored is not None:
            tick.problems.append(Problem(job.name, t, RAN_TWICE, run_id,
                                         stored.record.attempts, why))

    def _failed(self, job: WatchedJob, t: datetime, run_id: str, stored: StoredRun) -> Problem:
        record = stored.record
        return Problem(job.name, t, FAILED, run_id, record.attempts, record.error)

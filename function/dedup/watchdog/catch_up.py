"""Catch-up: a tick delivers the missed runs of a job with `catchUp`, and judges them.

A `missed` run of a job with `catchUp`, scheduled within its `catchUpWithinSeconds`, is
delivered to the job's function with its original schedule time (dedup/watchdog/
deliveries.py): `caught_up` once delivered, `failed` when it ran late and the job raised,
pending while it has not executed (no record, or a lapsed lease; kept in the job's cursor,
dedup/watchdog/cursors.py PendingCatchUp): left to the queue while it may still deliver it,
delivered again at later ticks while inside its bound, `missed` with its last error once
the bound is over.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from dedup.store import MalformedRun, RunStatus, StoredRun
from dedup.watchdog.cursors import Cursor, PendingCatchUp
from dedup.watchdog.deliveries import (
    CAUGHT_UP,
    JOB_FAILED,
    RAN_AND_FAILED,
    Delivered,
    TickDeliveries,
)
from dedup.watchdog.due import WatchedJob
from dedup.watchdog.verdicts import FAILED, MISSED, SKIPPED, JobTick, Problem


class CatchUp(TickDeliveries):
    """The Watchdog's catch-up (dedup/watchdog/tick.py): the missed runs its judging set
    aside, delivered before any cursor moves; the pending ones judged at the next ticks."""

    def _catch_up(
        self, judged: Sequence[tuple[WatchedJob, Cursor, JobTick]], now: datetime
    ) -> list[Delivered]:
        """Deliver the missed runs the judging set aside (again, for a pending one); each
        ends up `caught_up`, `failed` when it ran and the job raised, or pending: watched,
        and delivered again at a later tick until it executed or its bound is over."""
        wanted = [
            (job, cursor, tick, run_id, t)
            for job, cursor, tick in judged for run_id, t in tick.to_catch_up.items()
        ]
        results = self._deliver_all([
            self._delivery(
                job, t, number=_deliveries(cursor, run_id),
                # Not after its bound: then the watchdog reports it `missed`.
                deliver_within_seconds=(
                    t + timedelta(seconds=job.catch_up_within_seconds) - now).total_seconds(),
            )
            for job, cursor, _, run_id, t in wanted
        ])
        # No usable answer is not "not executed": the run may have landed while its reply
        # was lost or late. Its record says which, before anything is reported.
        unanswered = [
            (job, run_id) for (job, _, _, run_id, _), result in zip(wanted, results, strict=True)
            if not (result.executed or result.in_progress or result.queued
                    or result.status == JOB_FAILED)
        ]
        landed = self._records(unanswered)
        caught_up: list[Delivered] = []
        for (job, cursor, tick, run_id, t), result in zip(wanted, results, strict=True):
            stored = landed.get(run_id)
            if isinstance(stored, MalformedRun):
                # Its document became no record since the tick read it: never run over it
                # (the function refuses to), reported instead, and delivered no more.
                tick.problems.append(self._malformed_run(job, t, stored))
                cursor.catch_ups.pop(run_id, None)
                cursor.watching.pop(run_id, None)
                continue
            status = stored.record.status if stored is not None else None
            if result.executed or status is RunStatus.COMPLETED:
                error = None if result.executed else (
                    f"no answer ({result.error or result.status}), but its record is completed")
                caught_up.append(Delivered(
                    job.name, t, CAUGHT_UP, "completed" if error else result.status, run_id,
                    error=error,
                ))
                if result.status == SKIPPED and status is not RunStatus.COMPLETED:
                    tick.skipped += 1  # overlap held it off for good: a skip is no recovery
                else:
                    tick.good[run_id] = t
                cursor.catch_ups.pop(run_id, None)
                cursor.watching.pop(run_id, None)
                continue
            if result.status in RAN_AND_FAILED or status is RunStatus.FAILED:
                # It ran late and the job raised: reported as the failed run it now is.
                why = result.error if result.status == JOB_FAILED else (
                    stored.record.error if stored is not None else result.error)
                error = f"caught up, then failed: {why}"
                tick.problems.append(Problem(job.name, t, FAILED, run_id, error=error))
                cursor.catch_ups.pop(run_id, None)
                cursor.watching.pop(run_id, None)
                continue
            # Not executed (yet): pending, watched from now on and judged at the next ticks
            # (queued: the queue delivers it; in_progress: it is being executed right now).
            cursor.watching[run_id] = t
            failed = not (result.queued or result.in_progress) and stored is None
            cursor.catch_ups[run_id] = PendingCatchUp(
                _deliveries(cursor, run_id) + 1, now,
                f"{result.error or result.status}" if failed else None,
            )
            if result.queued or failed:  # a queued one is logged as handed over
                caught_up.append(Delivered(
                    job.name, t, CAUGHT_UP, result.status, run_id, error=result.error))
        return caught_up

    def _judge_pending(
        self, job: WatchedJob, run_id: str, t: datetime, pending: PendingCatchUp,
        stored: StoredRun | None, cursor: Cursor, tick: JobTick, now: datetime,
    ) -> None:
        """A pending catch-up: left to the queue while it may still deliver it, delivered
        again while inside its bound, else reported `missed` with its last error."""
        if self._asynchronous and pending.error is None and (
                now - pending.delivered_at).total_seconds() < self._queue_span_seconds(job):
            return  # the queue may still be delivering it (none does after a failed hand-over)
        if self._catches_up(job, t, now):
            tick.to_catch_up[run_id] = t
            return
        if self._asynchronous and (now - t).total_seconds() < (
                job.catch_up_within_seconds + self._queue_span_seconds(job)):
            return  # a queued retry may still run it, until its bound after its ETA lapses
        cursor.watching.pop(run_id, None)
        cursor.catch_ups.pop(run_id, None)
        why = "its instance stopped mid-run (the lease lapsed)" if stored is not None else (
            pending.error or "no delivery reached the function")
        tick.problems.append(Problem(
            job.name, t, MISSED, run_id,
            error=f"delivered {pending.deliveries} time(s), never executed: {why}",
        ))

    def _catches_up(self, job: WatchedJob, t: datetime, now: datetime) -> bool:
        return (
            job.catch_up
            and self._deliverer is not None
            and self._settings.delivery_url(job) is not None
            and (now - t).total_seconds() <= job.catch_up_within_seconds
            # Only a run of the schedule the table holds: a run of a schedule edited away
            # is reported, never delivered under the new one (dedup/watchdog/schedule_edits.py).
            and job.is_scheduled(t)
        )


def _deliveries(cursor: Cursor, run_id: str) -> int:
    """How often a pending catch-up was delivered (0: never): the next delivery's number."""
    pending = cursor.catch_ups.get(run_id)
    return pending.deliveries if pending is not None else 0

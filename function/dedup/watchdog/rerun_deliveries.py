"""Re-runs and backfills: a tick delivers the pending re-run requests, checked again.

The pending requests `make rerun` wrote in `<collection>_reruns` (dedup/watchdog/reruns.py),
each checked again as `make rerun` checks it (a job it watches with `reruns`, one of its
scheduled times and not in the future, the next generation of the run, no other request of
the run pending: else `refused`, with why, and never delivered), delivered with
X-Dedup-Generation (dedup/watchdog/deliveries.py), marked done once the generation
completed (failed when the job raised, or when no delivery executed it within
RERUN_DELIVERY_WINDOW_SECONDS, with what is known of why); one for a run not completed
waits (`waiting`) until Scheduler can no longer retry that run (its retry window + grace),
so the two never overlap. Before them, each job's backfill (dedup/watchdog/backfills.py)
releases its next runs into the queue and delivers them the same way. A generation that
settles on a record showing a second execution is reported `ran_twice`, in its job's streak.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from dedup.store import MalformedRun, RunStatus, StoredRun
from dedup.watchdog.backfills import BackfillPacer
from dedup.watchdog.deliveries import JOB_FAILED, RERUN, Delivered, TickDeliveries
from dedup.watchdog.delivery import QUEUED, DeliveryResult
from dedup.watchdog.due import WatchedJob, rfc3339, verdict_due_at
from dedup.watchdog.ran_twice import RAN_TWICE, second_execution
from dedup.watchdog.reruns import (
    DONE,
    PENDING,
    REFUSED,
    MalformedRequest,
    RerunQueue,
    RerunRequest,
    retries_may_execute,
)
from dedup.watchdog.reruns import (
    FAILED as RERUN_FAILED,
)
from dedup.watchdog.verdicts import MALFORMED, Problem

# Pending re-run requests delivered per tick (the rest wait for the next tick).
MAX_RERUNS_PER_TICK = 50
# How long after it was asked a re-run may still be delivered and executed (X-Dedup-Deliver-By);
# a request that reached no function by then ends `failed`, with why.
RERUN_DELIVERY_WINDOW_SECONDS = 6 * 3600.0
# A re-run's tick status while its run is not completed and Scheduler may still retry it.
RERUN_WAITING = "waiting"


class RerunDeliveries(TickDeliveries):
    """The Watchdog's re-runs (dedup/watchdog/tick.py): its backfills' released runs, then
    the pending requests, each checked, delivered, and finished by its record."""

    # Set by Watchdog.__init__ (dedup/watchdog/tick.py).
    _reruns: RerunQueue | None
    _backfills: BackfillPacer | None
    _catching_up: dict[str, tuple[WatchedJob, datetime]]
    _finishing: list[tuple[RerunRequest, str, str]]
    _finish_after_commit: list[tuple[RerunRequest, str, str]]
    _generation_problems: list[Problem]

    def _advance_backfills(
        self, now: datetime, problems: list[Problem]
    ) -> tuple[list[Delivered], list[dict[str, Any]]]:
        """Release the next runs of each backfill (dedup/watchdog/backfills.py) into the re-run
        queue and deliver them as any pending re-run (the same checks and delivery)."""
        if self._backfills is None:
            return [], []
        delivered, progress = self._backfills.advance(
            [job.name for job in self._settings.jobs if job.reruns], now,
            lambda requests, of_runs: self._deliver_requests(requests, of_runs, now),
            self._asynchronous,
            lambda job, document, why: problems.append(
                Problem(job, None, MALFORMED, error=why, document=document)),
        )
        unique = {d.run_id: d for d in delivered}  # each round re-delivers what still waits
        return list(unique.values()), progress

    def _deliver_reruns(self, now: datetime, problems: list[Problem]) -> list[Delivered]:
        """Deliver the pending re-run requests that pass `make rerun`'s checks again; mark
        done the executed, refused (with why) the others, and refuse and report (in
        `problems`) the documents that are no request."""
        if self._reruns is None:
            return []
        found = self._reruns.pending(MAX_RERUNS_PER_TICK)
        for malformed in [m for m in found if isinstance(m, MalformedRequest)]:
            self._reruns.refuse(malformed, now)
            problems.append(Problem(
                malformed.job or "-", None, MALFORMED,
                error=f"re-run request refused, never delivered: {malformed.reason}",
                document=f"{self._settings.reruns_collection}/{malformed.request_id}",
            ))
        pending = [r for r in found if isinstance(r, RerunRequest)]
        of_runs = self._reruns.for_runs([r.base_run_id for r in pending]) if pending else {}
        return self._deliver_requests(pending, of_runs, now)

    def _deliver_requests(
        self, pending: Sequence[RerunRequest], of_runs: Mapping[str, Sequence[RerunRequest]],
        now: datetime,
    ) -> list[Delivered]:
        """Deliver these pending requests (every request of their runs: `of_runs`, by base
        run_id) that pass the checks; their status written in one batch at the end."""
        assert self._reruns is not None
        # Settled earlier this tick, finished once its problem's line is committed.
        held = {request.request_id for request, _, _ in self._finish_after_commit}
        pending = [r for r in pending if r.request_id not in held]
        jobs = {job.name: job for job in self._settings.jobs}
        delivered: list[Delivered] = []
        deliverable: list[tuple[RerunRequest, WatchedJob]] = []
        self._finishing = []
        for request in pending:
            job = jobs.get(request.job)
            why = self._rerun_refusal(request, job, of_runs.get(request.base_run_id, []), now)
            if why is not None or job is None:
                why = why or f"job {request.job!r} is not watched by this watchdog"
                self._finish(request, REFUSED, why)
                delivered.append(Delivered(
                    request.job, request.schedule_time, RERUN, REFUSED, request.request_id,
                    request.generation, why, request.requested_by,
                ))
            else:
                deliverable.append((request, job))
        deliverable = self._unsettled_reruns(deliverable, delivered, now)
        results = self._deliver_all([
            self._delivery(
                # Numbered per delivery, as catch-ups are: a queued task's name is refused
                # for about an hour after it ran (its 409s spent, a re-delivery would be
                # ALREADY_EXISTS, read as queued, and never reach the function).
                job, r.schedule_time, r.generation, number=r.deliveries,
                deliver_within_seconds=(_rerun_deliver_by(r) - now).total_seconds(),
            ) for r, job in deliverable
        ])
        noted: list[tuple[RerunRequest, str | None]] = []
        finished_direct: list[tuple[RerunRequest, WatchedJob]] = []
        for (request, job), result in zip(deliverable, results, strict=True):
            if result.executed:
                self._finish(request, DONE, result.status)
                finished_direct.append((request, job))
            elif result.status == JOB_FAILED:
                # The job ran and raised: the request is over (no retries every tick); a
                # new `make rerun` asks for the next generation. (Refused for good, 200
                # failed_permanent: finished by its record at the next tick, with its error.)
                self._finish(request, RERUN_FAILED, result.error or JOB_FAILED)
                finished_direct.append((request, job))
            else:
                noted.append((request, _delivery_error(result)))
            delivered.append(Delivered(
                request.job, request.schedule_time, RERUN, result.status, request.request_id,
                request.generation, result.error, request.requested_by,
            ))
        self._judge_generations(finished_direct, self._records(
            [(job, r.request_id) for r, job in finished_direct]) if finished_direct else {})
        reported = {p.run_id for p in self._generation_problems}
        # A request whose settling found a problem stays pending until the cursor carrying
        # the problem's line is written (dedup/watchdog/outbox.py): a tick that fails before
        # leaves it to be judged again, never finished with its problem untold.
        self._finish_after_commit += [f for f in self._finishing if f[0].request_id in reported]
        self._reruns.finish_all(
            [f for f in self._finishing if f[0].request_id not in reported], now)
        if noted:
            self._reruns.note_deliveries(noted, now)
        return delivered

    def _judge_generations(
        self, settled: Sequence[tuple[RerunRequest, WatchedJob]],
        records: Mapping[str, StoredRun | MalformedRun],
    ) -> None:
        """ran_twice for re-run and backfill generations that settled this pass: judged on
        the generation's record, once (the request is finished once the problem's line is
        committed); one whose document is no record is reported `malformed` instead."""
        for request, job in settled:
            stored = records.get(request.request_id)
            if isinstance(stored, MalformedRun):
                self._generation_problems.append(
                    self._malformed_run(job, request.schedule_time, stored))
                continue
            why = second_execution(stored)
            if why is not None and stored is not None:
                self._generation_problems.append(Problem(
                    job.name, request.schedule_time, RAN_TWICE, request.request_id,
                    stored.record.attempts, f"generation {request.generation}: {why}"))

    def _finish(self, request: RerunRequest, status: str, outcome: str) -> None:
        """Mark the request finished, with the others of this pass (one batched write)."""
        self._finishing.append((request, status, outcome))

    def _rerun_refusal(
        self, request: RerunRequest, job: WatchedJob | None,
        of_run: Sequence[RerunRequest], now: datetime,
    ) -> str | None:
        """Why a pending request is not delivered, checked as `make rerun` checks it before
        writing one (operator_tools/rerun.py); None if it passes."""
        if (request.project, request.location) != (self._project, self._location):
            return (f"it asks for project {request.project!r}, location {request.location!r}: "
                    f"this watchdog watches {self._project!r}, {self._location!r}")
        if job is None:
            return f"job {request.job!r} is not watched by this watchdog"
        if self._settings.delivery_url(job) is None:
            return f"this watchdog has no URL to deliver job {request.job!r} to"
        if not job.reruns:
            return (f"re-runs are not enabled for job {job.name!r} (watchdog.reruns in the "
                    "stack file, so that `make rerun` accepts them)")
        t = request.schedule_time
        if t > now:
            return f"{rfc3339(t)} is in the future: only a run that was due can be re-run"
        if not job.is_scheduled(t):
            return (f"{rfc3339(t)} is not a scheduled time of job {job.name} "
                    f"({job.schedule!r} in {job.time_zone})")
        others = [r for r in of_run if r.request_id != request.request_id]
        higher = max((r.generation for r in others), default=-1)
        if higher >= request.generation:
            return (f"generation {request.generation} is not the next of the run: it has a "
                    f"request for generation {higher} (`make rerun` numbers past them all)")
        waiting = [r.generation for r in others if r.status == PENDING]
        if waiting:
            return (f"another request of the run (generation {waiting[0]}) is pending: "
                    "`make rerun` asks for one at a time")
        return None

    def _unsettled_reruns(
        self,
        requests: Sequence[tuple[RerunRequest, WatchedJob]],
        delivered: list[Delivered],
        now: datetime,
    ) -> list[tuple[RerunRequest, WatchedJob]]:
        """The requests still to deliver. A generation whose record is completed is done
        without another delivery; one whose record is failed is failed once no queued
        attempt can follow (at once for direct deliveries); one still retried waits. So
        does a re-run (generation >= 1) of a run that is not completed while Scheduler may
        still retry that run (its retry window + grace): it could execute next to the
        retry. `make rerun` refuses those, but anyone may write to the requests."""
        assert self._reruns is not None
        base_ids = {r.request_id: replace(r.key, generation=0).run_id for r, _ in requests}
        records = self._records([
            (job, run_id) for request, job in requests
            for run_id in {request.request_id, base_ids[request.request_id]}
        ])
        unsettled: list[tuple[RerunRequest, WatchedJob]] = []
        settled: list[tuple[RerunRequest, WatchedJob]] = []
        for request, job in requests:
            stored = records.get(request.request_id)
            if isinstance(stored, MalformedRun):
                # The generation's document is no record: the function runs nothing over
                # it, so no delivery could execute it. Over, and said (reported malformed).
                why = f"{stored}: never delivered over it"
                self._finish(request, RERUN_FAILED, why)
                settled.append((request, job))
                delivered.append(Delivered(
                    request.job, request.schedule_time, RERUN, RERUN_FAILED,
                    request.request_id, request.generation, why, request.requested_by,
                ))
                continue
            status = stored.record.status if stored is not None else None
            # A run whose document is no record may run once it is deleted: as if absent.
            base = records.get(base_ids[request.request_id])
            run = base if isinstance(base, StoredRun) else None
            if stored is not None and status is RunStatus.COMPLETED:
                outcome = "completed"
                self._finish(request, DONE, outcome)
                settled.append((request, job))
            elif stored is not None and status is RunStatus.FAILED:
                # Final: the function answers a job failure 200 to the queue (no retry).
                outcome = JOB_FAILED
                self._finish(request, RERUN_FAILED, stored.record.error or outcome)
                settled.append((request, job))
            elif (waits_until := self._retried_until(job, request, run, now)) is not None:
                # Stays pending, not refused: delivered at the first tick past the window.
                delivered.append(Delivered(
                    request.job, request.schedule_time, RERUN, RERUN_WAITING,
                    request.request_id, request.generation,
                    "the run is not completed and " + (
                        "a pending catch-up may still run it"
                        if base_ids[request.request_id] in self._catching_up
                        else "Scheduler may retry it") + f" until {rfc3339(waits_until)}",
                    request.requested_by,
                ))
                continue
            elif stored is None and now > _rerun_deliver_by(request) + timedelta(
                    seconds=self._queue_span_seconds(job) if self._asynchronous else 0):
                # Not executed while it could be (deliveries carry the bound, so none runs
                # it later): over, and said, not pending for good.
                why = self._never_executed(request)
                self._finish(request, RERUN_FAILED, why)
                delivered.append(Delivered(
                    request.job, request.schedule_time, RERUN, RERUN_FAILED,
                    request.request_id, request.generation, why, request.requested_by,
                ))
                continue
            elif self._still_queued(job, request, now):
                # Its last task may still be dispatching (the queue's attempts and
                # backoffs): not handed over again meanwhile (one task at a time).
                delivered.append(Delivered(
                    request.job, request.schedule_time, RERUN, QUEUED, request.request_id,
                    request.generation, None, request.requested_by,
                ))
                continue
            else:
                unsettled.append((request, job))
                continue
            delivered.append(Delivered(
                request.job, request.schedule_time, RERUN, outcome, request.request_id,
                request.generation, stored.record.error, request.requested_by,
            ))
        self._judge_generations(settled, records)
        return unsettled

    def _still_queued(self, job: WatchedJob, request: RerunRequest, now: datetime) -> bool:
        """Whether the request's last delivery was handed to the queue (no error) so
        recently that the queue may still be dispatching it."""
        return self._asynchronous and request.delivered_at is not None and (
            request.last_error is None) and (
            now - request.delivered_at).total_seconds() < self._queue_span_seconds(job)

    def _never_executed(self, request: RerunRequest) -> str:
        """Why a request that ran nothing within its window is over, as far as known."""
        within = (f"not executed within {RERUN_DELIVERY_WINDOW_SECONDS / 3600:g} h of "
                  f"being asked, delivered {request.deliveries} time(s)")
        if request.last_error is not None and request.last_error.startswith(HELD_OFF):
            return f"{within}: {request.last_error}"
        if self._asynchronous and request.deliveries and request.last_error is None:
            return (f"{within} through the queue, none executed it: each task's attempts "
                    f"were {HELD_OFF} by the function (another run of the job held it: "
                    "overlap) or reached no function; the queue's task logs tell which")
        if request.last_error is not None:
            return f"{within}: no delivery executed it, the last: {request.last_error}"
        return f"{within}: no delivery reached the function"

    def _retried_until(
        self, job: WatchedJob, request: RerunRequest, run: StoredRun | None, now: datetime
    ) -> datetime | None:
        """Until when Scheduler may still retry the run a re-run (generation >= 1) asks
        for, if that is after `now`: a retry could still execute the run and its retry
        window + grace has not passed (generation 0 is the run itself, deduplicated with
        those retries)."""
        until = verdict_due_at(job, request.schedule_time, self._settings.grace_seconds)
        base = replace(request.key, generation=0).run_id
        if base in self._catching_up:  # a pending catch-up: until its bound has passed
            _, t = self._catching_up[base]
            until = max(until, t + timedelta(seconds=job.catch_up_within_seconds + (
                self._queue_span_seconds(job) if self._asynchronous else 0)))
        held = request.generation > 0 and retries_may_execute(run) and now < until
        return until if held else None


HELD_OFF = "held off (409)"


def _delivery_error(result: DeliveryResult) -> str | None:
    """What a delivery that executed nothing answered, kept on its request: None when it
    was handed to the queue (what came of it is read from the record)."""
    if result.queued:
        return None
    if result.in_progress or result.http_status == 409:
        return f"{HELD_OFF}: {result.error or 'another attempt or run of the job held it'}"
    return result.error or result.status


def _rerun_deliver_by(request: RerunRequest) -> datetime:
    return request.requested_at + timedelta(seconds=RERUN_DELIVERY_WINDOW_SECONDS)

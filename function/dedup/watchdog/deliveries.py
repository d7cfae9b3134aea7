"""What a tick delivers, and what its deliveries share.

Besides judging, the watchdog delivers runs, when infra gives it a target
(DEDUP_WATCH_TARGET_URL, DEDUP_WATCH_PROXY_URL for proxied jobs, DEDUP_WATCH_RUNTIME_URLS for
the jobs of runtimes: WatchSettings.delivery_url), through the one seam
of dedup/watchdog/delivery.py: as deployed, a Cloud Tasks task per run
(dedup/watchdog/cloud_tasks.py: Cloud Run admits a task on an internal-only URL, not a
direct call from a function), judged by the run's record at the next ticks; in the demo
and tests, a direct POST, judged by the answer:
- catch-up: a `missed` run of a job with `catchUp`, scheduled within its
  `catchUpWithinSeconds`, is delivered to the job's function with its original schedule
  time: `caught_up` once delivered, `failed` when it ran late and the job raised, pending
  while it has not executed (no record, or a lapsed lease): delivered again at later ticks
  while inside its bound, `missed` with its last error once the bound is over
  (dedup/watchdog/catch_up.py);
- re-runs: the pending requests `make rerun` wrote in `<collection>_reruns`, each checked
  again as `make rerun` checks it (a job it watches with `reruns`, one of its scheduled
  times and not in the future, the next generation of the run, no other request of the
  run pending: else `refused`, with why, and never delivered), delivered with
  X-Dedup-Generation, marked done once the generation completed (failed when the job
  raised, or when no delivery executed it within RERUN_DELIVERY_WINDOW_SECONDS, with what
  is known of why); one for a run not completed waits (`waiting`) until Scheduler can no
  longer retry that run (its retry window + grace), so the two never overlap. Each
  delivery of a request is numbered (a queued task of its own, `<run_id>-<n>-<mac>`), and
  none is handed over while the last may still be dispatching. A generation that settles on a
  record showing a second execution is reported `ran_twice`, in its job's streak
  (dedup/watchdog/rerun_deliveries.py);
- backfills (`make backfill`, dedup/watchdog/backfills.py): before the pending re-runs, each job's
  backfill releases its next runs into the re-run queue, at most
  DEDUP_WATCH_BACKFILL_RUNS_PER_TICK a tick and DEDUP_WATCH_BACKFILL_IN_FLIGHT at once,
  delivered and checked as re-runs are, by the backfill only (the pending pass leaves
  requests a backfill released to it).
The dedup protocol makes each run (each generation) execute at most once however often it
is delivered, by this watchdog, a concurrent tick, or Scheduler's own late retry.

Here: `Delivered` (one delivery of a tick, and what it answered) and `TickDeliveries`, the
part of the Watchdog (dedup/watchdog/tick.py) that builds a run's delivery, hands a tick's
deliveries over side by side and reads back their records: catch-up
(dedup/watchdog/catch_up.py) and re-runs and backfills (dedup/watchdog/rerun_deliveries.py)
deliver through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dedup.keys import RunKey
from dedup.store import MalformedRun, StoredRun
from dedup.watchdog.cursors import WatchStore
from dedup.watchdog.delivery import DeliversRuns, DeliveryResult, RunDelivery
from dedup.watchdog.due import WatchedJob, rfc3339
from dedup.watchdog.settings import WatchSettings
from dedup.watchdog.verdicts import MALFORMED, Problem

# Deliveries of one tick run side by side (each waits for its job to run).
MAX_PARALLEL_DELIVERIES = 8
# The deliveries queue's longest backoff between attempts (infra declares the queue's
# retryConfig.maxBackoff from it): a failure older than this plus an attempt got no retry.
QUEUE_MAX_BACKOFF_SECONDS = 300.0
# The rest of the queue's retryConfig (infra/watchdog.py DELIVERY_*; a test checks).
QUEUE_MAX_ATTEMPTS = 5
QUEUE_MIN_BACKOFF_SECONDS = 10.0
QUEUE_MAX_DOUBLINGS = 5
# Not a problem kind (no `kind` field, so no problem alert): a late run, delivered.
CAUGHT_UP = "caught_up"
CAUGHT_UP_SEVERITY = "WARNING"
RERUN = "rerun"
JOB_FAILED = "failed"  # the function's outcome when the job raised (dedup.outcomes.Outcome)
# ... and when it refused for good (a proxied start the target refused), answered 200.
JOB_FAILED_PERMANENT = "failed_permanent"
RAN_AND_FAILED = frozenset({JOB_FAILED, JOB_FAILED_PERMANENT})


@dataclass(frozen=True)
class Delivered:
    """A run the watchdog delivered this tick (catch-up or re-run), and the answer."""

    job: str
    schedule_time: datetime
    kind: str  # CAUGHT_UP or RERUN
    status: str  # the function's outcome (completed, duplicate, in_progress, ...) or error
    run_id: str
    generation: int = 0
    error: str | None = None
    requested_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "job": self.job, "schedule_time": rfc3339(self.schedule_time), "status": self.status,
        }
        if self.kind == RERUN:
            body["generation"] = self.generation
            body["requested_by"] = self.requested_by
        if self.error is not None:
            body["error"] = self.error
        return body


class TickDeliveries:
    """The Watchdog's deliveries (dedup/watchdog/tick.py): each run delivered as its job's
    Scheduler job sends it, a tick's deliveries side by side, and the records that say what
    came of them."""

    # Set by Watchdog.__init__ (dedup/watchdog/tick.py).
    _settings: WatchSettings
    _store: WatchStore
    _deliverer: DeliversRuns | None

    def _delivery(
        self, job: WatchedJob, t: datetime, generation: int = 0, number: int = 0,
        deliver_within_seconds: float | None = None,
    ) -> RunDelivery:
        url = self._settings.delivery_url(job)
        assert url is not None  # callers deliver only jobs that have one
        return RunDelivery(
            url, job.name, t, dict(job.headers), job.body, generation,
            min(job.attempt_deadline_seconds, self._settings.delivery_timeout_seconds),
            run_id=RunKey(
                self._project, self._location, job.name, t, generation=generation
            ).run_id,
            attempt_deadline_seconds=job.attempt_deadline_seconds,
            number=number,
            deliver_within_seconds=deliver_within_seconds,
        )

    @property
    def _asynchronous(self) -> bool:
        """Deliveries are handed to a queue (which retries them): outcomes are read later."""
        return self._deliverer is not None and self._deliverer.asynchronous

    def _deliver_all(self, deliveries: Sequence[RunDelivery]) -> list[DeliveryResult]:
        deliverer = self._deliverer
        if deliverer is None or not deliveries:
            return []
        workers = min(MAX_PARALLEL_DELIVERIES, len(deliveries))
        with ThreadPoolExecutor(workers, thread_name_prefix="watchdog-delivery") as pool:
            return list(pool.map(deliverer.deliver, deliveries))

    def _records(
        self, runs: Sequence[tuple[WatchedJob, str]]
    ) -> dict[str, StoredRun | MalformedRun]:
        """The records of these runs, read in each job's database (a document that is no
        record: its MalformedRun)."""
        by_database: dict[str | None, list[str]] = {}
        for job, run_id in runs:
            by_database.setdefault(job.database, []).append(run_id)
        found: dict[str, StoredRun | MalformedRun] = {}
        for database, run_ids in by_database.items():
            found.update(self._store.get_many(run_ids, database))
        return found

    def _malformed_run(self, job: WatchedJob, t: datetime, found: MalformedRun) -> Problem:
        """A run whose document is no run record, reported `malformed` (as a cursor the
        watchdog cannot read): not judged, never caught up, and no run of the job's streak.
        Job code can write any document of its own records database, so the document
        costs its own run a verdict, and nothing more."""
        database = job.database or self._settings.store.database
        return Problem(
            job.name, t, MALFORMED, found.run_id,
            error=f"run record refused, the run is not judged (database {database}): "
            f"{found.reason}",
            document=found.document,
        )

    def _queue_span_seconds(self, job: WatchedJob) -> float:
        """The longest a queued delivery can take, all its attempts and backoffs: until
        then a pending catch-up may still be executed by the queue."""
        backoffs = sum(
            min(QUEUE_MAX_BACKOFF_SECONDS,
                QUEUE_MIN_BACKOFF_SECONDS * float(2 ** min(i, QUEUE_MAX_DOUBLINGS)))
            for i in range(QUEUE_MAX_ATTEMPTS - 1)
        )
        attempts = QUEUE_MAX_ATTEMPTS * float(job.attempt_deadline_seconds)
        return attempts + backoffs + float(self._settings.grace_seconds)

    @property
    def _project(self) -> str:
        return self._settings.store.project

    @property
    def _location(self) -> str:
        return self._settings.store.location

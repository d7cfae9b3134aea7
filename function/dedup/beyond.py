"""Runs beyond the schedule: the executions no business run explains, noted where the
watchdog reads them.

The watchdog finds a job's runs by ID: it derives the run IDs of the job's business runs
(dedup.business_runs) and reads those, so a run keyed by any other schedule time (a second
Scheduler job or another caller sending the job's headers at a time of its own) or a forced
run kept apart is a record it never reads (the records are read by ID only; their
schedule_time is not even indexed). So the function notes such a run, once it has keyed it,
in a ledger beside the records: one document per job and UTC day (of its arrival) in
`<collection>_beyond`, a map from run ID to what the run was. The note is a merge write,
the same for every delivery of the run (a retry, a duplicate rewrites it unchanged), and
costs nothing on a business run's delivery: only an unscheduled or forced run writes it.

What is noted (`why`):
- `unscheduled`: the delivery carries the job's schedule (X-Dedup-Schedule) and its schedule
  time is none of that schedule's business runs; not a re-run's generation (`make rerun`
  delivers business runs only) and not a forced run;
- `forced`: a forced run ("Run now"), kept apart or replacing the scheduled run.

The watchdog reads the ledger of a job that asks it to (`runsBeyondSchedule`), judges each
note against the job's schedule as its table holds it, and reports `unexplained_run` and
`too_many_forced_runs` (dedup/watchdog/beyond.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final, Protocol

from google.cloud import firestore

from dedup.business_runs import BusinessRun, BusinessSchedule
from dedup.keys import RunKey

COLLECTION_SUFFIX: Final = "_beyond"
UNSCHEDULED: Final = "unscheduled"
FORCED: Final = "forced"
# The watchdog's problem kinds for them (dedup/watchdog/beyond.py).
UNEXPLAINED_RUN: Final = "unexplained_run"
TOO_MANY_FORCED_RUNS: Final = "too_many_forced_runs"
BEYOND_PROBLEMS: Final = (UNEXPLAINED_RUN, TOO_MANY_FORCED_RUNS)
# A job's runsBeyondSchedule: not judged (its ledgers not read), problem lines only, or
# problem lines counted in an incident streak that pages.
BEYOND_OFF: Final = "off"
BEYOND_LOG: Final = "log"
BEYOND_PAGE: Final = "page"
BEYOND_SETTINGS: Final = (BEYOND_OFF, BEYOND_LOG, BEYOND_PAGE)


def ledger_id(project: str, location: str, job: str, day: date) -> str:
    """The ledger document of one job and UTC day, keyed as run IDs are (dedup.keys)."""
    canonical = json.dumps([project, location, job, "beyond", day.isoformat()],
                           separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def is_business_run(business: BusinessSchedule, instant: datetime) -> bool:
    """Whether a delivery for `instant` is one of the schedule's business runs (any
    instant that names one: a repeated local time's second reading too)."""
    instant = instant.astimezone(UTC)
    named = business.run_named(instant)
    if isinstance(named, BusinessRun):
        return True
    if named is not None:
        return False  # a time the zone skipped: answered before any run
    return any(instant in run.deliveries
               for run in business.runs(instant - timedelta(seconds=1), instant))


def why_beyond(key: RunKey, business: BusinessSchedule | None) -> str | None:
    """What a keyed delivery is beyond the schedule (UNSCHEDULED, FORCED), or None: a
    business run, a re-run's generation, or a delivery that carries no schedule to judge
    it by (a manual POST without X-Dedup-Schedule)."""
    if key.forced or key.early:
        return FORCED
    if key.generation or business is None:
        return None
    return None if is_business_run(business, key.schedule_time) else UNSCHEDULED


@dataclass(frozen=True)
class BeyondNote:
    """One run in a ledger: its schedule time, why it is beyond the schedule, when it came."""

    run_id: str
    schedule_time: datetime
    why: str
    arrived_at: datetime

    def to_document(self) -> dict[str, Any]:
        return {"schedule_time": self.schedule_time, "why": self.why,
                "arrived_at": self.arrived_at}

    @classmethod
    def from_document(cls, run_id: str, data: Any) -> BeyondNote | None:
        """The note a ledger entry holds; None if it is none (job code can write the
        records database: such an entry is not trusted, and left out)."""
        if not isinstance(data, Mapping):
            return None
        schedule_time, why, arrived = (data.get(k) for k in ("schedule_time", "why",
                                                            "arrived_at"))
        if why not in (UNSCHEDULED, FORCED) or not (
                isinstance(schedule_time, datetime) and schedule_time.tzinfo
                and isinstance(arrived, datetime) and arrived.tzinfo):
            return None
        return cls(run_id, schedule_time, why, arrived)


class NotesRuns(Protocol):
    def note(self, key: RunKey, why: str, now: datetime) -> None:
        """Note the run in its job's ledger of the day of `now`; StoreUnavailable if not."""
        ...


class FirestoreBeyondLedger:
    """The ledgers in `<collection>_beyond` of the records' database, with the run store's
    timeout, retries and error mapping; kept as long as the records (`expire_at`)."""

    def __init__(self, client: firestore.Client, collection: str,
                 call: Callable[[Callable[[], Any]], Any], retry: Any, timeout: float,
                 retention_seconds: float) -> None:
        self._collection = client.collection(collection)
        self._call = call
        self._retry = retry
        self._timeout = timeout
        self._retention = timedelta(seconds=retention_seconds)

    def note(self, key: RunKey, why: str, now: datetime) -> None:
        day = now.astimezone(UTC).date()
        note = BeyondNote(key.run_id, key.schedule_time, why, now)
        ref = self._collection.document(ledger_id(key.project, key.location, key.job_id, day))
        document = {"job": key.job_id, "day": day.isoformat(),
                    "expire_at": now + self._retention,
                    "runs": {key.run_id: note.to_document()}}
        # A retry's note rewrites its first arrival: the run is noted once, whenever it came.
        self._call(lambda: ref.set(document, merge=True, retry=self._retry,
                                   timeout=self._timeout))

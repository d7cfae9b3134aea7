"""What the emulator sends and records: a Delivery per HTTP request (an attempt, or its
duplicate), a RunResult per run, the replay's EmulatorResult (with its DstNotes) and its
Progress; why a run's deliveries stopped; the schedule time as Scheduler spells it
(format_schedule_time); and the store-fault hook's shape (StoreFaultHook)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal
from zoneinfo import ZoneInfo

from infra.scheduler_rules import GAP, DstHazard
from scheduler_emulator.stack import Job

# The stop reason of a run the `missed` fault struck.
NEVER_DELIVERED = "never delivered (missed)"
# The stop reason of a tick that came while the job was still being retried (retries not
# stopped at the next run): Scheduler skips it.
SKIPPED = "skipped: the job was still being retried at this time"
DEADLINE_EXCEEDED = "deadline exceeded"
RunKind = Literal["scheduled", "manual", "manual-bare"]


def format_schedule_time(when: datetime, style: str = "utc", time_zone: str | None = None) -> str:
    """RFC 3339 to the second: in UTC with a Z, or (style "offset") in `time_zone` (else
    the instant's own zone) with its UTC offset, e.g. 2026-10-16T03:00:00+02:00."""
    if style == "offset":
        local = when.astimezone(ZoneInfo(time_zone)) if time_zone else when
        return local.replace(microsecond=0).isoformat()
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Delivery:
    """One HTTP request sent to the target (an attempt, or the duplicate of one)."""

    job: str
    tick: int
    schedule_time: datetime | None  # instant in the header; None: no header was sent
    kind: RunKind
    worker: int
    attempt: int  # 1-based, per worker
    copy: int  # 0: the attempt itself; 1: a duplicate delivery of it
    sent_at: datetime  # simulated time
    faults: tuple[str, ...] = ()
    status: int | None = None  # reply within the deadline
    error: str | None = None  # "deadline exceeded" or the connection error
    ack_lost: bool = False  # a 2xx that the lost-ack fault discarded
    reply_body: str = ""  # the reply's body (first 500 characters)
    real_seconds: float = 0.0  # from sending the request to its reply (or error)
    sent_real: float | None = None  # time.monotonic() when the request was sent
    redirects: tuple[str, ...] = ()  # the Location URLs followed, in order

    @property
    def id(self) -> str:
        """Unique per delivery; sent as X-Emulator-Delivery when tracing deliveries."""
        when = format_schedule_time(self.schedule_time) if self.schedule_time else "none"
        return (
            f"{self.job}/{self.tick}/{self.kind}/{when}/w{self.worker}/a{self.attempt}/c{self.copy}"
        )

    @property
    def acknowledged(self) -> bool:
        """Did Scheduler see a 2xx for this attempt?"""
        return (
            self.copy == 0
            and self.status is not None
            and 200 <= self.status < 300
            and not self.ack_lost
        )

    @property
    def reply(self) -> str:
        """Short label: "200", "409", "500", "timeout", "dropped", "200 lost"."""
        if self.status is not None:
            return f"{self.status} lost" if self.ack_lost else str(self.status)
        if self.error == DEADLINE_EXCEEDED:
            return "timeout"
        if self.error is None:
            return "pending"
        return "dropped"


# Called with a store fault's name (faults.STORE_FAULTS) and the attempt it strikes, just
# before that attempt is sent; it may block until the store can take the fault.
StoreFaultHook = Callable[[str, Delivery], None]


@dataclass
class RunResult:
    """All deliveries of one run (a scheduled tick, or a forced manual run)."""

    job: str
    tick: int
    schedule_time: datetime | None
    kind: RunKind
    workers: int
    deliveries: list[Delivery] = field(default_factory=list)
    acknowledged: bool = False
    stop_reason: str = ""
    faults: tuple[str, ...] = ()


@dataclass
class Progress:
    runs_done: int
    runs_total: int
    deliveries: int
    acknowledged: int
    exhausted: int


@dataclass(frozen=True)
class DstNote:
    """A replayed tick at a local time a DST change makes ambiguous (infra.scheduler_rules
    .dst_hazards): the emulator places it as croniter does, but what Cloud Scheduler does
    then is not documented (the run may be moved, skipped or run twice)."""

    job: str
    time_zone: str
    hazard: DstHazard

    @property
    def text(self) -> str:
        h = self.hazard
        what = "does not exist" if h.kind == GAP else "occurs twice"
        return (
            f"DST: job {self.job}: {h.date.isoformat()} {h.local_time.strftime('%H:%M')} "
            f"{what} in {self.time_zone} ({h.kind}); replayed where croniter puts it (or "
            "once, with dst_fires=once); the function runs it as the job's dstRepeated and "
            "dstSkipped say"
        )

    def to_json(self) -> dict[str, str]:
        h = self.hazard
        return {
            "job": self.job,
            "time_zone": self.time_zone,
            "date": h.date.isoformat(),
            "local_time": h.local_time.strftime("%H:%M"),
            "kind": h.kind,
        }


@dataclass
class EmulatorResult:
    runs: list[RunResult]
    target_url: str
    ticks: int
    started: datetime
    real_seconds: float
    stopped_early: bool = False
    # Replayed ticks at non-existent or repeated local times, per job, in order.
    dst: list[DstNote] = field(default_factory=list)
    # The replayed jobs: what their schedule times mean (Job.business), for the report.
    jobs: Sequence[Job] = ()

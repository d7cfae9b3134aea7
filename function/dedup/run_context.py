"""What a job's logic is told about the run it executes (RunContext), and what it may
raise to say that no retry could succeed (PermanentFailure). Job code imports them from
`dedup` or `dedup.protocol`; the protocol (dedup/protocol.py) builds the context."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class RunContext:
    """What a job's logic is told about the run it executes."""

    run_id: str
    job_name: str
    schedule_time: datetime  # aware, UTC
    attempt_id: str
    attempt: int
    project: str
    location: str
    body: bytes
    headers: Mapping[str, str]  # lower-cased names
    # Set when this attempt may no longer hold its claim (no renewal landed for most of a
    # lease, or another attempt took over): a long job checks it before each
    # state-changing step and stops (raises) once it is set.
    claim_lost: threading.Event = field(default_factory=threading.Event)
    deduplicated: bool = True
    # A forced run ("Run now" in the console, `gcloud scheduler jobs run`): deduplicated
    # under its own run_id; the scheduled run of `schedule_time` still runs at its time.
    forced: bool = False
    # A re-run (`make rerun`): generation g > 0 is the g-th extra execution of this run.
    generation: int = 0


Job = Callable[[RunContext], Any]


class PermanentFailure(Exception):
    """Raised by a job that did nothing and cannot succeed on a retry (the proxy: the
    downstream refused the start with a 403 or 404). The run is recorded `failed` and
    `permanent` with the message (one line) and `result` (small JSON, replayed to later
    deliveries), and answered 200 (Outcome.FAILED_PERMANENT) so Scheduler stops retrying."""

    def __init__(self, message: str, result: Any = None) -> None:
        super().__init__(message)
        self.result = result

"""A job that records when each execution started and ended, for the overlap tests and
the demo: two executions of one job overlap when one started before the other ended.

Steered by the request body (JSON): {"sleep": seconds}. It checks `claim_lost` every
tenth of a second, as a cooperative long job does, and stops (raises) once it is set, so
`overlap: replace` can stop it. Each execution appends a `start` line and, if it got that
far, an `end` line (`stopped: true` when it stopped early) to the ledger file named by
TEST_LEDGER; a killed instance leaves a start without an end.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

from dedup import RunContext

LEDGER_ENV = "TEST_LEDGER"
CHECK_EVERY_SECONDS = 0.1


def _append(path: str, entry: dict[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())  # one short write: atomic
    finally:
        os.close(fd)


def run(context: RunContext) -> Any:
    spec = json.loads(context.body) if context.body else {}
    ledger = os.environ[LEDGER_ENV]
    line = {"run_id": context.run_id, "attempt_id": context.attempt_id,
            "schedule_time": context.schedule_time.isoformat(), "generation": context.generation}
    _append(ledger, {**line, "event": "start", "at": time.time()})
    until = time.monotonic() + float(spec.get("sleep", 0))
    while time.monotonic() < until:
        if context.claim_lost.is_set():
            _append(ledger, {**line, "event": "end", "at": time.time(), "stopped": True})
            raise RuntimeError("stopped: the claim was lost (replaced by a newer run)")
        time.sleep(CHECK_EVERY_SECONDS)
    _append(ledger, {**line, "event": "end", "at": time.time(), "stopped": False})
    return {"slept": spec.get("sleep", 0)}


@dataclass(frozen=True)
class Execution:
    run_id: str
    schedule_time: str
    started: float
    ended: float | None  # None: the instance died while it ran
    stopped: bool = False


def executions(path: str) -> list[Execution]:
    """Every execution in the ledger, in the order they started."""
    if not os.path.exists(path):
        return []
    with open(path) as ledger:
        lines = [json.loads(line) for line in ledger if line.strip()]
    ends = {e["attempt_id"]: e for e in lines if e["event"] == "end"}
    found = []
    for start in (e for e in lines if e["event"] == "start"):
        end = ends.get(start["attempt_id"])
        found.append(Execution(start["run_id"], start["schedule_time"], start["at"],
                               end["at"] if end else None, bool(end and end["stopped"])))
    return sorted(found, key=lambda e: e.started)


def overlapping(found: list[Execution], killed_at: float | None = None
                ) -> list[tuple[Execution, Execution]]:
    """Pairs of executions of which one started before the other ended. An execution
    without an end (its instance died) ran until `killed_at`, or for ever."""
    pairs: list[tuple[Execution, Execution]] = []
    for i, first in enumerate(found):
        ended = first.ended if first.ended is not None else (
            killed_at if killed_at is not None else float("inf"))
        pairs.extend((first, second) for second in found[i + 1:] if second.started < ended)
    return pairs

"""What a tick must announce (problem and incident lines), kept durable until announced.

A tick's announcements are written into each job's cursor (`Cursor.outbox`) in the same
commit that moves the cursor past the runs they are about; only after that commit landed
are they logged, and then cleared by a second guarded write (their acknowledgement). So an
announcement is never made from state that may not stay (an incident opened by a tick
whose cursor write then failed: paged, in no cursor, never resolved), and state that
suppresses a verdict never becomes durable without its announcement (a cursor moved past a
missed run whose line was then never logged). A tick that fails between the commit and the
acknowledgement leaves the lines in the cursor: the next tick carries them into its own
commit and logs them then (a line twice, never zero times).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dedup.watchdog.due import rfc3339
from dedup.watchdog.incidents import OPENED, Transition
from dedup.watchdog.verdicts import PROBLEM_SEVERITY, Problem

# One log line as the watchdog emits it: JSON values only (stored in a cursor as they are).
Line = dict[str, Any]
# Problem lines kept per cursor (about 400 bytes each): a job every minute judged after two
# days without ticks has 2,880 missed runs, which would outgrow the cursor document (1 MiB)
# and fail every tick's commit. Those beyond are folded into one line that counts them.
MAX_PROBLEM_LINES = 300
FOLDED = "problems_folded"


def problem_line(problem: Problem) -> Line:
    """The log line of one problem: its severity and `kind` are what the problem metric
    and the alert policies count (infra/monitoring.py)."""
    when = "-" if problem.schedule_time is None else rfc3339(problem.schedule_time)
    return {
        "severity": PROBLEM_SEVERITY[problem.kind],
        "message": f"watchdog {problem.kind}: {problem.job} @ {when}",
        "component": "watchdog",
        **problem.to_json(),
    }


def transition_line(transition: Transition) -> Line:
    """One `incident_opened` (ERROR) or `incident_resolved` (NOTICE) line: what the
    incident alert policies count (infra/monitoring.py)."""
    return {
        "severity": "ERROR" if transition.event == OPENED else "NOTICE",
        "message": transition.message,
        "component": "watchdog",
        **transition.to_json(),
    }


def folded(lines: Sequence[Line], job: str) -> list[Line]:
    """`lines` with the problem lines beyond MAX_PROBLEM_LINES folded into one line that
    counts them by kind (incident lines are always kept: they page)."""
    problems = [line for line in lines if "kind" in line]
    if len(problems) <= MAX_PROBLEM_LINES:
        return list(lines)
    kept = {id(line) for line in problems[:MAX_PROBLEM_LINES]}
    extra: dict[str, int] = {}
    for line in problems[MAX_PROBLEM_LINES:]:
        extra[str(line["kind"])] = extra.get(str(line["kind"]), 0) + 1
    total = sum(extra.values())
    return [line for line in lines if "kind" not in line or id(line) in kept] + [{
        "severity": "ERROR",
        "message": f"watchdog: {total} more problems of {job} not listed one by one "
                   f"(the first {MAX_PROBLEM_LINES} are): "
                   + ", ".join(f"{n} {kind}" for kind, n in sorted(extra.items())),
        "component": "watchdog",
        # `outcome`, not `kind`: the problem metric counts lines with a `kind`.
        "outcome": FOLDED,
        "job": job,
        "folded": extra,
    }]


def lines_from_document(value: Any, key: str = "outbox") -> list[Line]:
    """A cursor's stored outbox (or its `held` lines); ValueError naming what is wrong if
    it is none (then the cursor is refused as malformed, as any of its fields would be)."""
    if value is None:
        return []
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise ValueError(f"{key} is {type(value).__name__}, not a list")
    lines: list[Line] = []
    for i, line in enumerate(value):
        if not isinstance(line, Mapping) or not isinstance(line.get("message"), str):
            raise ValueError(f"{key}[{i}] is no log line (a map with a message)")
        lines.append(dict(line))
    return lines

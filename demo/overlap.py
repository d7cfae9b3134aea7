"""`make demo`'s overlap paths: a job longer than its period, under `overlap: forbid` and
`overlap: wait`, against the same served function after the other paths, in real time.

Runs are due every PERIOD_SECONDS and each takes JOB_SECONDS (longer), so every run but
the first is due while the one before still runs. Each run is delivered as Scheduler does
(the job's invoker token, X-Dedup-Overlap), retried on any non-2xx until a 200 within a
retry window, then delivered once more (a lost 200). The ledger (demo/job_wrapper.py)
says what really ran, when: the verdict is exactly once per run that ran, no two runs of
the job at once, and, under `forbid`, every other run `skipped` (under `wait`, every run
executed, one after the other).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import requests

from dedup.keys import RunKey
from demo.ledger import read_ledger
from local_stack.deliveries import bearer
from scheduler_emulator import Stack

POLICIES = ("forbid", "wait")
PERIOD_SECONDS = 1.0
JOB_SECONDS = 1.6
RUNS = 3
RETRY_WINDOW_SECONDS = 30.0
RETRY_PAUSE_SECONDS = 0.25


@dataclass(frozen=True)
class OverlapResult:
    policy: str
    job_id: str
    finals: dict[str, str]  # run_id -> the outcome of its delivery that got a 200
    extras: dict[str, str]  # run_id -> the outcome of one more delivery (a lost 200)
    commits: Counter[str]  # run_id -> executions that committed
    overlaps: int  # pairs of executions of the job that ran at the same time
    waited: int  # runs answered 409 at least once before they ran

    @property
    def skipped(self) -> int:
        return sum(outcome == "skipped" for outcome in self.finals.values())

    @property
    def executed(self) -> int:
        return sum(1 for n in self.commits.values() if n)

    @property
    def ok(self) -> bool:
        once = all(n == 1 for n in self.commits.values())
        answered = all(o in ("completed", "skipped") for o in self.finals.values())
        ran = {r for r, o in self.finals.items() if o == "completed"} == set(self.commits)
        again = all(self.extras[r] == ("skipped" if o == "skipped" else "duplicate")
                    for r, o in self.finals.items())
        if self.policy == "wait":
            shape = self.executed == RUNS and self.skipped == 0
        else:
            shape = self.skipped >= 1 and self.executed + self.skipped == RUNS
        return once and answered and ran and again and self.overlaps == 0 and shape

    @property
    def text(self) -> str:
        how = (f"{self.skipped} skipped while another ran" if self.policy == "forbid"
               else f"{self.waited} waited (409) for the one before")
        return (f"overlap {self.policy}, a {JOB_SECONDS:g} s job due every "
                f"{PERIOD_SECONDS:g} s: {self.executed} of {RUNS} runs executed once, {how}, "
                f"{self.overlaps} ran at once: {'ok' if self.ok else 'FAIL'}")

    def to_json(self) -> dict[str, Any]:
        return {"policy": self.policy, "runs": RUNS, "executed": self.executed,
                "skipped": self.skipped, "waited": self.waited, "overlaps": self.overlaps,
                "ok": self.ok}


def _deliver(url: str, headers: dict[str, str]) -> tuple[int, str]:
    try:
        reply = requests.post(url, headers=headers, data="{}", timeout=60)
        return reply.status_code, str(reply.json().get("outcome", "?"))
    except (requests.RequestException, ValueError) as exc:
        return 0, type(exc).__name__


def _run(url: str, headers: dict[str, str]) -> list[tuple[int, str]]:
    """Scheduler's side of one run: retried until a 200, then delivered once more."""
    replies: list[tuple[int, str]] = []
    give_up = time.monotonic() + RETRY_WINDOW_SECONDS
    while time.monotonic() < give_up:
        replies.append(_deliver(url, headers))
        if replies[-1][0] == 200:
            replies.append(_deliver(url, headers))
            break
        time.sleep(RETRY_PAUSE_SECONDS)
    return replies


def _overlapping(ledger: Path, job_id: str) -> tuple[Counter[str], int]:
    """Commits per run_id of the job, and how many pairs of its executions overlapped."""
    entries = [e for e in read_ledger(ledger) if e.get("job") == job_id]
    starts = {e["attempt_id"]: e for e in entries if e["event"] == "start"}
    ends = {e["attempt_id"]: e for e in entries if e["event"] == "end"}
    spans = sorted((s["at"], ends[a]["at"] if a in ends else float("inf"))
                   for a, s in starts.items())
    overlaps = sum(1 for i, (_, end) in enumerate(spans) for start, _ in spans[i + 1:]
                   if start < end)
    commits = Counter(str(e["run_id"]) for e in entries if e["event"] == "commit")
    return commits, overlaps


def run_overlap(url: str, stack: Stack, ledger: Path, policy: str,
                nonce: str | None = None) -> OverlapResult:
    job_id = f"{stack.name_prefix}-overlap-{policy}-{nonce or uuid.uuid4().hex[:6]}"
    # Past instants (not forced runs), keyed by their own instant (no X-Dedup-Schedule).
    first = (datetime.now(UTC) - timedelta(hours=1)).replace(second=0, microsecond=0)
    times = [first + timedelta(minutes=i) for i in range(RUNS)]

    def due(i: int) -> list[tuple[int, str]]:
        time.sleep(i * PERIOD_SECONDS)
        return _run(url, {
            "Content-Type": "application/json",
            "X-CloudScheduler": "true",
            "X-CloudScheduler-JobName": job_id,
            "X-CloudScheduler-ScheduleTime": times[i].strftime("%Y-%m-%dT%H:%M:%SZ"),
            "X-Dedup-Project": stack.project,
            "X-Dedup-Location": stack.region,
            "X-Dedup-Overlap": policy,
            "Authorization": bearer(stack.invoker_email),
            "X-Emulator-Fault": f"slow={JOB_SECONDS:g}",  # the job outlives its period
        })

    with ThreadPoolExecutor(max_workers=RUNS) as pool:
        logs = list(pool.map(due, range(RUNS)))
    commits, overlaps = _overlapping(ledger, job_id)
    run_ids = [RunKey(stack.project, stack.region, job_id, t).run_id for t in times]
    # A run's outcome is its last reply before the extra delivery (after a lost 200).
    finals = {run_id: _before_the_extra(log)[1] for run_id, log in zip(run_ids, logs,
                                                                         strict=True)}
    extras = {run_id: log[-1][1] for run_id, log in zip(run_ids, logs, strict=True)}
    waited = sum(1 for log in logs if any(status == 409 for status, _ in log)
                 and _before_the_extra(log)[1] == "completed")
    return OverlapResult(policy, job_id, finals, extras, commits, overlaps, waited)


def _before_the_extra(log: list[tuple[int, str]]) -> tuple[int, str]:
    return log[-2] if len(log) > 1 and log[-2][0] == 200 else log[-1]


def run_overlap_paths(url: str, stack: Stack, ledger: Path) -> list[OverlapResult]:
    """Both policies, one after the other, each with a job of its own."""
    return [run_overlap(url, stack, ledger, policy) for policy in POLICIES]

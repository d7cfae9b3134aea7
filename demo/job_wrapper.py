"""The demo's job wrapper: runs each job's own logic and counts every real execution.

(Not to be confused with local_stack/steered_job.py, the tests' and benchmark's job whose
behaviour the request body steers.) The function under test is the kit's real one; only
its job logic is this wrapper (DEDUP_JOB=demo.job_wrapper:run). It runs the job logic the
stack configures for the job (DEMO_JOB_LOGIC, JSON {"<deployed job ID>": "module:function"},
keyed by the job ID the function receives, RunContext.job_name; "*": any other job), and
appends JSON lines to
the file named by DEMO_LEDGER:

- {"event": "start", ...} when the job logic starts (also for attempts killed mid-job),
- {"event": "commit", ...} when it finishes: the job's side effect, counted as one
  execution;
- {"event": "end", ...} when the wrapper returns or raises (not for a killed attempt): the
  demo waits for every start to end before it counts, since Scheduler hangs up at the
  attempt deadline while the function's job goes on.
Each line says whether the run was forced ("Run now"; RunContext.forced) and which
emulator delivery it ran for (X-Emulator-Delivery).

It also plays the target's side of the emulator's faults (header X-Emulator-Fault):
- slow=<seconds>: the job runs that long (longer than the attempt deadline);
- kill: the instance dies mid-job: SIGKILL of this worker process, which gunicorn
  replaces, exactly as Cloud Run loses an instance. Before dying it waits (at most
  DEMO_KILL_SETTLE_LIMIT seconds) until no other job in this process is between its
  commit and the function's completion write: no dedup scheme can cover a crash in that
  window (that is what a downstream idempotency check of the run's token is for), and
  the demo measures the kit, not that window. Requests that are only claiming, or
  running pre-commit, in the same process die with it, like on a real instance.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dedup import RunContext

FAULT_HEADER = "x-emulator-fault"
# DEMO_JOB_LOGIC's entry for jobs it does not name (the warm-up's; a test's own jobs on a
# function served for another stack).
OTHER_JOBS = "*"
DELIVERY_HEADER = "x-emulator-delivery"

_lock = threading.Lock()
_running = 0  # job logic calls in progress in this process
_last_finished = 0.0  # monotonic time the last one returned
_logic: dict[str, Callable[[Any], Any]] = {}


def run(context: RunContext) -> Any:
    slow, kill = _fault(context.headers)
    _record("start", context)
    global _running, _last_finished
    with _lock:
        _running += 1
    try:
        if kill:
            _die_mid_job()
        time.sleep(slow if slow is not None else _env_float("DEMO_WORK_SECONDS", 0.005))
        result = _job_logic(context.job_name)(context)
        if context.claim_lost.is_set():
            # Our lease lapsed and another attempt took the run over: do not commit.
            raise RuntimeError("claim lost before commit; not committing")
        _record("commit", context)
        return result
    finally:
        with _lock:
            _running -= 1
            _last_finished = time.monotonic()
        _record("end", context)


def _fault(headers: Mapping[str, str]) -> tuple[float | None, bool]:
    slow: float | None = None
    kill = False
    for part in headers.get(FAULT_HEADER, "").split(","):
        name, _, value = part.strip().partition("=")
        if name == "kill":
            kill = True
        elif name == "slow":
            try:
                slow = max(float(value), 0.0)
            except ValueError:
                slow = None
    return slow, kill


def _die_mid_job() -> None:
    settle = _env_float("DEMO_KILL_SETTLE_SECONDS", 0.3)
    limit = time.monotonic() + _env_float("DEMO_KILL_SETTLE_LIMIT", 2.0)
    while time.monotonic() < limit:
        with _lock:
            quiet = _running == 1 and time.monotonic() - _last_finished >= settle
        if quiet:
            break
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGKILL)


def _job_logic(job_name: str) -> Callable[[Any], Any]:
    with _lock:
        logic = _logic.get(job_name)
        if logic is None:
            routes = json.loads(os.environ.get("DEMO_JOB_LOGIC", "{}") or "{}")
            spec = routes.get(job_name) or routes.get(OTHER_JOBS)
            if spec is None:
                raise LookupError(
                    f"no job logic for job {job_name!r} in DEMO_JOB_LOGIC (jobs: "
                    f"{', '.join(routes) or 'none'}): the demo keys it by deployed job ID"
                )
            module_name, _, attribute = spec.partition(":")
            logic = getattr(importlib.import_module(module_name), attribute)
            _logic[job_name] = logic
    return logic


def _record(event: str, context: RunContext) -> None:
    line = json.dumps(
        {
            "event": event,
            "job": context.job_name,
            "schedule_time": context.schedule_time.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "deduplicated": context.deduplicated,
            "forced": context.forced,
            "project": context.project,
            "location": context.location,
            "run_id": context.run_id,
            "attempt_id": context.attempt_id,
            "attempt": context.attempt,
            "delivery": context.headers.get(DELIVERY_HEADER),
            "pid": os.getpid(),
            "at": time.time(),
        },
        separators=(",", ":"),
    )
    path = os.environ["DEMO_LEDGER"]
    # One short write with O_APPEND: atomic across the server's worker processes.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default

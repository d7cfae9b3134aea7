"""A local Cloud Scheduler emulator with fault injection.

Reads a stack file's jobs, computes their scheduled times from the unix-cron schedule and
time zone, and delivers each run over HTTP as the deployed job would be (its ID, headers,
body and an OIDC token), with Scheduler's attempt deadline and retry rules, optionally
injecting the faults that make Scheduler deliver a run twice or force a run (and, through
a hook, faults of the target's store).
`python -m scheduler_emulator --help` for the command line.

Its modules: emulator.py (SchedulerEmulator: what Scheduler sends, when, and its retries),
records.py (what it sends and records: Delivery, RunResult, EmulatorResult), http_call.py
(one request, hung up on at its deadline), retries.py (when Scheduler retries), clock.py,
faults.py (the fault plan), oidc.py (the jobs' tokens), stack.py (a stack file's jobs),
report.py (per-run verdicts, as text or JSON) and cli.py.
"""

import sys
from pathlib import Path

# What a schedule time means is the function's (dedup.business_runs): one implementation.
_FUNCTION_DIR = str(Path(__file__).resolve().parent.parent / "function")
if _FUNCTION_DIR not in sys.path:
    sys.path.insert(0, _FUNCTION_DIR)

from scheduler_emulator.clock import Clock, ManualClock, RealClock, ScaledClock  # noqa: E402
from scheduler_emulator.emulator import SchedulerEmulator  # noqa: E402
from scheduler_emulator.faults import DEFAULT_MIX, FAULT_NAMES, STORE_FAULTS, FaultPlan  # noqa: E402
from scheduler_emulator.records import (  # noqa: E402
    Delivery,
    DstNote,
    EmulatorResult,
    Progress,
    RunResult,
    StoreFaultHook,
    format_schedule_time,
)
from scheduler_emulator.retries import retry_refusal  # noqa: E402
from scheduler_emulator.stack import (  # noqa: E402
    Job,
    Stack,
    StackError,
    job_from_settings,
    load_stack,
    resolve_stack,
)

__all__ = [
    "DEFAULT_MIX",
    "FAULT_NAMES",
    "STORE_FAULTS",
    "Clock",
    "Delivery",
    "DstNote",
    "EmulatorResult",
    "FaultPlan",
    "Job",
    "ManualClock",
    "Progress",
    "RealClock",
    "RunResult",
    "ScaledClock",
    "SchedulerEmulator",
    "Stack",
    "StackError",
    "StoreFaultHook",
    "format_schedule_time",
    "job_from_settings",
    "load_stack",
    "resolve_stack",
    "retry_refusal",
]

"""`make demo`: the kit's main job, run locally.

Starts the real Firestore emulator, serves the kit's real function with
functions-framework (several worker processes, like several Cloud Run instances), drives
it with the local Cloud Scheduler emulator while injecting the faults that make Scheduler
deliver a run twice, and reports, per scheduled run, the deliveries, the replies and how
many times the job logic really executed (counted in a ledger file, independently of the
dedup store). `python -m operator_tools demo --help`.

Kept import-light: the served function imports `demo.job_wrapper` from this package.
"""

import sys
from pathlib import Path

# The function's source root (function/) imports as `dedup` and `jobs`, as on Cloud Run and
# under pytest; the demo runs the watchdog's own code in-process after the replay.
_FUNCTION_DIR = str(Path(__file__).resolve().parent.parent / "function")
if _FUNCTION_DIR not in sys.path:
    sys.path.insert(0, _FUNCTION_DIR)

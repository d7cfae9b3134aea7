"""`make demo`: the kit's main job, run locally.

Starts the real Firestore emulator, serves the kit's real function with
functions-framework (several worker processes, like several Cloud Run instances), drives
it with the local Cloud Scheduler emulator while injecting the faults that make Scheduler
deliver a run twice, and reports, per scheduled run, the deliveries, the replies and how
many times the job logic really executed (counted in a ledger file, independently of the
dedup store). `python -m operator_tools demo --help`.

One module per idea:
- cli.py: the command; options.py: what it replays (DemoOptions, a path's PathSpec);
- run.py: run_demo, the whole local stack once: the Firestore emulator, the served function
  and each scene in turn; keep.py: `--keep`, its emulator kept for `make runs`;
- local_function.py: the kit's function served locally (LocalFunction, its environment),
  behind the store-fault proxy (store_faults.py: its timings and the emulator's hook), and
  each runtime's function next to it; local_runtimes.py: the runtimes as served locally
  (their demoSettings, their secret values from the stack's local secrets file, the
  warning that the stack's real job code runs);
  job_wrapper.py (the ledger job it runs), ledger.py (counting it), served_function.py;
- replay.py: one replay through the Scheduler emulator, its executions counted;
  function_log.py: what the function answered, from its log;
- the scenes after it: watch.py (the watchdog), backfill.py (both read records where
  record_stores.py finds them: each job's database), silence.py (a run missed during
  `make silence`'s silence) and extra_run.py (a run beyond the schedule), both ticking
  the watchdog through scene_ticks.py, paths.py (DST changes,
  forced runs, long store stalls), overlap.py, and the proxied jobs: local_proxy.py (the
  proxy on fake Google APIs) and proxied.py (their replay);
- outcome.py: what a replay found (DemoOutcome, ProxiedOutcome, PathResult);
- report.py (for a person), verdict.py (the RESULT line), report_json.py (--json);
- serve.py: `make serve`, the stack served until Ctrl-C.

Kept import-light: the served function imports `demo.job_wrapper` from this package.
"""

import sys
from pathlib import Path

# The function's source root (function/) imports as `dedup` and `jobs`, as on Cloud Run and
# under pytest; the demo runs the watchdog's own code in-process after the replay.
_FUNCTION_DIR = str(Path(__file__).resolve().parent.parent / "function")
if _FUNCTION_DIR not in sys.path:
    sys.path.insert(0, _FUNCTION_DIR)

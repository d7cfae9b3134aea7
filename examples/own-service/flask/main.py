"""A team's own Flask service, with its scheduled task guarded by the protocol: run it with
`flask --app main run` (examples/own-service/README.md). The guard reads the same DEDUP_*
settings as the kit's function (DEDUP_PROJECT, DEDUP_LOCATION, DEDUP_DATABASE, ...).

The job, so a reader can watch duplicates being refused: each execution appends one JSON
line (run id, schedule time, attempt) to the file named by EXECUTIONS_FILE, then works for
JOB_SECONDS (default 0), stopping early if its claim is lost; while the file named by
FAIL_FILE exists, it fails after its line (the run is released, and Scheduler's retry runs).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from flask import Flask

from dedup import RunContext
from dedup.adapters.wsgi import deduplicated

app = Flask(__name__)


@app.post("/tasks/export")
@deduplicated
def export(run: RunContext) -> dict[str, Any]:
    line = {"run_id": run.run_id, "schedule_time": run.schedule_time.isoformat(),
            "attempt": run.attempt}
    with Path(os.environ["EXECUTIONS_FILE"]).open("a", encoding="utf-8") as executions:
        executions.write(json.dumps(line) + "\n")
    # The work: wait() returns early, True, once the claim is lost (another attempt may own
    # the run): stop before doing anything more.
    if run.claim_lost.wait(float(os.environ.get("JOB_SECONDS", "0"))):
        raise RuntimeError("claim lost: stopping before the export is written")
    fail_file = os.environ.get("FAIL_FILE")
    if fail_file and Path(fail_file).exists():
        raise RuntimeError(f"failing on demand ({fail_file} exists)")
    return {"exported": run.schedule_time.isoformat(), "attempt": run.attempt}

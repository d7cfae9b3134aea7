"""A team's own FastAPI service, with its scheduled task guarded by the protocol
(dedup.adapters.asgi): run it with `uvicorn main:app` (examples/own-service/README.md). The
guard reads the same DEDUP_* settings as the kit's function (DEDUP_PROJECT, DEDUP_LOCATION,
DEDUP_DATABASE, DEDUP_LEASE_SECONDS, ...).

The job, so a reader can watch duplicates being refused: each execution appends one JSON
line (run id, schedule time, attempt) to the file named by EXECUTIONS_FILE, then works for
JOB_SECONDS (default 0) in short async steps, looking at claim_lost before each (stopping
once the claim is lost); while the file named by FAIL_FILE exists, it fails after its line
(the run is released, and Scheduler's retry runs). GET /healthz is not guarded.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request

from dedup import RunContext
from dedup.adapters.asgi import DedupMiddleware, current_run

# How often the job looks at claim_lost while it works: a lost claim stops it within this.
STEP_SECONDS = 0.2

app = FastAPI()
# Its settings come from the DEDUP_* environment, read at the app's start-up: a bad one
# fails the start-up (uvicorn exits naming it).
app.add_middleware(DedupMiddleware, paths=["/tasks/export"])


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    """Answered on the event loop, whatever the guarded jobs are doing."""
    return {"status": "ok"}


@app.post("/tasks/export")
async def export(request: Request) -> dict[str, Any]:
    run = current_run(request)  # also request.state.dedup_run
    record_execution(run)
    # The work, in async steps: once the claim is lost another attempt may own the run,
    # so nothing more may change: stop (raise) before the next step.
    deadline = time.monotonic() + float(os.environ.get("JOB_SECONDS", "0"))
    while (left := deadline - time.monotonic()) > 0:
        if run.claim_lost.is_set():
            raise RuntimeError("claim lost: stopping before the export is written")
        await asyncio.sleep(min(STEP_SECONDS, left))
    fail_file = os.environ.get("FAIL_FILE")
    if fail_file and Path(fail_file).exists():
        raise RuntimeError(f"failing on demand ({fail_file} exists)")
    return {"exported": run.schedule_time.isoformat(), "attempt": run.attempt}


def record_execution(run: RunContext) -> None:
    line = {"run_id": run.run_id, "schedule_time": run.schedule_time.isoformat(),
            "attempt": run.attempt}
    with Path(os.environ["EXECUTIONS_FILE"]).open("a", encoding="utf-8") as executions:
        executions.write(json.dumps(line) + "\n")

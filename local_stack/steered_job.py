"""Job logic for the tests and the benchmark, steered by the request body (JSON):

{"sleep": seconds, "fail": true, "fail_at": [schedule times, ISO 8601], "result": any}: fail
always, or only the runs of those schedule times. Every execution appends one line to the
ledger file named by TEST_LEDGER, so executions are counted outside the dedup store.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from dedup import RunContext


def record_execution(context: RunContext, ledger_path: str) -> None:
    line = json.dumps({
        "run_id": context.run_id,
        "attempt_id": context.attempt_id,
        "attempt": context.attempt,
        "job": context.job_name,
        "schedule_time": context.schedule_time.isoformat(),
        "project": context.project,
        "forced": context.forced,
        "generation": context.generation,
        "pid": os.getpid(),
    })
    # One write of a short line with O_APPEND: atomic across processes.
    fd = os.open(ledger_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def run(context: RunContext) -> Any:
    spec = json.loads(context.body) if context.body else {}
    record_execution(context, os.environ["TEST_LEDGER"])
    time.sleep(float(spec.get("sleep", 0)))
    if spec.get("fail") or context.schedule_time.isoformat() in spec.get("fail_at", ()):
        raise RuntimeError("job asked to fail")
    return {"echo": spec.get("result"), "claim_lost": context.claim_lost.is_set()}


def read_ledger(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as ledger:
        return [json.loads(line) for line in ledger if line.strip()]

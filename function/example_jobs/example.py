"""The default job: replace it with yours, a module of function/jobs/ named by a job's
`jobLogic: jobs.<module>:<function>` (or the stack's `defaultJobLogic`) in its stack file.

It runs once per scheduled run; whatever it returns (small JSON) is replayed to
duplicates. Raise to signal a retryable failure. What it logs with `logging` is one JSON
line per record, at the level used, carrying the run's run_id, job, attempt and trigger
(Cloud Logging's structured entries on Cloud Run; the function's output locally).
"""

from __future__ import annotations

import json
import logging

from dedup import RunContext

log = logging.getLogger(__name__)


def run(context: RunContext) -> dict[str, object]:
    payload: object = None
    if context.body:
        try:
            payload = json.loads(context.body)
        except ValueError:
            payload = context.body.decode(errors="replace")
    log.info("running %s for %s", context.job_name, context.schedule_time.isoformat())
    return {
        "job": context.job_name,
        "schedule_time": context.schedule_time.isoformat(),
        "attempt": context.attempt,
        "payload": payload,
    }

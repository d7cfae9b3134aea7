"""The default job: replace it with yours (DEDUP_JOB=module:function).

It runs once per scheduled run; whatever it returns (small JSON) is replayed to
duplicates. Raise to signal a retryable failure.
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

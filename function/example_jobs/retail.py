"""The retail example's job logic (examples/stacks/Pulumi.retail.yaml): jobs that need what
real work needs, each from its runtime's settings and secrets (docs/job-needs.md).

They read everything from the environment their runtime gives them, at each run, and fail
permanently with the name of what is missing, so a runtime deployed without a setting or a
secret says so in its first run's log line. They stop short of the network: the kit ships
them as examples, and a team's own job calls its API or writes its bucket where these log
what they would do. A secret's value is never logged or returned, only its fingerprint.
"""

from __future__ import annotations

import hashlib
import logging
import os

from dedup.protocol import PermanentFailure, RunContext

log = logging.getLogger(__name__)


def required(name: str) -> str:
    """The runtime's setting (or secret) `name`, or a permanent failure naming it."""
    value = os.environ.get(name, "")
    if not value:
        raise PermanentFailure(f"{name} is not set: give the job's runtime the setting or "
                               "secret (runtimes[].settings / runtimes[].secrets)")
    return value


def fingerprint(secret: str) -> str:
    """A secret's first 12 hex digits of SHA-256: which value a run saw, not the value."""
    return hashlib.sha256(secret.encode()).hexdigest()[:12]


def sync_inventory(context: RunContext) -> dict[str, object]:
    """inventory-sync: pull stock levels from the internal inventory API (VPC only) with
    the API token from Secret Manager."""
    api, token = required("INVENTORY_API_URL"), required("INVENTORY_API_TOKEN")
    log.info("syncing inventory for %s from %s", context.schedule_time.isoformat(), api)
    return {"api": api, "token": fingerprint(token),
            "schedule_time": context.schedule_time.isoformat()}


def export_nightly(context: RunContext) -> dict[str, object]:
    """nightly-export: write the day's export to the bucket its runtime may write."""
    bucket = required("EXPORT_BUCKET")
    name = f"exports/{context.schedule_time.date().isoformat()}.csv"
    log.info("exporting to gs://%s/%s", bucket, name)
    return {"bucket": bucket, "object": name}

"""Effectively-exactly-once execution of Cloud Scheduler runs: a run delivered more than
once (retries, duplicate deliveries) runs its job once, and its duplicates get the result.

The protocol, at the top of the package (what job code and its tests import):
keys.py        headers -> RunKey (the run_id), or a 400 reason
protocol.py    one delivery end to end (Deduplicator); the names below, importable here too
run_context.py RunContext, what a job is told; PermanentFailure, what it may raise
outcomes.py    what a delivery came to (Outcome, Delivery); its result and error, kept
claiming.py    claim a run: create, or take over; settle a claim whose outcome is unknown
claim.py       the claim held and its guarded writes (renew, complete, release)
heartbeat.py   renews the claims of the jobs running, on one timer thread
overlap.py     a job's runs that would overlap (forbid, wait, replace)
business_runs  one run per scheduled local time (DST); cache.py, completed runs in memory
job_logic.py   loads job logic (its job table, tables.py); logs.py, its JSON log lines
settings.py    the DEDUP_* environment; version.py, the kit's one version
idempotency.py the downstream guard (a downstream service's steps, once per run)

One subpackage per other concern, each with a map of its own:
store/     the storage seam (RunStore) and store/firestore.py, its one implementation
entry/     the HTTP entry: a delivery parsed and answered, its caller, the wiring
proxy/     the idempotent proxy: one start of a Google target per run, its tokens
watchdog/  the run watchdog: missed / failed / overlong runs, catch-up, re-runs, backfills
"""

from dedup.protocol import RunContext

__all__ = ["RunContext"]

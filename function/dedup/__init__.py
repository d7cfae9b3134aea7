"""Effectively-exactly-once execution of Cloud Scheduler runs: a run delivered more than
once (retries, duplicate deliveries) runs its job once, and its duplicates get the result.

keys.py      headers -> RunKey (the run_id), or a 400 reason
protocol.py  claim / complete / release / renew, the lease heartbeat, RunContext
store.py     the storage seam (RunStore); firestore_store.py implements it
cache.py     per-instance memory of completed runs
callers.py   who may call (DEDUP_ALLOWED_CALLERS): the Cloud-Run-verified token's email
http.py      one delivery -> reply + one JSON log line
app.py       wiring from DEDUP_* settings (settings.py); job_logic.py loads job logic
logs.py      job code's `logging` output as JSON lines with its run's fields
watchdog.py  the run watchdog (DEDUP_WATCH_*): missed / failed / overlong runs, by ID
"""

from dedup.protocol import RunContext

__all__ = ["RunContext"]

"""The watchdog's job table (watch_jobs.json in its source archive): every job of the
stack by deployed ID, with what judging its runs needs (schedule, deadlines, the database
of its records) and, where the watchdog delivers that job's runs (catch-up, re-runs), what
a delivery needs (its headers, body and, for a team service's job, its URL).

Apart from infra/watchdog.py (the component, which re-exports `watch_jobs`): the table is
plain data from the stack config, read by the operator tools and the demo too.
"""

from __future__ import annotations

from typing import Any, Final

from infra.config import StackConfig
from infra.scheduled_job import job_headers

SERVICE_TARGET: Final = "service-"
"""A team service's key among the databases the watchdog reads and the targets it
delivers to."""


def watch_jobs(cfg: StackConfig) -> list[dict[str, Any]]:
    """The watchdog's job table: every job of the stack (dedup function, proxy, runtimes,
    team services), by deployed ID; with what a delivery by the watchdog needs when it
    delivers that job's runs (a proxied job goes to DEDUP_WATCH_PROXY_URL and a runtime's
    to DEDUP_WATCH_RUNTIME_URLS, outputs: not in the table, which is built before they
    exist; a team service's job to its own `url`, its service's URL and path)."""

    def seconds(value: float) -> float | int:
        return int(value) if float(value).is_integer() else value

    # Per target, not per job: each answer looks at every job of the stack.
    delivers_to: dict[tuple[bool, str | None, str | None], bool] = {
        (proxied, None, None): cfg.watchdog_delivers_to(proxied=proxied)
        for proxied in (False, True)}
    delivers_to.update({(False, r.name, None): cfg.watchdog_delivers_to(runtime=r.name)
                        for r in cfg.runtimes})
    delivers_to.update({(False, None, s.name): cfg.watchdog_delivers_to(service=s.name)
                        for s in cfg.services})
    entries: list[dict[str, Any]] = []
    for job in sorted(cfg.jobs, key=lambda j: j.name):
        entry: dict[str, Any] = {
            "name": cfg.job_id(job),
            "schedule": job.schedule,
            "timeZone": job.time_zone,
            "attemptDeadlineSeconds": job.attempt_deadline_seconds,
            "retryWindowSeconds": seconds(job.retry_window_seconds),
            "paused": job.paused,
            "dstRepeated": job.dst_repeated,
            "dstSkipped": job.dst_skipped,
            "forcedRuns": job.forced_runs,
        }
        failure, recovery = cfg.alert_thresholds(job)
        entry.update(failureThreshold=failure, recoveryThreshold=recovery)
        if job.silences:  # its maintenance windows (dedup/watchdog/windows.py)
            entry["silences"] = [window.table_entry() for window in job.silences]
        if job.runs_beyond_schedule != "off":  # dedup/watchdog/beyond.py reads its ledgers
            entry["runsBeyondSchedule"] = job.runs_beyond_schedule
            if job.max_forced_runs_per_day:  # 0: unset
                entry["maxForcedRunsPerDay"] = job.max_forced_runs_per_day
        if (database := cfg.records_database_of(job)) != cfg.dedup.database_name:
            entry["database"] = database  # the proxy's, the runtime's or the service's own
        if job.proxy is not None:
            entry["proxied"] = True
        if job.runtime is not None:
            entry["runtime"] = job.runtime  # delivered to its DEDUP_WATCH_RUNTIME_URLS entry
        if job.catch_up:
            entry.update(catchUp=True, catchUpWithinSeconds=job.catch_up_within_seconds)
        if delivers_to[(job.proxy is not None, job.runtime, job.service)]:
            # `make rerun` accepts a request for it (operator_tools/rerun.py), and the watchdog
            # delivers only requests of jobs with this flag.
            entry["reruns"] = True
            entry["headers"] = job_headers(cfg.project, cfg.region, job)
            if job.body_json is not None:
                entry["body"] = job.body_json
            team = cfg.service_of(job)
            if team is not None and team.url is not None:  # StackConfig requires it here
                entry["url"] = f"{team.url}{job.service_path}"
        entries.append(entry)
    return entries

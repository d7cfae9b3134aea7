"""Stack policy: a production stack's alert thresholds page someone, and soon enough.

A job's incidents (function/dedup/watchdog/incidents.py) open after `failureThreshold` bad runs in
a row and close after `recoveryThreshold` good ones; the watchdog reads both from its job
table (watch_jobs.json in its declared source archive, policies/job_tables.py). On a
production-like stack (a database with delete protection, policies/facts.py):

- a failing job must page within MAX_PAGE_DELAY_SECONDS: failureThreshold x the job's
  longest gap between runs (a threshold of 1 always passes: the first bad run pages);
- an incident must be able to close within MAX_RECOVERY_SECONDS after the job recovered:
  while it is open, a new streak of failures joins it and notifies nobody;
- an alert policy on the watchdog's `incident_opened` lines must name a notification
  channel (the stack's `alerts.emails`), or no threshold pages anyone (a stack whose
  policies name none at all is dedup-alerting-notifies-production's finding, not twice).

A table it cannot read (unknown at this preview, not JSON, without a job's schedule) is a
violation: the policy fails closed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from infra.scheduler_rules import schedule_period_seconds
from infra.source import WATCH_JOBS_TABLE
from policies.facts import stack_facts
from policies.gcp import ALERT_POLICY
from policies.job_tables import job_table
from policies.kit_resources import notifies
from policies.model import Finding, Resource
from policies.values import MISSING, as_list, get, is_unknown, known_str

MAX_PAGE_DELAY_SECONDS: Final = 86400
"""A failing job pages within a day of its first bad run's verdict."""
MAX_RECOVERY_SECONDS: Final = 7 * 86400
"""An incident can close within a week of the job's recovery."""
INCIDENTS_METRIC_SUFFIX: Final = "-watchdog-incidents"
OPENED_MATCH: Final = 'metric.label.event="incident_opened"'


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:g} h"


def _threshold(entry: Mapping[str, Any], key: str) -> int | None:
    value = entry.get(key, 1)  # a table written before thresholds existed: 1
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 \
        else None


def _job_findings(entry: Any, urn: str) -> list[Finding]:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
        return [Finding("the watchdog's job table has an entry without a job name, so its "
                        "alert thresholds cannot be judged: fix the stack's jobs and "
                        "redeploy (the program writes the table)", urn)]
    name, schedule, zone = entry["name"], entry.get("schedule"), entry.get("timeZone",
                                                                         "Etc/UTC")
    failure, recovery = _threshold(entry, "failureThreshold"), _threshold(
        entry, "recoveryThreshold")
    if entry.get("paused") is True:
        return []
    try:
        period = schedule_period_seconds(str(schedule), str(zone))
    except ValueError:
        period = None
    if period is None or failure is None or recovery is None:
        return [Finding(f"job {name!r}: the watchdog's job table gives no usable schedule, "
                        "timeZone, failureThreshold or recoveryThreshold, so whether its "
                        "alerts page cannot be judged: fix the job's settings (the program "
                        "writes the table from them)", urn)]
    found: list[Finding] = []
    if failure > 1 and failure * period > MAX_PAGE_DELAY_SECONDS:
        most = max(1, MAX_PAGE_DELAY_SECONDS // period)
        found.append(Finding(
            f"job {name!r}: failureThreshold {failure} x its runs' period ({_hours(period)}) "
            f"= {_hours(failure * period)} of failing runs before anyone is paged (at most "
            f"{_hours(MAX_PAGE_DELAY_SECONDS)} on a production stack): set "
            f"jobs[].alerts.failureThreshold (or alerts.failureThreshold) to at most {most}",
            urn))
    if recovery > 1 and recovery * period > MAX_RECOVERY_SECONDS:
        most = max(1, MAX_RECOVERY_SECONDS // period)
        found.append(Finding(
            f"job {name!r}: recoveryThreshold {recovery} x its runs' period "
            f"({_hours(period)}) = {_hours(recovery * period)} before an incident closes; "
            "until then a new failure joins the old incident and pages nobody (at most "
            f"{_hours(MAX_RECOVERY_SECONDS)} on a production stack): set "
            f"jobs[].alerts.recoveryThreshold (or alerts.recoveryThreshold) to at most {most}",
            urn))
    return found


def _pages_on_opened(policy: Resource) -> bool:
    """An alert policy counting the watchdog's incident_opened lines, with a channel."""
    conditions = as_list(get(policy.props, "conditions")) or []
    for condition in conditions:
        metric_filter = known_str(get(condition, "conditionThreshold", "filter"))
        if metric_filter is not None and INCIDENTS_METRIC_SUFFIX in metric_filter and (
                OPENED_MATCH in metric_filter):
            return notifies(policy)
    return False


def thresholds_page(resources: Sequence[Resource]) -> list[Finding]:
    """dedup-alert-thresholds-page-production: mandatory for a delete-protected stack."""
    facts = stack_facts(resources)
    if not facts.production_like:
        return []
    findings: list[Finding] = []
    for watchdog in facts.watchdog_functions:
        table = job_table(watchdog, resources, WATCH_JOBS_TABLE)
        if is_unknown(table) or table is MISSING or not isinstance(table, list):
            findings.append(Finding(
                "the watchdog's job table (watch_jobs.json in its source archive) cannot be "
                "read here, so whether its jobs' alert thresholds page anyone cannot be "
                "judged: declare its source object with the archive the program writes "
                "(infra/source.py), or run the policy check after the archive is built",
                watchdog.urn))
            continue
        for entry in table:
            findings += _job_findings(entry, watchdog.urn)
        policies = facts.of_type(ALERT_POLICY)
        # No policy notifying anyone at all is dedup-alerting-notifies-production's to say
        # (the config refuses it first): not said twice.
        if any(notifies(p) for p in policies) and not any(_pages_on_opened(p)
                                                           for p in policies):
            findings.append(Finding(
                "no alert policy with a notification channel counts the watchdog's "
                "incident_opened lines (metric <namePrefix>-watchdog-incidents), so a "
                "failing job or a run that ran twice pages nobody: set the stack config "
                "alerts.emails (the program declares the policy `incident-opened` with them)",
                watchdog.urn))
    return findings

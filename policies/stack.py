"""Stack policies: rules that hold between the dedup function, its jobs and Firestore
(including the idempotent proxy's records in a database of its own), and the callers each
function of the kit serves.

Which function is the dedup function and which jobs target it: policies/kit_resources.py
and policies/facts.py. Values the function does not set take the function's own defaults
(function/dedup/settings.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from infra.scheduler_rules import (
    ATTEMPT_DEADLINE_DEFAULT_SECONDS,
    LEASE_STORE_TIMEOUTS,
    RetrySettings,
    fast_failure_retry_span_seconds,
    min_lease_seconds,
    retry_duration_to_recover_seconds,
    retry_window_seconds,
)
from policies.facts import stack_facts
from policies.gcp import (
    ALLOWED_CALLERS_ENV,
    DEDUP_TTL_FIELD,
    FIRESTORE_FIELD,
    parse_duration_seconds,
    parse_int,
    parse_seconds,
    service_account_email,
)
from policies.grants import DATASTORE_USER
from policies.kit_resources import (
    DEFAULT_DATABASE,
    database_id,
    environment,
    label,
    records_database,
    setting,
)
from policies.model import Finding, Resource
from policies.team_services import APP_ENGINE_TARGET
from policies.values import MISSING, as_list, as_mapping, get, is_unknown, known_str

# What the function accepts as an entry of DEDUP_ALLOWED_CALLERS (function/dedup/settings.py).
_EMAIL = re.compile(
    r"[A-Za-z0-9._%+-]+@"
    r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+"
)


def _deadline_seconds(job: Resource) -> float | None:
    """The job's attemptDeadline in seconds (default 180), None if unknown or malformed."""
    value = get(job.props, "attemptDeadline")
    if value is MISSING:
        return float(ATTEMPT_DEADLINE_DEFAULT_SECONDS)
    if is_unknown(value):
        return None
    try:
        return parse_duration_seconds(value)
    except ValueError:
        return None  # scheduler-job-attempt-deadline reports it


def _int_setting(function: Resource, key: str) -> int | str | None:
    """An integer DEDUP_* setting; None if unknown; an error message if malformed."""
    value = setting(function, key)
    if is_unknown(value):
        return None
    try:
        return parse_int(value)
    except ValueError:
        return f"{key}={value!r} is not a whole number of seconds: set an integer"


def _seconds_setting(function: Resource, key: str) -> float | str | None:
    """A DEDUP_* duration the function reads as a number ("10", "2.5"); None if unknown; an
    error message if malformed."""
    value = setting(function, key)
    if is_unknown(value):
        return None
    try:
        return parse_seconds(value)
    except ValueError:
        return f"{key}={value!r} is not a positive number of seconds: set one such as 10"


# --- policies ---------------------------------------------------------------------------


def lease_survives_missed_renewals(resources: Sequence[Resource]) -> list[Finding]:
    """The lease is a liveness window the heartbeat renews every lease/3; one renewal may
    take up to the store timeout. Not judged while the lease or the store timeout is
    unknown; a malformed lease or store timeout is reported (fail closed)."""
    findings: list[Finding] = []
    for function in stack_facts(resources).dedup_functions:
        lease = _int_setting(function, "DEDUP_LEASE_SECONDS")
        if isinstance(lease, str):
            findings.append(Finding(lease, function.urn))
            continue
        store_timeout = _seconds_setting(function, "DEDUP_STORE_TIMEOUT_SECONDS")
        if isinstance(store_timeout, str):
            findings.append(Finding(store_timeout, function.urn))
            continue
        if lease is None or store_timeout is None:
            continue
        minimum = min_lease_seconds(store_timeout)
        if lease < minimum:
            findings.append(
                Finding(
                    f"the lease DEDUP_LEASE_SECONDS={lease} is shorter than "
                    f"{LEASE_STORE_TIMEOUTS} x DEDUP_STORE_TIMEOUT_SECONDS ({minimum:g}s): the "
                    "heartbeat renews the lease every lease/3 and a renewal may take up to the "
                    "store timeout, so one stalled renewal would still be running when the next "
                    "is due, and a running job's claim would not survive two failed renewals; "
                    f"set leaseSeconds >= {minimum:g} (or lower storeTimeoutSeconds)",
                    function.urn,
                )
            )
    return findings


def _retry_settings(job: Resource) -> RetrySettings | None:
    config = get(job.props, "retryConfig")
    if is_unknown(config):
        return None
    defaults = RetrySettings()
    if config is MISSING:
        return defaults
    values: dict[str, Any] = {}
    fields = {
        "retryCount": ("retry_count", parse_int),
        "maxRetryDuration": ("max_retry_duration_seconds", parse_duration_seconds),
        "minBackoffDuration": ("min_backoff_seconds", parse_duration_seconds),
        "maxBackoffDuration": ("max_backoff_seconds", parse_duration_seconds),
        "maxDoublings": ("max_doublings", parse_int),
    }
    for prop, (attribute, parse) in fields.items():
        raw = get(config, prop)
        if is_unknown(raw):
            return None
        if raw is MISSING:
            continue
        try:
            values[attribute] = parse(raw)
        except ValueError:
            return None
    return RetrySettings(**values)


def retention_exceeds_retry_window(resources: Sequence[Resource]) -> list[Finding]:
    facts = stack_facts(resources)
    findings: list[Finding] = []
    for function in facts.dedup_functions:
        retention = _int_setting(function, "DEDUP_RETENTION_SECONDS")
        if isinstance(retention, str):
            findings.append(Finding(retention, function.urn))
            continue
        if retention is None:
            continue
        for job in facts.jobs_targeting(function):
            deadline = facts.per_resource(_deadline_seconds, job)
            retry = facts.per_resource(_retry_settings, job)
            if deadline is None or retry is None:
                continue
            window = retry_window_seconds(deadline, retry)
            if retention <= window:
                findings.append(
                    Finding(
                        f"records are kept DEDUP_RETENTION_SECONDS={retention}s, not longer "
                        f"than the retry window of job {label(job)} ({window:g}s): a late "
                        "retry would find no record and run the job again; set "
                        f"retentionSeconds > {window:g}",
                        function.urn,
                    )
                )
    return findings


def retries_outlast_lease(resources: Sequence[Resource]) -> list[Finding]:
    """Jobs whose retries, all answered at once, end before a crashed claim's lease lapses.

    The span judged is retryCount's and maxRetryDuration's (Scheduler retries until both
    are reached). Google also documents retries as ending at the job's next scheduled time
    (RetryConfig's API reference; its retry guide instead skips that tick): under that
    reading a job due again before the lease lapses cannot recover a crashed run at all,
    whatever its retry config, and the message says so.

    Judged per job, against the shortest lease of the dedup functions it may target (while
    its URL is unknown, that may be the function and the proxy). Not judged while a lease
    or the retry config is unknown; a malformed lease is
    dedup-lease-survives-missed-renewals'.
    """
    findings: list[Finding] = []
    facts = stack_facts(resources)
    for job in facts.scheduler_jobs:
        targeted = facts.functions_targeted(job)
        leases = [_int_setting(f, "DEDUP_LEASE_SECONDS") for f in targeted]
        retry = facts.per_resource(_retry_settings, job)
        if not leases or retry is None or not all(isinstance(v, int) for v in leases):
            continue
        lease = min(v for v in leases if isinstance(v, int))
        span = fast_failure_retry_span_seconds(retry)
        if span >= lease:
            continue
        fix = (
            f"set retryConfig.maxRetryDuration >= {lease}s (retry.maxRetryDurationSeconds >= "
            "leaseSeconds)"
        )
        deadline = facts.per_resource(_deadline_seconds, job)
        if deadline is not None:
            sure = retry_duration_to_recover_seconds(deadline, lease, retry)
            fix += f"; with its deadline and backoffs, {sure:g}s makes sure a retry comes after it"
        if span <= 0:
            message = (
                f"job {label(job)} is not retried (retry: none, or retryCount 0 and no "
                "maxRetryDuration), so "
                "a run whose instance crashed mid-job is skipped, not recovered: at-most-once "
                "by design. If such runs must be recovered, a retry has to come after the "
                f"crashed attempt's lease (DEDUP_LEASE_SECONDS={lease}s) lapses: {fix}"
            )
        else:
            message = (
                f"job {label(job)} stops retrying {span:g}s after its first attempt when "
                "every attempt is answered at once, but a claim whose instance crashed mid-job "
                f"answers 409 until its lease (DEDUP_LEASE_SECONDS={lease}s) lapses: the "
                f"retries run out first and the run is skipped, never recovered. To recover it, "
                f"{fix}, and schedule it less often than every {lease}s (if Scheduler ends "
                "a run's retries at the job's next scheduled time, as one of its documented "
                "readings has it); or accept that a crashed run is skipped (as `retry: none` "
                "does by design)"
            )
        findings.append(Finding(message, job.urn))
    return findings


def _same(actual: Any, expected: Any) -> bool:
    """Equal, or not judgeable because either side is not known yet."""
    if is_unknown(actual) or is_unknown(expected):
        return True
    return bool(actual == expected)


def _field_defects(field: Resource) -> list[str]:
    defects: list[str] = []
    if get(field.props, "ttlConfig") is MISSING:
        defects.append("ttlConfig is not set (no TTL policy): set ttl_config={}")
    index = get(field.props, "indexConfig")
    if index is MISSING:
        defects.append(
            "indexConfig is not set, so expire_at keeps its automatic indexes (a TTL field "
            "written with ever-growing timestamps hot-spots): set index_config={} to exempt it"
        )
    elif not is_unknown(index):
        indexes = as_list(get(index, "indexes"))
        if indexes:
            defects.append(
                f"indexConfig keeps {len(indexes)} index(es) on expire_at: use an empty "
                "index_config={} to exempt the TTL field from indexing"
            )
    return defects


def ttl_policy_on_expire_at(resources: Sequence[Resource]) -> list[Finding]:
    findings: list[Finding] = []
    facts = stack_facts(resources)
    fields = facts.of_type(FIRESTORE_FIELD)
    for function in facts.dedup_functions:
        collection = setting(function, "DEDUP_COLLECTION")
        database = database_id(setting(function, "DEDUP_DATABASE"))
        candidates = [
            f
            for f in fields
            if _same(get(f.props, "collection"), collection)
            and _same(get(f.props, "field"), DEDUP_TTL_FIELD)
            and _same(database_id(get(f.props, "database")), database)
        ]
        if not candidates:
            findings.append(
                Finding(
                    f"no {FIRESTORE_FIELD} sets a TTL policy on {DEDUP_TTL_FIELD!r} of collection "
                    f"{collection!r} in database {database!r}, so dedup records are never "
                    "deleted: declare gcp.firestore.Field(database=..., collection=..., "
                    "field='expire_at', ttl_config={}, index_config={})",
                    function.urn,
                )
            )
            continue
        defects = {f.urn: _field_defects(f) for f in candidates}
        if any(not d for d in defects.values()):
            continue
        for urn, problems in defects.items():
            findings.extend(Finding(p, urn) for p in problems)
    return findings


# --- dedup-proxy-own-database -----------------------------------------------------------


def proxy_own_database(resources: Sequence[Resource]) -> list[Finding]:
    """Every proxy keeps its records in a database of its own: not the database of a dedup
    function that runs job code (Firestore IAM conditions name databases, not
    collections). Who writes it is dedup-database-writers' (policies/databases.py), as for
    every database of the kit. Not judged while the databases are unknown."""
    findings: list[Finding] = []
    facts = stack_facts(resources)
    for proxy in facts.proxy_functions:
        database = records_database(proxy)
        if database is None:
            continue
        for function in facts.job_code_functions:
            shared = records_database(function)
            if shared is None or not database.same_as(shared):
                continue
            own = "dedup" if database.database == DEFAULT_DATABASE else database.database
            findings.append(
                Finding(
                    f"the proxy {label(proxy)} keeps its records in database "
                    f"{str(database)!r} (DEDUP_DATABASE), the database of the dedup function "
                    f"{label(function)}, whose job code could write (forge) a "
                    "proxied job's record there and suppress the run: set the proxy's "
                    f"DEDUP_DATABASE to a database of its own (e.g. '{own}-proxy', with its "
                    f"own TTL field on expire_at), and condition the proxy's {DATASTORE_USER} "
                    "to it",
                    proxy.urn,
                )
            )
    return findings


def _header(headers: Mapping[str, Any], name: str) -> Any:
    for key, value in headers.items():
        if str(key).lower() == name.lower():
            return MISSING if value is None else value
    return MISSING


def dedup_headers(resources: Sequence[Resource]) -> list[Finding]:
    """Every job of the kit (aimed at a function of the kit, or at a declared team
    service: an App Engine HTTP target's headers are its own) sends X-Dedup-Project and
    X-Dedup-Location with its own project and location."""
    findings: list[Finding] = []
    facts = stack_facts(resources)
    jobs = {job.urn: job for function in facts.dedup_functions
            for job in facts.jobs_targeting(function)}
    jobs.update((job.urn, job) for job, _ in facts.team_service_jobs)
    for job in facts.in_stack_order(list(jobs.values())):
        target = "httpTarget" if get(job.props, "httpTarget") is not MISSING else (
            APP_ENGINE_TARGET)
        raw = get(job.props, target, "headers")
        if is_unknown(raw):
            continue
        headers = as_mapping(raw) or {}
        expected = {
            "X-Dedup-Project": get(job.props, "project"),
            "X-Dedup-Location": get(job.props, "region"),
        }
        for name, own in expected.items():
            value = _header(headers, name)
            if is_unknown(value):
                continue
            if value is MISSING or not str(value).strip():
                findings.append(
                    Finding(
                        f"job {label(job)} does not send the {name} header, so its runs "
                        "are keyed with the receiver's own project/location and can "
                        "collide with a same-named job elsewhere: add "
                        f"{target}.headers[{name!r}]",
                        job.urn,
                    )
                )
            elif known_str(own) and value != own:
                findings.append(
                    Finding(
                        f"job {label(job)} sends {name}: {value!r} but runs in {own!r}: "
                        "send the job's own project and location",
                        job.urn,
                    )
                )
    return findings


def allowed_callers(resources: Sequence[Resource]) -> list[Finding]:
    """Every function of the kit names the callers it serves (DEDUP_ALLOWED_CALLERS), and
    only accounts the stack's Scheduler jobs send OIDC tokens of.

    Not judged while the setting is unknown (the e-mail of an account created in the same
    update); the accounts it names are not judged while some job's OIDC account is unknown.
    A value the function would refuse, or that is not a string, is reported (fail closed).
    """
    findings: list[Finding] = []
    facts = stack_facts(resources)
    oidc, oidc_unknown = facts.oidc_emails, facts.oidc_unknown
    # A watchdog that delivers runs (catch-up, re-runs) calls with its own account's tokens.
    delivering = facts.delivering_accounts
    for function in facts.dedup_functions:
        env = environment(function)
        if is_unknown(env):
            continue
        raw = get(env, ALLOWED_CALLERS_ENV)
        if is_unknown(raw):
            continue
        who = label(function)
        if raw is MISSING or (isinstance(raw, str) and not raw.strip()):
            findings.append(
                Finding(
                    f"function {who} does not set {ALLOWED_CALLERS_ENV}, so it serves every "
                    "caller Cloud Run lets through (anyone holding roles/run.invoker, or a "
                    "broader role, on it or its project) and trusts the X-CloudScheduler-* "
                    f"headers they choose: set {ALLOWED_CALLERS_ENV} to the e-mail of the "
                    "service account its Scheduler jobs send OIDC tokens of",
                    function.urn,
                )
            )
            continue
        if not isinstance(raw, str):
            findings.append(
                Finding(
                    f"function {who}: {ALLOWED_CALLERS_ENV} is not a string: set a "
                    "comma-separated list of service-account e-mails",
                    function.urn,
                )
            )
            continue
        entries = [entry.strip() for entry in raw.split(",")]
        bad = [entry for entry in entries if not _EMAIL.fullmatch(entry)]
        if bad:
            shown = ", ".join(repr(entry[:80]) for entry in bad)
            findings.append(
                Finding(
                    f"function {who}: {ALLOWED_CALLERS_ENV} has entries that are not "
                    f"e-mail addresses ({shown}), so the function refuses to start: set a "
                    "comma-separated list of service-account e-mails",
                    function.urn,
                )
            )
            continue
        others = sorted({service_account_email(e) for e in entries} - oidc - delivering)
        if not others or oidc_unknown:
            continue
        named = ", ".join(others)
        if oidc:
            message = (
                f"function {who}: {ALLOWED_CALLERS_ENV} names {named}, which no Scheduler "
                "job of the stack sends OIDC tokens of, so it lets another identity forge "
                "Scheduler deliveries: remove what no job uses (the jobs' accounts: "
                f"{', '.join(sorted(oidc))})"
            )
        else:
            message = (
                f"function {who}: {ALLOWED_CALLERS_ENV} names {named}, but no Scheduler job "
                "of the stack sends OIDC tokens, so nothing shows these are the jobs' "
                "accounts: set the jobs' httpTarget.oidcToken.serviceAccountEmail to the "
                "invoker account it names"
            )
        findings.append(Finding(message, function.urn))
    return findings

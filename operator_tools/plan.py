"""Offline plan: what `pulumi up` would create for a stack, without Pulumi CLI or cloud.

    python -m operator_tools plan                # every stacks/Pulumi.<stack>.yaml (make plan)
    python -m operator_tools plan dev            # stacks/Pulumi.dev.yaml (make plan STACK=dev)
    python -m operator_tools plan path/to/Pulumi.test.yaml

Validates the stack's config, imports every job's `module:function` in the function's own
environment (operator_tools/job_logic.py), runs the program under Pulumi's mocks, checks every
declared resource against Google's API contracts (infra/contracts, docs/contracts.md) and
prints one row per resource: type, name and its key settings, then the stack outputs. A
stack that cannot be deployed is one error message naming its file and keys, or each
declared value Google's API would refuse (exit status 2); the other stacks are still
planned.
"""

from __future__ import annotations

import argparse
import json
import sys
import zipfile
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from infra.config import ConfigError, StackConfig, load_config
from infra.contracts import Finding, check_resources
from infra.scheduler_rules import HazardKind, ScheduleError, chosen_kinds, dst_advisory
from infra.source import (
    JOB_ROUTES_TABLE,
    PROXY_ROUTES_TABLE,
    WATCH_JOBS_TABLE,
    read_archive_table,
)
from operator_tools.declared import DeclaredResource, OfflineRun
from operator_tools.offline import (
    STACK_FILE_DIR,
    StackFileError,
    load_stack_config,
    run_checked_stack,
    stack_names,
    stack_path,
)
from operator_tools.own_services import checklist
from operator_tools.stack_files import checked_stack_files, display_path


def _get(props: Mapping[str, Any], *path: str) -> Any:
    current: Any = props
    for key in path:
        if not isinstance(current, Mapping) or key not in current:
            return None
        current = current[key]
    return current


def _num(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _function(p: Mapping[str, Any]) -> str:
    sc = _get(p, "serviceConfig") or {}
    bc = _get(p, "buildConfig") or {}
    cpu = f" cpu={sc['availableCpu']}" if sc.get("availableCpu") else ""
    return (
        f"{bc.get('runtime')} entry={bc.get('entryPoint')} ingress={sc.get('ingressSettings')} "
        f"timeout={_num(sc.get('timeoutSeconds'))}s memory={sc.get('availableMemory')}{cpu} "
        f"instances={_num(sc.get('minInstanceCount'))}..{_num(sc.get('maxInstanceCount'))} "
        f"concurrency={_num(sc.get('maxInstanceRequestConcurrency'))} "
        f"runtimeSA={sc.get('serviceAccountEmail')} "
        f"buildSA={str(bc.get('serviceAccount', '')).rsplit('/', 1)[-1]} "
        f"callers={(sc.get('environmentVariables') or {}).get('DEDUP_ALLOWED_CALLERS')}"
        f"{_proxy_timeout(sc.get('environmentVariables') or {})}"
    )


def _proxy_timeout(env: Mapping[str, Any]) -> str:
    """` proxyTimeout=30s` for the proxy, else "" (its routes: its source object's row)."""
    timeout = env.get("DEDUP_PROXY_TIMEOUT_SECONDS")
    return f" proxyTimeout={timeout}s" if timeout is not None else ""


def _source_object(p: Mapping[str, Any]) -> str:
    """The object, and the job table its archive carries (the function's per-job data)."""
    where = f"gs://{p.get('bucket')}/{p.get('name')}"
    source = p.get("source")
    path = source.get("path") if isinstance(source, Mapping) else None
    if not isinstance(path, str):
        return where
    try:
        texts = {t: read_archive_table(path, t) for t in _TABLE_SUMMARIES}
        tables = {t: json.loads(text) for t, text in texts.items() if text is not None}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        return f"{where} (archive or job table unreadable: {exc})"
    shown = [_TABLE_SUMMARIES[table](content) for table, content in tables.items()]
    return f"{where} {' '.join(shown)}".rstrip()


def _proxy_routes(routes: Any) -> str:
    """`routes=job->target:resource,...` (the proxy's job table)."""
    if not isinstance(routes, Mapping):
        return f"routes={routes}"
    shown = [
        f"{job}->{spec.get('target')}:{spec.get('resource')}"
        if isinstance(spec, Mapping)
        else f"{job}->{spec}"
        for job, spec in sorted(routes.items())
    ]
    return f"routes={','.join(shown)}"


def _count(what: str) -> Callable[[Any], str]:
    return lambda table: f"{what}={len(table) if isinstance(table, list | dict) else table}"


_TABLE_SUMMARIES: dict[str, Callable[[Any], str]] = {
    JOB_ROUTES_TABLE: _count("jobRoutes"),
    PROXY_ROUTES_TABLE: _proxy_routes,
    WATCH_JOBS_TABLE: _count("watchedJobs"),
}


def _job(p: Mapping[str, Any]) -> str:
    retry = _get(p, "retryConfig") or {}
    target = _get(p, "httpTarget") or {}
    oidc = target.get("oidcToken") or {}
    paused = " PAUSED" if p.get("paused") else ""
    app_engine = _get(p, "appEngineHttpTarget")
    if isinstance(app_engine, Mapping):  # a team's App Engine service: no token
        routing = app_engine.get("appEngineRouting") or {}
        where = "/".join(str(routing[k]) for k in ("service", "version") if routing.get(k))
        target = {"httpMethod": app_engine.get("httpMethod"),
                  "uri": f"appengine:{where or 'default'}{app_engine.get('relativeUri')}"}
        oidc = {"serviceAccountEmail": "none (App Engine target)"}
    return (
        f"'{p.get('schedule')}' {p.get('timeZone')} deadline={p.get('attemptDeadline')} "
        f"retries={_num(retry.get('retryCount'))} "
        f"backoff={retry.get('minBackoffDuration')}..{retry.get('maxBackoffDuration')} "
        f"doublings={_num(retry.get('maxDoublings'))} maxRetry={retry.get('maxRetryDuration')} "
        f"{target.get('httpMethod')} {target.get('uri')} oidc={oidc.get('serviceAccountEmail')}"
        f"{paused}"
    )


def _iam(p: Mapping[str, Any]) -> str:
    on = next((p[key] for key in ("name", "repository", "bucket", "secretId", "datasetId",
                                  "topic", "project") if p.get(key)), None)
    condition = _get(p, "condition", "expression")
    when = f" if {condition}" if condition else ""
    return f"{p.get('role')} -> {p.get('member')} on {on}{when}"


def _database(p: Mapping[str, Any]) -> str:
    return (
        f"{p.get('name')} {p.get('type')} in {p.get('locationId')} "
        f"{p.get('deleteProtectionState')} {p.get('pointInTimeRecoveryEnablement')}"
    )


def _field(p: Mapping[str, Any]) -> str:
    ttl = "ttl" if p.get("ttlConfig") is not None else "no-ttl"
    index = "indexes disabled" if p.get("indexConfig") == {} else f"index={p.get('indexConfig')}"
    return f"{p.get('collection')}.{p.get('field')} {ttl}, {index} (db {p.get('database')})"


def _bucket(p: Mapping[str, Any]) -> str:
    return (
        f"{p.get('name')} {p.get('location')} uniformAccess={p.get('uniformBucketLevelAccess')} "
        f"publicAccessPrevention={p.get('publicAccessPrevention')}"
    )


_SUMMARIES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "gcp:cloudfunctionsv2/function:Function": _function,
    "gcp:cloudscheduler/job:Job": _job,
    "gcp:firestore/database:Database": _database,
    "gcp:firestore/field:Field": _field,
    "gcp:storage/bucket:Bucket": _bucket,
    "gcp:storage/bucketObject:BucketObject": _source_object,
    "gcp:projects/service:Service": lambda p: str(p.get("service")),
    "gcp:serviceaccount/account:Account": lambda p: (
        f"{p.get('accountId')} ({p.get('displayName')})"
    ),
    "gcp:artifactregistry/repository:Repository": lambda p: (
        f"{p.get('repositoryId')} {p.get('format')} in {p.get('location')}"
    ),
    "gcp:projects/iAMCustomRole:IAMCustomRole": lambda p: (
        f"projects/{p.get('project')}/roles/{p.get('roleId')} "
        f"permissions={','.join(p.get('permissions') or [])}"
    ),
    "time:index/sleep:Sleep": lambda p: (
        f"wait {p.get('createDuration')} for IAM propagation, again on a new account "
        f"({', '.join(sorted(p.get('triggers') or {}))})"
    ),
}


def summarize(resource: DeclaredResource) -> str:
    """The key settings of one resource, on one line."""
    if not resource.custom:
        return "(component)"
    if resource.type.endswith(("IamMember", "IAMMember")):
        return _iam(resource.props)
    summary = _SUMMARIES.get(resource.type)
    if summary is not None:
        return summary(resource.props)
    return json.dumps(resource.props, sort_keys=True, default=str)[:160]


def render(run: OfflineRun, now: datetime | None = None,
           config: StackConfig | None = None) -> str:
    """The plan as text: a header, one row per resource, the outputs, the advisories
    (DST changes the jobs' schedules run into within a year of `now`), then what the kit
    cannot see of the team's own services (`config`'s, operator_tools/own_services.py)."""
    rows = [
        (r.type, r.name + (" [protected]" if r.protect else ""), summarize(r))
        for r in run.resources
    ]
    type_width = max(len(r[0]) for r in rows)
    name_width = max(len(r[1]) for r in rows)
    lines = [
        f"Offline plan for stack {run.stack!r}: {len(rows)} resources "
        f"({sum(1 for r in run.resources if r.custom)} cloud resources, "
        f"{sum(1 for r in run.resources if not r.custom)} components)",
        "",
        f"{'TYPE':<{type_width}}  {'NAME':<{name_width}}  KEY SETTINGS",
    ]
    lines += [f"{t:<{type_width}}  {n:<{name_width}}  {s}" for t, n, s in rows]
    lines += ["", "Outputs:"]
    lines += [f"  {key}: {json.dumps(value)}" for key, value in sorted(run.outputs.items())]
    advisories = dst_advisories(run, now)
    if advisories:
        lines += ["", "Advisories:"]
        lines += [f"  [advisory] {name}: {message}" for name, message in advisories]
    unseen = checklist(config) if config is not None else []
    if unseen:
        lines += ["", *unseen]
    return "\n".join(lines)


def dst_advisories(run: OfflineRun, now: datetime | None = None) -> list[tuple[str, str]]:
    """(job resource name, advisory) for each Scheduler job whose schedule runs into a DST
    change within a year of `now` whose behaviour its stack file did not choose (as the
    policy pack's scheduler-job-dst-change under `make policy-check`)."""
    now = now or datetime.now(UTC)  # one year ahead of the same instant for every job
    # Jobs share schedules (every hour at :00, ...): each (schedule, zone) is judged once.
    judged: dict[tuple[str, str, frozenset[HazardKind]], str | None] = {}
    found: list[tuple[str, str]] = []
    for resource in run.resources:
        if resource.type != "gcp:cloudscheduler/job:Job":
            continue
        schedule, zone = resource.props.get("schedule"), resource.props.get("timeZone")
        if not isinstance(schedule, str):
            continue
        chosen = chosen_kinds(run.dst_chosen.get(str(resource.props.get("name"))))
        key = (schedule, zone if isinstance(zone, str) else "Etc/UTC", chosen)
        if key not in judged:
            try:
                judged[key] = dst_advisory(key[0], key[1], now, chosen=chosen)
            except ScheduleError:
                judged[key] = None  # the config check refuses such a schedule before the plan
        if (advisory := judged[key]) is not None:
            found.append((resource.name, advisory))
    return found


def contract_error(path: object, findings: Sequence[Finding]) -> str:
    """The error for a stack whose declarations break Google's API contracts
    (docs/contracts.md): one line per finding."""
    lines = [f"error: {path}: {len(findings)} declared value(s) that Google's APIs would "
             "refuse (contract checks, docs/contracts.md):"]
    lines += [f"  - {finding.message()}" for finding in findings]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scheduler-dedup plan",
        description="Print what the kit's Pulumi program declares for each stack (offline), "
        "after validating its config and importing its job logic as the function would.",
    )
    parser.add_argument(
        "stacks",
        nargs="*",
        metavar="STACK",
        help=f"stack name ({', '.join(stack_names()) or 'none yet'}) or stack file path; "
        "none: every Pulumi.<stack>.yaml in stacks/ (none yet: the kit's examples)",
    )
    parser.add_argument("--stack", action="append", default=[], dest="named",
                        help="the same as a STACK argument, as policy-check, demo and serve "
                        "take it (repeatable)")
    args = parser.parse_args(argv)
    stacks: list[str | Path] = [*args.stacks, *args.named]
    if not stacks:
        files, examples = checked_stack_files()
        if examples:
            print(f"no Pulumi.<stack>.yaml in {display_path(STACK_FILE_DIR)}/ yet: planning the "
                  "kit's example stacks (add yours: docs/adopting.md)\n")
        stacks = list(files)
        if not stacks:
            print(f"no Pulumi.<stack>.yaml in {display_path(STACK_FILE_DIR)}/: nothing to plan "
                  "(add one: pulumi stack init <stack>, or copy a stack file there)",
                  file=sys.stderr)
            return 2
    status = 0
    for index, stack in enumerate(stacks):
        if index:
            print()
        try:
            path = stack_path(stack)
            run = run_checked_stack(path)
        except FileNotFoundError as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 2
            continue
        except ConfigError as exc:  # names the keys; the file is the reader's context
            print(f"error: {path}: {exc}", file=sys.stderr)
            status = 2
            continue
        except StackFileError as exc:  # names its file, line and column itself
            print(f"error: {exc}", file=sys.stderr)
            status = 2
            continue
        findings = check_resources(run.resources)
        if findings:  # what Google's API would refuse: as undeployable as a config error
            print(contract_error(path, findings), file=sys.stderr)
            status = 2
            continue
        print(render(run, config=load_config(load_stack_config(path))))
    return status


if __name__ == "__main__":
    from operator_tools import not_an_entry_point

    not_an_entry_point("plan")

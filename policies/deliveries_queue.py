"""Stack policies on the watchdog's deliveries queue (the Cloud Tasks queue its
DEDUP_WATCH_QUEUE names): the queue is judged like a Scheduler job, and only the watchdog
creates tasks on it.

A task on that queue is a delivery: it carries the run's Scheduler headers and body and an
OIDC token of the watchdog's task account (DEDUP_WATCH_TASK_ACCOUNT), which the dedup
function, the proxy and the runtimes accept (their DEDUP_ALLOWED_CALLERS name it). So:
- the queue's httpTarget overrides, which Cloud Tasks applies to every task of the queue,
  may change nothing of a delivery: a URI override must leave each delivery URL of the
  watchdog (DEDUP_WATCH_TARGET_URL, DEDUP_WATCH_PROXY_URL, DEDUP_WATCH_RUNTIME_URLS) as it
  is, compared by normalised origin, path and query (policies/urls.py), whatever its
  uriOverrideEnforceMode (judged as ALWAYS, the worst case); an OIDC override must name
  the watchdog's own task account, its audience (if set) every delivery URL; no OAuth
  token override, no header override (each would replace what the function reads: the
  job's name, its schedule time, X-Dedup-*), no method but POST;
- nobody but the watchdog may create tasks there (cloudtasks.tasks.create, whatever role
  carries it, granted on the queue or its project, a folder or the organization): whoever
  can names a run's task first (the watchdog then reads ALREADY_EXISTS) or delivers a run
  with the watchdog's token. A role the pack does not know, granted there, fails closed.

Not judged while a value it needs is not known yet (judged once known).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from policies.deployers import member_email
from policies.facts import StackFacts, stack_facts
from policies.gcp import TASKS_QUEUE
from policies.grants import is_hierarchy_level, role_not_known_yet, role_permissions
from policies.job_tables import BUCKET_OBJECT
from policies.kit_resources import (
    PROXY_URL_ENV,
    QUEUE_ENV,
    RUNTIME_URLS_ENV,
    TARGET_URL_ENV,
    environment,
    label,
    runtime_email,
    task_account,
)
from policies.model import Finding, Resource
from policies.reach import granted_on, project_wide, queue_of
from policies.team_services import watch_table_urls
from policies.urls import NormalUrl, normal_url
from policies.values import MISSING, as_list, as_mapping, get, is_unknown, known_str

TASKS_CREATE: Final = "cloudtasks.tasks.create"
DELIVERY_METHOD: Final = "POST"
_QUEUE_NAME: Final = re.compile(r"projects/([^/]+)/locations/([^/]+)/queues/([^/]+)")


@dataclass(frozen=True)
class DeliveriesQueue:
    """A queue the stack's watchdogs deliver runs through, and what its tasks must be."""

    name: str | None
    """`projects/P/locations/L/queues/Q`; None while a watchdog's DEDUP_WATCH_QUEUE is not
    known (then any queue of the stack may be it)."""
    task_accounts: frozenset[str] | None
    """Their DEDUP_WATCH_TASK_ACCOUNT e-mails (empty: none set); None while one is not
    known."""
    creators: frozenset[str]
    """The e-mails that may create its tasks: the watchdogs' runtime and task accounts."""
    delivery_urls: tuple[NormalUrl, ...] | None
    """Where its tasks go (normalised); None while one is not known or not a plain URL."""

    @property
    def project(self) -> str | None:
        match = _QUEUE_NAME.fullmatch(self.name or "")
        return match[1] if match else None


def _delivery_urls(watchdog: Resource, objects: Sequence[Resource]) -> tuple[NormalUrl, ...] | None:
    """The URLs the watchdog delivers to (normalised): its settings' and its job table's
    (a team service's jobs: policies/team_services.py; a table not readable here adds
    none); None while one is not known or is no plain http(s) URL (nothing can be checked
    against it)."""
    env = as_mapping(environment(watchdog))
    if env is None:
        return None if is_unknown(environment(watchdog)) else ()
    texts: list[Any] = [get(env, TARGET_URL_ENV), get(env, PROXY_URL_ENV),
                        *sorted((watch_table_urls(watchdog, objects) or {}).values())]
    runtimes = get(env, RUNTIME_URLS_ENV)
    if is_unknown(runtimes):
        return None
    if runtimes is not MISSING:
        try:
            table = json.loads(runtimes) if isinstance(runtimes, str) else None
        except json.JSONDecodeError:
            table = None
        if not isinstance(table, Mapping):
            return None
        texts += list(table.values())
    found: list[NormalUrl] = []
    for value in texts:
        if value is MISSING:
            continue
        url = normal_url(value) if isinstance(value, str) and not is_unknown(value) else None
        if url is None:
            return None
        found.append(url)
    return tuple(found)


def deliveries_queues(facts: StackFacts) -> tuple[DeliveriesQueue, ...]:
    """The queues the stack's watchdogs name, each with its watchdogs (derived once per
    stack: `facts.derived(deliveries_queues)`)."""
    by_name: dict[str | None, list[Resource]] = {}
    objects = facts.of_type(BUCKET_OBJECT)
    for watchdog in facts.watchdog_functions:
        named = get(environment(watchdog), QUEUE_ENV)
        if named is MISSING:
            continue  # delivers by itself, or not at all
        by_name.setdefault(known_str(named), []).append(watchdog)
    found: list[DeliveriesQueue] = []
    for name, watchdogs in by_name.items():
        accounts = [task_account(w) for w in watchdogs]  # MISSING: none set
        known = {a for a in accounts if isinstance(a, str) and not is_unknown(a)}
        creators = known | {e for w in watchdogs if (e := runtime_email(w))}
        unsure = any(is_unknown(a) for a in accounts)
        urls: list[NormalUrl] | None = []
        for watchdog in watchdogs:
            own = _delivery_urls(watchdog, objects)
            urls = None if own is None or urls is None else [*urls, *own]
        found.append(DeliveriesQueue(
            name, None if unsure else frozenset(known),
            frozenset(creators), tuple(urls) if urls is not None else None,
        ))
    return tuple(found)


def _is_queue(declared: Resource, queue: DeliveriesQueue) -> bool:
    """The declared Queue may be `queue` (its name, location and project; a part not known
    yet, or a project unset (the provider's), matches)."""
    if queue.name is None:
        return True
    match = _QUEUE_NAME.fullmatch(queue.name)
    if match is None:
        return False  # no queue name (the watchdog refuses to start with it)
    wanted = {"project": match[1], "location": match[2], "name": match[3]}
    for key, value in wanted.items():
        have = get(declared.props, key)
        if key == "project" and have is MISSING:
            continue
        if not is_unknown(have) and known_str(have) != value:
            return False
    return True


# --- dedup-deliveries-queue-target --------------------------------------------------------


_OVERRIDE_PARTS: Final = (
    ("scheme", ("scheme",)), ("host", ("host",)), ("port", ("port",)),
    ("path", ("pathOverride", "path")), ("query", ("queryOverride", "queryParams")),
)


def _override_parts(override: Any) -> dict[str, str | None] | None:
    """The uriOverride's scheme, host, port, path and query (None: not overridden); None
    while one is not known yet."""
    parts: dict[str, str | None] = {}
    for key, path in _OVERRIDE_PARTS:
        value = get(override, *path)
        if is_unknown(value):
            return None
        parts[key] = None if value is MISSING else str(value)
    return parts


def _applied(parts: Mapping[str, str | None], url: NormalUrl) -> NormalUrl | None:
    """`url` with the override's `parts` applied (as ALWAYS); None if that is no plain
    URL."""
    scheme = (parts["scheme"] or url.scheme).lower()
    host = parts["host"] or url.host
    port = parts["port"] or (str(url.port) if scheme == url.scheme else "")
    path = parts["path"] if parts["path"] is not None else url.path
    query = parts["query"] if parts["query"] is not None else url.query
    path = path if path.startswith("/") else f"/{path}"
    return normal_url(
        f"{scheme}://{host}{f':{port}' if port else ''}{path}{f'?{query}' if query else ''}")


def _uri_override_problem(override: Any, queue: DeliveriesQueue) -> str | None:
    parts = _override_parts(override)
    if queue.delivery_urls is None or parts is None:
        return None  # judged once the delivery URLs and the override are known
    if not queue.delivery_urls:
        return "a uriOverride, on a queue that carries no delivery URL of the watchdog"
    for url in queue.delivery_urls:
        applied = _applied(parts, url)
        if applied is None or not applied.same_target(url):
            return (f"a uriOverride that sends the delivery to {url} to "
                    f"{applied or 'no plain URL'}")
    return None


def _oidc_problems(oidc: Any, queue: DeliveriesQueue) -> list[str]:
    problems: list[str] = []
    email = get(oidc, "serviceAccountEmail")
    accounts = queue.task_accounts
    if not is_unknown(email) and accounts is not None:
        text = known_str(email)
        if text is None or accounts != {text.strip().lower()}:
            problems.append(
                f"an oidcToken override of {text or 'no account'}, not the watchdog's own "
                f"task account ({', '.join(sorted(accounts)) or 'none set'})")
    audience = get(oidc, "audience")
    if audience is MISSING or is_unknown(audience) or queue.delivery_urls is None:
        return problems
    wanted = normal_url(audience) if isinstance(audience, str) else None
    if wanted is None or not queue.delivery_urls or not all(
            wanted.same_target(url) for url in queue.delivery_urls):
        problems.append(
            f"an oidcToken audience override {audience!r}, not the URL every delivery goes "
            "to (each task sets its own delivery URL as the audience)")
    return problems


def _target_problems(target: Any, queue: DeliveriesQueue) -> list[str]:
    """What the queue's httpTarget changes of the watchdog's deliveries."""
    problems: list[str] = []
    method = get(target, "httpMethod")
    if known_str(method) is not None and str(method).upper() != DELIVERY_METHOD:
        problems.append(f"an httpMethod override {method!r} (deliveries are POSTs with a body)")
    uri = get(target, "uriOverride")
    if uri is not MISSING and not is_unknown(uri):
        problem = _uri_override_problem(uri, queue)
        if problem:
            problems.append(problem)
    oidc = get(target, "oidcToken")
    if oidc is not MISSING and not is_unknown(oidc):
        problems += _oidc_problems(oidc, queue)
    oauth = get(target, "oauthToken")
    if oauth is not MISSING and not is_unknown(oauth):
        problems.append("an oauthToken override (deliveries carry the watchdog's OIDC token)")
    headers = get(target, "headerOverrides")
    if not is_unknown(headers) and (listed := as_list(headers)):
        keys = [known_str(get(h, "header", "key")) or "?" for h in listed]
        problems.append(
            f"headerOverrides {', '.join(keys)} (each replaces, in every delivery, what the "
            "function reads: the job's name, its schedule time, X-Dedup-*)")
    return problems


def queue_target(resources: Sequence[Resource]) -> list[Finding]:
    """The deliveries queue's httpTarget overrides are absent, or change nothing of where
    the watchdog's deliveries go and whose token they carry."""
    facts = stack_facts(resources)
    findings: list[Finding] = []
    for queue in facts.derived(deliveries_queues):
        for declared in facts.of_type(TASKS_QUEUE):
            target = get(declared.props, "httpTarget")
            if target is MISSING or is_unknown(target) or not _is_queue(declared, queue):
                continue
            for problem in _target_problems(target, queue):
                findings.append(Finding(
                    f"the watchdog's deliveries queue {label(declared)} sets {problem}: "
                    "Cloud Tasks applies a queue's httpTarget to every task, so each "
                    "catch-up and re-run, with a token the kit's functions accept, would go "
                    "elsewhere or run another job: remove httpTarget (the kit sets none)",
                    declared.urn,
                ))
    return findings


# --- dedup-deliveries-queue-task-creators ---------------------------------------------------


def _reached(resource: Resource, queues: Sequence[DeliveriesQueue]) -> list[DeliveriesQueue]:
    """The deliveries queues a grant on `resource` reaches (on the queue itself, or its
    project, a folder or the organization)."""
    if is_hierarchy_level(resource.type):
        return [q for q in queues if q.project and project_wide(resource, q.project)]
    on = queue_of(resource)
    return [q for q in queues if q.name and on == q.name]


def task_creators(resources: Sequence[Resource]) -> list[Finding]:
    """Only the watchdog (its runtime or task account) may create tasks on its deliveries
    queue: judged by the permission, whatever role carries it; a role the pack does not
    know, granted on the queue or a level above it, fails closed."""
    facts = stack_facts(resources)
    queues = facts.derived(deliveries_queues)
    if not queues:
        return []
    declared = facts.custom_roles
    findings: list[Finding] = []
    for resource, grants in facts.granting:
        reached = _reached(resource, queues)
        if not reached:
            continue
        allowed = frozenset().union(*(q.creators for q in reached))
        where = granted_on(resource)
        for grant in grants:
            role = known_str(grant.role)
            if role is None:
                continue
            allows = role_permissions(role, declared)
            if allows is None and role_not_known_yet(role, declared):
                continue  # a custom role of this update: judged once its permissions are
            if allows is not None and TASKS_CREATE not in allows:
                continue
            why = ("the pack does not know what it allows (policies/permissions.py), so "
                   f"it may carry {TASKS_CREATE}" if allows is None else
                   f"it allows {TASKS_CREATE}")
            for member in grant.members or []:
                text = known_str(member)
                if text is None or member_email(text) in allowed:
                    continue  # not known yet, or the watchdog
                findings.append(Finding(
                    f"{role} on {where} lets {text} create tasks on the watchdog's "
                    f"deliveries queue ({why}): whoever can names a run's task first (the "
                    "watchdog takes the name as already queued, and the run never comes) "
                    "or delivers a run with the watchdog's token: remove the grant; only "
                    "the watchdog enqueues there",
                    resource.urn,
                ))
    return findings

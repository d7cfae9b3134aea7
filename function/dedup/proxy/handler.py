"""Idempotent proxy for Google Cloud API targets: one downstream execution per run.

A Scheduler job calls the proxy instead of `*.googleapis.com`. The proxy applies the same
claim protocol as any job (protocol.py); its job logic starts one downstream execution
with the run's token (tokens.py: the run's dedup key `run_id` and its HMAC under
DEDUP_TOKEN_SECRET, so the downstream can tell it from a forged one) and returns the
execution's name, which the record keeps and replays to duplicates. A retryable downstream
failure raises (claim released, 500, Scheduler retries); any other (the downstream refused:
403, 404, any other 4xx) raises PermanentFailure: the record is `failed` and `permanent`
with the status and reason, the answer 200 (Scheduler stops), the watchdog reports the run
`failed`, later deliveries replay the failure without starting anything, and `make rerun`
(the next generation) starts it again once the cause is fixed. Logged as an ERROR.

Settings (read once at start-up; the per-job routes from the proxy's job table, a file
shipped with its code, see tables.py):
- DEDUP_PROXY_TARGET: workflow | run_job | build_trigger, with DEDUP_PROXY_RESOURCE:
  projects/P/locations/L/{workflows/W | jobs/J | triggers/T}: the default target
  (a build_trigger also needs DEDUP_PROXY_TOPIC, projects/P/topics/T: see targets.py).
- DEDUP_PROXY_TOKEN_NAME: optional; where the token goes (argument key / env var /
  substitution); defaults dedup_token / DEDUP_TOKEN / _DEDUP_TOKEN; never a name the
  proxy already sends (targets.RESERVED_TOKEN_NAMES).
- job_tables/proxy_routes.json (DEDUP_TABLES_DIR to read it elsewhere): optional JSON
  {"job-id": {"target": ..., "resource": ..., "tokenName": ..., "container": ...,
  "topic": ...}}: per-job targets.
- DEDUP_TOKEN_SECRET: required; the key of the tokens' HMAC (tokens.py).
- DEDUP_PROXY_TIMEOUT_SECONDS (default 30): bound on one start request.
- DEDUP_PROXY_API_BASE: optional base URL replacing every googleapis.com host: https on
  `*.googleapis.com`, or loopback (tests).

The proxy parses the Scheduler job's body (a workflow's `payload`): one nested too deeply
to parse is refused with a 400 before anything is claimed (check_body).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

import requests
from google.auth import exceptions as auth_exceptions

from dedup.job_logic import JobRegistry
from dedup.keys import format_instant
from dedup.proxy.targets import (
    DownstreamClient,
    DownstreamError,
    SessionFactory,
    StartInfo,
    Target,
    api_base_setting,
    parse_target,
)
from dedup.proxy.tokens import mint_token, token_secret_setting
from dedup.run_context import Job, PermanentFailure, RunContext
from dedup.settings import SettingsError, read_table
from dedup.tables import PROXY_ROUTES_TABLE

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,500}")
_ROUTE_KEYS = {"target", "resource", "tokenName", "container", "topic"}

Emit = Callable[[Mapping[str, Any]], None]


@dataclass(frozen=True)
class ProxySettings:
    default: Target | None
    token_secret: bytes = field(repr=False)
    routes: Mapping[str, Target] = field(default_factory=dict)
    timeout_seconds: float = 30.0
    api_base: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ProxySettings:
        env = os.environ if environ is None else environ
        kind = env.get("DEDUP_PROXY_TARGET", "")
        resource = env.get("DEDUP_PROXY_RESOURCE", "")
        token_name = env.get("DEDUP_PROXY_TOKEN_NAME") or None
        topic = env.get("DEDUP_PROXY_TOPIC") or None
        default: Target | None = None
        if kind or resource:
            if not (kind and resource):
                missing = "DEDUP_PROXY_RESOURCE" if kind else "DEDUP_PROXY_TARGET"
                raise SettingsError(
                    f"{missing} is not set: DEDUP_PROXY_TARGET and DEDUP_PROXY_RESOURCE go "
                    "together (e.g. workflow + projects/P/locations/L/workflows/W)"
                )
            default = parse_target(
                kind, resource, token_name, None, "DEDUP_PROXY_TARGET", topic
            )
        elif token_name:
            raise SettingsError("DEDUP_PROXY_TOKEN_NAME is set but DEDUP_PROXY_TARGET is not")
        table = read_table(env, PROXY_ROUTES_TABLE)
        routes = parse_proxy_routes(*table) if table is not None else {}
        if default is None and not routes:
            raise SettingsError(
                "the proxy has no target: set DEDUP_PROXY_TARGET (workflow | run_job | "
                f"build_trigger) and DEDUP_PROXY_RESOURCE, or list routes in {PROXY_ROUTES_TABLE}"
            )
        raw_timeout = env.get("DEDUP_PROXY_TIMEOUT_SECONDS", "")
        timeout = cls.timeout_seconds
        if raw_timeout:
            try:
                timeout = float(raw_timeout)
            except ValueError:
                raise SettingsError(
                    f"DEDUP_PROXY_TIMEOUT_SECONDS={raw_timeout!r} is not a number of seconds"
                ) from None
            if not 0.1 <= timeout <= 600:
                raise SettingsError(
                    f"DEDUP_PROXY_TIMEOUT_SECONDS={raw_timeout!r} must be between 0.1 and 600"
                )
        return cls(
            default=default,
            token_secret=token_secret_setting(env, "the proxy"),
            routes=routes,
            timeout_seconds=timeout,
            api_base=api_base_setting(env.get("DEDUP_PROXY_API_BASE"), "DEDUP_PROXY_API_BASE"),
        )


def parse_proxy_routes(raw: str, where: str = PROXY_ROUTES_TABLE) -> dict[str, Target]:
    """The proxy's job table (per-job targets); `where` names the file in errors."""
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise SettingsError(
            f'{where} must be a JSON object {{"job-id": {{"target": "workflow", '
            '"resource": "projects/P/locations/L/workflows/W"}}'
        )
    routes: dict[str, Target] = {}
    for job_id, spec in parsed.items():
        setting = f"{where}[{job_id!r}]"
        if not _JOB_ID.fullmatch(job_id):
            raise SettingsError(f"{setting}: {job_id!r} is not a Cloud Scheduler job ID")
        if not isinstance(spec, dict):
            raise SettingsError(f'{setting} must be an object {{"target": ..., "resource": ...}}')
        unknown = sorted(set(spec) - _ROUTE_KEYS)
        if unknown:
            raise SettingsError(
                f"{setting}: unknown key(s) {', '.join(unknown)}; allowed: "
                f"{', '.join(sorted(_ROUTE_KEYS))}"
            )
        values = {key: spec.get(key) for key in _ROUTE_KEYS}
        for key, value in values.items():
            if value is not None and not isinstance(value, str):
                raise SettingsError(f"{setting}: {key!r} must be a string")
        if not values["target"] or not values["resource"]:
            raise SettingsError(f"{setting} needs both 'target' and 'resource'")
        routes[job_id] = parse_target(
            str(values["target"]), str(values["resource"]),
            values["tokenName"], values["container"], setting, values["topic"],
        )
    return routes


def authorized_sessions() -> SessionFactory:
    """Application Default Credentials (the function's own service account on Cloud Run),
    one AuthorizedSession per thread sharing those credentials."""
    from google.auth import default
    from google.auth.transport.requests import AuthorizedSession

    try:
        credentials, _ = default(scopes=[CLOUD_PLATFORM_SCOPE])
    except auth_exceptions.DefaultCredentialsError as exc:
        raise SettingsError(
            f"the proxy found no Application Default Credentials: {exc} (on Cloud Run the "
            "runtime service account provides them; locally run `gcloud auth "
            "application-default login` or set GOOGLE_APPLICATION_CREDENTIALS)"
        ) from exc
    local = threading.local()

    def session() -> requests.Session:
        current = getattr(local, "session", None)
        if current is None:
            current = AuthorizedSession(credentials)  # type: ignore[no-untyped-call]
            local.session = current
        return current

    return session


def check_body(body: bytes) -> str | None:
    """The 400's reason for a body the proxy could not parse safely, else None: JSON nested
    deeper than Python's parser allows (non-JSON bodies are passed on as text)."""
    try:
        json.loads(body)
    except RecursionError:
        return (
            "the request body is JSON nested too deeply to parse: flatten the Scheduler "
            "job's body (the proxy passes it on as the workflow's payload)"
        )
    except ValueError:
        pass  # not JSON: passed on as text
    return None


class ProxyJob:
    """Job logic: start the target's execution with the run's token; return its name."""

    def __init__(
        self, target: Target, client: DownstreamClient, emit: Emit, token_secret: bytes
    ) -> None:
        self.target = target
        self._client = client
        self._emit = emit
        self._secret = token_secret

    def __call__(self, context: RunContext) -> dict[str, Any]:
        token = mint_token(self._secret, context.run_id)
        base: dict[str, Any] = {
            "target": self.target.kind.value,
            "resource": self.target.resource,
            "token": token,
        }
        if context.claim_lost.is_set():
            raise RuntimeError("claim lost before the start request: not starting anything")
        info = StartInfo(
            token=token,
            job=context.job_name,
            schedule_time=format_instant(context.schedule_time),
            payload=context.body,
        )
        try:
            started = self._client.start(self.target, info)
        except DownstreamError as exc:
            self._log(context, exc)
            if exc.retryable:
                raise
            raise PermanentFailure(
                f"{self.target.kind.value} refused the start request: {exc.reason}",
                {**base, "execution": None,
                 "error": {"status": exc.status, "reason": exc.reason, "retryable": False}},
            ) from exc
        self._emit({
            "severity": "INFO" if started.note is None else "WARNING",
            "message": f"{context.job_name}: started {self.target.kind.value} execution "
            f"{started.execution or _message_name(started.message_id)}",
            "component": "proxy",
            "run_id": context.run_id,
            "job": context.job_name,
            "target": self.target.kind.value,
            "resource": self.target.resource,
            "execution": started.execution,
            "operation": started.operation,
            "message_id": started.message_id,
            "detail": started.note,
        })
        result = {**base, "execution": started.execution}
        if started.operation:
            result["operation"] = started.operation
        if started.message_id:
            result["message_id"] = started.message_id
        return result

    def _log(self, context: RunContext, exc: DownstreamError) -> None:
        if exc.retryable:
            message = (
                f"{context.job_name}: {self.target.kind.value} start failed, retryable "
                f"(claim released, Scheduler retries): {exc.reason}"
            )
        else:
            message = (
                f"{context.job_name}: {self.target.kind.value} rejected the start request: "
                f"{exc.reason}; run recorded failed (permanent), Scheduler stops: fix the "
                "cause, then `make rerun`"
            )
        self._emit({
            "severity": "WARNING" if exc.retryable else "ERROR",
            "message": message,
            "component": "proxy",
            "run_id": context.run_id,
            "job": context.job_name,
            "target": self.target.kind.value,
            "resource": self.target.resource,
            "downstream_status": exc.status,
            "retryable": exc.retryable,
            "reason": exc.reason,
        })


def _message_name(message_id: str | None) -> str:
    """A build is known to the proxy only by the Pub/Sub message that starts it."""
    return f"(started by Pub/Sub message {message_id})" if message_id else "(name unknown)"


class UnroutedJob:
    """A job ID with no route and no default target: a permanent failure, not retried."""

    def __init__(self, emit: Emit) -> None:
        self._emit = emit

    def __call__(self, context: RunContext) -> NoReturn:
        reason = (
            f"no downstream target for job {context.job_name!r}: add it to "
            f"{PROXY_ROUTES_TABLE} or set DEDUP_PROXY_TARGET and DEDUP_PROXY_RESOURCE"
        )
        self._emit({
            "severity": "ERROR",
            "message": f"{context.job_name}: {reason}",
            "component": "proxy",
            "run_id": context.run_id,
            "job": context.job_name,
            "reason": reason,
        })
        raise PermanentFailure(reason, {
            "token": None, "execution": None,
            "error": {"status": None, "reason": reason, "retryable": False},
        })


def proxy_jobs(settings: ProxySettings, client: DownstreamClient, emit: Emit) -> JobRegistry:
    """The proxy's job logic per job ID, in the registry the HTTP handler already uses."""
    secret = settings.token_secret
    default: Job = (
        ProxyJob(settings.default, client, emit, secret) if settings.default
        else UnroutedJob(emit)
    )
    routes: dict[str, Job] = {
        job_id: ProxyJob(target, client, emit, secret)
        for job_id, target in settings.routes.items()
    }
    return JobRegistry(default, routes)

"""Helpers for the proxy tests: proxy settings, in-process proxies, ADC for served ones."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import requests
from google.auth.credentials import AnonymousCredentials
from google.auth.transport.requests import AuthorizedSession
from google.cloud import firestore

from dedup.entry.app import build_proxy_handler
from dedup.keys import RunKey, parse_schedule_time
from dedup.proxy.handler import ProxySettings
from dedup.proxy.targets import SessionFactory, Target, TargetKind
from dedup.proxy.tokens import TOKEN_SECRET_ENV, mint_token
from local_stack.deliveries import LOCATION, PROJECT, InProcessFunction, settings_for
from local_stack.fake_google_apis import BUILD_TRIGGER, RUN_JOB, WORKFLOW
from local_stack.fake_google_apis import service_account_file as fake_service_account_file
from local_stack.rpc_counter import RpcCounter
from local_stack.tables import job_tables_env

RESOURCES = {
    WORKFLOW: f"projects/{PROJECT}/locations/{LOCATION}/workflows/nightly-export",
    RUN_JOB: f"projects/{PROJECT}/locations/{LOCATION}/jobs/export-job",
    BUILD_TRIGGER: f"projects/{PROJECT}/locations/{LOCATION}/triggers/release-trigger",
}
# The Pub/Sub topic the build trigger listens to: what the proxy publishes to.
BUILD_TOPIC = f"projects/{PROJECT}/topics/dedup-build-release-trigger"
# What each start request names: the topic, for a build trigger.
STARTED_RESOURCES = {**RESOURCES, BUILD_TRIGGER: BUILD_TOPIC}
# The stack's token secret (DEDUP_TOKEN_SECRET) shared by the proxy and downstream guards.
TOKEN_SECRET = "test-token-secret-0123456789abcdefghijklmnop"
# One Scheduler job per target kind, routed by the proxy's job table (proxy_routes.json).
JOBS = {WORKFLOW: "export-workflow", RUN_JOB: "export-run-job", BUILD_TRIGGER: "export-build"}
KINDS = (WORKFLOW, RUN_JOB, BUILD_TRIGGER)
SCHEDULE = "2026-10-16T12:00:00Z"


def target(kind: str) -> Target:
    from dedup.proxy.targets import DEFAULT_TOKEN_NAME

    target_kind = TargetKind(kind)
    topic = BUILD_TOPIC if target_kind is TargetKind.BUILD_TRIGGER else None
    return Target(target_kind, RESOURCES[kind], DEFAULT_TOKEN_NAME[target_kind], topic=topic)


def route(kind: str) -> dict[str, str]:
    """One entry of the proxy's routes, as infra/dedup_proxy.py writes it."""
    entry = {"target": kind, "resource": RESOURCES[kind]}
    return {**entry, "topic": BUILD_TOPIC} if kind == BUILD_TRIGGER else entry


def routes() -> dict[str, dict[str, str]]:
    return {JOBS[kind]: route(kind) for kind in KINDS}


def run_id(job: str, schedule_time: str = SCHEDULE) -> str:
    return RunKey(PROJECT, LOCATION, job, parse_schedule_time(schedule_time)).run_id


def token_for(job: str, schedule_time: str = SCHEDULE) -> str:
    """The token the proxy sends downstream for one run: its run ID and HMAC."""
    return mint_token(TOKEN_SECRET.encode(), run_id(job, schedule_time))


def started_name(result: Mapping[str, Any]) -> str | None:
    """What names the start in a run's result: the execution, or a build's Pub/Sub message."""
    return result.get("message_id") or result["execution"]  # type: ignore[no-any-return]


def anonymous_sessions() -> SessionFactory:
    """Authorized sessions without credentials (no token fetch, no network)."""
    local = threading.local()

    def session() -> requests.Session:
        current = getattr(local, "session", None)
        if current is None:
            current = AuthorizedSession(AnonymousCredentials())  # type: ignore[no-untyped-call]
            local.session = current
        return current

    return session


def in_process_proxy(
    collection: str,
    api_base: str,
    *,
    timeout_seconds: float = 5.0,
    default: Target | None = None,
    routes: Mapping[str, Target] | None = None,
    **overrides: Any,
) -> InProcessFunction:
    settings = settings_for(collection, **overrides)
    if routes is None and default is None:
        routes = {JOBS[kind]: target(kind) for kind in KINDS}
    proxy = ProxySettings(
        default=default, token_secret=TOKEN_SECRET.encode(), routes=dict(routes or {}),
        timeout_seconds=timeout_seconds, api_base=api_base,
    )
    client = firestore.Client(project=PROJECT)
    counter = RpcCounter(client)
    logs: list[Mapping[str, Any]] = []
    handler = build_proxy_handler(
        settings, proxy, client, logs.append, sessions=anonymous_sessions()
    )
    return InProcessFunction(handler, client, counter, logs)


def service_account_file(directory: Path, token_uri: str) -> Path:
    """A service-account key whose token endpoint is the fake: ADC works offline."""
    return fake_service_account_file(directory, token_uri, PROJECT)


def proxy_env(
    collection: str, api_base: str, credentials: Path, **extra: str
) -> dict[str, str]:
    """Environment of a served proxy (FunctionServer target proxy_scheduled_job)."""
    return {
        "DEDUP_PROJECT": PROJECT,
        "DEDUP_LOCATION": LOCATION,
        "DEDUP_COLLECTION": collection,
        "DEDUP_STORE_TIMEOUT_SECONDS": "5",
        **job_tables_env(proxy_routes=routes()),
        "DEDUP_PROXY_API_BASE": api_base,
        "DEDUP_PROXY_TIMEOUT_SECONDS": "5",
        TOKEN_SECRET_ENV: TOKEN_SECRET,
        "GOOGLE_APPLICATION_CREDENTIALS": str(credentials),
        "FIRESTORE_EMULATOR_HOST": os.environ["FIRESTORE_EMULATOR_HOST"],
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        **extra,
    }

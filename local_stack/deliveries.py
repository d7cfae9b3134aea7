"""Build deliveries as Cloud Scheduler sends them, and in-process handlers to receive them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from google.cloud import firestore

from dedup.entry.app import build_handler
from dedup.entry.http import DedupHandler
from dedup.settings import Settings
from local_stack.rpc_counter import RpcCounter

# One builder of forwarded OIDC tokens, shared with the Scheduler emulator; re-exported here.
from scheduler_emulator.oidc import SIGNATURE_REMOVED as SIGNATURE_REMOVED
from scheduler_emulator.oidc import forwarded_token as forwarded_token
from scheduler_emulator.oidc import oidc_claims as oidc_claims

PROJECT = "dedup-kit-test"
LOCATION = "europe-west1"
TEST_JOB = "local_stack.steered_job:run"
# The Scheduler jobs' OIDC account in the tests (DEDUP_ALLOWED_CALLERS when a test sets it).
INVOKER = f"scheduler-invoker@{PROJECT}.iam.gserviceaccount.com"


def bearer(email: str | None) -> str:
    """`Authorization` value of a forwarded OIDC token of `email` (None: no email claim)."""
    return f"Bearer {forwarded_token(oidc_claims(email))}"


def scheduler_headers(
    job: str = "nightly-export",
    schedule_time: str | None = "2026-10-16T12:00:00Z",
    *,
    project: str | None = PROJECT,
    location: str | None = LOCATION,
    authorization: str | None = "Bearer test-token",
) -> dict[str, str]:
    """Scheduler's headers; `authorization` None sends no Authorization header (`bearer`
    builds one as Cloud Run forwards it)."""
    headers = {
        "X-CloudScheduler": "true",
        "User-Agent": "Google-Cloud-Scheduler",
        "X-CloudScheduler-JobName": job,
        "Content-Type": "application/json",
    }
    if authorization is not None:
        headers["Authorization"] = authorization
    if schedule_time is not None:
        headers["X-CloudScheduler-ScheduleTime"] = schedule_time
    if project is not None:
        headers["X-Dedup-Project"] = project
    if location is not None:
        headers["X-Dedup-Location"] = location
    return headers


@dataclass
class InProcessFunction:
    """One 'instance' of the function in this process, with its RPCs counted."""

    handler: DedupHandler
    client: firestore.Client
    rpcs: RpcCounter
    logs: list[Mapping[str, Any]] = field(default_factory=list)

    def deliver(self, headers: Mapping[str, str], body: bytes = b"") -> tuple[int, Any]:
        reply = self.handler.handle(headers, body)
        return reply.status, reply.body


def settings_for(collection: str, **overrides: Any) -> Settings:
    base = Settings(
        project=PROJECT,
        location=LOCATION,
        collection=collection,
        default_job=TEST_JOB,
        store_timeout_seconds=5,
    )
    return replace(base, **overrides)


def in_process_function(collection: str, **overrides: Any) -> InProcessFunction:
    settings = settings_for(collection, **overrides)
    client = firestore.Client(project=PROJECT)
    counter = RpcCounter(client)
    logs: list[Mapping[str, Any]] = []
    return InProcessFunction(build_handler(settings, client, logs.append), client, counter, logs)


def function_env(collection: str, ledger: Path, **extra: str) -> dict[str, str]:
    """Environment for a served function (FunctionServer) using the test job."""
    return {
        "DEDUP_PROJECT": PROJECT,
        "DEDUP_LOCATION": LOCATION,
        "DEDUP_COLLECTION": collection,
        "DEDUP_JOB": TEST_JOB,
        "DEDUP_STORE_TIMEOUT_SECONDS": "5",
        "TEST_LEDGER": str(ledger),
        "FIRESTORE_EMULATOR_HOST": os.environ["FIRESTORE_EMULATOR_HOST"],
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        **extra,
    }

"""A downstream process using the idempotency helper (run by multiprocessing, spawn)."""

from __future__ import annotations

import json
import os
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

from dedup.idempotency import IdempotencyGuard
from dedup.proxy.tokens import TOKEN_SECRET_ENV
from dedup.run_context import RunContext
from local_stack.deliveries import LOCATION, PROJECT
from tests.proxy.support import TOKEN_SECRET
from tests.waiting import job_works_for


def append_line(ledger: str, entry: dict[str, Any]) -> None:
    """One short O_APPEND write: atomic across processes."""
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())
    finally:
        os.close(fd)


def charge(collection: str, token: str, ledger: str, barrier: Barrier, out: Queue[Any]) -> None:
    guard = IdempotencyGuard.from_env(step="charge", environ={
        "DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": LOCATION, "DEDUP_COLLECTION": collection,
        "DEDUP_STORE_TIMEOUT_SECONDS": "20", TOKEN_SECRET_ENV: TOKEN_SECRET,
    })

    def step(context: RunContext) -> dict[str, Any]:
        append_line(ledger, {"pid": os.getpid(), "token": token})
        job_works_for(0.3)  # the state-changing step takes a while: the others overlap it
        return {"charged_by": os.getpid()}

    barrier.wait()
    outcome = guard.run_once(token, step, wait_seconds=60)
    out.put({"pid": os.getpid(), "ran": outcome.ran, "result": outcome.result})


def hold(collection: str, token: str, ledger: str) -> None:
    """Claims the token, performs half the step, then hangs until killed (a crash)."""
    guard = IdempotencyGuard.from_env(step="charge", environ={
        "DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": LOCATION, "DEDUP_COLLECTION": collection,
        # Renewed every 2 s: one renewal may take 4 s to land (a 2 s lease left 1.3 s).
        "DEDUP_LEASE_SECONDS": "6", "DEDUP_RETENTION_SECONDS": "60",
        TOKEN_SECRET_ENV: TOKEN_SECRET,
    })

    def step(context: RunContext) -> None:
        append_line(ledger, {"pid": os.getpid(), "attempt": context.attempt})
        job_works_for(3600)  # hangs until the test kills the process (a crash)

    guard.run_once(token, step)

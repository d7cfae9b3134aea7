"""Helpers shared by the function's in-process tests."""

from __future__ import annotations

import json
import os
import threading
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dedup import RunContext
from dedup.store import RunStore, StoredRun
from local_stack import steered_job
from local_stack.deliveries import InProcessFunction, in_process_function
from local_stack.steered_job import read_ledger
from tests.waiting import PATIENCE_SECONDS, wait_until

# The steered test job (local_stack.steered_job), and one more key for the in-process
# tests: {"hold": name} runs until the test lets it end (HeldRun.finish), so "while the
# first run still runs" is a fact the test arranges, not a race against a duration.
HELD_JOB = "tests.function.helpers:held_job"
_GATES: dict[str, threading.Event] = {}


def held_job(context: RunContext) -> Any:
    spec = json.loads(context.body) if context.body else {}
    if "hold" not in spec:
        return steered_job.run(context)
    steered_job.record_execution(context, os.environ["TEST_LEDGER"])
    assert _GATES[spec["hold"]].wait(PATIENCE_SECONDS), "the test never let the job end"
    return {"echo": spec.get("result"), "claim_lost": context.claim_lost.is_set()}


def function_with_held_jobs(collection: str, **overrides: Any) -> InProcessFunction:
    """The function in process, whose job is the steered job that can also be held."""
    return in_process_function(collection, default_job=HELD_JOB, **overrides)


@dataclass
class HeldRun:
    """A delivery whose job has started and runs until `finish`."""

    future: Future[tuple[int, Any]]
    gate: threading.Event

    def finish(self) -> tuple[int, Any]:
        """Let the job end; the delivery's (status, body)."""
        self.gate.set()
        return self.future.result(timeout=PATIENCE_SECONDS)


def held_body() -> tuple[bytes, threading.Event]:
    """A body for HELD_JOB whose job runs until the returned gate is set."""
    name = uuid.uuid4().hex
    gate = _GATES[name] = threading.Event()
    return json.dumps({"hold": name}).encode(), gate


def running(function: InProcessFunction, pool: ThreadPoolExecutor, ledger: Path,
            sent: dict[str, str]) -> HeldRun:
    """Deliver `sent` in the background (the function's job: HELD_JOB) and return once its
    job has started; it runs until the test calls `finish`."""
    before = len(read_ledger(str(ledger)))
    body, gate = held_body()
    future = pool.submit(function.deliver, sent, body)
    wait_until(lambda: len(read_ledger(str(ledger))) > before or future.done(),
               what="the held job to start")
    assert not future.done(), f"the delivery ended before its job started: {future.result()}"
    return HeldRun(future, gate)


def race(function: InProcessFunction, ledger: Path, deliveries: list[dict[str, str]]
         ) -> list[tuple[int, Any]]:
    """Deliver all at once (past a barrier), each (status, body). The job (HELD_JOB) of
    whichever runs is held until every other delivery has been answered (or a second job
    started, which the test will see): no loser comes after the winner ended, whatever
    the machine's speed, so who meets whom is the race's alone."""
    body, gate = held_body()
    barrier = threading.Barrier(len(deliveries))

    def deliver(sent: dict[str, str]) -> tuple[int, Any]:
        barrier.wait()
        return function.deliver(sent, body)

    with ThreadPoolExecutor(max_workers=len(deliveries)) as pool:
        futures = [pool.submit(deliver, sent) for sent in deliveries]
        wait_until(lambda: sum(f.done() for f in futures) >= len(futures) - 1
                   or len(read_ledger(str(ledger))) > 1,
                   what="every delivery but the one that runs to be answered")
        gate.set()
        return [future.result(timeout=PATIENCE_SECONDS) for future in futures]


def lease_lapsed(store: RunStore, run_id: str) -> StoredRun:
    """Wait until the claim on `run_id` has lapsed by the store's own clock (its last
    write plus its lease, against a read), and return that read."""
    def lapsed() -> StoredRun | None:
        stored = store.get(run_id)
        return stored if stored is not None and stored.lease_expired else None

    return wait_until(lapsed, what=f"the claim on {run_id} to lapse by the store's clock",
                      poll=0.1)

"""Helpers shared by the function's in-process tests."""

from __future__ import annotations

import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from local_stack.deliveries import InProcessFunction
from local_stack.steered_job import read_ledger


def running(function: InProcessFunction, pool: ThreadPoolExecutor, ledger: Path,
            sent: dict[str, str], seconds: float) -> Future[tuple[int, Any]]:
    """Deliver `sent` in the background and return once its job has started."""
    before = len(read_ledger(str(ledger)))
    future = pool.submit(function.deliver, sent, json.dumps({"sleep": seconds}).encode())
    deadline = time.monotonic() + 20
    while len(read_ledger(str(ledger))) == before:
        assert time.monotonic() < deadline and not future.done(), "the job never started"
        time.sleep(0.02)
    return future

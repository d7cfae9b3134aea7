"""A run of the program under mocks closes every event loop it opened, and ends its threads.

Pulumi serves the (mock) resource monitor's calls from the event loop's default executor,
and the mock monitor gives each of those threads an event loop of its own. Left open, the
garbage collector closed them at interpreter exit, sometimes after their self-pipe socket:
about one `make policy-check` in twelve then printed asyncio's "Exception ignored in
BaseEventLoop.__del__ ... ValueError: Invalid file descriptor: -1" (and exited 0). That
symptom depends on the order of collection; what causes it does not, so that is tested:
no loop is left unclosed, no executor thread is left running, and a process that runs
the program says nothing about an unclosed loop even with every ResourceWarning shown.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

from infra.gcp import storage
from operator_tools.offline import run_offline


def _program() -> dict[str, Any]:
    # A few resources, one depending on another: their registrations go through the
    # executor's threads, as the kit's program's do.
    bucket = storage.Bucket("b", name="acme-b", location="EU")
    obj = storage.BucketObject("o", name="o.txt", bucket=bucket.name, content="x")
    return {"bucket": bucket.name, "object": obj.name}


def _open_loops() -> set[int]:
    gc.collect()
    return {
        id(o) for o in gc.get_objects()
        if isinstance(o, asyncio.AbstractEventLoop) and not o.is_closed()
    }


def test_a_run_leaves_no_open_event_loop_and_no_thread(tmp_path: Path) -> None:
    before_loops, before_threads = _open_loops(), set(threading.enumerate())
    for _ in range(2):  # a second run in the same process gets a loop of its own too
        run = run_offline({"gcp:project": "acme-loops"}, build_dir=tmp_path, program=_program)
        assert run.outputs == {"bucket": "acme-b", "object": "o.txt"}
    assert _open_loops() <= before_loops
    assert set(threading.enumerate()) <= before_threads


def test_a_process_that_runs_the_program_reports_no_unclosed_loop(
    tmp_path: Path, kit_checkout: Path
) -> None:
    script = textwrap.dedent(f"""
        from tests.infra.test_offline_event_loops import _program
        from operator_tools.offline import run_offline
        run_offline({{"gcp:project": "acme-loops"}}, build_dir={str(tmp_path)!r},
                    program=_program)
    """)
    proc = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", script],
        cwd=kit_checkout, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "unclosed event loop" not in proc.stderr
    assert "Invalid file descriptor" not in proc.stderr
    assert "Traceback" not in proc.stderr

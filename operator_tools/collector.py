"""Python's cyclic garbage collector, paused while the kit builds a large structure that
lives on: a stack file of thousands of jobs read (operator_tools/stack_files.py), the
program's run under mocks (operator_tools/offline_host.py).

Left on, the collector's collections walk such a structure again and again as it grows,
finding nothing to free: they took half of a 5,000-job plan's time, and two thirds of the
time its stack file took to read. Paused, everything made in the block stays in the
youngest generation, and one collection of that generation after it frees the block's
garbage, if any, without walking the older heap.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The `with` block with the cyclic collector paused, and the objects made in it
    collected once after it. A caller that had paused the collector finds it paused, and
    nothing collected."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
            gc.collect(0)

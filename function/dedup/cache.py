"""Per-instance memory of runs this instance saw completed: a duplicate costs no RPC."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable


class CompletedRunCache:
    """Bounded LRU of run_id -> result JSON, each entry kept at most `ttl_seconds`.

    Only completions are cached: a completed run never becomes runnable again within the
    retention, so a stale hit cannot make a run execute twice.
    """

    def __init__(
        self,
        max_entries: int,
        ttl_seconds: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max = max_entries
        self._ttl = ttl_seconds
        self._now = monotonic
        self._entries: OrderedDict[str, tuple[float, str | None]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run_id: str) -> tuple[bool, str | None]:
        """(hit, result_json)."""
        with self._lock:
            entry = self._entries.get(run_id)
            if entry is None:
                return False, None
            stored_at, result_json = entry
            if self._now() - stored_at >= self._ttl:
                del self._entries[run_id]
                return False, None
            self._entries.move_to_end(run_id)
            return True, result_json

    def put(self, run_id: str, result_json: str | None) -> None:
        if self._max <= 0:
            return
        with self._lock:
            self._entries[run_id] = (self._now(), result_json)
            self._entries.move_to_end(run_id)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

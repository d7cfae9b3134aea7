"""Per-instance memory of runs this instance saw completed: a duplicate costs no RPC."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

# Duplicates of a completed run (a lost reply, a concurrent delivery) arrive within
# minutes; past that an entry is worth little, and a record deleted by hand (to run that
# run again) is then honoured by every warm instance within this bound.
CACHE_MAX_AGE_SECONDS = 600.0


class CompletedRunCache:
    """Bounded LRU of run_id -> result JSON.

    Only completions are cached: a completed run never becomes runnable again while its
    record lives, so a hit cannot make a run execute twice. Each entry lives until its
    record's `expire_at` (after which the record counts as absent everywhere else) and at
    most `max_age_seconds`.
    """

    def __init__(
        self,
        max_entries: int,
        max_age_seconds: float = CACHE_MAX_AGE_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max = max_entries
        self._max_age = max_age_seconds
        self._now = monotonic
        self._entries: OrderedDict[str, tuple[float, str | None]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run_id: str) -> tuple[bool, str | None]:
        """(hit, result_json)."""
        with self._lock:
            entry = self._entries.get(run_id)
            if entry is None:
                return False, None
            good_until, result_json = entry
            if self._now() >= good_until:
                del self._entries[run_id]
                return False, None
            self._entries.move_to_end(run_id)
            return True, result_json

    def put(self, run_id: str, result_json: str | None, record_lives_seconds: float) -> None:
        """Remember a completion whose record expires `record_lives_seconds` from now."""
        keep = min(self._max_age, record_lives_seconds)
        if self._max <= 0 or keep <= 0:
            return
        with self._lock:
            self._entries[run_id] = (self._now() + keep, result_json)
            self._entries.move_to_end(run_id)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

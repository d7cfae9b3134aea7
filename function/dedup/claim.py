"""A claim an attempt holds on a run, and every write it makes under that claim.

The claim is valid while the record is still at the version this attempt last wrote or
read (`Claim.version`); every write is guarded by it, so an attempt whose claim another
took over can neither renew, complete nor mark failed the new one. Any such write can land
while its reply is lost, so none trusts a failure report: a guarded write that finds the
record changed reads it, and still this attempt's record at another version means one of
its own writes landed unseen: it adopts that version and writes again. Once the job has
run, its outcome is written again and again while the claim is held by the holder's own
clock (`ClaimWrites.finish`). The holder fences itself (`ClaimLost`) before the store would
let a rival in. Taking a run is dedup/claiming.py; one delivery end to end, dedup/protocol.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TypeVar

from dedup.cache import CompletedRunCache
from dedup.keys import RunKey
from dedup.outcomes import summarize_error
from dedup.store import (
    RecordChanged,
    RunRecord,
    RunStatus,
    RunStore,
    StoredRun,
    StoreUnavailable,
)

T = TypeVar("T")

# A guarded write adopts its own unseen writes at most this often: only this attempt
# writes records with its attempt_id, so one adoption is the norm.
_ADOPT_ROUNDS = 3
# Backoff between tries of a step whose outcome must be known (seconds).
_FIRST_PAUSE, _MAX_PAUSE = 0.1, 2.0


class ClaimLost(threading.Event):
    """`claim_lost` as the job sees it. Set when another attempt took the run over, and
    also, with no timer thread, once the claim's fence time (monotonic) has passed: the
    holder fences itself by its own clock, before the store would let a rival in."""

    def __init__(self, fence_at: Callable[[], float], monotonic: Callable[[], float]) -> None:
        super().__init__()
        self._fence_at = fence_at
        self._now = monotonic

    def is_set(self) -> bool:
        return super().is_set() or self._now() >= self._fence_at()

    def wait(self, timeout: float | None = None) -> bool:
        give_up = None if timeout is None else self._now() + timeout
        while not self.is_set():
            left = self._fence_at() - self._now()  # the fence may move while we wait
            if give_up is not None:
                left = min(left, give_up - self._now())
            if left <= 0:
                break
            super().wait(left)
        return self.is_set()


@dataclass
class Claim:
    """This attempt's hold on a run: valid while the record is still at `version`."""

    key: RunKey
    run_id: str
    attempt_id: str
    attempt: int
    version: datetime
    # Monotonic time at which this attempt's last write known to have landed was sent:
    # the store's lease runs from a later instant, so a fence judged from here is early.
    held_since: float
    # The holder fences itself this long after `held_since` (lease minus a margin).
    fence_after: float
    monotonic: Callable[[], float] = time.monotonic
    lock: threading.Lock = field(default_factory=threading.Lock)
    claimed_at: datetime | None = None  # as written in the record (kept by every write)
    # The earlier attempts this run's claims took over unfinished (RunRecord's field),
    # kept by every write of this attempt.
    unfinished_attempts: tuple[int, ...] = ()
    # The record this claim replaced (a takeover of a failed run, a lapsed claim or a
    # fence, RunRecord.is_fence, which counts as absent); None: it created the record (or
    # replaced a leftover past its expiry, which counts as absent). What the overlap gate
    # restores when the claim must leave no outcome (a fence too: a create may meet it).
    previous: RunRecord | None = None
    # The record the store holds at `version`, as this attempt knows it (written or read
    # at that version); None: unknown. An outcome written over it sends only what changed.
    record: RunRecord | None = None
    lost: ClaimLost = field(init=False)

    def __post_init__(self) -> None:
        self.lost = ClaimLost(self.fence_at, self.monotonic)

    def fence_at(self) -> float:
        return self.held_since + self.fence_after


class ClaimWrites:
    """The records an attempt writes: its claim's (`record`), and, under a held claim, its
    renewals and its outcome (completed or failed), each one guarded write."""

    def __init__(
        self,
        store: RunStore,
        *,
        lease_seconds: float,
        retention_seconds: float,
        cache: CompletedRunCache,
        wall_clock: Callable[[], datetime],
        monotonic: Callable[[], float],
    ) -> None:
        self._store = store
        self._lease = lease_seconds
        self._retention = retention_seconds
        self._cache = cache
        # Only for `expire_at` (the TTL deadline, days away): leases never use it.
        self._wall_clock = wall_clock
        self._monotonic = monotonic

    def record(
        self, key: RunKey, attempt_id: str, attempts: int, claimed_at: datetime | None = None,
        unfinished_attempts: tuple[int, ...] = (),
    ) -> RunRecord:
        """The record of an attempt that holds `key`'s run (claimed now, unless
        `claimed_at`), expiring a retention from now."""
        return RunRecord.claim(
            key, attempt_id, attempts, self._lease, self._expire_at(),
            claimed_at or self._wall_clock(), unfinished_attempts,
        )

    def fence(self, key: RunKey, attempt_id: str) -> RunRecord:
        """The fence of `attempt_id` on `key`'s run (RunRecord.fence_of), written now."""
        return RunRecord.fence_of(key, attempt_id, self._lease, self._wall_clock())

    def _expire_at(self) -> datetime:
        return self._wall_clock() + timedelta(seconds=self._retention)

    def complete(
        self, claim: Claim, result_json: str | None, duration_seconds: float | None = None
    ) -> bool:
        """Mark the run completed if this attempt still holds it. False: claim lost."""
        done = replace(
            self.record(claim.key, claim.attempt_id, claim.attempt, claim.claimed_at,
                        claim.unfinished_attempts),
            status=RunStatus.COMPLETED,
            result_json=result_json,
            finished_at=self._wall_clock(),
            duration_seconds=duration_seconds,
        )
        held = self.write_outcome(claim, done)
        if held:
            self._cache.put(claim.run_id, result_json, self._retention)
        return held

    def release(
        self, claim: Claim, error: str = "", *, permanent: bool = False,
        result_json: str | None = None,
    ) -> bool:
        """Mark the run `failed` (kept for the watchdog and people) so a retry claims it at
        once, or for good when `permanent` (with `result_json` to replay). False: another
        attempt holds it now."""
        failed = replace(
            self.record(claim.key, claim.attempt_id, claim.attempt, claim.claimed_at,
                        claim.unfinished_attempts),
            status=RunStatus.FAILED,
            failed_at=self._wall_clock(),
            error=summarize_error(error),
            permanent=permanent,
            result_json=result_json,
        )
        return self.write_outcome(claim, failed)

    def write_outcome(self, claim: Claim, record: RunRecord) -> bool:
        """Replace the claim with its outcome (completed, failed or skipped), guarded; a
        retry of a write that landed finds this attempt's record already in that status."""
        def write(version: datetime) -> tuple[datetime, RunRecord]:
            return self._store.replace(claim.run_id, record, version, claim.record), record

        return self.guarded_write(
            claim, write, already_done=lambda stored: _is_ours(claim, stored, record.status),
        )

    def renew(self, claim: Claim) -> bool:
        """Extend the lease and the record's expiry; False once the claim is lost."""
        if claim.lost.is_set():
            return False
        expire_at = self._expire_at()

        def write(version: datetime) -> tuple[datetime, RunRecord | None]:
            renewed = self._store.renew(claim.run_id, expire_at, version)
            known = claim.record
            return renewed, None if known is None else replace(known, expire_at=expire_at)

        return self.guarded_write(
            claim, write,
            already_done=lambda stored: False,  # a renewal is only known by landing anew
            yields_to_replacement=True,
        )

    def guarded_write(
        self,
        claim: Claim,
        write: Callable[[datetime], tuple[datetime, RunRecord | None]],
        already_done: Callable[[StoredRun | None], bool],
        yields_to_replacement: bool = False,
    ) -> bool:
        """One write guarded by the claim's version, with its own unseen writes accounted
        for. `write(version)` returns the new version and the record the store then holds
        (None: unknown). False: another attempt holds the run (the claim is marked lost).
        StoreUnavailable: unknown. The claim's `version` and `record` move together."""
        with claim.lock:
            for _ in range(_ADOPT_ROUNDS):
                sent = self._monotonic()
                try:
                    version, written = write(claim.version)
                except RecordChanged:
                    stored = self._store.get(claim.run_id)
                    if already_done(stored):
                        # This very write landed and the client's retry of it conflicted.
                        if stored is not None:
                            claim.version, claim.record = stored.version, stored.record
                        return True
                    if stored is None or stored.record.attempt_id != claim.attempt_id or (
                            yields_to_replacement and stored.record.replaced_by is not None):
                        # Taken over, or (a renewal) a newer run of the job asked this one
                        # to stop (overlap: replace): the job is told through claim_lost.
                        claim.lost.set()
                        return False
                    # Still ours, at a version we never saw: an earlier write of ours (a
                    # renewal reported as failed) landed. Adopt it and write again.
                    claim.version, claim.record = stored.version, stored.record
                    continue
                claim.version, claim.record = version, written
                claim.held_since = sent
                return True
        raise StoreUnavailable(f"run {claim.run_id}: the record kept moving under this attempt")

    def finish(self, claim: Claim, step: Callable[[], bool]) -> bool:
        """Retry a finishing write (complete or release) while this attempt still holds its
        lease by its own clock: a stall a little longer than one store timeout must not
        leave a job that ran unrecorded, nor a failed run blocked for a lease."""
        return retry_unavailable(step, claim.fence_at(), self._monotonic)


def _is_ours(claim: Claim, stored: StoredRun | None, status: RunStatus) -> bool:
    return (
        stored is not None
        and stored.record.attempt_id == claim.attempt_id
        and stored.record.status is status
    )


def retry_unavailable(
    step: Callable[[], T], give_up_at: float, monotonic: Callable[[], float]
) -> T:
    """Run `step`, retrying StoreUnavailable with backoff until `give_up_at` (monotonic);
    always tried at least once."""
    pause = _FIRST_PAUSE
    while True:
        try:
            return step()
        except StoreUnavailable:
            if monotonic() + pause >= give_up_at:
                raise
        time.sleep(pause)
        pause = min(pause * 2, _MAX_PAUSE)

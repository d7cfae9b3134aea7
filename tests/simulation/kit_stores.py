"""The kit's five Firestore stores on one client (the real one or FakeFirestore), named as
the function and the watchdog name them, for the fake's tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dedup.overlap import COLLECTION_SUFFIX as LATEST_SUFFIX
from dedup.overlap import FirestoreLatestRunStore
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.backfills import BACKFILLS_SUFFIX, FirestoreBackfills
from dedup.watchdog.cursors import FirestoreWatchStore
from dedup.watchdog.reruns import RERUNS_SUFFIX, FirestoreRerunQueue
from dedup.watchdog.settings import CURSOR_SUFFIX


@dataclass(frozen=True)
class KitStores:
    runs: FirestoreRunStore
    latest: FirestoreLatestRunStore
    watch: FirestoreWatchStore
    reruns: FirestoreRerunQueue
    backfills: FirestoreBackfills


def kit_stores(client: Any, collection: str, timeout_seconds: float = 5.0) -> KitStores:
    runs = FirestoreRunStore(client, collection, timeout_seconds)
    return KitStores(
        runs=runs,
        latest=FirestoreLatestRunStore(client, collection + LATEST_SUFFIX, runs.call,
                                       runs.retry, runs.timeout),
        watch=FirestoreWatchStore(runs, collection + CURSOR_SUFFIX),
        reruns=FirestoreRerunQueue(runs, collection + RERUNS_SUFFIX),
        backfills=FirestoreBackfills(runs, collection + BACKFILLS_SUFFIX),
    )

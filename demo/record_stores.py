"""Where the demo's watchdog scenes (demo.watch, demo.backfill) read run records: the
dedup database, and each other database the watched jobs name (a runtime's own, the
proxy's), all on the Firestore emulator, reached directly (no store fault strikes them)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from google.cloud import firestore

from dedup.settings import Settings
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.cursors import FirestoreWatchStore
from dedup.watchdog.due import WatchedJob

if TYPE_CHECKING:
    from operator_tools.runs import RunStores


@contextlib.contextmanager
def emulator_env(host: str) -> Iterator[None]:
    """The Firestore client reads FIRESTORE_EMULATOR_HOST when it is built."""
    previous = os.environ.get("FIRESTORE_EMULATOR_HOST")
    os.environ["FIRESTORE_EMULATOR_HOST"] = host
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("FIRESTORE_EMULATOR_HOST", None)
        else:
            os.environ["FIRESTORE_EMULATOR_HOST"] = previous


class RecordStores:
    """The records of `jobs`: `runs`, the dedup database's (settings.database) on
    `client`, and `by_database`, one store per other database a job names. Close it."""

    def __init__(self, settings: Settings, firestore_host: str, jobs: Iterable[WatchedJob],
                 client_project: str | None = None) -> None:
        project = client_project or settings.project
        databases = sorted({job.database for job in jobs if job.database is not None}
                           - {settings.database})
        with emulator_env(firestore_host):
            self.client = firestore.Client(project=project, database=settings.database)
            self._clients = [self.client, *(firestore.Client(project=project, database=db)
                                            for db in databases)]
        timeout = settings.store_timeout_seconds
        self.runs = FirestoreRunStore(self.client, settings.collection, timeout)
        self.by_database = {db: FirestoreRunStore(client, settings.collection, timeout)
                            for db, client in zip(databases, self._clients[1:], strict=True)}

    def of(self, job: WatchedJob) -> FirestoreRunStore:
        """The store of `job`'s records."""
        return self.runs if job.database is None else self.by_database.get(
            job.database, self.runs)

    def watch_store(self, cursor_collection: str) -> FirestoreWatchStore:
        """The watchdog's view: records in each job's database, cursors beside `runs`."""
        return FirestoreWatchStore(self.runs, cursor_collection, self.by_database)

    def run_stores(self) -> RunStores:
        """`make rerun`'s and `make backfill`'s view (operator_tools.runs.RunStores)."""
        from operator_tools.runs import RunStores  # imports the Pulumi program

        return RunStores(self.runs, open_database=self.by_database.__getitem__)

    def close(self) -> None:
        for client in self._clients:
            client.close()  # type: ignore[no-untyped-call]

"""`make migrate-proxy-records STACK=prod`: copy the proxied jobs' run records from the dedup
database into the proxy's own database.

Up to this release the idempotent proxy kept its records in the dedup database; now it has
a database of its own (`<databaseName>-proxy`, infra/records_database.py says why). A stack
that already ran proxied jobs has their records in the old place, where the upgraded proxy,
the watchdog and `make runs` no longer look: a late retry of an earlier run would find no
record and start its target again, and the watchdog would report (and, with `catchUp`,
deliver) runs that did happen. Copying the records closes that gap; docs/deploy.md gives
the order of the steps.

What is copied: every record whose `job` is one of the stack's proxied jobs (deployed IDs),
generations of re-runs included, by document ID and unchanged (its `expire_at` too, so the
TTL policy deletes it when it would have). A record the proxy's database already has is
kept: the proxy wrote it, or an earlier copy did. One exception: an earlier copy of a run
that was in progress, whose attempt (the same `attempt_id`) has finished in the old
database since, is brought up to date. Running it again copies nothing twice. The old
records are left to expire.

    python -m operator_tools migrate-proxy-records STACK

Firestore is the emulator when FIRESTORE_EMULATOR_HOST is set, otherwise the stack's
databases with Application Default Credentials (as `make runs`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TextIO

from google.api_core import exceptions as gexc
from google.cloud.firestore_v1.base_query import FieldFilter

from dedup.store import RunStatus, StoreError
from dedup.store.firestore import FirestoreRunStore
from operator_tools.runs import (
    RunsError,
    open_store,
    stack_config,
    store_failure,
    watched_jobs,
)

IN_QUERY_MAX: Final = 30
"""Values per Firestore `in` filter."""


@dataclass
class Copied:
    """What one migration did, by document ID."""

    copied: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    """Already in the proxy's database (its own record, or an earlier copy up to date)."""


def proxied_records(source: FirestoreRunStore, jobs: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The records of `jobs` (deployed IDs) in `source`, by document ID (`job` is indexed
    by Firestore's automatic single-field index: no index to declare)."""

    def op() -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        collection = source.client.collection(source.collection)
        for start in range(0, len(jobs), IN_QUERY_MAX):
            chunk = list(jobs[start:start + IN_QUERY_MAX])
            query: Any = collection.where(filter=FieldFilter("job", "in", chunk))
            for snapshot in query.stream(retry=source.retry, timeout=source.timeout):
                found[snapshot.id] = snapshot.to_dict() or {}
        return found

    return source.call(op) if jobs else {}


def _finished_since_copied(existing: dict[str, Any], record: dict[str, Any]) -> bool:
    return (
        existing.get("attempt_id") == record.get("attempt_id")
        and existing.get("status") == RunStatus.IN_PROGRESS.value
        and record.get("status") != RunStatus.IN_PROGRESS.value
    )


def copy_records(
    source: FirestoreRunStore, target: FirestoreRunStore, jobs: Sequence[str]
) -> Copied:
    """Copy the records of `jobs` from `source` to `target` (same collection name)."""
    records = proxied_records(source, jobs)
    done = Copied()
    collection = target.client.collection(target.collection)

    def copy_one(run_id: str, record: dict[str, Any]) -> None:
        document = collection.document(run_id)
        try:
            document.create(record, retry=target.retry, timeout=target.timeout)
            done.copied.append(run_id)
            return
        except gexc.AlreadyExists:
            pass  # the proxy's own record, or an earlier copy (a lost reply's retry too)
        snapshot: Any = document.get(retry=target.retry, timeout=target.timeout)
        if not _finished_since_copied(snapshot.to_dict() or {}, record):
            done.kept.append(run_id)
            return
        try:
            # Guarded by the version read: a proxy attempt that wrote it meanwhile wins.
            document.update(
                record, option=target.client.write_option(last_update_time=snapshot.update_time),
                retry=target.retry, timeout=target.timeout,
            )
            done.updated.append(run_id)
        except gexc.FailedPrecondition:
            done.kept.append(run_id)

    for run_id in sorted(records):
        target.call(lambda: copy_one(run_id, records[run_id]))  # noqa: B023 (called at once)
    return done


def main(
    argv: Sequence[str] | None = None,
    *,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    client_factory: Callable[..., Any] | None = None,
) -> int:
    parser = argparse.ArgumentParser(
        prog="scheduler-dedup migrate-proxy-records",
        description="Copy the proxied jobs' run "
        "records from the dedup database into the proxy's own database (once, when "
        "upgrading a stack whose proxy shared the dedup database).")
    parser.add_argument("stack", help="stack name (Pulumi.<stack>.yaml) or stack file path")
    args = parser.parse_args(argv)
    import google.auth.exceptions

    try:
        cfg = stack_config(args.stack)
        # `proxied`, not "records elsewhere": a runtime's jobs keep theirs in its own database.
        proxied = [job for job in watched_jobs(cfg) if job.proxied]
        if not proxied:
            err.write(f"make migrate-proxy-records: stack {args.stack!r} has no proxied job: "
                      "nothing to copy\n")
            return 0
        stores = open_store(cfg, client_factory)
        done = copy_records(stores.dedup, stores.in_database(cfg.dedup.proxy_database_name),
                            [j.name for j in proxied])
    except RunsError as exc:
        err.write(f"make migrate-proxy-records: {exc}\n")
        return 2
    except (StoreError, google.auth.exceptions.GoogleAuthError) as exc:
        err.write(store_failure(
            "make migrate-proxy-records", "copy the proxied jobs' records", cfg, exc,
            " (and that `pulumi up` has created the proxy's database)",
        ))
        return 1
    out.write(
        f"proxied jobs {', '.join(j.name for j in proxied)}: {len(done.copied)} record(s) "
        f"copied from database {cfg.dedup.database_name} to "
        f"{cfg.dedup.proxy_database_name}, {len(done.updated)} brought up to date, "
        f"{len(done.kept)} already there (kept)\n"
    )
    return 0


if __name__ == "__main__":
    from operator_tools import not_an_entry_point

    not_an_entry_point("migrate-proxy-records")

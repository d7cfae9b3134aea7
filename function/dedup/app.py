"""Wiring: settings -> Firestore client -> store -> protocol -> HTTP handler."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from google.cloud import firestore

from dedup.cache import CompletedRunCache
from dedup.firestore_store import FirestoreRunStore
from dedup.http import DedupHandler, emit_log_line
from dedup.jobs import JobRegistry
from dedup.protocol import Deduplicator
from dedup.settings import Settings


def build_handler(
    settings: Settings,
    client: firestore.Client | None = None,
    emit: Callable[[Mapping[str, Any]], None] = emit_log_line,
) -> DedupHandler:
    """Everything one instance needs; client and log sink may be injected (tests)."""
    client = client or firestore.Client(project=settings.project, database=settings.database)
    store = FirestoreRunStore(client, settings.collection, settings.store_timeout_seconds)
    cache = CompletedRunCache(settings.cache_size, ttl_seconds=settings.retention_seconds)
    deduplicator = Deduplicator(
        store,
        lease_seconds=settings.lease_seconds,
        retention_seconds=settings.retention_seconds,
        cache=cache,
    )
    jobs = JobRegistry(settings.default_job, settings.job_routes)
    return DedupHandler(settings, deduplicator, jobs, emit)


def build_handler_from_env(environ: Mapping[str, str] | None = None) -> DedupHandler:
    return build_handler(Settings.from_env(environ))

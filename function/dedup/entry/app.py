"""Wiring: settings -> Firestore client -> store -> protocol -> HTTP handler.

Two handlers share it: the scheduled-job function (job logic from its job table's routes,
or DEDUP_JOB when there are none: dedup/job_logic.py scheduled_jobs) and the
idempotent proxy (job logic = start a downstream execution, from DEDUP_PROXY_*).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from google.cloud import firestore

from dedup.beyond import COLLECTION_SUFFIX as BEYOND_COLLECTION_SUFFIX
from dedup.beyond import FirestoreBeyondLedger
from dedup.cache import CompletedRunCache
from dedup.entry.http import DedupHandler, emit_log_line
from dedup.job_logic import scheduled_jobs
from dedup.overlap import COLLECTION_SUFFIX as OVERLAP_COLLECTION_SUFFIX
from dedup.overlap import FirestoreLatestRunStore, OverlapGate
from dedup.protocol import Deduplicator
from dedup.settings import Settings
from dedup.store.firestore import FirestoreRunStore

if TYPE_CHECKING:
    # Imported where the proxy is built: the proxy (and `requests`, which it imports) is
    # no cold-start cost of the scheduled-job function, nor a dependency of the protocol
    # library's adapters, which import this module.
    from dedup.proxy.handler import ProxySettings
    from dedup.proxy.targets import SessionFactory


def build_deduplicator(settings: Settings, client: firestore.Client | None = None) -> Deduplicator:
    """The protocol over the configured Firestore collection, with this instance's cache."""
    client = client or firestore.Client(project=settings.project, database=settings.database)
    store = FirestoreRunStore(client, settings.collection, settings.store_timeout_seconds)
    return Deduplicator(
        store,
        lease_seconds=settings.lease_seconds,
        retention_seconds=settings.retention_seconds,
        cache=CompletedRunCache(settings.cache_size),
        # A claim whose reply was lost is looked up for one more store budget before a 5xx.
        settle_seconds=settings.store_timeout_seconds,
        overlap=overlap_gate(store, settings),
    )


def overlap_gate(store: FirestoreRunStore, settings: Settings) -> OverlapGate:
    """The jobs' latest runs (dedup/overlap.py) beside the run records; read only for a
    job whose overlap is not `allow`."""
    latest = FirestoreLatestRunStore(
        store.client, settings.collection + OVERLAP_COLLECTION_SUFFIX, store.call,
        store.retry, store.timeout)
    return OverlapGate(
        latest, store, settings.lease_seconds,
        lambda: datetime.now(UTC) + timedelta(seconds=settings.retention_seconds),
        lambda: datetime.now(UTC))


def beyond_ledger(settings: Settings, client: firestore.Client) -> FirestoreBeyondLedger:
    """Where runs beyond the schedule are noted for the watchdog (dedup/beyond.py): beside
    the run records, with their store's timeout, retries and retention."""
    store = FirestoreRunStore(client, settings.collection, settings.store_timeout_seconds)
    return FirestoreBeyondLedger(
        store.client, settings.collection + BEYOND_COLLECTION_SUFFIX, store.call, store.retry,
        store.timeout, settings.retention_seconds)


def build_handler(
    settings: Settings,
    client: firestore.Client | None = None,
    emit: Callable[[Mapping[str, Any]], None] = emit_log_line,
) -> DedupHandler:
    """Everything one instance needs; client and log sink may be injected (tests)."""
    jobs = scheduled_jobs(settings.default_job, settings.job_routes)
    client = client or firestore.Client(project=settings.project, database=settings.database)
    deduplicator = build_deduplicator(settings, client)
    return DedupHandler(settings, deduplicator, jobs, emit,
                        beyond=beyond_ledger(settings, client))


def build_handler_from_env(environ: Mapping[str, str] | None = None) -> DedupHandler:
    return build_handler(Settings.from_env(environ))


def build_proxy_handler(
    settings: Settings,
    proxy: ProxySettings,
    client: firestore.Client | None = None,
    emit: Callable[[Mapping[str, Any]], None] = emit_log_line,
    sessions: SessionFactory | None = None,
) -> DedupHandler:
    """The proxy: same protocol and handler; sessions (authorized HTTP) may be injected."""
    from dedup.proxy.handler import authorized_sessions, check_body, proxy_jobs
    from dedup.proxy.targets import DownstreamClient

    downstream = DownstreamClient(
        sessions or authorized_sessions(),
        timeout_seconds=proxy.timeout_seconds,
        api_base=proxy.api_base,
    )
    jobs = proxy_jobs(proxy, downstream, emit)
    client = client or firestore.Client(project=settings.project, database=settings.database)
    deduplicator = build_deduplicator(settings, client)
    return DedupHandler(settings, deduplicator, jobs, emit, check_body=check_body,
                        beyond=beyond_ledger(settings, client))


def build_proxy_handler_from_env(environ: Mapping[str, str] | None = None) -> DedupHandler:
    from dedup.proxy.handler import ProxySettings

    return build_proxy_handler(Settings.from_env(environ), ProxySettings.from_env(environ))

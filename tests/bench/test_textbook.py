"""The comparator must be a correct textbook implementation, or the benchmark compares
against a straw man: one execution per run, 200 for a completed run, 409 on a live lease,
takeover after expiry, release on failure, fencing by attempt id; and the same key and
record as the kit's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore

from bench.textbook import TextbookClaim, TextbookDeduplicator, build_textbook_handler
from dedup.entry.http import DedupHandler
from dedup.keys import RunKey
from dedup.outcomes import Delivery
from local_stack.deliveries import (
    LOCATION,
    PROJECT,
    in_process_function,
    scheduler_headers,
    settings_for,
)
from local_stack.rpc_counter import RpcCounter
from local_stack.steered_job import read_ledger
from tests.waiting import let_time_pass

pytestmark = pytest.mark.usefixtures("firestore_emulator")

SCHEDULE_TIME = "2026-10-16T12:00:00Z"
KEY = RunKey(PROJECT, LOCATION, "nightly-export", datetime(2026, 10, 16, 12, tzinfo=UTC))


@dataclass
class Textbook:
    handler: DedupHandler
    rpcs: RpcCounter
    client: firestore.Client

    def deliver(self, body: bytes = b"", headers: Mapping[str, str] | None = None
                ) -> tuple[int, Any]:
        reply = self.handler.handle(headers or scheduler_headers(), body)
        return reply.status, reply.body


def textbook(collection: str, clock_skew: timedelta = timedelta(0), **overrides: Any
             ) -> Textbook:
    client = firestore.Client(project=PROJECT)
    rpcs = RpcCounter(client)
    handler = build_textbook_handler(
        settings_for(collection, **overrides), client, emit=lambda _: None,
        local_clock=lambda: datetime.now(UTC) + clock_skew,
    )
    return Textbook(handler, rpcs, client)


def dedup(collection: str, lease: float = 60, clock_skew: timedelta = timedelta(0)
          ) -> TextbookDeduplicator:
    return TextbookDeduplicator(
        firestore.Client(project=PROJECT), collection, lease_seconds=lease,
        retention_seconds=3600, timeout_seconds=5,
        local_clock=lambda: datetime.now(UTC) + clock_skew,
    )


def document(collection: str) -> dict[str, Any]:
    snapshot: Any = firestore.Client(project=PROJECT).collection(collection).document(
        KEY.run_id).get()
    return snapshot.to_dict() if snapshot.exists else {}


def let_the_lease_lapse(collection: str) -> None:
    """The textbook judges a lease by the instance's clock against the record's
    `lease_expires_at` (this host's clock too): let time pass until then."""
    ends: datetime = document(collection)["lease_expires_at"]
    let_time_pass((ends - datetime.now(UTC)).total_seconds() + 0.01,
                  "the claim's lease lapses, as its record dates it")


def test_fresh_run_costs_six_rpcs_in_two_transactions(collection_name: str, ledger: Path
                                                      ) -> None:
    function = textbook(collection_name)
    status, body = function.deliver(b'{"result": 7}')
    assert (status, body["outcome"], body["result"]["echo"]) == (200, "completed", 7)
    assert body["run_id"] == KEY.run_id
    assert function.rpcs.counts == {"begin_transaction": 2, "batch_get_documents": 2,
                                    "commit": 2}
    assert len(read_ledger(str(ledger))) == 1
    assert document(collection_name)["status"] == "completed"


def test_duplicate_of_a_completed_run_is_a_200_without_running(
    collection_name: str, ledger: Path
) -> None:
    function = textbook(collection_name)
    function.deliver(b'{"result": "first"}')
    function.rpcs.reset()
    status, body = function.deliver(b'{"result": "second"}')
    assert (status, body["outcome"], body["result"]["echo"]) == (200, "duplicate", "first")
    assert function.rpcs.counts == {"begin_transaction": 1, "batch_get_documents": 1,
                                    "commit": 1}
    assert len(read_ledger(str(ledger))) == 1


def test_live_lease_is_a_409_and_an_expired_one_is_taken_over(
    collection_name: str, ledger: Path
) -> None:
    # Lease 3, the function built and its client warmed first: its answer (three RPCs)
    # must come while the lease is live, which a 1 s lease did not leave room for.
    crashed = dedup(collection_name, lease=3.0)
    function = textbook(collection_name)
    warm_up: Any = function.client.collection(collection_name).document(KEY.run_id).get()
    assert not warm_up.exists
    first = crashed.claim(KEY)
    assert isinstance(first, TextbookClaim) and first.attempt == 1
    status, body = function.deliver()
    assert (status, body["outcome"]) == (409, "in_progress")
    assert read_ledger(str(ledger)) == []
    let_the_lease_lapse(collection_name)
    status, body = function.deliver()
    assert (status, body["outcome"]) == (200, "completed")
    assert [e["attempt"] for e in read_ledger(str(ledger))] == [2]


def test_old_attempt_is_fenced_off_after_a_takeover(collection_name: str) -> None:
    runs = dedup(collection_name, lease=1.0)
    old = runs.claim(KEY)
    assert isinstance(old, TextbookClaim)
    let_the_lease_lapse(collection_name)
    new = runs.claim(KEY)
    assert isinstance(new, TextbookClaim) and new.attempt_id != old.attempt_id
    assert runs.finish(old, succeeded=True, result_json='"stale"') is False
    assert runs.finish(old, succeeded=False, result_json=None) is False
    record = document(collection_name)
    assert (record["attempt_id"], record["status"]) == (new.attempt_id, "in_progress")
    assert runs.finish(new, succeeded=True, result_json='"fresh"') is True
    assert document(collection_name)["result_json"] == '"fresh"'


def test_failure_releases_the_run_so_the_retry_runs_at_once(
    collection_name: str, ledger: Path
) -> None:
    function = textbook(collection_name)
    status, body = function.deliver(b'{"fail": true}')
    assert (status, body["outcome"]) == (500, "failed")
    assert document(collection_name) == {}
    status, body = function.deliver(b'{"result": "retry"}')
    assert (status, body["outcome"]) == (200, "completed")
    assert len(read_ledger(str(ledger))) == 2


def test_same_key_and_record_as_the_kit(collection_name: str, ledger: Path) -> None:
    """Either handler recognises the other's completed run: one document ID, one format."""
    kit = in_process_function(collection_name)
    assert kit.deliver(scheduler_headers(), b'{"result": "kit"}')[0] == 200
    kit_fields = set(document(collection_name))
    status, body = textbook(collection_name).deliver()
    assert (status, body["outcome"], body["result"]["echo"]) == (200, "duplicate", "kit")

    other = scheduler_headers(schedule_time="2026-10-16T13:00:00Z")
    assert textbook(collection_name).deliver(b'{"result": "tb"}', other)[0] == 200
    status, body = in_process_function(collection_name).deliver(other)
    assert (status, body["outcome"], body["result"]["echo"]) == (200, "duplicate", "tb")
    textbook_doc: Any = firestore.Client(project=PROJECT).collection(
        collection_name).document(body["run_id"]).get()
    assert set(textbook_doc.to_dict()) == kit_fields
    assert len(read_ledger(str(ledger))) == 2


def test_a_fast_local_clock_steals_a_live_lease(collection_name: str) -> None:
    """The textbook's known weakness (the kit judges leases by Firestore's clock): an
    instance whose clock runs five minutes fast takes over another's live 60 s lease."""
    holder = dedup(collection_name, lease=60)
    skewed = dedup(collection_name, lease=60, clock_skew=timedelta(minutes=5))
    assert isinstance(holder.claim(KEY), TextbookClaim)
    assert isinstance(dedup(collection_name).claim(KEY), Delivery)
    stolen = skewed.claim(KEY)
    assert isinstance(stolen, TextbookClaim) and stolen.attempt == 2


def test_bad_delivery_is_the_kits_400(collection_name: str) -> None:
    status, body = textbook(collection_name).deliver(headers={"X-CloudScheduler": "true"})
    assert (status, body) == (400, {"error": "missing X-CloudScheduler-JobName header"})

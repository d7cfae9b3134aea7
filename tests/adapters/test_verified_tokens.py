"""DEDUP_VERIFY_TOKEN_AUDIENCE through an adapter, end to end: a public Flask service
(Werkzeug's test client, the real Firestore emulator) built from the environment verifies
callers' tokens against Google's certificates, here served by a local HTTP server."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

import flask
import pytest
from google.cloud import firestore
from werkzeug.test import Client

from dedup.adapters.guard import ServiceGuard
from dedup.adapters.wsgi import deduplicated
from dedup.entry import id_tokens
from dedup.run_context import RunContext
from local_stack.deliveries import INVOKER, LOCATION, PROJECT, scheduler_headers
from tests.function.signed_tokens import (
    AUDIENCE,
    CertsEndpoint,
    SigningKey,
    id_token_claims,
    served_certs,
)

pytestmark = pytest.mark.usefixtures("firestore_emulator")

PATH = "/tasks/export"


@pytest.fixture(scope="module")
def google() -> SigningKey:
    return SigningKey.generate()


@pytest.fixture
def certs_endpoint(google: SigningKey, monkeypatch: pytest.MonkeyPatch
                   ) -> Iterator[CertsEndpoint]:
    """The process's certificates fetched, as in production, over HTTP: from a local
    endpoint instead of googleapis.com."""
    with served_certs({google.key_id: google.certificate_pem}) as (url, endpoint):
        monkeypatch.setattr(id_tokens, "GOOGLE_CERTS",
                            id_tokens.GoogleCerts(functools.partial(id_tokens.fetch_certs, url)))
        yield endpoint


def test_a_public_flask_service_serves_only_verified_tokens_of_its_callers(
    google: SigningKey, certs_endpoint: CertsEndpoint, collection_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    logs: list[Mapping[str, Any]] = []
    guard = ServiceGuard.from_env({
        "DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": LOCATION,
        "DEDUP_COLLECTION": collection_name, "DEDUP_ALLOWED_CALLERS": INVOKER,
        "DEDUP_VERIFY_TOKEN_AUDIENCE": AUDIENCE,
    }, firestore.Client(project=PROJECT), logs.append)
    runs: list[RunContext] = []

    @deduplicated(guard=guard)
    def export(run: RunContext) -> dict[str, Any]:
        runs.append(run)
        return {"rows": 3}

    app = flask.Flask(__name__)
    app.add_url_rule(PATH, view_func=export, methods=["POST"])
    client = Client(app)

    # A stranger's forged token for the same run, sent first: refused, nothing claimed.
    forged = SigningKey.generate().sign(id_token_claims(INVOKER))
    refused = client.post(PATH, headers=scheduler_headers(authorization=f"Bearer {forged}"))
    assert refused.status_code == 403 and "signature" in refused.json["error"]  # type: ignore[index]
    assert logs[-1]["outcome"] == "forbidden"
    assert [s.to_dict() for s in firestore.Client(project=PROJECT).collection(
        collection_name).stream()] == []

    # The real delivery runs the job once; its retry is a duplicate.
    good = scheduler_headers(authorization=f"Bearer {google.sign(id_token_claims(INVOKER))}")
    done = client.post(PATH, headers=good)
    assert done.status_code == 200 and done.json["result"] == {"rows": 3}  # type: ignore[index]
    again = client.post(PATH, headers=good)
    assert again.json["outcome"] == "duplicate"  # type: ignore[index]
    assert len(runs) == 1
    assert certs_endpoint.requests == 1  # one fetch for every request of the process

    # The endpoint fails once its certificates expire: 500, retryable, nothing runs.
    monkeypatch.setattr(id_tokens, "GOOGLE_CERTS", id_tokens.GoogleCerts(functools.partial(
        id_tokens.fetch_certs, "http://127.0.0.1:9/unreachable", 2.0)))
    failed = client.post(PATH, headers=scheduler_headers(
        schedule_time="2026-10-17T12:00:00Z",
        authorization=good["Authorization"]))
    assert failed.status_code == 500 and logs[-1]["outcome"] == "certs_unavailable"
    assert len(runs) == 1

"""The WSGI adapters in process (Werkzeug's test client, the real Firestore emulator): the
Flask view decorator, the wrapper for any WSGI app and the functions-framework decorator."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import flask
import pytest
import requests
from google.cloud import firestore
from werkzeug.serving import make_server
from werkzeug.test import Client

from dedup.adapters import functions_framework as ff_adapter
from dedup.adapters.guard import PERMANENT_FAILURE_HEADER, ServiceGuard
from dedup.adapters.wsgi import RUN_ENVIRON_KEY, DedupWsgiMiddleware, StartResponse, deduplicated
from dedup.run_context import RunContext
from dedup.settings import Settings
from local_stack.deliveries import LOCATION, PROJECT, scheduler_headers, settings_for

pytestmark = pytest.mark.usefixtures("firestore_emulator")

PATH = "/tasks/export"


@pytest.fixture
def logs() -> list[Mapping[str, Any]]:
    return []


@pytest.fixture
def guard(collection_name: str, logs: list[Mapping[str, Any]]) -> ServiceGuard:
    settings = dataclasses.replace(settings_for(collection_name), max_body_bytes=1024)
    return ServiceGuard(settings, firestore.Client(project=PROJECT), emit=logs.append)


def records(collection_name: str) -> list[dict[str, Any]]:
    return [snapshot.to_dict() or {} for snapshot in
            firestore.Client(project=PROJECT).collection(collection_name).stream()]


class Plain:
    """A plain WSGI app (no framework): answers what a test sets, records what it saw."""

    def __init__(self) -> None:
        self.status = "200 OK"
        self.body = b'{"rows": 3}'
        self.content_type = "application/json"
        self.extra_headers: list[tuple[str, str]] = []
        self.seen: list[dict[str, Any]] = []
        self.closed = 0

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        self.seen.append({**environ, "body": environ["wsgi.input"].read()})
        if self.status.startswith("5") and self.body == b"raise":
            raise RuntimeError("the app broke")
        start_response(self.status, [("Content-Type", self.content_type),
                                     *self.extra_headers])
        return self.Answer(self, [self.body])

    class Answer(list[bytes]):
        def __init__(self, app: Plain, chunks: list[bytes]) -> None:
            super().__init__(chunks)
            self.app = app

        def close(self) -> None:  # PEP 3333: the server (here, the job) must call it
            self.app.closed += 1


def test_other_paths_and_methods_reach_the_app_untouched(guard: ServiceGuard,
                                                         collection_name: str) -> None:
    app = Plain()
    client = Client(DedupWsgiMiddleware(app, [PATH], guard))
    assert client.get(PATH).status_code == 200
    assert client.post("/elsewhere", data=b"x").status_code == 200
    assert [e["REQUEST_METHOD"] for e in app.seen] == ["GET", "POST"]
    assert all(RUN_ENVIRON_KEY not in e for e in app.seen)
    assert app.seen[1]["body"] == b"x"
    assert records(collection_name) == []


def test_a_guarded_post_runs_the_app_once_with_the_run_in_its_environ(
    guard: ServiceGuard, logs: list[Mapping[str, Any]],
) -> None:
    app = Plain()
    client = Client(DedupWsgiMiddleware(app, [PATH], guard))
    headers = scheduler_headers()
    first = client.post(PATH, headers=headers, data=b'{"day": 1}')
    assert first.status_code == 200
    assert first.json == {"outcome": "completed", "run_id": first.json["run_id"],  # type: ignore[index]
                          "trigger": "scheduled", "result": {"rows": 3}}
    (seen,) = app.seen
    run = seen[RUN_ENVIRON_KEY]
    assert isinstance(run, RunContext)
    assert (run.job_name, run.attempt, run.body) == ("nightly-export", 1, b'{"day": 1}')
    assert seen["body"] == b'{"day": 1}'  # the body, read by the guard, supplied again
    assert app.closed == 1
    again = client.post(PATH, headers=headers, data=b'{"day": 1}')
    assert (again.status_code, again.json["outcome"], again.json["result"]) == (  # type: ignore[index]
        200, "duplicate", {"rows": 3})
    assert len(app.seen) == 1
    assert [line["outcome"] for line in logs] == ["completed", "duplicate"]


def test_a_text_answer_is_the_result_as_text(guard: ServiceGuard) -> None:
    app = Plain()
    app.body, app.content_type = b"exported 3 rows", "text/plain"
    reply = Client(DedupWsgiMiddleware(app, [PATH], guard)).post(
        PATH, headers=scheduler_headers())
    assert reply.json["result"] == "exported 3 rows"  # type: ignore[index]
    # Text that would parse as JSON stays text: only a JSON content type is parsed (the
    # one rule both middlewares record results by).
    app.body = b"[1, 2]"
    reply = Client(DedupWsgiMiddleware(app, [PATH], guard)).post(
        PATH, headers=scheduler_headers(schedule_time="2026-10-16T13:00:00Z"))
    assert reply.json["result"] == "[1, 2]"  # type: ignore[index]


def test_a_path_is_matched_within_the_app_under_a_script_name(
    guard: ServiceGuard, logs: list[Mapping[str, Any]],
) -> None:
    """Mounted under /svc (SCRIPT_NAME), the route's PATH_INFO is what is guarded."""
    app = Plain()
    client = Client(DedupWsgiMiddleware(app, [PATH], guard))
    for _ in range(2):
        client.post(PATH, headers=scheduler_headers(), environ_overrides={"SCRIPT_NAME": "/svc"})
    assert len(app.seen) == 1
    assert [line["outcome"] for line in logs] == ["completed", "duplicate"]


def test_a_non_2xx_answer_with_the_permanent_failure_header_is_final(
    guard: ServiceGuard, collection_name: str,
) -> None:
    app = Plain()
    app.status, app.body = "422 Unprocessable Entity", b'{"gave_up": true}'
    app.extra_headers = [(PERMANENT_FAILURE_HEADER, "the export target is gone")]
    client = Client(DedupWsgiMiddleware(app, [PATH], guard))
    answer = client.post(PATH, headers=scheduler_headers())
    assert (answer.status_code, answer.json["outcome"]) == (200, "failed_permanent")  # type: ignore[index]
    assert answer.json["result"] == {"gave_up": True}  # type: ignore[index]
    assert client.post(PATH, headers=scheduler_headers()).json["outcome"] == (  # type: ignore[index]
        "failed_permanent")
    assert len(app.seen) == 1
    (record,) = records(collection_name)
    assert (record["permanent"], record["error"]) == (True, "the export target is gone")


@pytest.mark.parametrize(("status", "body"), [("503 Service Unavailable", b"busy"),
                                              ("302 Found", b""), ("500 Oops", b"raise")])
def test_an_answer_other_than_2xx_fails_the_run_and_releases_it(
    guard: ServiceGuard, collection_name: str, status: str, body: bytes,
) -> None:
    app = Plain()
    app.status, app.body = status, body
    client = Client(DedupWsgiMiddleware(app, [PATH], guard))
    failed = client.post(PATH, headers=scheduler_headers())
    assert (failed.status_code, failed.json["outcome"]) == (500, "failed")  # type: ignore[index]
    (record,) = records(collection_name)
    assert record["status"] == "failed"
    # Released: the retry runs at once (no 409), and completes the run.
    app.status, app.body = "200 OK", b'"done"'
    retried = client.post(PATH, headers=scheduler_headers())
    assert (retried.status_code, retried.json["outcome"]) == (200, "completed")  # type: ignore[index]
    assert [e[RUN_ENVIRON_KEY].attempt for e in app.seen] == [1, 2]


def test_bad_deliveries_are_refused_before_the_app_runs(
    guard: ServiceGuard, collection_name: str,
) -> None:
    app = Plain()
    client = Client(DedupWsgiMiddleware(app, [PATH], guard))
    missing = client.post(PATH, data=b"{}")
    assert (missing.status_code, missing.json) == (
        400, {"error": "missing X-CloudScheduler-JobName header"})
    too_large = client.post(PATH, headers=scheduler_headers(), data=b"x" * 2048)
    assert too_large.status_code == 413
    assert app.seen == [] and records(collection_name) == []


def test_a_guard_built_from_settings_keeps_their_body_cap(collection_name: str) -> None:
    """DEDUP_MAX_BODY_BYTES is one of the settings: ServiceGuard(settings, client) honours
    it as ServiceGuard.from_env does."""
    settings = Settings.from_env({"DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": LOCATION,
                                  "DEDUP_COLLECTION": collection_name,
                                  "DEDUP_MAX_BODY_BYTES": "16"})
    assert settings.max_body_bytes == 16
    app = Plain()
    guard = ServiceGuard(settings, firestore.Client(project=PROJECT), emit=lambda line: None)
    client = Client(DedupWsgiMiddleware(app, [PATH], guard))
    assert client.post(PATH, headers=scheduler_headers(), data=b"x" * 17).status_code == 413
    assert client.post(PATH, headers=scheduler_headers(), data=b"x" * 16).status_code == 200
    assert len(app.seen) == 1


def flask_app(view: Callable[..., Any]) -> flask.Flask:
    app = flask.Flask(__name__)
    app.add_url_rule(PATH, view_func=view, methods=["POST"])
    return app


def test_the_flask_decorator_runs_the_view_once_and_replays_its_result(
    guard: ServiceGuard, collection_name: str,
) -> None:
    runs: list[RunContext] = []

    @deduplicated(guard=guard)
    def export(run: RunContext) -> dict[str, Any]:
        runs.append(run)
        assert flask.request.path == PATH  # the view runs in its request
        if flask.request.get_json()["fail"] and run.attempt == 1:
            raise RuntimeError("the first attempt fails")
        return {"attempt": run.attempt}

    client = Client(flask_app(export))
    headers = scheduler_headers()
    body = json.dumps({"fail": True})
    assert client.post(PATH, headers=headers, data=body).status_code == 500
    done = client.post(PATH, headers=headers, data=body)
    assert done.status_code == 200 and done.json["result"] == {"attempt": 2}  # type: ignore[index]
    duplicate = client.post(PATH, headers=headers, data=body)
    assert duplicate.json["outcome"] == "duplicate"  # type: ignore[index]
    assert duplicate.headers["Content-Type"] == "application/json"
    assert [run.attempt for run in runs] == [1, 2]
    assert client.post(PATH, data=body).status_code == 400
    assert client.post(PATH, headers=headers, data="x" * 2048).status_code == 413
    assert len(runs) == 2 and len(records(collection_name)) == 1


def test_the_functions_framework_decorator_takes_the_request_it_is_passed(
    guard: ServiceGuard,
) -> None:
    runs: list[RunContext] = []

    @ff_adapter.deduplicated(guard=guard)
    def export(run: RunContext) -> str:
        runs.append(run)
        return f"exported {run.job_name}"

    # functions-framework calls the function with the flask.Request, as this view does.
    app = flask.Flask(__name__)
    app.add_url_rule(PATH, view_func=lambda: export(flask.request), methods=["POST"])
    client = Client(app)
    headers = scheduler_headers()
    first = client.post(PATH, headers=headers, data=b"{}")
    assert (first.status_code, first.json["result"]) == (200, "exported nightly-export")  # type: ignore[index]
    assert client.post(PATH, headers=headers).json["outcome"] == "duplicate"  # type: ignore[index]
    assert len(runs) == 1
    assert export.__name__ == "export"  # its name, which functions-framework's --target finds
    refused = client.post(PATH, headers=headers, data=b"x" * 2048)
    assert (refused.status_code, refused.headers["Connection"]) == (413, "close")


def test_the_wrapper_under_a_real_server_reads_the_body_without_waiting_for_more(
    guard: ServiceGuard,
) -> None:
    """Werkzeug's server hands its socket over as wsgi.input: reading past CONTENT_LENGTH
    would wait for the client's next request on a kept-alive connection."""
    app = Plain()
    server = make_server("127.0.0.1", 0, DedupWsgiMiddleware(app, [PATH], guard), threaded=True)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        with requests.Session() as session:  # one kept-alive connection for both
            url = f"http://127.0.0.1:{server.server_port}{PATH}"
            first = session.post(url, headers=scheduler_headers(), data=b'{"day": 2}',
                                 timeout=30)
            again = session.post(url, headers=scheduler_headers(), data=b'{"day": 2}',
                                 timeout=30)
    finally:
        server.shutdown()
        serving.join(timeout=30)
    assert (first.status_code, first.json()["outcome"]) == (200, "completed")
    assert (again.status_code, again.json()["outcome"]) == (200, "duplicate")
    assert [seen["body"] for seen in app.seen] == [b'{"day": 2}']

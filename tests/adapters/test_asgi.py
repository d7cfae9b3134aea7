"""dedup.adapters.asgi.DedupMiddleware, called in process as an ASGI server calls it (no
server, no network but the Firestore emulator's): what passes through untouched, the
kit's answers for a guarded path, the run in the endpoint's scope, and an event loop the
protocol never blocks. The served tests (uvicorn) are test_asgi_served.py's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from google.cloud import firestore

from dedup.adapters import asgi
from dedup.adapters.asgi import (
    RUN_STATE_KEY,
    DedupMiddleware,
    Message,
    Scope,
    current_run,
)
from dedup.adapters.guard import PERMANENT_FAILURE_HEADER, ServiceGuard
from dedup.logs import current_run_fields
from dedup.run_context import PermanentFailure, RunContext
from dedup.settings import Settings, SettingsError
from local_stack.deliveries import LOCATION, PROJECT, scheduler_headers
from tests.waiting import PATIENCE_SECONDS, let_time_pass

pytestmark = pytest.mark.usefixtures("firestore_emulator")

GUARDED = "/tasks/export"
SMALL_BODY_CAP = 64


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def asgi_call(
    app: Any, method: str, path: str, headers: Mapping[str, str] | None = None,
    body: bytes = b"", chunks: Iterable[bytes] | None = None, root_path: str = "",
    extensions: Mapping[str, Any] | None = None,
) -> Answer:
    """One HTTP request to `app` as an ASGI server makes it. `chunks`: the body sent in
    pieces without a Content-Length (chunked), else `body` with one. `root_path`: the app
    served under it (uvicorn --root-path, a Mount), which the scope's path then includes."""
    sent = {k.lower(): v for k, v in (headers or {}).items()}
    if chunks is None:
        sent["content-length"] = str(len(body))
        pieces = [body]
    else:
        pieces = list(chunks)
    messages: list[Message] = [
        {"type": "http.request", "body": piece, "more_body": i < len(pieces) - 1}
        for i, piece in enumerate(pieces)]
    scope: Scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": root_path + path, "raw_path": (root_path + path).encode(),
        "root_path": root_path,
        "query_string": b"", "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 80),
        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in sent.items()],
        "state": {}, "extensions": dict(extensions or {}),
    }

    async def receive() -> Message:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    answer = Answer(0, {}, b"")

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            answer.status = message["status"]
            answer.headers = {k.decode(): v.decode() for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            answer.body += message.get("body", b"")

    await app(scope, receive, send)
    return answer


def call(app: Any, method: str, path: str, headers: Mapping[str, str] | None = None,
         body: bytes = b"", chunks: Iterable[bytes] | None = None, root_path: str = ""
         ) -> Answer:
    return asyncio.run(asgi_call(app, method, path, headers, body, chunks, root_path))


class UnendedResponse(Response):
    """A 200 whose body stops before its last message (more_body never False)."""

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b'{"part": 1', "more_body": True})


@dataclass
class Service:
    """A FastAPI app guarded by the middleware, whose endpoint the body steers."""

    app: FastAPI
    guard: ServiceGuard
    log_lines: list[Mapping[str, Any]]
    runs: list[RunContext] = field(default_factory=list)
    # Set by the endpoint once it runs; the endpoint waits for `release` when asked to hold.
    started: asyncio.Event | None = None
    release: asyncio.Event | None = None


@pytest.fixture
def service(collection_name: str) -> Service:
    return guarded_service(collection_name)


def guarded_service(collection_name: str, **middleware_options: Any) -> Service:
    settings = Settings(project=PROJECT, location=LOCATION, collection=collection_name,
                        store_timeout_seconds=5, max_body_bytes=SMALL_BODY_CAP)
    log_lines: list[Mapping[str, Any]] = []
    guard = ServiceGuard(settings, firestore.Client(project=PROJECT), log_lines.append)
    app = FastAPI()
    app.add_middleware(DedupMiddleware, paths=[GUARDED], guard=guard, **middleware_options)
    built = Service(app, guard, log_lines)

    @app.post(GUARDED)
    async def export(request: Request) -> Response:
        run = current_run(request)
        built.runs.append(run)
        asked = json.loads(await request.body() or b"{}")
        if asked.get("hold"):
            assert built.started is not None and built.release is not None
            built.started.set()
            await asyncio.wait_for(built.release.wait(), PATIENCE_SECONDS)
        if "status" in asked:
            return JSONResponse({"why": "asked"}, status_code=asked["status"])
        if asked.get("raise"):
            raise RuntimeError("the endpoint failed")
        if asked.get("permanent"):
            raise PermanentFailure("cannot ever work", result={"gave_up": True})
        if "text" in asked:
            return PlainTextResponse(asked["text"])
        if "permanent_header" in asked:
            return JSONResponse({"gave_up": True}, status_code=422,
                                headers={PERMANENT_FAILURE_HEADER: asked["permanent_header"]})
        if asked.get("unended"):
            return UnendedResponse()
        if "file" in asked:
            return FileResponse(asked["file"], media_type="text/plain")
        state_run = request.state.dedup_run
        return JSONResponse({"run_id": run.run_id, "state_is_run": state_run is run,
                             "attempt": run.attempt, "body": asked,
                             "logs_name": current_run_fields().get("run_id")})

    @app.get(GUARDED)
    async def status_page() -> dict[str, str]:
        return {"page": "status"}

    @app.post("/other")
    async def other(request: Request) -> dict[str, Any]:
        try:
            current_run(request)
        except LookupError as exc:
            return {"unguarded": str(exc)}
        return {"unguarded": ""}

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return built


def record(collection: str) -> dict[str, Any]:
    (snapshot,) = list(firestore.Client(project=PROJECT).collection(collection).stream())
    data = snapshot.to_dict()
    assert data is not None
    return data


def test_other_paths_and_methods_pass_through_untouched(service: Service,
                                                        collection_name: str) -> None:
    page = call(service.app, "GET", GUARDED, scheduler_headers())
    assert (page.status, page.json()) == (200, {"page": "status"})
    other = call(service.app, "POST", "/other", scheduler_headers(), b"{}")
    assert other.status == 200
    assert "not a path DedupMiddleware guards" in other.json()["unguarded"]
    assert service.runs == []
    assert service.log_lines == []  # the protocol saw none of them
    assert list(firestore.Client(project=PROJECT).collection(collection_name).stream()) == []


@pytest.mark.parametrize("scope_type", ["lifespan", "websocket"])
def test_lifespan_and_websocket_scopes_reach_the_app_untouched(
    service: Service, scope_type: str
) -> None:
    seen: list[Scope] = []

    async def inner(scope: Scope, receive: Any, send: Any) -> None:
        seen.append(scope)

    middleware = DedupMiddleware(inner, paths=[GUARDED], guard=service.guard)
    scope: Scope = {"type": scope_type, "path": GUARDED, "method": "POST"}

    async def never(*_: Any) -> Any:
        raise AssertionError("the middleware must not talk to the server itself")

    asyncio.run(middleware(scope, never, never))
    assert seen == [scope] and seen[0] is scope


def lifespan_startup(middleware: DedupMiddleware) -> tuple[list[Message], list[Message]]:
    """The server's lifespan startup through `middleware`: (what the app behind it
    received, what the server was sent)."""
    received: list[Message] = []
    sent: list[Message] = []

    async def inner(scope: Scope, receive: Any, send: Any) -> None:
        received.append(await receive())
        await send({"type": "lifespan.startup.complete"})

    async def server_receive() -> Message:
        return {"type": "lifespan.startup"}

    async def server_send(message: Message) -> None:
        sent.append(message)

    middleware.app = inner
    asyncio.run(middleware({"type": "lifespan"}, server_receive, server_send))
    return received, sent


def test_the_guard_is_built_at_start_up_and_a_bad_setting_fails_it(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no guard given, the process's shared_guard() is built at the lifespan startup:
    a bad DEDUP_* setting is the server's startup.failed (uvicorn exits), never the app's
    requests failing one by one."""
    monkeypatch.setattr(asgi, "shared_guard", lambda: service.guard)
    middleware = DedupMiddleware(service.app, paths=[GUARDED])
    received, sent = lifespan_startup(middleware)
    assert received == [{"type": "lifespan.startup"}]  # given back to the app
    assert sent == [{"type": "lifespan.startup.complete"}]
    assert middleware.guard is service.guard

    def bad_settings() -> ServiceGuard:
        raise SettingsError("DEDUP_LOCATION is not set: set it to the function's region")

    monkeypatch.setattr(asgi, "shared_guard", bad_settings)
    received, sent = lifespan_startup(DedupMiddleware(service.app, paths=[GUARDED]))
    assert received == []  # the app never started
    assert sent == [{"type": "lifespan.startup.failed", "message":
                     "dedup: SettingsError: DEDUP_LOCATION is not set: set it to the "
                     "function's region"}]


def test_a_delivery_without_schedulers_headers_is_a_400_and_nothing_runs(
    service: Service, collection_name: str
) -> None:
    answer = call(service.app, "POST", GUARDED, {"Content-Type": "application/json"}, b"{}")
    assert answer.status == 400
    assert "error" in answer.json()
    assert answer.headers["content-type"] == "application/json"
    assert service.runs == []
    assert [line["outcome"] for line in service.log_lines] == ["rejected"]
    assert list(firestore.Client(project=PROJECT).collection(collection_name).stream()) == []


def test_a_run_completes_once_with_the_apps_json_as_its_result(
    service: Service, collection_name: str
) -> None:
    headers = scheduler_headers()
    first = call(service.app, "POST", GUARDED, headers, b'{"n": 1}')
    assert first.status == 200, first.body
    reply = first.json()
    assert reply["outcome"] == "completed"
    (run,) = service.runs
    # The endpoint's run is the delivery's, in the scope as request.state.dedup_run too;
    # the lines it logs name the run (the run's log fields reach the coroutine).
    assert reply["result"] == {"run_id": run.run_id, "state_is_run": True, "attempt": 1,
                               "body": {"n": 1}, "logs_name": run.run_id}
    assert reply["run_id"] == run.run_id
    again = call(service.app, "POST", GUARDED, headers, b'{"n": 2}')
    assert again.status == 200
    assert again.json()["outcome"] == "duplicate"
    assert again.json()["result"] == reply["result"]  # the stored result, replayed
    assert len(service.runs) == 1
    assert [line["outcome"] for line in service.log_lines] == ["completed", "duplicate"]
    assert record(collection_name)["status"] == "completed"


def test_a_text_answer_is_the_runs_result_as_text(service: Service) -> None:
    answer = call(service.app, "POST", GUARDED, scheduler_headers(), b'{"text": "42 rows"}')
    assert (answer.status, answer.json()["result"]) == (200, "42 rows")
    # Text that would parse as JSON stays text: only a JSON content type is parsed.
    other_run = scheduler_headers(schedule_time="2026-10-16T13:00:00Z")
    answer = call(service.app, "POST", GUARDED, other_run, b'{"text": "[1, 2]"}')
    assert (answer.status, answer.json()["result"]) == (200, "[1, 2]")


def test_a_guarded_route_is_guarded_under_a_root_path(
    service: Service, collection_name: str
) -> None:
    """uvicorn --root-path /svc (or a Mount at /svc): the scope's path is /svc/tasks/export,
    the route's /tasks/export. Two deliveries of one run: one execution."""
    headers = scheduler_headers()
    first = call(service.app, "POST", GUARDED, headers, b"{}", root_path="/svc")
    again = call(service.app, "POST", GUARDED, headers, b"{}", root_path="/svc")
    assert [first.json()["outcome"], again.json()["outcome"]] == ["completed", "duplicate"]
    assert len(service.runs) == 1
    assert [line["outcome"] for line in service.log_lines] == ["completed", "duplicate"]
    assert record(collection_name)["status"] == "completed"


def test_an_answer_cut_before_its_end_fails_the_run_and_releases_it(
    service: Service, collection_name: str
) -> None:
    headers = scheduler_headers()
    cut = call(service.app, "POST", GUARDED, headers, b'{"unended": true}')
    assert (cut.status, cut.json()["outcome"]) == (500, "failed")
    stored = record(collection_name)
    assert stored["status"] == "failed"
    assert "stopped before its end" in stored["error"]
    retried = call(service.app, "POST", GUARDED, headers, b"{}")
    assert retried.json()["outcome"] == "completed"


def test_a_file_answer_is_collected_whole_where_the_server_offers_pathsend(
    service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server offering http.response.pathsend (hypercorn, granian): the app is not offered
    it for a guarded delivery, so its file is sent as body messages, the run's result."""
    (tmp_path / "export.txt").write_text("3 rows exported")
    monkeypatch.chdir(tmp_path)  # a short relative path: the body cap is small here
    answer = asyncio.run(asgi_call(
        service.app, "POST", GUARDED, scheduler_headers(), b'{"file": "export.txt"}',
        extensions={"http.response.pathsend": {}}))
    assert (answer.status, answer.json()["outcome"]) == (200, "completed"), answer.body
    assert answer.json()["result"] == "3 rows exported"


def test_a_non_2xx_answer_with_the_permanent_failure_header_is_final(
    service: Service, collection_name: str
) -> None:
    headers = scheduler_headers()
    answer = call(service.app, "POST", GUARDED, headers,
                  b'{"permanent_header": "the export target is gone"}')
    assert (answer.status, answer.json()["outcome"]) == (200, "failed_permanent")
    assert answer.json()["result"] == {"gave_up": True}
    assert call(service.app, "POST", GUARDED, headers, b"{}").json()["outcome"] == (
        "failed_permanent")
    assert len(service.runs) == 1
    stored = record(collection_name)
    assert (stored["permanent"], stored["error"]) == (True, "the export target is gone")


@pytest.mark.parametrize("failure", [{"status": 503}, {"status": 404}, {"raise": True}],
                         ids=["answered-503", "answered-404", "raised"])
def test_a_non_2xx_answer_or_an_exception_fails_the_run_and_releases_it(
    service: Service, collection_name: str, failure: dict[str, Any]
) -> None:
    headers = scheduler_headers()
    failed = call(service.app, "POST", GUARDED, headers, json.dumps(failure).encode())
    assert failed.status == 500, failed.body
    assert failed.json()["outcome"] == "failed"
    stored = record(collection_name)
    assert stored["status"] == "failed"
    assert ("answered" in stored["error"]) != ("raise" in failure), stored["error"]
    # Released: Scheduler's retry claims the run at once and runs it.
    retried = call(service.app, "POST", GUARDED, headers, b"{}")
    assert retried.status == 200, retried.body
    assert retried.json()["outcome"] == "completed"
    assert [run.attempt for run in service.runs] == [1, 2]
    assert record(collection_name)["status"] == "completed"


def test_a_permanent_failure_raised_by_the_endpoint_is_final(
    service: Service, collection_name: str
) -> None:
    headers = scheduler_headers()
    answer = call(service.app, "POST", GUARDED, headers, b'{"permanent": true}')
    assert (answer.status, answer.json()["outcome"]) == (200, "failed_permanent")
    assert answer.json()["result"] == {"gave_up": True}
    assert call(service.app, "POST", GUARDED, headers, b"{}").json()["outcome"] == (
        "failed_permanent")
    assert len(service.runs) == 1
    assert record(collection_name)["permanent"] is True


def test_a_body_over_the_cap_is_a_413_and_nothing_runs(
    service: Service, collection_name: str
) -> None:
    big = b"x" * (SMALL_BODY_CAP + 1)
    declared = call(service.app, "POST", GUARDED, scheduler_headers(), big)
    chunked = call(service.app, "POST", GUARDED, scheduler_headers(),
                   chunks=[big[:40], big[40:]])
    for answer in (declared, chunked):
        assert answer.status == 413
        assert "DEDUP_MAX_BODY_BYTES" in answer.json()["error"]
        assert answer.headers["connection"] == "close"
    at_cap = call(service.app, "POST", GUARDED, scheduler_headers(),
                  chunks=[b'{"text": "', b"y" * (SMALL_BODY_CAP - 13), b'"}'])
    assert at_cap.status == 200, at_cap.body
    assert len(service.runs) == 1
    assert [line["outcome"] for line in service.log_lines] == [
        "too_large", "too_large", "completed"]


def test_the_event_loop_serves_other_requests_while_a_guarded_job_awaits(
    service: Service,
) -> None:
    """The job awaits an event the test sets only after a /healthz request, on the same
    loop, has been answered: were the loop blocked by the protocol, neither would come."""

    async def scene() -> tuple[Answer, Answer]:
        service.started, service.release = asyncio.Event(), asyncio.Event()
        guarded = asyncio.create_task(asgi_call(
            service.app, "POST", GUARDED, scheduler_headers(), b'{"hold": true}'))
        await asyncio.wait_for(service.started.wait(), PATIENCE_SECONDS)
        health = await asyncio.wait_for(
            asgi_call(service.app, "GET", "/healthz"), PATIENCE_SECONDS)
        assert not guarded.done()
        service.release.set()
        return health, await asyncio.wait_for(guarded, PATIENCE_SECONDS)

    health, guarded = asyncio.run(scene())
    assert (health.status, health.json()) == (200, {"status": "ok"})
    assert (guarded.status, guarded.json()["outcome"]) == (200, "completed")


def test_deliveries_beyond_max_concurrent_runs_wait_for_a_thread_not_the_loop(
    collection_name: str,
) -> None:
    """One worker thread: a second run's delivery waits (unclaimed) while the first run's
    job holds it, and the loop still serves; once the first ends, the second runs."""
    service = guarded_service(collection_name, max_concurrent_runs=1)

    async def scene() -> tuple[Answer, Answer, Answer, int]:
        service.started, service.release = asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(asgi_call(
            service.app, "POST", GUARDED, scheduler_headers(), b'{"hold": true}'))
        await asyncio.wait_for(service.started.wait(), PATIENCE_SECONDS)
        second = asyncio.create_task(asgi_call(
            service.app, "POST", GUARDED,
            scheduler_headers(schedule_time="2026-10-16T13:00:00Z"), b"{}"))
        health = await asyncio.wait_for(
            asgi_call(service.app, "GET", "/healthz"), PATIENCE_SECONDS)
        await asyncio.to_thread(
            let_time_pass, 1.0, "the second run must not start while the only thread is "
            "held: a longer wait would not let it either")
        runs_while_held = len(service.runs)
        service.release.set()
        answers = await asyncio.wait_for(asyncio.gather(first, second), PATIENCE_SECONDS)
        return health, *answers, runs_while_held

    health, first, second, runs_while_held = asyncio.run(scene())
    assert health.status == 200
    assert runs_while_held == 1  # the second delivery had no thread to run on
    assert [first.json()["outcome"], second.json()["outcome"]] == ["completed", "completed"]
    assert len(service.runs) == 2
    with pytest.raises(ValueError, match="at least 1"):
        DedupMiddleware(service.app, [GUARDED], guard=service.guard, max_concurrent_runs=0)


def test_current_run_names_what_is_missing_outside_a_guarded_request() -> None:
    @dataclass
    class Bare:
        scope: dict[str, Any]

    with pytest.raises(LookupError, match="POST /x is not a path DedupMiddleware guards"):
        current_run(Bare({"type": "http", "method": "POST", "path": "/x", "state": {}}))
    assert RUN_STATE_KEY == "dedup_run"  # request.state.dedup_run, as documented

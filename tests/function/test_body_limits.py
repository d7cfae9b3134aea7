"""The request-body cap (DEDUP_MAX_BODY_BYTES): an oversized body gets a 413 before it is
read in full, parsed or written anywhere, on every entry point."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from google.cloud import firestore

from dedup.entry.http import BodyTooLarge, read_bounded_body
from dedup.settings import DEFAULT_MAX_BODY_BYTES, SettingsError, max_body_bytes_setting
from local_stack import FunctionServer
from local_stack.deliveries import PROJECT, function_env, scheduler_headers
from local_stack.processes import REPO_ROOT
from local_stack.steered_job import read_ledger
from local_stack.tables import write_job_tables
from tests.waiting import wait_until

CAP = 4096
THIRTY_TWO_MIB = 32 * 1024 * 1024


class CountingStream:
    """A request stream that says how much of it was read."""

    def __init__(self, size: int) -> None:
        self._left = size
        self.read_bytes = 0

    def read(self, size: int = -1, /) -> bytes:
        n = self._left if size < 0 else min(size, self._left, 1000)  # short reads, as sockets
        self._left -= n
        self.read_bytes += n
        return b"x" * n


def test_a_declared_length_over_the_cap_is_refused_unread() -> None:
    stream = CountingStream(THIRTY_TWO_MIB)
    with pytest.raises(BodyTooLarge) as raised:
        read_bounded_body(THIRTY_TWO_MIB, stream, CAP)
    assert stream.read_bytes == 0
    assert f"of {THIRTY_TWO_MIB} bytes, over {CAP} bytes (DEDUP_MAX_BODY_BYTES)" in str(
        raised.value)
    assert "\n" not in str(raised.value)


def test_without_a_length_at_most_cap_plus_one_bytes_are_read() -> None:
    stream = CountingStream(THIRTY_TWO_MIB)
    with pytest.raises(BodyTooLarge):
        read_bounded_body(None, stream, CAP)
    assert stream.read_bytes == CAP + 1


@pytest.mark.parametrize("size", [0, 1, CAP - 1, CAP])
def test_a_body_up_to_the_cap_is_read_whole(size: int) -> None:
    assert read_bounded_body(None, CountingStream(size), CAP) == b"x" * size
    assert read_bounded_body(size, CountingStream(size), CAP) == b"x" * size


def test_the_cap_setting() -> None:
    assert max_body_bytes_setting({}) == DEFAULT_MAX_BODY_BYTES == 1048576
    assert max_body_bytes_setting({"DEDUP_MAX_BODY_BYTES": "2048"}) == 2048
    for bad, message in (("lots", "is not a number of bytes"), ("0", "must be at least 1")):
        with pytest.raises(SettingsError, match=message):
            max_body_bytes_setting({"DEDUP_MAX_BODY_BYTES": bad})


# --- served, as Cloud Run runs it -------------------------------------------------------


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.jsonl"


@pytest.fixture
def server(
    firestore_emulator: object, collection_name: str, ledger: Path
) -> Iterator[FunctionServer]:
    env = function_env(collection_name, ledger, DEDUP_MAX_BODY_BYTES=str(CAP))
    with FunctionServer(env, workers=1, threads=4, extra_pythonpath=[REPO_ROOT]) as served:
        yield served


def post_declaring(
    url: str, headers: dict[str, str], declared: int, sent: bytes
) -> tuple[int, str]:
    """POST declaring `declared` bytes but sending only `sent`: the answer must come
    without the server waiting for (or reading) the rest."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as conn:
        head = ["POST / HTTP/1.1", f"Host: {parts.netloc}", f"Content-Length: {declared}",
                "Connection: close", *(f"{k}: {v}" for k, v in headers.items())]
        conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + sent)
        answer = b""
        while chunk := conn.recv(65536):  # the server closes the connection after a 413
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2].decode()


def nothing_written(collection: str, ledger: Path) -> bool:
    client = firestore.Client(project=PROJECT)
    return list(client.collection(collection).stream()) == [] and read_ledger(str(ledger)) == []


def test_served_a_huge_declared_body_is_a_fast_413_and_writes_nothing(
    server: FunctionServer, collection_name: str, ledger: Path
) -> None:
    started = time.monotonic()
    status, body = post_declaring(server.url, scheduler_headers(), THIRTY_TWO_MIB, b"[{}," * 1000)
    elapsed = time.monotonic() - started
    assert status == 413, body
    assert "DEDUP_MAX_BODY_BYTES" in json.loads(body)["error"]
    # Had the server waited for the 32 MiB never sent, the answer would come only at the
    # client's 10 s socket timeout; a loaded machine can take seconds to answer at all.
    assert elapsed < 8.0, f"the 413 took {elapsed:.2f}s: was the body read?"
    assert nothing_written(collection_name, ledger)
    lines = [json.loads(line) for line in server.log_text.splitlines() if line.startswith("{")]
    [refused] = [e for e in lines if e.get("outcome") == "too_large"]
    assert refused["severity"] == "WARNING" and refused["status"] == 413


def test_served_a_chunked_body_over_the_cap_is_a_413_and_one_at_the_cap_runs(
    server: FunctionServer, collection_name: str, ledger: Path
) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(10):
            yield b" " * 1024  # no Content-Length: Transfer-Encoding chunked

    over = requests.post(server.url, headers=scheduler_headers(), data=chunks(), timeout=30)
    assert over.status_code == 413 and "over 4096 bytes" in over.json()["error"]
    assert nothing_written(collection_name, ledger)
    body = json.dumps({"result": 1}).encode()
    at_cap = body + b" " * (CAP - len(body))
    ok = requests.post(server.url, headers=scheduler_headers(), data=at_cap, timeout=30)
    assert (ok.status_code, ok.json()["outcome"]) == (200, "completed")


def test_served_a_failing_jobs_traceback_is_one_structured_entry(
    server: FunctionServer,
) -> None:
    """The function's own `log.exception` (the job raised) is one JSON line on stdout, its
    traceback inside `message`, never raw multi-line text a crafted message could forge
    a log entry in."""
    reply = requests.post(server.url, headers=scheduler_headers(), data=b'{"fail": true}',
                          timeout=30)
    assert (reply.status_code, reply.json()["outcome"]) == (500, "failed")
    wait_until(lambda: "job asked to fail" in server.log_text,
               what="the job's traceback in the function's log")
    lines = server.log_text.splitlines()
    [entry] = [json.loads(line) for line in lines
               if line.startswith("{") and "Traceback" in line]
    assert entry["severity"] == "ERROR"
    assert "Traceback (most recent call last):" in entry["message"]
    assert "RuntimeError: job asked to fail" in entry["message"]
    raw = [line for line in lines if not line.startswith("{") and (
        line.startswith(("Traceback", "  File ", "RuntimeError")))]
    assert raw == []


def test_served_the_watchdog_refuses_a_huge_body_too(
    firestore_emulator: object, collection_name: str, tmp_path: Path
) -> None:
    """The cap sits in front of every entry point, the watchdog's included."""
    env = {
        "DEDUP_PROJECT": PROJECT,
        "DEDUP_LOCATION": "europe-west1",
        "DEDUP_COLLECTION": collection_name,
        **write_job_tables(tmp_path, watch_jobs=[{"name": "minutely", "schedule": "* * * * *"}]),
        "FIRESTORE_EMULATOR_HOST": os.environ["FIRESTORE_EMULATOR_HOST"],
        "GOOGLE_CLOUD_PROJECT": PROJECT,
    }
    cursors = firestore.Client(project=PROJECT).collection(f"{collection_name}_watchdog")

    def written() -> list[tuple[str, object]]:
        return sorted((d.id, d.update_time) for d in cursors.stream())

    with FunctionServer(env, target="watch_scheduled_runs") as watchdog:
        before = written()  # the readiness probe may have ticked once
        status, body = post_declaring(watchdog.url, {}, THIRTY_TWO_MIB, b"{}")
        assert status == 413 and "DEDUP_MAX_BODY_BYTES" in body
        assert written() == before

"""A small local HTTP target that records what a Scheduler emulator sends it."""

from __future__ import annotations

import bisect
import itertools
import select
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.waiting import job_works_for


@dataclass
class Received:
    method: str
    path: str
    headers: list[tuple[str, str]]  # as sent, names in their original case
    body: bytes
    at: datetime | None  # the emulator clock's time on arrival, if a clock was given
    # Set once answered: had the client closed the connection before the answer was due?
    hung_up: bool | None = None

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None


# (status, real seconds to wait before answering)
Responder = Callable[[Received], tuple[int, float]]


def _peer_closed(conn: socket.socket) -> bool:
    """Has the client closed its side (EOF waiting to be read)?"""
    readable, _, _ = select.select([conn], [], [], 0)
    if not readable:
        return False
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class RecordingTarget:
    """Records each request; answers per `responder`. `redirects` maps a path to (3xx
    status, Location) answered at once, before the responder is asked."""

    def __init__(
        self,
        responder: Responder | None = None,
        now: Callable[[], datetime] | None = None,
        redirects: dict[str, tuple[int, str]] | None = None,
    ):
        self.responder: Responder = responder or (lambda r: (200, 0.0))
        self.redirects = redirects or {}
        self.now = now
        # In the order the requests' connections arrived (accepted one at a time), not the
        # order their handler threads got to run: on a loaded machine a later request's
        # thread may run first.
        self.received: list[Received] = []
        self.completed: list[Received] = []
        self._lock = threading.Lock()
        self._arrivals: dict[socket.socket, int] = {}
        self._received_at: list[int] = []  # each received request's arrival number
        target = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                rec = Received(
                    self.command,
                    self.path,
                    list(self.headers.items()),
                    body,
                    target.now() if target.now else None,
                )
                with target._lock:
                    arrival = target._arrivals.pop(self.connection)
                    index = bisect.bisect(target._received_at, arrival)
                    target._received_at.insert(index, arrival)
                    target.received.insert(index, rec)
                location = None
                if self.path in target.redirects:
                    (status, location), delay = target.redirects[self.path], 0.0
                else:
                    status, delay = target.responder(rec)
                if delay:
                    job_works_for(delay)  # the target's handler takes its time
                rec.hung_up = _peer_closed(self.connection)
                with target._lock:
                    target.completed.append(rec)
                payload = b'{"outcome": "test"}'
                try:
                    self.send_response(status)
                    if location is not None:
                        self.send_header("Location", location)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass

            do_GET = do_POST
            do_PUT = do_POST

            def log_message(self, format: str, *args: object) -> None:
                pass

        arrivals = itertools.count()

        class Server(ThreadingHTTPServer):
            def process_request(self, request: Any, client_address: Any) -> None:
                # The serving thread, in the order connections were accepted.
                with target._lock:
                    target._arrivals[request] = next(arrivals)
                super().process_request(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    @contextmanager
    def serving(self) -> Iterator[RecordingTarget]:
        thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()
            thread.join(5)

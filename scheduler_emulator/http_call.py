"""One HTTP request of the emulator's (HttpCall), sent in its own thread so the emulator can
stop waiting for it at the attempt deadline and hang up, as Scheduler cancels the request
(the target may keep running). It follows redirects, as Scheduler does."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from urllib.parse import urljoin, urlsplit

from scheduler_emulator.records import DEADLINE_EXCEEDED, Delivery

# Redirects (3xx with Location) followed per attempt, as Scheduler follows them.
MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)


class HttpCall:
    """An HTTP request in its own thread, so the emulator can stop waiting for it and, at
    the attempt deadline, close its connection as Scheduler cancels the request."""

    def __init__(self, delivery: Delivery) -> None:
        self.delivery = delivery
        self.done = threading.Event()
        # Set once the request is written (or the call ended): from then on it is in flight.
        self.sent = threading.Event()
        self._lock = threading.Lock()
        self._abandoned = False
        self._conn: http.client.HTTPConnection | None = None
        self.thread: threading.Thread | None = None

    def start(
        self,
        url: str,
        method: str,
        headers: dict[str, str],
        body: bytes | None,
        socket_timeout: float,
    ) -> None:
        self.thread = threading.Thread(
            target=self._run,
            args=(url, method, headers, body, socket_timeout),
            name=f"delivery-{self.delivery.job}-{self.delivery.tick}",
            daemon=True,
        )
        self.thread.start()

    def abandon(self) -> bool:
        """The deadline passed: close the connection (the target sees the client go) and
        count the attempt as failed. False if the reply came in at the same moment."""
        with self._lock:
            if self.done.is_set():
                return False
            self._abandoned = True
            self.delivery.error = DEADLINE_EXCEEDED
            conn = self._conn
        if conn is not None:
            hang_up(conn)
        return True

    def _run(
        self,
        url: str,
        method: str,
        headers: dict[str, str],
        body: bytes | None,
        socket_timeout: float,
    ) -> None:
        started = time.monotonic()
        with self._lock:
            self.delivery.sent_real = started
        status: int | None = None
        text = ""
        error: str | None = None
        followed: list[str] = []
        try:
            for _ in range(MAX_REDIRECTS + 1):
                status, location, text = self._request(url, method, headers, body, socket_timeout)
                if status not in _REDIRECTS or not location:
                    break
                if len(followed) == MAX_REDIRECTS:
                    status, error = None, f"more than {MAX_REDIRECTS} redirects"
                    break
                url = urljoin(url, location)
                followed.append(url)
                if status == 303 or (status in (301, 302) and method == "POST"):
                    # As HTTP clients generally do: 303 (and 301/302 after a POST) becomes
                    # a GET without the body; 307/308 repeat the request as it was.
                    method, body = "GET", None
                    headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        except (OSError, http.client.HTTPException) as exc:
            status, error = None, f"{type(exc).__name__}: {exc}".strip()
        with self._lock:
            d = self.delivery
            d.real_seconds = time.monotonic() - started
            d.redirects = tuple(followed)
            if not self._abandoned:  # else: Scheduler has hung up; nothing more is seen
                d.status = status
                d.error = error
                d.reply_body = text
            self.done.set()
            self.sent.set()

    def _request(
        self, url: str, method: str, headers: dict[str, str], body: bytes | None, timeout: float
    ) -> tuple[int, str | None, str]:
        """One HTTP exchange: (status, Location header, first 500 characters of the body)."""
        parts = urlsplit(url)
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(parts.netloc, timeout=timeout)
        else:
            conn = http.client.HTTPConnection(parts.netloc, timeout=timeout)
        with self._lock:
            if self._abandoned:
                raise ConnectionAbortedError("deadline exceeded before the request was sent")
            self._conn = conn
        path = parts.path or "/"
        if parts.query:
            path = f"{path}?{parts.query}"
        try:
            conn.request(method, path, body=body, headers=headers)
            self.sent.set()
            response = conn.getresponse()
            data = response.read()
            return response.status, response.getheader("Location"), data[:500].decode(
                "utf-8", "replace"
            )
        finally:
            with self._lock:
                self._conn = None
            conn.close()


def hang_up(conn: http.client.HTTPConnection) -> None:
    """Hang up a connection another thread is blocked on: shutdown wakes its recv(), and
    that thread closes it."""
    sock = conn.sock
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)

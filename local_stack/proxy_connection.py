"""One connection through the store-fault proxy (local_stack.store_faults): the client's
socket and its own socket to the store, pumped by two threads; the store's bytes can be
held back (a stall), released late, or the connection reset (a lost reply, an outage)."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable

_BUFFER = 65536


class ProxyConnection:
    """One client connection and its own upstream connection, pumped by two threads.

    Locks: `_state` guards the flags and the held bytes and is never held across I/O;
    `_send` serialises writes to the client, so bytes released after a stall cannot be
    overtaken by newer ones. close() takes neither lock across I/O: shutdown() wakes a
    pump blocked in recv or sendall, and the last pump to exit closes both sockets.
    """

    def __init__(
        self,
        client: socket.socket,
        upstream: socket.socket,
        name: str,
        on_exit: Callable[[ProxyConnection], None],
    ) -> None:
        self._client = client
        self._upstream = upstream
        self._on_exit = on_exit
        self._state = threading.Lock()
        self._send = threading.Lock()
        self._held = bytearray()
        self._stalled = False
        self._upstream_eof = False
        self._closing = False
        self._reset = False
        self._running = 2
        self.threads = (
            threading.Thread(target=self._pump_up, name=f"{name}-up", daemon=True),
            threading.Thread(target=self._pump_down, name=f"{name}-down", daemon=True),
        )

    def start(self, stalled: bool) -> None:
        self._stalled = stalled
        for thread in self.threads:
            thread.start()

    def hold(self) -> None:
        """From now on, keep store->client bytes back until release() or close()."""
        with self._state:
            self._stalled = True

    def release(self) -> None:
        """Deliver the held bytes (late) and forward again."""
        with self._send:
            with self._state:
                if self._closing:
                    return
                self._stalled = False
                data = bytes(self._held)
                self._held.clear()
                eof = self._upstream_eof
            if data:
                try:
                    self._client.sendall(data)
                except OSError:
                    eof = True
        if eof:  # the store closed while we held its last bytes: close after them
            self.close()

    def close(self, *, reset: bool = False) -> None:
        """End the connection: a FIN to the client, or with `reset` a bare TCP RST.

        For a reset the client side is only shut for reading (that wakes the pump in
        recv() and sends nothing); the last pump then closes it with SO_LINGER 0.
        """
        with self._state:
            if self._closing:
                return
            self._closing = True
            self._reset = reset
            self._held.clear()
        _shutdown(self._client, socket.SHUT_RD if reset else socket.SHUT_RDWR)
        _shutdown(self._upstream, socket.SHUT_RDWR)

    def force(self) -> None:
        """Shut both sockets fully: wakes a pump stuck in sendall() to a client that
        stopped reading (a reset's SHUT_RD does not)."""
        self.close(reset=True)
        _shutdown(self._client, socket.SHUT_RDWR)

    def _pump_up(self) -> None:
        """Client -> store, always at once: a write reaches the store whatever the fault."""
        try:
            while True:
                data = self._client.recv(_BUFFER)
                if not data:
                    break
                self._upstream.sendall(data)
        except OSError:
            pass
        finally:
            self.close()
            self._exited()

    def _pump_down(self) -> None:
        """Store -> client, unless stalled: then the bytes wait in `_held`."""
        close = True
        try:
            while True:
                data = self._upstream.recv(_BUFFER)
                with self._send:
                    with self._state:
                        if self._closing:
                            break
                        if not data:
                            if self._stalled:  # deliver the held tail first: release()
                                self._upstream_eof = True
                                close = False
                            break
                        if self._stalled:
                            self._held += data
                            continue
                    self._client.sendall(data)
        except OSError:
            pass
        finally:
            if close:
                self.close()
            self._exited()

    def _exited(self) -> None:
        with self._state:
            self._running -= 1
            last = self._running == 0
            reset = self._reset
        if not last:
            return
        if reset:  # SO_LINGER 0: close() sends RST, the client sees a reset connection
            with contextlib.suppress(OSError):
                self._client.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
        self._client.close()
        self._upstream.close()
        self._on_exit(self)


def _shutdown(sock: socket.socket, how: int) -> None:
    with contextlib.suppress(OSError):  # already shut, or the peer is gone
        sock.shutdown(how)

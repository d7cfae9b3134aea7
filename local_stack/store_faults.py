"""Store-side faults: a TCP proxy between a Firestore client and the Firestore emulator.

Scheduler-side faults (a lost 200, a slow attempt) are injected by scheduler_emulator/.
This module injects the other half: faults between the function and its store, the ones
that make "did my write land?" ambiguous:

- `stall(s)`: the store's replies are held back for `s` seconds, then delivered (a late
  reply: the client's deadline expires although its write landed);
- `stall(s, drop=True)`: the replies are held back, then discarded and the client's
  connections reset (a lost reply: the write landed, the client never learns it);
- `outage(s)`: every connection is reset and, for `s` seconds, new ones are closed at
  once (the store is unreachable).

The proxy works on bytes, below gRPC and HTTP/2: client->store bytes are always forwarded
at once, so a write reaches the emulator and lands even while its reply is held. Holding
the store->client bytes also holds HTTP/2 SETTINGS and PING acks; that is what a stalled
network does. Standard library only (threads and blocking sockets): two pump threads per
connection, one accept thread, one short timer thread per fault, one schedule thread.

Point a client at it with FIRESTORE_EMULATOR_HOST=`proxy.host` (read when the client is
constructed). The faults and their seeded schedules are fault_schedule.py's; each proxied
connection is a proxy_connection.ProxyConnection.
"""

from __future__ import annotations

import contextlib
import itertools
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from types import TracebackType

from local_stack.fault_schedule import FaultKind, FaultSchedule, InjectedFault
from local_stack.proxy_connection import ProxyConnection

_CONNECT_TIMEOUT = 5.0


class StoreFaultProxy:
    """A TCP proxy in front of the Firestore emulator that injects store-side faults.

    `upstream` is the emulator's "host:port". start() listens on 127.0.0.1 (a free port);
    `host` is what to put in FIRESTORE_EMULATOR_HOST. Faults apply to every connection,
    current and new. Every method is thread-safe; stop() ends all threads and closes all
    sockets. A context manager: `with StoreFaultProxy(emulator.host) as proxy: ...`.
    """

    def __init__(self, upstream: str) -> None:
        host, sep, port = upstream.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"upstream must be 'host:port', got {upstream!r}")
        self.upstream = upstream
        self._upstream_addr = (host.strip("[]"), int(port))
        self._lock = threading.Lock()
        self._healthy = threading.Condition(self._lock)
        self._listener: socket.socket | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._port = 0
        self._started = False
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._connections: set[ProxyConnection] = set()
        self._conn_ids = itertools.count(1)
        # Stall state: one stall at a time; overlapping calls extend it (drop if any drops).
        self._stall_active = False
        self._stall_until = 0.0
        self._stall_drop = False
        self._stall_gen = 0
        self._stalled_conns: set[ProxyConnection] = set()
        self._ending = 0  # stalls ended whose held bytes or resets are still going out
        # Outage state.
        self._outage_active = False
        self._outage_until = 0.0
        self._outage_gen = 0
        # Record.
        self._events: list[InjectedFault] = []
        self._accepted = 0
        self._refused = 0
        self._reset = 0
        # Schedule.
        self._schedule_thread: threading.Thread | None = None
        self._schedule_stop = threading.Event()

    # ----------------------------------------------------------------- life cycle

    def start(self) -> StoreFaultProxy:
        with self._lock:
            if self._started:
                raise RuntimeError("StoreFaultProxy already started")
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", 0))
            listener.listen(64)
            self._listener = listener
            self._port = int(listener.getsockname()[1])
            # A socketpair wakes the accept loop on stop(): portable, unlike shutdown()
            # of a listening socket (which wakes accept() on Linux only).
            self._wake_r, self._wake_w = socket.socketpair()
            self._started = True
            self._spawn(self._accept_loop, "store-fault-proxy-accept")
        return self

    @property
    def port(self) -> int:
        return self._port

    @property
    def host(self) -> str:
        """The value for FIRESTORE_EMULATOR_HOST: "127.0.0.1:PORT"."""
        if not self._port:
            raise RuntimeError("StoreFaultProxy not started")
        return f"127.0.0.1:{self._port}"

    def stop(self) -> None:
        """Stop the schedule, reset every connection, join every thread. Idempotent."""
        self.stop_schedule()
        with self._lock:
            if not self._started or self._stopping.is_set():
                return
            self._stopping.set()  # wakes the fault timers: they end without acting
            self._schedule_stop.set()  # a schedule started since stop_schedule() above
            connections = list(self._connections)
            self._stall_active = self._outage_active = False
            self._stalled_conns.clear()
            self._healthy.notify_all()
        if self._wake_w is not None:
            with contextlib.suppress(OSError):
                self._wake_w.send(b"x")
        for connection in connections:
            connection.close(reset=True)
        while True:  # a connection accepted meanwhile adds threads: join until none left
            with self._lock:
                pending = [t for t in self._threads if t.is_alive()]
                if not pending:
                    self._threads.clear()
                    break
            for thread in pending:
                thread.join(timeout=1.0)
                if thread.is_alive():  # a pump blocked sending to a client that never reads
                    with self._lock:
                        stuck = list(self._connections)
                    for connection in stuck:
                        connection.force()
                    thread.join(timeout=5.0)
                if thread.is_alive():
                    raise RuntimeError(f"StoreFaultProxy: thread {thread.name} did not stop")
        for sock in (self._listener, self._wake_r, self._wake_w):
            if sock is not None:
                sock.close()

    def __enter__(self) -> StoreFaultProxy:
        if not self._started:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ----------------------------------------------------------------- faults

    def stall(self, seconds: float, *, drop: bool = False, wait: bool = False) -> InjectedFault:
        """Hold back every store->client byte for `seconds` (client->store flows on).

        Then deliver the held bytes (drop=False: a late reply) or discard them and reset
        the connections that were open during the stall (drop=True: a lost reply; the
        client reconnects). Returns at once unless `wait`. A stall during a stall
        extends it to the later end, and it drops if either drops.
        """
        kind = FaultKind.STALL_DROP if drop else FaultKind.STALL_LATE
        with self._lock:
            fault = self._record(kind, seconds)
            self._stall_gen += 1
            generation = self._stall_gen
            self._stall_active = True
            self._stall_until = max(self._stall_until, fault.end)
            self._stall_drop = self._stall_drop or drop
            for connection in self._connections:
                connection.hold()
                self._stalled_conns.add(connection)
            delay = self._stall_until - time.monotonic()
            self._after(delay, lambda: self._end_stall(generation))
        if wait:
            self.wait_healthy()
        return fault

    def outage(self, seconds: float, *, wait: bool = False) -> InjectedFault:
        """Reset every connection, and for `seconds` close new ones as soon as accepted.

        Returns at once unless `wait`. An outage during an outage extends it.
        """
        with self._lock:
            fault = self._record(FaultKind.OUTAGE, seconds)
            self._outage_gen += 1
            generation = self._outage_gen
            self._outage_active = True
            self._outage_until = max(self._outage_until, fault.end)
            connections = list(self._connections)
            self._reset += len(connections)
            delay = self._outage_until - time.monotonic()
            self._after(delay, lambda: self._end_outage(generation))
        for connection in connections:
            connection.close(reset=True)
        if wait:
            self.wait_healthy()
        return fault

    def heal(self) -> None:
        """End the current stall and outage now, as if their time were up."""
        with self._lock:
            stall_gen, outage_gen = self._stall_gen, self._outage_gen
        self._end_stall(stall_gen)
        self._end_outage(outage_gen)

    @property
    def healthy(self) -> bool:
        """No stall and no outage in progress."""
        with self._lock:
            return self._is_healthy()

    def wait_healthy(self, timeout: float | None = None) -> bool:
        """Block until no stall or outage is in progress (and an ended stall's bytes are
        delivered or its connections reset); False if `timeout` ran out."""
        with self._healthy:
            return self._healthy.wait_for(self._is_healthy, timeout)

    def _is_healthy(self) -> bool:
        return not (self._stall_active or self._outage_active or self._ending)

    # ----------------------------------------------------------------- schedule

    def run_schedule(self, schedule: FaultSchedule) -> None:
        """Inject `schedule`'s faults from a background thread until it is exhausted
        or stop_schedule()/stop() is called. One fault at a time: the next gap starts
        when the previous fault has ended.
        """
        with self._lock:
            if not self._started or self._stopping.is_set():
                raise RuntimeError("StoreFaultProxy not running")
            if self._schedule_thread is not None and self._schedule_thread.is_alive():
                raise RuntimeError("a schedule is already running; stop_schedule() first")
            self._schedule_stop = threading.Event()
            stop = self._schedule_stop
            self._schedule_thread = self._spawn(
                lambda: self._run_schedule(schedule, stop), "store-fault-proxy-schedule"
            )

    def stop_schedule(self) -> None:
        """Inject no further faults; a fault in progress runs to its end (or heal())."""
        with self._lock:
            thread, self._schedule_thread = self._schedule_thread, None
            self._schedule_stop.set()
        if thread is not None:
            thread.join()

    def join_schedule(self, timeout: float | None = None) -> bool:
        """Wait for a schedule with a `count` to finish; False if `timeout` ran out."""
        with self._lock:
            thread = self._schedule_thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def _run_schedule(self, schedule: FaultSchedule, stop: threading.Event) -> None:
        for planned in schedule.faults():
            if stop.wait(planned.gap):
                return
            try:
                if planned.kind is FaultKind.OUTAGE:
                    self.outage(planned.duration)
                else:
                    self.stall(planned.duration, drop=planned.kind is FaultKind.STALL_DROP)
            except RuntimeError:  # the proxy stopped under us
                return
            if stop.wait(planned.duration):
                return

    # ----------------------------------------------------------------- record

    @property
    def injected(self) -> list[InjectedFault]:
        """Every fault injected so far, in order (a copy)."""
        with self._lock:
            return list(self._events)

    @property
    def counts(self) -> dict[FaultKind, int]:
        """How many faults of each kind were injected (every kind present, maybe 0)."""
        with self._lock:
            counts = dict.fromkeys(FaultKind, 0)
            for event in self._events:
                counts[event.kind] += 1
            return counts

    def summary(self) -> str:
        """E.g. "2 stall-late, 1 stall-drop, 0 outage; 9 connections, 3 reset, 1 refused"."""
        faults = ", ".join(f"{n} {kind.value}" for kind, n in self.counts.items())
        with self._lock:
            return (
                f"{faults}; {self._accepted} connections, {self._reset} reset, "
                f"{self._refused} refused"
            )

    @property
    def connections_accepted(self) -> int:
        """Client connections proxied to the store (refused ones not included)."""
        with self._lock:
            return self._accepted

    @property
    def connections_reset(self) -> int:
        """Connections reset by a stall-drop or an outage (not by stop())."""
        with self._lock:
            return self._reset

    @property
    def connections_refused(self) -> int:
        """Connections accepted and closed at once during an outage."""
        with self._lock:
            return self._refused

    # ----------------------------------------------------------------- internals

    def _record(self, kind: FaultKind, seconds: float) -> InjectedFault:
        """Check the proxy runs and log the fault (caller holds `_lock`)."""
        if not seconds > 0:
            raise ValueError(f"seconds must be positive, got {seconds!r}")
        if not self._started or self._stopping.is_set():
            raise RuntimeError("StoreFaultProxy not running")
        fault = InjectedFault(kind, time.monotonic(), float(seconds))
        self._events.append(fault)
        return fault

    def _spawn(self, target: Callable[[], None], name: str) -> threading.Thread:
        """Start a tracked daemon thread (caller holds `_lock`); stop() joins them all."""
        self._threads = [t for t in self._threads if t.is_alive()]
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()
        return thread

    def _after(self, delay: float, action: Callable[[], None]) -> None:
        """Run `action` after `delay` seconds on a timer thread (caller holds `_lock`)."""

        def timer() -> None:
            if not self._stopping.wait(max(0.0, delay)):
                action()

        self._spawn(timer, "store-fault-proxy-timer")

    def _end_stall(self, generation: int) -> None:
        with self._lock:
            if generation != self._stall_gen or not self._stall_active:
                return  # superseded by a later stall, or ended already
            drop = self._stall_drop
            connections = list(self._stalled_conns)
            self._stalled_conns.clear()
            self._stall_active = self._stall_drop = False
            self._stall_until = 0.0
            if drop:
                self._reset += sum(1 for c in connections if c in self._connections)
            self._ending += 1  # healthy only once the bytes are out or the resets sent
        try:
            for connection in connections:
                if drop:
                    connection.close(reset=True)
                else:
                    connection.release()
        finally:
            with self._lock:
                self._ending -= 1
                self._healthy.notify_all()

    def _end_outage(self, generation: int) -> None:
        with self._lock:
            if generation != self._outage_gen or not self._outage_active:
                return
            self._outage_active = False
            self._outage_until = 0.0
            self._healthy.notify_all()

    def _connection_exited(self, connection: ProxyConnection) -> None:
        with self._lock:
            self._connections.discard(connection)
            self._stalled_conns.discard(connection)

    def _accept_loop(self) -> None:
        listener, wake = self._listener, self._wake_r
        assert listener is not None and wake is not None
        while not self._stopping.is_set():
            readable, _, _ = select.select([listener, wake], [], [])
            if wake in readable or self._stopping.is_set():
                return
            try:
                client, _ = listener.accept()
            except OSError:
                continue
            client.setblocking(True)
            self._admit(client)

    def _admit(self, client: socket.socket) -> None:
        with self._lock:
            refuse = self._outage_active or self._stopping.is_set()
            if refuse:
                self._refused += 1
        if refuse:
            _abort(client)
            return
        try:
            upstream = socket.create_connection(self._upstream_addr, timeout=_CONNECT_TIMEOUT)
        except OSError:  # the store itself is down: the client sees a closed connection
            _abort(client)
            return
        upstream.settimeout(None)
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            if self._outage_active or self._stopping.is_set():  # began while connecting
                self._refused += 1
                refuse = True
            else:
                connection = ProxyConnection(
                    client, upstream, f"store-fault-proxy-conn{next(self._conn_ids)}",
                    self._connection_exited,
                )
                self._connections.add(connection)
                self._accepted += 1
                if self._stall_active:  # opened during a stall: stalled from its first byte
                    self._stalled_conns.add(connection)
                self._threads = [t for t in self._threads if t.is_alive()]
                self._threads.extend(connection.threads)
                connection.start(stalled=self._stall_active)
        if refuse:
            upstream.close()
            _abort(client)


def _abort(sock: socket.socket) -> None:
    """Close with a TCP RST (SO_LINGER 0), the way an unreachable store looks."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()

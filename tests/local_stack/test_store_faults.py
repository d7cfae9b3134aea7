"""StoreFaultProxy: byte-level semantics, then the faults against the real Firestore emulator.

The emulator tests open the proxied connection before injecting a fault, so the fault
hits an established HTTP/2 connection (a warm instance), and check what landed with a
second client that talks to the emulator directly.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud import firestore

from local_stack import FaultKind, FaultSchedule, FirestoreEmulator, StoreFaultProxy
from tests.conftest import EMULATOR_PROJECT
from tests.waiting import let_time_pass, wait_until

# A fault the test ends itself (heal), once it has checked what happens inside it: no check
# races the fault's timer. Faults ended by their timer are tested too (short ones, checked
# only after they end).
STALL_UNTIL_HEALED = 600.0

# --------------------------------------------------------------------------- helpers


class EchoServer:
    """A TCP upstream that records what arrives and echoes it back at once."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.host = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self.received = bytearray()
        self.arrived = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self._accept = threading.Thread(target=self._serve, daemon=True)
        self._accept.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._conns.append(conn)
            thread = threading.Thread(target=self._echo, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _echo(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := conn.recv(4096):
                with self._lock:
                    self.received += data
                self.arrived.set()
                conn.sendall(data)

    def close(self) -> None:
        # shutdown() wakes the blocked accept() on Linux; close() alone would not.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
        self._accept.join(2)
        for thread in self._threads:
            thread.join(2)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


def _connect(proxy: StoreFaultProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=2)


def _recv_within(sock: socket.socket, seconds: float) -> bytes | None:
    """What arrives within `seconds`; None if nothing (b"" means the peer closed)."""
    sock.settimeout(seconds)
    try:
        return sock.recv(4096)
    except TimeoutError:
        return None


def _proxy_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("store-fault-proxy")]


# --------------------------------------------------------------------------- bytes


def test_bytes_flow_both_ways_without_a_fault(echo: EchoServer) -> None:
    with StoreFaultProxy(echo.host) as proxy, _connect(proxy) as sock:
        sock.sendall(b"hello")
        assert _recv_within(sock, 2) == b"hello"
        assert proxy.injected == []
        assert proxy.connections_accepted == 1


def test_a_stall_forwards_the_request_at_once_and_delivers_the_reply_late(
    echo: EchoServer,
) -> None:
    with StoreFaultProxy(echo.host) as proxy, _connect(proxy) as sock:
        # A stall the test ends (heal): the checks inside it never race its timer, on a
        # loaded machine either. Stalls ended by their timer: the record and Firestore tests.
        proxy.stall(STALL_UNTIL_HEALED)
        sock.sendall(b"write")
        assert echo.arrived.wait(30), "the request must reach the store during a stall"
        assert _recv_within(sock, 0.15) is None  # the reply is held back
        assert not proxy.healthy
        proxy.heal()
        reply = _recv_within(sock, 30)
        assert reply == b"write"
        assert proxy.wait_healthy(30)
        sock.sendall(b"again")  # the same connection goes on working
        assert _recv_within(sock, 2) == b"again"
        assert proxy.connections_reset == 0


def test_a_dropping_stall_discards_the_reply_and_resets_the_connection(
    echo: EchoServer,
) -> None:
    with StoreFaultProxy(echo.host) as proxy, _connect(proxy) as sock:
        proxy.stall(STALL_UNTIL_HEALED, drop=True)
        sock.sendall(b"write")
        assert echo.arrived.wait(30)
        assert _recv_within(sock, 0.15) is None  # the reply is held back ...
        proxy.heal()
        sock.settimeout(30)
        with pytest.raises(ConnectionResetError):  # ... and discarded: a bare RST
            sock.recv(4096)
        assert proxy.connections_reset == 1
        with _connect(proxy) as fresh:  # a new connection works
            fresh.sendall(b"x")
            assert _recv_within(fresh, 2) == b"x"


def test_a_connection_opened_during_a_stall_is_stalled_too(echo: EchoServer) -> None:
    with StoreFaultProxy(echo.host) as proxy:
        proxy.stall(STALL_UNTIL_HEALED)
        with _connect(proxy) as sock:
            sock.sendall(b"new")
            assert echo.arrived.wait(30)
            assert _recv_within(sock, 0.1) is None
            proxy.heal()
            assert _recv_within(sock, 30) == b"new"


def test_an_outage_resets_connections_and_refuses_new_ones_for_its_duration(
    echo: EchoServer,
) -> None:
    with StoreFaultProxy(echo.host) as proxy, _connect(proxy) as old:
        old.sendall(b"a")
        assert _recv_within(old, 2) == b"a"
        proxy.outage(STALL_UNTIL_HEALED)  # the test ends it, once it has seen inside it
        old.settimeout(30)
        with pytest.raises(ConnectionResetError):
            old.recv(4096)
        # TCP accepts, then the proxy resets it (the RST may beat connect() returning).
        with pytest.raises((ConnectionResetError, BrokenPipeError)), _connect(proxy) as during:
            during.settimeout(30)
            during.sendall(b"b")
            during.recv(4096)
        proxy.heal()
        assert proxy.wait_healthy(30)
        with _connect(proxy) as after:
            after.sendall(b"c")
            assert _recv_within(after, 2) == b"c"
        assert proxy.connections_refused == 1
        assert proxy.connections_reset == 1
        assert echo.received == b"ac"  # nothing sent during the outage reached the store


def test_the_record_lists_and_counts_every_fault(echo: EchoServer) -> None:
    with StoreFaultProxy(echo.host) as proxy:
        before = time.monotonic()
        proxy.stall(0.05, wait=True)
        proxy.stall(0.05, drop=True, wait=True)
        proxy.outage(0.05, wait=True)
        kinds = [(f.kind, f.duration) for f in proxy.injected]
        assert kinds == [
            (FaultKind.STALL_LATE, 0.05), (FaultKind.STALL_DROP, 0.05), (FaultKind.OUTAGE, 0.05),
        ]
        assert all(f.start >= before for f in proxy.injected)
        assert proxy.counts == {
            FaultKind.STALL_LATE: 1, FaultKind.STALL_DROP: 1, FaultKind.OUTAGE: 1,
        }
        assert proxy.summary().startswith("1 stall-late, 1 stall-drop, 1 outage")


def test_heal_ends_a_fault_early(echo: EchoServer) -> None:
    with StoreFaultProxy(echo.host) as proxy, _connect(proxy) as sock:
        proxy.stall(30)
        sock.sendall(b"late")
        assert _recv_within(sock, 0.1) is None
        proxy.heal()
        assert proxy.healthy
        assert _recv_within(sock, 2) == b"late"


def test_stop_joins_every_thread_and_closes_every_socket(echo: EchoServer) -> None:
    proxy = StoreFaultProxy(echo.host).start()
    socks = [_connect(proxy) for _ in range(3)]
    for sock in socks:
        sock.sendall(b"x")
        assert _recv_within(sock, 2) == b"x"
    proxy.stall(60)  # held bytes and a pending timer at stop time
    socks[0].sendall(b"held")
    proxy.run_schedule(FaultSchedule(seed=1, gap=(60, 60)))
    assert len(_proxy_threads()) >= 3 * 2 + 3
    started = time.monotonic()
    proxy.stop()
    assert time.monotonic() - started < 10  # no timer waited out (the nearest: 60 s away)
    assert _proxy_threads() == []
    for sock in socks:
        sock.settimeout(2)
        with pytest.raises(ConnectionResetError):
            sock.recv(4096)
        sock.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=1)
    proxy.stop()  # idempotent
    with pytest.raises(RuntimeError):
        proxy.stall(1)


def test_bad_arguments_fail_early(echo: EchoServer) -> None:
    with pytest.raises(ValueError, match="host:port"):
        StoreFaultProxy("localhost")
    with pytest.raises(RuntimeError):
        StoreFaultProxy(echo.host).outage(1)  # not started
    with StoreFaultProxy(echo.host) as proxy:
        with pytest.raises(ValueError):
            proxy.stall(0)
        with pytest.raises(ValueError):
            proxy.outage(-1)
    with pytest.raises(ValueError):
        FaultSchedule(seed=1, duration=(2, 1))
    with pytest.raises(ValueError):
        FaultSchedule(seed=1, weights=((FaultKind.OUTAGE, 0.0),))
    with pytest.raises(ValueError):
        FaultSchedule(seed=1, weights=(("stall", 1.0),))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- schedule


def test_a_schedule_is_a_pure_function_of_its_seed() -> None:
    def plan(seed: int) -> list[tuple[FaultKind, float, float]]:
        schedule = FaultSchedule(seed=seed, duration=(0.1, 2.0), gap=(0.5, 3.0))
        return [(p.kind, p.gap, p.duration) for p in schedule.plan(30)]

    assert plan(7) == plan(7)
    assert plan(7) != plan(8)
    assert {kind for kind, _, _ in plan(7)} == set(FaultKind)
    assert all(0.1 <= d <= 2.0 and 0.5 <= g <= 3.0 for _, g, d in plan(7))
    only_outages = FaultSchedule(seed=7, weights=((FaultKind.OUTAGE, 1.0),)).plan(10)
    assert {p.kind for p in only_outages} == {FaultKind.OUTAGE}
    assert len(FaultSchedule(seed=7, count=3).plan(10)) == 3


def test_run_schedule_injects_the_planned_faults_in_order(echo: EchoServer) -> None:
    schedule = FaultSchedule(seed=42, duration=(0.02, 0.06), gap=(0.01, 0.03), count=6)
    planned = [(p.kind, p.duration) for p in schedule.faults()]
    with StoreFaultProxy(echo.host) as proxy:
        started = time.monotonic()
        proxy.run_schedule(schedule)
        with pytest.raises(RuntimeError, match="already running"):
            proxy.run_schedule(schedule)
        assert proxy.join_schedule(30)
        injected = proxy.injected
    assert [(f.kind, f.duration) for f in injected] == planned
    # One at a time: each fault starts after the previous one ended.
    assert injected[0].start >= started
    assert all(b.start >= a.end for a, b in itertools.pairwise(injected))


def test_stop_schedule_stops_an_endless_schedule(echo: EchoServer) -> None:
    with StoreFaultProxy(echo.host) as proxy:
        proxy.run_schedule(FaultSchedule(seed=3, duration=(0.01, 0.02), gap=(0.01, 0.02)))
        wait_until(lambda: len(proxy.injected) >= 3, what="three faults of the schedule")
        started = time.monotonic()
        proxy.stop_schedule()
        assert time.monotonic() - started < 10  # stopped, not left running (it is endless)
        count = len(proxy.injected)
        let_time_pass(0.2, "ten of the schedule's gaps: a stopped schedule injects no more")
        assert len(proxy.injected) == count
        proxy.run_schedule(FaultSchedule(seed=3, count=0))  # a new one may start
        assert proxy.join_schedule(30)


# --------------------------------------------------------------------------- Firestore


@dataclass
class Stores:
    proxy: StoreFaultProxy
    via_proxy: firestore.Client  # talks to the emulator through the proxy
    direct: firestore.Client  # talks to the emulator itself: what really landed
    collection: str

    def doc(self, name: str) -> Any:
        return self.via_proxy.collection(self.collection).document(name)

    def landed(self, name: str) -> bool:
        snapshot: Any = self.direct.collection(self.collection).document(name).get(timeout=5)
        return bool(snapshot.exists)


@pytest.fixture
def stores(
    firestore_emulator: FirestoreEmulator,
    monkeypatch: pytest.MonkeyPatch,
    collection_name: str,
) -> Iterator[Stores]:
    with StoreFaultProxy(firestore_emulator.host) as proxy:
        # The client reads FIRESTORE_EMULATOR_HOST when constructed.
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", proxy.host)
        via_proxy = firestore.Client(project=EMULATOR_PROJECT)
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", firestore_emulator.host)
        direct = firestore.Client(project=EMULATOR_PROJECT)
        stores = Stores(proxy, via_proxy, direct, collection_name)
        # Open the proxied HTTP/2 connection before any fault, as in a warm instance.
        stores.doc("warm-up").set({"ok": True}, timeout=10)
        yield stores
        for client in (via_proxy, direct):
            client._firestore_api.transport.close()


def _new_name() -> str:
    return f"run-{uuid.uuid4().hex[:8]}"


def test_writes_and_reads_pass_through_the_proxy(stores: Stores) -> None:
    name = _new_name()
    stores.doc(name).create({"n": 1}, timeout=2, retry=None)
    snapshot: Any = stores.doc(name).get(timeout=2, retry=None)
    assert snapshot.to_dict() == {"n": 1}
    assert stores.landed(name)
    with pytest.raises(gexc.AlreadyExists):
        stores.doc(name).create({"n": 2}, timeout=2, retry=None)
    assert stores.proxy.connections_accepted == 1


def test_a_late_reply_times_the_write_out_although_it_landed(stores: Stores) -> None:
    name = _new_name()
    stores.proxy.stall(STALL_UNTIL_HEALED)
    started = time.monotonic()
    with pytest.raises(gexc.DeadlineExceeded):
        stores.doc(name).create({"n": 1}, timeout=0.4, retry=None)
    assert time.monotonic() - started < 30  # the client's deadline, not the stall, ended it
    assert not stores.proxy.healthy
    assert stores.landed(name)  # during the stall: the write is in, its reply is held
    stores.proxy.heal()
    assert stores.proxy.wait_healthy(30)
    snapshot: Any = stores.doc(name).get(timeout=2, retry=None)
    assert snapshot.exists
    # The held bytes were delivered, not dropped: the same connection carried on.
    assert stores.proxy.connections_accepted == 1
    assert stores.proxy.connections_reset == 0


def test_a_late_reply_within_the_deadline_is_only_slow(stores: Stores) -> None:
    name = _new_name()
    fault = stores.proxy.stall(0.3)
    stores.doc(name).create({"n": 1}, timeout=10, retry=None)
    assert time.monotonic() >= fault.end  # the reply came, after the stall


def test_a_lost_reply_times_the_write_out_and_the_client_reconnects(stores: Stores) -> None:
    name = _new_name()
    stores.proxy.stall(STALL_UNTIL_HEALED, drop=True)
    with pytest.raises(gexc.DeadlineExceeded):
        stores.doc(name).create({"n": 1}, timeout=0.4, retry=None)
    assert stores.landed(name)
    stores.proxy.heal()
    assert stores.proxy.wait_healthy(30)
    started = time.monotonic()
    # An RPC sent as the reset arrives may fail UNAVAILABLE ("Socket closed"): the
    # default retry covers that. The client reconnects at once (the lost connection had
    # been ready: no reconnect backoff).
    snapshot: Any = stores.doc(name).get(timeout=2)
    assert snapshot.exists
    assert time.monotonic() - started < 0.8  # a failed connect would back off about 1 s
    assert stores.proxy.connections_reset == 1
    assert stores.proxy.connections_accepted == 2


def test_the_clients_own_retry_after_a_lost_reply_finds_its_write_already_there(
    stores: Stores,
) -> None:
    """The reset before the deadline is UNAVAILABLE, which the client's default Commit
    retry re-sends: the create's second attempt meets the first one's document."""
    name = _new_name()
    stores.proxy.stall(STALL_UNTIL_HEALED, drop=True)
    with ThreadPoolExecutor(max_workers=1) as pool:
        create = pool.submit(stores.doc(name).create, {"n": 1}, timeout=30)  # default retry
        wait_until(lambda: stores.landed(name), what="the create to land during the stall")
        stores.proxy.heal()  # the reply is dropped: the connection is reset
        with pytest.raises(gexc.AlreadyExists):
            create.result()
    assert stores.landed(name)


def test_an_outage_fails_calls_during_it_and_they_succeed_after(stores: Stores) -> None:
    name = _new_name()
    stores.proxy.outage(STALL_UNTIL_HEALED)
    with pytest.raises((gexc.ServiceUnavailable, gexc.DeadlineExceeded)):
        stores.doc(name).create({"n": 1}, timeout=0.3, retry=None)
    assert not stores.landed(name)  # unlike a stall, nothing reached the store
    assert stores.proxy.connections_reset == 1
    # The client's default retry (UNAVAILABLE) carries the write past the outage, which
    # ends 0.5 s into it; the first reconnect waits for gRPC's reconnect backoff (about 1 s).
    threading.Timer(0.5, stores.proxy.heal).start()
    started = time.monotonic()
    stores.doc(name).create({"n": 1}, timeout=5)
    assert stores.proxy.healthy
    assert time.monotonic() - started < 3
    assert stores.landed(name)
    assert stores.proxy.connections_refused >= 1

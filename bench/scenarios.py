"""The six scenarios, each run for both handlers and interleaved repetition by repetition
(kit then textbook, then textbook then kit, ...) so that machine noise hits both alike.
The figures of the timing targets are also kept round by round (Results.paired): those
targets are decided on paired kit/comparator ratios (bench.paired).

Latency, bursts, throughput and cold starts go over HTTP to served processes (two
"instances" per handler, A and B: one gunicorn worker each). Firestore RPCs are counted
in-process, on handler objects built exactly as the served ones are but with an
RpcCounter on their client. The job does nothing but record its execution (in a ledger
file, so executions are counted outside the dedup store): the benchmark measures the
protocol, not the job.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import os
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from google.cloud import firestore

from bench.paired import abba, median, round_medians
from bench.servers import HANDLERS, KIT, Handler, serve
from bench.textbook import build_textbook_handler
from dedup.entry.app import build_handler
from dedup.entry.http import DedupHandler
from dedup.keys import RunKey, format_instant
from dedup.store import RunRecord
from dedup.store.firestore import record_to_document
from local_stack import FunctionServer
from local_stack.deliveries import (
    LOCATION,
    PROJECT,
    function_env,
    scheduler_headers,
    settings_for,
)
from local_stack.rpc_counter import RpcCounter
from local_stack.steered_job import read_ledger

# Every run of the whole benchmark gets its own schedule time: run IDs never collide. In
# the past: a schedule time ahead of the function's clock is a forced run ("Run now"),
# keyed apart from the scheduled run the benchmark computes its RunKey for.
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Config:
    fresh_runs: int = 200  # scenario 1, per handler, over HTTP
    fresh_runs_per_round: int = 10  # scenario 1's paired rounds: 20 ratios of medians
    rpc_runs: int = 20  # in-process runs per handler for each RPC figure (deterministic)
    duplicate_runs: int = 50  # scenario 2
    bursts: int = 10  # scenario 3
    burst_size: int = 50
    rpc_bursts: int = 2  # scenario 3, in-process (RPCs per burst)
    throughput_clients: int = 8  # scenario 4
    # Many short rounds rather than a few long ones: more pairs for the median in the same
    # time (a round of 1.5 s is still hundreds of runs: its start and end are negligible).
    throughput_seconds: float = 1.5  # per handler per round
    throughput_rounds: int = 8
    takeovers: int = 30  # scenario 5
    cold_starts: int = 8  # scenario 6
    warmup_runs: int = 40  # per served instance, before any measurement
    threads: int = 32  # gunicorn threads per served instance (Cloud Run concurrency)
    seeded_lease_seconds: float = 1.0  # lease of the "crashed" claims of scenario 5

    @classmethod
    def quick(cls) -> Config:
        # A smoke run: bursts of 16 still contend; 50 kept the textbook retrying for seconds.
        return cls(
            fresh_runs=10, fresh_runs_per_round=5, rpc_runs=2, duplicate_runs=3, bursts=1,
            burst_size=16, rpc_bursts=1, throughput_seconds=0.25, throughput_rounds=2,
            takeovers=2, cold_starts=1, warmup_runs=2, seeded_lease_seconds=0.5,
        )


@dataclass
class Instance:
    """One in-process 'instance' of a handler, its Firestore RPCs counted."""

    handler: DedupHandler
    rpcs: RpcCounter

    def deliver(self, headers: Mapping[str, str]) -> tuple[int, str]:
        reply = self.handler.handle(headers, b"")
        return reply.status, str(reply.body.get("outcome"))


@dataclass
class Reply:
    status: int
    outcome: str
    seconds: float


@dataclass
class Results:
    """Per scenario figure key -> {"kit": value, "textbook": value}, plus raw samples."""

    figures: dict[str, dict[str, float]] = field(default_factory=dict)
    # Figure key -> handler -> that figure per round, in run order: round i of the kit and
    # of the textbook ran side by side (the pairs that decide the timing targets).
    paired: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    anomalies: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    def put(self, key: str, handler: Handler, value: float) -> None:
        self.figures.setdefault(key, {})[handler.name] = value

    def pair(self, key: str, handler: Handler, per_round: list[float]) -> None:
        self.paired.setdefault(key, {})[handler.name] = per_round

    def detail(self, key: str, handler: Handler, value: Any) -> None:
        self.details.setdefault(key, {})[handler.name] = value


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (p99 of 200 samples is the 198th smallest)."""
    ordered = sorted(values)
    rank = max(1, -(-int(fraction * 1000) * len(ordered) // 1000))
    return ordered[min(rank, len(ordered)) - 1]


def interleaved(repetition: int) -> tuple[Handler, Handler]:
    """Kit first on even repetitions, textbook first on odd ones."""
    return abba(repetition, HANDLERS)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Bench:
    """Servers, in-process instances and ledgers of both handlers against one emulator."""

    def __init__(self, config: Config, workdir: Path) -> None:
        self.config = config
        self.workdir = workdir
        self.results = Results()
        self._schedule = itertools.count()
        self.served: dict[str, tuple[FunctionServer, FunctionServer]] = {}
        self.local: dict[str, tuple[Instance, Instance]] = {}
        self._stack = contextlib.ExitStack()
        self._client = firestore.Client(project=PROJECT)
        # In-process deliveries record their executions here (local_stack.steered_job).
        os.environ["TEST_LEDGER"] = str(workdir / "in-process.jsonl")

    # -- set-up ----------------------------------------------------------------------

    def served_collection(self, handler: Handler) -> str:
        return f"served_{handler.name}"

    def local_collection(self, handler: Handler) -> str:
        return f"local_{handler.name}"

    def ledger(self, handler: Handler) -> Path:
        return self.workdir / f"served-{handler.name}.jsonl"

    def server_env(self, handler: Handler) -> dict[str, str]:
        return function_env(self.served_collection(handler), self.ledger(handler))

    def new_server(self, handler: Handler) -> FunctionServer:
        return serve(handler, self.server_env(handler), threads=self.config.threads)

    def instance(self, handler: Handler) -> Instance:
        settings = settings_for(self.local_collection(handler))
        client = firestore.Client(project=PROJECT)
        rpcs = RpcCounter(client)

        def discard(_: Mapping[str, Any]) -> None:
            return None

        build = build_handler if handler is KIT else build_textbook_handler
        return Instance(build(settings, client, discard), rpcs)

    def __enter__(self) -> Bench:
        servers: list[FunctionServer] = []
        for handler in HANDLERS:
            pair = (self.new_server(handler), self.new_server(handler))
            servers.extend(pair)
            self.served[handler.name] = pair
            self.local[handler.name] = (self.instance(handler), self.instance(handler))
        for server in servers:
            self._stack.callback(server.stop)  # safe for a server that never started
        try:
            with ThreadPoolExecutor(max_workers=len(servers)) as pool:
                list(pool.map(lambda server: server.start(), servers))  # in parallel
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()

    # -- helpers ---------------------------------------------------------------------

    def new_run(self, job: str) -> tuple[dict[str, str], RunKey]:
        """Headers of a run nobody has seen, and its key."""
        instant = _EPOCH + timedelta(minutes=next(self._schedule))
        headers = scheduler_headers(job, format_instant(instant))
        return headers, RunKey(PROJECT, LOCATION, job, instant)

    def urls(self, handler: Handler) -> tuple[str, str]:
        a, b = self.served[handler.name]
        return a.url, b.url

    def executions(self, handler: Handler, run_id: str) -> list[dict[str, Any]]:
        return [e for e in read_ledger(str(self.ledger(handler))) if e["run_id"] == run_id]

    def expect(self, handler: Handler, what: str, reply: Reply | tuple[int, str],
               status: int, outcome: str) -> None:
        got = (reply.status, reply.outcome) if isinstance(reply, Reply) else reply
        if got != (status, outcome):
            self.results.anomalies.append(
                f"{handler.name}: {what}: expected {status} {outcome}, got {got[0]} {got[1]}"
            )

    def check_executions(self, handler: Handler, what: str, ran: int) -> None:
        """Two executions of one run is a broken handler. None is legitimate for the
        textbook only: every delivery of a contended burst may fail (500), leaving the run
        to Scheduler's retries. The kit must run it exactly once."""
        if ran > 1 or (handler is KIT and ran != 1):
            self.results.anomalies.append(f"{handler.name}: {what} ran the job {ran} times")

    # -- the scenarios ---------------------------------------------------------------

    def warm_up(self) -> None:
        """The emulator's JVM and each instance's gRPC channel warm up before measuring."""
        for i in range(self.config.warmup_runs):
            for handler in interleaved(i):
                for url in self.urls(handler):
                    post(url, self.new_run("bench-warmup")[0])
                for instance in self.local[handler.name]:
                    instance.deliver(self.new_run("bench-warmup")[0])

    def fresh_runs(self) -> None:
        """Scenario 1: fresh runs one at a time; whole-request latency and RPCs per run."""
        latencies: dict[str, list[float]] = {h.name: [] for h in HANDLERS}
        for i in range(self.config.fresh_runs):
            for handler in interleaved(i):
                reply = post(self.urls(handler)[0], self.new_run("bench-fresh")[0])
                self.expect(handler, "fresh run", reply, 200, "completed")
                latencies[handler.name].append(reply.seconds * 1000)
        rpcs = self.count_rpcs(
            lambda handler: self._fresh_in_process(handler), self.config.rpc_runs
        )
        for handler in HANDLERS:
            ms = latencies[handler.name]
            self.results.put("fresh.rpcs", handler, rpcs[handler.name][0])
            self.results.detail("fresh.rpc_methods", handler, rpcs[handler.name][1])
            self.results.put("fresh.latency_median_ms", handler, median(ms))
            self.results.put("fresh.latency_p99_ms", handler, percentile(ms, 0.99))
            self.results.pair("fresh.latency_median_ms", handler,
                              round_medians(ms, self.config.fresh_runs_per_round))
            self.results.samples.setdefault("fresh", {})[handler.name] = ms

    def _fresh_in_process(self, handler: Handler) -> Counter[str]:
        instance = self.local[handler.name][0]
        instance.rpcs.reset()
        reply = instance.deliver(self.new_run("bench-fresh-rpc")[0])
        self.expect(handler, "fresh run (in-process)", reply, 200, "completed")
        return Counter(instance.rpcs.counts)

    def count_rpcs(
        self, one: Callable[[Handler], Counter[str]], repetitions: int
    ) -> dict[str, tuple[float, dict[str, float]]]:
        """Mean RPCs per repetition (`one` returns the RPCs of one, by method), and the
        mean per RPC method."""
        totals: dict[str, Counter[str]] = {h.name: Counter() for h in HANDLERS}
        for i in range(repetitions):
            for handler in interleaved(i):
                totals[handler.name].update(one(handler))
        return {
            name: (
                sum(counts.values()) / repetitions,
                {method: n / repetitions for method, n in sorted(counts.items())},
            )
            for name, counts in totals.items()
        }

    def duplicates(self) -> None:
        """Scenario 2: a duplicate of a completed run, on the completing instance (A) and
        on another one (B)."""
        same: dict[str, list[float]] = {h.name: [] for h in HANDLERS}
        other: dict[str, list[float]] = {h.name: [] for h in HANDLERS}
        for i in range(self.config.duplicate_runs):
            for handler in interleaved(i):
                url_a, url_b = self.urls(handler)
                headers = self.new_run("bench-duplicate")[0]
                self.expect(handler, "original", post(url_a, headers), 200, "completed")
                reply = post(url_a, headers)
                self.expect(handler, "duplicate (same instance)", reply, 200, "duplicate")
                same[handler.name].append(reply.seconds * 1000)
                reply = post(url_b, headers)
                self.expect(handler, "duplicate (other instance)", reply, 200, "duplicate")
                other[handler.name].append(reply.seconds * 1000)
        same_rpcs = self.count_rpcs(lambda h: self._duplicate_in_process(h, 0),
                                    self.config.rpc_runs)
        other_rpcs = self.count_rpcs(lambda h: self._duplicate_in_process(h, 1),
                                     self.config.rpc_runs)
        for handler in HANDLERS:
            name = handler.name
            self.results.put("duplicate_same.rpcs", handler, same_rpcs[name][0])
            self.results.put("duplicate_same.latency_median_ms", handler, median(same[name]))
            self.results.put("duplicate_other.rpcs", handler, other_rpcs[name][0])
            self.results.put("duplicate_other.latency_median_ms", handler, median(other[name]))
            self.results.detail("duplicate_same.rpc_methods", handler, same_rpcs[name][1])
            self.results.detail("duplicate_other.rpc_methods", handler, other_rpcs[name][1])

    def _duplicate_in_process(self, handler: Handler, on: int) -> Counter[str]:
        completing, another = self.local[handler.name]
        headers = self.new_run("bench-duplicate-rpc")[0]
        self.expect(handler, "original (in-process)", completing.deliver(headers), 200,
                    "completed")
        instance = (completing, another)[on]
        instance.rpcs.reset()
        self.expect(handler, "duplicate (in-process)", instance.deliver(headers), 200,
                    "duplicate")
        return Counter(instance.rpcs.counts)

    def bursts(self) -> None:
        """Scenario 3: `burst_size` concurrent deliveries of one run, spread over A and B."""
        size = self.config.burst_size
        latencies: dict[str, list[float]] = {h.name: [] for h in HANDLERS}
        executions: dict[str, list[int]] = {h.name: [] for h in HANDLERS}
        statuses: dict[str, Counter[int]] = {h.name: Counter() for h in HANDLERS}
        outcomes: dict[str, Counter[str]] = {h.name: Counter() for h in HANDLERS}
        max_per_burst: dict[str, list[float]] = {h.name: [] for h in HANDLERS}
        with ThreadPoolExecutor(max_workers=size) as pool:
            for rep in range(self.config.bursts):
                for handler in interleaved(rep):
                    headers, key = self.new_run("bench-burst")
                    urls = self.urls(handler)
                    replies = burst(pool, [urls[i % 2] for i in range(size)], headers)
                    self.results.anomalies.extend(
                        f"{handler.name}: burst delivery: {r.outcome}"
                        for r in replies if r.status == 0
                    )
                    ms = [r.seconds * 1000 for r in replies]
                    latencies[handler.name].extend(ms)
                    max_per_burst[handler.name].append(max(ms))
                    statuses[handler.name].update(r.status for r in replies)
                    outcomes[handler.name].update(r.outcome for r in replies)
                    ran = len(self.executions(handler, key.run_id))
                    executions[handler.name].append(ran)
                    self.check_executions(handler, "burst", ran)
            rpcs = self.count_rpcs(lambda h: self._burst_in_process(h, pool),
                                   self.config.rpc_bursts)
        for handler in HANDLERS:
            name = handler.name
            by_status = statuses[name]
            self.results.put("burst.executions_min", handler, min(executions[name]))
            self.results.put("burst.executions_max", handler, max(executions[name]))
            self.results.put("burst.replies_2xx", handler,
                             sum(n for s, n in by_status.items() if 200 <= s < 300))
            self.results.put("burst.replies_409", handler, by_status[409])
            self.results.put("burst.replies_5xx", handler,
                             sum(n for s, n in by_status.items() if s >= 500))
            self.results.put("burst.latency_median_ms", handler, median(latencies[name]))
            self.results.put("burst.latency_max_ms", handler, max(latencies[name]))
            self.results.put("burst.rpcs", handler, rpcs[name][0])
            self.results.detail("burst.executions", handler, executions[name])
            self.results.detail("burst.replies_by_status", handler,
                                {str(s): n for s, n in sorted(by_status.items())})
            self.results.detail("burst.replies_by_outcome", handler, dict(outcomes[name]))
            self.results.pair("burst.latency_max_ms", handler, max_per_burst[name])
            self.results.detail("burst.rpc_methods", handler, rpcs[name][1])
            self.results.detail("burst.failure_details", handler, self.failure_details(handler))
            self.results.samples.setdefault("burst", {})[name] = latencies[name]

    def _burst_in_process(self, handler: Handler, pool: ThreadPoolExecutor) -> Counter[str]:
        """RPCs of a whole burst (all deliveries, both instances) in this process."""
        a, b = self.local[handler.name]
        headers, key = self.new_run("bench-burst-rpc")
        a.rpcs.reset()
        b.rpcs.reset()
        size = self.config.burst_size
        barrier = threading.Barrier(size)

        def one(i: int) -> tuple[int, str]:
            barrier.wait()
            return (a, b)[i % 2].deliver(headers)

        list(pool.map(one, range(size)))
        ran = [e for e in read_ledger(os.environ["TEST_LEDGER"]) if e["run_id"] == key.run_id]
        self.check_executions(handler, "in-process burst", len(ran))
        return a.rpcs.counts + b.rpcs.counts

    def failure_details(self, handler: Handler) -> dict[str, int]:
        """Why 5xx replies happened: the `detail` of the served instances' log lines."""
        found: Counter[str] = Counter()
        for server in self.served[handler.name]:
            for line in server.log_text.splitlines():
                if not line.startswith("{"):
                    continue
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if int(entry.get("status", 0)) >= 500:
                        found[_first_words(str(entry.get("detail")))] += 1
        return dict(found)

    def throughput(self) -> None:
        """Scenario 4: distinct runs per second with `throughput_clients` concurrent
        clients, half on each instance."""
        done: dict[str, int] = {h.name: 0 for h in HANDLERS}
        elapsed: dict[str, float] = {h.name: 0.0 for h in HANDLERS}
        per_round: dict[str, list[float]] = {h.name: [] for h in HANDLERS}
        clients = self.config.throughput_clients
        with ThreadPoolExecutor(max_workers=clients) as pool:
            for rep in range(self.config.throughput_rounds):
                for handler in interleaved(rep):
                    completed, seconds = self._throughput_round(handler, pool, clients)
                    done[handler.name] += completed
                    elapsed[handler.name] += seconds
                    per_round[handler.name].append(completed / seconds)
        for handler in HANDLERS:
            self.results.put("throughput.runs_per_s", handler,
                             done[handler.name] / elapsed[handler.name])
            self.results.pair("throughput.runs_per_s", handler, per_round[handler.name])

    def _throughput_round(
        self, handler: Handler, pool: ThreadPoolExecutor, clients: int
    ) -> tuple[int, float]:
        urls = self.urls(handler)
        lock = threading.Lock()
        barrier = threading.Barrier(clients)

        def client(i: int) -> int:
            completed = 0
            barrier.wait()
            deadline = time.perf_counter() + self.config.throughput_seconds
            while time.perf_counter() < deadline:
                with lock:
                    headers = self.new_run("bench-throughput")[0]
                reply = post(urls[i % 2], headers)
                self.expect(handler, "throughput run", reply, 200, "completed")
                completed += reply.status == 200
            return completed

        started = time.perf_counter()
        completed = sum(pool.map(client, range(clients)))
        return completed, time.perf_counter() - started

    def takeovers(self) -> None:
        """Scenario 5: a delivery for a run whose holder crashed and whose lease expired."""
        n = self.config.takeovers
        served = {h.name: [self.seed_crashed(self.served_collection(h)) for _ in range(n)]
                  for h in HANDLERS}
        local = {h.name: [self.seed_crashed(self.local_collection(h))
                          for _ in range(self.config.rpc_runs)] for h in HANDLERS}
        time.sleep(self.config.seeded_lease_seconds + 0.5)  # every seeded lease has lapsed
        latencies: dict[str, list[float]] = {h.name: [] for h in HANDLERS}
        for i in range(n):
            for handler in interleaved(i):
                headers, key = served[handler.name][i]
                reply = post(self.urls(handler)[0], headers)
                self.expect(handler, "takeover", reply, 200, "completed")
                latencies[handler.name].append(reply.seconds * 1000)
                attempts = [e["attempt"] for e in self.executions(handler, key.run_id)]
                if attempts != [2]:
                    self.results.anomalies.append(
                        f"{handler.name}: takeover ran attempts {attempts}, expected [2]"
                    )
        remaining = {h.name: iter(local[h.name]) for h in HANDLERS}

        def take_over(handler: Handler) -> Counter[str]:
            instance = self.local[handler.name][0]
            instance.rpcs.reset()
            headers = next(remaining[handler.name])[0]
            self.expect(handler, "takeover (in-process)", instance.deliver(headers), 200,
                        "completed")
            return Counter(instance.rpcs.counts)

        rpcs = self.count_rpcs(take_over, self.config.rpc_runs)
        for handler in HANDLERS:
            self.results.put("takeover.rpcs", handler, rpcs[handler.name][0])
            self.results.detail("takeover.rpc_methods", handler, rpcs[handler.name][1])
            self.results.put("takeover.latency_median_ms", handler,
                             median(latencies[handler.name]))

    def seed_crashed(self, collection: str) -> tuple[dict[str, str], RunKey]:
        """The record a crashed instance leaves: in progress, short lease, never finished.
        Written in the one record format both handlers share, plus the textbook's
        local-clock lease end (which the kit ignores: it judges by update_time)."""
        headers, key = self.new_run("bench-takeover")
        now = datetime.now(UTC)
        record = RunRecord.claim(
            key, f"crashed-{uuid.uuid4().hex}", 1, self.config.seeded_lease_seconds,
            expire_at=now + timedelta(hours=1),
        )
        lease_end = now + timedelta(seconds=self.config.seeded_lease_seconds)
        self._client.collection(collection).document(key.run_id).create(
            {**record_to_document(record), "lease_expires_at": lease_end}, timeout=10
        )
        return headers, key

    def cold_starts(self) -> None:
        """Scenario 6: a new server process, from spawn to its first answered delivery."""
        first: dict[str, list[float]] = {h.name: [] for h in HANDLERS}
        for i in range(self.config.cold_starts):
            for handler in interleaved(i):
                headers = self.new_run("bench-cold")[0]
                started = time.perf_counter()
                with self.new_server(handler) as server:
                    reply = post(server.url, headers)
                    first[handler.name].append((time.perf_counter() - started) * 1000)
                self.expect(handler, "first delivery after a cold start", reply, 200,
                            "completed")
        for handler in HANDLERS:
            self.results.put("cold_start.first_reply_ms", handler, median(first[handler.name]))
            self.results.put("cold_start.first_reply_min_ms", handler, min(first[handler.name]))
            self.results.pair("cold_start.first_reply_ms", handler, first[handler.name])

    def run_all(self) -> Results:
        steps: list[tuple[str, Callable[[], None]]] = [
            ("warm-up", self.warm_up),
            ("1 fresh runs", self.fresh_runs),
            ("2 duplicates of a completed run", self.duplicates),
            ("3 bursts of concurrent deliveries", self.bursts),
            ("4 throughput", self.throughput),
            ("5 takeover after lease expiry", self.takeovers),
            ("6 cold start", self.cold_starts),
        ]
        for label, step in steps:
            progress(f"bench: {label} ...")
            started = time.perf_counter()
            step()
            self.results.timings[label] = round(time.perf_counter() - started, 2)
            progress(f"bench: {label}: {self.results.timings[label]:.1f} s")
        return self.results


def post(url: str, headers: Mapping[str, str]) -> Reply:
    """One delivery on its own connection, as each Scheduler attempt is its own request.

    http.client rather than requests: the load generator shares the CPUs with the servers
    and the emulator, so it should cost as little as possible. No keep-alive: reused idle
    connections race gunicorn closing them after 2 s.
    """
    target = urllib.parse.urlsplit(url)
    started = time.perf_counter()
    connection = http.client.HTTPConnection(target.hostname or "127.0.0.1", target.port,
                                            timeout=120)
    try:
        connection.request("POST", target.path or "/", body=b"", headers=dict(headers))
        response = connection.getresponse()
        status, text = response.status, response.read()
    except (OSError, http.client.HTTPException) as exc:  # no HTTP reply at all: status 0
        return Reply(0, f"no reply: {exc!r}"[:160], time.perf_counter() - started)
    finally:
        connection.close()
    seconds = time.perf_counter() - started
    try:
        body = json.loads(text)
        outcome = str(body.get("outcome") or body.get("error"))
    except (ValueError, AttributeError):
        outcome = text[:80].decode(errors="replace")
    return Reply(status, outcome, seconds)


def burst(pool: ThreadPoolExecutor, urls: Sequence[str], headers: Mapping[str, str]) -> list[Reply]:
    """One delivery per URL, all released at once (a barrier) from the pool's threads."""
    barrier = threading.Barrier(len(urls))

    def one(url: str) -> Reply:
        barrier.wait()
        return post(url, headers)

    return list(pool.map(one, urls))


def _first_words(detail: str, limit: int = 120) -> str:
    return " ".join(detail.split())[:limit]


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="bench-") as path:
        yield Path(path)

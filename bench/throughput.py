"""Throughput of each queue (messages/s), one fresh file per measurement.

A measurement times ``n`` messages going in (``put`` / ``put_many``) or out (``take`` /
``take_many``) of a queue that was filled, untimed, with exactly ``n`` messages. Takes
check that every message came out once, in FIFO order. Runs are interleaved (run 1 of
every scenario, then run 2, ...) so that drift on the machine hits all systems alike.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.common import Durability, Summary, body, counter_of, scratch_dir
from bench.peers import (
    BatchPeer,
    HueyPeer,
    LiteQueuePeer,
    PersistQueuePeer,
    QueuePeer,
    RawBrokerWritesPeer,
    RawSqlitePeer,
)
from bench.scenarios import BrokerPeer

PeerFactory = Callable[[Path], QueuePeer]
BATCH = 100


@dataclass(frozen=True)
class Scenario:
    key: str          # e.g. "servicebroker/send1"
    system: str
    label: str        # what is timed, in the system's own words
    factory: PeerFactory
    op: str           # put | take | put_many | take_many
    n: int


def scenarios(single_n: int, batch_n: int) -> list[Scenario]:
    """Every throughput scenario of the benchmark."""
    out = [
        Scenario("servicebroker/send1", "servicebroker", "SEND, 1 per transaction", BrokerPeer, "put", single_n),
        Scenario("servicebroker/receive1", "servicebroker", "RECEIVE TOP(1) + commit", BrokerPeer, "take",
                 single_n),
        Scenario("servicebroker/send100", "servicebroker", "100 SENDs per transaction", BrokerPeer, "put_many",
                 batch_n),
        Scenario("servicebroker/receive100", "servicebroker", "RECEIVE TOP(100) per transaction", BrokerPeer,
                 "take_many", batch_n),
        Scenario("persist-queue/send1", "persist-queue", "SQLiteQueue.put", PersistQueuePeer, "put", single_n),
        Scenario("persist-queue/receive1", "persist-queue", "SQLiteQueue.get", PersistQueuePeer, "take", single_n),
        Scenario("huey/send1", "huey", "SqliteStorage.enqueue", HueyPeer, "put", single_n),
        Scenario("huey/receive1", "huey", "SqliteStorage.dequeue", HueyPeer, "take", single_n),
        Scenario("litequeue/send1", "litequeue", "LiteQueue.put", LiteQueuePeer, "put", single_n),
        Scenario("litequeue/receive1", "litequeue", "LiteQueue.pop + done", LiteQueuePeer, "take", single_n),
        Scenario("raw sqlite3/send1", "raw sqlite3", "INSERT, 1 row per transaction", RawSqlitePeer, "put",
                 single_n),
        Scenario("raw sqlite3/receive1", "raw sqlite3", "SELECT + DELETE, 1 row per transaction", RawSqlitePeer,
                 "take", single_n),
        Scenario("raw sqlite3, broker's writes/send1", "raw sqlite3, broker's writes",
                 "INSERT + 2 endpoint UPDATEs, 1 per transaction", RawBrokerWritesPeer, "put", single_n),
        Scenario("raw sqlite3, broker's writes/receive1", "raw sqlite3, broker's writes",
                 "SELECT next ready + DELETE, 1 per transaction", RawBrokerWritesPeer, "take", single_n),
        Scenario("raw sqlite3/send100", "raw sqlite3", "executemany INSERT, 100 rows per transaction",
                 RawSqlitePeer, "put_many", batch_n),
        Scenario("raw sqlite3/receive100", "raw sqlite3", "SELECT + DELETE, 100 rows per transaction",
                 RawSqlitePeer, "take_many", batch_n),
        Scenario("raw sqlite3, broker's writes/send100", "raw sqlite3, broker's writes",
                 "executemany INSERT + 2 endpoint UPDATEs, 100 per transaction", RawBrokerWritesPeer, "put_many",
                 batch_n),
        Scenario("raw sqlite3, broker's writes/receive100", "raw sqlite3, broker's writes",
                 "one conversation's next 100 + executemany DELETE", RawBrokerWritesPeer, "take_many", batch_n),
    ]
    return out


def _fill(peer: QueuePeer, n: int) -> None:
    if isinstance(peer, BatchPeer):
        for start in range(0, n, BATCH):
            peer.put_many([body(i) for i in range(start, min(n, start + BATCH))])
    else:
        for i in range(n):
            peer.put(body(i))


def _check(taken: list[bytes], n: int, key: str) -> None:
    counters = [counter_of(b) for b in taken]
    if counters != list(range(n)):
        raise RuntimeError(f"{key}: messages came out wrong (lost, duplicated or out of order)")


def measure_once(scenario: Scenario) -> tuple[float, Durability]:
    """One measurement on a fresh file: messages per second, and the durability in force."""
    n = scenario.n
    with scratch_dir(scenario.system.replace(" ", "_")) as directory:
        peer = scenario.factory(directory)
        try:
            durability = peer.durability()
            if scenario.op in ("put", "put_many"):
                bodies = [body(i) for i in range(n)]
            else:
                _fill(peer, n)
            gc.collect()
            taken: list[bytes] = []
            started = time.perf_counter()
            if scenario.op == "put":
                for data in bodies:
                    peer.put(data)
            elif scenario.op == "put_many":
                assert isinstance(peer, BatchPeer)
                for start in range(0, n, BATCH):
                    peer.put_many(bodies[start:start + BATCH])
            elif scenario.op == "take":
                for _ in range(n):
                    got = peer.take()
                    if got is not None:
                        taken.append(got)
            elif scenario.op == "take_many":
                assert isinstance(peer, BatchPeer)
                for _ in range(0, n, BATCH):
                    taken.extend(peer.take_many(BATCH))
            else:
                raise ValueError(scenario.op)
            elapsed = time.perf_counter() - started
            if scenario.op in ("take", "take_many"):
                _check(taken, n, scenario.key)
        finally:
            peer.close()
    return n / elapsed, durability


def run_all(chosen: list[Scenario], runs: int,
            progress: Callable[[str], None] | None = None) -> tuple[dict[str, Summary], dict[str, Durability]]:
    """``runs`` interleaved measurements of every scenario: rate summaries and durability."""
    rates: dict[str, list[float]] = {s.key: [] for s in chosen}
    durability: dict[str, Durability] = {}
    for run in range(runs):
        for scenario in chosen:
            rate, seen = measure_once(scenario)
            rates[scenario.key].append(rate)
            durability.setdefault(scenario.system, seen)
            if progress is not None:
                progress(f"run {run + 1}/{runs} {scenario.key}: {rate:,.0f} msg/s ({seen.label})")
    return {key: Summary.of(values) for key, values in rates.items()}, durability

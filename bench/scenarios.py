"""The broker under test: its queue adapter and the RECEIVE-cost-by-queue-depth scenario.

Everything goes through the public API (``broker.connect``, ``db.transaction()``,
``tx.send``, ``tx.receive``); durability is read back from a connection of the
broker's own engine.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import broker
from bench.common import Durability, body, percentile

TARGET_QUEUE = "BenchTargetQueue"
INITIATOR_QUEUE = "BenchInitiatorQueue"
TARGET = "//bench/Target"
INITIATOR = "//bench/Initiator"


def broker_url(directory: Path) -> str:
    return f"sqlite:///{directory / 'broker.db'}"


def make_broker(directory: Path, dialogs: int = 1) -> tuple[broker.Broker, list[uuid.UUID]]:
    """A new broker file with a target queue and service, and ``dialogs`` dialogs begun."""
    db = broker.connect(broker_url(directory))
    db.create_queue(TARGET_QUEUE)
    db.create_queue(INITIATOR_QUEUE)
    db.create_service(TARGET, TARGET_QUEUE, contracts=["DEFAULT"])
    db.create_service(INITIATOR, INITIATOR_QUEUE)
    with db.transaction() as tx:
        handles = [tx.begin_dialog(INITIATOR, TARGET) for _ in range(dialogs)]
    return db, handles


def broker_durability(db: broker.Broker) -> Durability:
    """journal_mode and synchronous as a connection of the broker's engine reports them."""
    with db.engine.connect() as conn:
        journal = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
        synchronous = conn.exec_driver_sql("PRAGMA synchronous").scalar()
    return Durability(str(journal), int(synchronous or 0))


class BrokerPeer:
    """servicebroker on one dialog begun in advance.

    ``put``: one SEND per transaction. ``put_many``: that many SENDs in one transaction.
    ``take``: RECEIVE TOP(1) + commit. ``take_many(n)``: RECEIVE TOP(n) + commit.
    """

    name = "servicebroker"

    def __init__(self, directory: Path) -> None:
        self.db, (self.handle,) = make_broker(directory)

    def put(self, data: bytes) -> None:
        with self.db.transaction() as tx:
            tx.send(self.handle, body=data)

    def put_many(self, bodies: list[bytes]) -> None:
        with self.db.transaction() as tx:
            for data in bodies:
                tx.send(self.handle, body=data)

    def take(self) -> bytes | None:
        with self.db.transaction() as tx:
            messages = tx.receive(TARGET_QUEUE, 1)
        return messages[0].message_body if messages else None

    def take_many(self, n: int) -> list[bytes]:
        with self.db.transaction() as tx:
            messages = tx.receive(TARGET_QUEUE, n)
        return [m.message_body or b"" for m in messages]

    def durability(self) -> Durability:
        return broker_durability(self.db)

    def close(self) -> None:
        self.db.dispose()


@dataclass(frozen=True)
class DepthResult:
    """RECEIVE TOP(1)+commit cost with ``depth`` messages queued over ``dialogs`` dialogs."""

    depth: int
    dialogs: int
    samples: int
    mean_us: float
    p50_us: float
    p95_us: float
    fill_seconds: float
    fill_rate: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def receive_at_depth(directory: Path, depth: int, *, samples: int = 2000, dialogs: int = 100,
                     per_transaction: int = 1000,
                     progress: Callable[[int], None] | None = None) -> DepthResult:
    """Fill a fresh queue to ``depth`` and time ``samples`` RECEIVE TOP(1) + commit.

    The fill sends ``per_transaction`` messages per transaction as SENDs on the list of
    all ``dialogs`` handles (one message to each dialog per SEND), so the queue holds
    ``dialogs`` conversation groups. After each timed RECEIVE an untimed SEND puts one
    message back, so every RECEIVE sees exactly ``depth`` messages.
    """
    if depth % dialogs:
        raise ValueError(f"depth {depth} is not a multiple of {dialogs} dialogs")
    db, handles = make_broker(directory, dialogs)
    try:
        data = body(0)
        started = time.perf_counter()
        sent = 0
        while sent < depth:
            chunk = min(per_transaction, depth - sent)
            with db.transaction() as tx:
                for _ in range(chunk // dialogs):
                    tx.send(handles, body=data)
            sent += chunk
            if progress is not None:
                progress(sent)
        fill_seconds = time.perf_counter() - started

        times: list[float] = []
        for i in range(samples):
            begun = time.perf_counter_ns()
            with db.transaction() as tx:
                got = tx.receive(TARGET_QUEUE, 1)
            times.append((time.perf_counter_ns() - begun) / 1000)
            if len(got) != 1:
                raise RuntimeError(f"RECEIVE at depth {depth} returned {len(got)} messages")
            with db.transaction() as tx:
                tx.send(handles[i % dialogs], body=data)
        return DepthResult(depth, dialogs, samples, sum(times) / len(times), percentile(times, 0.5),
                           percentile(times, 0.95), fill_seconds, depth / fill_seconds)
    finally:
        db.dispose()

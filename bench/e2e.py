"""End to end on the broker: one producer process, one consumer process, N messages.

The producer SENDs one message per transaction on one dialog; the consumer loops on
``receive(queue, top, timeout=...)`` (WAITFOR) and commits each batch. Bodies carry a
counter; the consumer checks that every counter arrived exactly once and in order,
and that the queue is empty afterwards. The rate is N divided by the time from the
producer's first SEND to the consumer's last commit (``time.time_ns()`` in both).
"""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from typing import Any

import broker
from bench.common import body, counter_of, scratch_dir
from bench.scenarios import TARGET_QUEUE, broker_url, make_broker

IDLE_TIMEOUT_S = 10.0  # the consumer gives up when nothing arrives for this long


@dataclass(frozen=True)
class E2EResult:
    messages: int
    consumer_top: int
    rate: float
    seconds: float
    lost: int
    duplicated: int
    in_order: bool
    left_in_queue: int
    consumer_transactions: int

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.in_order and self.left_in_queue == 0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _producer(url: str, handle: str, n: int, go: Any, out: Connection) -> None:
    db = broker.connect(url)
    dialog = uuid.UUID(handle)
    bodies = [body(i) for i in range(n)]
    out.send("ready")
    go.wait()
    started = time.time_ns()
    for data in bodies:
        with db.transaction() as tx:
            tx.send(dialog, body=data)
    out.send({"started": started, "finished": time.time_ns()})
    db.dispose()


def _consumer(url: str, n: int, top: int, go: Any, out: Connection) -> None:
    db = broker.connect(url)
    out.send("ready")
    go.wait()
    received: list[int] = []
    transactions = 0
    while len(received) < n:
        with db.transaction() as tx:
            messages = tx.receive(TARGET_QUEUE, top, timeout=IDLE_TIMEOUT_S)
            received.extend(counter_of(m.message_body or b"") for m in messages)
        transactions += 1
        if not messages:
            break
    finished = time.time_ns()
    with db.transaction() as tx:
        extra = tx.receive(TARGET_QUEUE, None)
    out.send({"received": received, "finished": finished, "left": len(extra), "transactions": transactions})
    db.dispose()


def run_once(n: int, top: int) -> E2EResult:
    """One producer and one consumer process on a fresh broker file."""
    context = mp.get_context("spawn")
    with scratch_dir("e2e") as directory:
        db, (handle,) = make_broker(directory)
        db.dispose()
        url = broker_url(directory)
        go = context.Event()
        producer_end, producer_pipe = context.Pipe(duplex=False)
        consumer_end, consumer_pipe = context.Pipe(duplex=False)
        producer = context.Process(target=_producer, args=(url, str(handle), n, go, producer_pipe))
        consumer = context.Process(target=_consumer, args=(url, n, top, go, consumer_pipe))
        consumer.start()
        producer.start()
        try:
            for end in (producer_end, consumer_end):
                if not end.poll(120) or end.recv() != "ready":
                    raise RuntimeError("a benchmark process did not start")
            go.set()
            produced = producer_end.recv()
            consumed = consumer_end.recv()
        finally:
            producer.join(60)
            consumer.join(60)
            for process in (producer, consumer):
                if process.is_alive():
                    process.terminate()
    received: list[int] = consumed["received"]
    seconds = (consumed["finished"] - produced["started"]) / 1e9
    return E2EResult(
        messages=n, consumer_top=top, rate=n / seconds, seconds=seconds,
        lost=len(set(range(n)) - set(received)), duplicated=len(received) - len(set(received)),
        in_order=received == sorted(received), left_in_queue=consumed["left"],
        consumer_transactions=consumed["transactions"],
    )

"""WAITFOR wake-up latency: how long after a SEND's commit a blocked RECEIVE returns.

* In one process: a thread blocks in ``receive(queue, 1, timeout=...)``; the main thread
  SENDs and takes ``time.perf_counter_ns()`` just before the commit; the thread takes it
  again as soon as ``receive`` returns.
* Across processes: a child process blocks in the same WAITFOR; the parent takes
  ``time.time_ns()`` just before its commit, the child on receipt.

Before each SEND the sender sleeps a random 5-60 ms after the receiver said it is about
to wait, so samples fall at every point of the waiter's polling back-off.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from typing import Any

import broker
from bench.common import body, counter_of, percentile, scratch_dir
from bench.scenarios import TARGET_QUEUE, broker_url, make_broker

WAIT_S = 10.0
PAUSE_S = (0.005, 0.060)


@dataclass(frozen=True)
class LatencyResult:
    where: str
    samples: int
    p50_ms: float
    p95_ms: float
    mean_ms: float
    max_ms: float

    @classmethod
    def of(cls, where: str, nanoseconds: list[int]) -> LatencyResult:
        ms = [v / 1e6 for v in nanoseconds]
        return cls(where, len(ms), percentile(ms, 0.5), percentile(ms, 0.95), sum(ms) / len(ms), max(ms))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _receive_one(db: broker.Broker, clock: Any) -> tuple[int, int]:
    with db.transaction() as tx:
        messages = tx.receive(TARGET_QUEUE, 1, timeout=WAIT_S)
        received_at = clock()
    if len(messages) != 1:
        raise RuntimeError("WAITFOR timed out without a message")
    return counter_of(messages[0].message_body or b""), received_at


def in_process(samples: int, seed: int = 1) -> LatencyResult:
    """Receiver thread and sender in one process, on one ``broker.connect()``."""
    with scratch_dir("latency") as directory:
        db, (handle,) = make_broker(directory)
        try:
            latencies = round_trips(db, lambda tx, i: tx.send(handle, body=body(i)), db, samples,
                                    random.Random(seed))
        finally:
            db.dispose()
    return LatencyResult.of("one process (thread)", latencies)


def round_trips(sender: broker.Broker, send: Callable[[broker.Transaction, int], None], receiver_db: broker.Broker,
                samples: int, rng: random.Random) -> list[int]:
    """Commit-to-RECEIVE nanoseconds of ``samples`` messages: a thread blocks in
    ``receiver_db``'s WAITFOR, the caller's ``send(tx, i)`` commits message ``i`` in
    ``sender`` a random pause after the thread said it is about to wait."""
    about_to_wait = threading.Event()
    results: queue.Queue[tuple[int, int] | BaseException] = queue.Queue()

    def receiver() -> None:
        try:
            for _ in range(samples):
                about_to_wait.set()
                results.put(_receive_one(receiver_db, time.perf_counter_ns))
        except BaseException as error:  # handed to the main thread
            results.put(error)

    thread = threading.Thread(target=receiver, daemon=True)
    thread.start()
    latencies: list[int] = []
    try:
        for i in range(samples):
            if not about_to_wait.wait(WAIT_S):
                raise RuntimeError("the receiver thread stopped")
            about_to_wait.clear()
            time.sleep(rng.uniform(*PAUSE_S))
            with sender.transaction() as tx:
                send(tx, i)
                sent_at = time.perf_counter_ns()
            got = results.get(timeout=WAIT_S * 2)
            if isinstance(got, BaseException):
                raise got
            counter, received_at = got
            if counter != i:
                raise RuntimeError(f"expected message {i}, got {counter}")
            latencies.append(received_at - sent_at)
    finally:
        thread.join(WAIT_S * 2)
    return latencies


def _child(url: str, samples: int, pipe: Connection) -> None:
    db = broker.connect(url)
    for _ in range(samples):
        pipe.send("waiting")
        pipe.send(_receive_one(db, time.time_ns))
    db.dispose()


def waited_for(child: Connection, sender: broker.Broker, send: Callable[[broker.Transaction, int], None],
               samples: int, rng: random.Random) -> list[int]:
    """Commit-to-RECEIVE in ns for ``samples`` messages received by a ``_child`` process
    (at the other end of ``child``): each time it reports waiting, pause, ``send(tx, i)``
    in ``sender`` and take the clock just before the commit; its receipt time comes back."""
    latencies: list[int] = []
    for i in range(samples):
        if not child.poll(120) or child.recv() != "waiting":
            raise RuntimeError("the waiting process did not report")
        time.sleep(rng.uniform(*PAUSE_S))
        with sender.transaction() as tx:
            send(tx, i)
            sent_at = time.time_ns()
        if not child.poll(WAIT_S * 2):
            raise RuntimeError("the waiting process did not receive the message")
        counter, received_at = child.recv()
        if counter != i:
            raise RuntimeError(f"expected message {i}, got {counter}")
        latencies.append(received_at - sent_at)
    return latencies


def across_processes(samples: int, seed: int = 2) -> LatencyResult:
    """A child process blocked in WAITFOR, the parent SENDing."""
    rng = random.Random(seed)
    context = mp.get_context("spawn")
    with scratch_dir("latency-mp") as directory:
        db, (handle,) = make_broker(directory)
        parent_end, child_end = context.Pipe()
        child = context.Process(target=_child, args=(broker_url(directory), samples, child_end))
        child.start()
        try:
            latencies = waited_for(parent_end, db, lambda tx, i: tx.send(handle, body=body(i)), samples, rng)
        finally:
            child.join(WAIT_S * 2)
            if child.is_alive():
                child.terminate()
            db.dispose()
    return LatencyResult.of("across processes", latencies)

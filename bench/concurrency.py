"""Many processes and threads on one SQLite file (issue 15's figures), in one run.

* **readers**: 1 and 8 reader processes on one queue of many conversation groups,
  RECEIVE TOP(10) without WHERE and no work (``bench/scaling.py``'s measurement).
* **producer + consumer**: one process SENDs one message per transaction while another
  loops RECEIVE TOP(1) with WAITFOR; the producer's rate against the same producer
  alone, and how long the consumer waited for the write lock while the producer ran
  (each wait: ``Backend.take_write_lock``, timed in the consumer).
* **threads**: 8 threads of one process, each one SEND per transaction, then 8 threads
  each RECEIVE TOP(1) per transaction; against persist-queue's ``put`` and ``get`` and
  the broker's own single thread, in the same run.

    python bench/concurrency.py [--runs 3] [--messages 4000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console
from rich.table import Table

import broker
from bench import scaling
from bench.common import Summary, body, percentile, scratch_dir
from bench.peers import PersistQueuePeer

QUEUE = scaling.QUEUE
THREADS = 8
DIALOGS = 10


def _fresh(directory: Path, dialogs: int) -> tuple[str, list[Any]]:
    url = f"sqlite:///{directory / 'concurrency.db'}"
    db = broker.connect(url)
    handles = scaling.dialogs(db, dialogs)
    db.dispose()
    return url, handles


# -- producer + consumer ---------------------------------------------------------------------


def _producer(url: str, handles: list[Any], count: int, go: Any, results: Any) -> None:
    db = broker.connect(url, upgrade=False)
    go.wait()
    started = time.perf_counter()
    for number in range(count):
        with db.transaction() as tx:
            tx.send(handles[number % len(handles)], body=body(number))
    results.put(("producer", count / (time.perf_counter() - started), time.time()))
    db.dispose()


def _consumer(url: str, count: int, ready: Any, go: Any, results: Any) -> None:
    from broker.storage import backends

    waits: list[tuple[float, float]] = []  # (when it ended, seconds waited)
    take = backends.Backend.take_write_lock

    def timed(self: backends.Backend, engine: Any, info: dict[Any, Any], **options: Any) -> float:
        began = time.perf_counter()
        left = take(self, engine, info, **options)
        waits.append((time.time(), time.perf_counter() - began))
        return left

    backends.Backend.take_write_lock = timed  # type: ignore[method-assign]
    db = broker.connect(url, upgrade=False)
    with db.transaction() as tx:
        tx.receive(QUEUE, 0)
    ready.put(None)
    go.wait()
    got = 0
    while got < count:
        with db.transaction() as tx:
            got += len(tx.receive(QUEUE, 1, timeout=10))
    results.put(("consumer", waits, time.time()))
    db.dispose()


def producer_and_consumer(count: int) -> dict[str, Any]:
    """The producer's rate alone and beside a consumer, and the consumer's lock waits."""
    spawn = multiprocessing.get_context("spawn")
    rates: dict[str, float] = {}
    waits: list[float] = []
    for with_consumer in (False, True):
        with scratch_dir("prodcons") as directory:
            url, handles = _fresh(directory, DIALOGS)
            ready, go, results = spawn.Queue(), spawn.Event(), spawn.Queue()
            processes = [spawn.Process(target=_producer, args=(url, handles, count, go, results))]
            if with_consumer:
                processes.append(spawn.Process(target=_consumer, args=(url, count, ready, go, results)))
            for process in processes:
                process.start()
            if with_consumer:
                ready.get(timeout=120)
            go.set()
            outcomes = {kind: rest for kind, *rest in (results.get(timeout=1800) for _ in processes)}
            for process in processes:
                process.join()
            rates["with_consumer" if with_consumer else "alone"] = outcomes["producer"][0]
            if with_consumer:
                producer_done = outcomes["producer"][1]
                waits = [waited for ended, waited in outcomes["consumer"][0] if ended <= producer_done]
    return {"alone": rates["alone"], "with_consumer": rates["with_consumer"],
            "ratio": rates["with_consumer"] / rates["alone"], "consumer_waits": len(waits),
            "wait_p99_ms": percentile(waits, 0.99) * 1000 if waits else 0.0,
            "wait_max_ms": max(waits) * 1000 if waits else 0.0}


# -- threads -------------------------------------------------------------------------------


def _in_threads(threads: int, work: Callable[[int], None]) -> float:
    """Seconds for ``threads`` threads to run ``work(number)`` from one start signal."""
    go = threading.Event()
    failures: list[BaseException] = []

    def run(number: int) -> None:
        go.wait()
        try:
            work(number)
        except BaseException as exc:
            failures.append(exc)

    pool = [threading.Thread(target=run, args=(number,)) for number in range(threads)]
    for thread in pool:
        thread.start()
    started = time.perf_counter()
    go.set()
    for thread in pool:
        thread.join()
    if failures:
        raise failures[0]
    return time.perf_counter() - started


def broker_threads(threads: int, count: int) -> tuple[float, float]:
    """(SEND, RECEIVE TOP(1)) msg/s with ``threads`` threads, one message per transaction."""
    per_thread = count // threads
    with scratch_dir("threads") as directory:
        url, handles = _fresh(directory, threads)
        db = broker.connect(url, upgrade=False)

        def send(number: int) -> None:
            for sequence in range(per_thread):
                with db.transaction() as tx:
                    tx.send(handles[number], body=body(sequence))

        def receive(_number: int) -> None:
            for _ in range(per_thread):
                with db.transaction() as tx:
                    if not tx.receive(QUEUE, 1):
                        raise SystemExit("a receiver found the queue empty too early")

        sent = _in_threads(threads, send)
        received = _in_threads(threads, receive)
        if db.queue_counts(QUEUE):
            raise SystemExit("messages left after the receivers")
        db.dispose()
    total = per_thread * threads
    return total / sent, total / received


def persist_queue(count: int) -> tuple[float, float]:
    """(put, get) msg/s of persist-queue on one thread."""
    with scratch_dir("pq") as directory:
        peer = PersistQueuePeer(directory)
        started = time.perf_counter()
        for number in range(count):
            peer.put(body(number))
        put = count / (time.perf_counter() - started)
        started = time.perf_counter()
        for _ in range(count):
            if peer.take() is None:
                raise SystemExit("persist-queue lost a message")
        get = count / (time.perf_counter() - started)
        peer.close()
    return put, get


# -- one run -------------------------------------------------------------------------------


def run(runs: int, count: int, log: Callable[[str], None]) -> dict[str, Any]:
    samples: dict[str, list[float]] = {}
    extra: dict[str, list[float]] = {"wait_p99_ms": [], "wait_max_ms": []}

    def keep(name: str, value: float) -> None:
        samples.setdefault(name, []).append(value)

    expected = scaling.GROUPS_DEFAULT * scaling.PER_GROUP_DEFAULT
    for number in range(runs):
        for readers in (1, THREADS):
            with scaling.fresh_database("sqlite", "") as url:
                scaling.fill(url, scaling.GROUPS_DEFAULT, scaling.PER_GROUP_DEFAULT)
                keep(f"readers_{readers}", scaling.measure(url, readers, 10, 0.0, expected))
        pair = producer_and_consumer(count)
        keep("producer_alone", pair["alone"])
        keep("producer_with_consumer", pair["with_consumer"])
        extra["wait_p99_ms"].append(pair["wait_p99_ms"])
        extra["wait_max_ms"].append(pair["wait_max_ms"])
        put, get = persist_queue(count)
        keep("persist_queue_put", put)
        keep("persist_queue_get", get)
        for threads in (1, THREADS):
            send, receive = broker_threads(threads, count)
            keep(f"send_{threads}_threads", send)
            keep(f"receive_{threads}_threads", receive)
        log(f"run {number + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in samples.items()))
    summaries = {name: Summary.of(values).as_dict() for name, values in samples.items()}
    median = {name: s["median"] for name, s in summaries.items()}
    return {
        "summaries": summaries,
        "consumer_wait_ms": {"p99_worst_run": max(extra["wait_p99_ms"]), "max_worst_run": max(extra["wait_max_ms"])},
        "figures": {
            "8 readers / 1 reader": (median[f"readers_{THREADS}"] / median["readers_1"], 0.9),
            "producer beside a consumer / producer alone": (
                median["producer_with_consumer"] / median["producer_alone"], 0.8),
            "8 threads SEND / persist-queue put": (
                median[f"send_{THREADS}_threads"] / median["persist_queue_put"], 3.0),
            "8 threads RECEIVE TOP(1) / persist-queue get": (
                median[f"receive_{THREADS}_threads"] / median["persist_queue_get"], 3.0),
        },
    }


def print_rich(result: dict[str, Any], console: Console) -> None:
    table = Table(title="One SQLite file, many processes and threads (msg/s, median of runs)")
    for column in ("measurement", "median", "min", "max"):
        table.add_column(column, justify="right" if column != "measurement" else "left")
    for name, s in result["summaries"].items():
        table.add_row(name, f"{s['median']:,.0f}", f"{s['min']:,.0f}", f"{s['max']:,.0f}")
    console.print(table)
    console.print(markdown(result))


def markdown(result: dict[str, Any]) -> str:
    lines = ["| figure | measured | target | |", "|---|---:|---:|---|"]
    for name, (value, target) in result["figures"].items():
        lines.append(f"| {name} | {value:.2f}× | ≥ {target:g}× | {'PASS' if value >= target else 'MISS'} |")
    waits = result["consumer_wait_ms"]
    verdict = "PASS" if waits["max_worst_run"] <= 100 else "MISS"
    lines.append(f"| consumer's wait for the write lock while the producer runs, p99 / max (worst run) | "
                 f"{waits['p99_worst_run']:.1f} / {waits['max_worst_run']:.1f} ms | ≤ 100 ms | {verdict} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=4000, help="messages per producer and per thread scenario")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    console = Console()
    result = run(args.runs, args.messages, lambda line: console.print(f"[dim]{line}[/dim]", highlight=False))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print_rich(result, console)


if __name__ == "__main__":
    main()

"""Between two SQLite databases of one instance: sustained delivery and commit-to-RECEIVE.

    python bench/between_databases.py [--runs 5] [--n 10000] [--dialogs 1,100] [--samples 300]
                                      [--json results.json] [--markdown -]
    python bench/between_databases.py --profile delivery|send [--html out.html]

Also ``python bench/run.py --sections between``. Every figure uses 1 KiB bodies (``common.body``).

* **Delivery**, once per number of dialogs in ``--dialogs``. A fresh instance (catalog,
  database A with the initiator service, B with the target service, all SQLite files) and
  that many dialogs begun in A. One message
  per dialog goes across first, with the runtime running, so that every dialog is
  acknowledged (as a dialog in use is). Then, with no runtime, ``--n`` messages are sent
  in A, 100 SENDs per transaction, round robin over the dialogs: they wait in A's
  transmission queue (this preload is timed too, "SEND for another database"). Then
  ``inst.runtime()`` starts in this process and the clock runs until A's transmission
  queue is empty (a plain read-only sqlite3 connection looks every ``POLL_S``): every
  message acknowledged, so committed in B. Afterwards B's queue must hold every message
  once, in order per dialog. Compared with the single database's batched SEND of the
  same messages on the same number of dialogs (100 SENDs per transaction, round robin:
  with one dialog, ``throughput.py``'s "servicebroker/send100"), measured in the same run,
  interleaved; target: at least ``DELIVERY_TARGET`` times that rate, for every number of
  dialogs. (Spreading the messages over dialogs costs the single database too: it
  updates as many endpoints and index pages per transaction. So each shape is compared
  with its own.)
* **Commit-to-RECEIVE latency** with the runtime running, after a warm-up message: a
  receiver blocks in ``tx.receive(queue, 1, timeout=...)`` in B, the sender SENDs in A
  and takes the clock just before its commit, the receiver on return, as
  ``latency.py`` does (random 5-60 ms pauses, so samples fall at every point of the
  waiters' back-offs). Two setups: everything in one process (runtime, receiver thread,
  sender), and the runtime in its own process (as ``broker --instance URL run``), the
  receiver in another and the sender in this one. Target: p50 at most
  ``LATENCY_TARGET_MS``.

``--profile delivery`` runs pyinstrument over the transmitter's passes moving a preloaded
backlog (``Transmitter.run_pass`` called in this thread until the queue is empty: the
runtime's work without its waits); ``--profile send`` over the preload's SENDs. Both on
the first number of ``--dialogs``.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import random
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console
from rich.table import Table

import broker
from bench.common import Summary, body, counter_of, scratch_dir
from bench.latency import PAUSE_S, WAIT_S, LatencyResult, _child, _receive_one, round_trips
from bench.scenarios import INITIATOR, INITIATOR_QUEUE, TARGET, TARGET_QUEUE, make_broker
from bench.throughput import BATCH

DELIVERY_TARGET = 0.5
DIALOG_SHAPES = (1, 100)  # the delivery is measured on one dialog and on many
LATENCY_TARGET_MS = 20.0
POLL_S = 0.002             # how often the delivery figure looks at A's transmission queue
DRAIN_DEADLINE_S = 600.0   # a delivery that takes longer than this fails the benchmark
ONE_PROCESS = "one process (runtime, receiver thread, sender)"
THREE_PROCESSES = "runtime, receiver and sender in three processes"
Log = Callable[[str], None]


@dataclass
class Pair:
    """An instance of three SQLite files: the catalog, A (initiator) and B (target)."""

    directory: Path
    inst: broker.Instance
    a: broker.Broker
    b: broker.Broker
    handles: list[uuid.UUID]
    watcher: sqlite3.Connection  # read-only, on A's file: counts the transmission queue without a lock

    @property
    def catalog_url(self) -> str:
        return f"sqlite:///{self.directory / 'instance.db'}"

    @property
    def b_url(self) -> str:
        return f"sqlite:///{self.directory / 'b.db'}"

    def held_in_a(self) -> int:
        """Rows in A's transmission queue (each look is a read transaction of its own)."""
        return int(self.watcher.execute("SELECT count(*) FROM sb_transmission_queue").fetchone()[0])

    def dispose(self) -> None:
        self.watcher.close()
        self.inst.dispose()


def make_pair(directory: Path, dialogs: int) -> Pair:
    """A new instance with the two databases, their services, and ``dialogs`` dialogs begun in A."""
    inst = broker.instance(f"sqlite:///{directory / 'instance.db'}")
    a = inst.add_database("A", f"sqlite:///{directory / 'a.db'}")
    b = inst.add_database("B", f"sqlite:///{directory / 'b.db'}")
    b.create_queue(TARGET_QUEUE)
    b.create_service(TARGET, TARGET_QUEUE, contracts=["DEFAULT"])
    a.create_queue(INITIATOR_QUEUE)
    a.create_service(INITIATOR, INITIATOR_QUEUE)
    with a.transaction() as tx:
        handles = [tx.begin_dialog(INITIATOR, TARGET) for _ in range(dialogs)]
    watcher = sqlite3.connect(f"file:{directory / 'a.db'}?mode=ro", uri=True)
    return Pair(directory, inst, a, b, handles, watcher)


def wait_for(condition: Callable[[], bool], deadline_s: float, what: str, interval: float = POLL_S) -> None:
    """Look at ``condition`` every ``interval`` until it holds; fail after ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {deadline_s:g} s")
        time.sleep(interval)


def acknowledge_every_dialog(pair: Pair) -> None:
    """One message per dialog across and acknowledged, with the runtime running."""
    with pair.a.transaction() as tx:
        for handle in pair.handles:
            tx.send(handle, body=body(-1))
    with pair.inst.runtime():
        wait_for(lambda: pair.held_in_a() == 0, DRAIN_DEADLINE_S, "the warm-up messages")


def preload(pair: Pair, n: int) -> float:
    """Send ``n`` messages in A, 100 per transaction, round robin; seconds it took."""
    bodies = [body(i) for i in range(n)]
    started = time.perf_counter()
    for start in range(0, n, BATCH):
        with pair.a.transaction() as tx:
            for k in range(start, min(n, start + BATCH)):
                tx.send(pair.handles[k % len(pair.handles)], body=bodies[k])
    return time.perf_counter() - started


def check_arrived(pair: Pair, n: int) -> None:
    """B's queue holds the warm-up message and then 0..n-1 on their dialogs, in order."""
    by_dialog: dict[uuid.UUID, list[int]] = {}
    for message in pair.b.iter_queue_rows(TARGET_QUEUE):
        by_dialog.setdefault(message.conversation_handle, []).append(counter_of(message.message_body or b""))
    dialogs = len(pair.handles)
    got = sorted(counters for counters in by_dialog.values())
    expected = sorted([-1, *range(d, n, dialogs)] for d in range(dialogs))
    if len(by_dialog) != dialogs or got != expected:
        raise RuntimeError("delivery between databases: messages lost, duplicated or out of order")


@dataclass(frozen=True)
class DeliveryRun:
    """One delivery measurement: the runtime's rate and the preload's SEND rate."""

    messages: int
    dialogs: int
    seconds: float
    rate: float
    send_rate: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def delivery_once(n: int, dialogs: int) -> DeliveryRun:
    """Preload ``n`` messages held in A, then time the runtime moving them all to B."""
    with scratch_dir("between") as directory:
        pair = make_pair(directory, dialogs)
        try:
            acknowledge_every_dialog(pair)
            send_seconds = preload(pair, n)
            if pair.held_in_a() != n:
                raise RuntimeError("the preload did not leave every message in A's transmission queue")
            gc.collect()
            started = time.perf_counter()
            with pair.inst.runtime():
                wait_for(lambda: pair.held_in_a() == 0, DRAIN_DEADLINE_S, "delivery of the preloaded messages")
                elapsed = time.perf_counter() - started
            check_arrived(pair, n)
        finally:
            pair.dispose()
    return DeliveryRun(n, dialogs, elapsed, n / elapsed, n / send_seconds)


def single_database_send(n: int, dialogs: int) -> float:
    """One database: ``n`` messages, 100 SENDs per transaction, round robin over
    ``dialogs`` dialogs (as the preload sends them in A); messages per second."""
    with scratch_dir("between-single") as directory:
        db, handles = make_broker(directory, dialogs)
        try:
            bodies = [body(i) for i in range(n)]
            gc.collect()
            started = time.perf_counter()
            for start in range(0, n, BATCH):
                with db.transaction() as tx:
                    for k in range(start, min(n, start + BATCH)):
                        tx.send(handles[k % dialogs], body=bodies[k])
            return n / (time.perf_counter() - started)
        finally:
            db.dispose()


def run_delivery(runs: int, n: int, shapes: tuple[int, ...], log: Log) -> dict[str, Any]:
    """For each number of dialogs, ``runs`` interleaved pairs of measurements: the single
    database's batched SEND and the delivery between databases."""
    if n % BATCH:
        raise ValueError(f"the delivery's message count must be a multiple of {BATCH}")
    measured: list[dict[str, Any]] = []
    for dialogs in shapes:
        single_rates: list[float] = []
        deliveries: list[DeliveryRun] = []
        for run in range(runs):
            rate = single_database_send(n, dialogs)
            single_rates.append(rate)
            log(f"{dialogs} dialog(s), run {run + 1}/{runs}: one database, 100 SENDs per transaction: "
                f"{rate:,.0f} msg/s")
            result = delivery_once(n, dialogs)
            deliveries.append(result)
            log(f"{dialogs} dialog(s), run {run + 1}/{runs}: A to B by the runtime: {result.rate:,.0f} msg/s "
                f"(preload SEND {result.send_rate:,.0f} msg/s)")
        measured.append({"dialogs": dialogs, "single_send100": Summary.of(single_rates).as_dict(),
                         "delivery": Summary.of([d.rate for d in deliveries]).as_dict(),
                         "send_held": Summary.of([d.send_rate for d in deliveries]).as_dict(),
                         "runs": [d.as_dict() for d in deliveries]})
    return {"messages": n, "shapes": measured}


# -- commit-to-RECEIVE latency -----------------------------------------------------------------


def _warm_up(pair: Pair) -> None:
    """One message across and received, so that the dialog is acknowledged."""
    with pair.a.transaction() as tx:
        tx.send(pair.handles[0], body=body(-1))
    if _receive_one(pair.b, time.perf_counter_ns)[0] != -1:
        raise RuntimeError("the warm-up message did not arrive first")


def latency_one_process(samples: int, seed: int = 3) -> LatencyResult:
    """The runtime's threads, a receiver thread on B and the sender on A, in this process."""
    with scratch_dir("between-latency") as directory:
        pair = make_pair(directory, 1)
        try:
            with pair.inst.runtime():
                _warm_up(pair)
                latencies = round_trips(pair.a, lambda tx, i: tx.send(pair.handles[0], body=body(i)), pair.b,
                                        samples, random.Random(seed))
        finally:
            pair.dispose()
    return LatencyResult.of(ONE_PROCESS, latencies)


def _serve(catalog_url: str, pipe: Connection) -> None:
    """The runtime process: serve the instance until the parent says stop."""
    inst = broker.instance(catalog_url)
    with inst.runtime():
        pipe.send("started")
        pipe.recv()
    inst.dispose()


def latency_three_processes(samples: int, seed: int = 4) -> LatencyResult:
    """The runtime in a process of its own, the receiver in another, the sender here."""
    rng = random.Random(seed)
    context = mp.get_context("spawn")
    with scratch_dir("between-latency-mp") as directory:
        pair = make_pair(directory, 1)
        runtime_end, runtime_child = context.Pipe()
        receiver_end, receiver_child = context.Pipe()
        runtime = context.Process(target=_serve, args=(pair.catalog_url, runtime_child))
        receiver = context.Process(target=_child, args=(pair.b_url, samples, receiver_child))
        latencies: list[int] = []
        try:
            runtime.start()
            if not runtime_end.poll(120) or runtime_end.recv() != "started":
                raise RuntimeError("the runtime process did not start")
            _warm_up(pair)
            receiver.start()
            for i in range(samples):
                if not receiver_end.poll(120) or receiver_end.recv() != "waiting":
                    raise RuntimeError("the waiting process did not report")
                time.sleep(rng.uniform(*PAUSE_S))
                with pair.a.transaction() as tx:
                    tx.send(pair.handles[0], body=body(i))
                    sent_at = time.time_ns()
                if not receiver_end.poll(WAIT_S * 2):
                    raise RuntimeError("the waiting process did not receive the message")
                counter, received_at = receiver_end.recv()
                if counter != i:
                    raise RuntimeError(f"expected message {i}, got {counter}")
                latencies.append(received_at - sent_at)
        finally:
            if runtime.is_alive():
                runtime_end.send("stop")
            for process in (receiver, runtime):  # the receiver ends after its last sample
                if process.pid is not None:
                    process.join(WAIT_S * 2)
                    if process.is_alive():
                        process.terminate()
            pair.dispose()
    return LatencyResult.of(THREE_PROCESSES, latencies)


def run_latency(samples: int, log: Log) -> list[dict[str, Any]]:
    out = []
    for measure in (latency_one_process, latency_three_processes):
        result = measure(samples)
        log(f"between databases, {result.where}: p50 {result.p50_ms:.2f} ms, p95 {result.p95_ms:.2f} ms")
        out.append(result.as_dict())
    return out


def run(runs: int, n: int, shapes: tuple[int, ...], samples: int, log: Log) -> dict[str, Any]:
    """Both parts: what ``bench/run.py`` keeps under ``results["between"]``."""
    return {"delivery": run_delivery(runs, n, shapes, log), "latency": run_latency(samples, log)}


# -- tables ---------------------------------------------------------------------------------------


def _status(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _spread(summary: dict[str, float]) -> list[str]:
    return [f"{summary['median']:,.0f}", f"{summary['min']:,.0f}", f"{summary['max']:,.0f}"]


def tables(between: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of the section, as ``report.tables`` gives them."""
    delivery = between["delivery"]
    rates: list[list[str]] = []
    targets: list[list[str]] = []
    runs = 0
    for shape in delivery["shapes"]:
        single, moved, held = shape["single_send100"], shape["delivery"], shape["send_held"]
        runs, on = len(shape["runs"]), f"on {shape['dialogs']} dialog{'s' if shape['dialogs'] != 1 else ''}"
        rates += [[f"one database: 100 SENDs per transaction {on}", *_spread(single)],
                  [f"A to B: the runtime moves {delivery['messages']:,} held messages {on}", *_spread(moved)],
                  [f"A: 100 SENDs per transaction for B {on} (held in the transmission queue)", *_spread(held)]]
        ratio = moved["median"] / single["median"]
        targets.append([f"delivery A to B / one database's batched SEND, {on}", f"{ratio:.2f} x",
                        f">= {DELIVERY_TARGET}x", _status(ratio >= DELIVERY_TARGET)])
    latency_rows = [[item["where"], str(item["samples"]), f"{item['p50_ms']:.2f}", f"{item['p95_ms']:.2f}",
                     f"{item['mean_ms']:.2f}", f"{item['max_ms']:.2f}"] for item in between["latency"]]
    targets += [[f"commit-to-RECEIVE p50, {item['where']}", f"{item['p50_ms']:.2f} ms",
                 f"<= {LATENCY_TARGET_MS:g} ms", _status(item["p50_ms"] <= LATENCY_TARGET_MS)]
                for item in between["latency"]]
    return [
        (f"Between databases: throughput, 1 KiB bodies (messages/s, {runs} runs)",
         ["operation", "median", "min", "max"], rates),
        ("Between databases: commit in A to RECEIVE in B (ms)", ["where", "samples", "p50", "p95", "mean", "max"],
         latency_rows),
        ("Between databases: targets", ["figure", "value", "target", "status"], targets),
    ]


def print_rich(between: dict[str, Any], console: Console) -> None:
    for title, header, rows in tables(between):
        table = Table(title=title, title_justify="left")
        for i, name in enumerate(header):
            table.add_column(name, justify="left" if i == 0 or name in ("target", "status") else "right")
        for row in rows:
            table.add_row(*row, style="red" if row[-1] == "MISS" else None)
        console.print(table)


def markdown(between: dict[str, Any]) -> str:
    parts: list[str] = []
    for title, header, rows in tables(between):
        parts += [f"**{title}**\n", "| " + " | ".join(header) + " |",
                  "|" + "|".join("---" if i == 0 or name in ("target", "status") else "---:"
                                 for i, name in enumerate(header)) + "|"]
        parts += ["| " + " | ".join(row) + " |" for row in rows]
        parts.append("")
    return "\n".join(parts)


# -- profiling ------------------------------------------------------------------------------------


def profile(what: str, n: int, dialogs: int, html: str | None) -> None:
    """pyinstrument over the transmitter's passes (``delivery``) or the preload (``send``)."""
    from pyinstrument import Profiler

    from broker.runtime.transmitter import Transmitter

    profiler = Profiler(interval=0.0002)
    with scratch_dir("between-profile") as directory:
        pair = make_pair(directory, dialogs)
        try:
            acknowledge_every_dialog(pair)
            if what == "send":
                with profiler:
                    preload(pair, n)
            else:
                preload(pair, n)
                transmitter = Transmitter(lambda: list(pair.inst.databases.values()))
                with profiler:
                    while transmitter.run_pass()[0]:
                        pass
                check_arrived(pair, n)
        finally:
            pair.dispose()
    if html:
        Path(html).write_text(profiler.output_html())
    else:
        print(profiler.output_text(unicode=True, color=sys.stdout.isatty()))


def _shapes(text: str) -> tuple[int, ...]:
    try:
        shapes = tuple(int(part) for part in text.split(","))
    except ValueError:
        shapes = ()
    if not shapes or min(shapes) < 1:
        raise argparse.ArgumentTypeError("dialogs: positive whole numbers, comma-separated")
    return shapes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="interleaved delivery measurements (default 5)")
    parser.add_argument("--n", type=int, default=10_000, help="messages per delivery measurement (default 10000)")
    parser.add_argument("--dialogs", type=_shapes, default=DIALOG_SHAPES,
                        help="numbers of dialogs they go on, comma-separated (default 1,100)")
    parser.add_argument("--samples", type=int, default=300, help="latency samples per setup (default 300)")
    parser.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    parser.add_argument("--markdown", metavar="PATH", help="write the tables as markdown ('-' for stdout)")
    parser.add_argument("--profile", choices=("delivery", "send"), help="profile one part instead of measuring")
    parser.add_argument("--html", help="with --profile: write pyinstrument's HTML report here")
    args = parser.parse_args(argv)
    if args.n % BATCH:
        parser.error(f"--n must be a multiple of {BATCH}")
    if args.profile:
        profile(args.profile, args.n, args.dialogs[0], args.html)
        return 0
    status = Console(stderr=True)
    between = run(args.runs, args.n, args.dialogs, args.samples, status.log)
    print_rich(between, Console())
    if args.json:
        Path(args.json).write_text(json.dumps(between, indent=2) + "\n")
    if args.markdown:
        text = markdown(between)
        if args.markdown == "-":
            sys.stdout.write(text)
        else:
            Path(args.markdown).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

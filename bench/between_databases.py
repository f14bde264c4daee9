"""Between two SQLite databases, of one instance or of two: sustained delivery and commit-to-RECEIVE.

    python bench/between_databases.py [--instances] [--runs 5] [--n 10000] [--dialogs 1,100] [--samples 300]
                                      [--json results.json] [--markdown -]
    python bench/between_databases.py [--instances] --profile delivery|send [--html out.html]

Also ``python bench/run.py --sections between,between-instances``. Every figure uses 1 KiB
bodies (``common.body``).

The topology (``Pair``): database A holds the initiator service, B the target service,
every file SQLite. Without ``--instances`` both are databases of one instance (issue 13),
moved by its runtime's transmitter in process. With ``--instances`` each is the one
database of an instance of its own (issue 14): each instance has an endpoint on a free
loopback port with a certificate of its own, trusting the other's, and A routes B's
service to ``TCP://127.0.0.1:port`` of B's endpoint (and B A's back), so every message
crosses a TCP connection with mutual TLS.

* **Delivery**, once per number of dialogs in ``--dialogs``. A fresh pair and that many
  dialogs begun in A. One message per dialog goes across first, with the runtimes
  running, so that every dialog is acknowledged (as a dialog in use is). Then, with no
  runtime, ``--n`` messages are sent in A, 100 SENDs per transaction, round robin over
  the dialogs: they wait in A's transmission queue (this preload is timed too, "SEND for
  another database"). Then ``pair.runtime()`` starts every instance's runtime in this
  process and the clock runs until A's transmission queue is empty (a plain read-only
  sqlite3 connection looks every ``POLL_S``): every message acknowledged, so committed
  in B. Afterwards B's queue must hold every message once, in order per dialog. Compared
  with the single database's batched SEND of the same messages on the same number of
  dialogs (100 SENDs per transaction, round robin: with one dialog, ``throughput.py``'s
  "servicebroker/send100"), measured in the same run, interleaved; target: at least
  ``DELIVERY_TARGET`` times that rate, for every number of dialogs. (Spreading the
  messages over dialogs costs the single database too: it updates as many endpoints and
  index pages per transaction. So each shape is compared with its own.)
* **Commit-to-RECEIVE latency** with the runtimes running, after a warm-up message: a
  receiver blocks in ``tx.receive(queue, 1, timeout=...)`` in B, the sender SENDs in A
  and takes the clock just before its commit, the receiver on return, as
  ``latency.py`` does (random 5-60 ms pauses, so samples fall at every point of the
  waiters' back-offs). Two setups: everything in one process (runtimes, receiver thread,
  sender), and each instance's runtime in a process of its own (as ``broker --instance
  URL run``), the receiver in another and the sender in this one. Target: p50 at most
  ``LATENCY_TARGET_MS``.

``--profile delivery`` runs pyinstrument over the transmitter's passes moving a preloaded
backlog (``Transmitter.run_pass`` called in this thread until the queue is empty: the
runtime's work without its waits; between instances through the endpoint of a runtime
of A's instance catalog that serves no database, while B's instance's runtime serves B
in a process of its own); ``--profile send``
over the preload's SENDs.
Both on the first number of ``--dialogs``.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import random
import socket
import sqlite3
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
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
from bench.latency import WAIT_S, LatencyResult, _child, _receive_one, round_trips, waited_for
from bench.scenarios import INITIATOR, INITIATOR_QUEUE, TARGET, TARGET_QUEUE, make_broker
from bench.throughput import BATCH
from broker.ddl.certificates import create_certificate
from broker.runtime.instance import InstanceRuntime
from broker.runtime.transmitter import Transmitter

DELIVERY_TARGET = 0.5
DIALOG_SHAPES = (1, 100)  # the delivery is measured on one dialog and on many
LATENCY_TARGET_MS = 20.0
POLL_S = 0.002             # how often the delivery figure looks at A's transmission queue
DRAIN_DEADLINE_S = 600.0   # a delivery that takes longer than this fails the benchmark
WARM_UP_DEADLINE_S = 120.0  # as do warm-up messages (one per dialog) that take longer than this
PORTS = (20000, 32000)     # endpoints listen on free loopback ports in this range
DATABASES, INSTANCES = "databases", "instances"
TITLES = {DATABASES: "Between databases", INSTANCES: "Between instances (TCP, mutual TLS)"}
MOVED_BY = {(DATABASES, False): "A to B: the runtime moves",
            (INSTANCES, True): "A to B over TLS: the two runtimes, a process each, move",
            (INSTANCES, False): "A to B over TLS: the two runtimes, in one process, move"}
ONE_PROCESS = {DATABASES: "one process (runtime, receiver thread, sender)",
               INSTANCES: "one process (both runtimes, receiver thread, sender)"}
PROCESSES = {DATABASES: "runtime, receiver and sender in three processes",
             INSTANCES: "a runtime per instance, receiver and sender in four processes"}
Log = Callable[[str], None]


@dataclass
class Pair:
    """A (initiator) and B (target), SQLite files: two databases of one instance, or each
    the one database of an instance of its own, the two joined by their endpoints."""

    directory: Path
    instances: list[broker.Instance]  # B's first: its endpoint listens before A's transmitter dials
    catalog_urls: list[str]           # the instance catalogs, in the same order
    a: broker.Broker
    b: broker.Broker
    handles: list[uuid.UUID]
    watcher: sqlite3.Connection  # read-only, on A's file: counts the transmission queue without a lock

    @property
    def topology(self) -> str:
        return INSTANCES if len(self.instances) > 1 else DATABASES

    @property
    def b_url(self) -> str:
        return f"sqlite:///{self.directory / 'b.db'}"

    def held_in_a(self) -> int:
        """Rows in A's transmission queue (each look is a read transaction of its own)."""
        return int(self.watcher.execute("SELECT count(*) FROM sb_transmission_queue").fetchone()[0])

    def drain(self, deadline_s: float, what: str) -> None:
        """Wait until A's transmission queue is empty; fail with why its messages wait."""
        try:
            wait_for(lambda: self.held_in_a() == 0, deadline_s, what)
        except RuntimeError as late:
            statuses = self.watcher.execute("SELECT count(*), transmission_status FROM sb_transmission_queue "
                                            "GROUP BY transmission_status").fetchall()
            raise RuntimeError(f"{late}; still held in A: {statuses}") from None

    @contextmanager
    def runtime(self, processes: bool = False) -> Iterator[None]:
        """Every instance's runtime, in this process or (``processes``) each in a process of
        its own, as ``broker --instance URL run`` serves it: B's starts first and stops last."""
        with ExitStack() as stack:
            for inst, url in zip(self.instances, self.catalog_urls, strict=True):
                stack.enter_context(_runtime_process(url) if processes else inst.runtime())
            yield

    def dispose(self) -> None:
        self.watcher.close()
        for inst in self.instances:
            inst.dispose()


def make_pair(directory: Path, dialogs: int, *, instances: bool = False) -> Pair:
    """A and B with their services and ``dialogs`` dialogs begun in A: two databases of a
    new instance, or (``instances``) each in a new instance of its own, joined by endpoints."""
    catalog_urls = [f"sqlite:///{directory / name}"
                    for name in (("b-instance.db", "a-instance.db") if instances else ("instance.db",))]
    opened = [broker.instance(url) for url in catalog_urls]
    a = opened[-1].add_database("A", f"sqlite:///{directory / 'a.db'}")
    b = opened[0].add_database("B", f"sqlite:///{directory / 'b.db'}")
    b.create_queue(TARGET_QUEUE)
    b.create_service(TARGET, TARGET_QUEUE, contracts=["DEFAULT"])
    a.create_queue(INITIATOR_QUEUE)
    a.create_service(INITIATOR, INITIATOR_QUEUE)
    if instances:
        join_instances(opened[-1], a, opened[0], b)
    with a.transaction() as tx:
        handles = [tx.begin_dialog(INITIATOR, TARGET) for _ in range(dialogs)]
    watcher = sqlite3.connect(f"file:{directory / 'a.db'}?mode=ro", uri=True)
    return Pair(directory, opened, catalog_urls, a, b, handles, watcher)


def join_instances(a_side: broker.Instance, a: broker.Broker, b_side: broker.Instance, b: broker.Broker) -> None:
    """An endpoint for each instance on a free loopback port, with a certificate of its own
    and trusting the other's; in each database a route to the other's service, and in A a
    remote service binding for B's (the tutorial "Completing a Conversation Between Instances")."""
    a_port, b_port = free_ports(2)
    a_certificate, a_key = create_certificate("bench instance A")
    b_certificate, b_key = create_certificate("bench instance B")
    a_side.create_endpoint("BenchEndpointA", a_port, listener_ip="127.0.0.1", certificate=a_certificate,
                           private_key=a_key, trusted_peers=[b_certificate])
    b_side.create_endpoint("BenchEndpointB", b_port, listener_ip="127.0.0.1", certificate=b_certificate,
                           private_key=b_key, trusted_peers=[a_certificate])
    a.create_route("BenchToB", f"TCP://127.0.0.1:{b_port}", service_name=TARGET)
    # Dialogs begin WITH ENCRYPTION = ON (the default): dialog security needs a binding.
    a.create_remote_service_binding("BenchBindingB", TARGET, "BenchUserB")
    b.create_route("BenchToA", f"TCP://127.0.0.1:{a_port}", service_name=INITIATOR)


def free_ports(count: int) -> list[int]:
    """``count`` different ports in ``PORTS`` that are free on 127.0.0.1 now."""
    rng = random.Random()
    with ExitStack() as probes:
        ports: list[int] = []
        for _ in range(200 * count):
            port = rng.randint(*PORTS)
            probe = probes.enter_context(socket.socket())
            try:
                probe.bind(("127.0.0.1", port))  # held until all are found, so they differ
            except OSError:
                continue
            ports.append(port)
            if len(ports) == count:
                return ports
    raise RuntimeError(f"no {count} free ports between {PORTS[0]} and {PORTS[1]}")


def wait_for(condition: Callable[[], bool], deadline_s: float, what: str, interval: float = POLL_S) -> None:
    """Look at ``condition`` every ``interval`` until it holds; fail after ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {deadline_s:g} s")
        time.sleep(interval)


def acknowledge_every_dialog(pair: Pair) -> None:
    """One message per dialog across and acknowledged, with the runtimes running."""
    with pair.a.transaction() as tx:
        for handle in pair.handles:
            tx.send(handle, body=body(-1))
    with pair.runtime():
        pair.drain(WARM_UP_DEADLINE_S, "the warm-up messages")


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
        raise RuntimeError(f"delivery between {pair.topology}: messages lost, duplicated or out of order")


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


def delivery_once(n: int, dialogs: int, instances: bool, processes: bool = False) -> DeliveryRun:
    """Preload ``n`` messages held in A, then time the runtimes (in ``processes``) moving
    them all to B."""
    with scratch_dir("between") as directory:
        pair = make_pair(directory, dialogs, instances=instances)
        try:
            acknowledge_every_dialog(pair)
            send_seconds = preload(pair, n)
            if pair.held_in_a() != n:
                raise RuntimeError("the preload did not leave every message in A's transmission queue")
            # The runtimes start (their processes spawn) with A's broker disabled, so that
            # nothing moves before the clock runs. Enabling it is the start: the clock runs
            # from its commit (the enable itself looks at every held message first, which is
            # not the delivery's work; a transmitter may take its first batch a moment early).
            pair.a.set_broker_enabled(False)
            with pair.runtime(processes):
                gc.collect()
                pair.a.set_broker_enabled(True)
                started = time.perf_counter()
                pair.drain(DRAIN_DEADLINE_S, "delivery of the preloaded messages")
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


def run_delivery(runs: int, n: int, shapes: tuple[int, ...], log: Log, instances: bool = False) -> dict[str, Any]:
    """For each number of dialogs, ``runs`` interleaved measurements: the single database's
    batched SEND and the delivery between databases; or between ``instances``, each
    runtime in a process of its own (the figure compared) and both in this process."""
    if n % BATCH:
        raise ValueError(f"the delivery's message count must be a multiple of {BATCH}")
    topology = INSTANCES if instances else DATABASES
    ways = {"delivery": True, "delivery_one_process": False} if instances else {"delivery": False}
    measured: list[dict[str, Any]] = []
    for dialogs in shapes:
        single_rates: list[float] = []
        deliveries: dict[str, list[DeliveryRun]] = {way: [] for way in ways}
        for run in range(runs):
            rate = single_database_send(n, dialogs)
            single_rates.append(rate)
            log(f"{dialogs} dialog(s), run {run + 1}/{runs}: one database, 100 SENDs per transaction: "
                f"{rate:,.0f} msg/s")
            for way, processes in ways.items():
                result = delivery_once(n, dialogs, instances, processes)
                deliveries[way].append(result)
                log(f"{dialogs} dialog(s), run {run + 1}/{runs}: {MOVED_BY[topology, processes]} them at "
                    f"{result.rate:,.0f} msg/s (preload SEND {result.send_rate:,.0f} msg/s)")
        shape: dict[str, Any] = {"dialogs": dialogs, "single_send100": Summary.of(single_rates).as_dict()}
        for way, results in deliveries.items():
            shape[way] = Summary.of([d.rate for d in results]).as_dict()
        shape["send_held"] = Summary.of([d.send_rate for d in deliveries["delivery"]]).as_dict()
        shape["runs"] = [d.as_dict() for d in deliveries["delivery"]]
        measured.append(shape)
    return {"messages": n, "shapes": measured}


# -- commit-to-RECEIVE latency -----------------------------------------------------------------


def _warm_up(pair: Pair) -> None:
    """One message across and received, so that the dialog is acknowledged."""
    with pair.a.transaction() as tx:
        tx.send(pair.handles[0], body=body(-1))
    if _receive_one(pair.b, time.perf_counter_ns)[0] != -1:
        raise RuntimeError("the warm-up message did not arrive first")


def latency_one_process(samples: int, instances: bool, seed: int = 3) -> LatencyResult:
    """The runtimes' threads, a receiver thread on B and the sender on A, in this process."""
    with scratch_dir("between-latency") as directory:
        pair = make_pair(directory, 1, instances=instances)
        try:
            with pair.runtime():
                _warm_up(pair)
                latencies = round_trips(pair.a, lambda tx, i: tx.send(pair.handles[0], body=body(i)), pair.b,
                                        samples, random.Random(seed))
        finally:
            pair.dispose()
    return LatencyResult.of(ONE_PROCESS[pair.topology], latencies)


def _serve(catalog_url: str, pipe: Connection) -> None:
    """A runtime process: serve the instance until the parent says stop."""
    inst = broker.instance(catalog_url)
    with inst.runtime():
        pipe.send("started")
        pipe.recv()
    inst.dispose()


@contextmanager
def _runtime_process(catalog_url: str) -> Iterator[None]:
    """The runtime of the instance at ``catalog_url`` in a process of its own, serving
    from when this enters until it exits."""
    end, child = mp.get_context("spawn").Pipe()
    process = mp.get_context("spawn").Process(target=_serve, args=(catalog_url, child))
    try:
        process.start()
        if not end.poll(120) or end.recv() != "started":
            raise RuntimeError("a runtime process did not start")
        yield
    finally:
        _end(process, end)
        end.close()
        child.close()


def latency_across_processes(samples: int, instances: bool, seed: int = 4) -> LatencyResult:
    """Each instance's runtime in a process of its own, the receiver in another, the sender here."""
    rng = random.Random(seed)
    context = mp.get_context("spawn")
    with scratch_dir("between-latency-mp") as directory:
        pair = make_pair(directory, 1, instances=instances)
        receiver_end, receiver_child = context.Pipe()
        receiver = context.Process(target=_child, args=(pair.b_url, samples, receiver_child))
        try:
            with pair.runtime(processes=True):
                _warm_up(pair)
                receiver.start()
                latencies = waited_for(receiver_end, pair.a, lambda tx, i: tx.send(pair.handles[0], body=body(i)),
                                       samples, rng)
                _end(receiver)  # it ends after its last sample, before the runtimes stop
        finally:
            _end(receiver)
            pair.dispose()
    return LatencyResult.of(PROCESSES[pair.topology], latencies)


def _end(process: mp.process.BaseProcess, stop: Connection | None = None) -> None:
    """Ask a started process to stop (through ``stop``), wait for it, terminate it if it does not end."""
    if process.pid is None:
        return
    if stop is not None and process.is_alive():
        stop.send("stop")
    process.join(WAIT_S * 2)
    if process.is_alive():
        process.terminate()


def run_latency(samples: int, log: Log, instances: bool = False) -> list[dict[str, Any]]:
    out = []
    for measure in (latency_one_process, latency_across_processes):
        result = measure(samples, instances)
        log(f"between {INSTANCES if instances else DATABASES}, {result.where}: p50 {result.p50_ms:.2f} ms, "
            f"p95 {result.p95_ms:.2f} ms")
        out.append(result.as_dict())
    return out


def run(runs: int, n: int, shapes: tuple[int, ...], samples: int, log: Log, instances: bool = False) -> dict[str, Any]:
    """Both parts: what ``bench/run.py`` keeps under ``results["between"]`` (between
    databases) or ``results["between_instances"]``."""
    return {"topology": INSTANCES if instances else DATABASES,
            "delivery": run_delivery(runs, n, shapes, log, instances),
            "latency": run_latency(samples, log, instances)}


# -- tables ---------------------------------------------------------------------------------------


def _status(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _spread(summary: dict[str, float]) -> list[str]:
    return [f"{summary['median']:,.0f}", f"{summary['min']:,.0f}", f"{summary['max']:,.0f}"]


def tables(between: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of the section, as ``report.tables`` gives them."""
    topology = between.get("topology", DATABASES)  # runs saved before there were two topologies
    title = TITLES[topology]
    delivery = between["delivery"]
    rates: list[list[str]] = []
    targets: list[list[str]] = []
    runs = 0
    for shape in delivery["shapes"]:
        single, moved, held = shape["single_send100"], shape["delivery"], shape["send_held"]
        runs, on = len(shape["runs"]), f"on {shape['dialogs']} dialog{'s' if shape['dialogs'] != 1 else ''}"
        # Runs saved before the runtimes of two instances each had a process of their own
        # name no "delivery_one_process" and were measured in one process.
        separate = topology == INSTANCES and "delivery_one_process" in shape
        rates += [[f"one database: 100 SENDs per transaction {on}", *_spread(single)],
                  [f"{MOVED_BY[topology, separate]} {delivery['messages']:,} held messages {on}", *_spread(moved)]]
        ratio = moved["median"] / single["median"]
        targets.append([f"delivery A to B / one database's batched SEND, {on}", f"{ratio:.3f} x",
                        f">= {DELIVERY_TARGET}x", _status(ratio >= DELIVERY_TARGET)])
        if separate:
            alone = shape["delivery_one_process"]
            rates.append([f"{MOVED_BY[topology, False]} {delivery['messages']:,} held messages {on}", *_spread(alone)])
            targets.append([f"the same, both runtimes in one process, {on}",
                            f"{alone['median'] / single['median']:.3f} x", "(shown)", "-"])
        rates.append([f"A: 100 SENDs per transaction for B {on} (held in the transmission queue)", *_spread(held)])
    latency_rows = [[item["where"], str(item["samples"]), f"{item['p50_ms']:.2f}", f"{item['p95_ms']:.2f}",
                     f"{item['mean_ms']:.2f}", f"{item['max_ms']:.2f}"] for item in between["latency"]]
    targets += [[f"commit-to-RECEIVE p50, {item['where']}", f"{item['p50_ms']:.2f} ms",
                 f"<= {LATENCY_TARGET_MS:g} ms", _status(item["p50_ms"] <= LATENCY_TARGET_MS)]
                for item in between["latency"]]
    return [
        (f"{title}: throughput, 1 KiB bodies (messages/s, {runs} runs)", ["operation", "median", "min", "max"],
         rates),
        (f"{title}: commit in A to RECEIVE in B (ms)", ["where", "samples", "p50", "p95", "mean", "max"],
         latency_rows),
        (f"{title}: targets", ["figure", "value", "target", "status"], targets),
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


def profile(what: str, n: int, dialogs: int, html: str | None, instances: bool = False) -> None:
    """pyinstrument over the transmitter's passes (``delivery``) or the preload (``send``)."""
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.0002)
    with scratch_dir("between-profile") as directory:
        pair = make_pair(directory, dialogs, instances=instances)
        try:
            acknowledge_every_dialog(pair)
            if what == "send":
                with profiler:
                    preload(pair, n)
            else:
                preload(pair, n)
                answered = threading.Event()
                with transmitter_of(pair, answered.set) as transmitter, profiler:
                    while pair.held_in_a():
                        answered.clear()  # before the pass: an answer during it is not missed
                        transmitter.run_pass()
                        if transmitter.in_flight:
                            answered.wait(WAIT_S)
                check_arrived(pair, n)
        finally:
            pair.dispose()
    if html:
        Path(html).write_text(profiler.output_html())
    else:
        print(profiler.output_text(unicode=True, color=sys.stdout.isatty()))


@contextmanager
def transmitter_of(pair: Pair, wake: Callable[[], None]) -> Iterator[Transmitter]:
    """A transmitter over A's transmission queue for the caller to drive: the runtime's
    work without its thread. Between instances it sends through the endpoint of a runtime
    of A's instance catalog that serves no database (so its own transmitter has nothing to
    do), while B's instance's runtime serves B in a process of its own."""
    if pair.topology == DATABASES:
        yield Transmitter(lambda: list(pair.instances[0].databases.values()), wake=wake)
        return
    # B's runtime starts first and stops last: its endpoint never closes a connection under A's.
    with _runtime_process(pair.catalog_urls[0]), \
            InstanceRuntime(lambda: [], catalog=pair.instances[-1].msdb) as endpoint_only:
        if endpoint_only.endpoint is None:
            raise RuntimeError("A's instance serves no endpoint")
        yield Transmitter(lambda: [pair.a], network=endpoint_only.endpoint, wake=wake)


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
    parser.add_argument("--instances", action="store_true",
                        help="A and B in two instances joined by endpoints over TLS, not two databases of one")
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
        profile(args.profile, args.n, args.dialogs[0], args.html, args.instances)
        return 0
    status = Console(stderr=True)
    between = run(args.runs, args.n, args.dialogs, args.samples, status.log, args.instances)
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

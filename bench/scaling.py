"""Reader scaling: 1, 2, 4, 8 reader processes on one queue of many conversation groups.

Each measurement fills a fresh database with ``--groups`` dialogs of ``--per-group``
messages (1 KiB bodies, untimed), then starts N reader processes at once. Each reader
loops ``RECEIVE TOP(--top)`` (no WHERE: the group lock makes readers take different
groups), optionally "works" ``--work-ms`` per transaction while holding its group (a
sleep standing for a handler that waits on I/O), and commits, until the queue is empty.
Rate = messages / (last commit - start signal). Every run checks that each message came
out exactly once.

On PostgreSQL readers really run side by side (``FOR UPDATE SKIP LOCKED`` on the group
rows); on SQLite one transaction writes at a time, shown for comparison.

    python bench/scaling.py [--backends postgresql,sqlite] [--readers 1,2,4,8]
        [--work-ms 0,5] [--runs 3] [--postgres-url postgresql+psycopg://root@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console
from rich.table import Table
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

import broker
from bench.common import Summary, body, counter_of, scratch_dir

QUEUE, TARGET, INITIATOR = "Target", "//bench/Target", "//bench/Initiator"
FILL_PER_TRANSACTION = 500
GROUPS_DEFAULT, PER_GROUP_DEFAULT = 400, 10


@contextmanager
def fresh_database(backend: str, postgres_url: str) -> Iterator[str]:
    """The URL of an empty database, dropped afterwards."""
    if backend == "sqlite":
        with scratch_dir("scaling") as directory:
            yield f"sqlite:///{directory / 'scaling.db'}"
        return
    admin_url = make_url(postgres_url)
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"broker_bench_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield admin_url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def dialogs(db: broker.Broker, count: int) -> list[Any]:
    """The target queue and both services made, then ``count`` dialogs begun: their handles."""
    db.create_queue(QUEUE)
    db.create_queue("Initiator")
    db.create_service(TARGET, QUEUE, ["DEFAULT"])
    db.create_service(INITIATOR, "Initiator")
    with db.transaction() as tx:
        return [tx.begin_dialog(INITIATOR, TARGET) for _ in range(count)]


def fill(url: str, groups: int, per_group: int) -> None:
    """``groups`` dialogs with ``per_group`` messages each, counters 0.. in send order."""
    db = broker.connect(url)
    handles = dialogs(db, groups)
    counter = 0
    for _ in range(per_group):
        for start in range(0, groups, FILL_PER_TRANSACTION):
            with db.transaction() as tx:
                for handle in handles[start:start + FILL_PER_TRANSACTION]:
                    tx.send(handle, body=body(counter))
                    counter += 1
    db.dispose()


def reader(url: str, top: int, work_s: float, ready: Any, go: Event, results: Any) -> None:
    db = broker.connect(url)
    with db.transaction() as tx:  # connect and warm up before the clock starts
        tx.receive(QUEUE, 0)
    ready.put(None)
    go.wait()
    counters: list[int] = []
    last = time.time_ns()
    while True:
        with db.transaction() as tx:
            got = tx.receive(QUEUE, top)
            if got and work_s:
                time.sleep(work_s)
        if not got:
            break
        last = time.time_ns()
        counters.extend(counter_of(m.message_body or b"") for m in got)
    db.dispose()
    results.put((counters, last))


def measure(url: str, readers: int, top: int, work_ms: float, expected: int) -> float:
    """Messages per second with ``readers`` processes draining the filled queue."""
    spawn = multiprocessing.get_context("spawn")
    ready, results, go = spawn.Queue(), spawn.Queue(), spawn.Event()
    processes = [spawn.Process(target=reader, args=(url, top, work_ms / 1000, ready, go, results))
                 for _ in range(readers)]
    for process in processes:
        process.start()
    for _ in processes:
        ready.get(timeout=120)
    started = time.time_ns()
    go.set()
    outcomes = [results.get(timeout=1800) for _ in processes]
    for process in processes:
        process.join()
    counters = sorted(c for got, _ in outcomes for c in got)
    if counters != list(range(expected)):
        raise SystemExit(f"lost or duplicated messages with {readers} readers")
    finished = max(last for _, last in outcomes)
    return float(expected / ((finished - started) / 1e9))


def run(args: argparse.Namespace, console: Console) -> dict[tuple[str, float, int], Summary]:
    expected = args.groups * args.per_group
    summaries: dict[tuple[str, float, int], Summary] = {}
    for backend in args.backends:
        for work_ms in args.work_ms:
            for readers in args.readers:
                rates = []
                for run_number in range(args.runs):
                    with fresh_database(backend, args.postgres_url) as url:
                        fill(url, args.groups, args.per_group)
                        rates.append(measure(url, readers, args.top, work_ms, expected))
                    console.print(f"[dim]{backend}, {work_ms:g} ms work, {readers} readers, "
                                  f"run {run_number + 1}: {rates[-1]:,.0f} msg/s[/dim]", highlight=False)
                summaries[(backend, work_ms, readers)] = Summary.of(rates)
    return summaries


def report(args: argparse.Namespace, summaries: dict[tuple[str, float, int], Summary], console: Console) -> None:
    for backend in args.backends:
        for work_ms in args.work_ms:
            table = Table(title=f"{backend}, RECEIVE TOP({args.top}) + {work_ms:g} ms work per transaction")
            for column in ("readers", "msg/s median", "min", "max", "× 1 reader"):
                table.add_column(column, justify="right")
            single = summaries[(backend, work_ms, args.readers[0])].median
            for readers in args.readers:
                s = summaries[(backend, work_ms, readers)]
                table.add_row(str(readers), f"{s.median:,.0f}", f"{s.min:,.0f}", f"{s.max:,.0f}",
                              f"{s.median / single:.2f}×")
            console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="postgresql,sqlite", type=lambda v: v.split(","))
    parser.add_argument("--readers", default="1,2,4,8", type=lambda v: [int(x) for x in v.split(",")])
    parser.add_argument("--work-ms", default="0,5", type=lambda v: [float(x) for x in v.split(",")])
    parser.add_argument("--groups", type=int, default=GROUPS_DEFAULT)
    parser.add_argument("--per-group", type=int, default=PER_GROUP_DEFAULT)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--postgres-url", default="postgresql+psycopg://root@127.0.0.1:5432/test",
                        help="a database on the server to test on (benchmark databases are made beside it)")
    args = parser.parse_args()
    console = Console()
    report(args, run(args, console), console)


if __name__ == "__main__":
    main()

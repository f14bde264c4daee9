"""What each part of a queue table costs a SEND, in plain sqlite3.

"raw sqlite3, broker's writes" (``RawBrokerWritesPeer``) is the floor of the broker's
SEND: the message row in a table laid out like a broker queue plus the two endpoints'
sequence numbers. This runs it again with parts of that layout taken away: the
AUTOINCREMENT that keeps ``queuing_order`` from ever going back (Spark streams use it as
their offset), the group index (a group's next conversation by priority and age), both,
and every index; plain ``raw sqlite3`` is the bare queue. One SEND per transaction and
100 per transaction, interleaved runs, medians, same durability as ``bench/run.py``.

    python bench/storage.py [--runs 5] [--single-n 2000] [--batch-n 10000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console
from rich.table import Table

from bench.peers import RawBrokerWritesPeer, RawSqlitePeer
from bench.throughput import PeerFactory, Scenario, run_all

_WITHOUT_GROUP = {k: v for k, v in RawBrokerWritesPeer.INDEXES.items() if k != "q_group"}


class _NoAutoincrement(RawBrokerWritesPeer):
    AUTOINCREMENT = False


class _NoGroupIndex(RawBrokerWritesPeer):
    INDEXES = _WITHOUT_GROUP


class _Neither(RawBrokerWritesPeer):
    AUTOINCREMENT = False
    INDEXES = _WITHOUT_GROUP


class _NoIndex(RawBrokerWritesPeer):
    AUTOINCREMENT = False
    INDEXES: dict[str, str] = {}


LAYOUTS: list[tuple[str, PeerFactory]] = [
    ("broker's layout", RawBrokerWritesPeer),
    ("no AUTOINCREMENT", _NoAutoincrement),
    ("no group index", _NoGroupIndex),
    ("neither", _Neither),
    ("no index at all", _NoIndex),  # still the endpoint updates
    ("raw sqlite3", RawSqlitePeer),  # the bare queue: no endpoints either
]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--single-n", type=int, default=2000)
    parser.add_argument("--batch-n", type=int, default=10000)
    args = parser.parse_args(argv)
    chosen = [Scenario(f"{label}/{op}", label, label, factory, op, n)
              for label, factory in LAYOUTS
              for op, n in (("put", args.single_n), ("put_many", args.batch_n))]
    err = Console(stderr=True)
    rates, _ = run_all(chosen, args.runs, progress=err.print)
    base = {op: rates[f"{LAYOUTS[0][0]}/{op}"].median for op in ("put", "put_many")}
    table = Table(title=f"SEND floor by queue-table layout (messages/s, median of {args.runs} runs)")
    for column in ("layout", "1 per tx", "ratio", "100 per tx", "ratio"):
        table.add_column(column, justify="left" if column == "layout" else "right")
    for label, _factory in LAYOUTS:
        one, many = rates[f"{label}/put"].median, rates[f"{label}/put_many"].median
        table.add_row(label, f"{one:,.0f}", f"{one / base['put']:.2f}x",
                      f"{many:,.0f}", f"{many / base['put_many']:.2f}x")
    Console().print(table)


if __name__ == "__main__":
    main()

"""The runtime's scheduler pass as the number of idle dialogs grows.

A pass finds due timers, expired lifetimes and due transmission retries through indexes
on their deadlines, so its cost should not depend on how many conversations have nothing
due. This measures one pass (``Runtime.run_pass``: a transaction, the due work, the next
deadline) with 0 to 100k idle dialogs (begun, one message delivered, no timer, a lifetime
far away), and the same with one due timer to fire each pass.

    python bench/scheduler.py [--dialogs 0,1000,10000,100000] [--passes 200]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console
from rich.table import Table

import broker
from bench.common import Summary, scratch_dir

FILL_PER_TRANSACTION = 1000


def _database(directory: Path, dialogs: int) -> tuple[broker.Broker, object]:
    db = broker.connect(f"sqlite:///{directory / 'scheduler.db'}")
    db.create_queue("Target")
    db.create_queue("Initiator")
    db.create_service("//bench/Target", "Target", ["DEFAULT"])
    db.create_service("//bench/Initiator", "Initiator")
    for start in range(0, dialogs, FILL_PER_TRANSACTION):
        with db.transaction() as tx:
            for _ in range(min(FILL_PER_TRANSACTION, dialogs - start)):
                tx.send(tx.begin_dialog("//bench/Initiator", "//bench/Target"), body=b"idle")
    with db.transaction() as tx:
        timed = tx.begin_dialog("//bench/Initiator", "//bench/Target")
    return db, timed


def measure(dialogs: int, passes: int) -> dict[str, float]:
    """Median milliseconds of an idle pass and of a pass that fires one timer."""
    with scratch_dir("sb-scheduler-") as directory:
        db, timed = _database(directory, dialogs)
        runtime = db.runtime(activation=False)
        idle = []
        for _ in range(passes):
            started = time.perf_counter()
            runtime.run_pass()
            idle.append((time.perf_counter() - started) * 1000)
        firing = []
        for _ in range(passes):
            with db.transaction() as tx:
                tx.begin_conversation_timer(timed, timeout=0)
            started = time.perf_counter()
            runtime.run_pass()
            firing.append((time.perf_counter() - started) * 1000)
        fired = sum(1 for m in db.queue_rows("Initiator") if m.message_type_name == broker.DIALOG_TIMER)
        assert fired == passes, f"expected {passes} DialogTimer messages, found {fired}"
        db.dispose()
    return {"idle_ms": Summary.of(idle).median, "firing_ms": Summary.of(firing).median}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dialogs", default="0,1000,10000,100000")
    parser.add_argument("--passes", type=int, default=200)
    args = parser.parse_args()
    table = Table(title="Scheduler pass (median ms) by number of idle dialogs")
    for column in ("idle dialogs", "pass, nothing due", "pass firing one timer"):
        table.add_column(column, justify="right")
    for dialogs in (int(d) for d in args.dialogs.split(",")):
        result = measure(dialogs, args.passes)
        table.add_row(f"{dialogs:,}", f"{result['idle_ms']:.3f}", f"{result['firing_ms']:.3f}")
    Console().print(table)


if __name__ == "__main__":
    main()

"""What an idle instance runtime costs: CPU while nothing is sent.

An instance with two SQLite databases and no messages; its runtime (transmitter, each
database's scheduler and activation, the commit watchers) runs in this process, and the
process's CPU time (``time.process_time``) is read over ``--seconds`` after a second to
settle. Until issue 14's second session an idle runtime woke itself (every transmitter
pass committed, every commit woke the watchers): this is the figure that shows it.

    python bench/idle.py [--seconds 5] [--databases 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import broker
from bench.common import scratch_dir

SETTLE_S = 1.0


def idle_cpu(seconds: float, databases: int) -> float:
    """The share of one core the process used while its idle runtime ran ``seconds``."""
    with scratch_dir("idle") as directory:
        inst = broker.instance(f"sqlite:///{directory / 'instance.db'}")
        try:
            for n in range(databases):
                inst.add_database(f"D{n}", f"sqlite:///{directory / f'd{n}.db'}")
            with inst.runtime():
                time.sleep(SETTLE_S)
                started = time.process_time()
                time.sleep(seconds)
                return (time.process_time() - started) / seconds
        finally:
            inst.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="how long to measure (default 5)")
    parser.add_argument("--databases", type=int, default=2, help="databases in the instance (default 2)")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.databases < 1:
        parser.error("--seconds must be positive and --databases at least 1")
    share = idle_cpu(args.seconds, args.databases)
    print(f"idle instance runtime, {args.databases} database(s): {share * 100:.1f}% of a core "
          f"over {args.seconds:g} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

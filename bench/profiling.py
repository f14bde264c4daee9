"""Profile one broker scenario with pyinstrument (a bench extra), to see where time goes.

    python bench/profiling.py send1|receive1|send100|receive100 [--n N] [--html out.html]

Runs the same adapter as the throughput figures (``BrokerPeer``) on a fresh file and
prints pyinstrument's call tree of the timed part only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import body, scratch_dir
from bench.scenarios import BrokerPeer
from bench.throughput import BATCH

OPS = ("send1", "receive1", "send100", "receive100")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("op", choices=OPS)
    parser.add_argument("--n", type=int, default=2000, help="messages (default 2000)")
    parser.add_argument("--html", help="write pyinstrument's HTML report here instead of printing text")
    args = parser.parse_args(argv)
    try:
        from pyinstrument import Profiler
    except ImportError:
        parser.error("pyinstrument is missing: pip install -e '.[bench]'")
    n = args.n - args.n % BATCH if args.op.endswith("100") else args.n
    with scratch_dir("profile") as directory:
        peer = BrokerPeer(directory)
        bodies = [body(i) for i in range(n)]
        if args.op.startswith("receive"):
            for start in range(0, n, BATCH):
                peer.put_many(bodies[start:start + BATCH])
        profiler = Profiler(interval=0.0002)
        with profiler:
            if args.op == "send1":
                for data in bodies:
                    peer.put(data)
            elif args.op == "send100":
                for start in range(0, n, BATCH):
                    peer.put_many(bodies[start:start + BATCH])
            elif args.op == "receive1":
                for _ in range(n):
                    peer.take()
            else:
                for _ in range(0, n, BATCH):
                    peer.take_many(BATCH)
        peer.close()
    if args.html:
        Path(args.html).write_text(profiler.output_html())
    else:
        print(profiler.output_text(unicode=True, color=sys.stdout.isatty()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long the ``broker`` command takes to start: ``broker --help`` and ``broker status``
on a small SQLite file (made by ``broker init`` first), each a whole process.

The two commands run in turn (A B A B ...) after a warm-up, so drift of the machine's
speed hits both alike; the table gives min, median and max wall time and the tracker's
target for each (issue 18). The children get the environment as it is, except that they
may write bytecode caches (as a normal install has them) and no variable makes a pipe
look like a terminal.

    python bench/startup.py [--runs 10] [--broker 'COMMAND']

``--broker`` times another build, e.g. an earlier commit: run this file from a checkout
of it with ``--broker 'PYTHON -m cli.main'`` (``python -m`` finds the packages of the
current folder first); docs/benchmarks.md has the commands.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Summary, scratch_dir

# command -> the tracker's target, seconds of wall time (median)
TARGETS = {"broker --help": 0.25, "broker status": 0.5}


def child_environment() -> dict[str, str]:
    """The environment of the timed processes: caches allowed, pipes seen as pipes."""
    hidden = ("PYTHONDONTWRITEBYTECODE", "FORCE_COLOR", "TTY_COMPATIBLE")
    return {name: value for name, value in os.environ.items() if name not in hidden}


def timed(command: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one run of ``command``, its output thrown away; it must succeed."""
    start = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=True)
    return time.perf_counter() - start


def measure(broker: list[str], runs: int, warmup: int) -> dict[str, Summary]:
    """Run each command ``warmup`` times uncounted, then ``runs`` times in turn."""
    env = child_environment()
    with scratch_dir("startup") as directory:
        url = f"sqlite:///{directory / 'startup.db'}"
        subprocess.run([*broker, "--db", url, "init"], stdout=subprocess.DEVNULL, env=env, check=True)
        commands = {"broker --help": [*broker, "--help"], "broker status": [*broker, "--db", url, "status"]}
        for _ in range(warmup):
            for command in commands.values():
                timed(command, env)
        samples: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(runs):
            for name, command in commands.items():
                samples[name].append(timed(command, env))
    return {name: Summary.of(values) for name, values in samples.items()}


def table(results: dict[str, Summary], runs: int) -> list[str]:
    """The results as a markdown table, PASS or MISS against each target."""
    lines = [
        f"| command ({runs} runs) | min s | median s | max s | target (median) | |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, summary in results.items():
        target = TARGETS[name]
        verdict = "PASS" if summary.median <= target else "MISS"
        lines.append(
            f"| `{name}` | {summary.min:.3f} | {summary.median:.3f} | {summary.max:.3f} | ≤ {target:.2f} | {verdict} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="counted runs of each command (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="uncounted runs first (default 2)")
    parser.add_argument(
        "--broker",
        default=str(Path(sys.executable).with_name("broker")),
        help="the command to time, split like a shell (default: the broker script beside this Python)",
    )
    args = parser.parse_args()
    results = measure(shlex.split(args.broker), args.runs, args.warmup)
    print("\n".join(table(results, args.runs)))


if __name__ == "__main__":
    main()

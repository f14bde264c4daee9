"""The benchmark command: servicebroker against its peers, side by side, in one run.

    python bench/run.py [--quick] [--runs N] [--depths 1000,10000,...]
                        [--json results.json] [--markdown results.md|-]
    python bench/run.py --from-json results.json --markdown -   # re-render a saved run

Sections (``--sections``): throughput (broker, persist-queue, huey, litequeue, raw
sqlite3), e2e (two processes), depth (RECEIVE cost by queue depth), latency (WAITFOR
wake-up), between (two databases of one instance: delivery by the runtime against the
batched SEND, commit-to-RECEIVE latency; ``bench/between_databases.py``),
between-instances (the same between two instances over TCP with mutual TLS; its
``--instances``), postgresql (servicebroker on PostgreSQL against plain psycopg doing the
same writes, and round trips per transaction; ``bench/postgres.py``, on the server of
``--postgres-url``, skipped when it cannot be reached). A missed target is printed as
MISS; it never makes the command fail. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console

from bench import between_databases, e2e, latency, report, scenarios, throughput
from bench.common import BODY_SIZE, scratch_dir
from bench.peers import installed

SECTIONS = ("throughput", "e2e", "depth", "latency", "between", "between-instances", "postgresql")
BETWEEN_KEYS = ("between", "between_instances")  # where the two between sections keep their results
PACKAGES = ("servicebroker", "sqlalchemy", "persist-queue", "huey", "litequeue")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="fewer runs and messages, depths up to 100k (a few minutes)")
    parser.add_argument("--runs", type=int, help="runs per throughput figure (default 5, quick 3)")
    parser.add_argument("--depths", help="queue depths for the RECEIVE-cost section "
                                         "(default 1000,10000,100000,1000000; quick up to 100000)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)}")
    parser.add_argument("--single-n", type=int, help="messages per 1-per-transaction measurement (default 2000)")
    parser.add_argument("--batch-n", type=int, help="messages per 100-per-transaction measurement (default 10000)")
    parser.add_argument("--e2e-n", type=int, help="messages per end-to-end run (default 2000)")
    parser.add_argument("--depth-samples", type=int, help="timed RECEIVEs per depth (default 2000)")
    parser.add_argument("--latency-samples", type=int, help="wake-ups per latency figure (default 100)")
    parser.add_argument("--between-n", type=int,
                        help="messages per delivery between databases or instances (default 10000)")
    parser.add_argument("--between-samples", type=int,
                        help="commit-to-RECEIVE samples per setup between databases or instances (default 300)")
    parser.add_argument("--postgres-url", default="postgresql+psycopg://root@127.0.0.1:5432/test",
                        help="a database on the server of the postgresql section (its databases are made beside it)")
    parser.add_argument("--json", metavar="PATH", help="write every figure and sample as JSON")
    parser.add_argument("--markdown", metavar="PATH", help="write the tables as markdown ('-' for stdout)")
    parser.add_argument("--from-json", metavar="PATH", help="do not measure: render a saved --json file")
    args = parser.parse_args(argv)
    quick = args.quick
    args.runs = args.runs or (3 if quick else 5)
    args.single_n = args.single_n or (500 if quick else 2000)
    args.batch_n = args.batch_n or (2000 if quick else 10000)
    args.e2e_n = args.e2e_n or (1000 if quick else 2000)
    args.depth_samples = args.depth_samples or (1000 if quick else 2000)
    args.latency_samples = args.latency_samples or (30 if quick else 100)
    args.between_n = args.between_n or (2000 if quick else 10000)
    args.between_samples = args.between_samples or (100 if quick else 300)
    args.depths = [int(d) for d in (args.depths or ("1000,10000,100000" if quick else
                                                    "1000,10000,100000,1000000")).split(",")]
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(args.sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    if args.batch_n % throughput.BATCH:
        parser.error(f"--batch-n must be a multiple of {throughput.BATCH}")
    if args.between_n % throughput.BATCH:
        parser.error(f"--between-n must be a multiple of {throughput.BATCH}")
    return args


def filesystem(path: str) -> str:
    """The filesystem type ``path`` lives on, from /proc/mounts (tmpfs would make fsync free)."""
    best, kind = "", "unknown"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            fields = line.split()
            mount = fields[1]
            if (path == mount or path.startswith(mount.rstrip("/") + "/")) and len(mount) > len(best):
                best, kind = mount, f"{fields[2]} ({fields[0]} on {mount})"
    except OSError:
        pass
    return kind


def source_revision() -> str:
    """The checkout's commit (read-only git calls), marked when the tree has local changes."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head} + uncommitted changes" if dirty else head


def machine() -> dict[str, Any]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    with scratch_dir("where") as where:
        scratch = str(where.parent)
    return {
        "cpus (nproc)": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite (sqlite3.sqlite_version)": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "temp dir": f"{scratch}: {filesystem(scratch)}",
        "load average at start (1/5/15 min)": " / ".join(f"{v:.2f}" for v in os.getloadavg()),
        "servicebroker source": source_revision(),
        **{f"{name} version": version for name, version in versions.items()},
    }


def run_throughput(args: argparse.Namespace, results: dict[str, Any], log: Any) -> None:
    chosen = throughput.scenarios(args.single_n, args.batch_n)
    for system in sorted({s.system for s in chosen if not installed(s.system)}):
        log(f"{system} is not installed (pip install -e '.[bench]'): skipped")
    chosen = [s for s in chosen if installed(s.system)]
    summaries, durability = throughput.run_all(chosen, args.runs, progress=log)
    results["durability"] = {system: d.as_dict() for system, d in durability.items()}
    results["throughput"] = {
        s.key: {"system": s.system, "label": s.label, "n": s.n, **summaries[s.key].as_dict()} for s in chosen
    }


def run_e2e(args: argparse.Namespace, results: dict[str, Any], log: Any) -> None:
    out = []
    for top in (1, 100):
        runs = []
        for run in range(args.runs):
            result = e2e.run_once(args.e2e_n, top)
            runs.append(result)
            log(f"e2e TOP({top}) run {run + 1}/{args.runs}: {result.rate:,.0f} msg/s, "
                f"lost {result.lost}, duplicated {result.duplicated}, in order {result.in_order}")
        rates = [r.rate for r in runs]
        out.append({"messages": args.e2e_n, "consumer_top": top, "median": statistics.median(rates),
                    "min": min(rates), "max": max(rates), "all_ok": all(r.ok for r in runs),
                    "runs": [r.as_dict() for r in runs]})
    results["e2e"] = out


def run_depth(args: argparse.Namespace, results: dict[str, Any], log: Any) -> None:
    out = []
    for depth in args.depths:
        step = max(depth // 10, 1000)

        def progress(sent: int, depth: int = depth, step: int = step) -> None:
            if depth >= 100_000 and sent % step == 0 and sent < depth:
                log(f"depth {depth:,}: filled {sent:,}")

        with scratch_dir(f"depth{depth}") as directory:
            result = scenarios.receive_at_depth(directory, depth, samples=args.depth_samples, progress=progress)
        log(f"depth {depth:,}: filled at {result.fill_rate:,.0f} msg/s, RECEIVE {result.mean_us:,.0f} µs/msg")
        out.append(result.as_dict())
    results["depth"] = out


def run_latency(args: argparse.Namespace, results: dict[str, Any], log: Any) -> None:
    out = []
    for measure in (latency.in_process, latency.across_processes):
        result = measure(args.latency_samples)
        log(f"latency {result.where}: p50 {result.p50_ms:.2f} ms, p95 {result.p95_ms:.2f} ms")
        out.append(result.as_dict())
    results["latency"] = out


def run_between(args: argparse.Namespace, results: dict[str, Any], log: Any) -> None:
    results["between"] = between_databases.run(args.runs, args.between_n, between_databases.DIALOG_SHAPES,
                                               args.between_samples, log)


def run_between_instances(args: argparse.Namespace, results: dict[str, Any], log: Any) -> None:
    results["between_instances"] = between_databases.run(args.runs, args.between_n, between_databases.DIALOG_SHAPES,
                                                         args.between_samples, log, instances=True)


def run_postgresql(args: argparse.Namespace, results: dict[str, Any], log: Any) -> None:
    try:
        from bench import postgres  # needs psycopg: pip install -e '.[postgres]'

        postgres.reachable(args.postgres_url)
    except (ImportError, OSError) as exc:
        log(f"postgresql section skipped: {exc}")
        return
    settings = postgres.Settings(args.postgres_url, args.runs, args.single_n, postgres.GROUPS, postgres.PER_GROUP)
    results["postgresql"] = postgres.run(settings, log)


def print_postgresql(results: dict[str, Any], console: Console) -> None:
    from bench import postgres

    postgres.print_rich(results["postgresql"], console)


def markdown_postgresql(results: dict[str, Any]) -> str:
    from bench import postgres

    return "\n" + postgres.markdown(results["postgresql"])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console() if sys.stdout.isatty() else Console(width=150)
    status = Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=150)
    if args.from_json:
        results = json.loads(Path(args.from_json).read_text())
    else:
        started = time.perf_counter()
        results = {"machine": machine(), "settings": {
            "runs": args.runs, "body_bytes": BODY_SIZE, "single_n": args.single_n, "batch_n": args.batch_n,
            "e2e_n": args.e2e_n, "depths": args.depths, "depth_samples": args.depth_samples,
            "latency_samples": args.latency_samples, "between_n": args.between_n,
            "between_samples": args.between_samples, "sections": args.sections, "quick": args.quick}}
        steps = {"throughput": run_throughput, "e2e": run_e2e, "depth": run_depth, "latency": run_latency,
                 "between": run_between, "between-instances": run_between_instances,
                 "postgresql": run_postgresql}
        for section in args.sections:
            steps[section](args, results, status.log)
        results["elapsed_seconds"] = round(time.perf_counter() - started, 1)
        results["machine"]["load average at end (1/5/15 min)"] = " / ".join(f"{v:.2f}" for v in os.getloadavg())
        results["ratios"] = report.compute_ratios(results)
    report.print_rich(results, console)
    for key in BETWEEN_KEYS:
        if key in results:
            between_databases.print_rich(results[key], console)
    if "postgresql" in results:
        print_postgresql(results, console)
    if "elapsed_seconds" in results:
        console.print(f"total time {results['elapsed_seconds']:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    if args.markdown:
        text = report.markdown(results)
        for key in BETWEEN_KEYS:
            if key in results:
                text += "\n" + between_databases.markdown(results[key])
        if "postgresql" in results:
            text += markdown_postgresql(results)
        if args.markdown == "-":
            sys.stdout.write(text)
        else:
            Path(args.markdown).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Ratios, targets and tables (rich and markdown) from a results dictionary.

The dictionary is what ``run.py --json`` writes, so the tables can be regenerated from
a saved run with ``run.py --from-json results.json --markdown -``.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

Row = list[str]

SINGLE_PEERS = (("persist-queue", 1.0), ("huey", 1.0), ("litequeue", None), ("raw sqlite3", None),
                ("raw sqlite3, broker's writes", None))
LATENCY_TARGETS_MS = {"one process (thread)": 5.0, "across processes": 50.0}
DEPTH_TARGET = 1.5
TEXT_COLUMNS = {"operation", "setup", "figure", "target", "status", "setting", "exactly once, in order", "details"}


def _left(index: int, name: str) -> bool:
    return index == 0 or name in TEXT_COLUMNS


def _status(value: float, target: float | None, higher_is_better: bool) -> str:
    if target is None:
        return "-"
    ok = value >= target if higher_is_better else value <= target
    return "PASS" if ok else "MISS"


def compute_ratios(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Broker-to-peer ratios of median rates, depth and latency figures, each with its target."""
    out: list[dict[str, Any]] = []
    rates = {key: value["median"] for key, value in results.get("throughput", {}).items()}

    def ratio(what: str, mine: str, theirs: str, target: float | None) -> None:
        if mine in rates and theirs in rates:
            value = rates[mine] / rates[theirs]
            out.append({"what": what, "value": value, "unit": "x",
                        "target": None if target is None else f">= {target:.1f}x",
                        "status": _status(value, target, True)})

    for op, verb in (("send1", "single-message send"), ("receive1", "single-message receive")):
        for peer, target in SINGLE_PEERS:
            ratio(f"{verb}: servicebroker / {peer}", f"servicebroker/{op}", f"{peer}/{op}", target)
        ratio(f"{verb}: raw sqlite3, broker's writes / persist-queue", f"raw sqlite3, broker's writes/{op}",
              f"persist-queue/{op}", None)
    ratio("batched send (100/tx): servicebroker / raw sqlite3", "servicebroker/send100", "raw sqlite3/send100", 0.5)
    ratio("batched send (100/tx): servicebroker / raw sqlite3, broker's writes", "servicebroker/send100",
          "raw sqlite3, broker's writes/send100", None)
    ratio("batched send (100/tx): raw sqlite3, broker's writes / raw sqlite3", "raw sqlite3, broker's writes/send100",
          "raw sqlite3/send100", None)
    ratio("batched receive (100/tx): servicebroker / raw sqlite3", "servicebroker/receive100",
          "raw sqlite3/receive100", 0.5)
    ratio("batched receive (100/tx): servicebroker / raw sqlite3, broker's writes", "servicebroker/receive100",
          "raw sqlite3, broker's writes/receive100", None)

    depth = sorted(results.get("depth", []), key=lambda d: d["depth"])
    if len(depth) >= 2:
        low, high = depth[0], depth[-1]
        full = low["depth"] == 1000 and high["depth"] == 1_000_000
        value = high["mean_us"] / low["mean_us"]
        note = "" if full else " (target is set for 1M / 1k)"
        out.append({"what": f"RECEIVE mean µs/message at depth {high['depth']:,} / at {low['depth']:,}{note}",
                    "value": value, "unit": "x", "target": f"<= {DEPTH_TARGET}x",
                    "status": _status(value, DEPTH_TARGET, False) if full else "n/a"})
        out.append({"what": f"RECEIVE p50 µs at depth {high['depth']:,} / at {low['depth']:,} (for reference)",
                    "value": high["p50_us"] / low["p50_us"], "unit": "x", "target": None, "status": "-"})
    for item in results.get("latency", []):
        target = LATENCY_TARGETS_MS.get(item["where"])
        out.append({"what": f"WAITFOR wake-up p50, {item['where']}", "value": item["p50_ms"], "unit": "ms",
                    "target": None if target is None else f"<= {target:g} ms",
                    "status": _status(item["p50_ms"], target, False)})
    return out


def _per_transaction(e2e: dict[str, Any]) -> float:
    """Median over runs of messages per consumer transaction (the last, empty one included)."""
    values = sorted(float(r["messages"]) / max(1, int(r["consumer_transactions"])) for r in e2e["runs"])
    return values[len(values) // 2]


def tables(results: dict[str, Any]) -> list[tuple[str, Row, list[Row]]]:
    """(title, header, rows) for every section present in ``results``."""
    out: list[tuple[str, Row, list[Row]]] = []
    machine = results.get("machine", {})
    if machine:
        out.append(("Machine", ["item", "details"], [[k, str(v)] for k, v in machine.items()]))
    if results.get("durability"):
        out.append(("Durability (read back with PRAGMA on the working connection)", ["system", "setting"],
                    [[system, d["label"]] for system, d in results["durability"].items()]))
    if results.get("throughput"):
        rows = [[t["system"], t["label"], f"{t['n']:,}", f"{t['median']:,.0f}", f"{t['min']:,.0f}",
                 f"{t['max']:,.0f}"] for t in results["throughput"].values()]
        runs = results.get("settings", {}).get("runs", "?")
        out.append((f"Throughput, 1 KiB bodies (messages/s, {runs} runs)",
                    ["system", "operation", "messages", "median", "min", "max"], rows))
    if results.get("e2e"):
        rows = [[f"1 producer (1 SEND/tx) + 1 consumer (RECEIVE TOP({e['consumer_top']}) WAITFOR)",
                 f"{e['messages']:,}", f"{e['median']:,.0f}", f"{e['min']:,.0f}", f"{e['max']:,.0f}",
                 f"{_per_transaction(e):.1f}", "yes" if e["all_ok"] else "NO"] for e in results["e2e"]]
        out.append(("End to end, two processes (messages/s)",
                    ["setup", "messages", "median", "min", "max", "messages per consumer tx",
                     "exactly once, in order"], rows))
    if results.get("depth"):
        rows = [[f"{d['depth']:,}", str(d["dialogs"]), f"{d['samples']:,}", f"{d['mean_us']:,.0f}",
                 f"{d['p50_us']:,.0f}", f"{d['p95_us']:,.0f}", f"{d['fill_rate']:,.0f}"] for d in results["depth"]]
        out.append(("RECEIVE TOP(1) + commit by queue depth (µs/message)",
                    ["depth", "dialogs", "receives", "mean µs", "p50 µs", "p95 µs", "fill msg/s"], rows))
    if results.get("latency"):
        rows = [[item["where"], str(item["samples"]), f"{item['p50_ms']:.2f}", f"{item['p95_ms']:.2f}",
                 f"{item['mean_ms']:.2f}", f"{item['max_ms']:.2f}"] for item in results["latency"]]
        out.append(("WAITFOR wake-up latency (ms, commit to receipt)",
                    ["where", "samples", "p50", "p95", "mean", "max"], rows))
    ratios = compute_ratios(results)
    if ratios:
        rows = [[r["what"], f"{r['value']:.2f} {r['unit']}", r["target"] or "-", r["status"]] for r in ratios]
        out.append(("Ratios and the tracker's targets", ["figure", "value", "target", "status"], rows))
    return out


def print_rich(results: dict[str, Any], console: Console) -> None:
    for title, header, rows in tables(results):
        table = Table(title=title, title_justify="left")
        for i, name in enumerate(header):
            table.add_column(name, justify="left" if _left(i, name) else "right")
        for row in rows:
            style = "red" if row[-1] in ("MISS", "NO") else None
            table.add_row(*row, style=style)
        console.print(table)


def markdown(results: dict[str, Any]) -> str:
    parts: list[str] = []
    for title, header, rows in tables(results):
        parts.append(f"**{title}**\n")
        parts.append("| " + " | ".join(header) + " |")
        parts.append("|" + "|".join("---" if _left(i, name) else "---:" for i, name in enumerate(header)) + "|")
        parts.extend("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows)
        parts.append("")
    return "\n".join(parts)

"""Several processes on one database: exactly once, in order per conversation (each backend)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

WORKERS = str(Path(__file__).with_name("mp_workers.py"))


def _run(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, WORKERS, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen[str], timeout: float = 120) -> None:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err


def test_four_readers_one_producer_exactly_once_in_order(db_url: str, tmp_path: Path) -> None:
    """How the work spreads over the readers is not asserted: on SQLite one writer runs at
    a time and its busy handler is not fair, so one reader may well take every message."""
    url = db_url
    conversations, messages = 40, 10
    done = str(tmp_path / "producer.done")
    _finish(_run("setup", url))
    outs = [tmp_path / f"reader{i}.jsonl" for i in range(4)]
    readers = [_run("reader", url, str(out), done, str(i)) for i, out in enumerate(outs)]
    _finish(_run("producer", url, str(conversations), str(messages), done))
    for process in readers:
        _finish(process)

    received = [json.loads(line) for out in outs for line in out.read_text().splitlines()]
    bodies = [r["body"] for r in received]
    expected = {f"{c}:{s}" for c in range(conversations) for s in range(messages)}
    assert len(bodies) == len(expected), "a message was lost or delivered twice"
    assert set(bodies) == expected

    by_conversation: dict[str, list[dict]] = defaultdict(list)  # type: ignore[type-arg]
    for r in received:
        by_conversation[r["body"].split(":")[0]].append(r)
    for rows in by_conversation.values():
        rows.sort(key=lambda r: (r["at"], r["seq"]))
        assert [int(r["body"].split(":")[1]) for r in rows] == list(range(messages))
        assert [r["seq"] for r in rows] == list(range(messages))

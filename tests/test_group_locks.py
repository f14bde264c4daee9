"""The conversation group lock across processes: 8 readers, 2 producers (each backend).

Every committed message comes out exactly once and in order per conversation, no two
transactions ever hold one group at once (each reader records its holds, and an O_EXCL
file per group catches an overlap as it happens), and no deadlock or other error
reaches a worker. On SQLite the database write lock serializes everything, so the proof
matters for PostgreSQL, where readers really work on different groups at once.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from mp_workers import INITIATOR_QUEUE, QUEUE

import broker

WORKERS = str(Path(__file__).with_name("group_lock_workers.py"))
READERS, PRODUCERS = 8, 2


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, WORKERS, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen[str]) -> None:
    _out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err


def _run_proof(url: str, tmp_path: Path, conversations: int, messages: int) -> list[dict[str, Any]]:
    holds = tmp_path / "holds"
    holds.mkdir()
    _finish(_start("setup", url))
    done = [str(tmp_path / f"producer{p}.done") for p in range(PRODUCERS)]
    outs = [tmp_path / f"reader{r}.jsonl" for r in range(READERS)]
    share = conversations // PRODUCERS
    workers = [_start("reader", url, str(out), str(holds), str(r), *done) for r, out in enumerate(outs)]
    try:
        workers += [_start("producer", url, str(p * share), str(share), str(messages), done[p])
                    for p in range(PRODUCERS)]
        for process in workers:
            _finish(process)
    finally:
        for process in workers:  # after a failure: stop the others and close their pipes
            if process.returncode is None:
                process.kill()
                process.communicate()
    return [json.loads(line) for out in outs for line in out.read_text().splitlines()]


def _check(records: list[dict[str, Any]], url: str, conversations: int, messages: int) -> None:
    assert all(len(r["groups"]) == 1 for r in records), "a RECEIVE returned several groups"
    assert all(r["exclusive"] for r in records), "two transactions held one group at once"

    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_group[r["groups"][0]].append(r)
    for holds in by_group.values():
        holds.sort(key=lambda r: r["start"])
        for earlier, later in itertools.pairwise(holds):
            assert earlier["end"] < later["start"], "two holds of one group overlap"

    committed = [r for r in records if r["committed"]]
    bodies = [b for r in committed for b in r["bodies"]]
    assert len(bodies) == len(set(bodies)), "a message was delivered twice"
    assert set(bodies) == {f"{c}:{s}" for c in range(conversations) for s in range(messages)}, \
        "a message was lost"
    for holds in by_group.values():  # one group per conversation here
        in_order = [int(b.split(":")[1]) for r in holds if r["committed"] for b in r["bodies"]]
        assert in_order == list(range(messages))

    db = broker.connect(url)
    try:
        assert db.queue_counts(QUEUE) == {}, "messages left behind"
        replies = [row.message_body for row in db.iter_queue_rows(INITIATOR_QUEUE)]
    finally:
        db.dispose()
    assert sorted(replies) == sorted(f"ack:{r['bodies'][-1]}".encode() for r in committed)


def test_readers_hold_groups_exclusively_exactly_once_in_order(db_url: str, tmp_path: Path) -> None:
    conversations, messages = 40, 10
    records = _run_proof(db_url, tmp_path, conversations, messages)
    _check(records, db_url, conversations, messages)


@pytest.mark.slow
def test_the_full_proof_200_conversations_of_50_messages(db_url: str, tmp_path: Path) -> None:
    conversations, messages = 200, 50
    records = _run_proof(db_url, tmp_path, conversations, messages)
    _check(records, db_url, conversations, messages)
    if db_url.startswith("postgresql"):
        assert len({r["pid"] for r in records}) > 1, "the readers did not share the work"

"""Several processes on one database: exactly once, in order per conversation (each backend)."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import broker

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


def _send_from_child(db: broker.Broker, body: bytes, results: Any) -> None:
    """In a forked child, on the Broker it inherited: "sent", or the error number."""
    try:
        with db.transaction() as tx:
            tx.send(tx.begin_dialog("//forked", "//forked"), body=body)
        results.put(("sent", ""))
    except broker.BrokerError as error:
        results.put((error.number, error.message))


def _fork_sending(db: broker.Broker, body: bytes) -> tuple[object, str]:
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_send_from_child, args=(db, body, results))
    child.start()
    try:
        return results.get(timeout=120)  # type: ignore[no-any-return]
    finally:
        child.join(timeout=120)


def test_a_forked_child_opens_connections_of_its_own(db_url: str) -> None:
    """A child forked while a thread of its parent writes: it never uses the parent's
    connections or write turn. On PostgreSQL it sends once the parent commits; on SQLite,
    whose locks a fork copies, it is refused at once (1222, saying why) instead of waiting
    for a lock only the parent could give back. Forked while the parent is idle, it sends."""
    db = broker.connect(db_url)
    try:
        db.create_queue("Forked")
        db.create_service("//forked", "Forked", ["DEFAULT"])
        writing, release = threading.Event(), threading.Event()

        def parent_writes() -> None:
            with db.transaction() as tx:
                tx.send(tx.begin_dialog("//forked", "//forked"), body=b"parent")
                writing.set()
                release.wait(60)

        writer = threading.Thread(target=parent_writes)
        writer.start()
        writing.wait(60)
        context = multiprocessing.get_context("fork")
        results = context.Queue()
        child = context.Process(target=_send_from_child, args=(db, b"child while writing", results))
        child.start()
        release.set()
        writer.join()
        outcome, message = results.get(timeout=120)
        child.join(timeout=120)
        if db_url.startswith("sqlite"):
            assert outcome == 1222 and "forked while its parent was writing" in message
        else:
            assert outcome == "sent", message
        assert _fork_sending(db, b"child while idle") == ("sent", "")
        bodies = {m.message_body for m in db.queue_rows("Forked")}
        assert {b"parent", b"child while idle"} <= bodies
        assert (b"child while writing" in bodies) == (outcome == "sent")
    finally:
        db.dispose()

"""``Broker.dispose`` while other threads of the process work on the database: it closes
only connections no thread is using (an instance's runtime disposes of a database removed
from the instance while its threads still run). Run in a subprocess, so that a crash
fails the test instead of ending the run."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from support import CONTRACT, INITIATOR_SERVICE, REQUEST, TARGET_QUEUE, TARGET_SERVICE, wait_until

import broker

WORKER = str(Path(__file__).with_name("dispose_workers.py"))


def test_disposing_while_threads_send_and_receive_loses_nothing_and_breaks_no_one(db_url: str) -> None:
    done = subprocess.run([sys.executable, WORKER, db_url, "3000"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["errors"] == []
    assert result["sent"] > 0
    assert result["sent"] == result["received"] + result["left"]


def test_a_wait_under_way_still_wakes_on_a_commit_after_dispose(tutorial: broker.Broker, db_url: str) -> None:
    """PostgreSQL: dispose() closed the listener, and a RECEIVE WAITFOR already waiting in
    another thread heard of no commit again (with no timeout it waited for good)."""
    with tutorial.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)
    received: list[list[broker.Message]] = []

    def wait_for_a_message() -> None:
        with tutorial.transaction() as tx:
            received.append(tx.receive(TARGET_QUEUE, timeout=-1))

    waiter = threading.Thread(target=wait_for_a_message, daemon=True)
    waiter.start()
    condition = tutorial._state.notifier._condition  # noqa: SLF001 - the waiter is in its wait
    wait_until(lambda: len(condition._waiters) > 0)  # type: ignore[attr-defined]  # noqa: SLF001
    tutorial.dispose()
    sender = ("import sys, uuid, broker\n"
              "db = broker.connect(sys.argv[1])\n"
              "with db.transaction() as tx:\n"
              f"    tx.send(uuid.UUID(sys.argv[2]), {REQUEST!r}, b'<wake/>')\n")
    subprocess.run([sys.executable, "-c", sender, db_url, str(handle)], check=True, timeout=120)
    waiter.join(30)
    assert not waiter.is_alive(), "the waiter did not wake on the commit"
    assert [m.message_body for m in received[0]] == [b"<wake/>"]

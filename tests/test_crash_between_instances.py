"""Crash safety between instances: kill -9 the receiving instance while it takes messages.

10,000 messages of 1 KiB on 100 dialogs go from the initiator's instance (its runtime in
this process) to the target's, whose runtime is ``broker --instance URL run`` in a
process of its own, killed with SIGKILL ``ROUNDS`` times at a random moment after it
has taken some messages or at a random moment of its life, and started again; only kills
that fall while messages are still on their way count. A kill lands while the target
starts, while it applies a batch (its transaction rolls back), after it committed one but
before its receipts left (the resend is a duplicate), or between batches. At the end every message must be in the
target's queue exactly once and in order per dialog, no transmission queue may hold
anything, and every SQLite file must pass ``PRAGMA integrity_check``.

    pytest -m slow tests/test_crash_between_instances.py

``CRASH_SEED`` fixes the random kill points (timing still varies).
"""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest
from support import wait_until
from two_instances import Pair, assert_exactly_once_in_order, send_many, trust_each_other, two_instances

from broker.storage.queue_tables import INTERNAL_PREFIX

ROUNDS = 20
DIALOGS, PER_DIALOG = 100, 100
PROGRESS_DEADLINE_S = 240.0  # the sender's back-off grows to 64 s between attempts
BROKER = Path(sys.executable).with_name("broker")


def queued(path: Path) -> int:
    """Messages in the target's queue, read without a lock."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        names = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE ?",
                                                 (f"{INTERNAL_PREFIX}%",))]
        return sum(int(conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]) for name in names)


def start_target(pair: Pair) -> subprocess.Popen[bytes]:
    url = pair.target.inst.msdb.engine.url.render_as_string(hide_password=False)
    return subprocess.Popen([str(BROKER), "--instance", url, "run"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


@pytest.mark.slow
def test_kill_9_the_receiving_instance_while_it_takes_messages(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("CRASH_SEED", "5")))
    pair = two_instances(tmp_path, f"sqlite:///{tmp_path / 'target.db'}")
    target_file = tmp_path / "target.db"
    total = DIALOGS * PER_DIALOG
    try:
        trust_each_other(pair)
        with pair.initiator.inst.runtime():
            send_many(pair, DIALOGS, PER_DIALOG)
            kills = 0  # kills that fell while messages were still on their way
            while kills < ROUNDS:
                if not pair.initiator.held():
                    pytest.fail(f"every message arrived after {kills} kills: the test needs more messages")
                before = queued(target_file)
                process = start_target(pair)
                try:
                    if kills % 4 == 3:  # a moment after it took a batch: maybe before its receipts left
                        wait_until(lambda: queued(target_file) > before or not pair.initiator.held(),  # noqa: B023
                                   PROGRESS_DEADLINE_S, interval=0.005)
                        time.sleep(rng.uniform(0.0, 0.05))
                    else:  # a random moment of its life: starting, applying a batch, or idle
                        time.sleep(rng.uniform(0.05, 1.5))
                finally:
                    process.kill()
                    process.wait()
                kills += bool(pair.initiator.held())
            process = start_target(pair)
            try:
                wait_until(lambda: not pair.initiator.held() and queued(target_file) == total,
                           PROGRESS_DEADLINE_S * 2, interval=0.05)
            finally:
                process.terminate()
                process.wait(60)
        assert_exactly_once_in_order(pair, DIALOGS, PER_DIALOG)
        for path in tmp_path.glob("*.db"):
            with closing(sqlite3.connect(path)) as conn:
                assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok", path
    finally:
        pair.initiator.inst.dispose()
        pair.target.inst.dispose()

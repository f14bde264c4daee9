"""Worker processes for the write-lock proof (run as scripts, not collected).

hold URL READY_FILE
    Begins a broker transaction that writes a row to ``log`` ('held'), creates
    READY_FILE, and keeps the transaction open until killed.
append URL WORD
    Appends WORD to ``log`` in a transaction of its own (waiting for the write lock).
flush LOCK_FILE READY_FILE
    Takes the record lock of a process leading a flush (``durable_commits``), creates
    READY_FILE, and keeps it until killed.
open LOCK_FILE READY_FILE
    Has the lock file open, as a process that uses the database does, creates
    READY_FILE, and waits until killed.
"""

from __future__ import annotations

import fcntl
import os
import sys
import threading
from pathlib import Path

import broker
from broker.storage import durable_commits


def hold(url: str, ready_file: str) -> None:
    db = broker.connect(url, upgrade=False)  # its first transaction is the one measured
    with db.transaction() as tx:
        tx.query("INSERT INTO log (word) VALUES ('held')")
        Path(ready_file).touch()
        threading.Event().wait()  # until SIGKILL


def append(url: str, word: str) -> None:
    db = broker.connect(url, upgrade=False)  # its first transaction is the one measured
    with db.transaction() as tx:
        tx.query("INSERT INTO log (word) VALUES (:word)", word=word)
    db.dispose()


def flush(lock_file: str, ready_file: str) -> None:
    fd = os.open(lock_file, os.O_RDWR)
    counts = durable_commits.Counts(fd)  # kept: closing its mapping would drop the record locks
    fcntl.lockf(fd, fcntl.LOCK_EX, 1, durable_commits.SYNC)
    Path(ready_file).touch()
    threading.Event().wait()  # until SIGKILL
    counts.close()


def open_(lock_file: str, ready_file: str) -> None:
    fd = os.open(lock_file, os.O_RDWR)
    counts = durable_commits.Counts(fd)  # kept: closing its mapping would drop the record locks
    Path(ready_file).touch()
    threading.Event().wait()  # until SIGKILL
    counts.close()


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"hold": hold, "append": append, "flush": flush, "open": open_}[command](*args)

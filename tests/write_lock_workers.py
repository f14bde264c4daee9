"""Worker processes for the write-lock proof (run as scripts, not collected).

hold URL READY_FILE
    Begins a broker transaction that writes a row to ``log`` ('held'), creates
    READY_FILE, and keeps the transaction open until killed.
append URL WORD
    Appends WORD to ``log`` in a transaction of its own (waiting for the write lock).
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import broker


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


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"hold": hold, "append": append}[command](*args)

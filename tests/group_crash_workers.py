"""Worker process for the group-commit crash proof (run as a script, not collected).

send URL RETURNED_FILE THREADS
    THREADS threads, each on a dialog of its own, SEND "<handle>:<n>" for n = 0, 1, ...
    one message per transaction, so that their transactions share commits. After each
    ``commit()`` returns, the thread appends the body and a newline to RETURNED_FILE
    (one ``write`` on an O_APPEND descriptor: whole lines). Runs until killed.
"""

from __future__ import annotations

import os
import sys
import threading

import broker


def send(url: str, returned_file: str, threads: int) -> None:
    db = broker.connect(url, upgrade=False)
    out = os.open(returned_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def sender() -> None:
        with db.transaction() as tx:
            handle = tx.begin_dialog("//Initiator", "//Target")
        number = 0
        while True:
            body = f"{handle}:{number}"
            with db.transaction() as tx:
                tx.send(handle, body=body.encode())
            os.write(out, (body + "\n").encode())
            number += 1

    for _ in range(threads):
        threading.Thread(target=sender, daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    command, url, returned_file, threads = sys.argv[1:]
    assert command == "send"
    send(url, returned_file, int(threads))

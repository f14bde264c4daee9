"""A process whose threads send and receive on one database while its main thread
disposes of the database's connections again and again (run as a script, not collected).

URL DISPOSALS
    Prints one JSON line: the errors the threads met, how many messages they sent and
    received, and how many the queue holds at the end. A crash (a connection closed
    under a thread using it) ends the process with a signal instead.
"""

from __future__ import annotations

import json
import sys
import threading

import broker

THREADS = 4


def main(url: str, disposals: int) -> None:
    db = broker.connect(url)
    db.create_queue("Q")
    db.create_service("S", "Q")
    stop = threading.Event()
    errors: list[str] = []
    sent: list[int] = []
    received: list[int] = []

    def work() -> None:
        mine_sent = mine_received = 0
        try:
            while not stop.is_set():
                db.queue_rows("Q")  # a snapshot read on a kept connection
                with db.transaction() as tx:
                    tx.send(tx.begin_dialog("S", "S"), body=b"x")
                mine_sent += 1
                with db.transaction() as tx:
                    mine_received += len(tx.receive("Q", top=1))
        except Exception as error:  # noqa: BLE001 - reported to the test
            errors.append(repr(error))
        sent.append(mine_sent)
        received.append(mine_received)

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for _ in range(disposals):
        db.dispose()
    stop.set()
    for thread in threads:
        thread.join()
    left = len(db.queue_rows("Q"))
    db.dispose()
    print(json.dumps({"errors": errors, "sent": sum(sent), "received": sum(received), "left": left}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))

"""Worker processes for the multi-process tests (run as scripts, not collected).

producer URL CONVERSATIONS MESSAGES DONE_FILE
    Begins CONVERSATIONS dialogs and sends MESSAGES messages on each, interleaved,
    one message per transaction; then creates DONE_FILE.
reader URL OUT_FILE DONE_FILE SEED
    Receives TOP(3) in a loop; rolls back about one transaction in ten on purpose;
    writes one JSON line per received message with a timestamp taken inside the
    transaction. A conversation's group lock is held from its RECEIVE to the commit, so
    these timestamps order each conversation's receives on every backend.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

import broker

QUEUE = "TargetQueue"
INITIATOR_QUEUE = "InitiatorQueue"
TARGET = "//mp/Target"
INITIATOR = "//mp/Initiator"


class RolledBackOnPurpose(Exception):
    pass


def setup(url: str, *, poison_message_handling: bool = True) -> None:
    db = broker.connect(url)
    db.create_queue(QUEUE, poison_message_handling=poison_message_handling)
    db.create_queue(INITIATOR_QUEUE)
    db.create_service(TARGET, QUEUE, ["DEFAULT"])
    db.create_service(INITIATOR, INITIATOR_QUEUE)
    db.dispose()


def producer(url: str, conversations: int, messages: int, done_file: str, first: int = 0) -> None:
    """Bodies are "<conversation number>:<sequence>", conversations numbered from ``first``."""
    db = broker.connect(url)
    with db.transaction() as tx:
        handles = [tx.begin_dialog(INITIATOR, TARGET) for _ in range(conversations)]
    for seq in range(messages):
        for number, handle in enumerate(handles, start=first):
            with db.transaction() as tx:
                tx.send(handle, body=f"{number}:{seq}")
    open(done_file, "w").close()
    db.dispose()


def reader(url: str, out_file: str, done_file: str, seed: int) -> None:
    rng = random.Random(seed)
    db = broker.connect(url)
    with open(out_file, "w") as out:
        while True:
            finished = os.path.exists(done_file)  # read before receiving: no race at the end
            try:
                with db.transaction() as tx:
                    got = tx.receive(QUEUE, 3, timeout=0.5)
                    stamp = time.time_ns()
                    if got and rng.random() < 0.1:
                        raise RolledBackOnPurpose
            except RolledBackOnPurpose:
                continue
            for m in got:
                out.write(json.dumps({"group": str(m.conversation_group_id), "body": m.message_body.decode(),
                                      "seq": m.message_sequence_number, "at": stamp, "pid": os.getpid()}) + "\n")
            out.flush()
            if not got and finished:
                break
    db.dispose()


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    if role == "setup":
        setup(args[0])
    elif role == "producer":
        producer(args[0], int(args[1]), int(args[2]), args[3])
    elif role == "reader":
        reader(args[0], args[1], args[2], int(args[3]))
    else:
        raise SystemExit(f"unknown role {role}")

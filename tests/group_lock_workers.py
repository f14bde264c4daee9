"""Worker processes for the group-lock proof (run as scripts, not collected).

setup URL
    ``mp_workers.setup`` with poison-message handling OFF: the readers roll back on purpose.
producer URL FIRST COUNT MESSAGES DONE_FILE
    ``mp_workers.producer``: COUNT dialogs, numbered from FIRST, MESSAGES messages on
    each, interleaved, one per transaction; then creates DONE_FILE.
reader URL OUT_FILE HOLDS_DIR SEED DONE_FILE...
    Receives TOP(10) with WAITFOR in a loop until every DONE_FILE exists and the queue
    is empty. Between RECEIVE and commit it "holds" the group: it creates
    HOLDS_DIR/<group> with O_EXCL (failing means another transaction holds the group
    too), SENDs a reply on the conversation, and removes the file just before
    committing. About one transaction in twenty is
    rolled back on purpose. Writes one JSON line per transaction: the group, the bodies,
    whether it committed, and the hold's start and end on the system-wide monotonic
    clock (a sub-interval of the real lock, which is taken before RECEIVE returns and
    released after the commit).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

import mp_workers
from mp_workers import QUEUE, RolledBackOnPurpose

import broker


def reader(url: str, out_file: str, holds_dir: str, seed: int, done_files: list[str]) -> None:
    rng = random.Random(seed)
    db = broker.connect(url)
    with open(out_file, "w") as out:
        while True:
            finished = all(os.path.exists(f) for f in done_files)  # read before receiving
            record: dict[str, object] = {}
            try:
                with db.transaction() as tx:
                    got = tx.receive(QUEUE, 10, timeout=0.5)
                    if got:
                        record = _hold(tx, got, holds_dir)
                        if rng.random() < 0.05:
                            record["committed"] = False
                            raise RolledBackOnPurpose
            except RolledBackOnPurpose:
                pass
            if record:
                out.write(json.dumps(record) + "\n")
            if not got and finished:
                break
    db.dispose()


def _hold(tx: broker.Transaction, got: list[broker.Message], holds_dir: str) -> dict[str, object]:
    """Mark the group held while replying on its conversation; the caller commits next."""
    groups = sorted({str(m.conversation_group_id) for m in got})
    record: dict[str, object] = {"groups": groups, "pid": os.getpid(), "committed": True,
                                 "bodies": [m.message_body.decode() for m in got],
                                 "start": time.monotonic_ns()}
    marker = os.path.join(holds_dir, groups[0])
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        record["exclusive"] = False
    else:
        record["exclusive"] = True
    # Work done under the group lock, racing the producers' SENDs on the same dialogs.
    tx.send(got[-1].conversation_handle, body="ack:" + got[-1].message_body.decode())
    if record["exclusive"]:
        os.remove(marker)
    record["end"] = time.monotonic_ns()
    return record


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    if role == "setup":
        mp_workers.setup(args[0], poison_message_handling=False)
    elif role == "producer":
        mp_workers.producer(args[0], int(args[2]), int(args[3]), args[4], first=int(args[1]))
    elif role == "reader":
        reader(args[0], args[1], args[2], int(args[3]), args[4:])
    else:
        raise SystemExit(f"unknown role {role}")

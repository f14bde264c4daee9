"""The activation procedure of ``test_runtime_session_loss`` (``session_loss_procs:hold``).

It runs in ``broker run`` children: for each message it receives it writes a ``start``
line to the file named by ``SESSION_LOSS_LOG``, holds until the file named by
``SESSION_LOSS_RELEASE`` exists (or ``HOLD_LIMIT_S`` passes), then writes ``end``. The
lines tell the test how many readers ran at once, across processes.
"""

from __future__ import annotations

import os
import time

import broker

QUEUE = "SessionLossQueue"
RECEIVE_TIMEOUT = 0.5
HOLD_LIMIT_S = 120.0


def _line(event: str) -> None:
    with open(os.environ["SESSION_LOSS_LOG"], "a") as log:
        log.write(f"{os.getpid()} {time.time():.3f} {event}\n")


def hold(db: broker.Broker) -> None:
    release = os.environ["SESSION_LOSS_RELEASE"]
    while True:
        with db.transaction() as tx:
            messages = tx.receive(QUEUE, 1, timeout=RECEIVE_TIMEOUT)
        if not messages:
            return
        _line("start")
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.05)
        _line("end")

"""Activation procedures named by the tests' ACTIVATION clauses (``activation_procs:target_proc``).

They loop like the tutorial's TargetActivProc: one transaction per message, a short
WAITFOR, and return when nothing arrives. The module-level state lets a test hold a
procedure before it receives (``gate``) and see how many instances ran at once
(``concurrency``); ``reset()`` restores it between tests.
"""

from __future__ import annotations

import threading
import time

from support import REPLY, REQUEST, TARGET_QUEUE

import broker

# The procedures' WAITFOR: short, so that an idle reader ends quickly.
RECEIVE_TIMEOUT = 0.5
# Time spent on one message inside its transaction (the "work").
WORK_S = 0.03
# Longest a procedure waits for its gate.
GATE_TIMEOUT = 10.0
REPLY_BODY = b"<ReplyMsg>Message for Initiator service.</ReplyMsg>"

gate = threading.Event()
waiting_forever = threading.Event()  # set once forever_proc is in its RECEIVE ... WAITFOR


class Concurrency:
    """How many procedures run now, and the most that ever ran at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.messages = 0

    def __enter__(self) -> Concurrency:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
        return self

    def __exit__(self, *_exc: object) -> None:
        with self._lock:
            self.now -= 1

    def count_message(self) -> None:
        with self._lock:
            self.messages += 1


concurrency = Concurrency()


def reset() -> None:
    global concurrency
    concurrency = Concurrency()
    gate.set()
    waiting_forever.clear()


def target_proc(db: broker.Broker) -> None:
    """Spec 12.4's TargetActivProc: reply to requests, end the conversations the far side ended."""
    gate.wait(GATE_TIMEOUT)
    while True:
        with db.transaction() as tx:
            messages = tx.receive(TARGET_QUEUE, 1, timeout=RECEIVE_TIMEOUT)
            if not messages:
                return
            message = messages[0]
            if message.message_type_name == REQUEST:
                tx.send(message.conversation_handle, REPLY, REPLY_BODY)
            elif message.message_type_name in (broker.END_DIALOG, broker.ERROR):
                tx.end_conversation(message.conversation_handle)


def counting_proc(db: broker.Broker) -> None:
    """Receive one message per transaction, then work on it for WORK_S; count instances running at once.

    The work happens after the commit: inside the transaction it would hold SQLite's
    write lock, and the readers (and the runtime) could only take turns.
    """
    with concurrency:
        while True:
            with db.transaction() as tx:
                if not tx.receive(TARGET_QUEUE, 1, timeout=RECEIVE_TIMEOUT):
                    return
            concurrency.count_message()
            time.sleep(WORK_S)


def holding_proc(db: broker.Broker) -> None:
    """Receive one message, then hold (outside any transaction) until the gate opens."""
    with concurrency:
        with db.transaction() as tx:
            received = tx.receive(TARGET_QUEUE, 1)
        if received:
            concurrency.count_message()
            gate.wait(GATE_TIMEOUT)


def failing_proc(db: broker.Broker) -> None:
    """Receive in a transaction that then fails: the message goes back to the queue."""
    with db.transaction() as tx:
        tx.receive(TARGET_QUEUE, 1)
        raise RuntimeError("the activation procedure failed")


not_a_procedure = 42



def forever_proc(db: broker.Broker) -> None:
    """The usual service program: RECEIVE with WAITFOR and no timeout (-1), until one comes back empty."""
    while True:
        with db.transaction() as tx:
            waiting_forever.set()
            if not tx.receive(TARGET_QUEUE, 1, timeout=-1):
                return

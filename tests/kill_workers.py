"""Worker processes for the kill -9 soak on one SQLite file (run as scripts, not collected).

producer URL STATE_FILE SLOT PRODUCER ATTEMPTS_FILE
    Sends on the dialogs of producer number PRODUCER (rows of ``kill_dialogs``, begun by
    the test), 1 to ``MOST_PER_SEND`` messages per transaction, each on one of its
    dialogs at random. The transaction that SENDs also inserts one ``kill_sent`` row per
    message: what is in ``kill_sent`` is what committed. Started again after a kill, it
    goes on from the counters ``kill_sent`` holds. Every body it tries to send is first
    appended to ATTEMPTS_FILE, so that the test knows the messages that never committed
    (killed or rolled back on purpose).
consumer URL STATE_FILE SLOT
    RECEIVEs from the one shared queue: TOP(1) or TOP(n), with or without WAITFOR,
    unfiltered, after GET CONVERSATION GROUP, or WHERE conversation_group_id = a group
    it received from before. The transaction that RECEIVEs also inserts one
    ``kill_received`` row per message, in the order RECEIVE returned them; the rows'
    ids (one writer at a time on SQLite) then give the order of delivery. A message
    received twice breaks ``kill_received``'s UNIQUE constraint: the worker ends with
    the traceback.

Both run until killed. Some of their transactions sleep between verbs (holding the
write lock) and some roll back on purpose, so that kills land inside transactions. The
worker's byte in STATE_FILE (memory-mapped, shared with the test) tells where it is:
``STARTING`` until its loop runs, then in a transaction's ``FIRST_VERB`` (which waits for
the write lock, or in WAITFOR), ``INSIDE`` the transaction once that verb has returned
(on SQLite it holds the write lock), ``COMMITTING`` while the commit runs, ``BETWEEN``
transactions. The test reads it after the kill.
"""

from __future__ import annotations

import mmap
import os
import random
import sys
import time
import uuid
from collections.abc import Sequence

from sqlalchemy import text

import broker

QUEUE = "KillTargetQueue"
INITIATOR_QUEUE = "KillInitiatorQueue"
TARGET = "//kill/Target"
INITIATOR = "//kill/Initiator"

# Where a worker is, one byte per worker slot in the state file.
STARTING, BETWEEN, FIRST_VERB, INSIDE, COMMITTING = 0, 1, 2, 3, 4
STATE_NAMES = {STARTING: "starting", BETWEEN: "between", FIRST_VERB: "first verb", INSIDE: "inside",
               COMMITTING: "committing"}

MOST_PER_SEND = 10
TOPS = (1, 1, 5, 20)
WAITS = (None, 0.05, 0.5)
PAUSE_CHANCE = 0.25          # a transaction that sleeps between its verbs
PAUSE_S = (0.0, 0.01)
ROLLBACK_CHANCE = 0.05       # a transaction rolled back on purpose
IDLE_S = (0.0, 0.01)         # a producer's rest between transactions
GROUPS_REMEMBERED = 32

APPLICATION_TABLES = (
    "CREATE TABLE kill_dialogs (dialog INTEGER PRIMARY KEY, producer INTEGER NOT NULL, handle TEXT NOT NULL)",
    "CREATE TABLE kill_sent (dialog INTEGER NOT NULL, counter INTEGER NOT NULL, body TEXT NOT NULL, "
    "PRIMARY KEY (dialog, counter))",
    "CREATE TABLE kill_received (id INTEGER PRIMARY KEY, dialog INTEGER NOT NULL, counter INTEGER NOT NULL, "
    "body TEXT NOT NULL, sequence INTEGER NOT NULL, receiver TEXT NOT NULL, UNIQUE (dialog, counter))",
)
_RECORD_SENT = text("INSERT INTO kill_sent (dialog, counter, body) VALUES (:dialog, :counter, :body)")
_RECORD_RECEIVED = text("INSERT INTO kill_received (dialog, counter, body, sequence, receiver) "
                        "VALUES (:dialog, :counter, :body, :sequence, :receiver)")


class RolledBackOnPurpose(Exception):
    pass


def setup(db: broker.Broker, producers: int, dialogs_each: int) -> None:
    """The queues, the services, the application tables and every producer's dialogs."""
    # Rollbacks on purpose must not disable the queue (five in a row would).
    db.create_queue(QUEUE, poison_message_handling=False)
    db.create_queue(INITIATOR_QUEUE)
    db.create_service(TARGET, QUEUE, ["DEFAULT"])
    db.create_service(INITIATOR, INITIATOR_QUEUE)
    with db.transaction() as tx:
        for statement in APPLICATION_TABLES:
            tx.query(statement)
        for dialog in range(producers * dialogs_each):
            tx.query("INSERT INTO kill_dialogs (dialog, producer, handle) VALUES (:dialog, :producer, :handle)",
                     dialog=dialog, producer=dialog // dialogs_each,
                     handle=str(tx.begin_dialog(INITIATOR, TARGET)))


def parse_body(body: bytes) -> tuple[int, int]:
    """The (dialog, counter) of a body ``"<dialog>:<counter>:<pid>:<attempt>"``."""
    dialog, counter, _ = body.split(b":", 2)
    return int(dialog), int(counter)


def record(tx: broker.Transaction, messages: Sequence[broker.Message], receiver: str) -> None:
    """Insert one ``kill_received`` row per message, in this order, in ``tx``."""
    rows = []
    for m in messages:
        assert m.message_type_name == "DEFAULT" and m.message_body is not None, m
        dialog, counter = parse_body(m.message_body)
        rows.append({"dialog": dialog, "counter": counter, "body": m.message_body.decode(),
                     "sequence": m.message_sequence_number, "receiver": receiver})
    if rows:
        tx.connection.execute(_RECORD_RECEIVED, rows)


class Position:
    """This worker's byte in the state file."""

    def __init__(self, path: str, slot: int) -> None:
        with open(path, "r+b") as file:
            self._map = mmap.mmap(file.fileno(), 0)
        self._slot = slot

    def set(self, state: int) -> None:
        self._map[self._slot] = state


def pause(rng: random.Random, pausing: bool) -> None:
    if pausing:
        time.sleep(rng.uniform(*PAUSE_S))


def producer(url: str, state_file: str, slot: int, number: int, attempts_file: str) -> None:
    """Send on producer ``number``'s dialogs until killed."""
    position = Position(state_file, slot)
    rng = random.Random()
    db = broker.connect(url)
    with db.transaction() as tx:
        handles = {row["dialog"]: uuid.UUID(row["handle"])
                   for row in tx.query("SELECT dialog, handle FROM kill_dialogs WHERE producer = :p", p=number)}
        dialogs = sorted(handles)
        counters = dict.fromkeys(dialogs, 0)
        counters.update({row["dialog"]: row["next"] for row in tx.query(
            "SELECT dialog, max(counter) + 1 AS next FROM kill_sent WHERE dialog IN "
            "(SELECT dialog FROM kill_dialogs WHERE producer = :p) GROUP BY dialog", p=number)})
    attempts = open(attempts_file, "a")
    pid, attempt = os.getpid(), 0
    position.set(BETWEEN)
    while True:
        attempt += 1
        planned = dict(counters)
        rows = []
        pausing = rng.random() < PAUSE_CHANCE
        for _ in range(rng.randint(1, MOST_PER_SEND)):
            dialog = rng.choice(dialogs)
            rows.append({"dialog": dialog, "counter": planned[dialog],
                         "body": f"{dialog}:{planned[dialog]}:{pid}:{attempt}"})
            planned[dialog] += 1
        attempts.write("".join(row["body"] + "\n" for row in rows))
        attempts.flush()  # in the page cache: a SIGKILL does not lose it
        position.set(FIRST_VERB)
        try:
            with db.transaction() as tx:
                for row in rows:
                    tx.send(handles[row["dialog"]], body=row["body"])
                    position.set(INSIDE)
                    pause(rng, pausing)
                tx.connection.execute(_RECORD_SENT, rows)
                pause(rng, pausing)
                if rng.random() < ROLLBACK_CHANCE:
                    raise RolledBackOnPurpose
                position.set(COMMITTING)
        except RolledBackOnPurpose:
            position.set(BETWEEN)
            continue
        position.set(BETWEEN)
        counters = planned
        time.sleep(rng.uniform(*IDLE_S))


def consumer(url: str, state_file: str, slot: int) -> None:
    """Receive from the shared queue until killed."""
    position = Position(state_file, slot)
    rng = random.Random()
    db = broker.connect(url)
    receiver = f"{slot}/{os.getpid()}"
    groups: list[uuid.UUID] = []
    position.set(BETWEEN)
    while True:
        top, wait, way = rng.choice(TOPS), rng.choice(WAITS), rng.random()
        pausing = rng.random() < PAUSE_CHANCE
        position.set(FIRST_VERB)
        try:
            with db.transaction() as tx:
                if way < 0.2:
                    group = tx.get_conversation_group(QUEUE, timeout=wait)
                    got = [] if group is None else tx.receive(QUEUE, top, conversation_group_id=group)
                elif way < 0.35 and groups:
                    got = tx.receive(QUEUE, top, conversation_group_id=rng.choice(groups), timeout=wait)
                else:
                    got = tx.receive(QUEUE, top, timeout=wait)
                position.set(INSIDE)
                pause(rng, pausing)
                record(tx, got, receiver)
                pause(rng, pausing)
                if got and rng.random() < ROLLBACK_CHANCE:
                    raise RolledBackOnPurpose
                position.set(COMMITTING)
        except RolledBackOnPurpose:
            position.set(BETWEEN)
            continue
        position.set(BETWEEN)
        for m in got:
            if m.conversation_group_id not in groups:
                groups.append(m.conversation_group_id)
        del groups[:-GROUPS_REMEMBERED]


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    if role == "producer":
        producer(args[0], args[1], int(args[2]), int(args[3]), args[4])
    elif role == "consumer":
        consumer(args[0], args[1], int(args[2]))
    else:
        raise SystemExit(f"unknown role {role}")

"""One adapter per queue under test, all with the same methods.

Every adapter opens a fresh SQLite file in the directory it is given, in WAL mode with
``synchronous=FULL`` (set explicitly on each connection that does the work and read
back by ``durability()``), and moves 1 KiB bodies one per transaction:

* ``put(body)``: one message in, one commit.
* ``take()``: one message out (the oldest), one commit; None when empty.
* ``put_many(bodies)`` / ``take_many(n)`` (only where the system has a batch form):
  many messages in one transaction.

The broker's adapter is ``bench.scenarios.BrokerPeer``.
"""

from __future__ import annotations

import importlib.util
import sqlite3
from pathlib import Path
from typing import Protocol, cast, runtime_checkable

from bench.common import Durability, force_full, read_durability

MODULES = {"persist-queue": "persistqueue", "huey": "huey", "litequeue": "litequeue"}


def installed(system: str) -> bool:
    """Whether a peer's package is importable (they come with the ``bench`` extra)."""
    module = MODULES.get(system)
    return module is None or importlib.util.find_spec(module) is not None


class QueuePeer(Protocol):
    """A queue measured one message per transaction."""

    name: str

    def put(self, data: bytes) -> None: ...
    def take(self) -> bytes | None: ...
    def durability(self) -> Durability: ...
    def close(self) -> None: ...


@runtime_checkable
class BatchPeer(QueuePeer, Protocol):
    """A queue that can also move many messages in one transaction."""

    def put_many(self, bodies: list[bytes]) -> None: ...
    def take_many(self, n: int) -> list[bytes]: ...


class PersistQueuePeer:
    """persist-queue ``SQLiteQueue(auto_commit=True)``: ``put`` / ``get(block=False)``.

    ``get`` is a SELECT followed by a DELETE that commits. Bodies are pickled (its
    default serializer). Its connection is WAL already; synchronous is forced to FULL.
    """

    name = "persist-queue"

    def __init__(self, directory: Path) -> None:
        from persistqueue import SQLiteQueue

        self._queue = SQLiteQueue(str(directory / "pq"), auto_commit=True, multithreading=False)
        # One connection both puts and gets (multithreading=False); set it on both anyway.
        self._connections = [cast(sqlite3.Connection, c) for c in (self._queue._getter, self._queue._putter)]
        for conn in self._connections:
            force_full(conn)

    def put(self, data: bytes) -> None:
        self._queue.put(data)

    def take(self) -> bytes | None:
        from persistqueue.exceptions import Empty

        try:
            item: bytes = self._queue.get(block=False)
        except Empty:
            return None
        return item

    def durability(self) -> Durability:
        return read_durability(self._connections[1])

    def close(self) -> None:
        self._queue.close()


class HueyPeer:
    """huey ``SqliteStorage(fsync=True)`` (WAL, synchronous=FULL): ``enqueue`` / ``dequeue``.

    ``dequeue`` is a lock-free existence check, then BEGIN EXCLUSIVE, SELECT, DELETE, COMMIT.
    """

    name = "huey"

    def __init__(self, directory: Path) -> None:
        from huey.storage import SqliteStorage  # type: ignore[import-untyped]

        self._storage = SqliteStorage(name="bench", filename=str(directory / "huey.db"),
                                      fsync=True, journal_mode="wal")
        force_full(self._storage.conn)  # fsync=True already asks for FULL; make sure

    def put(self, data: bytes) -> None:
        self._storage.enqueue(data)

    def take(self) -> bytes | None:
        data = self._storage.dequeue()
        return None if data is None else bytes(data)

    def durability(self) -> Durability:
        return read_durability(self._storage.conn)

    def close(self) -> None:
        self._storage.close()


class LiteQueuePeer:
    """litequeue ``LiteQueue``: ``put`` / ``pop`` + ``done``.

    litequeue sets ``synchronous=NORMAL`` itself; it is overridden to FULL after
    construction. ``pop`` only marks a message LOCKED (UPDATE ... RETURNING, one
    commit); ``done`` marks it DONE (a second commit), so a take is two transactions.
    Rows are never deleted. Bodies are TEXT (the 1 KiB ASCII body decoded).
    """

    name = "litequeue"

    def __init__(self, directory: Path) -> None:
        from litequeue import LiteQueue  # type: ignore[import-untyped]

        self._queue = LiteQueue(str(directory / "litequeue.db"))
        force_full(self._queue.conn)

    def put(self, data: bytes) -> None:
        self._queue.put(data.decode("ascii"))

    def take(self) -> bytes | None:
        message = self._queue.pop()
        if message is None:
            return None
        self._queue.done(message.message_id)
        return str(message.data).encode("ascii")

    def durability(self) -> Durability:
        return read_durability(self._queue.conn)

    def close(self) -> None:
        self._queue.conn.close()


class RawSqlitePeer:
    """Plain sqlite3, the physical limit: an AUTOINCREMENT table of blobs.

    ``put``: BEGIN IMMEDIATE, INSERT, COMMIT. ``put_many``: the same with executemany.
    ``take``: BEGIN IMMEDIATE, SELECT the oldest row, DELETE it, COMMIT. ``take_many(n)``:
    the oldest n rows and an executemany DELETE in one transaction.
    """

    name = "raw sqlite3"

    def __init__(self, directory: Path) -> None:
        self._conn = sqlite3.connect(str(directory / "raw.db"), isolation_level=None)
        force_full(self._conn)
        self._conn.execute("CREATE TABLE IF NOT EXISTS q (id INTEGER PRIMARY KEY AUTOINCREMENT, body BLOB NOT NULL)")

    def put(self, data: bytes) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO q (body) VALUES (?)", (data,))
        conn.execute("COMMIT")

    def put_many(self, bodies: list[bytes]) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO q (body) VALUES (?)", [(b,) for b in bodies])
        conn.execute("COMMIT")

    def take(self) -> bytes | None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute("SELECT id, body FROM q ORDER BY id LIMIT 1").fetchone()
        if row is not None:
            conn.execute("DELETE FROM q WHERE id = ?", (row[0],))
        conn.execute("COMMIT")
        return None if row is None else bytes(row[1])

    def take_many(self, n: int) -> list[bytes]:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute("SELECT id, body FROM q ORDER BY id LIMIT ?", (n,)).fetchall()
        conn.executemany("DELETE FROM q WHERE id = ?", [(row[0],) for row in rows])
        conn.execute("COMMIT")
        return [bytes(row[1]) for row in rows]

    def durability(self) -> Durability:
        return read_durability(self._conn)

    def close(self) -> None:
        self._conn.close()


class RawBrokerWritesPeer:
    """Plain sqlite3 doing only the writes Service Broker's semantics need per message.

    The floor for the broker, as ``RawSqlitePeer`` is the floor for a bare queue: the
    message row in a table laid out like a broker queue (AUTOINCREMENT queuing order,
    the receive-order and conversation indexes) plus the sequence numbers of the two
    conversation endpoints. ``put``: INSERT + two endpoint UPDATEs in one transaction.
    ``take``: the next ready row by priority and age, its DELETE, one transaction.
    ``put_many``: one ``executemany`` INSERT + the two UPDATEs. ``take_many(n)``: the
    next ready row's conversation, up to ``n`` of its rows in sequence order, one
    ``executemany`` DELETE.
    """

    name = "raw sqlite3, broker's writes"
    _HANDLE = "6f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f"
    _PEER = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    _GROUP = "9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b"
    # The queue table as the broker lays it out; ``bench/storage.py`` measures variants.
    AUTOINCREMENT = True
    INDEXES = {
        "q_ready": "status, priority DESC, queuing_order",
        "q_group": "grp, status, priority DESC, queuing_order",
        "q_conversation": "handle, status, seq",
    }

    def __init__(self, directory: Path) -> None:
        self._conn = sqlite3.connect(str(directory / "floor.db"), isolation_level=None)
        force_full(self._conn)
        key = "INTEGER PRIMARY KEY AUTOINCREMENT" if self.AUTOINCREMENT else "INTEGER PRIMARY KEY"
        self._conn.executescript(
            f"CREATE TABLE q (queuing_order {key}, status INT, priority INT, grp TEXT, handle TEXT, seq INT,"
            " body BLOB);"
            + "".join(f"CREATE INDEX {name} ON q ({columns});" for name, columns in self.INDEXES.items())
            + "CREATE TABLE e (handle TEXT PRIMARY KEY, send_sequence INT, receive_sequence INT);"
        )
        self._conn.executemany("INSERT INTO e VALUES (?, 0, 0)", [(self._HANDLE,), (self._PEER,)])
        self._seq = 0

    def put(self, data: bytes) -> None:
        conn = self._conn
        self._seq += 1
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO q (status, priority, grp, handle, seq, body) VALUES (1, 5, ?, ?, ?, ?)",
                     (self._GROUP, self._PEER, self._seq, data))
        conn.execute("UPDATE e SET send_sequence = ? WHERE handle = ?", (self._seq, self._HANDLE))
        conn.execute("UPDATE e SET receive_sequence = ? WHERE handle = ?", (self._seq, self._PEER))
        conn.execute("COMMIT")

    def take(self) -> bytes | None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute("SELECT queuing_order, body FROM q WHERE status = 1"
                           " ORDER BY priority DESC, queuing_order LIMIT 1").fetchone()
        if row is not None:
            conn.execute("DELETE FROM q WHERE queuing_order = ?", (row[0],))
        conn.execute("COMMIT")
        return None if row is None else bytes(row[1])

    def put_many(self, bodies: list[bytes]) -> None:
        conn = self._conn
        first = self._seq + 1
        self._seq += len(bodies)
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO q (status, priority, grp, handle, seq, body) VALUES (1, 5, ?, ?, ?, ?)",
                         [(self._GROUP, self._PEER, first + i, data) for i, data in enumerate(bodies)])
        conn.execute("UPDATE e SET send_sequence = ? WHERE handle = ?", (self._seq, self._HANDLE))
        conn.execute("UPDATE e SET receive_sequence = ? WHERE handle = ?", (self._seq, self._PEER))
        conn.execute("COMMIT")

    def take_many(self, n: int) -> list[bytes]:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        first = conn.execute("SELECT handle FROM q WHERE status = 1"
                             " ORDER BY priority DESC, queuing_order LIMIT 1").fetchone()
        rows = [] if first is None else conn.execute(
            "SELECT queuing_order, body FROM q WHERE handle = ? AND status = 1 ORDER BY seq LIMIT ?",
            (first[0], n)).fetchall()
        conn.executemany("DELETE FROM q WHERE queuing_order = ?", [(row[0],) for row in rows])
        conn.execute("COMMIT")
        return [bytes(row[1]) for row in rows]

    def durability(self) -> Durability:
        return read_durability(self._conn)

    def close(self) -> None:
        self._conn.close()

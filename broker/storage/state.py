"""State shared by every transaction on one database in this process."""

from __future__ import annotations

import os
import threading
import weakref

from sqlalchemy import Engine
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from broker.events import EventHub
from broker.storage import pending
from broker.storage.backends import backend_for
from broker.storage.catalog import Catalog, catalog_version, load_catalog
from broker.storage.group_commit import WriteGroup
from broker.storage.waiting import QueueNotifier

_notifiers: dict[str, QueueNotifier] = {}
_notifiers_lock = threading.Lock()


def _notifier_for(key: str) -> QueueNotifier:
    # Two broker.connect() calls on the same file in one process share wake-ups.
    with _notifiers_lock:
        return _notifiers.setdefault(key, QueueNotifier())


# Connection.info key: the pool a kept connection came from (``checkout``).
_POOL = "broker_pool"

# Every database's state in this process, to start afresh in a forked child.
_states: weakref.WeakSet[DatabaseState] = weakref.WeakSet()
# What a forked child inherited of its parent's connections and work under way: kept,
# never used, closed or collected (a SQLite connection closed in the child, or handed back
# to a pool that rolls it back, could undo what the parent's transaction holds).
_inherited: list[object] = []


def _close_on_driver(conn: Connection) -> None:
    """Close ``conn`` and its driver connection. Handed back to its pool instead, a
    connection of a pool its engine has since disposed of (``Engine.dispose`` replaces the
    pool) would stay open, unused, until garbage collection closes it."""
    if not conn.closed:
        conn.invalidate()
        conn.close()


class DatabaseState:
    """The engine, the cached catalog snapshot and the queue notifier of one database.

    It also keeps one idle connection per thread: a broker transaction is short, and
    taking a connection from the pool and giving it back costs as much as a SEND.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.backend = backend_for(engine)
        # What a failing database raises: SQLAlchemy's errors, and the driver's own for the
        # prepared statements the hot path runs on the driver's cursor.
        self.database_errors: tuple[type[Exception], ...] = (SQLAlchemyError, engine.dialect.loaded_dbapi.Error)
        self.notifier = _notifier_for(self.backend.database_key(engine))
        self._catalog: Catalog | None = None
        self._lock = threading.Lock()
        self._idle = threading.local()
        self.events = EventHub()
        # Per thread: ``watcher(queue, unfiltered, call)`` wrapped around each RECEIVE and
        # GET CONVERSATION GROUP of that thread (activation readers report their receives),
        # and ``stopping``, an event that ends its WAITFOR when its runtime stops.
        self.receive_watch = threading.local()
        self._kept: set[Connection] = set()
        # SQLite: the broker's own write transactions share one connection and its commits.
        self.group = WriteGroup(engine, self.backend) if self.backend.groups_commits else None
        _states.add(self)

    def start_afresh(self) -> None:
        """In a forked child: the connections, the write turn and the transactions under
        way are the parent's, whose threads are not here to end them. The child leaves
        them alone and opens its own (SQLAlchemy's advice for a pool after a fork)."""
        _inherited.append((self.group, self._kept, self._idle, self.engine.pool))
        self._lock = threading.Lock()
        self._idle = threading.local()
        self.receive_watch = threading.local()
        self._kept = set()
        self.engine.dispose(close=False)
        self.notifier = _notifier_for(self.backend.database_key(self.engine))
        self.group = WriteGroup(self.engine, self.backend) if self.backend.groups_commits else None

    def checkout(self) -> Connection:
        """A connection outside any transaction: this thread's idle one, or a new one."""
        conn: Connection | None = getattr(self._idle, "connection", None)
        if conn is not None:
            self._idle.connection = None
            # Taken out of ``_kept`` under the lock: if ``close_idle`` took it first, it
            # is being closed on another thread and must not be used.
            with self._lock:
                ours = conn in self._kept
                self._kept.discard(conn)
            if ours and not conn.closed and not conn.invalidated:
                return conn
        conn = self.engine.connect()
        # From the pool: whoever held it last may have changed anything through it.
        pending.pending(conn).forget()
        conn.info[_POOL] = self.engine.pool
        return conn

    def checkin(self, conn: Connection) -> None:
        """Keep ``conn`` for this thread's next transaction, or close it."""
        if conn.invalidated:  # the server shut it mid-transaction: nothing of it is usable
            conn.close()
            return
        # A transaction begun on the driver (``Backend.begin_on_driver``) and left open
        # is invisible to SQLAlchemy: closing hands it to the pool, which rolls it back.
        reusable = (not conn.closed and not conn.invalidated and not conn.in_transaction()
                    and not getattr(conn.connection.dbapi_connection, "in_transaction", False))
        if conn.info.get(_POOL) is not self.engine.pool:
            _close_on_driver(conn)  # the engine was disposed while this thread used it
        elif reusable and getattr(self._idle, "connection", None) is None:
            self._idle.connection = conn
            with self._lock:
                self._kept.add(conn)
        else:
            conn.close()

    def close_idle(self) -> None:
        """Close the connections kept for reuse (their threads open new ones if needed),
        the backend's listener and, if idle, what it keeps open beside them
        (``Backend.let_go``)."""
        self.backend.stop_listening()
        if self.group is not None:
            self.group.close()
        with self._lock:
            kept, self._kept = self._kept, set()
        for conn in kept:
            _close_on_driver(conn)
        self.backend.let_go(self.engine)

    def catalog_for(self, conn: Connection, known_version: int | None = None) -> Catalog:
        """The snapshot valid for ``conn``'s transaction: one version read, or none when
        the caller knows the committed version; reloaded if stale."""
        version = catalog_version(conn) if known_version is None else known_version
        with self._lock:
            cached = self._catalog
        if cached is not None and cached.version == version:
            return cached
        fresh = load_catalog(conn)
        self.remember_catalog(fresh)
        return fresh

    def remember_catalog(self, catalog: Catalog) -> None:
        with self._lock:
            if self._catalog is None or catalog.version >= self._catalog.version:
                self._catalog = catalog


def _start_afresh_in_child() -> None:
    global _notifiers_lock
    _notifiers_lock = threading.Lock()  # a thread of the parent may have held it
    _notifiers.clear()
    for state in list(_states):
        state.start_afresh()


os.register_at_fork(after_in_child=_start_afresh_in_child)

"""Everything that differs between SQLite and PostgreSQL, behind one small class each.

Nothing else in the broker branches on the dialect for transactions, locks or
wake-ups; it asks ``backend_for(engine)``.

SQLite (``SQLiteBackend``): every transaction starts with ``BEGIN IMMEDIATE`` and holds
the database write lock until it ends, a superset of every conversation group lock, so
group locking is a no-op. Other processes' commits are seen through ``PRAGMA
data_version`` (with a read-only probe before taking the write lock again).

PostgreSQL (``PostgresBackend``): READ COMMITTED transactions, conversation group locks
are row locks on ``sb_conversation_groups`` held to the end of the transaction: a RECEIVE
that names a group (or a conversation) waits for it with ``FOR UPDATE``; one that picks
the next group takes the first candidate, in priority and age order, that no other
transaction holds (``FOR UPDATE SKIP LOCKED``). A transaction that enqueues sends
``pg_notify('broker_queue', queue_id)``, which PostgreSQL delivers at commit; one listener
connection per database and process LISTENs and wakes this process's waiters.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, bindparam, event, select, text
from sqlalchemy.engine import Connection

from broker.storage.models import ConversationEndpoint, ConversationGroup
from broker.storage.statements import Prepared
from broker.storage.waiting import ANY_QUEUE, QueueNotifier, wait_for_queue

if TYPE_CHECKING:
    from broker.storage.queue_tables import QueueStatements

log = logging.getLogger("broker")

# How long a SQLite connection waits for the write lock before giving up. Long enough
# that "database is locked" never reaches a user under ordinary contention.
SQLITE_BUSY_TIMEOUT_MS = 60_000
# The PostgreSQL channel carrying enqueues ("<queue id>") and catalog changes ("*").
CHANNEL = "broker_queue"
ALL_QUEUES = "*"
# Candidate messages read per round when looking for a group no one holds.
CANDIDATES = 16

_groups = ConversationGroup.__table__
_LOCK_GROUP = Prepared(
    select(_groups.c.conversation_group_id)
    .where(_groups.c.conversation_group_id == bindparam("p_group")).with_for_update()
)
_TRY_LOCK_GROUP = Prepared(
    select(_groups.c.conversation_group_id)
    .where(_groups.c.conversation_group_id == bindparam("p_group")).with_for_update(skip_locked=True)
)
_named = ConversationEndpoint.__table__.alias("named")
# The group of one conversation endpoint, locked (a subquery: one round trip).
_LOCK_GROUP_OF = Prepared(
    select(_groups.c.conversation_group_id)
    .where(_groups.c.conversation_group_id == select(_named.c.conversation_group_id)
           .where(_named.c.conversation_handle == bindparam("p_handle")).scalar_subquery())
    .with_for_update()
)
_NOTIFY = "SELECT pg_notify('" + CHANNEL + "', %s)"

# Per SQLite database of this process, its turn at the write lock (``begin_on_driver``).
_turns: dict[str, threading.Lock] = {}
_turns_lock = threading.Lock()
_TURN = "broker_write_turn"  # the key, in a connection's info, of the turn it holds


def write_turn(database_key: str) -> threading.Lock:
    """The lock a thread of this process holds from BEGIN IMMEDIATE to the end of its
    transaction on the database ``database_key``: one per database, shared by every
    engine of the process that opens it."""
    with _turns_lock:
        return _turns.setdefault(database_key, threading.Lock())


def _give_back(info: dict[Any, Any]) -> None:
    turn = info.pop(_TURN, None)
    if turn is not None:
        turn.release()


class Backend:
    """The SQLite behaviour; ``PostgresBackend`` overrides what differs."""

    name = "sqlite"
    # Whether transactions lock rows (and so may have to skip rows others hold): SQLite's
    # one write lock covers every row a transaction could touch.
    row_locks = False
    # Whether a transaction's catalog snapshot stays current for its whole life: true
    # where one transaction writes at a time, false under READ COMMITTED, where another
    # transaction's change (a queue's rollback count) can commit meanwhile.
    snapshot_stays_current = True

    def configure(self, engine: Engine) -> None:
        """Install the connection and transaction settings on a new engine."""

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # Take transaction control away from the driver: the begin event below
            # issues BEGIN IMMEDIATE itself.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = FULL")
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            # Already begun on the driver (``begin_on_driver``): SQLAlchemy joins it.
            if not conn.connection.dbapi_connection.in_transaction:
                self.begin_on_driver(conn)

        # A transaction SQLAlchemy ends (it joined one, or began it), or that the pool
        # rolls back or throws away, gives its turn at the write lock back.
        for ending in ("commit", "rollback"):
            event.listen(engine, ending, lambda conn: self.ended(conn))

        @event.listens_for(engine.pool, "reset")
        def _on_reset(_dbapi: Any, record: Any, _state: Any) -> None:
            _give_back(record.info)

        @event.listens_for(engine.pool, "close")
        def _on_close(_dbapi: Any, record: Any) -> None:
            _give_back(record.info)

        @event.listens_for(engine.pool, "invalidate")
        def _on_invalidate(_dbapi: Any, record: Any, _error: Any) -> None:
            _give_back(record.info)

    def begin_on_driver(self, conn: Connection) -> bool:
        """Begin ``conn``'s transaction on the driver, without SQLAlchemy's bookkeeping;
        False where the backend leaves beginning to SQLAlchemy.

        SQLite: ``BEGIN IMMEDIATE``, after taking this process's turn at the database's
        write lock (:func:`write_turn`): threads that want it queue in order instead of
        each sleeping in SQLite's busy handler and retrying, where one that just
        committed takes it again before the sleepers wake. :meth:`ended` gives it back.
        SQLAlchemy's own begin and commit cost about as much as a one-message SEND's
        statements; a SQLAlchemy statement run later in the transaction joins it
        (``_on_begin``) and SQLAlchemy then ends it.
        """
        turn = write_turn(self.database_key(conn.engine))
        # A turn never given back (a connection lost without its end being seen) costs
        # a wait of busy_timeout, after which SQLite's own lock decides, as it always does.
        if turn.acquire(timeout=SQLITE_BUSY_TIMEOUT_MS / 1000):
            conn.info[_TURN] = turn
        try:
            conn.connection.dbapi_connection.execute("BEGIN IMMEDIATE")  # type: ignore[union-attr]
        except BaseException:
            self.ended(conn)
            raise
        return True

    def ended(self, conn: Connection) -> None:
        """``conn``'s transaction has ended (or is about to, as SQLAlchemy commits): its
        turn at the write lock goes to the next thread waiting."""
        _give_back(conn.info)

    def changes(self, conn: Connection) -> int | None:
        """How many rows ``conn`` has written since it opened; None where it is not known.

        SQLite: the driver's ``total_changes``.
        """
        return int(conn.connection.dbapi_connection.total_changes)  # type: ignore[union-attr]

    def data_version(self, conn: Connection) -> int | None:
        """A number that changes whenever another connection commits to the database, read
        inside ``conn``'s transaction; None where there is no such number.

        SQLite: ``PRAGMA data_version``, which a connection's own commits leave alone.
        """
        return int(conn.connection.dbapi_connection.execute("PRAGMA data_version").fetchone()[0])  # type: ignore[union-attr]

    def database_key(self, engine: Engine) -> str:
        """One key per database, shared by every engine of this process that opens it."""
        return _resolved(engine.url.database or "")

    # -- runtimes ------------------------------------------------------------------------

    @contextmanager
    def session(self, engine: Engine) -> Iterator[int]:
        """The id a runtime's activated tasks carry (their ``spid``) while it runs; once
        the runtime's process is gone, ``ended_sessions`` reports it.

        SQLite: the process id (every process using the file runs on this machine).
        """
        yield os.getpid()

    def ended_sessions(self, conn: Connection, sessions: list[int]) -> list[int]:
        """Those of ``sessions`` whose runtime no longer runs.

        SQLite: processes that no longer exist (``os.kill(pid, 0)``; POSIX only, elsewhere
        none is known to have ended).
        """
        if os.name != "posix":
            return []
        return [pid for pid in sessions if not _process_exists(pid)]

    # -- names ---------------------------------------------------------------------------

    def catalog_view(self, view: str) -> str:
        """The SQL name of a catalog view. SQLite reads sys.x as database.table, so the dot
        lives inside one quoted identifier: "sys.conversation_endpoints"."""
        return f'"sys.{view}"'

    def queue_view_name(self, queue_name: str, object_id: int) -> str:
        """The name of the view that shows a queue: the queue's own name (SQLite takes
        identifiers of any length)."""
        return queue_name

    def object_name_taken(self, conn: Connection, name: str) -> bool:
        """Whether a table or view called ``name`` exists (case-insensitively, like SQL Server)."""
        found = conn.execute(text("SELECT 1 FROM sqlite_master WHERE lower(name) = lower(:n)"), {"n": name})
        return found.first() is not None

    # -- locks ---------------------------------------------------------------------------

    def lock_group(self, conn: Connection, group_id: uuid.UUID) -> None:
        """Hold ``group_id``'s lock until the transaction ends (waiting for it if needed).

        SQLite: the transaction's write lock already covers every group.
        """

    def lock_group_of(self, conn: Connection, handle: uuid.UUID) -> uuid.UUID | None:
        """Lock the group of endpoint ``handle`` until the transaction ends; the group's id,
        or None where no per-group lock is needed (or there is no such endpoint).

        SQLite: the transaction's write lock already covers every group.
        """
        return None

    def next_ready(self, conn: Connection, statements: QueueStatements) -> tuple[Any, ...] | None:
        """(group, conversation) of the next message to serve, its group locked; or None."""
        return statements.next_ready.first(conn)

    def next_conversation_rows(self, conn: Connection, statements: QueueStatements,
                               top: int | None) -> list[tuple[Any, ...]]:
        """Up to ``top`` ready rows, in receive order, of the conversation holding the next
        message to serve, its group locked; [] when nothing is ready.

        SQLite: one statement, the write lock covering every group.
        """
        if top is None:
            return statements.all_next_conversation_rows.all(conn)
        return statements.next_conversation_rows.all(conn, p_top=top)

    # -- wake-ups ------------------------------------------------------------------------

    def enqueued(self, conn: Connection, queue_id: int) -> None:
        """Tell other processes, at commit, that ``queue_id`` got messages."""

    def catalog_changed(self, conn: Connection) -> None:
        """Tell other processes, at commit, that the catalog changed."""

    def start_listening(self, engine: Engine, notifier: QueueNotifier) -> None:
        """Make sure other processes' commits reach ``notifier`` from now on."""

    def stop_listening(self) -> None:
        """Stop what ``start_listening`` started."""

    def wait_released(self, notifier: QueueNotifier, queue_id: int, seen: int, deadline: float,
                      conn: Connection, table: str, catalog_version: int) -> None:
        """WAITFOR after the transaction rolled back its empty attempt (holding nothing).

        ``conn`` is idle. SQLite: watch ``PRAGMA data_version`` on it; on a change a
        read-only probe (no lock) decides whether a RECEIVE is worth the write lock: a
        ready message, or a catalog change (a queue disabled or dropped must end the
        wait with its error).
        """
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None  # a checked-out connection always has one
        messages_sql = f'SELECT 1 FROM "{table}" WHERE status = 1 LIMIT 1'
        version_sql = "SELECT catalog_version FROM sb_database"

        def worth_a_look() -> bool:
            if dbapi.execute(version_sql).fetchone()[0] != catalog_version:
                return True
            return dbapi.execute(messages_sql).fetchone() is not None

        wait_for_queue(notifier, queue_id, seen, deadline, dbapi, worth_a_look)

    def wait_holding(self, notifier: QueueNotifier, queue_id: int, seen: int, deadline: float) -> None:
        """WAITFOR inside a transaction that keeps its locks.

        SQLite: it holds the database write lock, so nothing another writer does can
        reach it before it ends: only a timer (the deadline) can produce a message.
        """
        sleep_until(deadline)

    @contextmanager
    def watching(self, engine: Engine, notifier: QueueNotifier) -> Iterator[Callable[[int, float], None]]:
        """For the runtime: ``wait(seen, deadline)`` returning on any commit to the database.

        SQLite: a raw connection of its own watches ``PRAGMA data_version``.
        """
        raw = engine.raw_connection()
        try:
            dbapi = raw.driver_connection
            yield lambda seen, deadline: wait_for_queue(notifier, ANY_QUEUE, seen, deadline, dbapi, lambda: True)
        finally:
            raw.close()


# PostgreSQL cuts identifiers longer than this many bytes (NAMEDATALEN - 1).
_IDENTIFIER_BYTES = 63


class PostgresBackend(Backend):
    name = "postgresql"
    row_locks = True
    snapshot_stays_current = False

    def __init__(self) -> None:
        self._listener: _Listener | None = None
        self._lock = threading.Lock()

    def configure(self, engine: Engine) -> None:
        """READ COMMITTED, the server's default: each statement sees the latest commits."""

    def changes(self, conn: Connection) -> int | None:
        return None  # every commit notifies (pg_notify is sent only by those that enqueue)

    def data_version(self, conn: Connection) -> int | None:
        return None  # every transaction reads afresh (and takes its row locks)

    def begin_on_driver(self, conn: Connection) -> bool:
        return False

    def database_key(self, engine: Engine) -> str:
        return engine.url.render_as_string(hide_password=True)

    @contextmanager
    def session(self, engine: Engine) -> Iterator[int]:
        """PostgreSQL: the backend process id of a connection the runtime holds open for
        its whole life. Runtimes may run on other hosts, so an operating-system process id
        would tell nothing; a session ends with its process, on any host."""
        raw = engine.raw_connection()
        raw.detach()  # closed for good at the end, not handed back to the pool
        try:
            cursor = raw.cursor()
            cursor.execute("SELECT pg_backend_pid()")
            row = cursor.fetchone()
            assert row is not None
            yield int(row[0])
        finally:
            raw.close()

    def ended_sessions(self, conn: Connection, sessions: list[int]) -> list[int]:
        """PostgreSQL: sessions the server no longer has (``pg_stat_activity``)."""
        if not sessions:
            return []
        alive = set(conn.execute(text("SELECT pid FROM pg_stat_activity WHERE pid = ANY(:sessions)"),
                                 {"sessions": sessions}).scalars())
        return [pid for pid in sessions if pid not in alive]

    def catalog_view(self, view: str) -> str:
        """Catalog views live in the schema sys: sys."conversation_endpoints"."""
        return f'sys."{view}"'

    def queue_view_name(self, queue_name: str, object_id: int) -> str:
        """The queue's own name when it fits PostgreSQL's identifiers (63 bytes); else its
        first bytes plus ``~`` and the queue's object id, so two long names that share
        their first 63 bytes never name the same view. The API and the CLI find a queue
        by its full name through the catalog either way."""
        encoded = queue_name.encode("utf-8")
        if len(encoded) <= _IDENTIFIER_BYTES:
            return queue_name
        suffix = f"~{object_id}"
        head = encoded[:_IDENTIFIER_BYTES - len(suffix)].decode("utf-8", errors="ignore")  # whole characters
        return head + suffix

    def object_name_taken(self, conn: Connection, name: str) -> bool:
        found = conn.execute(text(
            "SELECT 1 FROM information_schema.tables "
            "WHERE lower(table_name) = lower(:n) AND table_schema = current_schema()"
        ), {"n": name})
        return found.first() is not None

    def lock_group(self, conn: Connection, group_id: uuid.UUID) -> None:
        _LOCK_GROUP.all(conn, p_group=group_id)

    def lock_group_of(self, conn: Connection, handle: uuid.UUID) -> uuid.UUID | None:
        found = _LOCK_GROUP_OF.first(conn, p_handle=handle)
        return None if found is None else found[0]

    def next_ready(self, conn: Connection, statements: QueueStatements) -> tuple[Any, ...] | None:
        """Candidates in priority and age order; lock the first group nobody holds.

        After the lock, the group's first ready message is read again: another
        transaction may have taken the candidate and committed in between.
        """
        tried: set[Any] = set()
        offset = 0
        while True:
            candidates = statements.ready_candidates.all(conn, p_limit=CANDIDATES, p_offset=offset)
            for group_id, _handle in candidates:
                if group_id in tried:
                    continue
                tried.add(group_id)
                if _TRY_LOCK_GROUP.first(conn, p_group=group_id) is None:
                    continue  # held by another transaction (or gone)
                first = statements.first_of_group.first(conn, p_group=group_id)
                if first is not None:
                    return group_id, first[0]
            if len(candidates) < CANDIDATES:
                return None
            offset += CANDIDATES

    def next_conversation_rows(self, conn: Connection, statements: QueueStatements,
                               top: int | None) -> list[tuple[Any, ...]]:
        first = self.next_ready(conn, statements)  # the group is locked before its rows are read
        if first is None:
            return []
        if top is None:
            return statements.all_conversation_rows.all(conn, p_handle=first[1])
        return statements.conversation_rows.all(conn, p_handle=first[1], p_top=top)

    def enqueued(self, conn: Connection, queue_id: int) -> None:
        _notify(conn, str(queue_id))

    def catalog_changed(self, conn: Connection) -> None:
        _notify(conn, ALL_QUEUES)

    def start_listening(self, engine: Engine, notifier: QueueNotifier) -> None:
        with self._lock:
            if self._listener is None or not self._listener.alive:
                self._listener = _Listener(engine, notifier)

    def stop_listening(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()

    def wait_released(self, notifier: QueueNotifier, queue_id: int, seen: int, deadline: float,
                      conn: Connection, table: str, catalog_version: int) -> None:
        """Wait on the notifier: the listener turns every NOTIFY into a wake-up."""
        wait_for_queue(notifier, queue_id, seen, deadline, None, lambda: True)

    def wait_holding(self, notifier: QueueNotifier, queue_id: int, seen: int, deadline: float) -> None:
        """Other transactions still commit while this one holds its row locks: wait for them."""
        wait_for_queue(notifier, queue_id, seen, deadline, None, lambda: True)

    @contextmanager
    def watching(self, engine: Engine, notifier: QueueNotifier) -> Iterator[Callable[[int, float], None]]:
        self.start_listening(engine, notifier)
        yield lambda seen, deadline: wait_for_queue(notifier, ANY_QUEUE, seen, deadline, None, lambda: True)


def _notify(conn: Connection, payload: str) -> None:
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(_NOTIFY, (payload,))
    finally:
        cursor.close()


class _Listener:
    """A thread on its own autocommit connection that LISTENs and wakes the notifier.

    LISTEN is in force before the constructor returns, so a waiter that starts the
    listener before its first attempt misses no commit made after that attempt.
    """

    def __init__(self, engine: Engine, notifier: QueueNotifier) -> None:
        raw = engine.raw_connection()
        connection: Any = raw.driver_connection
        raw.detach()  # never goes back to the pool: closed by this listener
        self._connection = connection
        self._connection.autocommit = True
        self._connection.execute(f"LISTEN {CHANNEL}")
        self._notifier = notifier
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="broker-listen", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                for notice in self._connection.notifies(timeout=0.5):
                    if notice.payload == ALL_QUEUES:
                        self._notifier.notify_all()
                    else:
                        self._notifier.notify({int(notice.payload)})
        except Exception:
            if not self._stopping.is_set():
                log.exception("LISTEN connection failed; waiters fall back to their timeouts")
                self._notifier.notify_all()
        finally:
            self._connection.close()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(5)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def backend_for(engine: Engine) -> Backend:
    """The backend of ``engine``'s dialect (one object per engine, kept on it)."""
    found: Backend | None = getattr(engine, "_broker_backend", None)
    if found is None:
        found = PostgresBackend() if engine.dialect.name == "postgresql" else Backend()
        engine._broker_backend = found  # type: ignore[attr-defined]
    return found


def sleep_until(deadline: float) -> None:
    time.sleep(max(0.0, min(deadline, time.monotonic() + 3600) - time.monotonic()))


@functools.lru_cache(maxsize=256)
def _resolved(path: str) -> str:
    """``path`` made absolute, its links followed: once per path (a stat per component),
    not at every transaction's begin."""
    return str(Path(path).resolve())

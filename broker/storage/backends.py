"""Everything that differs between SQLite and PostgreSQL, behind one small class each.

Nothing else in the broker branches on the dialect for transactions, locks or
wake-ups; it asks ``backend_for(engine)``.

SQLite (``Backend``, here): every transaction starts with ``BEGIN IMMEDIATE`` under the
database's fair write lock (``write_lock``) and holds it until it ends, a superset of
every conversation group lock, so group locking is a no-op. Other processes' commits are
seen through ``PRAGMA data_version`` (with a read-only probe before taking the write
lock again).

PostgreSQL: ``postgres_backend.PostgresBackend``, which overrides what differs.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event, text
from sqlalchemy.engine import Connection

from broker.errors import BrokerError
from broker.storage import runtime_marks
from broker.storage.queue_tables import QueueStatements, TakenRows, take_rows
from broker.storage.urls import sqlite_file
from broker.storage.waiting import CommitWatch, QueueNotifier, wait_for_queue
from broker.storage.write_lock import LEND_AFTER_S, close_if_idle, forked_while_writing, write_lock

log = logging.getLogger("broker")

# How long a SQLite connection waits for the write lock before giving up. Long enough
# that "database is locked" never reaches a user under ordinary contention.
SQLITE_BUSY_TIMEOUT_MS = 60_000
_HELD = "broker_write_lock"  # the key, in a connection's info, of the write lock it holds
_SYNCHRONOUS = "broker_synchronous"  # ... and of its ``PRAGMA synchronous`` setting


def _give_back(info: dict[Any, Any], *, committed: bool = False,
               meanwhile: Callable[[], None] | None = None) -> None:
    """Give the write lock back; after a commit that changed something, return only once
    it is durable (``durable_commits``), running ``meanwhile`` first."""
    lock = info.pop(_HELD, None)
    try:
        number = lock.release(committed=committed) if lock is not None else None
    finally:
        if meanwhile is not None:
            meanwhile()
    if number is not None:
        lock.wait_durable(number)


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
    # Whether the broker's own transactions share one connection and its commits
    # (``broker.storage.group_commit``): where one transaction writes at a time anyway.
    groups_commits = True

    def configure(self, engine: Engine) -> None:
        """Install the connection and transaction settings on a new engine."""

        # ``sqlite:///FILE?timeout=SECONDS`` (the driver's own parameter) sets how long a
        # transaction waits for the write lock, ours and SQLite's.
        self.busy_timeout_s = float(engine.url.query.get("timeout", SQLITE_BUSY_TIMEOUT_MS / 1000))  # type: ignore[arg-type]

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # Take transaction control away from the driver: the begin event below
            # issues BEGIN IMMEDIATE itself.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            cursor.execute("PRAGMA journal_mode = WAL")
            # SQLite flushes each commit (FULL) unless the broker flushes it after the
            # write lock goes (NORMAL: ``begin_on_driver``).
            cursor.execute("PRAGMA synchronous = FULL")
            _record.info[_SYNCHRONOUS] = "FULL"
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            # Already begun on the driver (``begin_on_driver``): SQLAlchemy joins it.
            if not conn.connection.dbapi_connection.in_transaction:
                self.begin_on_driver(conn)

        # A transaction SQLAlchemy ends (it joined one, or began it), or that the pool
        # rolls back or throws away, gives the write lock back. SQLAlchemy tells of a
        # commit or rollback before it goes to the driver, and the next writer must not
        # meet SQLite's lock still held: the transaction ends on the driver here, first
        # (the driver's own commit or rollback that follows finds none open, and does
        # nothing).
        @event.listens_for(engine, "commit")
        def _on_commit(conn: Any) -> None:
            _end_on(conn, commit=True)

        @event.listens_for(engine, "rollback")
        def _on_rollback(conn: Any) -> None:
            _end_on(conn, commit=False)

        def _end_on(conn: Any, *, commit: bool) -> None:
            # Invalidated (an interrupt, Ctrl-C, inside a driver call): no transaction to end,
            # and the lock went back with the connection (``_on_invalidate``). Reading it
            # would raise over the interrupt.
            if not conn.invalidated:
                _end_then_give_back(conn.connection.dbapi_connection, conn.info, commit=commit)

        @event.listens_for(engine.pool, "reset")
        def _on_reset(dbapi: Any, record: Any, _state: Any) -> None:
            _end_then_give_back(dbapi, record.info, commit=False)

        @event.listens_for(engine.pool, "close")
        def _on_close(_dbapi: Any, record: Any) -> None:
            _give_back(record.info)

        @event.listens_for(engine.pool, "invalidate")
        def _on_invalidate(_dbapi: Any, record: Any, _error: Any) -> None:
            _give_back(record.info)

    def begin_on_driver(self, conn: Connection, *, company: bool = False) -> bool:
        """Begin ``conn``'s transaction on the driver, without SQLAlchemy's bookkeeping;
        False where the backend leaves beginning to SQLAlchemy.

        SQLite: ``BEGIN IMMEDIATE``, after taking the database's fair write lock
        (:mod:`broker.storage.write_lock`): threads and processes that want it queue in
        turn instead of each sleeping in SQLite's busy handler and retrying. Error 1222
        when it cannot be had within the busy timeout. :meth:`ended` gives it back.
        SQLAlchemy's own begin and commit cost about as much as a one-message SEND's
        statements; a SQLAlchemy statement run later in the transaction joins it
        (``_on_begin``) and SQLAlchemy then ends it.

        Its commit is flushed by SQLite (``synchronous = FULL``) when no one else is
        about to write, else after the lock goes (``WriteLock.sqlite_flushes``);
        ``company``: other threads of this process wait to write (group commit).
        """
        info = conn.info
        left = self.take_write_lock(conn.engine, info, company=company)
        driver = conn.connection.dbapi_connection
        assert driver is not None  # a checked-out connection always has one
        try:
            synchronous = "FULL" if info[_HELD].sqlite_flushes else "NORMAL"
            if info.get(_SYNCHRONOUS) != synchronous:  # set before BEGIN: inside, it would not count
                driver.execute(f"PRAGMA synchronous = {synchronous}")
                info[_SYNCHRONOUS] = synchronous
            # A holder that lent its place (``write_lock``) may still hold SQLite's lock:
            # its busy handler then waits, for what is left of the timeout.
            lent = left < self.busy_timeout_s - LEND_AFTER_S
            if lent:
                driver.execute(f"PRAGMA busy_timeout = {max(0, int(left * 1000))}")
            try:
                driver.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:
                    raise
                raise self._no_write_lock() from exc
            finally:
                if lent:
                    driver.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
        except BaseException:
            self.ended(conn)
            raise
        return True

    def begin_snapshot(self, conn: Connection) -> None:
        """Begin a transaction that only reads, on the database's last committed state; it
        takes no lock and never waits for a writer.

        SQLite: a deferred ``BEGIN`` on the driver: in WAL mode the first read fixes the
        snapshot, which later commits by writers leave alone.
        """
        conn.connection.dbapi_connection.execute("BEGIN")  # type: ignore[union-attr]

    @contextmanager
    def snapshot_connection(self, engine: Engine) -> Iterator[Connection]:
        """A connection of ``engine`` in a snapshot transaction (:meth:`begin_snapshot`),
        for SQLAlchemy reads outside any broker transaction; rolled back at the end."""
        with engine.connect() as conn:
            self.begin_snapshot(conn)
            try:
                yield conn
            finally:
                conn.rollback()

    def take_write_lock(self, engine: Engine, info: dict[Any, Any], *, company: bool = False) -> float:
        """Take ``engine``'s database write lock for the connection whose ``info`` is given
        (:meth:`ended` gives it back): the seconds left of the busy timeout; error 1222
        past it."""
        key = self.database_key(engine)
        if forked_while_writing(key):
            raise BrokerError(1222, "Lock request time out period exceeded. (this process was forked while its "
                                    "parent was writing to the database: SQLite cannot carry that across a fork; "
                                    "start the process with multiprocessing's 'spawn' or 'forkserver' method, or "
                                    "fork before the parent writes)")
        lock = write_lock(key)
        left = lock.acquire(self.busy_timeout_s, company=company)
        if left is None:
            raise self._no_write_lock()
        info[_HELD] = lock
        return left

    def _no_write_lock(self) -> BrokerError:
        return BrokerError(1222, f"Lock request time out period exceeded. (no write lock on the database "
                                 f"within {self.busy_timeout_s:g} s: another transaction holds it)")

    def ended(self, conn: Connection, *, committed: bool = False,
              meanwhile: Callable[[], None] | None = None) -> None:
        """``conn``'s transaction has ended: the write lock goes to the next writer
        waiting (``WriteLock.release``). If it ``committed`` a change, return only once
        that is durable; ``meanwhile`` runs after the lock is let go, before that wait
        (SQLite: :mod:`broker.storage.durable_commits`)."""
        if conn.invalidated:  # lost: nothing committed; its lock went back as it closed (``_on_invalidate``)
            if meanwhile is not None:
                meanwhile()
            return
        _give_back(conn.info, committed=committed, meanwhile=meanwhile)

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
        """One key per database, shared by every engine of this process that opens it:
        the file's path, a ``file:`` URI's too (its lock file lies beside the file)."""
        return _resolved(sqlite_file(engine.url) or "")

    def let_go(self, engine: Engine) -> None:
        """``engine``'s connections are closed: let go of what else this process keeps open
        for the database, if nothing of the process uses it now.

        SQLite: the lock file, whose record locks tell other processes this one is about
        (``broker.storage.write_lock``): a process left alone on the database then runs
        solo. It is opened again if this process writes to the database later.
        """
        close_if_idle(self.database_key(engine))

    # -- runtimes ------------------------------------------------------------------------

    @contextmanager
    def session(self, engine: Engine) -> Iterator[int]:
        """The id a runtime's activated tasks carry (their ``spid``) while it runs; once
        the runtime's process is gone, ``ended_sessions`` reports it.

        SQLite: a number of the runtime's own, marked by a record lock in a file beside
        the database (``broker.storage.runtime_marks``), which the kernel lets go when the
        process ends. Not the process id: a later process may have that.
        """
        with runtime_marks.held(self.database_key(engine)) as number:
            yield number

    def ended_sessions(self, conn: Connection, sessions: list[int]) -> list[int]:
        """Those of ``sessions`` whose runtime no longer runs.

        SQLite: numbers whose mark no process holds (``broker.storage.runtime_marks``).
        """
        return runtime_marks.ended(self.database_key(conn.engine), sessions)

    # How long a session must be seen ended before its rows are removed
    # (``claim_ended_sessions``): time for a runtime whose mark was lost while it runs to
    # find that out and take it again (``renew_session``). SQLite: none, a record lock
    # is lost only with its process.
    session_grace = 0.0

    def renew_session(self, engine: Engine, number: int) -> int | None:
        """Check that the mark of the running session ``number`` is still held; None if
        it is, else the number held now (taken again: the same if it could be had, else
        a new one; the caller's rows must then carry it again).

        SQLite: always None (the kernel keeps a record lock for as long as the process
        runs: ``broker.storage.runtime_marks`` keeps the one descriptor that holds it).
        """
        return None

    def claim_ended_sessions(self, conn: Connection, sessions: list[int]) -> list[int]:
        """Those of ``sessions`` that have ended, held so until the caller's transaction
        ends (no runtime takes one of them again meanwhile): the caller deletes their rows.

        SQLite: ``ended_sessions`` (a mark is never taken again; writers take turns).
        """
        return self.ended_sessions(conn, sessions)

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
        """Whether a table, view or index called ``name`` exists (case-insensitively, like
        SQL Server)."""
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

    def take_next_conversation_rows(self, conn: Connection, statements: QueueStatements, top: int | None,
                                    *, retention: bool, queue_id: int) -> TakenRows:
        """RECEIVE without a WHERE: up to ``top`` ready rows, in receive order, of the
        conversation holding the next message to serve, its group locked, taken off the
        queue (``queue_tables.take_rows``); no rows when nothing is ready.

        SQLite: one statement reads them, the write lock covering every group; the caller
        resets the poison count of ``queue_id`` as the catalog snapshot tells it.
        """
        if top is None:
            rows = statements.all_next_conversation_rows.all(conn)
        else:
            rows = statements.next_conversation_rows.all(conn, p_top=top)
        if rows:
            take_rows(conn, statements, [row[0] for row in rows], retention=retention)
        return TakenRows(rows, None)

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
    def watching(self, engine: Engine, notifier: QueueNotifier) -> Iterator[CommitWatch]:
        """For the runtime: a watch for any commit to the database.

        SQLite: a raw connection of its own watches ``PRAGMA data_version``.
        """
        raw = engine.raw_connection()
        try:
            yield CommitWatch(notifier, raw.driver_connection)
        finally:
            raw.close()


def _end_then_give_back(dbapi: Any, info: dict[Any, Any], *, commit: bool) -> None:
    """End the transaction a connection holding the write lock has open on the driver
    (rolled back if its commit fails), then give the lock back."""
    if _HELD not in info:
        return
    committed = False
    try:
        if dbapi is not None and dbapi.in_transaction:
            if not commit:
                dbapi.rollback()
            else:
                try:
                    dbapi.commit()
                except BaseException:
                    dbapi.rollback()
                    raise
                committed = True
    finally:
        _give_back(info, committed=committed)


def backend_for(engine: Engine) -> Backend:
    """The backend of ``engine``'s dialect (one object per engine, kept on it)."""
    found: Backend | None = getattr(engine, "_broker_backend", None)
    if found is None:
        if engine.dialect.name == "postgresql":
            from broker.storage.postgres_backend import PostgresBackend  # it builds on this module

            found = PostgresBackend()
        else:
            found = Backend()
        engine._broker_backend = found  # type: ignore[attr-defined]
    return found


def sleep_until(deadline: float) -> None:
    time.sleep(max(0.0, min(deadline, time.monotonic() + 3600) - time.monotonic()))


@functools.lru_cache(maxsize=256)
def _resolved(path: str) -> str:
    """``path`` made absolute, its links followed: once per path (a stat per component),
    not at every transaction's begin."""
    return str(Path(path).resolve())

"""Group commit on SQLite: small broker transactions of several threads share one
physical commit.

Every commit on SQLite pays a ``fsync`` of the WAL (``synchronous=FULL``), and SQLite
runs one writer at a time anyway. So the broker's own transactions on one database in
one process run on one shared connection, in turn (in arrival order), and each is a
*member* of the physical transaction open on it:

* The first member begins it (``BEGIN IMMEDIATE``, under the database's fair write
  lock) and is alone in it until it commits; each later member runs inside a savepoint.
* A member's rollback touches no one else: the first member's is the physical
  rollback (there is no other member yet), a later one's ``ROLLBACK TO`` its savepoint.
* A member's commit releases its savepoint; if another thread is waiting to run a
  member, the turn goes to it and the committing thread waits. The physical ``COMMIT``
  happens when no thread waits for a turn, or once the transaction holds
  ``MAX_MEMBERS`` members or has been open for ``MAX_OPEN_S``, or when a member changed
  the catalog, or when a writer outside the group (a joined session) waits for the
  lock. Only then does each member's ``commit()`` return (or raise, if the physical
  commit failed: its work is gone with the others').

A single thread never finds anyone waiting, so its transactions commit one by one as
before. A crash loses only members whose ``commit()`` had not returned. Isolation is
what SQLite gives one writer: a member sees the members before it (they committed, as
far as it can tell; if the physical commit fails, it fails with them).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from broker.errors import BrokerError
from broker.storage import pending
from broker.storage.driver_errors import as_broker_error
from broker.storage.write_lock import Turn, write_lock

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from broker.storage.backends import Backend

# A physical transaction commits once it holds this many members ...
MAX_MEMBERS = 64
# ... or has been open this long, however many threads still wait.
MAX_OPEN_S = 0.005
_SAVEPOINT = "broker_member"


def end_transaction(conn: Connection, *, commit: bool) -> BaseException | None:
    """Commit or roll back ``conn``'s transaction, wherever it began.

    One begun on the driver (``Backend.begin_on_driver``) that SQLAlchemy never saw ends
    on the driver, after the held-back writes (``broker.storage.pending``); once any
    SQLAlchemy statement has run, SQLAlchemy has joined it and ends it.

    An interruption (``KeyboardInterrupt``, ``SystemExit``: a signal handler's) that
    comes once the driver has committed is returned, not raised: the commit stands, and
    the caller finishes what a commit needs (the flush, the write lock) before raising
    it. Anything raised means the transaction is rolled back.
    """
    if conn.invalidated:  # the connection was lost: the server has rolled the transaction back
        conn.rollback()  # SQLAlchemy forgets it too
        if commit:
            raise BrokerError(10054, "The connection to the database server was lost; the transaction was "
                                     "rolled back.")
        return None
    driver = conn.connection.dbapi_connection
    assert driver is not None  # a checked-out connection always has one
    if conn.in_transaction():
        if not commit:
            _roll_back(conn, conn.rollback)
            return None
        try:
            conn.commit()
        except BaseException:
            # A failed commit leaves SQLAlchemy's transaction to be rolled back. Nothing
            # tells whether an interruption came after the commit: SQLAlchemy may have
            # rolled the driver back itself. Reported as not committed.
            _roll_back(conn, conn.rollback)
            raise
        return None
    if commit:
        try:
            pending.flush(conn)
            driver.commit()
        except BaseException as exc:
            if _stood(exc, driver):
                pending.discard(conn)
                return exc
            _roll_back(conn, driver.rollback)
            pending.discard(conn)
            raise
    else:
        _roll_back(conn, driver.rollback)
        pending.discard(conn)
    return None


def _roll_back(conn: Connection, rollback: Callable[[], None]) -> None:
    """Roll back with ``rollback``. One that fails means the connection is lost (the
    server rolls back on its own): the connection is invalidated, which gives its write
    lock back, rather than the failure taking the place of what caused the rollback."""
    try:
        rollback()
    except Exception:  # noqa: BLE001 - whatever the driver raises on a dead connection
        conn.invalidate()
        conn.rollback()  # SQLAlchemy forgets the transaction of the invalidated connection


def _stood(exc: BaseException, driver: Any) -> bool:
    """Whether ``exc``, raised while committing, is an interruption that came after the
    commit was made (the driver then has no transaction open: nothing rolled it back)."""
    return not isinstance(exc, Exception) and not driver.in_transaction


@dataclass(eq=False, slots=True)
class _Physical:
    """One physical transaction of the group and what its members wait for."""

    began: float
    changes_at_begin: int | None  # the connection's count of rows written, at BEGIN
    members: int = 0  # members that committed into it
    wrote: bool = False  # a member may have written without changing a row count
    # Made by the first member to wait for the commit (most commits have none); set
    # by whoever ends it, which can only be a later member: it holds the turn.
    done: threading.Event | None = None
    error: BaseException | None = None


@dataclass(eq=False, slots=True)
class Member:
    """A broker transaction's place in the group: its connection, and whether it began
    the physical transaction (else it runs in a savepoint)."""

    conn: Connection
    first: bool
    physical: _Physical


class WriteGroup:
    """The shared connection of one database's broker transactions in this process, and
    the turn among them (see the module doc)."""

    def __init__(self, engine: Engine, backend: Backend) -> None:
        self._engine = engine
        self._backend = backend
        self._mutex = threading.Lock()
        # Held by the member running (or by the physical commit under way).
        self._turn = Turn()
        self._conn: Connection | None = None
        self._physical: _Physical | None = None
        self._awaiting = 0  # members waiting for their physical commit to be durable
        # The database's write lock, whose queue tells of writers outside the group.
        self._write_lock = write_lock(backend.database_key(engine))

    @property
    def waiting(self) -> int:
        """Threads waiting for their turn to run a member."""
        return self._turn.waiting

    # -- a member's life ---------------------------------------------------------------

    def join(self) -> Member:
        """Wait for this thread's turn (error 1222 past the busy timeout) and run inside
        the physical transaction, beginning it if none is open."""
        self._take_turn()
        try:
            conn = self._connection()
            if self._physical is None:
                # The database's write lock, then BEGIN IMMEDIATE. With other threads at
                # work here (waiting for their turn, or for an earlier commit's flush) the
                # commit is flushed after the lock goes, while the next one runs
                # (``durable_commits``).
                self._backend.begin_on_driver(conn, company=self._turn.waiting > 0 or self._awaiting > 0)
                self._physical = _Physical(time.monotonic(), self._backend.changes(conn))
                return Member(conn, True, self._physical)
            _driver(conn).execute(f"SAVEPOINT {_SAVEPOINT}")
            return Member(conn, False, self._physical)
        except BaseException:
            self._turn.release()
            raise

    def commit(self, member: Member, *, catalog_changed: bool, wrote: bool) -> None:
        """The member committed: keep its work (released savepoint) and return once the
        physical commit holding it is durable; raise if that commit failed. ``wrote``:
        the member ran something that may have written without changing a row (DDL,
        application SQL), so the commit must be made durable even if no row count moved.
        The caller has flushed the member's held-back writes (``pending.flush``): the
        next member's begin would drop them."""
        conn, physical = member.conn, member.physical
        if not member.first:
            try:
                _driver(conn).execute(f"RELEASE {_SAVEPOINT}")
            except BaseException:
                self.rollback(member)
                raise
        physical.members += 1
        physical.wrote = physical.wrote or wrote
        if catalog_changed or self._must_commit(physical):
            self._commit_physical(physical)
        else:
            with self._mutex:
                done = physical.done = physical.done or threading.Event()
                self._awaiting += 1
            self._turn.release()
            done.wait()
            with self._mutex:
                self._awaiting -= 1
        if physical.error is not None:
            raise _reported(physical.error)

    def rollback(self, member: Member) -> None:
        """The member rolled back: undo its work only; the physical transaction goes on
        for those before it (committed now if no one else waits)."""
        conn, physical = member.conn, member.physical
        if member.first:
            try:
                end_transaction(conn, commit=False)
            finally:
                self._backend.ended(conn)
                self._close(physical, None)
            return
        pending.discard(conn)
        try:
            driver = _driver(conn)
            undone = driver.in_transaction  # else SQLite rolled it all back (a full disk, an I/O error)
            if undone:
                driver.execute(f"ROLLBACK TO {_SAVEPOINT}")
                driver.execute(f"RELEASE {_SAVEPOINT}")
        except Exception:  # noqa: BLE001 - the savepoint could not be undone alone
            undone = False
        if not undone:
            self._abandon(conn, physical)
            return
        if self._must_commit(physical):  # the members before it wait for their commit
            try:
                self._commit_physical(physical)
            except BrokerError:
                pass  # the members who committed get the error; this one rolled back anyway
        else:
            self._turn.release()

    # -- inside ------------------------------------------------------------------------

    def _must_commit(self, physical: _Physical) -> bool:
        return (not self._turn.waiting or physical.members >= MAX_MEMBERS
                or time.monotonic() - physical.began >= MAX_OPEN_S
                or self._write_lock.queued > 0)

    def _commit_physical(self, physical: _Physical) -> None:
        """Commit the physical transaction; once the write lock is let go the next thread
        may begin another on the connection while this one's commit is flushed, and then
        its members wake."""
        conn = self._connection()
        error: BaseException | None = None
        interrupted: BaseException | None = None
        try:
            interrupted = end_transaction(conn, commit=True)
        except BaseException as exc:  # noqa: BLE001 - handed to every member
            error = exc
        try:
            committed = error is None and (physical.wrote or self._backend.changes(conn) != physical.changes_at_begin)
            self._backend.ended(conn, committed=committed, meanwhile=self._next)
        except BaseException as exc:  # noqa: BLE001 - a failed flush: not durable, say so to every member
            error = error or exc
        # The other members get a numbered error; this thread's own interruption (Ctrl-C)
        # is raised as it is, and raised after the commit that it did not stop.
        self._wake(physical, None if error is None else _reported(error))
        if error is not None:
            raise error if not isinstance(error, Exception) else _reported(error)
        if interrupted is not None:
            raise interrupted

    def _abandon(self, conn: Connection, physical: _Physical) -> None:
        """A member's work could not be undone alone: the whole physical transaction is
        rolled back, and the members that committed into it get error 3930."""
        try:
            with contextlib.suppress(Exception):  # the database may have rolled it back already
                end_transaction(conn, commit=False)
        finally:
            self._backend.ended(conn)
            self._close(physical, BrokerError(3930, "The transaction was rolled back by the database, with those "
                                                     "that committed in the same group commit."))

    def _close(self, physical: _Physical, error: BaseException | None) -> None:
        """The physical transaction ended without a commit: the next thread, then its
        members."""
        self._next()
        self._wake(physical, error)

    def _next(self) -> None:
        self._physical = None
        self._turn.release()

    def _wake(self, physical: _Physical, error: BaseException | None) -> None:
        physical.error = error
        with self._mutex:
            if physical.done is not None:
                physical.done.set()

    def _connection(self) -> Connection:
        if self._conn is None or self._conn.closed or self._conn.invalidated:
            self._conn = self._engine.connect()
            pending.pending(self._conn).forget()
        return self._conn

    def _take_turn(self) -> None:
        if self._turn.holder == threading.get_ident():  # waiting would wait for itself
            raise BrokerError(1222, "Lock request time out period exceeded. (this thread's own open transaction "
                                    "holds the turn to write: a second transaction of the same thread waits for "
                                    "it for ever; use the open one)")
        if not self._turn.acquire(self._backend.busy_timeout_s):
            raise BrokerError(1222, f"Lock request time out period exceeded. (no turn to write within "
                                    f"{self._backend.busy_timeout_s:g} s: another transaction of this process "
                                    f"holds it)")

    def close(self) -> None:
        """Close the shared connection once no member runs: it takes the turn, committing
        first a physical transaction whose members wait for it. If the turn does not come
        within the busy timeout the connection is left to the group (the member holding
        the turn goes on with it)."""
        while True:
            try:
                self._take_turn()
            except BrokerError:
                return
            physical = self._physical
            if physical is None:
                break
            try:
                self._commit_physical(physical)  # gives the turn back
            except BrokerError:
                pass  # its members get the error
        try:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()
        finally:
            self._turn.release()


def _driver(conn: Connection) -> Any:
    driver = conn.connection.dbapi_connection
    assert driver is not None  # a checked-out connection always has one
    return driver


def _reported(error: BaseException) -> BrokerError:
    return error if isinstance(error, BrokerError) else as_broker_error(error)

"""The PostgreSQL backend (``backends.backend_for`` picks it for a PostgreSQL engine).

READ COMMITTED transactions; conversation group locks are row locks on
``sb_conversation_groups`` held to the end of the transaction: a RECEIVE that names a
group (or a conversation) waits for it with ``FOR UPDATE``; one that picks the next group
takes the first candidate, in priority and age order, that no other transaction holds
(``FOR UPDATE SKIP LOCKED``). A transaction that enqueues sends
``pg_notify('broker_queue', queue_id)``, which PostgreSQL delivers at commit; one listener
connection per database and process LISTENs and wakes this process's waiters.
"""

from __future__ import annotations

import functools
import itertools
import logging
import secrets
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, String, bindparam, func, select, text, true
from sqlalchemy.engine import Connection

from broker.storage.backends import Backend
from broker.storage.models import BrokerDatabase, ConversationEndpoint, ConversationGroup
from broker.storage.pending import pending
from broker.storage.queue_tables import QueueStatements, TakenRows
from broker.storage.rows import Endpoint
from broker.storage.statements import Prepared
from broker.storage.waiting import CommitWatch, QueueNotifier, wait_for_queue

log = logging.getLogger("broker")

# The PostgreSQL channel carrying enqueues ("<queue id>") and catalog changes ("*").
CHANNEL = "broker_queue"
ALL_QUEUES = "*"

_groups = ConversationGroup.__table__
_LOCK_GROUP = Prepared(
    select(_groups.c.conversation_group_id)
    .where(_groups.c.conversation_group_id == bindparam("p_group")).with_for_update()
)
# PostgreSQL: the group of one conversation endpoint, locked, then the conversation's
# endpoint rows (as ``endpoints._CONVERSATION_OF_HANDLE`` reads them, locked), in one
# statement, one round trip: the group row is locked first (the common table expression
# the join reads first), then each endpoint row, which its lock gives in its latest
# version (another transaction that held the group may have changed it). No row: no
# such endpoint, or no group.
_by_handle = ConversationEndpoint.__table__.alias("by_handle")
_of_handle = ConversationEndpoint.__table__.alias("of_handle")
_endpoints = ConversationEndpoint.__table__
_locked_group = (
    select(_groups.c.conversation_group_id)
    .where(_groups.c.conversation_group_id == select(_by_handle.c.conversation_group_id)
           .where(_by_handle.c.conversation_handle == bindparam("p_handle")).scalar_subquery())
    .with_for_update()
).cte("locked_group")
_conversation = (
    select(_endpoints)
    .where(_endpoints.c.conversation_id == select(_of_handle.c.conversation_id)
           .where(_of_handle.c.conversation_handle == bindparam("p_handle")).scalar_subquery())
    .order_by(_endpoints.c.is_initiator.desc()).with_for_update(of=_endpoints)
).lateral("conversation")
_LOCK_GROUP_AND_ENDPOINTS_OF = Prepared(
    select(_locked_group.c.conversation_group_id, *_conversation.c)
    .select_from(_locked_group.outerjoin(_conversation, true()))
)
_NOTIFY = "SELECT pg_notify('" + CHANNEL + "', %s)"
# The same, held back with the transaction's other writes (``broker.storage.pending``).
_NOTIFY_HELD = Prepared(select(func.pg_notify(CHANNEL, bindparam("p_payload", type_=String))),
                        positional=("p_payload",))

# PostgreSQL: the first key of the advisory locks that mark running runtimes (``session``;
# "SBRT"), the second being the runtime's number, 1 to _MAX_SESSION (an activated task's
# spid column is a 32-bit integer).
RUNTIME_LOCKS = 0x53425254
_MAX_SESSION = 2**31 - 1
_HELD_SESSIONS = text(
    "SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2"
    " AND classid::bigint = :namespace AND objid::bigint = ANY(CAST(:sessions AS bigint[]))"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)

_CLAIM_SESSIONS = text(
    "SELECT n FROM unnest(CAST(:sessions AS bigint[])) AS n"
    " WHERE pg_try_advisory_xact_lock(CAST(:namespace AS int), CAST(n AS int))"
)
# A lost session connection must be found out (``renew_session``) and its number taken
# again well within this: another runtime removes a session's rows only once it has seen
# its lock free this long (``Backend.session_grace``).
SESSION_GRACE_S = 5.0

# PostgreSQL cuts identifiers longer than this many bytes (NAMEDATALEN - 1).
_IDENTIFIER_BYTES = 63

# PostgreSQL: BEGIN and the two reads every broker transaction starts with, the catalog
# version and the earliest dialog timer and lifetime (``scheduler.earliest_due``), sent as
# one simple query (one round trip; text results: the moments as microseconds since the
# epoch, rounded down). The reads are a statement prepared on the server once per
# connection (``_PREPARE``, in the first BEGIN's query): a simple query is parsed and
# planned every time, which costs more than the round trip it saves.
_ENDPOINTS_TABLE = ConversationEndpoint.__tablename__
_BEGIN_STATEMENT = "broker_begin"
_PREPARE = (
    f"PREPARE {_BEGIN_STATEMENT} AS SELECT catalog_version,"
    f" floor(extract(epoch FROM (SELECT min(dialog_timer) FROM {_ENDPOINTS_TABLE})) * 1000000)::bigint,"
    f" floor(extract(epoch FROM (SELECT min(lifetime) FROM {_ENDPOINTS_TABLE})) * 1000000)::bigint"
    f" FROM {BrokerDatabase.__tablename__}; "
).encode()
_BEGIN_AND_READ = f"BEGIN; EXECUTE {_BEGIN_STATEMENT}".encode()
_PREPARED_ON = "broker_begin_prepared"  # the key, in a connection's info, of the driver connection prepared
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The earliest due moment read at BEGIN stands in for the one the transaction's first
# RECEIVE would read (``receiving.fire_due_work``) until a group lock is taken
# (``_due_read``), and never longer than this after BEGIN: a timer another transaction
# commits after it is seen by the RECEIVEs that follow.
_DUE_HORIZON = timedelta(milliseconds=50)
_BEGUN = "broker_begun"  # the key, in a connection's info, of the number of its BEGIN
_begins = itertools.count(1)


class PostgresBackend(Backend):
    name = "postgresql"
    row_locks = True
    snapshot_stays_current = False
    groups_commits = False

    session_grace = SESSION_GRACE_S

    def __init__(self) -> None:
        self._listener: _Listener | None = None
        self._lock = threading.Lock()
        self._sessions: dict[int, _HeldSession] = {}  # the runtime sessions open in this process

    def configure(self, engine: Engine) -> None:
        """READ COMMITTED, the server's default: each statement sees the latest commits."""

    def changes(self, conn: Connection) -> int | None:
        return None  # every commit notifies (pg_notify is sent only by those that enqueue)

    def data_version(self, conn: Connection) -> int | None:
        """PostgreSQL: the number of the BEGIN that has just primed the connection's buffer
        (:meth:`begin_on_driver`), taken once; else None: every transaction reads afresh
        (and takes its row locks)."""
        begun: int | None = conn.info.pop(_BEGUN, None)
        return begun

    def begin_on_driver(self, conn: Connection, *, company: bool = False) -> bool:
        """PostgreSQL: ``BEGIN`` and the reads every transaction starts with (the catalog
        version, the earliest timer or lifetime due) in one simple query, one round trip
        (psycopg would send BEGIN on its own and wait for it). psycopg then sees the
        transaction open and sends no BEGIN of its own; its commit and rollback end it.

        What was read primes the connection's buffer (``broker.storage.pending``), which
        the transaction then takes as known (:meth:`data_version`): no other read of the
        catalog version, and none of the earliest due moment by the first verb, as long as
        it lies more than ``_DUE_HORIZON`` ahead (a group lock ends its use: ``_due_read``).
        Every row kept from earlier transactions is dropped.

        False (SQLAlchemy begins, psycopg sends its own BEGIN) where the driver's
        connection has its own transaction settings (isolation level, read only,
        deferrable, autocommit) or is not idle.
        """
        driver: Any = conn.connection.dbapi_connection
        pgconn = driver.pgconn
        psycopg = _psycopg()
        if (driver.autocommit or driver.isolation_level is not None or driver.read_only is not None
                or driver.deferrable is not None or pgconn.transaction_status != psycopg.pq.TransactionStatus.IDLE):
            return False
        info = conn.info
        prepared = info.get(_PREPARED_ON) is driver
        query = _BEGIN_AND_READ if prepared else _PREPARE + _BEGIN_AND_READ
        try:
            row = _simple_query(driver, query)
        except psycopg.errors.DuplicatePreparedStatement:  # prepared before this info was kept
            row = _simple_query(driver, _BEGIN_AND_READ)
        except psycopg.errors.InvalidSqlStatementName:  # deallocated meanwhile (DISCARD ALL)
            if not prepared:
                raise
            row = _simple_query(driver, b"ROLLBACK; " + _PREPARE + _BEGIN_AND_READ)
        info[_PREPARED_ON] = driver
        version, timer, lifetime = (row.get_value(0, i) for i in range(3))
        moments = [_EPOCH + timedelta(microseconds=int(m)) for m in (timer, lifetime) if m is not None]
        kept = pending(conn)
        kept.forget()
        kept.catalog_version = int(version)
        kept.next_due = min([*moments, datetime.now(UTC) + _DUE_HORIZON])
        kept.data_version = conn.info[_BEGUN] = next(_begins)
        return True

    def begin_snapshot(self, conn: Connection) -> None:
        """PostgreSQL: REPEATABLE READ, READ ONLY: one snapshot for every statement (MVCC
        readers never wait for writers)."""
        conn.begin()
        conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

    def database_key(self, engine: Engine) -> str:
        return engine.url.render_as_string(hide_password=True)

    def let_go(self, engine: Engine) -> None:
        """PostgreSQL: nothing is kept open beside the connections."""

    @contextmanager
    def session(self, engine: Engine) -> Iterator[int]:
        """PostgreSQL: a number of the runtime's own, held as a session advisory lock
        (``pg_advisory_lock(RUNTIME_LOCKS, number)``) on a connection the runtime keeps
        open, outside any transaction, for its whole life. The server releases the lock
        when that connection ends, however the runtime ends (killed too) and on whatever
        host it runs; unlike a backend process id, which the server gives to a later
        session, the number is never taken while rows carrying it remain.

        The number is drawn at random; one whose lock another runtime holds, or that rows
        left by an ended runtime still carry, is drawn again.

        The connection can be lost while the runtime runs (terminated, idle timeout,
        network, server restart), and the lock with it: ``renew_session`` finds that out
        and takes a number again.
        """
        number, driver = _take_session(engine)
        held = _HeldSession(number, driver)
        with self._lock:
            self._sessions[number] = held
        try:
            yield number
        finally:
            with self._lock:
                self._sessions.pop(held.number, None)
            _close_quietly(held.driver)

    def renew_session(self, engine: Engine, number: int) -> int | None:
        """PostgreSQL: one round trip on the session's connection; None while it is alive
        (its lock is held then). Once it is lost, the number is taken again on a new
        connection, the same number if nobody holds it (another runtime that finds it
        ended holds it until its transaction ends: ``claim_ended_sessions``), else a new
        one; the number now held is returned. Raises while no connection can be opened
        (called again, it tries again)."""
        with self._lock:
            held = self._sessions.get(number)
        if held is None:
            return None
        try:
            if not held.driver.closed:
                held.driver.execute("SELECT 1").fetchone()
                return None
        except Exception as exc:  # noqa: BLE001 - whatever the driver raises: the connection is gone
            log.warning("runtime session %d: its connection was lost (%s); taking the session again",
                        number, str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
        _close_quietly(held.driver)
        new_number, driver = _take_session(engine, number)
        with self._lock:
            self._sessions.pop(number, None)
            held.number, held.driver = new_number, driver
            self._sessions[new_number] = held
        return new_number

    def ended_sessions(self, conn: Connection, sessions: list[int]) -> list[int]:
        """PostgreSQL: sessions whose advisory lock nobody holds (``pg_locks`` of this
        database), read in the caller's transaction without taking any lock."""
        if not sessions:
            return []
        held = set(conn.execute(_HELD_SESSIONS, {"sessions": sessions, "namespace": RUNTIME_LOCKS}).scalars())
        return [number for number in sessions if number not in held]

    def claim_ended_sessions(self, conn: Connection, sessions: list[int]) -> list[int]:
        """PostgreSQL: those of ``sessions`` whose advisory lock nobody holds, each taken
        by the caller's transaction until it ends (``pg_try_advisory_xact_lock``): a
        runtime that lost its session connection cannot take its number again while the
        caller deletes its rows, and takes another (then restores its rows) instead."""
        inside = [number for number in sessions if 1 <= number <= _MAX_SESSION]
        claimed = set(conn.execute(_CLAIM_SESSIONS, {"sessions": inside, "namespace": RUNTIME_LOCKS}).scalars()) \
            if inside else set()
        return [number for number in sessions if number in claimed or number not in inside]

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
        """PostgreSQL: any relation of the current schema (tables, views, indexes and
        sequences share one namespace)."""
        found = conn.execute(text(
            "SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "WHERE lower(c.relname) = lower(:n) AND n.nspname = current_schema()"
        ), {"n": name})
        return found.first() is not None

    def lock_group(self, conn: Connection, group_id: uuid.UUID) -> None:
        _due_read(conn)
        _LOCK_GROUP.all(conn, p_group=group_id)

    def lock_group_of(self, conn: Connection, handle: uuid.UUID) -> uuid.UUID | None:
        """PostgreSQL: the same statement reads the conversation's endpoint rows after
        the lock, locked, and keeps them for the transaction (``broker.storage.pending``),
        where ``endpoints.find_endpoint`` looks first: one round trip instead of two."""
        _due_read(conn)
        rows = _LOCK_GROUP_AND_ENDPOINTS_OF.all(conn, p_handle=handle)
        if not rows:
            return None
        kept = pending(conn)
        for row in rows:
            if row[1] is not None:
                kept.keep_read(Endpoint(*row[1:]))
        return rows[0][0]  # type: ignore[no-any-return]

    def next_ready(self, conn: Connection, statements: QueueStatements) -> tuple[Any, ...] | None:
        """PostgreSQL: one statement locks the first group nobody holds, in priority and
        age order (``FOR UPDATE SKIP LOCKED``), and its first message, read after the lock
        (``queue_tables.pick_group``); again while the message it picked was taken meanwhile."""
        _due_read(conn)
        while True:
            picked = statements.pick_group.first(conn)
            if picked is None or picked[1] is not None:
                return picked

    def take_next_conversation_rows(self, conn: Connection, statements: QueueStatements, top: int | None,
                                    *, retention: bool, queue_id: int) -> TakenRows:
        """PostgreSQL: one statement locks the group, takes the rows in their latest
        versions and resets the poison count (``queue_tables.take_next``); again while
        the rows it read were taken meanwhile, the group it locked staying locked."""
        _due_read(conn)
        statement = statements.mark_next if retention else statements.take_next
        while True:
            rows = statement.all(conn, p_top=top, p_queue=queue_id)
            if not rows:
                return TakenRows([], False)
            if rows[0][2] is not None:
                return TakenRows([row[2:] for row in rows], bool(rows[0][1]))

    def enqueued(self, conn: Connection, queue_id: int) -> None:
        """PostgreSQL: ``pg_notify``, held back with the transaction's other writes (one
        round trip with them); PostgreSQL delivers it at commit either way."""
        _NOTIFY_HELD.defer(pending(conn), (str(queue_id),))

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
    def watching(self, engine: Engine, notifier: QueueNotifier) -> Iterator[CommitWatch]:
        """PostgreSQL: the process's listener, opened again at each mark when it failed;
        while it cannot be opened (the server is unreachable) the runtime polls."""
        failing = False

        def listen() -> None:
            nonlocal failing
            try:
                self.start_listening(engine, notifier)
            except Exception as exc:  # noqa: BLE001 - whatever the driver raises: polled meanwhile
                if not failing:  # once per outage
                    log.warning("cannot open the LISTEN connection (%s); polling until it opens", exc)
                failing = True
            else:
                failing = False
        yield CommitWatch(notifier, None, listen)


class _HeldSession:
    """A runtime session's number and the autocommit connection holding its lock."""

    def __init__(self, number: int, driver: Any) -> None:
        self.number = number
        self.driver = driver


def _take_session(engine: Engine, wanted: int | None = None) -> tuple[int, Any]:
    """A runtime session number locked on a new connection of its own (autocommit,
    detached from the pool): ``wanted`` if its lock can be had, else one drawn at random
    whose lock nobody holds and that no task row carries."""
    raw = engine.raw_connection()
    driver: Any = raw.driver_connection
    raw.detach()  # closed for good at the end, not handed back to the pool
    try:
        driver.autocommit = True  # a check is one round trip; the lock is a session's anyway
        number = wanted
        while True:
            if number is not None:
                taken = driver.execute("SELECT pg_try_advisory_lock(%s::int, %s::int)",
                                       (RUNTIME_LOCKS, number)).fetchone()
                if taken and taken[0]:
                    if number == wanted:
                        return number, driver  # its own rows carry it
                    if driver.execute("SELECT 1 FROM sb_activated_tasks WHERE process_id = %s LIMIT 1",
                                      (number,)).fetchone() is None:
                        return number, driver
                    driver.execute("SELECT pg_advisory_unlock(%s::int, %s::int)", (RUNTIME_LOCKS, number))
            number = secrets.randbelow(_MAX_SESSION) + 1
    except BaseException:
        _close_quietly(driver)
        raise


def _close_quietly(driver: Any) -> None:
    try:
        driver.close()
    except Exception:  # noqa: BLE001 - a lost connection may fail to close; it is gone either way
        pass


def _simple_query(driver: Any, query: bytes) -> Any:
    """Run ``query`` (statements separated by semicolons) as one simple query, one round
    trip; the last statement's result. The first that fails raises, as psycopg would."""
    psycopg = _psycopg()
    pgconn = driver.pgconn
    with driver.lock:
        pgconn.send_query(query)
        results = driver.wait(psycopg.generators.execute(pgconn))
    for result in results:
        if result.status == psycopg.pq.ExecStatus.FATAL_ERROR:
            raise psycopg.errors.error_from_result(result, encoding=pgconn._encoding)
    return results[-1]


def _due_read(conn: Connection) -> None:
    """The earliest due moment read at BEGIN (``begin_on_driver``) has served the first
    verb of the transaction, which fires due work before it locks a group: from now on
    a RECEIVE reads it again, seeing the timers other transactions commit meanwhile."""
    kept = pending(conn)
    kept.next_due = None


@functools.cache
def _psycopg() -> Any:
    """psycopg with the modules ``begin_on_driver`` uses (imported once, on first use:
    SQLite alone does not need psycopg installed)."""
    import psycopg
    import psycopg.errors
    import psycopg.generators
    import psycopg.pq

    return psycopg


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
        try:
            self._connection.autocommit = True
            self._connection.execute(f"LISTEN {CHANNEL}")
        except BaseException:
            connection.close()  # detached: nobody else would
            raise
        self._notifier = notifier
        self._stopping = threading.Event()
        self._failed = False  # set before the waiters are woken: they replace this listener
        self._thread = threading.Thread(target=self._run, name="broker-listen", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._failed

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                for notice in self._connection.notifies(timeout=0.5):
                    if notice.payload == ALL_QUEUES:
                        self._notifier.notify_all()
                    else:
                        self._notifier.notify({int(notice.payload)})
        except Exception as exc:
            if not self._stopping.is_set():
                self._failed = True
                # One line, no traceback: a lost connection is an event, not a bug.
                log.warning("LISTEN connection failed (%s); the next wait opens another", exc)
                self._notifier.notify_all()
        finally:
            self._connection.close()

    def stop(self) -> None:
        """Stop listening, and wake every waiter: a wait under way would otherwise hear of
        no commit until its timeout. Each looks again and opens a new listener (the
        object stays usable after ``Broker.dispose``)."""
        self._stopping.set()
        self._thread.join(5)
        self._notifier.notify_all()

"""Hot-path writes held back inside one transaction, and the endpoints it has read.

A transaction that sends a hundred messages on one dialog would otherwise read the two
endpoints and update their sequence numbers a hundred times each. Instead:

* endpoint rows read by handle are kept for the rest of the transaction, and sequence
  and state changes are applied to the kept rows and written once;
* message inserts are queued and written with one ``executemany`` per queue table
  (on PostgreSQL also RECEIVE's deletes and the ``pg_notify`` of an enqueue; there the
  held-back writes go in one pipeline with the statement that flushes them: one round
  trip).

Both are flushed before *any* other statement runs on the connection — the broker's own
(``Prepared`` calls ``flush``) or anybody's through SQLAlchemy (an engine event) — and
before the commit. After a statement the broker does not control, the kept rows are
dropped, since it may have changed them. Rollback discards everything.

The buffer is made once per DBAPI connection, so a transaction can hold on to it
(``TxContext.kept``) instead of looking it up through the connection for every message.

What it knows can outlive a commit. Where the backend can tell that no other connection
has committed since (SQLite's ``PRAGMA data_version``), the next transaction on the same
connection starts from the kept endpoint rows, the catalog version and the moment the
next timer or lifetime falls due, instead of reading them again: nothing can have
changed them. A rollback, a statement the broker does not control, or a commit by any
other connection drops all of it.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, event
from sqlalchemy.engine import Connection

if TYPE_CHECKING:
    from broker.storage.rows import Endpoint

INFO_KEY = "broker_pending"  # where the buffer lives in ``Connection.info``


class Pending:
    """One connection's held-back writes (one transaction) and what it knows of the
    database: endpoint rows, catalog version, next due moment (see the module doc)."""

    __slots__ = ("inserts", "endpoints", "by_conversation", "dirty", "data_version", "catalog_version",
                 "next_due", "_began_at")

    def __init__(self) -> None:
        # statement (a ``Prepared``) -> rows of values, in arrival order
        self.inserts: dict[Any, list[tuple[Any, ...]]] = {}
        # Keyed by ``UUID.int``: hashing a UUID object runs Python code, and these
        # dictionaries are looked up several times per message sent.
        self.endpoints: dict[int, Endpoint] = {}  # by handle
        self.by_conversation: dict[tuple[int, bool], Endpoint] = {}  # by (conversation id, is_initiator)
        self.dirty: dict[int, Endpoint] = {}  # by handle: to write back
        # The backend's change counter when what is kept was last known current (None:
        # unknown), the catalog version committed as of then, and the earliest moment a
        # dialog timer or lifetime can fall due (None: unknown).
        self.data_version: int | None = None
        self.catalog_version: int | None = None
        self.next_due: datetime | None = None
        self._began_at: int | None = None

    def keep(self, endpoint: Endpoint) -> Endpoint:
        self.endpoints[endpoint.conversation_handle.int] = endpoint
        self.by_conversation[(endpoint.conversation_id.int, endpoint.is_initiator)] = endpoint
        return endpoint

    def changed(self, endpoint: Endpoint) -> None:
        """``endpoint`` was changed in place: write it back, and keep it, so that every
        endpoint with a held-back change is served from here (one made in this
        transaction, or kept before a foreign statement dropped the kept rows, is not
        kept yet)."""
        handle = endpoint.conversation_handle.int
        if self.endpoints.get(handle) is not endpoint:
            self.keep(endpoint)
        self.dirty[handle] = endpoint

    def keep_read(self, endpoint: Endpoint) -> Endpoint:
        """Keep a row just read, unless a (possibly changed) copy is kept already."""
        known = self.endpoints.get(endpoint.conversation_handle.int)
        return self.keep(endpoint) if known is None else known

    def forget(self) -> None:
        """Drop every row and fact kept: something may have changed them."""
        self.endpoints.clear()
        self.by_conversation.clear()
        self.data_version = self.catalog_version = self.next_due = None

    def begin(self, data_version: int | None) -> None:
        """A transaction begins: keep what is known only if ``data_version`` says no
        other connection has committed since it was learnt (None: cannot tell)."""
        self.inserts = {}
        self.dirty.clear()
        if data_version is None or data_version != self.data_version:
            self.forget()
        # Current again only once this transaction has committed (``committed``).
        self.data_version = None
        self._began_at = data_version

    def committed(self, catalog_version: int) -> None:
        """This connection's transaction committed, on catalog ``catalog_version``:
        what is kept now is what the database holds."""
        self.data_version = self._began_at
        self.catalog_version = catalog_version

    def holds_writes(self) -> bool:
        return bool(self.inserts or self.dirty)

    def clear(self) -> None:
        self.inserts = {}
        self.dirty.clear()
        self.forget()


def pending(conn: Connection) -> Pending:
    """This connection's buffer (made on first use, then the same object for good)."""
    info = conn.info
    buffer: Pending | None = info.get(INFO_KEY)
    if buffer is None:
        buffer = info[INFO_KEY] = Pending()
    return buffer


def flush(conn: Connection) -> None:
    """Write what is held back (cheap when nothing is).

    PostgreSQL: one round trip, one statement (``statements.held_as_one``) or, for
    many rows, one ``executemany`` per statement in one pipeline (psycopg would sync
    after each); a failing write raises here all the same.
    """
    buffer: Pending | None = conn.info.get(INFO_KEY)
    if buffer is None or not buffer.holds_writes():
        return
    if conn.dialect.name == "postgresql":
        _flush_on_postgres(conn, buffer)
    else:
        write_held(conn, buffer)


def _flush_on_postgres(conn: Connection, buffer: Pending) -> None:
    # One statement, without a pipeline: writes and COMMIT in one pipeline would save the
    # COMMIT's round trip, but psycopg's pipeline costs more CPU than that round trip.
    from broker.storage.statements import _cursor, held_as_one  # statements imports this module

    together = held_as_one(conn, buffer)
    if together is not None:
        _cursor(conn).execute(*together)
        return
    with conn.connection.dbapi_connection.pipeline():  # type: ignore[union-attr]
        write_held(conn, buffer)


def write_held(conn: Connection, buffer: Pending) -> None:
    """``flush`` without a pipeline of its own (PostgreSQL: into the caller's)."""
    inserts, buffer.inserts = buffer.inserts, {}
    for statement, rows in inserts.items():
        statement.execute_many(conn, rows)
    if buffer.dirty:
        from broker.storage.rows import write_back  # rows imports this module (through statements)

        dirty, buffer.dirty = buffer.dirty, {}
        write_back(conn, list(dirty.values()))


def discard(conn: Connection) -> None:
    """Drop whatever the buffer holds (the transaction began or ended)."""
    if conn.invalidated:
        return  # the connection is lost, and its info (the buffer too) is cleared before any reuse
    buffer: Pending | None = conn.info.get(INFO_KEY)
    if buffer is not None:
        buffer.clear()


def install(engine: Engine) -> None:
    """Flush before SQLAlchemy runs anything on ``engine`` and before each commit."""
    if event.contains(engine, "before_cursor_execute", _before_statement):
        return
    event.listen(engine, "before_cursor_execute", _before_statement)
    event.listen(engine, "commit", _before_commit)
    event.listen(engine, "rollback", _on_rollback)


def _before_statement(conn: Connection, *_args: Any) -> None:
    buffer: Pending | None = conn.info.get(INFO_KEY)
    if buffer is not None:
        flush(conn)
        buffer.forget()  # the statement may change endpoints behind the kept rows


def _before_commit(conn: Connection) -> None:
    # Commits through SQLAlchemy: a joined session's or connection's, whose next
    # transaction may begin without the broker seeing it, or one in which application
    # SQL ran. Nothing of them is kept; the broker's own commits on the driver keep it.
    flush(conn)
    discard(conn)


def _on_rollback(conn: Connection) -> None:
    discard(conn)

"""Hot-path writes held back inside one transaction, and the endpoints it has read.

A transaction that sends a hundred messages on one dialog would otherwise read the two
endpoints and update their sequence numbers a hundred times each. Instead:

* endpoint rows read by handle are kept for the rest of the transaction, and sequence
  and state changes are applied to the kept rows and written once;
* message inserts are queued and written with one ``executemany`` per queue table.

Both are flushed before *any* other statement runs on the connection — the broker's own
(``Prepared`` calls ``flush``) or anybody's through SQLAlchemy (an engine event) — and
before the commit. After a statement the broker does not control, the kept rows are
dropped, since it may have changed them. Rollback discards everything.

The buffer is made once per DBAPI connection and emptied when a transaction begins or
ends, so a transaction can hold on to it (``TxContext.kept``) instead of looking it up
through the connection for every message.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, event
from sqlalchemy.engine import Connection

if TYPE_CHECKING:
    from broker.endpoints import Endpoint

INFO_KEY = "broker_pending"  # where the buffer lives in ``Connection.info``


class Pending:
    """One connection's held-back writes and kept endpoint rows (one transaction)."""

    __slots__ = ("inserts", "endpoints", "by_conversation", "dirty")

    def __init__(self) -> None:
        # statement (a ``Prepared``) -> parameter sets, in arrival order
        self.inserts: dict[Any, list[dict[str, Any]]] = {}
        self.endpoints: dict[uuid.UUID, Endpoint] = {}  # by handle
        self.by_conversation: dict[tuple[uuid.UUID, bool], uuid.UUID] = {}
        self.dirty: dict[uuid.UUID, Endpoint] = {}  # by handle: to write back

    def keep(self, endpoint: Endpoint) -> Endpoint:
        self.endpoints[endpoint.conversation_handle] = endpoint
        self.by_conversation[(endpoint.conversation_id, endpoint.is_initiator)] = endpoint.conversation_handle
        return endpoint

    def keep_read(self, endpoint: Endpoint) -> Endpoint:
        """Keep a row just read, unless a (possibly changed) copy is kept already."""
        known = self.endpoints.get(endpoint.conversation_handle)
        return self.keep(endpoint) if known is None else known

    def forget(self) -> None:
        self.endpoints.clear()
        self.by_conversation.clear()

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
    """Write what is held back (cheap when nothing is)."""
    buffer: Pending | None = conn.info.get(INFO_KEY)
    if buffer is None or not buffer.holds_writes():
        return
    inserts, buffer.inserts = buffer.inserts, {}
    for statement, rows in inserts.items():
        statement.execute_many(conn, rows)
    if buffer.dirty:
        from broker.endpoints import write_back  # endpoints imports this module

        dirty, buffer.dirty = buffer.dirty, {}
        write_back(conn, list(dirty.values()))


def discard(conn: Connection) -> None:
    """Drop whatever the buffer holds (the transaction began or ended)."""
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
    flush(conn)
    discard(conn)


def _on_rollback(conn: Connection) -> None:
    discard(conn)

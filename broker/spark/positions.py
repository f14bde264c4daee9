"""A stream's offsets: queuing orders no transaction can still add a row below.

SQLite runs one writer at a time, and it draws queuing orders above every committed
one, so the committed maximum is safe at once. PostgreSQL draws sequence values before
commit and commits in any order: a transaction holding order 5 may commit after one
holding order 6. An offset must never pass a queuing order that a running transaction
can still commit, or that message would be skipped. ``SafeOffsets`` therefore offers a
maximum only once every transaction that was writing to the queue when it was read has
ended, and the previous safe offset meanwhile; it never waits for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import and_, select
from sqlalchemy.engine import Connection

from broker.spark.dialects import dialect_for
from broker.spark.reading import READY, queue_named
from broker.storage.queue_tables import queue_table


@dataclass(slots=True)
class SafeOffsets:
    """The safe high-water of one queue, kept across ``latestOffset`` calls of a query."""

    queue: str
    safe: int = 0
    # (a maximum read, the transactions writing to the queue right after it was read)
    pending: tuple[int, frozenset[str]] | None = None

    def advance(self, conn: Connection) -> int:
        """Read the queue's maximum and the writers in flight; return the safe offset.

        The maximum is read before the writers: a transaction that drew an order below
        it and has not committed is still writing, so it is in the set read after.
        """
        table = queue_table(queue_named(conn, self.queue)[1].table_name)
        top = int(conn.execute(select(table.c.queuing_order).order_by(table.c.queuing_order.desc()).limit(1))
                  .scalar() or 0)
        writers = dialect_for(conn).writers_in_flight(conn, table.name)
        if self.pending is not None and self.pending[1].isdisjoint(writers):
            self.safe = max(self.safe, self.pending[0])  # those writers have all ended
            self.pending = None
        if not writers:
            self.safe = max(self.safe, top)
            self.pending = None
        elif self.pending is None:
            self.pending = (top, writers)
        return self.safe


def nth_ready(conn: Connection, queue: str, after: int, upto: int, rows: int) -> int:
    """The queuing order of the ``rows``-th ready message in (after, upto], or ``upto``."""
    table = queue_table(queue_named(conn, queue)[1].table_name)
    order = table.c.queuing_order
    found = conn.execute(
        select(order).where(and_(table.c.status == READY, order > after, order <= upto))
        .order_by(order).offset(rows - 1).limit(1)
    ).scalar()
    return upto if found is None else int(found)

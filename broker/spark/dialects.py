"""What the Spark data source does differently on SQLite and PostgreSQL.

Only this module branches on the dialect (the broker's own seam, ``broker.storage.backends``,
covers transactions, locks and wake-ups; this one covers what Spark adds):

* the partition of a conversation group: the last byte of its id modulo the number of
  partitions, computed in SQL so each partition reads only its own groups;
* which transactions may still add rows to a queue below its highest queuing order
  (PostgreSQL hands out sequence values before commit, and commits out of order);
* the column types of a catalog view.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, func, inspect, literal, text
from sqlalchemy.engine import Connection

_HEX = "0123456789abcdef"


def bucket_of(group_id: uuid.UUID, partitions: int) -> int:
    """The partition of a conversation group (what ``bucket`` computes in SQL)."""
    return group_id.bytes[15] % partitions


class SQLiteDialect:
    name = "sqlite"

    def bucket(self, group_column: ColumnElement[Any], partitions: int) -> ColumnElement[int]:
        """``bucket_of`` in SQL: ids are stored as canonical lowercase text here."""
        high = func.instr(literal(_HEX), func.substr(group_column, 35, 1))
        low = func.instr(literal(_HEX), func.substr(group_column, 36, 1))
        result: ColumnElement[int] = (high * 16 + low - 17) % partitions
        return result

    def writers_in_flight(self, conn: Connection, table_name: str) -> frozenset[str]:
        """Transactions that may still commit rows to ``table_name``.

        SQLite has one writer at a time, and it draws queuing orders above every
        committed one: a committed maximum is final.
        """
        return frozenset()

    def view_columns(self, conn: Connection, view: str) -> Sequence[Any]:
        """Reflected columns of a catalog view (computed columns have no type here)."""
        return inspect(conn).get_columns(f"sys.{view}")


class PostgresDialect(SQLiteDialect):
    name = "postgresql"

    def bucket(self, group_column: ColumnElement[Any], partitions: int) -> ColumnElement[int]:
        result: ColumnElement[int] = func.get_byte(func.uuid_send(group_column), 15) % partitions
        return result

    def writers_in_flight(self, conn: Connection, table_name: str) -> frozenset[str]:
        """The virtual transaction ids holding a write lock on ``table_name``.

        An INSERT takes its ROW EXCLUSIVE lock before it draws the sequence value and
        keeps it to the end of the transaction, so every transaction that holds a
        queuing order it has not committed yet is in this set (a transaction id from
        ``pg_current_snapshot()`` would miss one that drew a value but has not yet
        been assigned an xid). Fast-path locks are listed in ``pg_locks`` too.
        """
        rows = conn.execute(text(
            "SELECT virtualtransaction FROM pg_locks WHERE locktype = 'relation' "
            "AND relation = CAST(:table AS regclass) AND mode = 'RowExclusiveLock' AND granted "
            "AND pid IS DISTINCT FROM pg_backend_pid()"
        ), {"table": table_name})
        return frozenset(row[0] for row in rows)

    def view_columns(self, conn: Connection, view: str) -> Sequence[Any]:
        return inspect(conn).get_columns(view, schema="sys")


def dialect_for(conn: Connection) -> SQLiteDialect:
    return PostgresDialect() if conn.dialect.name == "postgresql" else SQLiteDialect()

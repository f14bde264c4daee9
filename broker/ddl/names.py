"""Object names compared as SQL Server's default collation compares them: without case.

Routes, remote service bindings, broker priorities, XML schema collections and endpoints
are found by name case-insensitively, as queues are (``Catalog.queue_named``); service,
contract and message type names stay case-sensitive, as SQL Server compares them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row, Table, select

from broker.storage.context import TxContext


def row_named(ctx: TxContext, table: Table, name: str) -> Row[Any] | None:
    """The row of ``table`` whose ``name`` column is ``name``, in any case.

    These tables hold a handful of rows: they are read whole and compared in Python, so
    that SQLite (whose ``lower`` folds ASCII only) and PostgreSQL agree on every name.
    """
    folded = name.casefold()
    return next((row for row in ctx.conn.execute(select(table)) if row.name.casefold() == folded), None)

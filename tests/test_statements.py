"""SQLite takes held-back message rows as multi-row INSERTs: in order, and within limits.

A statement holds at most 64 rows and, unless it holds one row, at most 1 MiB of message
bodies: SQLite copies every value bound to a statement, so a large batch of large
messages must not be copied all at once.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from broker.storage.engine import create_broker_engine
from broker.storage.queue_tables import queue_statements, queue_table

TABLE = "queue_messages_1"
KIB = 1024


class RecordingCursor:
    """A real sqlite3 cursor that records how many rows each statement inserted."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor
        self.rows_per_statement: list[int] = []
        self.body_bytes_per_statement: list[int] = []

    def execute(self, sql: str, parameters: list[Any]) -> None:
        rows = sql.count("), (") + 1
        self.rows_per_statement.append(rows)
        self.body_bytes_per_statement.append(sum(len(v) for v in parameters if isinstance(v, (bytes, memoryview))))
        self._cursor.execute(sql, parameters)

    def executemany(self, sql: str, parameters: list[Any]) -> None:
        for row in parameters:
            self.execute(sql, row)


@pytest.mark.parametrize("sizes", [
    [KIB] * 150,                               # small: 64, 64, 16, 4, 2
    [300 * KIB] * 40,                          # three to a MiB at most: pairs
    [KIB] * 10 + [2048 * KIB] + [KIB] * 10,    # one body over the budget goes alone
], ids=["small", "large", "one-huge"])
def test_rows_go_in_order_in_statements_of_bounded_size(tmp_path: Path, sizes: list[int]) -> None:
    engine = create_broker_engine(f"sqlite:///{tmp_path / 'rows.db'}")
    queue_table(TABLE).create(engine)
    group, handle, now = uuid.uuid4(), uuid.uuid4(), datetime.now(UTC)
    rows = [(1, 5, group, handle, n, 1, 1, 1, "N", bytes([n % 251]) * size, now, 2) for n, size in enumerate(sizes)]
    with engine.begin() as conn:
        compiled = queue_statements(TABLE).insert._compiled(conn.dialect)
        cursor = RecordingCursor(conn.connection.dbapi_connection.cursor())  # type: ignore[union-attr]
        compiled.execute_many(cursor, [compiled.parameters(row) for row in rows])
    assert sum(cursor.rows_per_statement) == len(sizes)
    assert len(cursor.rows_per_statement) < len(sizes)  # several rows per statement
    for count, body_bytes in zip(cursor.rows_per_statement, cursor.body_bytes_per_statement, strict=True):
        assert count <= 64
        assert count == 1 or body_bytes <= 1024 * KIB
    table = queue_table(TABLE)
    with engine.connect() as conn:
        stored = conn.execute(select(table.c.message_sequence_number, table.c.message_body)
                              .order_by(table.c.queuing_order)).all()
    assert [(n, len(body)) for n, body in stored] == list(enumerate(sizes))
    engine.dispose()

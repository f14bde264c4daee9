"""Reading a queue (or a catalog view) for Spark, in Arrow record batches.

Reads take no locks: on SQLite a plain connection reads the WAL snapshot without
``BEGIN IMMEDIATE``; on PostgreSQL each statement reads committed rows. Each Spark task
opens its own engine and closes it when done (connections cannot travel to executors).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlalchemy import Engine, Select, String, Table, and_, cast, create_engine, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from broker.conversations.receiving import RECEIVE_OUTPUT_STATUS
from broker.errors import BrokerError
from broker.spark.columns import RECEIVE_COLUMNS, arrow_schema, record_batch
from broker.spark.dialects import dialect_for
from broker.storage.catalog import Catalog, QueueInfo, load_catalog
from broker.storage.engine import existing_database
from broker.storage.queue_tables import queue_table

BATCH_ROWS = 10_000
READY = 1
RECEIVE_SCHEMA = arrow_schema(RECEIVE_COLUMNS)


@contextmanager
def reading(url: str) -> Iterator[Connection]:
    """A connection for reads only, on an engine of its own (closed on exit). The URL is
    checked as ``broker.connect`` checks it (59011, 5120), and a SQLite file that is not
    there is 911: a read creates no database."""
    engine: Engine = create_engine(existing_database(url, "broker.connect"), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def queue_named(conn: Connection, name: str) -> tuple[Catalog, QueueInfo]:
    """The catalog and the queue called ``name``: 208 when there is no such queue, or no
    broker catalog in the database at all."""
    try:
        catalog = load_catalog(conn)
    except DBAPIError as exc:
        if not no_such_table(exc):
            raise
        raise BrokerError(208, f"Invalid object name '{name}'.") from None
    queue = catalog.queue_named(name)
    if queue is None:
        raise BrokerError(208, f"Invalid object name '{name}'.")
    return catalog, queue


def no_such_table(exc: DBAPIError) -> bool:
    """Whether the database said a table is not there (SQLite's text, PostgreSQL's 42P01)."""
    return "no such table" in str(exc.orig) or getattr(exc.orig, "sqlstate", None) == "42P01"


@dataclass(frozen=True, slots=True)
class QueueSlice:
    """Which rows of a queue one Spark partition reads.

    ``bucket`` of ``partitions``: the conversation groups whose id ends in a byte equal
    to ``bucket`` modulo ``partitions``, so a group never spans partitions. ``after`` and
    ``upto`` bound the queuing order (a stream's micro-batch); ``ready_only`` keeps
    status 1, the rows a RECEIVE would take.
    """

    queue: str
    bucket: int = 0
    partitions: int = 1
    after: int | None = None
    upto: int | None = None
    ready_only: bool = False


def read_slice(url: str, part: QueueSlice) -> Iterator[pa.RecordBatch]:
    """The slice's rows with the RECEIVE columns, in queuing order.

    A conversation's messages are queued in sequence order (a dialog is never
    reordered on its way in), so queuing order keeps every conversation's order. Stream
    rows show status 0, as RECEIVE's output does; batch rows show the stored status.
    """
    with reading(url) as conn:
        catalog, queue = queue_named(conn, part.queue)
        table = queue_table(queue.table_name)
        query = _slice_query(conn, table, part)
        result = conn.execution_options(stream_results=True).execute(query)
        while rows := result.fetchmany(BATCH_ROWS):
            yield _receive_batch(catalog, rows, RECEIVE_OUTPUT_STATUS if part.ready_only else None)


def _slice_query(conn: Connection, table: Table, part: QueueSlice) -> Select[Any]:
    c = table.c
    conditions = []
    if part.partitions > 1:
        conditions.append(dialect_for(conn).bucket(c.conversation_group_id, part.partitions) == part.bucket)
    if part.after is not None:
        conditions.append(c.queuing_order > part.after)
    if part.upto is not None:
        conditions.append(c.queuing_order <= part.upto)
    if part.ready_only:
        conditions.append(c.status == READY)
    # Ids as text straight from the database (Spark wants strings).
    return (
        select(
            c.status, c.priority, c.queuing_order,
            cast(c.conversation_group_id, String), cast(c.conversation_handle, String),
            c.message_sequence_number, c.service_id, c.service_contract_id, c.message_type_id,
            c.validation, c.message_body, c.message_enqueue_time,
        )
        .where(and_(True, *conditions))
        .order_by(c.queuing_order)
    )


def _receive_batch(catalog: Catalog, rows: Sequence[Any], status: int | None) -> pa.RecordBatch:
    (stored, priority, order, group, handle, sequence, service_id, contract_id, type_id,
     validation, body, enqueued) = (list(column) for column in zip(*rows, strict=True))
    services, contracts, types = catalog.services, catalog.contracts, catalog.message_types
    return record_batch(RECEIVE_SCHEMA, [
        stored if status is None else [status] * len(rows), priority, order, group, handle, sequence,
        [services[i].name if i in services else "" for i in service_id], service_id,
        [contracts[i].name if i in contracts else "" for i in contract_id], contract_id,
        [types[i].name if i in types else "" for i in type_id], type_id,
        validation, body, enqueued,
    ])


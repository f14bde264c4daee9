"""RECEIVE on commit: a stream's committed offset takes its messages off the queue."""

from __future__ import annotations

from sqlalchemy import and_, select

from broker.conversations import poison, receiving
from broker.spark.reading import READY
from broker.storage.context import TxContext
from broker.storage.queue_tables import queue_statements, queue_table, take_rows


def receive_through(ctx: TxContext, queue_name: str, end: int) -> int:
    """RECEIVE every ready message of the queue with a queuing order up to ``end``.

    Runs in the caller's broker transaction, as RECEIVE does: the queue must be enabled
    (error 9617 otherwise); each conversation group is locked first (PostgreSQL: row
    locks in id order, waiting for a RECEIVE that holds one; SQLite: the write lock
    covers them); the rows are deleted, or set to status 0 under RETENTION, with
    RECEIVE's own statements, and the poison-message count starts again. Messages
    already received are not touched, so committing an offset again changes nothing.
    Returns how many messages it received.
    """
    queue = receiving.receivable_queue(ctx, queue_name)
    table = queue_table(queue.table_name)
    ready = and_(table.c.status == READY, table.c.queuing_order <= end)
    groups = ctx.conn.execute(select(table.c.conversation_group_id).where(ready).distinct()).scalars().all()
    for group_id in sorted(groups):
        ctx.state.backend.lock_group(ctx.conn, group_id)
    orders = ctx.conn.execute(select(table.c.queuing_order).where(ready)).scalars().all()
    if not orders:
        return 0
    take_rows(ctx.conn, queue_statements(queue.table_name), list(orders), retention=queue.retention)
    ctx.received_queues.add(queue.id)
    if queue.rollback_count:
        poison.reset_count(ctx, queue.id)
    return len(orders)

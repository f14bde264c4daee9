"""RECEIVE and GET CONVERSATION GROUP (one attempt; WAITFOR lives in the transaction).

Group selection (spec 2.3): the group holding the highest-priority ready message, ties
broken by the oldest such message, among the groups no other transaction holds; the
chosen group stays locked until the transaction ends (``broker.storage.backends``). A RECEIVE
that names a conversation or a group waits for that group's lock. Rows come from that group only: conversations by
priority then age, and inside a conversation a DialogTimer first, then an Error, then
the rest by ``message_sequence_number``. Every step is one index seek, so the cost of a
RECEIVE does not grow with the number of messages queued.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Row, func, select

from broker.conversations import endpoints as ep
from broker.conversations import poison, scheduler
from broker.conversations.messages import Message
from broker.errors import BrokerError, QueueDisabledError
from broker.storage.catalog import QueueInfo
from broker.storage.context import TxContext
from broker.storage.queue_tables import (
    QueueRow,
    QueueStatements,
    queue_statements,
    queue_table,
    serve_order_of,
    take_rows,
)

# What the status column shows in RECEIVE's result: 0, "received", as SQL Server's
# documentation says (the stored row is deleted, or set to 0 under RETENTION).
RECEIVE_OUTPUT_STATUS = 0


def receivable_queue(ctx: TxContext, name: str) -> QueueInfo:
    queue = ctx.catalog.queue_named(name)
    if queue is None:
        raise BrokerError(208, f"Invalid object name '{name}'.")
    if not queue.receive_enabled:
        raise QueueDisabledError(queue.name)
    return queue


def receive(
    ctx: TxContext,
    queue_name: str,
    top: int | None,
    conversation_handle: object | None,
    conversation_group_id: object | None,
) -> list[Message]:
    """Take up to ``top`` ready messages of one conversation group off the queue.

    The arguments come checked by the gate (``broker.arguments``): at most one WHERE.
    """
    queue = receivable_queue(ctx, queue_name)
    fire_due_work(ctx, queue)
    if top == 0:
        return []
    statements = queue_statements(queue.table_name)
    already = 0  # rows taken with the statement that picked the group
    count_reset: bool | None = None
    if conversation_handle is not None:
        endpoint = ep.lock_endpoint(ctx, conversation_handle)
        if ctx.catalog.services[endpoint.service_id].queue_id != queue.id:
            raise BrokerError(8426, handle=str(endpoint.conversation_handle).upper())
        rows = _conversation_rows(ctx, statements, endpoint.conversation_handle, top)
    elif conversation_group_id is not None:
        group_id = _named_group(ctx, queue, conversation_group_id)
        ctx.state.backend.lock_group(ctx.conn, group_id)
        rows = _group_rows(ctx, queue, statements, group_id, [], top)
    else:
        taken = ctx.state.backend.take_next_conversation_rows(
            ctx.conn, statements, top, retention=queue.retention, queue_id=queue.id)
        if not taken.rows:
            return []
        first = [QueueRow._make(row) for row in taken.rows]
        already, count_reset = len(first), taken.rollback_count_reset
        rows = _group_rows(ctx, queue, statements, first[0].conversation_group_id, first, top)
    if not rows:
        return []
    if len(rows) > already:
        take_rows(ctx.conn, statements, [r.queuing_order for r in rows[already:]], retention=queue.retention)
    ctx.received_queues.add(queue.id)
    if count_reset:  # reset with the rows it took (PostgreSQL: ``queue_tables.take_next``)
        ctx.catalog_changed()
    elif count_reset is None and (queue.rollback_count or not ctx.state.backend.snapshot_stays_current):
        poison.reset_count(ctx, queue.id)  # undone with this transaction if it rolls back
    return [message_from_row(ctx, r, RECEIVE_OUTPUT_STATUS) for r in rows]


def get_conversation_group(ctx: TxContext, queue_name: str) -> uuid.UUID | None:
    """The group RECEIVE would serve next, locked for this transaction; None if none."""
    queue = receivable_queue(ctx, queue_name)
    fire_due_work(ctx, queue)
    # Locked until the transaction ends (see ``broker.storage.backends``: on SQLite the write
    # lock covers every group; on PostgreSQL the first group no one else holds).
    first = ctx.state.backend.next_ready(ctx.conn, queue_statements(queue.table_name))
    return None if first is None else first[0]


def fire_due_work(ctx: TxContext, queue: QueueInfo) -> None:
    """Fire the queue's expired timers and lifetimes (the runtime does it on time).

    One look at the earliest deadline in the database usually shows nothing is due.
    Where no other transaction can commit meanwhile (SQLite), the connection keeps that
    moment while nothing can have moved it (``broker.storage.pending``); under READ COMMITTED
    another transaction may set an earlier timer while a WAITFOR holds this one open.
    """
    kept = ctx.kept
    now = ctx.now()
    if kept.next_due is not None and now < kept.next_due:
        return
    earliest = scheduler.earliest_due(ctx)
    if now < earliest:
        if ctx.state.backend.snapshot_stays_current:
            kept.next_due = earliest
        return
    scheduler.fire_due_timers(ctx, queue.id)
    scheduler.expire_lifetimes(ctx, queue.id)


def next_timer(ctx: TxContext, queue: QueueInfo) -> datetime | None:
    """The earliest timer or lifetime among the queue's open conversations."""
    e, g = ep.endpoints, ep.groups
    joined = select().select_from(e).join(g, g.c.conversation_group_id == e.c.conversation_group_id)
    timer = ctx.conn.execute(joined.add_columns(func.min(e.c.dialog_timer)).where(g.c.queue_id == queue.id)).scalar()
    lifetime = ctx.conn.execute(joined.add_columns(func.min(e.c.lifetime)).where(
        g.c.queue_id == queue.id, e.c.state.in_(("SO", "SI", "CO", "DI")))).scalar()
    present = [moment for moment in (timer, lifetime) if moment is not None]
    return min(present) if present else None


def _named_group(ctx: TxContext, queue: QueueInfo, value: object) -> uuid.UUID:
    try:
        group_id = value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except ValueError:
        raise BrokerError(8436, group=str(value)) from None
    group = ep.get_group(ctx, group_id)
    if group is None:
        raise BrokerError(8436, group=str(group_id).upper())
    if group.queue_id != queue.id:
        raise BrokerError(8440, group=str(group_id).upper(), queue=queue.name)
    return group_id


def _group_rows(
    ctx: TxContext, queue: QueueInfo, statements: QueueStatements, group_id: uuid.UUID,
    first: list[QueueRow], top: int | None,
) -> list[QueueRow]:
    """The group's ready rows: conversation by conversation, up to ``top``, after
    ``first`` (all the rows wanted of the group's first conversation, or none yet)."""
    rows = first
    taken = [first[0].conversation_handle] if first else []
    while top is None or len(rows) < top:
        handle = _next_conversation(ctx, queue, group_id, taken)
        if handle is None:
            break
        taken.append(handle)
        rows.extend(_conversation_rows(ctx, statements, handle, None if top is None else top - len(rows)))
    return rows


def _next_conversation(ctx: TxContext, queue: QueueInfo, group_id: uuid.UUID, taken: list[uuid.UUID]) -> Any:
    table = queue_table(queue.table_name)
    query = select(table.c.conversation_handle).where(table.c.conversation_group_id == group_id, table.c.status == 1)
    if taken:
        query = query.where(table.c.conversation_handle.not_in(taken))
    return ctx.conn.execute(query.order_by(*serve_order_of(table)).limit(1)).scalar()


def _conversation_rows(
    ctx: TxContext, statements: QueueStatements, handle: uuid.UUID, top: int | None
) -> list[QueueRow]:
    if top is None:
        raw = statements.all_conversation_rows.all(ctx.conn, p_handle=handle)
    else:
        raw = statements.conversation_rows.all(ctx.conn, p_handle=handle, p_top=top)
    return [QueueRow._make(row) for row in raw]


def message_from_row(ctx: TxContext, row: QueueRow | Row[Any], status: int) -> Message:
    catalog = ctx.catalog
    service = catalog.services.get(row.service_id)
    contract = catalog.contracts.get(row.service_contract_id)
    message_type = catalog.message_types.get(row.message_type_id)
    # Positional, in Message's field order: this runs once per received message.
    return Message(
        status, row.priority, row.queuing_order, row.conversation_group_id, row.conversation_handle,
        row.message_sequence_number, service.name if service else "", row.service_id,
        contract.name if contract else "", row.service_contract_id,
        message_type.name if message_type else "", row.message_type_id, row.validation, row.message_body,
        row.message_enqueue_time,
    )

"""Poison-message detection: five rollbacks in a row of transactions that received from a
queue turn the queue OFF (spec 10), unless POISON_MESSAGE_HANDLING (STATUS = OFF).

The count lives in ``sb_queues.rollback_count``. It is part of the catalog snapshot, so
on SQLite a committed RECEIVE knows without a query whether it has a count to reset;
where the snapshot can lag behind other transactions (PostgreSQL), every RECEIVE resets
it with a conditional UPDATE. Counting a rollback needs a transaction of its own, run
right after the rolled-back one.
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table, update

from broker.storage.context import TxContext
from broker.storage.models import ServiceQueue
from broker.storage.queue_tables import rollback_count_reset
from broker.storage.statements import Prepared

_queues = cast(Table, ServiceQueue.__table__)
# Prepared: on PostgreSQL it runs with every RECEIVE.
_RESET = Prepared(rollback_count_reset())

ROLLBACKS_TO_DISABLE = 5


def count_rollback(ctx: TxContext, queue_ids: set[int]) -> list[str]:
    """Count one rolled-back RECEIVE transaction on each queue; the names it disabled.

    The count is incremented in the database, not from the catalog snapshot, so two
    transactions counting at once (PostgreSQL) both count.
    """
    disabled: list[str] = []
    for queue_id in sorted(queue_ids):
        queue = ctx.catalog.queues.get(queue_id)
        if queue is None:
            continue  # dropped meanwhile
        count, handling, enabled = ctx.conn.execute(
            update(_queues).where(_queues.c.object_id == queue_id)
            .values(rollback_count=_queues.c.rollback_count + 1)
            .returning(_queues.c.rollback_count, _queues.c.is_poison_message_handling_enabled,
                       _queues.c.is_receive_enabled)
        ).one()
        if count >= ROLLBACKS_TO_DISABLE and handling and enabled:
            ctx.conn.execute(update(_queues).where(_queues.c.object_id == queue_id).values(
                is_receive_enabled=False, is_enqueue_enabled=False, modify_date=ctx.now()))
            disabled.append(queue.name)
    ctx.catalog_changed()
    return disabled


def reset_count(ctx: TxContext, queue_id: int) -> None:
    """A RECEIVE took messages: the count starts again at 0 if this transaction commits.

    Called when the snapshot shows a count, and on every RECEIVE where the snapshot may
    lag (PostgreSQL); the catalog version moves only when a count was really reset.
    """
    if _RESET.run(ctx.conn, p_queue=queue_id):
        ctx.catalog_changed()

"""Poison-message detection: five rollbacks in a row of transactions that received from a
queue turn the queue OFF (spec 10), unless POISON_MESSAGE_HANDLING (STATUS = OFF).

The count lives in ``sb_queues.rollback_count`` (part of the catalog snapshot, so a
committed RECEIVE knows without a query whether it has a count to reset). Counting a
rollback needs a transaction of its own, run right after the rolled-back one.
"""

from __future__ import annotations

from sqlalchemy import update

from broker.context import TxContext
from broker.models import ServiceQueue

ROLLBACKS_TO_DISABLE = 5


def count_rollback(ctx: TxContext, queue_ids: set[int]) -> list[str]:
    """Count one rolled-back RECEIVE transaction on each queue; the names it disabled."""
    disabled: list[str] = []
    for queue_id in sorted(queue_ids):
        queue = ctx.catalog.queues.get(queue_id)
        if queue is None:
            continue  # dropped meanwhile
        count = queue.rollback_count + 1
        values: dict[str, object] = {"rollback_count": count}
        if count >= ROLLBACKS_TO_DISABLE and queue.poison_message_handling and queue.receive_enabled:
            values.update(is_receive_enabled=False, is_enqueue_enabled=False, modify_date=ctx.now())
            disabled.append(queue.name)
        ctx.conn.execute(update(ServiceQueue).where(ServiceQueue.object_id == queue_id).values(**values))
    ctx.catalog_changed()
    return disabled


def reset_count(ctx: TxContext, queue_id: int) -> None:
    """A RECEIVE took messages: the count starts again at 0 if this transaction commits."""
    ctx.conn.execute(update(ServiceQueue).where(ServiceQueue.object_id == queue_id).values(rollback_count=0))
    ctx.catalog_changed()

"""ALTER DATABASE's broker options (spec 1.10): ENABLE_BROKER / DISABLE_BROKER, NEW_BROKER,
ERROR_BROKER_CONVERSATIONS, HONOR_BROKER_PRIORITY.

Each function runs in the caller's transaction and ends with ``ctx.catalog_changed()``
(the database row is part of the catalog snapshot). SQL Server takes an exclusive
database lock for them; here NEW_BROKER and ERROR_BROKER_CONVERSATIONS lock every
conversation group and endpoint first (``objects.lock_conversations``), so they wait
for the RECEIVEs and SENDs under way. The instance-level checks of a duplicate
``service_broker_guid`` (9772, 9773) belong to the instance, not to one database.
"""

from __future__ import annotations

import uuid

from sqlalchemy import delete, update

from broker.conversations import delivery
from broker.conversations import endpoints as ep
from broker.ddl.objects import lock_conversations
from broker.storage.context import TxContext
from broker.storage.models import BrokerDatabase
from broker.storage.queue_tables import queue_table

# ERROR_BROKER_CONVERSATIONS ends every open dialog with SQL Server's error for a
# database that was attached or restored (spec 5.3; its far side would get -9720, but
# inside one database both sides are local).
DATABASE_RESTORED = -9719
DATABASE_RESTORED_TEXT = "The database for this conversation endpoint is attached or restored."
# States of an endpoint whose dialog is still open (ER has its Error already; DO and CD
# have ended locally).
_OPEN_STATES = frozenset({"SO", "SI", "CO", "DI"})


def set_broker_enabled(ctx: TxContext, enabled: bool) -> None:
    """ENABLE_BROKER / DISABLE_BROKER (the guid is kept). Enabling delivers the messages
    held while the broker was disabled, in this transaction."""
    ctx.conn.execute(update(BrokerDatabase).values(is_broker_enabled=enabled))
    ctx.catalog_changed()
    if enabled:
        delivery.retry_held(ctx)


def new_broker(ctx: TxContext) -> uuid.UUID:
    """NEW_BROKER: a new ``service_broker_guid``, delivery enabled, and every conversation
    removed at once without telling anyone: endpoints, groups, every queue's messages, the
    fragments of those still arriving and the transmission queue. Returns the new guid."""
    lock_conversations(ctx)
    ctx.conn.execute(delete(ep.endpoints))
    ctx.conn.execute(delete(ep.groups))
    ctx.conn.execute(delete(ep.transmissions))
    ctx.conn.execute(delete(ep.fragments))
    for queue in ctx.catalog.queues.values():
        ctx.conn.execute(delete(queue_table(queue.table_name)))  # every message belongs to a conversation
    guid = uuid.uuid4()
    ctx.conn.execute(update(BrokerDatabase).values(service_broker_guid=guid, is_broker_enabled=True))
    ctx.catalog_changed()
    return guid


def error_broker_conversations(ctx: TxContext) -> None:
    """ERROR_BROKER_CONVERSATIONS: delivery enabled, guid kept, every conversation ended
    with an error.

    What no endpoint has transmitted yet is dropped. Each open endpoint then gets Error
    -9719 on its queue (held, like any broker message, while its queue is OFF) and goes
    to ER. Endpoints already in ER keep the Error they have; endpoints that ended locally
    (DO) can no longer be acknowledged and close; CD endpoints stay as they are.
    """
    endpoints = lock_conversations(ctx)
    ctx.conn.execute(update(BrokerDatabase).values(is_broker_enabled=True))
    ctx.catalog_changed()
    # Outbound messages have no receiving endpoint yet; broker messages parked for a
    # local endpoint (its queue OFF) name it and stay.
    ctx.conn.execute(delete(ep.transmissions).where(ep.transmissions.c.to_conversation_handle.is_(None)))
    ctx.conn.execute(update(ep.endpoints).values(held_messages=0, transmission_status=""))
    for endpoint in endpoints:
        if endpoint.state in _OPEN_STATES:
            delivery.broker_error(ctx, endpoint, DATABASE_RESTORED, DATABASE_RESTORED_TEXT)
        elif endpoint.state == "DO":
            ep.close_endpoint(ctx, endpoint)


def set_honor_broker_priority(ctx: TxContext, on: bool) -> None:
    """HONOR_BROKER_PRIORITY ON / OFF: stored and shown in ``sys.databases``; the
    transmission queue reads it when it orders what it sends."""
    ctx.conn.execute(update(BrokerDatabase).values(is_honor_broker_priority_on=on))
    ctx.catalog_changed()

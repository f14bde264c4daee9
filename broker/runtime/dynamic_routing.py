"""Dynamic routing (spec 8.5): asking the BrokerConfiguration service for a missing route.

When a database has a route to the service ``SQL/ServiceBroker/BrokerConfiguration`` and
no route matches a conversation's service, routing delays the conversation
(``routing.matching``, step 4). The transmitter then asks: it begins a dialog from the
broker's own service to the BrokerConfiguration service on the
``BrokerConfigurationNotice`` contract and sends one ``MissingRoute`` message naming the
service, with at most one request pending per service. The BrokerConfiguration service
(the application's) creates a route, or does not, and ends the conversation. When it
ends, the transmitter ends its side and routing is tried again at once; if the service
ended it with an error, the delayed messages keep their back-off, so that a failing
configuration service is not asked again in a tight loop.

The broker's own service and queue (SQL Server's ``ServiceBrokerQueue`` and
``http://schemas.microsoft.com/SQL/ServiceBroker/ServiceBroker``) are created the first
time a request is sent.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from xml.sax.saxutils import escape

from sqlalchemy import select, update

from broker.conversations import dialogs, endpoints, receiving, sending
from broker.conversations.system_messages import END_DIALOG
from broker.ddl import objects
from broker.routing.matching import BROKER_CONFIGURATION, ROUTE_REQUESTED
from broker.storage.context import TxContext
from broker.storage.queue_tables import queue_statements

SYSTEM_QUEUE = "ServiceBrokerQueue"
SYSTEM_SERVICE = "http://schemas.microsoft.com/SQL/ServiceBroker/ServiceBroker"
NOTICE_CONTRACT = "http://schemas.microsoft.com/SQL/ServiceBroker/BrokerConfigurationNotice"
MISSING_ROUTE = "http://schemas.microsoft.com/SQL/ServiceBroker/BrokerConfigurationNotice/MissingRoute"
# A request's conversation group is named after the service it asks about: one group,
# hence one pending request, per service.
_REQUESTS = uuid.UUID("6d1f2c4e-8b0a-4c3e-9f5d-2a7b1e0c9d34")


def request_routes(ctx: TxContext, services: Iterable[str]) -> None:
    """Send a MissingRoute request for each service that has none pending, in this transaction."""
    for service in sorted(set(services)):
        group = uuid.uuid5(_REQUESTS, service)
        if _pending(ctx, group):
            continue
        _ensure_own_service(ctx)
        handle = dialogs.begin_dialog(
            ctx, SYSTEM_SERVICE, BROKER_CONFIGURATION, NOTICE_CONTRACT, broker_instance=None,
            related_conversation=None, related_conversation_group=group, lifetime=None, encryption=False)
        sending.send(ctx, handle, MISSING_ROUTE, missing_route_body(service))


def missing_route_body(service: str) -> bytes:
    """The MissingRoute message that names ``service``, as spec 8.5 writes it."""
    return (f'<MissingRoute xmlns="{MISSING_ROUTE}"><SERVICE_NAME>{escape(service)}</SERVICE_NAME>'
            "</MissingRoute>").encode()


def take_answers(ctx: TxContext) -> None:
    """End the requests the BrokerConfiguration service has ended; when one ended without
    an error, the messages waiting for a route are due again at once."""
    queue = ctx.catalog.queue_named(SYSTEM_QUEUE)
    if queue is None:
        return
    if ctx.snapshot:  # a look that only reads: say whether there is anything to take
        if queue_statements(queue.table_name).next_ready.first(ctx.conn) is not None:
            ctx.writing()
        return
    answered = False
    while messages := receiving.receive(ctx, SYSTEM_QUEUE, None, None, None):
        for message in messages:
            endpoint = endpoints.find_endpoint(ctx, message.conversation_handle)
            if endpoint is not None and endpoint.state in ("DI", "ER"):
                answered = answered or message.message_type_name == END_DIALOG
                dialogs.end_conversation(ctx, message.conversation_handle, error=None, description=None,
                                         cleanup=False)
    if answered:
        t = endpoints.transmissions
        ctx.conn.execute(update(t).where(t.c.transmission_status == ROUTE_REQUESTED)
                         .values(next_attempt_time=ctx.now()))


def _pending(ctx: TxContext, group: uuid.UUID) -> bool:
    e = endpoints.endpoints
    return ctx.conn.execute(select(e.c.conversation_handle).where(e.c.conversation_group_id == group)
                            .limit(1)).first() is not None


def _ensure_own_service(ctx: TxContext) -> None:
    if ctx.catalog.queue_named(SYSTEM_QUEUE) is None:
        objects.create_queue(ctx, SYSTEM_QUEUE, status=True, retention=False, activation=None,
                             poison_message_handling=False)
    if SYSTEM_SERVICE not in ctx.catalog.services_by_name:
        objects.create_service(ctx, SYSTEM_SERVICE, SYSTEM_QUEUE, [])

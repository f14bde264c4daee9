"""The transmitter: moves held messages out of the transmission queues (spec 7.4).

One pass, for every database it serves whose broker is enabled: read the outbound
messages that are due (in order, by priority when HONOR_BROKER_PRIORITY is ON), route
each with its database's routes and a directory of every database served
(``routing.matching``), then

* send the ones for another database as frames, in one batch per destination, and
  settle the receipts in the sender's transaction (acknowledged ones leave the queue);
* send the ones for another instance to its endpoint's address the same way, through
  the network transport when the instance has an endpoint (``transport.tcp``); a message
  that comes back without a receipt waits, and goes again after a back-off;
* deliver the ones for their own database there (their target may have appeared);
* leave the rest waiting with the reason: no route, no such service, the network
  transport not configured, a dialog that received an error; a route that is missing
  while a dynamic routing service is configured is asked for (``dynamic_routing``).

A message is forgotten only after its destination's transaction committed, and the
destination drops duplicates by sequence number, so a crash anywhere loses nothing and
delivers nothing twice.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from broker.conversations.frames import Delivery
from broker.conversations.outbound import (
    OutboundMessage,
    bound_services,
    claim,
    deliver_here,
    due_messages,
    frames_of,
    hold_for_the_application,
    next_due,
    settle,
    wait,
)
from broker.routing.matching import ROUTE_REQUESTED, Delayed, Destination, Local, Remote, route
from broker.runtime.dynamic_routing import SYSTEM_QUEUE, request_routes, take_answers
from broker.runtime.mirrors import Hop, Principals
from broker.storage.catalog import Catalog
from broker.storage.context import TxContext
from broker.storage.served import ServedDatabase
from broker.transport.inprocess import InProcessTransport
from broker.transport.seam import NetworkTransport, Transport, TransportError

log = logging.getLogger("broker.runtime")

BATCH = 1000  # messages read from one transmission queue per pass
# A message routed to a TCP address while the instance has no endpoint running waits
# with SQL Server's text for that case (9666).
NO_NETWORK_TRANSPORT = "The Service Broker protocol transport is disabled or not configured."
# A dialog begun WITH ENCRYPTION = ON routed to another instance, while its database has
# no remote service binding for the target service (spec 1.7): it waits until one exists.
NO_BINDING = ("Dialog security is not available for this conversation because there is no remote service "
              "binding for the target service. Create a remote service binding, or specify ENCRYPTION = OFF "
              "in the BEGIN DIALOG statement.")  # 9727
# A message sent to another instance that came back with no receipt (the frame was lost
# or dropped on the way, or forwarded and not answered): it goes again after a back-off.
NOT_ACKNOWLEDGED = "The message was sent to the remote instance but has not been acknowledged yet."


class Databases:
    """The directory routing uses: the databases served, by broker instance."""

    def __init__(self, catalogs: Mapping[str, Catalog]) -> None:
        self._catalogs = catalogs

    def hosts(self, service_name: str) -> Sequence[str]:
        return tuple(guid for guid, catalog in self._catalogs.items() if service_name in catalog.services_by_name)


@dataclass(slots=True)
class _Look:
    """What one pass saw of one database."""

    db: ServedDatabase
    catalog: Catalog
    messages: list[OutboundMessage]
    next_due: datetime | None
    bound: frozenset[str]  # the remote services it has a remote service binding for


@dataclass(slots=True)
class _Plan:
    """What one pass does with one database's due messages."""

    by_destination: dict[str, list[OutboundMessage]] = field(default_factory=lambda: defaultdict(list))
    by_address: dict[Hop, list[OutboundMessage]] = field(default_factory=lambda: defaultdict(list))
    here: list[OutboundMessage] = field(default_factory=list)
    waiting: dict[str, list[OutboundMessage]] = field(default_factory=lambda: defaultdict(list))
    errored: list[OutboundMessage] = field(default_factory=list)


class Transmitter:
    """Serves the transmission queues of ``databases()`` (asked again every pass); messages
    for other instances go through ``network`` when there is one."""

    def __init__(self, databases: Callable[[], Sequence[ServedDatabase]], *, batch: int = BATCH,
                 network: NetworkTransport | None = None) -> None:
        self._databases = databases
        self._batch = batch
        self.network = network
        self.principals = Principals()  # which partner of each mirrored route is the principal (spec 8.8)

    def run_pass(self) -> tuple[int, datetime | None]:
        """One pass over every database: (messages that left a transmission queue, the
        earliest moment a waiting message is due again, or None)."""
        looks = [self._look(db) for db in self._databases()]
        served = {str(look.catalog.broker_guid): look for look in looks if look.catalog.broker_enabled}
        directory = Databases({guid: look.catalog for guid, look in served.items()})
        local = InProcessTransport({guid: look.db for guid, look in served.items()})
        moved = 0
        due: list[datetime] = []
        for guid, look in served.items():
            if look.messages:
                left, look.next_due = self._serve(guid, look, directory, local)
                moved += left
            if look.next_due is not None:
                due.append(look.next_due)
        return moved, min(due) if due else None

    def _look(self, db: ServedDatabase) -> _Look:
        """One transaction: the catalog, the messages due and when the next one is
        (after taking the dynamic routing service's answers, where it was asked)."""
        def look(ctx: TxContext) -> _Look:
            if ctx.catalog.queue_named(SYSTEM_QUEUE) is not None:
                take_answers(ctx)
            messages = due_messages(ctx, self._batch)
            bound = bound_services(ctx) if any(m.session_key is not None for m in messages) else frozenset()
            return _Look(db, ctx.catalog, messages, next_due(ctx), bound)

        with db.transaction() as tx:
            return tx.run(look)

    def _serve(self, origin: str, look: _Look, directory: Databases,
               transport: Transport) -> tuple[int, datetime | None]:
        catalog = look.catalog
        plan = _plan(look.messages, origin, catalog, directory)
        deliveries: list[tuple[Delivery, dict[int, OutboundMessage]]] = []
        for destination, batch in plan.by_destination.items():
            frames = frames_of(catalog, batch, destination)
            try:
                delivery = transport.deliver(destination, frames)
            except TransportError as error:
                log.warning("could not deliver %d message(s) to %s: %s", len(batch), destination, error.status)
                plan.waiting[error.status].extend(batch)
                continue
            deliveries.append((delivery, {m.message_id: m for m in batch}))
        for address, batch in plan.by_address.items():
            deliveries += self._send_away(catalog, address, batch, plan, look.bound)

        def settle_all(ctx: TxContext) -> tuple[int, datetime | None]:
            free = claim(ctx, (m.conversation_handle for m in look.messages))

            def mine(messages: list[OutboundMessage]) -> list[OutboundMessage]:
                return [m for m in messages if m.conversation_handle in free]

            moved = sum(settle(ctx, delivery, {i: m for i, m in sent.items() if m.conversation_handle in free})
                        for delivery, sent in deliveries)
            for reason, waiting in plan.waiting.items():
                wait(ctx, mine(waiting), reason)
            hold_for_the_application(ctx, mine(plan.errored))
            request_routes(ctx, (m.to_service for m in mine(plan.waiting.get(ROUTE_REQUESTED, []))))
            if plan.here:
                moved += deliver_here(ctx, mine(plan.here))
            return moved, next_due(ctx)

        with look.db.transaction() as tx:
            return tx.run(settle_all)

    def _send_away(self, catalog: Catalog, hop: Hop, batch: list[OutboundMessage], plan: _Plan,
                   bound: frozenset[str]) -> list[tuple[Delivery, dict[int, OutboundMessage]]]:
        """Send ``batch`` to another instance's endpoint (a mirrored route's principal,
        ``mirrors.Principals``); the deliveries to settle. What cannot go (no endpoint;
        dialog security without a remote service binding), or came back without a
        receipt, joins ``plan.waiting``."""
        if self.network is None:
            plan.waiting[NO_NETWORK_TRANSPORT].extend(batch)
            return []
        plan.waiting[NO_BINDING].extend(m for m in batch if m.session_key is not None and m.to_service not in bound)
        batch = [m for m in batch if m.session_key is None or m.to_service in bound]
        if not batch:
            return []
        try:
            deliveries = self.principals.deliver(self.network, str(catalog.broker_guid), hop,
                                                 frames_of(catalog, batch, None))
        except TransportError as error:
            log.warning("could not send %d message(s) to %s: %s", len(batch), hop.address, error.status)
            plan.waiting[error.status].extend(batch)
            return []
        answered = {r.message_id for delivery in deliveries for r in delivery.receipts}
        plan.waiting[NOT_ACKNOWLEDGED].extend(m for m in batch if m.message_id not in answered)
        sent = {m.message_id: m for m in batch}
        return [(delivery, sent) for delivery in deliveries]


def _plan(messages: list[OutboundMessage], origin: str, catalog: Catalog, directory: Databases) -> _Plan:
    plan = _Plan()
    now = datetime.now(UTC)
    routed: dict[uuid.UUID, Destination] = {}  # one destination per dialog in a pass
    for message in messages:
        if message.state == "ER":
            plan.errored.append(message)
            continue
        destination = routed.get(message.conversation_handle)
        if destination is None:
            destination = routed[message.conversation_handle] = route(
                catalog.routes, service_name=message.to_service, broker_instance=message.destination_instance,
                origin=origin, directory=directory, now=now)
        if isinstance(destination, Delayed):
            plan.waiting[destination.reason].append(message)
        elif isinstance(destination, Local):
            if destination.broker_instance == origin:
                plan.here.append(message)
            else:
                plan.by_destination[destination.broker_instance].append(message)
        elif isinstance(destination, Remote):
            plan.by_address[Hop.of(destination)].append(message)
    return plan

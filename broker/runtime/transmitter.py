"""The transmitter: moves held messages out of the transmission queues (spec 7.4).

One pass, for every database it serves whose broker is enabled: read the outbound
messages that are due (in order, by priority when HONOR_BROKER_PRIORITY is ON), route
each with its database's routes and a directory of every database served
(``routing.matching``), then

* send the ones for another database as frames, in one batch per destination, and
  settle the receipts in the sender's transaction (acknowledged ones leave the queue);
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
    claim,
    deliver_here,
    due_messages,
    frames_of,
    hold_for_the_application,
    next_due,
    settle,
    wait,
)
from broker.routing.matching import ROUTE_REQUESTED, Delayed, Destination, Local, route
from broker.runtime.dynamic_routing import SYSTEM_QUEUE, request_routes, take_answers
from broker.storage.catalog import Catalog
from broker.storage.context import TxContext
from broker.storage.served import ServedDatabase
from broker.transport.inprocess import InProcessTransport
from broker.transport.seam import Transport, TransportError

log = logging.getLogger("broker.runtime")

BATCH = 1000  # messages read from one transmission queue per pass
# The network transport between instances is the next milestone: until it exists, a
# message routed to a TCP address waits with SQL Server's text for that case (9666).
NO_NETWORK_TRANSPORT = "The Service Broker protocol transport is disabled or not configured."


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


@dataclass(slots=True)
class _Plan:
    """What one pass does with one database's due messages."""

    by_destination: dict[str, list[OutboundMessage]] = field(default_factory=lambda: defaultdict(list))
    here: list[OutboundMessage] = field(default_factory=list)
    waiting: dict[str, list[OutboundMessage]] = field(default_factory=lambda: defaultdict(list))
    errored: list[OutboundMessage] = field(default_factory=list)


class Transmitter:
    """Serves the transmission queues of ``databases()`` (asked again every pass)."""

    def __init__(self, databases: Callable[[], Sequence[ServedDatabase]], *, batch: int = BATCH) -> None:
        self._databases = databases
        self._batch = batch

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
            return _Look(db, ctx.catalog, due_messages(ctx, self._batch), next_due(ctx))

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
        else:
            plan.waiting[NO_NETWORK_TRANSPORT].append(message)
    return plan

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

from sqlalchemy import func, select

from broker.conversations import endpoints as ep
from broker.conversations.frames import Delivery
from broker.conversations.outbound import (
    OutboundMessage,
    deliver_here,
    due_messages,
    frame_of,
    hold_for_the_application,
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

BATCH = 500  # messages read from one transmission queue per pass
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
        served = {str(catalog.broker_guid): (db, catalog)
                  for db in self._databases() for catalog in [_catalog_of(db)] if catalog.broker_enabled}
        directory = Databases({guid: catalog for guid, (_, catalog) in served.items()})
        local = InProcessTransport({guid: db for guid, (db, _) in served.items()})
        moved = 0
        for guid, (db, catalog) in served.items():
            moved += self._serve(guid, db, catalog, directory, local)
        due = [moment for db, _ in served.values() if (moment := _next_due(db)) is not None]
        return moved, min(due) if due else None

    def _serve(self, origin: str, db: ServedDatabase, catalog: Catalog, directory: Databases,
               transport: Transport) -> int:
        if catalog.queue_named(SYSTEM_QUEUE) is not None:
            with db.transaction() as tx:
                tx.run(take_answers)
        with db.transaction() as tx:
            messages = tx.run(lambda ctx: due_messages(ctx, self._batch))
        if not messages:
            return 0
        plan = _plan(messages, origin, catalog, directory)
        deliveries: list[tuple[Delivery, dict[int, OutboundMessage]]] = []
        for destination, batch in plan.by_destination.items():
            frames = [frame_of(catalog, m, destination) for m in batch]
            try:
                delivery = transport.deliver(destination, frames)
            except TransportError as error:
                log.warning("could not deliver %d message(s) to %s: %s", len(batch), destination, error.status)
                plan.waiting[error.status].extend(batch)
                continue
            deliveries.append((delivery, {m.message_id: m for m in batch}))

        def settle_all(ctx: TxContext) -> int:
            moved = sum(settle(ctx, delivery, sent) for delivery, sent in deliveries)
            for reason, waiting in plan.waiting.items():
                wait(ctx, waiting, reason)
            hold_for_the_application(ctx, plan.errored)
            request_routes(ctx, (m.to_service for m in plan.waiting.get(ROUTE_REQUESTED, ())))
            if plan.here:
                moved += deliver_here(ctx, plan.here)
            return moved

        with db.transaction() as tx:
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


def _catalog_of(db: ServedDatabase) -> Catalog:
    with db.transaction() as tx:
        return tx.run(lambda ctx: ctx.catalog)


def _next_due(db: ServedDatabase) -> datetime | None:
    """The earliest retry of an outbound message waiting in ``db``."""
    t = ep.transmissions
    with db.transaction() as tx:
        moment: datetime | None = tx.run(lambda ctx: ctx.conn.execute(
            select(func.min(t.c.next_attempt_time)).where(t.c.to_conversation_handle.is_(None))).scalar())
    return moment

"""The transmitter: moves held messages out of the transmission queues (spec 7.4).

One pass, for every database it serves whose broker is enabled: read the outbound
messages that are due (in order, by priority when HONOR_BROKER_PRIORITY is ON), route
each with its database's routes and a directory of every database served
(``routing.matching``), then

* send the ones for another database as frames, in one batch per destination, and
  settle the receipts in the sender's transaction (acknowledged ones leave the queue);
* send the ones for another instance to its endpoint's address the same way, through
  the network transport when the instance has an endpoint (``transport.tcp``), without
  waiting: up to ``pipeline.WINDOW`` batches of a database are in flight at once, and
  their receipts are settled in the pass after they come (``runtime.pipeline``); a
  message that comes back without a receipt waits, and goes again after a back-off. A
  large message goes in fragments (``outbound.frames_in_fragments``), from the first
  one its destination does not hold yet;
* deliver the ones for their own database there (their target may have appeared);
* leave the rest waiting with the reason: no route, no such service, the network
  transport not configured, a dialog that received an error; a route that is missing
  while a dynamic routing service is configured is asked for (``dynamic_routing``).

A message is forgotten only after its destination's transaction committed, and the
destination drops duplicates by sequence number, so a crash anywhere loses nothing and
delivers nothing twice.
"""

from __future__ import annotations

import concurrent.futures
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from broker.conversations.frames import Delivery
from broker.conversations.outbound import (
    NOT_ACKNOWLEDGED,
    OutboundMessage,
    bound_services,
    claim,
    deliver_here,
    due_messages,
    frames_in_fragments,
    frames_of,
    hold_for_the_application,
    next_due,
    settle,
    wait,
)
from broker.routing.matching import ROUTE_REQUESTED, Delayed, Destination, Local, Remote, route
from broker.runtime.dynamic_routing import SYSTEM_QUEUE, request_routes, take_answers
from broker.runtime.mirrors import Hop, Principals
from broker.runtime.pipeline import Pipeline, Sending
from broker.storage.catalog import Catalog
from broker.storage.context import TxContext
from broker.storage.served import ServedDatabase, look_then_write, run_in
from broker.transport.inprocess import InProcessTransport
from broker.transport.seam import Answer, NetworkTransport, Transport, TransportError, receipts_of

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
    pipeline: Pipeline  # its batches in flight to other instances
    settled: int  # messages that left the queue as the look settled answered batches


@dataclass(slots=True)
class _Plan:
    """What one pass does with one database's due messages."""

    by_destination: dict[str, list[OutboundMessage]] = field(default_factory=lambda: defaultdict(list))
    by_address: dict[Hop, list[OutboundMessage]] = field(default_factory=lambda: defaultdict(list))
    here: list[OutboundMessage] = field(default_factory=list)
    waiting: dict[str, list[OutboundMessage]] = field(default_factory=lambda: defaultdict(list))
    errored: list[OutboundMessage] = field(default_factory=list)
    routed: dict[uuid.UUID, Destination] = field(default_factory=dict)  # where each dialog went


class Transmitter:
    """Serves the transmission queues of ``databases()`` (asked again every pass); messages
    for other instances go through ``network`` when there is one. ``wake`` is called
    (from another thread) when a batch in flight has its answer: the next pass settles it."""

    def __init__(self, databases: Callable[[], Sequence[ServedDatabase]], *, batch: int = BATCH,
                 network: NetworkTransport | None = None, wake: Callable[[], None] = lambda: None) -> None:
        self._databases = databases
        self._batch = batch
        self.network = network
        self._wake = wake
        self.principals = Principals()  # which partner of each mirrored route is the principal (spec 8.8)
        self._pipelines: dict[int, Pipeline] = {}  # by the id of the database object

    @property
    def in_flight(self) -> int:
        """Batches sent to other instances whose receipts are not settled yet."""
        return sum(len(pipeline.sending) for pipeline in self._pipelines.values())

    def run_pass(self) -> tuple[int, datetime | None]:
        """One pass over every database: (messages that left a transmission queue, the
        earliest moment a waiting message is due again, or None). Never waits for
        another instance: batches in flight are settled by a pass after their answer."""
        databases = self._databases()
        self._pipelines = {id(db): self._pipelines.get(id(db)) or Pipeline() for db in databases}
        looks = [self._look(db) for db in databases]
        served = {str(look.catalog.broker_guid): look for look in looks if look.catalog.broker_enabled}
        directory = Databases({guid: look.catalog for guid, look in served.items()})
        local = InProcessTransport({guid: look.db for guid, look in served.items()})
        moved = 0
        due: list[datetime] = []
        for guid, look in served.items():
            left, look.next_due = self._serve(guid, look, directory, local)
            moved += left
            if look.next_due is not None:
                due.append(look.next_due)
        return moved, min(due) if due else None

    def _look(self, db: ServedDatabase) -> _Look:
        """One transaction: settle the batches in flight that have their answer, then read
        the catalog, the messages due (after those still in flight) and when the next
        one is (after taking the dynamic routing service's answers, where it was asked)."""
        pipeline = self._pipelines[id(db)]
        answered = pipeline.answered(self.network)

        def look(ctx: TxContext) -> _Look:
            ctx.quiet = True
            settled = 0
            if answered:
                free = claim(ctx, [m.conversation_handle for sending in answered for m in sending.sent.values()])
                settled = sum(_settle_answer(ctx, sending, free) for sending in answered)
            if not ctx.catalog.broker_enabled:  # nothing leaves; enabling it is a commit, which wakes a pass
                return _Look(db, ctx.catalog, [], None, frozenset(), pipeline, settled)
            if ctx.catalog.queue_named(SYSTEM_QUEUE) is not None:
                take_answers(ctx)
            after = pipeline.start_after(ctx.catalog.honor_broker_priority)
            messages = [] if after is None else due_messages(ctx, self._batch, after)
            bound = bound_services(ctx) if any(m.session_key is not None for m in messages) else frozenset()
            return _Look(db, ctx.catalog, messages, next_due(ctx), bound, pipeline, settled)

        if answered:
            return run_in(db, look)
        return look_then_write(db, look)  # most looks find nothing to take or settle

    def _serve(self, origin: str, look: _Look, directory: Databases,
               transport: Transport) -> tuple[int, datetime | None]:
        """Route and send what ``look`` read: to other instances without waiting (settled
        by a later look), to other databases of this instance at once; then, in one
        transaction, settle those and record what waits. (messages that left, next due)."""
        catalog = look.catalog
        plan = _plan(look.messages, origin, catalog, directory, look.pipeline.routed)
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
        for hop, batch in plan.by_address.items():
            self._send_away(catalog, hop, batch, plan, look)
        moved, due = look.settled, look.next_due
        if deliveries or plan.waiting or plan.errored or plan.here:

            def settle_all(ctx: TxContext) -> tuple[int, datetime | None]:
                ctx.quiet = True
                free = claim(ctx, [m.conversation_handle for m in look.messages])

                def mine(messages: Iterable[OutboundMessage]) -> list[OutboundMessage]:
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
                here, due = tx.run(settle_all)
            moved += here
        if look.pipeline.sending:
            # The messages in flight count as due: the answer that frees the pipeline wakes
            # the next pass (``wake``). But after a whole batch the next may be waiting, and
            # may go before that answer.
            due = datetime.now(UTC) if len(look.messages) == self._batch and look.pipeline.has_room() else None
        return moved, due

    def _send_away(self, catalog: Catalog, hop: Hop, batch: list[OutboundMessage], plan: _Plan,
                   look: _Look) -> None:
        """Send ``batch`` to another instance's endpoint (a mirrored route's principal,
        ``mirrors.Principals``) without waiting for its receipts: it joins the pipeline.
        What cannot go (no endpoint; dialog security without a remote service binding)
        joins ``plan.waiting``."""
        network = self.network
        if network is None:
            plan.waiting[NO_NETWORK_TRANSPORT].extend(batch)
            return
        secured = [m.session_key is None or m.to_service in look.bound for m in batch]
        plan.waiting[NO_BINDING].extend(m for m, ok in zip(batch, secured, strict=True) if not ok)
        batch = [m for m, ok in zip(batch, secured, strict=True) if ok]
        if not batch:
            return
        frames = frames_in_fragments(catalog, batch)
        if hop.mirror is None:
            answer = network.submit(hop.address, frames)
        else:  # the principal is found by sending to one partner, then the other: one batch at a time
            answer = _answered(lambda: self.principals.deliver(network, str(catalog.broker_guid), hop, frames))
        look.pipeline.sent(Sending(answer, {m.message_id: m for m in batch}, network, hop),
                           ((m.conversation_handle, plan.routed[m.conversation_handle]) for m in batch))
        answer.add_done_callback(lambda _: self._wake())


def _settle_answer(ctx: TxContext, sending: Sending, free: set[uuid.UUID]) -> int:
    """Settle one batch that was in flight, in the sender's transaction (the messages of
    the dialogs in ``free``): what its receipts acknowledge leaves the queue; what got
    none (the batch failed, or frames were lost or dropped on the way) waits and goes
    again after a back-off. How many left."""
    sent = {i: m for i, m in sending.sent.items() if m.conversation_handle in free}
    try:
        deliveries = receipts_of(sending.answer)
    except TransportError as error:
        log.warning("could not send %d message(s) to %s: %s", len(sending.sent), sending.hop.address, error.status)
        wait(ctx, sent.values(), error.status)
        return 0
    answered = {r.message_id for delivery in deliveries for r in delivery.receipts}
    wait(ctx, [m for i, m in sent.items() if i not in answered], NOT_ACKNOWLEDGED)
    return sum(settle(ctx, delivery, sent) for delivery in deliveries)


def _answered(send: Callable[[], Sequence[Delivery]]) -> Answer:
    """The answer of a send made here and now, as a done future."""
    answer: Answer = concurrent.futures.Future()
    try:
        answer.set_result(send())
    except TransportError as error:
        answer.set_exception(error)
    return answer


def _plan(messages: list[OutboundMessage], origin: str, catalog: Catalog, directory: Databases,
          in_flight: Mapping[uuid.UUID, Destination]) -> _Plan:
    """Route each message: one destination per dialog in a pass, and the one its messages
    in flight went to (``in_flight``) while there are some."""
    plan = _Plan(routed=dict(in_flight))
    routed = plan.routed
    now = datetime.now(UTC)
    for message in messages:
        if message.state == "ER":
            plan.errored.append(message)
            continue
        destination = routed.get(message.conversation_handle)
        if destination is None:
            destination = routed[message.conversation_handle] = route(
                catalog.routes, service_name=message.to_service, broker_instance=message.destination_instance,
                origin=origin, directory=directory, now=now, pick=_sticky(message.conversation_id))
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


def _sticky(conversation_id: uuid.UUID) -> Callable[[Sequence[str]], str]:
    """Load balancing's choice of a broker instance for one dialog (spec 8.2 step 3): the
    same each time it is asked, since a message whose acknowledgement was lost must go
    again where the first try may have landed, and spread over dialogs, whose ids are
    random."""
    return lambda instances: instances[conversation_id.int % len(instances)]

"""Moving a message from its sending endpoint into the receiving queue.

Where the routes (``broker.routing``) lead to a service of the sender's own database,
the message is inserted straight into the target queue in the sender's transaction.
When that is impossible (broker disabled, no route, target service unknown, target
queue OFF) it waits in ``sys.transmission_queue`` with a ``transmission_status`` saying
why, and every later message of the same dialog waits behind it, so a dialog is never
reordered. DDL that can remove the cause (ALTER QUEUE, CREATE SERVICE, ENABLE BROKER)
retries the waiting messages in its own transaction.

A message for another database (or instance) waits there too, with an empty status,
until the transmitter (``broker.runtime.transmitter``) has it acknowledged by the
destination; a local retry leaves such messages alone.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import Row, bindparam, delete, insert, select, update

from broker.conversations import endpoints as ep
from broker.conversations.frames import Kind
from broker.conversations.system_messages import (
    CONTRACT_NOT_SUPPORTED,
    DIALOG_TIMER_ID,
    END_DIALOG_ID,
    ERROR_ID,
    VALIDATION_FAILED,
    error_body,
)
from broker.conversations.validation import body_failure
from broker.routing.matching import Delayed, Local, OneDatabase, route
from broker.storage.catalog import QueueInfo
from broker.storage.context import TxContext
from broker.storage.queue_tables import (
    INCOMPLETE,
    RANK_DIALOG_TIMER,
    RANK_ERROR,
    RANK_PARTIAL,
    RANK_SEQUENCED,
    queue_statements,
)
from broker.storage.rows import Endpoint
from broker.storage.statements import Prepared
from broker.storage.waiting import TRANSMISSION_QUEUE

# When a held message is first retried in the background (the scheduler backs off from here).
FIRST_RETRY = timedelta(seconds=4)

# transmission_status texts, verbatim from SQL Server (routing's are in ``routing.matching``).
BROKER_DISABLED = "The broker is disabled in the sender's database."
ERROR_RECEIVED = (
    "Service Broker received an error message on this conversation. Service Broker will not "
    "transmit the message; it will be held until the application ends the conversation."
)


def queue_disabled(name: str) -> str:
    return f'The service queue "{name}" is currently disabled.'


# A held message: every column of the transmission queue but the id the database assigns.
_HELD_COLUMNS = tuple(c.name for c in ep.transmissions.columns if c.name != "message_id")
_HOLD = Prepared(insert(ep.transmissions).values({name: bindparam(name) for name in _HELD_COLUMNS}),
                 positional=_HELD_COLUMNS)


class _Elsewhere:
    """The outcome of a delivery attempt whose destination is another database."""


# The message waits for the transmitter; a local retry leaves its row as it is.
ELSEWHERE = _Elsewhere()
Outcome = str | _Elsewhere | None  # why it waits, elsewhere, or delivered (or discarded)


class Outgoing(NamedTuple):
    """A sequenced message leaving an endpoint (a tuple: one is made per message sent)."""

    sequence: int
    message_type_id: int
    body: bytes | None
    kind: Kind


def transmit(ctx: TxContext, sender: Endpoint, out: Outgoing) -> bool:
    """Deliver ``out`` now, or hold it; True when it left the sender (delivered or discarded)."""
    if sender.held_messages:
        _hold(ctx, sender, out, sender.transmission_status)
        return False
    outcome = _deliver(ctx, sender, out)
    if outcome is not None:
        _hold(ctx, sender, out, "" if isinstance(outcome, _Elsewhere) else outcome)
        return False
    if sender.transmission_status:
        ep.set_endpoint(ctx, sender.conversation_handle, transmission_status="")
    return True


def enqueue(
    ctx: TxContext,
    receiver: Endpoint,
    queue: QueueInfo,
    sequence: int,
    message_type_id: int,
    body: bytes | None,
    status: int = 1,
    at: datetime | None = None,
) -> None:
    """Insert one message for ``receiver`` into ``queue`` (already checked to accept it),
    enqueued now or ``at`` (a batch of arrivals shares one moment)."""
    _insert(ctx, receiver, queue, sequence, message_type_id, body, status, at, _rank(message_type_id))
    if status == 1 and queue.id not in ctx.touched_queues:
        ctx.touched_queues.add(queue.id)
        ctx.state.backend.enqueued(ctx.conn, queue.id)  # wakes other processes at commit


def enqueue_partial(ctx: TxContext, receiver: Endpoint, queue: QueueInfo, sequence: int, message_type_id: int,
                    at: datetime) -> None:
    """Show in ``queue`` a message still arriving in fragments (``conversations.arrival``):
    a row with status 2, no body and ``RANK_PARTIAL``, which no RECEIVE returns and no
    filled gap makes ready. ``endpoints.drop_partial_messages`` removes it."""
    _insert(ctx, receiver, queue, sequence, message_type_id, None, INCOMPLETE, at, RANK_PARTIAL)


def _insert(ctx: TxContext, receiver: Endpoint, queue: QueueInfo, sequence: int, message_type_id: int,
            body: bytes | None, status: int, at: datetime | None, rank: int) -> None:
    # A QueueRow's fields after queuing_order, which the database assigns.
    queue_statements(queue.table_name).insert.defer(ctx.kept, (
        status, receiver.priority, receiver.conversation_group_id, receiver.conversation_handle, sequence,
        receiver.service_id, receiver.service_contract_id, message_type_id,
        ctx.catalog.message_types[message_type_id].validation, body, at or ctx.now(), rank,
    ))


def broker_error(ctx: TxContext, receiver: Endpoint, code: int, description: str) -> None:
    """The broker ends ``receiver``'s dialog with an error: an Error message, state ER.

    Broker errors are unsequenced. An endpoint that has already ended discards them.
    """
    if receiver.state in ("DO", "CD"):
        return
    ep.set_endpoint(ctx, receiver.conversation_handle, state="ER")
    ep.drop_partial_messages(ctx, receiver)  # a dialog in error takes no more fragments: none would complete
    deliver_system_message(ctx, receiver, ERROR_ID, error_body(code, description))


def deliver_system_message(ctx: TxContext, receiver: Endpoint, message_type_id: int, body: bytes | None) -> None:
    """Put a broker-made message on the receiver's queue, or hold it while the queue is OFF."""
    queue = queue_of(ctx, receiver)
    if queue.enqueue_enabled:
        enqueue(ctx, receiver, queue, receiver.receive_sequence, message_type_id, body)
    else:
        park(ctx, receiver, queue, receiver.receive_sequence, message_type_id, body)


def park(ctx: TxContext, receiver: Endpoint, queue: QueueInfo, sequence: int, message_type_id: int,
         body: bytes | None) -> None:
    """Hold a message that arrived for ``receiver`` in this database's transmission queue
    while its queue is OFF; ALTER QUEUE ... STATUS = ON (or a later retry) enqueues it."""
    ctx.conn.execute(insert(ep.transmissions).values(
        conversation_handle=receiver.conversation_handle,
        to_conversation_handle=receiver.conversation_handle,
        to_service_name=ctx.catalog.services[receiver.service_id].name,
        to_broker_instance=str(ctx.catalog.broker_guid), from_service_name=receiver.far_service,
        service_contract_id=receiver.service_contract_id, enqueue_time=ctx.now(),
        message_sequence_number=sequence, message_type_id=message_type_id,
        is_conversation_error=message_type_id == ERROR_ID, is_end_of_dialog=message_type_id == END_DIALOG_ID,
        message_body=body, transmission_status=queue_disabled(queue.name), priority=receiver.priority,
        next_attempt_time=ctx.now() + FIRST_RETRY, attempts=0,
    ))


def retry_held(ctx: TxContext, handles: set[uuid.UUID] | None = None, *, routed_here: bool = False) -> None:
    """Try again to deliver what waits in the transmission queue, in order per dialog.

    ``routed_here``: the transmitter has routed these dialogs to this database with the
    whole instance in view; their first messages take that decision rather than routing
    again (a route that balances load could choose differently).
    """
    query = select(ep.transmissions).order_by(ep.transmissions.c.message_id)
    if handles is not None:
        query = query.where(ep.transmissions.c.conversation_handle.in_(handles))
    # A dialog's outbound messages wait behind each other, and so do the messages parked
    # for it inbound (its queue was OFF), but the two never wait for each other.
    blocked: set[tuple[bool, uuid.UUID]] = set()
    for row in ctx.conn.execute(query).all():
        inbound = row.to_conversation_handle is not None
        if (inbound, row.conversation_handle) in blocked:
            continue
        if not (_retry_system_message(ctx, row) if inbound else _retry_sequenced(ctx, row, routed_here)):
            blocked.add((inbound, row.conversation_handle))


def _still_held(ctx: TxContext, message_id: int) -> bool:
    """Whether the transmission queue still holds ``message_id``, read (and locked) once
    the dialog's endpoint is locked: under READ COMMITTED another transaction (the
    transmitter, an ALTER QUEUE) may have delivered it since the rows were read, and
    delivering it again would duplicate it. Where one write lock covers every row
    (SQLite) nobody can have: no query."""
    if not ctx.state.backend.row_locks:
        return True
    return ctx.conn.execute(select(ep.transmissions.c.message_id).where(
        ep.transmissions.c.message_id == message_id).with_for_update()).first() is not None


def _retry_system_message(ctx: TxContext, row: Row[Any]) -> bool:
    receiver = ep.find_endpoint(ctx, row.to_conversation_handle)
    if not _still_held(ctx, row.message_id):
        return True
    if receiver is not None:
        queue = queue_of(ctx, receiver)
        if not queue.enqueue_enabled:
            return False
        enqueue(ctx, receiver, queue, row.message_sequence_number, row.message_type_id, row.message_body)
    ctx.conn.execute(delete(ep.transmissions).where(ep.transmissions.c.message_id == row.message_id))
    return True


def _retry_sequenced(ctx: TxContext, row: Row[Any], routed_here: bool) -> bool:
    sender = ep.find_endpoint(ctx, row.conversation_handle)
    if not _still_held(ctx, row.message_id):
        return True
    if sender is None:
        ctx.conn.execute(delete(ep.transmissions).where(ep.transmissions.c.message_id == row.message_id))
        return True
    if sender.state == "ER":
        reason: Outcome = ERROR_RECEIVED
    else:
        kind: Kind = "error" if row.is_conversation_error else "end" if row.is_end_of_dialog else "message"
        reason = _deliver(ctx, sender, Outgoing(row.message_sequence_number, row.message_type_id,
                                                row.message_body, kind), routed_here)
    if reason is ELSEWHERE:
        return False  # the transmitter's to deliver
    if isinstance(reason, str):
        ctx.conn.execute(update(ep.transmissions).where(ep.transmissions.c.message_id == row.message_id)
                         .values(transmission_status=reason))
        ep.set_endpoint(ctx, sender.conversation_handle, transmission_status=reason)
        return False
    ctx.conn.execute(delete(ep.transmissions).where(ep.transmissions.c.message_id == row.message_id))
    remaining = sender.held_messages - 1
    ep.set_endpoint(ctx, sender.conversation_handle, held_messages=remaining,
                    transmission_status="" if remaining == 0 else sender.transmission_status)
    if sender.state == "DO" and (row.is_end_of_dialog or row.is_conversation_error):
        # The far side now has our EndDialog/Error: that is its acknowledgement.
        ep.close_endpoint(ctx, sender)
    return True


def _deliver(ctx: TxContext, sender: Endpoint, out: Outgoing, routed_here: bool = False) -> Outcome:
    """Deliver one message; None when done (or discarded), ELSEWHERE when it is for
    another database, else why it must wait."""
    if not ctx.catalog.broker_enabled:
        return BROKER_DISABLED
    peer = ep.peer_of(ctx, sender)
    if peer is None:
        return _deliver_without_peer(ctx, sender, out, routed_here)
    if peer.state in ("DO", "CD"):
        if peer.state == "DO" and out.kind in ("end", "error"):
            # Both sides have ended: the far side drops what it still holds and closes.
            ep.drop_held_messages(ctx, peer.conversation_handle)
            ep.close_endpoint(ctx, peer)
        return None  # the far side has ended: it discards whatever still arrives
    queue = queue_of(ctx, peer)
    if not queue.enqueue_enabled:
        return queue_disabled(queue.name)
    if out.kind == "message" and _reject_invalid_body(ctx, sender, peer, out):
        return None
    enqueue(ctx, peer, queue, out.sequence, out.message_type_id, out.body)
    after_arrival(ctx, peer, out.sequence, out.kind)
    return None


def _deliver_without_peer(ctx: TxContext, sender: Endpoint, out: Outgoing, routed_here: bool) -> Outcome:
    """A message whose far endpoint is not in this database (yet).

    The first message of a dialog is routed: routing here knows only this database, so
    it is conclusive when it leads here or nowhere; anything else is the transmitter's.
    Later messages go where the first acknowledgement said the far side is.
    """
    catalog = ctx.catalog
    own = str(catalog.broker_guid)
    far = sender.far_broker_instance
    if not sender.is_initiator or (far is not None and out.sequence > 0):
        return None if far == own else ELSEWHERE  # a far side that was here has ended and gone
    destination = route(catalog.routes, service_name=sender.far_service, broker_instance=own if routed_here else far,
                        origin=own, directory=OneDatabase(catalog), now=ctx.now())
    if destination == Local(own):
        return _deliver_first(ctx, sender, out)
    return destination.reason if isinstance(destination, Delayed) else ELSEWHERE


def _deliver_first(ctx: TxContext, sender: Endpoint, out: Outgoing) -> str | None:
    """The first message of a dialog to a service of this database: create its endpoint."""
    if out.kind != "message":
        # An EndDialog or Error with nothing delivered before it (its messages were
        # discarded by END WITH ERROR): the target never heard of the dialog.
        return None
    catalog = ctx.catalog
    service = catalog.services_by_name[sender.far_service]  # routing found it here
    contract = catalog.contracts[sender.service_contract_id]
    if contract.id not in service.contract_ids:
        broker_error(ctx, sender, CONTRACT_NOT_SUPPORTED,
                     f"Target service '{service.name}' does not support contract '{contract.name}'.")
        return None
    queue = catalog.queues[service.queue_id]
    if not queue.enqueue_enabled:
        return queue_disabled(queue.name)
    if out.kind == "message" and _reject_invalid_body(ctx, sender, None, out):
        return None
    group_id = uuid.uuid4()
    ep.create_group(ctx, group_id, service.id)
    guid = str(catalog.broker_guid)
    peer = ep.create_endpoint(
        ctx, conversation_id=sender.conversation_id, is_initiator=False, contract_id=contract.id,
        group_id=group_id, service_id=service.id, lifetime=sender.lifetime, state="CO",
        far_service=catalog.services[sender.service_id].name, far_broker_instance=guid,
        receive_sequence=out.sequence,
    )
    # The first acknowledgement tells the initiator which broker holds the target.
    ep.set_endpoint(ctx, sender.conversation_handle, far_broker_instance=guid)
    enqueue(ctx, peer, queue, out.sequence, out.message_type_id, out.body)
    after_arrival(ctx, peer, out.sequence, out.kind)
    return None


def after_arrival(ctx: TxContext, receiver: Endpoint, sequence: int, kind: Kind) -> None:
    """``receiver`` has its message ``sequence``: expect the next, and take the state an
    EndDialog (DI) or an Error (ER) brings."""
    state = "CO" if receiver.state == "SI" else receiver.state  # the first message is complete
    if kind == "end" and state in ("SO", "CO"):
        state = "DI"
        # The far side has ended: what this side still holds for it would be discarded
        # on arrival, so it goes now rather than at the next retry.
        if receiver.held_messages:
            ep.drop_outbound(ctx, receiver)
    elif kind == "error":
        state = "ER"
    ep.advance_receive(ctx, receiver, sequence + 1, state)


def _reject_invalid_body(ctx: TxContext, sender: Endpoint, receiver: Endpoint | None, out: Outgoing) -> bool:
    """Validate at delivery; on failure the message is discarded and the dialog errors.

    The sender gets Error -9615 as SQL Server documents. The receiving endpoint, when it
    exists, gets the same error: the dialog cannot continue with a hole in its sequence.
    """
    message_type = ctx.catalog.message_types[out.message_type_id]
    failure = body_failure(ctx.catalog, message_type, out.body)
    if failure is None:
        return False
    description = validation_failure(message_type.name, failure, sender.conversation_id, sender.is_initiator,
                                     out.sequence)
    broker_error(ctx, sender, VALIDATION_FAILED, description)
    if receiver is not None:
        broker_error(ctx, receiver, VALIDATION_FAILED, description)
    return True


def _hold(ctx: TxContext, sender: Endpoint, out: Outgoing, reason: str) -> None:
    """Hold a message in the transmission queue, behind the dialog's other held ones.

    Written behind like a queue insert (``broker.storage.pending``): a dialog to another
    database holds every message it sends, so this is SEND's path there.
    """
    now = ctx.now()
    _HOLD.defer(ctx.kept, (
        sender.conversation_handle, None, sender.far_service, sender.far_broker_instance,
        ctx.catalog.services[sender.service_id].name, sender.service_contract_id, now, out.sequence,
        out.message_type_id, out.kind == "error", out.kind == "end", out.body, reason, sender.priority,
        now, 0,  # due at once: the transmitter's to try
        0, None,  # no fragment of it is held anywhere yet
    ))
    sender.held_messages += 1
    sender.transmission_status = reason
    ctx.kept.changed(sender)
    if TRANSMISSION_QUEUE not in ctx.touched_queues:
        ctx.touched_queues.add(TRANSMISSION_QUEUE)
        ctx.state.backend.enqueued(ctx.conn, TRANSMISSION_QUEUE)  # wakes the transmitter at commit


def validation_failure(message_type: str, failure: str, conversation_id: uuid.UUID, from_initiator: bool,
                       sequence: int) -> str:
    """The description of Error -9615, as SQL Server words it."""
    return (
        f"A message of type '{message_type}' failed XML validation on the target service. "
        f"{failure} This occurred in the message with Conversation ID '{str(conversation_id).upper()}', "
        f"Initiator: {int(from_initiator)}, and Message sequence number: {sequence}."
    )


def queue_of(ctx: TxContext, endpoint: Endpoint) -> QueueInfo:
    """The queue of the service an endpoint belongs to."""
    return ctx.catalog.queues[ctx.catalog.services[endpoint.service_id].queue_id]


def _rank(message_type_id: int) -> int:
    if message_type_id == DIALOG_TIMER_ID:
        return RANK_DIALOG_TIMER
    if message_type_id == ERROR_ID:
        return RANK_ERROR
    return RANK_SEQUENCED


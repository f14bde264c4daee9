"""The destination's half of the dialog protocol: frames arriving from another database.

:func:`arrive` applies a batch of frames in the destination's transaction and returns a
receipt for each; the receipts hold only once that transaction commits (the transport
commits before it answers). Per frame, as spec 7.3 and 7.4 say:

* the first message of a dialog finds the target service, checks that it takes the
  contract (else Error -8408 to the sender) and creates the target endpoint (``CO``, or
  ``SI`` while an earlier message is missing) in a new conversation group;
* a message already received (its sequence number is behind the endpoint's) is a
  duplicate: acknowledged again, never enqueued twice;
* a message ahead of the next one expected waits in the queue with status 2 until the
  gap fills; then it becomes ready (status 1), in order;
* the body is validated against the message type here, at the destination (Error -9615
  to both sides on failure); a type the contract does not have is Error -8498;
* a queue that is OFF holds the message in this database's transmission queue
  (acknowledged: it is committed here), to be enqueued when the queue is ON again;
* an endpoint that has ended discards what still arrives, and both sides having ended
  closes it;
* a message from another instance may come in fragments (``frames.fragments_of``), each
  committed here as it comes (``sb_fragments``) and answered with how many of the
  message's fragments are held. The first also puts a row with status 2 in the queue
  (when it is ON) that shows the message while it is incomplete; RECEIVE never returns
  it, and a new dialog's endpoint is ``SI`` until its first message is complete. A
  fragment held already, or one beyond the next expected, is not stored: the receipt's
  count tells the sender where to go on from. The last fragment completes the message,
  which is then taken as a whole one is (all of the above); its fragments and its row
  go in the same transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, insert, select, update

from broker.conversations import endpoints as ep
from broker.conversations.delivery import (
    after_arrival,
    broker_error,
    enqueue,
    enqueue_partial,
    park,
    queue_disabled,
    queue_of,
    validation_failure,
)
from broker.conversations.frames import BrokerErrorNote, Kind, MessageFrame, Receipt
from broker.conversations.system_messages import (
    CONTRACT_NOT_SUPPORTED,
    END_DIALOG_ID,
    ERROR_ID,
    TYPE_NOT_IN_CONTRACT,
    VALIDATION_FAILED,
)
from broker.conversations.validation import body_failure
from broker.routing.matching import BROKER_NOT_FOUND, SERVICE_NOT_FOUND
from broker.storage.catalog import QueueInfo
from broker.storage.context import TxContext
from broker.storage.queue_tables import INCOMPLETE, RANK_PARTIAL, queue_table
from broker.storage.rows import Endpoint

_f = ep.fragments


def arrive(ctx: TxContext, frames: Sequence[MessageFrame]) -> list[Receipt]:
    """Apply ``frames`` in this database's transaction; a receipt for each, in order."""
    here = str(ctx.catalog.broker_guid) if ctx.catalog.broker_enabled else None
    moment = ctx.now()  # the enqueue time of the whole batch: one transaction, one moment
    return [_arrive(ctx, frame, moment) if frame.to_broker == here
            else Receipt(frame.message_id, False, BROKER_NOT_FOUND) for frame in frames]


def _arrive(ctx: TxContext, frame: MessageFrame, moment: datetime) -> Receipt:
    receiver = ep.by_conversation(ctx, frame.conversation_id, not frame.from_initiator)
    if receiver is None:
        if not frame.from_initiator or frame.kind != "message":
            # The initiator has ended and gone, or an EndDialog / Error for a dialog
            # this side never heard of: nothing to deliver to.
            return Receipt(frame.message_id, True)
        if frame.fragment > 0:
            return Receipt(frame.message_id, False, fragments_held=0)  # none of it is here: from the first
        return _first_arrival(ctx, frame, moment)
    return _arrive_at(ctx, receiver, frame, moment)


def _first_arrival(ctx: TxContext, frame: MessageFrame, moment: datetime) -> Receipt:
    """The first message of a dialog to reach this database (or its first fragment):
    create the target endpoint."""
    catalog = ctx.catalog
    service = catalog.services_by_name.get(frame.to_service)
    if service is None:
        return Receipt(frame.message_id, False, SERVICE_NOT_FOUND)  # gone meanwhile: routed again
    contract = catalog.contracts_by_name.get(frame.contract)
    if contract is None or contract.id not in service.contract_ids:
        return Receipt(frame.message_id, True, error=BrokerErrorNote(
            CONTRACT_NOT_SUPPORTED, f"Target service '{service.name}' does not support contract '{frame.contract}'."))
    refusal = _invalid(ctx, frame, contract.usages)
    if refusal is not None:
        return Receipt(frame.message_id, True, error=refusal)  # nothing was created
    group_id = uuid.uuid4()
    ep.create_group(ctx, group_id, service.id)
    complete = frame.sequence == 0 and frame.fragments == 1
    receiver = ep.create_endpoint(
        ctx, conversation_id=frame.conversation_id, is_initiator=False, contract_id=contract.id,
        group_id=group_id, service_id=service.id, lifetime=frame.lifetime,
        state="CO" if complete else "SI", far_service=frame.from_service, far_broker_instance=frame.from_broker,
    )
    return _arrive_at(ctx, receiver, frame, moment)


def _arrive_at(ctx: TxContext, receiver: Endpoint, frame: MessageFrame, moment: datetime) -> Receipt:
    acknowledged = Receipt(frame.message_id, True)
    if receiver.state in ("DO", "CD"):
        if receiver.state == "DO" and frame.kind in ("end", "error"):
            ep.drop_held_messages(ctx, receiver.conversation_handle)  # both sides have ended
            ep.close_endpoint(ctx, receiver)
        return acknowledged  # this side has ended: it discards whatever still arrives
    if receiver.state == "ER":
        return acknowledged  # the dialog is in error here: further messages are refused
    if frame.sequence < receiver.receive_sequence:
        return acknowledged  # a duplicate: this side has it already
    queue = queue_of(ctx, receiver)
    if frame.fragments > 1:
        return _arrive_in_part(ctx, receiver, queue, frame, moment)
    return _take(ctx, receiver, queue, frame, moment)


def _take(ctx: TxContext, receiver: Endpoint, queue: QueueInfo, frame: MessageFrame, moment: datetime) -> Receipt:
    """A whole message, neither a duplicate nor for an endpoint that ended: validate it,
    then enqueue it (ready, or held ahead of a gap) or park it while the queue is OFF."""
    acknowledged = Receipt(frame.message_id, True)
    refused = _refused(ctx, receiver, frame)
    if refused is not None:
        return refused
    type_id = _message_type_id(ctx, frame)
    if frame.sequence > receiver.receive_sequence:
        if not queue.enqueue_enabled:
            return Receipt(frame.message_id, False, queue_disabled(queue.name))
        if not _held_ahead(ctx, receiver, queue.table_name, frame.sequence):
            enqueue(ctx, receiver, queue, frame.sequence, type_id, frame.body, status=INCOMPLETE, at=moment)
            if (receiver.last_out_of_order_sequence or -1) < frame.sequence:
                receiver.last_out_of_order_sequence = frame.sequence
                ep.set_endpoint(ctx, receiver.conversation_handle, last_out_of_order_sequence=frame.sequence)
        return acknowledged
    if queue.enqueue_enabled:
        enqueue(ctx, receiver, queue, frame.sequence, type_id, frame.body, at=moment)
    else:
        park(ctx, receiver, queue, frame.sequence, type_id, frame.body)
    after_arrival(ctx, receiver, frame.sequence, frame.kind)
    if receiver.last_out_of_order_sequence is not None:
        _release_held_ahead(ctx, receiver, queue.table_name)
    return acknowledged


def _arrive_in_part(ctx: TxContext, receiver: Endpoint, queue: QueueInfo, frame: MessageFrame,
                    moment: datetime) -> Receipt:
    """One fragment of a message that is neither a duplicate nor for an endpoint that
    ended, in the destination's transaction: stored when it is the next one expected
    (the first, its type checked, with the row that shows the message); the last
    completes the message. Otherwise answered with the count of fragments held."""
    handle, sequence = receiver.conversation_handle, frame.sequence
    if sequence > receiver.receive_sequence and _held_ahead(ctx, receiver, queue.table_name, sequence):
        return Receipt(frame.message_id, True)  # complete here already, waiting for a gap to fill
    held = ctx.conn.execute(select(func.count()).select_from(_f).where(
        _f.c.conversation_handle == handle, _f.c.message_sequence_number == sequence)).scalar_one()
    if frame.fragment != held:
        return Receipt(frame.message_id, False, fragments_held=held)  # held already, or beyond a gap
    if frame.fragment == 0:
        refused = _refused(ctx, receiver, frame)
        if refused is not None:
            return refused
    if frame.fragment == frame.fragments - 1:
        return _complete(ctx, receiver, queue, frame, moment)
    ctx.conn.execute(insert(_f).values(conversation_handle=handle, message_sequence_number=sequence,
                                       fragment=frame.fragment, body=frame.body or b""))
    if frame.fragment == 0 and queue.enqueue_enabled:
        enqueue_partial(ctx, receiver, queue, sequence, _message_type_id(ctx, frame), moment)
    return Receipt(frame.message_id, False, fragments_held=held + 1)


def _complete(ctx: TxContext, receiver: Endpoint, queue: QueueInfo, last: MessageFrame,
              moment: datetime) -> Receipt:
    """The last fragment of a message: the message, whole, is taken as one that came
    whole. Its fragments and its row go once it is acknowledged; when it is refused (a
    queue that is OFF, with the message ahead of a gap) they stay, and the sender sends
    the last fragment again."""
    handle, sequence = receiver.conversation_handle, last.sequence
    parts = ctx.conn.execute(select(_f.c.body).where(
        _f.c.conversation_handle == handle, _f.c.message_sequence_number == sequence).order_by(_f.c.fragment))
    whole = last._replace(body=b"".join([*parts.scalars(), last.body or b""]), fragment=0, fragments=1)
    receipt = _take(ctx, receiver, queue, whole, moment)
    if receipt.acknowledged:
        ep.drop_partial_messages(ctx, receiver, sequence)
    return receipt


def _refused(ctx: TxContext, receiver: Endpoint, frame: MessageFrame) -> Receipt | None:
    """The receipt of a message (or first fragment) whose type or body cannot be taken:
    a hole the dialog cannot fill, so the broker ends it with the error; None when it
    can be taken."""
    refusal = _invalid(ctx, frame, ctx.catalog.contracts[receiver.service_contract_id].usages)
    if refusal is None:
        return None
    broker_error(ctx, receiver, refusal.code, refusal.description)
    return Receipt(frame.message_id, True, error=refusal)


def _message_type_id(ctx: TxContext, frame: MessageFrame) -> int:
    if frame.kind == "end":
        return END_DIALOG_ID
    if frame.kind == "error":
        return ERROR_ID
    return ctx.catalog.message_types_by_name[frame.message_type].id  # checked by ``_invalid``


def _invalid(ctx: TxContext, frame: MessageFrame, usages: dict[int, tuple[bool, bool]]) -> BrokerErrorNote | None:
    """Why a message cannot be taken here: a type the contract lacks (or not for this
    direction), or a body that fails the type's validation (checked once the message
    is whole, not for a fragment); None when it can."""
    if frame.kind != "message":
        return None
    message_type = ctx.catalog.message_types_by_name.get(frame.message_type)
    usage = None if message_type is None else usages.get(message_type.id)
    if message_type is None or usage is None or not usage[0 if frame.from_initiator else 1]:
        return BrokerErrorNote(TYPE_NOT_IN_CONTRACT, f"The remote service has sent a message of type "
                                                     f"'{frame.message_type}' that is not part of the local contract.")
    failure = None if frame.fragments > 1 else body_failure(ctx.catalog, message_type, frame.body)
    if failure is None:
        return None
    return BrokerErrorNote(VALIDATION_FAILED, validation_failure(
        message_type.name, failure, frame.conversation_id, frame.from_initiator, frame.sequence))


def _held_ahead(ctx: TxContext, receiver: Endpoint, table_name: str, sequence: int) -> bool:
    """Whether message ``sequence`` waits here whole, ahead of a gap (status 2; not the row
    of a message still arriving in fragments)."""
    table = queue_table(table_name)
    return ctx.conn.execute(select(table.c.queuing_order).where(
        table.c.conversation_handle == receiver.conversation_handle, table.c.status == INCOMPLETE,
        table.c.receive_rank != RANK_PARTIAL, table.c.message_sequence_number == sequence)).first() is not None


def _release_held_ahead(ctx: TxContext, receiver: Endpoint, table_name: str) -> None:
    """Make ready the messages that waited for the gap this arrival filled, in order (a
    message still arriving in fragments stops it: it fills its own gap once complete)."""
    table = queue_table(table_name)
    while True:
        row = ctx.conn.execute(select(table.c.queuing_order, table.c.message_type_id).where(
            table.c.conversation_handle == receiver.conversation_handle, table.c.status == INCOMPLETE,
            table.c.receive_rank != RANK_PARTIAL,
            table.c.message_sequence_number == receiver.receive_sequence)).first()
        if row is None:
            last = receiver.last_out_of_order_sequence
            if last is not None and last < receiver.receive_sequence:  # no gap is left
                receiver.last_out_of_order_sequence = None
                ep.set_endpoint(ctx, receiver.conversation_handle, last_out_of_order_sequence=None)
            return
        ctx.conn.execute(update(table).where(table.c.queuing_order == row.queuing_order).values(status=1))
        kind: Kind = "end" if row.message_type_id == END_DIALOG_ID else \
            "error" if row.message_type_id == ERROR_ID else "message"
        after_arrival(ctx, receiver, receiver.receive_sequence, kind)

"""SEND ON CONVERSATION, on one handle or several at once.

Every check runs for every handle before anything is written, so a SEND that fails on
one handle sends nothing on any of them (SQL Server's multicast SEND is atomic).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from broker.conversations import endpoints as ep
from broker.conversations.delivery import Outgoing, enqueue, transmit
from broker.errors import REPEATED_HANDLE, BrokerError, InvalidArgumentError
from broker.storage.catalog import QueueInfo
from broker.storage.context import TxContext
from broker.storage.rows import Endpoint

RETAINED_SENT = 3  # queue status of the sender's retained copy


def send(ctx: TxContext, handles: object, message_type: str, payload: bytes | None) -> None:
    """Send one message on each handle, in the caller's transaction (``payload`` as
    ``arguments.body`` makes it)."""
    message_type_info = ctx.catalog.message_types_by_name.get(message_type)
    senders = [_checked_sender(ctx, h) for h in _handle_list(handles)]
    if message_type_info is None:  # only after the handles: SQL Server checks them first
        raise BrokerError(8428, name=message_type)
    own_queues = []
    for sender in senders:
        _check_contract(ctx, sender, message_type_info.id, message_type)
        own_queues.append(_checked_own_queue(ctx, sender))
    for sender, own_queue in zip(senders, own_queues, strict=True):
        # A dialog with held messages holds this one behind them (``transmit``): the
        # transmitter retries them, and DDL that removes a cause retries them at once.
        sequence = sender.send_sequence
        ep.advance_send(ctx, sender, "CO" if sender.state == "SO" else sender.state)
        transmit(ctx, sender, Outgoing(sequence, message_type_info.id, payload, "message"))
        if own_queue.retention:
            enqueue(ctx, sender, own_queue, sequence, message_type_info.id, payload, status=RETAINED_SENT)


def _handle_list(handles: object) -> list[object]:
    if isinstance(handles, uuid.UUID):  # one handle, as returned by begin_dialog
        return [handles]
    if handles is None:
        raise BrokerError(8418)
    if isinstance(handles, (str, bytes)) or not isinstance(handles, Iterable):
        return [handles]
    items = list(handles)
    if not items:
        raise BrokerError(8418)
    seen = set()
    for item in items:
        key = ep.as_handle(item)
        if key in seen:
            raise InvalidArgumentError(REPEATED_HANDLE, handle=str(key).upper())
        seen.add(key)
    return items


def _checked_sender(ctx: TxContext, handle: object) -> Endpoint:
    sender = ep.lock_endpoint(ctx, handle)
    if sender.state not in ep.SENDABLE_STATES:
        raise BrokerError(8429, state=sender.state)
    if sender.lifetime <= ctx.now():
        # The dialog has outlived its LIFETIME: it is in error even before the
        # scheduler (or a RECEIVE) delivers the -8489 Error message.
        raise BrokerError(8429, state="ER")
    return sender


def _check_contract(ctx: TxContext, sender: Endpoint, message_type_id: int, name: str) -> None:
    usage = ctx.catalog.contracts[sender.service_contract_id].usages.get(message_type_id)
    if usage is None:
        raise BrokerError(8431, name=name)
    by_initiator, by_target = usage
    if sender.is_initiator and not by_initiator:
        raise BrokerError(8432, name=name)
    if not sender.is_initiator and not by_target:
        raise BrokerError(8434, name=name)


def _checked_own_queue(ctx: TxContext, sender: Endpoint) -> QueueInfo:
    """The sender's own queue, which keeps a copy of what it sends under RETENTION."""
    queue = ctx.catalog.queues[ctx.catalog.services[sender.service_id].queue_id]
    if queue.retention and not queue.enqueue_enabled:
        raise BrokerError(9618, name=queue.name)
    return queue

"""BEGIN DIALOG, END CONVERSATION, MOVE CONVERSATION and BEGIN CONVERSATION TIMER.

Each function runs inside the caller's transaction (``ctx``) and checks everything it
can before it writes, so a BrokerError leaves the transaction as it was.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import update

from broker.arguments import INT_MAX
from broker.conversations import endpoints as ep
from broker.conversations.delivery import Outgoing, transmit
from broker.conversations.system_messages import END_DIALOG_ID, ERROR_ID, error_body
from broker.errors import BrokerError, InvalidArgumentError
from broker.storage.context import TxContext
from broker.storage.queue_tables import queue_table

CURRENT_DATABASE = "CURRENT DATABASE"


def begin_dialog(
    ctx: TxContext,
    from_service: str | None,
    to_service: str,
    contract: str | None,
    *,
    broker_instance: str | None,
    related_conversation: object | None,
    related_conversation_group: object | None,
    lifetime: int | None,
    encryption: bool,
) -> uuid.UUID:
    """Create the initiator endpoint (state SO). Nothing is sent until the first SEND.

    The arguments come checked by the gate (``broker.arguments``). ENCRYPTION = ON gives
    the endpoint a session key identifier: dialog security is asked for (no key exists
    behind it, since dialogs inside an instance are never encrypted).
    """
    catalog = ctx.catalog
    if not from_service:
        raise BrokerError(8421)
    service = catalog.services_by_name.get(from_service)
    if service is None:
        raise BrokerError(8423, name=from_service)
    if contract is None:
        raise BrokerError(8417)
    contract_info = catalog.contracts_by_name.get(contract)
    if contract_info is None:
        raise BrokerError(8425, name=contract)
    pinned = _broker_instance(ctx, broker_instance)
    seconds = INT_MAX if lifetime is None else lifetime
    group_id, new_group = _group_for(ctx, service.id, service.name, related_conversation,
                                     related_conversation_group)
    if new_group:
        ep.create_group(ctx, group_id, service.id)
    now = ctx.now()
    return ep.create_endpoint(
        ctx, conversation_id=uuid.uuid4(), is_initiator=True, contract_id=contract_info.id,
        group_id=group_id, service_id=service.id, lifetime=now + timedelta(seconds=seconds),
        state="SO", far_service=to_service, far_broker_instance=pinned,
        session_key=uuid.uuid4() if encryption else None,
    ).conversation_handle


def end_conversation(
    ctx: TxContext, handle: object, *, error: int | None, description: str | None, cleanup: bool
) -> None:
    """End the local endpoint; tell the far side (EndDialog or Error) unless it already ended.

    ``error`` and ``description`` come checked by the gate (``arguments.failure``).
    """
    endpoint = ep.lock_endpoint(ctx, handle)
    if cleanup:
        ep.remove_local_messages(ctx, endpoint)
        ep.drop_held_messages(ctx, endpoint.conversation_handle)
        ep.delete_endpoint(ctx, endpoint)
        return
    if endpoint.state in ("DO", "CD"):
        raise BrokerError(8427, state=endpoint.state)
    ep.remove_local_messages(ctx, endpoint)
    if endpoint.state == "SO":
        ep.delete_endpoint(ctx, endpoint)  # nothing was ever sent: nobody to tell
        return
    if endpoint.state in ("DI", "ER"):
        ep.drop_held_messages(ctx, endpoint.conversation_handle)
        ep.close_endpoint(ctx, endpoint)  # the far side has ended already
        return
    sequence = endpoint.send_sequence
    if error is not None:
        # WITH ERROR discards what has not been transmitted yet.
        ep.drop_held_messages(ctx, endpoint.conversation_handle)
        out = Outgoing(sequence, ERROR_ID, error_body(error, description or ""), "error")
        ep.set_endpoint(ctx, endpoint.conversation_handle, state="DO", send_sequence=sequence + 1,
                        held_messages=0, dialog_timer=None)
    else:
        out = Outgoing(sequence, END_DIALOG_ID, None, "end")
        ep.set_endpoint(ctx, endpoint.conversation_handle, state="DO", send_sequence=sequence + 1,
                        end_dialog_sequence=sequence, dialog_timer=None)
    sender = ep.get_endpoint(ctx, endpoint.conversation_handle)
    if transmit(ctx, sender, out):
        ep.close_endpoint(ctx, sender)


def move_conversation(ctx: TxContext, handle: object, group_id: object) -> None:
    """Move one endpoint (and its queued messages) into another group of the same queue."""
    endpoint = ep.lock_endpoint(ctx, handle)
    if endpoint.state in ("DO", "CD"):
        raise BrokerError(8438, state=endpoint.state)
    target_id = _as_group_id(group_id)
    target = ep.get_group(ctx, target_id)
    source_queue = ctx.catalog.services[endpoint.service_id].queue_id
    if target is None or target.queue_id != source_queue:
        raise BrokerError(8439, group=str(target_id).upper())
    if target_id == endpoint.conversation_group_id:
        return
    ctx.state.backend.lock_group(ctx.conn, target_id)  # MOVE locks both groups
    ep.set_endpoint(ctx, endpoint.conversation_handle, conversation_group_id=target_id)
    table = queue_table(ctx.catalog.queues[source_queue].table_name)
    ctx.conn.execute(update(table).where(table.c.conversation_handle == endpoint.conversation_handle)
                     .values(conversation_group_id=target_id))
    ep.drop_group_if_empty(ctx, endpoint.conversation_group_id)


def begin_conversation_timer(ctx: TxContext, handle: object, timeout: float) -> None:
    """Arm (or re-arm) the endpoint's one timer: a DialogTimer message on expiry."""
    endpoint = ep.lock_endpoint(ctx, handle)
    if endpoint.state not in ("SO", "SI", "CO", "DI"):
        raise BrokerError(8458, state=endpoint.state)
    deadline = ctx.now() + timedelta(seconds=timeout)
    if deadline > endpoint.lifetime:
        raise BrokerError(8410)
    ep.set_endpoint(ctx, endpoint.conversation_handle, dialog_timer=deadline)


def _broker_instance(ctx: TxContext, broker_instance: str | None) -> str | None:
    if broker_instance is None:
        return None
    if broker_instance.upper() == CURRENT_DATABASE:
        return str(ctx.catalog.broker_guid)
    return broker_instance.lower()


def _as_group_id(value: object) -> uuid.UUID:
    if value is None:
        raise BrokerError(8420, "The conversation group is missing. Specify a conversation group.")
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise BrokerError(8436, group=str(value)) from None


def _group_for(
    ctx: TxContext, service_id: int, service_name: str, related_conversation: object | None,
    related_group: object | None,
) -> tuple[uuid.UUID, bool]:
    """(group id, whether it must be created) for a new dialog of ``service_id``."""
    if related_conversation is not None and related_group is not None:
        raise InvalidArgumentError(102, "BEGIN DIALOG takes RELATED_CONVERSATION or RELATED_CONVERSATION_GROUP, "
                                        "not both.", near="RELATED_CONVERSATION_GROUP")
    if related_conversation is not None:
        related = ep.lock_endpoint(ctx, related_conversation)
        if related.service_id != service_id:
            raise BrokerError(9610, name=service_name, other=ctx.catalog.services[related.service_id].name,
                              clause="RELATED_CONVERSATION", related=str(related.conversation_handle).upper())
        return related.conversation_group_id, False
    if related_group is not None:
        group_id = _as_group_id(related_group)
        group = ep.get_group(ctx, group_id)
        if group is None:
            return group_id, True  # an application may choose its own group ids
        if group.service_id != service_id:
            raise BrokerError(9610, name=service_name, other=ctx.catalog.services[group.service_id].name,
                              clause="RELATED_CONVERSATION_GROUP", related=str(group_id).upper())
        ctx.state.backend.lock_group(ctx.conn, group_id)
        return group_id, False
    return uuid.uuid4(), True


def transmission_status(ctx: TxContext, handle: object) -> str:
    """The endpoint's last transmission failure, ``""`` if none (or no such endpoint)."""
    try:
        endpoint = ep.find_endpoint(ctx, ep.as_handle(handle))
    except BrokerError:
        return ""  # NULL or not a handle: GET_TRANSMISSION_STATUS gives the empty string
    return "" if endpoint is None else endpoint.transmission_status

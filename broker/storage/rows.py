"""Rows the hot path keeps between statements of one transaction.

``Endpoint`` is a conversation endpoint read once and kept mutable in the transaction's
write-behind buffer (``broker.storage.pending``), which writes its changes back once.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import Table, bindparam, update
from sqlalchemy.engine import Connection

from broker.storage.models import ConversationEndpoint
from broker.storage.statements import Prepared

_endpoints = cast(Table, ConversationEndpoint.__table__)


@dataclass(slots=True, eq=False)
class Endpoint:
    """One row of ``sb_conversation_endpoints`` (columns in table order).

    Mutable: SEND and delivery advance the sequence numbers and state of the row kept
    for the transaction in place (``advance_send``, ``advance_receive``), once per
    message, and ``broker.storage.pending`` writes them back once.
    """

    conversation_handle: uuid.UUID
    conversation_id: uuid.UUID
    is_initiator: bool
    service_contract_id: int
    conversation_group_id: uuid.UUID
    service_id: int
    lifetime: datetime
    state: str
    far_service: str
    far_broker_instance: str | None
    dialog_timer: datetime | None
    send_sequence: int
    end_dialog_sequence: int
    receive_sequence: int
    system_sequence: int
    priority: int
    is_system: bool
    held_messages: int
    transmission_status: str
    create_date: datetime
    closed_date: datetime | None
    outbound_session_key_identifier: uuid.UUID | None = None  # dialog security (ENCRYPTION = ON)
    last_out_of_order_sequence: int | None = None  # arrived ahead of a gap (status 2) up to here


_WRITE_BACK = Prepared(
    update(_endpoints).where(_endpoints.c.conversation_handle == bindparam("p_handle"))
    .values(send_sequence=bindparam("p_send"), receive_sequence=bindparam("p_receive"),
            state=bindparam("p_state"), held_messages=bindparam("p_held"),
            transmission_status=bindparam("p_status"))
)


def write_back(conn: Connection, changed: list[Endpoint]) -> None:
    """Write what SEND and delivery changed in place: sequence numbers, state, and the
    messages held in the transmission queue with the last reason why."""
    _WRITE_BACK.execute_many(conn, write_back_rows(changed)[1])


def write_back_rows(changed: list[Endpoint]) -> tuple[Prepared, list[dict[str, object]]]:
    """``write_back``'s statement and its rows (PostgreSQL writes them with the others
    held back: ``statements.held_as_one``)."""
    return _WRITE_BACK, [
        {"p_handle": e.conversation_handle, "p_send": e.send_sequence, "p_receive": e.receive_sequence,
         "p_state": e.state, "p_held": e.held_messages, "p_status": e.transmission_status}
        for e in changed
    ]

"""The row a RECEIVE returns (and ``SELECT * FROM queue`` shows)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Message:
    """One queue row, with the columns of SQL Server's RECEIVE (spec 3)."""

    status: int
    priority: int
    queuing_order: int
    conversation_group_id: uuid.UUID
    conversation_handle: uuid.UUID
    message_sequence_number: int
    service_name: str
    service_id: int
    service_contract_name: str
    service_contract_id: int
    message_type_name: str
    message_type_id: int
    validation: str
    message_body: bytes | None
    message_enqueue_time: datetime

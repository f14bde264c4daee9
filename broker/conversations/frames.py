"""The dialog protocol's messages between databases (spec 7.3, 7.4).

A :class:`MessageFrame` carries one sequenced message of a dialog from the database that
holds it in its transmission queue to the database of the far endpoint, with everything
the far side needs to find or create that endpoint: contract and message type travel by
name, the lifetime as a moment. The destination answers every frame with a
:class:`Receipt` once its transaction has committed: acknowledged (the sender may forget
the message), or refused with the reason the message must wait, and possibly a broker
error that ends the sender's side of the dialog (-8408, -9615, -8498).

The transport (``broker.transport``) moves frames and receipts; it adds nothing. They
are named tuples: the transmitter makes one of each per message, and a tuple is built
several times faster than a frozen dataclass.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal, NamedTuple

Kind = Literal["message", "end", "error"]


class MessageFrame(NamedTuple):
    """One sequenced message on its way to the far endpoint of its dialog."""

    message_id: int  # the sender's transmission queue row: what the receipt names
    conversation_id: uuid.UUID
    from_initiator: bool
    from_service: str
    from_broker: str  # the sending database's broker instance
    to_service: str
    to_broker: str  # the destination's broker instance
    contract: str
    message_type: str
    sequence: int
    kind: Kind
    body: bytes | None
    lifetime: datetime


class BrokerErrorNote(NamedTuple):
    """An error the destination's broker raised on the dialog: the sender's endpoint
    receives it as an Error message and moves to ER."""

    code: int
    description: str


class Receipt(NamedTuple):
    """The destination's answer to one frame, valid once its transaction committed."""

    message_id: int
    acknowledged: bool  # kept (or rightly discarded) by the destination
    reason: str = ""  # why it must wait, when not acknowledged (a transmission_status)
    error: BrokerErrorNote | None = None


class Delivery(NamedTuple):
    """The receipts of one batch of frames, and who gave them."""

    broker_instance: str
    receipts: tuple[Receipt, ...]

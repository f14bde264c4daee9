"""The dialog protocol's messages between databases (spec 7.3, 7.4).

A :class:`MessageFrame` carries one sequenced message of a dialog from the database that
holds it in its transmission queue to the database of the far endpoint, with everything
the far side needs to find or create that endpoint: contract and message type travel by
name, the lifetime as a moment. The destination answers every frame with a
:class:`Receipt` once its transaction has committed: acknowledged (the sender may forget
the message), or refused with the reason the message must wait, and possibly a broker
error that ends the sender's side of the dialog (-8408, -9615, -8498).

A message for another instance whose body is over :data:`FRAGMENT_BYTES` travels in
fragments (:func:`fragments_of`): frames of the same message, each with a piece of the
body, its number and how many there are. The destination commits each fragment as it
comes and answers it with how many of the message's fragments it holds
(``Receipt.fragments_held``), so a connection that breaks costs only the fragments not
yet held: the sender goes on from the first one the destination lacks. The last fragment
completes the message, which is then taken like any whole one, and acknowledged.
Between the databases of one instance messages go whole.

The transport (``broker.transport``) moves frames and receipts; it adds nothing. They
are named tuples: the transmitter makes one of each per message, and a tuple is built
several times faster than a frozen dataclass.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal, NamedTuple

Kind = Literal["message", "end", "error"]

FRAGMENT_BYTES = 1 << 20  # a larger body goes to another instance in fragments of this size


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
    body: bytes | None  # a fragment's piece of it, when the message travels in fragments
    lifetime: datetime
    fragment: int = 0  # this frame's fragment of the message (0 for a whole message)
    fragments: int = 1  # how many fragments the message travels in (1: whole)


class BrokerErrorNote(NamedTuple):
    """An error the destination's broker raised on the dialog: the sender's endpoint
    receives it as an Error message and moves to ER."""

    code: int
    description: str


class Receipt(NamedTuple):
    """The destination's answer to one frame, valid once its transaction committed."""

    message_id: int
    acknowledged: bool  # the whole message is kept (or rightly discarded) by the destination
    reason: str = ""  # why it must wait, when refused (a transmission_status)
    error: BrokerErrorNote | None = None
    # A message in fragments that is not complete at the destination (not acknowledged,
    # no reason): its fragments 0 to ``fragments_held - 1`` are committed there, and the
    # next to send is ``fragments_held`` (0: none is, the frame came beyond them). None
    # for a whole message's answer.
    fragments_held: int | None = None

    @property
    def taken(self) -> bool:
        """Whether the destination database took the frame (or rightly discarded it),
        rather than refusing it with a reason."""
        return self.acknowledged or self.fragments_held is not None


def in_one_fragment(frame: MessageFrame) -> bool:
    """Whether ``frame``'s body fits in one fragment (most do: they go as they are)."""
    return frame.body is None or len(frame.body) <= FRAGMENT_BYTES


def fragments_of(frame: MessageFrame, start: int = 0) -> list[MessageFrame]:
    """The frames that carry ``frame`` to another instance, from its fragment ``start``
    on (what the destination does not hold yet): the frame itself when its body fits in
    one fragment. The last fragment always goes: it is the one that completes the message."""
    body = frame.body
    if in_one_fragment(frame):
        return [frame]
    assert body is not None
    count = -(-len(body) // FRAGMENT_BYTES)
    return [frame._replace(body=body[k * FRAGMENT_BYTES:(k + 1) * FRAGMENT_BYTES], fragment=k, fragments=count)
            for k in range(min(start, count - 1), count)]


class Delivery(NamedTuple):
    """The receipts of one batch of frames, and who gave them."""

    broker_instance: str
    receipts: tuple[Receipt, ...]

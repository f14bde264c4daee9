"""Frames between the databases of one instance, in this process.

The destination applies a batch of frames in one transaction of its own
(``conversations.arrival``); the receipts are returned once that transaction has
committed, so the sender never forgets a message the destination does not have. A
destination that fails (a lock wait that ran out, a full disk) commits nothing, and the
sender tries again later.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from broker.conversations.arrival import arrive
from broker.conversations.frames import Delivery, MessageFrame, Receipt
from broker.errors import BrokerError
from broker.routing.matching import BROKER_NOT_FOUND
from broker.storage.served import ServedDatabase
from broker.transport.seam import TransportError

log = logging.getLogger("broker.transport")


class InProcessTransport:
    """Delivers to the databases it is given, by broker instance."""

    def __init__(self, databases: Mapping[str, ServedDatabase]) -> None:
        self._databases = databases

    def deliver(self, destination: str, frames: Sequence[MessageFrame]) -> Delivery:
        database = self._databases.get(destination)
        if database is None:
            raise TransportError(BROKER_NOT_FOUND)
        return apply_frames(database, destination, frames)


def apply_frames(database: ServedDatabase, broker_instance: str, frames: Sequence[MessageFrame]) -> Delivery:
    """Apply ``frames`` in one transaction of ``database`` (whose broker instance this is);
    its receipts once it has committed. A database that fails commits nothing: every
    frame is refused with the reason, and waits at its sender."""
    try:
        with database.transaction() as tx:
            receipts = tx.run(lambda ctx: arrive(ctx, frames))
    except BrokerError as error:
        log.warning("database %s could not take %d message(s): %s", broker_instance, len(frames), error.message)
        reason = f"The target database could not take the messages: {error.message}"
        return Delivery(broker_instance, tuple(Receipt(frame.message_id, False, reason) for frame in frames))
    return Delivery(broker_instance, tuple(receipts))

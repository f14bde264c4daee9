"""The transport seam: frames to a destination, receipts back (spec 7.5's layering).

A transport carries the dialog protocol's frames (``conversations.frames``) to the
database whose broker instance it is given and returns that database's receipts, which
hold because the destination has committed them. It adds no semantics: sequencing,
duplicates and acknowledgements are the dialog protocol's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from broker.conversations.frames import Delivery, MessageFrame


class TransportError(Exception):
    """The frames did not reach their destination (or its answer did not come back):
    the sender keeps the messages and tries again. ``status`` says why, as
    ``sys.transmission_queue.transmission_status`` shows it."""

    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.status = status


class Transport(Protocol):
    def deliver(self, destination: str, frames: Sequence[MessageFrame]) -> Delivery:
        """Carry ``frames`` to the database with broker instance ``destination``; its
        receipts, once it has committed them. Raises ``TransportError`` otherwise."""
        ...

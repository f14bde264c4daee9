"""The transport seam: frames to a destination, receipts back (spec 7.5's layering).

A transport carries the dialog protocol's frames (``conversations.frames``) to their
destination and returns the receipts, which hold because the destination has committed
them. It adds no semantics: sequencing, duplicates and acknowledgements are the dialog
protocol's. :class:`Transport` reaches a database of this instance by its broker
instance (``transport.inprocess``); :class:`NetworkTransport` reaches another
instance's endpoint by its address (``transport.tcp``), where the frames may land in
several databases, each answering for its own.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from typing import Protocol

from broker.conversations.frames import Delivery, MessageFrame
from broker.routing.addresses import TcpAddress


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


Answer = concurrent.futures.Future[Sequence[Delivery]]


class NetworkTransport(Protocol):
    def deliver(self, address: TcpAddress, frames: Sequence[MessageFrame]) -> Sequence[Delivery]:
        """Carry ``frames`` to the endpoint at ``address``; the receipts of every database
        that took some, once each has committed. A frame without a receipt was not taken
        (the sender tries again later). Raises ``TransportError`` when nothing got through."""
        ...

    def submit(self, address: TcpAddress, frames: Sequence[MessageFrame]) -> Answer:
        """What :meth:`deliver` does, without waiting: the future of its receipts (read
        them with :func:`receipts_of`). Batches submitted to one address go in the order
        they were submitted, each while the earlier ones wait for their receipts."""
        ...


def receipts_of(answer: Answer, timeout: float | None = None) -> Sequence[Delivery]:
    """The receipts ``answer`` holds (waiting up to ``timeout``); ``TransportError`` when
    the batch did not get through, did not answer in time (it is cancelled), or its
    endpoint stopped."""
    try:
        return answer.result(timeout)
    except concurrent.futures.TimeoutError:
        answer.cancel()
        raise TransportError("The remote endpoint did not answer in time.") from None
    except concurrent.futures.CancelledError:
        raise TransportError("The endpoint stopped.") from None

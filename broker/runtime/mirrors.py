"""Mirror routes (spec 8.8): which partner of a mirrored database takes its messages.

A route with a MIRROR_ADDRESS leads to a database served as principal by the instance at
one address and as mirror by the instance at the other (``ddl.mirroring``). The mirror's
endpoint refuses the messages with SQL Server's text for a database acting as a mirror
(954); the principal's takes them. The sender (:class:`Principals`, the transmitter's
memory) finds the principal by sending: the first time to ADDRESS, then always to the
address that last acknowledged. When that one cannot be reached, or acknowledges nothing
(it refuses as mirror, or does not answer), the same frames go to its partner, which
becomes the principal only if it acknowledges some: it claims to be the new principal.
Otherwise the messages wait with the first answer's status and both are tried again.
Sending twice never delivers twice: both addresses lead to the same database, which
drops what it has already by sequence number.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple, TypeGuard

from broker.conversations.frames import Delivery, MessageFrame
from broker.routing.addresses import TcpAddress
from broker.routing.matching import Remote
from broker.transport.seam import NetworkTransport, TransportError

log = logging.getLogger("broker.runtime")


def acting_as_mirror(database: str) -> str:
    """The refusal of a message for a database its instance serves as mirror (954)."""
    return f'The database "{database}" cannot be opened. It is acting as a mirror database.'


class Hop(NamedTuple):
    """Where a batch of messages goes: a next hop and, for a mirrored route, its partner
    and the route's name. Routes without a mirror share the batches to one address."""

    address: TcpAddress
    mirror: TcpAddress | None = None
    route: str = ""

    @classmethod
    def of(cls, destination: Remote) -> Hop:
        if destination.mirror is None:
            return cls(destination.address)
        return cls(destination.address, destination.mirror, destination.route)


class Principals:
    """Which address of each mirrored route (per sending database) answered as principal.
    Used by the transmitter's one thread."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, Hop], TcpAddress] = {}

    def principal(self, origin: str, hop: Hop) -> TcpAddress:
        """The address the messages of ``origin`` on ``hop`` go to first."""
        return self._known.get((origin, hop), hop.address)

    def deliver(self, network: NetworkTransport, origin: str, hop: Hop,
                frames: Sequence[MessageFrame]) -> Sequence[Delivery]:
        """Send ``frames`` of the database ``origin`` along ``hop``: the receipts to
        settle. A mirrored hop tries the principal, then its partner (above). Blocks;
        raises ``TransportError`` when the address whose answer stands was not reached."""
        if hop.mirror is None:
            return network.deliver(hop.address, frames)
        current = self.principal(origin, hop)
        partner = hop.mirror if current == hop.address else hop.address
        first = _attempt(network, current, frames)
        if not _acknowledged(first):
            second = _attempt(network, partner, frames)
            if _acknowledged(second):
                log.info("route %s: %s claims to be the principal; messages go there from now on", hop.route, partner)
                self._known[(origin, hop)] = partner
                return second
        if isinstance(first, TransportError):
            raise first
        return first


def _attempt(network: NetworkTransport, address: TcpAddress,
             frames: Sequence[MessageFrame]) -> Sequence[Delivery] | TransportError:
    try:
        return network.deliver(address, frames)
    except TransportError as failure:
        return failure


def _acknowledged(answer: Sequence[Delivery] | TransportError) -> TypeGuard[Sequence[Delivery]]:
    """Whether the database answered: it acknowledged a message, or holds fragments of one."""
    return not isinstance(answer, TransportError) and any(
        receipt.taken for delivery in answer for receipt in delivery.receipts)

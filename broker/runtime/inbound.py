"""Messages arriving from other instances: where they go inside this one (spec 8.1, 8.4).

The endpoint (``transport.tcp``) hands each batch of frames it receives to
:meth:`Inbound.apply`. A message arriving from outside is routed with the instance's own
routes (``msdb.sys.routes``, the instance catalog's), against a directory of the
databases served: a LOCAL route leads to the database with the frame's broker instance
or, while the dialog has not learnt one, to a database that hosts the service. The
frames for one database are applied there in one transaction (``conversations.arrival``)
and answered with that database's receipts, which hold once it has committed.

A message the instance's routes send to another instance is forwarded there when the
endpoint's MESSAGE_FORWARDING is ENABLED (the endpoint relays it and the final
destination's receipts: ``transport.tcp``), and refused with SQL Server's text for
forwarding being disabled (9792) otherwise. A message for a database this instance
hosts as a mirror is refused with SQL Server's text for a mirror database (954), so a
sender with a mirrored route tries the partner (``runtime.mirrors``). A message no route
can place is refused with the reason. The sender keeps a refused message, shows the
reason as its transmission status, and tries again later.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from broker.conversations.frames import Delivery, MessageFrame, Receipt
from broker.ddl.mirroring import mirrored_here
from broker.routing.addresses import TcpAddress
from broker.routing.matching import Delayed, Destination, Local, route
from broker.runtime.mirrors import acting_as_mirror
from broker.runtime.transmitter import Databases
from broker.storage.catalog import Catalog
from broker.storage.served import ServedDatabase, read_in
from broker.transport.inprocess import apply_frames
from broker.transport.tcp import Arrived

log = logging.getLogger("broker.runtime")
FORWARDING_DISABLED = "Could not forward the message because forwarding is disabled in this SQL Server instance."
ARRIVING_FROM_OUTSIDE = ""  # the origin of a message that did not begin in a database of this instance


class Inbound:
    """Applies frames from other instances to the databases of ``databases()``, routed
    with the routes of the instance catalog ``msdb``; ``forwarding``: MESSAGE_FORWARDING."""

    def __init__(self, msdb: ServedDatabase, databases: Callable[[], Sequence[ServedDatabase]], *,
                 forwarding: bool = False) -> None:
        self._msdb = msdb
        self._databases = databases
        self._forwarding = forwarding

    def apply(self, frames: Sequence[MessageFrame]) -> Arrived:
        """Route and apply ``frames``: one delivery per database that took some (its
        receipts, committed), one for the frames refused before any database (their
        reasons), and the frames to forward, by address. Blocks: it runs transactions."""
        routes, mirrors = read_in(self._msdb, lambda ctx: (ctx.catalog.routes, mirrored_here(ctx)))
        served = {str(catalog.broker_guid): (db, catalog)
                  for db, catalog in ((db, _catalog_of(db)) for db in self._databases()) if catalog.broker_enabled}
        directory = Databases({guid: catalog for guid, (_, catalog) in served.items()})
        now = datetime.now(UTC)
        by_database: dict[str, list[MessageFrame]] = defaultdict(list)
        onward: dict[TcpAddress, list[MessageFrame]] = defaultdict(list)
        refused: list[Receipt] = []
        placed: dict[tuple[str, str], Destination] = {}  # a batch holds few (service, instance) pairs
        for frame in frames:
            if frame.to_broker in mirrors:  # only the principal's instance takes them (spec 8.8)
                refused.append(Receipt(frame.message_id, False, acting_as_mirror(mirrors[frame.to_broker])))
                continue
            destination = placed.get((frame.to_service, frame.to_broker))
            if destination is None:
                destination = placed[frame.to_service, frame.to_broker] = route(
                    routes, service_name=frame.to_service, broker_instance=frame.to_broker or None,
                    origin=ARRIVING_FROM_OUTSIDE, directory=directory, now=now)
            if isinstance(destination, Local):
                by_database[destination.broker_instance].append(frame._replace(to_broker=destination.broker_instance))
            elif isinstance(destination, Delayed):
                refused.append(Receipt(frame.message_id, False, destination.reason))
            elif self._forwarding:
                onward[destination.address].append(frame)
            else:
                log.info("refused a message for '%s' that the instance's routes send to %s: forwarding is disabled",
                         frame.to_service, destination.address)
                refused.append(Receipt(frame.message_id, False, FORWARDING_DISABLED))
        deliveries = [apply_frames(served[guid][0], guid, batch) for guid, batch in by_database.items()]
        if refused:
            deliveries.append(Delivery("", tuple(refused)))
        return Arrived(deliveries, onward)


def _catalog_of(db: ServedDatabase) -> Catalog:
    return read_in(db, lambda ctx: ctx.catalog)


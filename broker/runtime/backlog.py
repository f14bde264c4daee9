"""The transmission backlog of an instance by peer: where each waiting message would go
now (``broker status``).

Each member database's transmission queue is counted by destination (service and
broker instance, without reading bodies) and each destination routed as the transmitter
would route it at this moment: to another instance's endpoint (its address), to a
database of this instance, or nowhere yet (the reason). Reads only, one transaction per
member database (its catalog and its counts together); a dialog's messages already on
their way keep the hop the transmitter chose, which may differ when several routes
share a service (load balancing).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from broker.conversations.outbound import destinations
from broker.routing.matching import Delayed, Local, Remote, route
from broker.runtime.transmitter import Databases
from broker.storage.catalog import Catalog
from broker.storage.served import ServedDatabase, read_in

THIS_INSTANCE = "(this instance)"


def backlog_by_peer(databases: Mapping[str, ServedDatabase]) -> list[dict[str, Any]]:
    """``[{"peer": ..., "count": n}]``, the largest backlog first: ``peer`` is the address
    (``TCP://host:port``) a message goes to next, ``(this instance)`` for a database of
    this instance, or ``(waiting: reason)`` when no route takes it now."""
    looked: list[tuple[Catalog, list[dict[str, Any]]]] = [
        read_in(db, lambda ctx: (ctx.catalog, destinations(ctx))) for db in databases.values()]
    directory = Databases({str(catalog.broker_guid): catalog for catalog, _ in looked if catalog.broker_enabled})
    now = datetime.now(UTC)
    counts: Counter[str] = Counter()
    for catalog, counted in looked:
        for destination in counted:
            hop = route(catalog.routes, service_name=destination["to_service_name"],
                        broker_instance=destination["to_broker_instance"], origin=str(catalog.broker_guid),
                        directory=directory, now=now, pick=lambda hosts: hosts[0])
            counts[_peer(hop)] += destination["count"]
    return [{"peer": peer, "count": count} for peer, count in counts.most_common()]


def _peer(hop: Local | Remote | Delayed) -> str:
    if isinstance(hop, Remote):
        return f"TCP://{hop.address.host}:{hop.address.port}"
    if isinstance(hop, Local):
        return THIS_INSTANCE
    return f"(waiting: {hop.reason})"

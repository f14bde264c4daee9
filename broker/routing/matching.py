"""Where a conversation's messages go: matching routes, choosing one, locating a LOCAL
service (spec 8.2 to 8.4).

Pure functions of a routing table (``Catalog.routes``), the conversation's target
service and broker instance, and a :class:`Directory` of the databases that can be
reached in-process. A SEND consults its own database's routes with a directory of that
database alone (so it can deliver at once when the service is its own); the
transmitter consults them again with the whole instance (``broker.instance``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from broker.routing.addresses import LOCAL, TRANSPORT, TcpAddress, parse_tcp, transport_address
from broker.storage.catalog import Catalog, RouteInfo

# transmission_status texts, verbatim from SQL Server (its error numbers in comments).
SERVICE_NOT_FOUND = (  # 9793: routes matched, none leads to the service
    "The target service name could not be found. Ensure that the service name is specified "
    "correctly and/or the routing information has been supplied."
)
NO_ROUTE = (  # 9750
    "No route matches the destination service name for this conversation. Create a route to the "
    "destination service name for messages in this conversation to be delivered."
)
LOCAL_NOT_HOSTED = (  # 9796: the service's own route says LOCAL, but no database has it
    "The target service name matched a LOCAL route, but there is no service by that name in the "
    "local SQL Server instance."
)
BROKER_NOT_FOUND = "Could not find the target broker in the local SQL Server instance."  # 9795
ROUTE_REQUESTED = (  # 9797: waiting for the dynamic routing service (step 4)
    "Classification has been delayed because the routing information is currently being updated."
)
# The dynamic routing service (spec 8.5): a route to it has this service name.
BROKER_CONFIGURATION = "SQL/ServiceBroker/BrokerConfiguration"


class Directory(Protocol):
    """The databases a message can reach in-process: one database alone, or an instance."""

    def hosts(self, service_name: str) -> Sequence[str]:
        """The broker instances (guids as lower-case text) of the enabled databases that
        have a service of this name (compared byte by byte), in a stable order."""
        ...


class OneDatabase:
    """A directory of one database: its own catalog, as a SEND sees it."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog

    def hosts(self, service_name: str) -> Sequence[str]:
        catalog = self._catalog
        here = catalog.broker_enabled and service_name in catalog.services_by_name
        return (str(catalog.broker_guid),) if here else ()


@dataclass(frozen=True, slots=True)
class Local:
    """Deliver inside the instance, to the database with this broker instance."""

    broker_instance: str


@dataclass(frozen=True, slots=True)
class Remote:
    """Send to another instance's endpoint (the next hop, and its mirror partner)."""

    address: TcpAddress
    mirror: TcpAddress | None
    route: str


@dataclass(frozen=True, slots=True)
class Delayed:
    """No route can take the message now: it waits, and routing is tried again later."""

    reason: str


Destination = Local | Remote | Delayed


def route(
    routes: Sequence[RouteInfo],
    *,
    service_name: str,
    broker_instance: str | None,
    origin: str,
    directory: Directory,
    now: datetime,
    pick: Callable[[Sequence[str]], str] = random.choice,
) -> Destination:
    """The destination of a message to ``service_name`` (and ``broker_instance``, the
    dialog's or the one its first acknowledgement named) from the database ``origin``.

    ``pick`` chooses among several broker instances routed for one service (step 3's
    load balancing); the caller keeps the choice, since a conversation sticks to the
    instance its first acknowledgement names.
    """
    instance = broker_instance.lower() if broker_instance else None
    live = [r for r in routes if r.lifetime is None or r.lifetime > now]  # expired routes are ignored
    named = [r for r in live if r.service_name == service_name]
    matches: list[RouteInfo] = []
    if instance is not None:
        matches = [r for r in named if r.broker_instance == instance]  # step 1
    if not matches:
        matches = [r for r in named if r.broker_instance is None]  # step 2
    if not matches and instance is None:  # step 3: one instance among those routed
        instances = sorted({r.broker_instance for r in named if r.broker_instance is not None})
        if instances:
            chosen = pick(instances)
            matches = [r for r in named if r.broker_instance == chosen]
    if not matches and service_name != BROKER_CONFIGURATION and any(
            r.service_name == BROKER_CONFIGURATION for r in live):
        return Delayed(ROUTE_REQUESTED)  # step 4: the caller asks the dynamic routing service (spec 8.5)
    if not matches:  # step 5
        matches = [r for r in live if r.service_name is None and r.broker_instance is None]
    if not matches:
        if instance is not None and instance in directory.hosts(service_name):
            return Local(instance)  # step 6: as if a (service, LOCAL) route existed
        return Delayed(NO_ROUTE)  # step 7
    return _choose(_distinct(matches), service_name, instance, origin, directory)


def _distinct(matches: list[RouteInfo]) -> list[RouteInfo]:
    """Routes with the same (instance, service, address) count once."""
    seen: dict[tuple[str | None, str | None, str], RouteInfo] = {}
    for r in matches:
        seen.setdefault((r.broker_instance, r.service_name, r.address.upper()), r)
    return list(seen.values())


def _choose(matches: list[RouteInfo], service_name: str, instance: str | None, origin: str,
            directory: Directory) -> Destination:
    """Spec 8.3: a mirrored route, then LOCAL (if the service is here), then TCP, then
    TRANSPORT."""
    for r in matches:
        if r.mirror_address is not None:
            address, mirror = parse_tcp(r.address), parse_tcp(r.mirror_address)
            if address is not None:
                return Remote(address, mirror, r.name)
    local = [r for r in matches if r.address.upper() == LOCAL]
    if local and directory.hosts(service_name):
        return locate(service_name, instance or local[0].broker_instance, origin, directory)
    for r in matches:
        address = parse_tcp(r.address)
        if address is not None:
            return Remote(address, None, r.name)
    for r in matches:
        if r.address.upper() == TRANSPORT:
            derived = transport_address(service_name)
            if derived is not None:
                return Remote(derived, None, r.name)
    if any(r.service_name is not None for r in local):
        return Delayed(LOCAL_NOT_HOSTED)
    return Delayed(SERVICE_NOT_FOUND)


def locate(service_name: str, broker_instance: str | None, origin: str, directory: Directory) -> Destination:
    """Spec 8.4: the database with the known broker instance; else the database that
    owns the conversation, then the others; disabled databases are not candidates."""
    hosts = directory.hosts(service_name)
    if broker_instance is not None:
        return Local(broker_instance) if broker_instance in hosts else Delayed(BROKER_NOT_FOUND)
    if origin in hosts:
        return Local(origin)
    return Local(hosts[0]) if hosts else Delayed(SERVICE_NOT_FOUND)

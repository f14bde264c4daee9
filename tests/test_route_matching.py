"""Routing's rules as pure functions (spec 8.2 to 8.4): one test per step and rule.

``route`` takes a routing table, the conversation's service and broker instance, the
database it comes from and a directory of the databases that can be reached. The
conformance tests through real databases are in test_routing.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from broker.routing.addresses import TcpAddress, checked_address, parse_tcp, transport_address
from broker.routing.matching import (
    BROKER_NOT_FOUND,
    LOCAL_NOT_HOSTED,
    NO_ROUTE,
    SERVICE_NOT_FOUND,
    Delayed,
    Local,
    Remote,
    route,
)
from broker.storage.catalog import RouteInfo

NOW = datetime(2026, 11, 24, tzinfo=UTC)
HERE, THERE, ELSEWHERE = "aaaaaaaa-0000-0000-0000-000000000001", "bbbbbbbb-0000-0000-0000-000000000002", \
    "cccccccc-0000-0000-0000-000000000003"
AUTO_CREATED_LOCAL = RouteInfo(65536, "AutoCreatedLocal", None, None, None, "LOCAL", None)


class Hosts:
    """A directory: service name -> broker instances of the databases that have it."""

    def __init__(self, **services: Sequence[str]) -> None:
        self._services = {name.replace("_", "/"): tuple(guids) for name, guids in services.items()}

    def hosts(self, service_name: str) -> Sequence[str]:
        return self._services.get(service_name, ())


def r(name: str, address: str, service: str | None = None, instance: str | None = None,
      lifetime: datetime | None = None, mirror: str | None = None) -> RouteInfo:
    return RouteInfo(hash(name) % 1000, name, service, instance, lifetime, address, mirror)


def go(routes: list[RouteInfo], service: str = "//svc", instance: str | None = None,
       directory: Hosts | None = None, pick: object = min) -> object:
    return route(routes, service_name=service, broker_instance=instance, origin=HERE,
                 directory=directory or Hosts(), now=NOW, pick=pick)  # type: ignore[arg-type]


# -- spec 8.2: finding matching routes, the first step that yields any ----------------------


def test_step_1_a_dialog_with_a_broker_instance_takes_the_route_for_both() -> None:
    routes = [r("both", "TCP://one:4022", "//svc", THERE), r("name only", "TCP://two:4022", "//svc")]
    assert go(routes, instance=THERE) == Remote(TcpAddress("one", 4022), None, "both")


def test_step_2_then_the_route_for_the_service_without_an_instance() -> None:
    routes = [r("other instance", "TCP://one:4022", "//svc", ELSEWHERE), r("name only", "TCP://two:4022", "//svc")]
    assert go(routes, instance=THERE) == Remote(TcpAddress("two", 4022), None, "name only")
    assert go(routes) == Remote(TcpAddress("two", 4022), None, "name only")


def test_step_3_without_an_instance_one_of_the_routed_instances_is_picked() -> None:
    routes = [r("to b", "TCP://b:4022", "//svc", THERE), r("to c", "TCP://c:4022", "//svc", ELSEWHERE)]
    picked: list[Sequence[str]] = []

    def pick(choices: Sequence[str]) -> str:
        picked.append(choices)
        return choices[-1]

    assert go(routes, pick=pick) == Remote(TcpAddress("c", 4022), None, "to c")
    assert picked == [[THERE, ELSEWHERE]]  # every instance routed, once each, to balance load


def test_step_5_then_routes_with_neither_name_nor_instance() -> None:
    routes = [AUTO_CREATED_LOCAL, r("other service", "TCP://x:1", "//other")]
    assert go(routes, directory=Hosts(__svc=[HERE])) == Local(HERE)


def test_step_6_an_instance_that_has_the_service_acts_as_a_local_route() -> None:
    assert go([], instance=THERE, directory=Hosts(__svc=[THERE])) == Local(THERE)


def test_step_7_no_route_at_all_delays_the_conversation() -> None:
    assert go([], directory=Hosts(__svc=[HERE])) == Delayed(NO_ROUTE)
    assert go([], instance=THERE) == Delayed(NO_ROUTE)


def test_an_expired_route_is_ignored() -> None:
    expired = r("expired", "TCP://old:4022", "//svc", lifetime=NOW - timedelta(seconds=1))
    live = r("live", "TCP://new:4022", "//svc", lifetime=NOW + timedelta(seconds=1))
    assert go([expired, live]) == Remote(TcpAddress("new", 4022), None, "live")
    assert go([expired]) == Delayed(NO_ROUTE)


def test_service_names_match_byte_by_byte() -> None:
    assert go([r("upper", "TCP://x:1", "//SVC")]) == Delayed(NO_ROUTE)


# -- spec 8.3: choosing one route ---------------------------------------------------------


def test_a_mirrored_route_comes_first() -> None:
    routes = [r("local", "LOCAL", "//svc"), r("mirrored", "TCP://p:1", "//svc", mirror="TCP://m:2")]
    assert go(routes, directory=Hosts(__svc=[HERE])) == \
        Remote(TcpAddress("p", 1), TcpAddress("m", 2), "mirrored")


def test_local_comes_before_tcp_when_the_instance_has_the_service() -> None:
    routes = [AUTO_CREATED_LOCAL, r("catch-all", "TCP://far:4022")]
    assert go(routes, directory=Hosts(__svc=[HERE])) == Local(HERE)
    assert go(routes) == Remote(TcpAddress("far", 4022), None, "catch-all")  # not here: the TCP route


def test_transport_comes_last_and_takes_its_address_from_the_service_name() -> None:
    routes = [r("transport", "TRANSPORT")]
    assert go(routes, service="TCP://host.example:4022/Orders") == \
        Remote(TcpAddress("host.example", 4022), None, "transport")
    assert go(routes, service="//not/an/address") == Delayed(SERVICE_NOT_FOUND)


def test_identical_routes_count_once() -> None:
    routes = [r("one", "TCP://x:1", "//svc", THERE), r("two", "tcp://x:1", "//svc", THERE),
              r("three", "TCP://y:1", "//svc", ELSEWHERE)]
    seen: list[Sequence[str]] = []
    go(routes, pick=lambda choices: seen.append(choices) or choices[0])
    assert seen == [[THERE, ELSEWHERE]]


def test_a_local_route_for_a_service_nobody_has_says_so() -> None:
    assert go([r("mine", "LOCAL", "//svc")]) == Delayed(LOCAL_NOT_HOSTED)
    assert go([AUTO_CREATED_LOCAL]) == Delayed(SERVICE_NOT_FOUND)


# -- spec 8.4: locating a LOCAL service ---------------------------------------------------


def test_the_owning_database_first_then_the_others() -> None:
    assert go([AUTO_CREATED_LOCAL], directory=Hosts(__svc=[THERE, HERE])) == Local(HERE)
    assert go([AUTO_CREATED_LOCAL], directory=Hosts(__svc=[THERE, ELSEWHERE])) == Local(THERE)


def test_a_known_broker_instance_decides() -> None:
    directory = Hosts(__svc=[HERE, THERE])
    assert go([AUTO_CREATED_LOCAL], instance=THERE, directory=directory) == Local(THERE)
    assert go([AUTO_CREATED_LOCAL], instance=ELSEWHERE, directory=directory) == Delayed(BROKER_NOT_FOUND)
    routed = r("pinned", "LOCAL", "//svc", THERE)
    assert go([routed], directory=directory) == Local(THERE)


# -- addresses (spec 1.6) -----------------------------------------------------------------


def test_addresses_are_checked_and_kept_as_given() -> None:
    assert checked_address("local") == "LOCAL"
    assert checked_address("TCP://Host-1.example.com:4022") == "TCP://Host-1.example.com:4022"
    assert parse_tcp("TCP://[::1]:4022") == TcpAddress("::1", 4022)
    assert parse_tcp("tcp://10.0.0.1:1") == TcpAddress("10.0.0.1", 1)
    for bad in ("TCP://:4022", "TCP://host", "TCP://host:0", "TCP://host:65536", "TCP://ho st:1", "UDP://h:1",
                "TCP://[nope]:1", "TCP://host:1/path"):
        assert parse_tcp(bad) is None, bad
    assert transport_address("TCP://h:1/svc") == TcpAddress("h", 1)


def test_step_4_a_dynamic_routing_service_delays_the_conversation_before_the_catch_all() -> None:
    from broker.routing.matching import BROKER_CONFIGURATION, ROUTE_REQUESTED

    dynamic = r("dynamic", "LOCAL", BROKER_CONFIGURATION)
    directory = Hosts(__svc=[HERE], SQL_ServiceBroker_BrokerConfiguration=[HERE])
    assert go([AUTO_CREATED_LOCAL, dynamic], directory=directory) == Delayed(ROUTE_REQUESTED)
    assert go([AUTO_CREATED_LOCAL, dynamic, r("named", "TCP://x:1", "//svc")], directory=directory) == \
        Remote(TcpAddress("x", 1), None, "named")  # steps 1 to 3 come first
    assert go([AUTO_CREATED_LOCAL, dynamic], service=BROKER_CONFIGURATION, directory=directory) == Local(HERE)

"""CREATE / ALTER / DROP ROUTE and REMOTE SERVICE BINDING (spec 1.6, 1.7, 4.7, 4.8), on
every backend, in a database and in an instance catalog."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import broker

AUTO_CREATED_LOCAL = {"name": "AutoCreatedLocal", "route_id": 65536, "principal_id": 1,
                      "remote_service_name": None, "broker_instance": None, "lifetime": None, "address": "LOCAL",
                      "mirror_address": None}
GUID = "D8D4D268-00A3-4C62-8F91-634B89B1E315"


def routes(db: broker.Broker) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in db.catalog("sys.routes")}


def test_every_database_starts_with_autocreatedlocal(db: broker.Broker) -> None:
    assert db.catalog("sys.routes") == [AUTO_CREATED_LOCAL]


def test_a_route_with_every_clause_shows_in_sys_routes(db: broker.Broker) -> None:
    before = datetime.now(UTC)
    db.create_route("Full", "TCP://primary.example:4022", service_name="//svc", broker_instance=GUID,
                    lifetime=3600, mirror_address="TCP://mirror.example:4022")
    row = routes(db)["Full"]
    assert row["route_id"] == 65537 and row["remote_service_name"] == "//svc"
    assert row["broker_instance"] == GUID and row["address"] == "TCP://primary.example:4022"
    assert row["mirror_address"] == "TCP://mirror.example:4022"
    assert before + timedelta(seconds=3599) < row["lifetime"] <= datetime.now(UTC) + timedelta(seconds=3600)


@pytest.mark.parametrize(("clauses", "number"), [
    ({"address": "LOCAL", "broker_instance": GUID}, 9662),
    ({"address": "TRANSPORT", "service_name": "//svc"}, 9745),
    ({"address": "TCP://host"}, 9744),
    ({"address": "HTTP://host:80"}, 9744),
    ({"address": "TCP://host:4022\n"}, 9744),  # a line end is no part of an address
    ({"address": ""}, 9659),
    ({"address": "TCP://" + "h" * 250 + ":4022"}, 9660),
    ({"address": "TCP://a:1", "mirror_address": "TCP://b:1"}, 9661),
    ({"address": "TCP://a:1", "service_name": "//svc", "mirror_address": "TCP://b:1"}, 9661),
    ({"address": "LOCAL", "service_name": "//svc", "broker_instance": GUID, "mirror_address": "TCP://b:1"}, 9743),
    ({"address": "TCP://a:1", "service_name": "//svc", "broker_instance": GUID, "mirror_address": "LOCAL"}, 9743),
    ({"address": "TCP://a:1", "service_name": "//svc", "broker_instance": GUID, "mirror_address": "tcp://a:1"}, 9747),
    ({"address": "LOCAL", "lifetime": 0}, 9746),
    ({"address": "LOCAL", "lifetime": 2**31}, 9746),
    ({"address": 5}, 206),
    ({"address": "LOCAL", "service_name": "s" * 257}, 103),
])
def test_create_route_checks_every_clause(db: broker.Broker, clauses: dict[str, Any], number: int) -> None:
    with pytest.raises(broker.BrokerError) as error:
        db.create_route("Bad", **clauses)
    assert error.value.number == number
    assert list(routes(db)) == ["AutoCreatedLocal"]


def test_alter_changes_only_the_clauses_given_and_checks_the_result(db: broker.Broker) -> None:
    db.create_route("R", "TCP://a:1", service_name="//svc", lifetime=60)
    lifetime = routes(db)["R"]["lifetime"]
    db.alter_route("R", address="TCP://b:2")
    row = routes(db)["R"]
    assert (row["address"], row["remote_service_name"], row["lifetime"]) == ("TCP://b:2", "//svc", lifetime)
    with pytest.raises(broker.BrokerError) as error:
        db.alter_route("R", address="TRANSPORT")  # the route still names a service
    assert error.value.number == 9745
    with pytest.raises(broker.BrokerError) as unknown:
        db.alter_route("Nope", address="LOCAL")
    assert unknown.value.number == 15151
    with pytest.raises(broker.BrokerError) as nothing:
        db.alter_route("R")
    assert nothing.value.number == 59004


def test_drop_route_and_its_errors(db: broker.Broker) -> None:
    db.create_route("R", "LOCAL", service_name="//svc")
    with pytest.raises(broker.BrokerError) as taken:
        db.create_route("R", "LOCAL")
    assert taken.value.number == 2714
    db.drop_route("R")
    db.drop_route("AutoCreatedLocal")
    assert db.catalog("sys.routes") == []
    with pytest.raises(broker.BrokerError) as gone:
        db.drop_route("R")
    assert gone.value.number == 3701


def test_remote_service_bindings(db: broker.Broker) -> None:
    db.create_remote_service_binding("TargetBinding", "//TgtDB/2InstSample/TargetService", "TargetUser")
    [row] = db.catalog("sys.remote_service_bindings")
    assert row["name"] == "TargetBinding" and row["remote_service_binding_id"] == 65536
    assert row["remote_service_name"] == "//TgtDB/2InstSample/TargetService" and row["is_anonymous_on"] == 0
    with pytest.raises(broker.BrokerError) as twice:
        db.create_remote_service_binding("Other", "//TgtDB/2InstSample/TargetService", "U")
    assert twice.value.number == 9619
    db.alter_remote_service_binding("TargetBinding", anonymous=True, user="OtherUser")
    [row] = db.catalog("sys.remote_service_bindings")
    assert (row["is_anonymous_on"], row["remote_principal_name"]) == (1, "OtherUser")
    db.drop_remote_service_binding("TargetBinding")
    assert db.catalog("sys.remote_service_bindings") == []
    with pytest.raises(broker.BrokerError) as gone:
        db.drop_remote_service_binding("TargetBinding")
    assert gone.value.number == 3701


def test_the_instance_has_routes_of_its_own(db_url: str, tmp_path: Any) -> None:
    inst = broker.instance(db_url)
    try:
        assert inst.catalog("sys.routes") == [AUTO_CREATED_LOCAL]
        inst.create_route("Forward", "TCP://next.example:4022")
        inst.alter_route("Forward", address="TCP://other.example:4022")
        assert [r["address"] for r in inst.catalog("sys.routes")] == ["LOCAL", "TCP://other.example:4022"]
        member = inst.add_database("A", f"sqlite:///{tmp_path / 'a.db'}")
        assert member.catalog("sys.routes") == [AUTO_CREATED_LOCAL]  # a database's routes are its own
        inst.drop_route("Forward")
        assert inst.catalog("sys.routes") == [AUTO_CREATED_LOCAL]
    finally:
        inst.dispose()


def test_routes_bindings_priorities_and_schema_collections_are_named_in_any_case(db: broker.Broker) -> None:
    # Object names under SQL Server's default collation (service names stay case-sensitive).
    db.create_route("Route", address="TCP://host:4022")
    db.create_user("Someone")
    db.create_remote_service_binding("Binding", "//far", "Someone")
    db.create_broker_priority("Priority", priority_level=3)
    db.create_xml_schema_collection("Schemas", '<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">'
                                               '<xs:element name="a"/></xs:schema>')
    for create in (lambda: db.create_route("ROUTE", address="TCP://host:4022"),
                   lambda: db.create_remote_service_binding("BINDING", "//other", "Someone"),
                   lambda: db.create_xml_schema_collection("schemas", '<xs:schema '
                                                           'xmlns:xs="http://www.w3.org/2001/XMLSchema"/>')):
        with pytest.raises(broker.BrokerError) as info:
            create()
        assert info.value.number == 2714
    db.create_message_type("//typed", "VALID_XML", "SCHEMAS")
    db.alter_route("route", address="TCP://elsewhere:4022")
    db.alter_remote_service_binding("binding", anonymous=True)
    db.alter_broker_priority("PRIORITY", priority_level=4)
    assert [r["address"] for r in db.catalog("sys.routes", name="Route")] == ["TCP://elsewhere:4022"]
    db.drop_route("ROUTE")
    db.drop_remote_service_binding("bInDiNg")
    db.drop_broker_priority("priority")
    assert db.catalog("sys.routes", name="Route") == []
    assert db.catalog("sys.remote_service_bindings") == []
    assert db.catalog("sys.conversation_priorities") == []

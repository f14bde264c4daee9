"""TRANSPORT routes between two instances (spec 1.6, 8.3; issue 14).

A route whose ADDRESS is ``TRANSPORT`` takes the next hop from the service name, which
must itself begin with an address: a dialog to ``TCP://127.0.0.1:{port}/TargetService``
goes to the endpoint on that port. Here each instance names its service after its own
endpoint and each database has one TRANSPORT route (and its AutoCreatedLocal), so a
dialog runs both ways with no route naming a service. A service name that is not an
address gives a TRANSPORT route nothing to go to: the message waits with 9793's status,
and goes once a route can take it.

Every test runs with the target's database on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from pair_layouts import layouts, target_database
from support import (
    BETWEEN_CONTRACT,
    BETWEEN_INITIATOR_QUEUE,
    BETWEEN_REPLY,
    BETWEEN_REQUEST,
    BETWEEN_TARGET_QUEUE,
    wait_until,
)
from two_instances import Side, free_port, make_side

import broker
from broker.routing.matching import SERVICE_NOT_FOUND

DEADLINE_S = 30.0


@pytest.fixture(params=layouts())
def target_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with target_database(request, tmp_path) as url:
        yield url


def side_named_by_its_address(directory: Path, role: str, url: str, service: str, queue: str) -> Side:
    """An instance whose service is ``TCP://127.0.0.1:{its port}/{service}``, with an
    endpoint on that port, a TRANSPORT route in its database, and no other route."""
    port = free_port()
    side = dataclasses.replace(make_side(directory, role, url, f"TCP://127.0.0.1:{port}/{service}", queue),
                               port=port)
    side.db.create_route("Transport", "TRANSPORT")
    return side


def service_of(side: Side) -> str:
    [row] = side.db.catalog("sys.services")
    return str(row["name"])


def connections(side: Side, *, accepted: bool) -> list[dict[str, object]]:
    return [c for c in side.inst.catalog("sys.dm_broker_connections") if bool(c["is_accept"]) == accepted]


def dispose(*sides: Side) -> None:
    for side in sides:
        side.inst.dispose()


def test_a_dialog_between_instances_by_transport_routes(tmp_path: Path, target_url: str) -> None:
    initiator = side_named_by_its_address(tmp_path, "initiator", f"sqlite:///{tmp_path / 'initiator.db'}",
                                          "InitiatorService", BETWEEN_INITIATOR_QUEUE)
    target = side_named_by_its_address(tmp_path, "target", target_url, "TargetService", BETWEEN_TARGET_QUEUE)
    try:
        initiator.endpoint([target.certificate])
        target.endpoint([initiator.certificate])
        target_service = service_of(target)
        initiator.db.create_remote_service_binding("TargetBinding", target_service, "TargetUser")
        assert {r["address"] for r in initiator.db.catalog("sys.routes")} == {"TRANSPORT", "LOCAL"}
        with initiator.inst.runtime(), target.inst.runtime():
            with initiator.db.transaction() as tx:
                handle = tx.begin_dialog(service_of(initiator), target_service, BETWEEN_CONTRACT)
                tx.send(handle, BETWEEN_REQUEST, "<Request/>")
            wait_until(lambda: target.db.queue_rows(BETWEEN_TARGET_QUEUE), DEADLINE_S)
            with target.db.transaction() as tx:
                [request] = tx.receive(BETWEEN_TARGET_QUEUE)
                assert request.message_body == b"<Request/>" and request.service_name == target_service
                tx.send(request.conversation_handle, BETWEEN_REPLY, "<Reply/>")
                tx.end_conversation(request.conversation_handle)
            wait_until(lambda: len(initiator.db.queue_rows(BETWEEN_INITIATOR_QUEUE)) == 2, DEADLINE_S)
            with initiator.db.transaction() as tx:
                reply, end = tx.receive(BETWEEN_INITIATOR_QUEUE, 2)
                assert (reply.message_body, reply.conversation_handle) == (b"<Reply/>", handle)
                assert end.message_type_name == broker.END_DIALOG
                tx.end_conversation(handle)
            wait_until(lambda: not initiator.held() and not target.held(), DEADLINE_S)
            wait_until(lambda: not initiator.db.catalog("sys.conversation_endpoints"), DEADLINE_S)
            # Both ways went over the one TCP connection the initiator dialled: the target
            # sent its reply and EndDialog back on it instead of dialling the initiator.
            wait_until(lambda: any(c["principal_name"] == "target instance" and c["total_fragments_received"] >= 3
                                   for c in connections(initiator, accepted=False)), DEADLINE_S)
            wait_until(lambda: any(c["principal_name"] == "initiator instance"
                                   for c in connections(target, accepted=True)), DEADLINE_S)
            assert connections(target, accepted=False) == [] and connections(initiator, accepted=True) == []
        [far] = target.db.catalog("sys.conversation_endpoints")
        assert far["state"] == "CD" and far["far_broker_instance"] == str(initiator.db.service_broker_guid)
    finally:
        dispose(initiator, target)


NOT_ADDRESSES = {
    "plain-name": "//TgtDB/2DBSample/TargetService",
    "no-port": "TCP://127.0.0.1/TargetService",
    "port-0": "TCP://127.0.0.1:0/TargetService",
    "bad-host": "TCP://no_such_host!:4022/TargetService",
}


def wait_for_want_of_an_address(tmp_path: Path, target_url: str, target_service: str) -> tuple[Side, Side]:
    """The initiator (by its TRANSPORT route) and the target instance, running; a dialog
    to ``target_service`` begun, its message waiting with 9793's status."""
    initiator = side_named_by_its_address(tmp_path, "initiator", f"sqlite:///{tmp_path / 'initiator.db'}",
                                          "InitiatorService", BETWEEN_INITIATOR_QUEUE)
    target = make_side(tmp_path, "target", target_url, target_service, BETWEEN_TARGET_QUEUE)
    initiator.endpoint([target.certificate])
    target.endpoint([initiator.certificate])
    with initiator.db.transaction() as tx:
        handle = tx.begin_dialog(service_of(initiator), target_service, BETWEEN_CONTRACT, encryption=False)
        tx.send(handle, BETWEEN_REQUEST, "<Request/>")
    return initiator, target


def assert_waiting(initiator: Side, target: Side) -> None:
    wait_until(lambda: [row["transmission_status"] for row in initiator.held()] == [SERVICE_NOT_FOUND], DEADLINE_S)
    [handle] = [row["conversation_handle"] for row in initiator.db.catalog("sys.conversation_endpoints")]
    with initiator.db.transaction() as tx:
        assert tx.get_transmission_status(handle) == SERVICE_NOT_FOUND
    assert target.db.queue_rows(BETWEEN_TARGET_QUEUE) == []
    assert not any(not c["is_accept"] for c in initiator.inst.catalog("sys.dm_broker_connections"))  # never dialled


@pytest.mark.parametrize("target_service", NOT_ADDRESSES.values(), ids=NOT_ADDRESSES.keys())
def test_a_service_name_that_is_not_an_address_waits_with_the_reason(tmp_path: Path, target_url: str,
                                                                     target_service: str) -> None:
    initiator, target = wait_for_want_of_an_address(tmp_path, target_url, target_service)
    try:
        with initiator.inst.runtime(), target.inst.runtime():
            assert_waiting(initiator, target)
    finally:
        dispose(initiator, target)


def test_a_message_waiting_for_an_address_goes_once_a_route_names_its_service(tmp_path: Path,
                                                                             target_url: str) -> None:
    target_service = NOT_ADDRESSES["plain-name"]
    initiator, target = wait_for_want_of_an_address(tmp_path, target_url, target_service)
    try:
        with initiator.inst.runtime(), target.inst.runtime():
            assert_waiting(initiator, target)
            initiator.db.create_route("ToTarget", f"TCP://127.0.0.1:{target.port}", service_name=target_service)
            wait_until(lambda: target.db.queue_rows(BETWEEN_TARGET_QUEUE), 60.0)  # at its next attempt
            wait_until(lambda: not initiator.held(), DEADLINE_S)
        [arrived] = target.db.queue_rows(BETWEEN_TARGET_QUEUE)
        assert arrived.message_body == b"<Request/>" and arrived.service_name == target_service
    finally:
        dispose(initiator, target)

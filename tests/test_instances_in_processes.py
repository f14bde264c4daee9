"""Instances in processes of their own, over real TCP on loopback (spec 7.4, 7.5, 8, 8.7,
12.3; issue 14).

Every instance is served by ``broker --instance URL run`` in a process of its own
(``instance_processes``); this process only sets them up (``two_instances``,
``test_forwarding``), plays the applications (BEGIN DIALOG, SEND, RECEIVE, END) and reads
the catalogs. The target databases are SQLite files, or PostgreSQL databases when
``BROKER_TEST_POSTGRES_URL`` names a server; initiators and instance catalogs are SQLite.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import BACKENDS, PostgresDatabases
from instance_processes import InstanceProcess, InstanceProcesses
from support import (
    BETWEEN_CONTRACT,
    BETWEEN_INITIATOR_QUEUE,
    BETWEEN_INITIATOR_SERVICE,
    BETWEEN_REPLY,
    BETWEEN_REQUEST,
    BETWEEN_TARGET_QUEUE,
    BETWEEN_TARGET_SERVICE,
    endpoint,
    wait_until,
)
from test_forwarding import Forwarder, make_forwarder
from two_instances import Side, free_port, make_side

import broker
from broker.runtime.transmitter import NOT_ACKNOWLEDGED

DEADLINE_S = 30.0
LOOP_DEADLINE_S = 60.0  # a looping message comes back unacknowledged once its hops run out
HOPS_DEADLINE_S = 3.0  # 32 hops on loopback take milliseconds
DIALOGS = 40  # all on one target instance by chance: 2 ** -39
REQUEST_BODY = b"<RequestMsg>Message for Target service.</RequestMsg>"
REPLY_BODY = b"<ReplyMsg>Message for Initiator service.</ReplyMsg>"
END_DIALOG = "http://schemas.microsoft.com/SQL/ServiceBroker/EndDialog"


def address(port: int) -> str:
    """The route address of an endpoint on loopback."""
    return f"TCP://127.0.0.1:{port}"


@dataclass
class Network:
    """The instances of one test, each served by a process of its own once set up."""

    directory: Path
    processes: InstanceProcesses
    ports: set[int] = field(default_factory=set)

    def _port(self) -> int:
        """A free port no other instance of the test has drawn."""
        port = free_port()
        while port in self.ports:
            port = free_port()
        self.ports.add(port)
        return port

    def _side(self, folder: Path, role: str, url: str, service: str, queue: str) -> Side:
        side = make_side(folder, role, url, service, queue)
        self.processes.own(side.inst)
        side.port = self._port()
        return side

    def initiator(self) -> Side:
        """The tutorial's initiator instance, its database a SQLite file."""
        return self._side(self.directory, "initiator", f"sqlite:///{self.directory / 'initiator.db'}",
                          BETWEEN_INITIATOR_SERVICE, BETWEEN_INITIATOR_QUEUE)

    def target(self, name: str, url: str) -> Side:
        """A target instance with the tutorial's target database at ``url``; ``name`` is
        its own folder, so that several targets do not share an instance catalog."""
        folder = self.directory / name
        folder.mkdir()
        return self._side(folder, "target", url, BETWEEN_TARGET_SERVICE, BETWEEN_TARGET_QUEUE)

    def forwarder(self, name: str) -> Forwarder:
        """An instance with no database of its own (its endpoint: ``Forwarder.endpoint``)."""
        made = make_forwarder(self.directory, name)
        self.processes.own(made.inst)
        made.port = self._port()
        return made

    def serve(self, **instances: Side | Forwarder) -> dict[str, InstanceProcess]:
        """A process for each instance (by name), once every endpoint listens."""
        return self.processes.serve({name: (side.inst, side.port) for name, side in instances.items()})


@pytest.fixture(params=[backend for backend in ("sqlite", "postgresql") if backend in BACKENDS])
def target_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """Makes the URL of a new target database by name: a SQLite file, or a database on the
    PostgreSQL test server (dropped afterwards)."""
    databases: PostgresDatabases | None = (
        request.getfixturevalue("postgres_databases") if request.param == "postgresql" else None)
    created: list[str] = []

    def make(name: str) -> str:
        if databases is None:
            return f"sqlite:///{tmp_path / f'{name}.db'}"
        created.append(databases.create(empty=False))
        return databases.url_of(created[-1])

    yield make
    for name in created:
        assert databases is not None
        databases.drop(name)


@pytest.fixture
def network(tmp_path: Path) -> Iterator[Network]:
    """The test's instances; their processes stop (SIGTERM, then SIGKILL) at the end."""
    processes = InstanceProcesses(tmp_path)
    yield Network(tmp_path, processes)
    processes.stop()


def begin(initiator: Side, bodies: Sequence[bytes]) -> list[uuid.UUID]:
    """One dialog to the target service per body, with the body as its first request,
    in one transaction; their handles."""
    with initiator.db.transaction() as tx:
        handles = [tx.begin_dialog(BETWEEN_INITIATOR_SERVICE, BETWEEN_TARGET_SERVICE, BETWEEN_CONTRACT)
                   for _ in bodies]
        for handle, body in zip(handles, bodies, strict=True):
            tx.send(handle, BETWEEN_REQUEST, body)
    return handles


def far_broker_instance(side: Side, handle: uuid.UUID) -> str | None:
    """The far_broker_instance of the side's endpoint ``handle`` (None until acknowledged)."""
    row = endpoint(side.db, handle)
    assert row is not None
    return row["far_broker_instance"]  # type: ignore[no-any-return]


def received(inst: broker.Instance) -> int:
    """Fragments the instance's endpoint took in, as sys.dm_broker_connections last showed."""
    return sum(c["total_fragments_received"] for c in inst.catalog("sys.dm_broker_connections") if c["is_accept"])


def complete_the_tutorial(initiator: Side, target: Side) -> None:
    """Spec 12.3's conversation between two instance processes: the request, the reply
    and EndDialog from the target, EndDialog from the initiator; both endpoints closed."""
    [handle] = begin(initiator, [REQUEST_BODY])
    wait_until(lambda: not initiator.held(), DEADLINE_S)  # acknowledged by the target's database
    # The first acknowledgement names the target's database; the dialog sticks to it (7.4).
    assert far_broker_instance(initiator, handle) == str(target.db.service_broker_guid)
    with target.db.transaction() as tx:
        [request] = tx.receive(BETWEEN_TARGET_QUEUE)
        assert request.message_body == REQUEST_BODY
        tx.send(request.conversation_handle, BETWEEN_REPLY, REPLY_BODY)
        tx.end_conversation(request.conversation_handle)
    wait_until(lambda: len(initiator.db.queue_rows(BETWEEN_INITIATOR_QUEUE)) == 2, DEADLINE_S)
    with initiator.db.transaction() as tx:
        reply, end = tx.receive(BETWEEN_INITIATOR_QUEUE, 2)
        assert (reply.conversation_handle, reply.message_body) == (handle, REPLY_BODY)
        assert end.message_type_name == END_DIALOG
        tx.end_conversation(handle)
    wait_until(lambda: not initiator.held() and not target.held(), DEADLINE_S)
    wait_until(lambda: endpoint(initiator.db, handle) is None, DEADLINE_S)  # the initiator's side is gone
    [far_side] = target.db.catalog("sys.conversation_endpoints")
    assert far_side["state"] == "CD"  # the target's side stays CLOSED (replays are recognised)
    assert far_side["far_broker_instance"] == str(initiator.db.service_broker_guid)


def test_the_tutorial_with_each_instance_in_a_process(target_url: Callable[[str], str], network: Network) -> None:
    """Spec 12.3: each database routes the other's service to the other instance's endpoint."""
    initiator, target = network.initiator(), network.target("target", target_url("target"))
    initiator.db.create_route("InstTargetRoute", address(target.port), service_name=BETWEEN_TARGET_SERVICE)
    initiator.db.create_remote_service_binding("TargetBinding", BETWEEN_TARGET_SERVICE, "TargetUser")
    target.db.create_route("InstInitiatorRoute", address(initiator.port), service_name=BETWEEN_INITIATOR_SERVICE)
    initiator.endpoint([target.certificate])
    target.endpoint([initiator.certificate])
    network.serve(initiator=initiator, target=target)
    complete_the_tutorial(initiator, target)
    wait_until(lambda: received(target.inst) > 0, DEADLINE_S)  # the target's process took it over TCP


def test_conversations_spread_over_two_target_instances_and_stay_where_first_acknowledged(
        target_url: Callable[[str], str], network: Network) -> None:
    """Spec 8.2 step 3 and 8.4: two routes for the target service, each naming another
    instance's database; dialogs that name no broker instance are spread over both, and
    each dialog's messages all go to the database its first acknowledgement named."""
    initiator = network.initiator()
    targets = [network.target(name, target_url(name)) for name in ("a", "b")]
    guids = [str(target.db.service_broker_guid) for target in targets]
    for name, target, guid in zip("ab", targets, guids, strict=True):
        initiator.db.create_route(f"InstTargetRoute_{name}", address(target.port),
                                  service_name=BETWEEN_TARGET_SERVICE, broker_instance=guid)
        target.db.create_route("InstInitiatorRoute", address(initiator.port),
                               service_name=BETWEEN_INITIATOR_SERVICE)
        target.endpoint([initiator.certificate])
    initiator.db.create_remote_service_binding("TargetBinding", BETWEEN_TARGET_SERVICE, "TargetUser")
    initiator.endpoint([target.certificate for target in targets])
    network.serve(initiator=initiator, a=targets[0], b=targets[1])

    def arrived() -> dict[str, dict[uuid.UUID, list[bytes | None]]]:
        """The bodies in each target's queue, by target database and conversation id."""
        by_target: dict[str, dict[uuid.UUID, list[bytes | None]]] = {}
        for target, guid in zip(targets, guids, strict=True):
            # The rows first: an endpoint arriving after them is read too, one after them
            # would be missing from the endpoints read first (two reads, two snapshots).
            rows = target.db.queue_rows(BETWEEN_TARGET_QUEUE)
            ids = {row["conversation_handle"]: row["conversation_id"]
                   for row in target.db.catalog("sys.conversation_endpoints")}
            by_conversation = by_target[guid] = {}
            for message in rows:
                by_conversation.setdefault(ids[message.conversation_handle], []).append(message.message_body)
        return by_target

    def count() -> int:
        return sum(len(bodies) for by_conversation in arrived().values() for bodies in by_conversation.values())

    handles = begin(initiator, [f"<m>{d}-0</m>".encode() for d in range(DIALOGS)])
    wait_until(lambda: not initiator.held() and count() == DIALOGS, DEADLINE_S)
    far = {handle: str(far_broker_instance(initiator, handle)) for handle in handles}
    assert set(far.values()) <= set(guids)
    with initiator.db.transaction() as tx:  # after the first acknowledgement: routed by far_broker_instance
        for d, handle in enumerate(handles):
            tx.send(handle, BETWEEN_REQUEST, f"<m>{d}-1</m>")
    wait_until(lambda: not initiator.held() and count() == 2 * DIALOGS, DEADLINE_S)

    by_target = arrived()
    for d, handle in enumerate(handles):
        row = endpoint(initiator.db, handle)
        assert row is not None
        holders = [guid for guid, by_conversation in by_target.items() if row["conversation_id"] in by_conversation]
        assert holders == [far[handle]], f"dialog {d}: held by {holders}, first acknowledged by {far[handle]}"
        assert by_target[far[handle]][row["conversation_id"]] == [f"<m>{d}-{n}</m>".encode() for n in range(2)]
    assert all(by_target[guid] for guid in guids), {guid: len(by_target[guid]) for guid in guids}


def test_a_conversation_through_a_forwarding_instance(target_url: Callable[[str], str], network: Network) -> None:
    """Spec 8.7: each side routes the other's service to a forwarder (MESSAGE_FORWARDING
    = ENABLED) whose instance routes send it on; only the final destination acknowledges."""
    initiator, target = network.initiator(), network.target("target", target_url("target"))
    forwarder = network.forwarder("forwarder")
    initiator.db.create_route("InstTargetRoute", forwarder.address, service_name=BETWEEN_TARGET_SERVICE)
    initiator.db.create_remote_service_binding("TargetBinding", BETWEEN_TARGET_SERVICE, "TargetUser")
    target.db.create_route("InstInitiatorRoute", forwarder.address, service_name=BETWEEN_INITIATOR_SERVICE)
    forwarder.inst.create_route("ToTarget", address(target.port), service_name=BETWEEN_TARGET_SERVICE)
    forwarder.inst.create_route("ToInitiator", address(initiator.port), service_name=BETWEEN_INITIATOR_SERVICE)
    initiator.endpoint([forwarder.certificate])  # hop by hop: neither side trusts the other
    target.endpoint([forwarder.certificate])
    forwarder.endpoint([initiator.certificate, target.certificate])
    network.serve(initiator=initiator, target=target, forwarder=forwarder)
    complete_the_tutorial(initiator, target)  # far_broker_instance: the target's, not the forwarder's
    wait_until(lambda: received(forwarder.inst) > 0, DEADLINE_S)
    wait_until(lambda: not forwarder.forwarded(), DEADLINE_S)  # it holds nothing once it is over


def forwarding_loop(network: Network) -> tuple[Side, dict[str, InstanceProcess]]:
    """An initiator whose route to the target service leads to a forwarder, whose
    instance routes it to a second forwarder, which routes it back to the first; no
    instance has the service. The initiator and the processes, by name."""
    initiator, first, second = network.initiator(), network.forwarder("first"), network.forwarder("second")
    initiator.db.create_route("InstTargetRoute", first.address, service_name=BETWEEN_TARGET_SERVICE)
    initiator.db.create_remote_service_binding("TargetBinding", BETWEEN_TARGET_SERVICE, "TargetUser")
    first.inst.create_route("Loop", second.address, service_name=BETWEEN_TARGET_SERVICE)
    second.inst.create_route("Back", first.address, service_name=BETWEEN_TARGET_SERVICE)
    initiator.endpoint([first.certificate])
    first.endpoint([initiator.certificate, second.certificate])
    second.endpoint([first.certificate])
    return initiator, network.serve(initiator=initiator, first=first, second=second)


def test_a_forwarding_loop_keeps_the_message_at_its_sender_and_crashes_no_forwarder(network: Network) -> None:
    """Spec 7.4 and 8.7: a message no forwarder can deliver is never acknowledged; its
    sender keeps it with a transmission status, and the forwarders carry on."""
    initiator, processes = forwarding_loop(network)
    [handle] = begin(initiator, [b"<m>looping</m>"])
    wait_until(lambda: [row["transmission_status"] for row in initiator.held()] == [NOT_ACKNOWLEDGED],
               LOOP_DEADLINE_S)
    [held] = initiator.held()  # never delivered, never acknowledged: kept by its sender
    assert held["message_body"] == b"<m>looping</m>"
    assert far_broker_instance(initiator, handle) is None
    assert processes["first"].alive and processes["second"].alive
    assert network.processes.stop() == {"initiator": 0, "first": 0, "second": 0}  # each stops cleanly


def test_a_forwarding_loop_dies_by_its_hop_count(network: Network) -> None:
    """Spec 8.7: each hop takes one from the message's hop count, and a forwarder drops
    the message when none is left, at once (well before any connection times out)."""
    initiator, processes = forwarding_loop(network)
    begin(initiator, [b"<m>looping</m>"])
    wait_until(lambda: "hops" in processes["first"].logged() + processes["second"].logged(), HOPS_DEADLINE_S)

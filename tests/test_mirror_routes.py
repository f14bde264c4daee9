"""Mirror routes and failover (spec 8.8, issue 14).

Three instances on loopback: the initiator's, and two that share the target database
(conftest's ``db_url``: a SQLite file or a PostgreSQL database), one serving it as
principal and one as mirror. The initiator's route to the target service has ADDRESS (the
principal's endpoint) and MIRROR_ADDRESS (the mirror's). Messages go to the principal; a
failover on the mirror's instance makes it the principal, and the messages follow.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from support import (
    BETWEEN_CONTRACT,
    BETWEEN_INITIATOR_QUEUE,
    BETWEEN_INITIATOR_SERVICE,
    BETWEEN_REPLY,
    BETWEEN_REQUEST,
    BETWEEN_TARGET_QUEUE,
    BETWEEN_TARGET_SERVICE,
    wait_until,
)
from test_cli_hostile import well_behaved
from two_instances import Side, free_port, make_side

import broker
from broker.ddl.certificates import create_certificate
from broker.runtime.transmitter import NO_NETWORK_TRANSPORT
from cli.main import cli

DEADLINE_S = 30.0
POLL_S = 0.2  # the runtimes' longest sleep: a pass picks up what no commit woke it for
TARGET_DB = "InstTargetDB"
ACTING_AS_MIRROR = f'The database "{TARGET_DB}" cannot be opened. It is acting as a mirror database.'


@dataclass
class Trio:
    initiator: Side
    principal: Side
    mirror: Side
    guid: uuid.UUID  # the shared target database's broker instance

    def begin(self, body: str, *, pinned: bool = True) -> uuid.UUID:
        """A dialog to the target service (pinned to the target database's broker
        instance, as a mirror route's dialogs usually are) and its first message."""
        with self.initiator.db.transaction() as tx:
            handle = tx.begin_dialog(BETWEEN_INITIATOR_SERVICE, BETWEEN_TARGET_SERVICE, BETWEEN_CONTRACT,
                                     broker_instance=str(self.guid) if pinned else None)
            tx.send(handle, BETWEEN_REQUEST, body)
        return handle

    def send(self, handle: uuid.UUID, body: str) -> None:
        with self.initiator.db.transaction() as tx:
            tx.send(handle, BETWEEN_REQUEST, body)

    def arrived(self) -> dict[uuid.UUID, list[bytes | None]]:
        """The target queue's bodies by conversation, in order."""
        by_dialog: dict[uuid.UUID, list[bytes | None]] = {}
        for message in self.principal.db.queue_rows(BETWEEN_TARGET_QUEUE):
            by_dialog.setdefault(message.conversation_handle, []).append(message.message_body)
        return by_dialog

    def dispose(self) -> None:
        for side in (self.initiator, self.principal, self.mirror):
            side.inst.dispose()


def three_instances(directory: Path, target_url: str) -> Trio:
    """The initiator's instance, the principal's (which creates the target database's
    objects) and the mirror's, trusting each other's certificates, with the initiator's
    mirrored route to the target service and the target's route back."""
    initiator = make_side(directory, "initiator", f"sqlite:///{directory / 'initiator.db'}",
                          BETWEEN_INITIATOR_SERVICE, BETWEEN_INITIATOR_QUEUE)
    principal = make_side(directory, "target", target_url, BETWEEN_TARGET_SERVICE, BETWEEN_TARGET_QUEUE)
    inst = broker.instance(f"sqlite:///{directory / 'mirror-instance.db'}")
    certificate, key = create_certificate("mirror instance")
    port = free_port()
    while port in (initiator.port, principal.port):
        port = free_port()
    mirror = Side(inst, inst.add_database(TARGET_DB, target_url, mirror=True), certificate, key, port)
    guid = principal.db.service_broker_guid
    initiator.db.create_route("InstTargetRoute", f"TCP://127.0.0.1:{principal.port}",
                              service_name=BETWEEN_TARGET_SERVICE, broker_instance=str(guid),
                              mirror_address=f"TCP://127.0.0.1:{mirror.port}")
    initiator.db.create_remote_service_binding("TargetBinding", BETWEEN_TARGET_SERVICE, "TargetUser")
    principal.db.create_route("InstInitiatorRoute", f"TCP://127.0.0.1:{initiator.port}",
                              service_name=BETWEEN_INITIATOR_SERVICE)  # shared: the mirror has it too
    initiator.endpoint([principal.certificate, mirror.certificate])
    principal.endpoint([initiator.certificate])
    mirror.endpoint([initiator.certificate])
    return Trio(initiator, principal, mirror, guid)


@pytest.fixture
def trio(db_url: str, tmp_path: Path) -> Iterator[Trio]:
    made = three_instances(tmp_path, db_url)
    yield made
    made.dispose()


def role(side: Side) -> str | None:
    [row] = side.inst.catalog("sys.database_mirroring")
    return row["mirroring_role_desc"]  # type: ignore[no-any-return]


def received(side: Side) -> int:
    """Messages the side's endpoint took in, as sys.dm_broker_connections last showed."""
    return sum(c["total_fragments_received"] for c in side.inst.catalog("sys.dm_broker_connections")
               if c["is_accept"])


def test_messages_go_to_the_principal_and_follow_a_failover(trio: Trio) -> None:
    assert (role(trio.principal), role(trio.mirror)) == ("PRINCIPAL", "MIRROR")
    with trio.initiator.inst.runtime(poll_interval=POLL_S), trio.principal.inst.runtime(poll_interval=POLL_S), \
            trio.mirror.inst.runtime(poll_interval=POLL_S) as on_mirror:
        assert on_mirror.runtimes == []  # no scheduler or activation on the mirror's side
        handles = [trio.begin(f"<m>{d}-0</m>") for d in range(3)]
        for n in range(1, 20):
            for d, handle in enumerate(handles):
                trio.send(handle, f"<m>{d}-{n}</m>")
        wait_until(lambda: not trio.initiator.held() and sum(map(len, trio.arrived().values())) == 60, DEADLINE_S)
        wait_until(lambda: received(trio.principal) >= 60, DEADLINE_S)
        assert received(trio.mirror) == 0

        trio.mirror.inst.failover(TARGET_DB)
        assert (role(trio.principal), role(trio.mirror)) == ("MIRROR", "PRINCIPAL")
        handles.append(trio.begin("<m>3-0</m>", pinned=False))  # found by service name at the new principal
        for n in range(20, 40):
            for d, handle in enumerate(handles[:3]):
                trio.send(handle, f"<m>{d}-{n}</m>")
        wait_until(lambda: not trio.initiator.held() and sum(map(len, trio.arrived().values())) == 121, DEADLINE_S)
        wait_until(lambda: received(trio.mirror) >= 61, DEADLINE_S)

        # The replies leave the shared database through the new principal's transmitter.
        with trio.mirror.db.transaction() as tx:
            while conversation := tx.receive(BETWEEN_TARGET_QUEUE):  # one conversation group at a time
                tx.send(conversation[0].conversation_handle, BETWEEN_REPLY, "<reply/>")
                tx.end_conversation(conversation[0].conversation_handle)
        wait_until(lambda: len(trio.initiator.db.queue_rows(BETWEEN_INITIATOR_QUEUE)) == 8, DEADLINE_S)
        wait_until(lambda: not trio.mirror.held(), DEADLINE_S)

    [row] = trio.mirror.inst.catalog("sys.database_mirroring")
    assert row["mirroring_role_sequence"] == 1
    assert row["mirroring_partner_instance"] == str(trio.principal.inst.msdb.service_broker_guid)
    assert row["mirroring_guid"] == trio.guid
    by_dialog: dict[uuid.UUID, list[bytes | None]] = {handle: [] for handle in handles}
    for message in trio.initiator.db.queue_rows(BETWEEN_INITIATOR_QUEUE):
        by_dialog[message.conversation_handle].append(message.message_body)
    assert all(bodies == [b"<reply/>", None] for bodies in by_dialog.values())


def test_bodies_arrive_once_and_in_order_across_a_failover(trio: Trio) -> None:
    with trio.initiator.inst.runtime(poll_interval=POLL_S), trio.principal.inst.runtime(poll_interval=POLL_S), \
            trio.mirror.inst.runtime(poll_interval=POLL_S):
        handles = [trio.begin(f"<m>{d}-0</m>") for d in range(4)]
        for n in range(1, 100):
            if n == 50:
                trio.mirror.inst.failover(TARGET_DB)  # while messages are on their way
            for d, handle in enumerate(handles):
                trio.send(handle, f"<m>{d}-{n}</m>")
        wait_until(lambda: not trio.initiator.held(), 60.0)
    got = sorted(trio.arrived().values())
    assert got == sorted([f"<m>{d}-{n}</m>".encode() for n in range(100)] for d in range(4))


def test_a_mirror_refuses_and_the_sender_waits_until_the_partner_claims_to_be_principal(trio: Trio) -> None:
    with trio.initiator.inst.runtime(poll_interval=POLL_S), trio.principal.inst.runtime(poll_interval=POLL_S):
        handle = trio.begin("<m>0</m>")
        wait_until(lambda: not trio.initiator.held(), DEADLINE_S)
        trio.mirror.inst.failover(TARGET_DB)  # its runtime is not running: its endpoint does not listen
        assert role(trio.principal) == "MIRROR"
        trio.send(handle, "<m>1</m>")
        # The old principal refuses (954) and the mirror's address does not answer: the message waits.
        wait_until(lambda: [row["transmission_status"] for row in trio.initiator.held()] == [ACTING_AS_MIRROR],
                   DEADLINE_S)
        assert list(trio.arrived().values()) == [[b"<m>0</m>"]]
        with trio.mirror.inst.runtime(poll_interval=POLL_S):  # the new principal comes up and takes it
            wait_until(lambda: not trio.initiator.held(), 60.0)
    assert list(trio.arrived().values()) == [[b"<m>0</m>", b"<m>1</m>"]]


# -- the roles, without the network ------------------------------------------------------------


@pytest.fixture
def partners(db_url: str, tmp_path: Path) -> Iterator[tuple[broker.Instance, broker.Instance]]:
    """The principal's and the mirror's instance of one database (``db_url``), the database
    holding a service."""
    principal = broker.instance(f"sqlite:///{tmp_path / 'principal-instance.db'}")
    shared = principal.add_database(TARGET_DB, db_url)
    shared.create_queue("Q")
    shared.create_service("//Here", "Q", ["DEFAULT"])
    shared.create_route("Far", "TCP://127.0.0.1:9", service_name="//Far")
    mirror = broker.instance(f"sqlite:///{tmp_path / 'mirror-instance.db'}")
    mirror.add_database(TARGET_DB, db_url, mirror=True)
    yield principal, mirror
    principal.dispose()
    mirror.dispose()


def held_status(db: broker.Broker, handle: uuid.UUID) -> str:
    [row] = db.catalog("sys.transmission_queue", conversation_handle=handle)
    return row["transmission_status"]  # type: ignore[no-any-return]


def test_only_the_principal_s_instance_works_on_the_shared_database(
        partners: tuple[broker.Instance, broker.Instance]) -> None:
    principal, mirror = partners
    shared = principal.database(TARGET_DB)

    def held_message() -> uuid.UUID:
        with shared.transaction() as tx:
            handle = tx.begin_dialog("//Here", "//Far", encryption=False)
            tx.send(handle, body="x")
        return handle

    first = held_message()
    mirror.runtime().run_pass()  # the mirror's transmitter leaves it alone
    assert held_status(shared, first) == ""
    principal.runtime().run_pass()  # the principal's tries it (no endpoint: it waits for one)
    assert held_status(shared, first) == NO_NETWORK_TRANSPORT

    mirror.failover(TARGET_DB)
    second = held_message()
    principal.runtime().run_pass()
    assert held_status(shared, second) == ""
    mirror.runtime().run_pass()
    assert held_status(shared, second) == NO_NETWORK_TRANSPORT
    with mirror.runtime(poll_interval=POLL_S) as serving:
        assert [runtime.db for runtime in serving.runtimes] == [mirror.database(TARGET_DB)]


def test_failover_errors(partners: tuple[broker.Instance, broker.Instance], tmp_path: Path, db_url: str) -> None:
    principal, mirror = partners
    with pytest.raises(broker.BrokerError) as caught:
        principal.failover(TARGET_DB)  # the principal already
    assert caught.value.number == 1455
    with pytest.raises(broker.BrokerError) as caught:
        mirror.failover("NoSuchDB")
    assert caught.value.number == 911
    plain = principal.add_database("Plain", f"sqlite:///{tmp_path / 'plain.db'}")
    assert plain.service_broker_guid != principal.database(TARGET_DB).service_broker_guid
    with pytest.raises(broker.BrokerError) as caught:
        principal.failover("Plain")
    assert caught.value.number == 1416
    assert principal.catalog("sys.database_mirroring")[1]["mirroring_role"] is None

    third = broker.instance(f"sqlite:///{tmp_path / 'third-instance.db'}")
    with pytest.raises(broker.BrokerError) as caught:
        third.add_database(TARGET_DB, db_url, mirror=True)  # it has a mirror
    assert caught.value.number == 1405
    assert third.databases == {}
    third.dispose()
    with pytest.raises(broker.BrokerError) as caught:
        principal.add_database("Again", db_url, mirror=True)  # its own partner
    assert caught.value.number == 1452
    assert list(principal.databases) == [TARGET_DB, "Plain"]

    mirror.failover(TARGET_DB)
    with pytest.raises(broker.BrokerError) as caught:
        mirror.failover(TARGET_DB)  # the principal now
    assert caught.value.number == 1455
    principal.failover(TARGET_DB)  # and back
    assert [row["mirroring_role_sequence"] for row in mirror.catalog("sys.database_mirroring")] == [2]
    assert principal.catalog("sys.database_mirroring")[0]["mirroring_role_desc"] == "PRINCIPAL"


# -- the command line ---------------------------------------------------------------------------


def invoke(*args: str, expect: int = 0) -> Result:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == expect, (result.stdout, result.stderr, result.exception)
    well_behaved(result)
    return result


def test_the_command_line(db_url: str, tmp_path: Path) -> None:
    principal, mirror = (f"sqlite:///{tmp_path / f'{name}-instance.db'}" for name in ("principal", "mirror"))
    invoke("--instance", principal, "database", "add", TARGET_DB, db_url)
    added = invoke("--instance", mirror, "database", "add", TARGET_DB, db_url, "--mirror")
    assert added.stdout.strip().endswith("as MIRROR")
    refused = invoke("--instance", principal, "failover", TARGET_DB, expect=1)
    assert refused.stderr.startswith("error 1455: ")
    assert invoke("--instance", mirror, "failover", "NoSuchDB", expect=1).stderr.startswith("error 911: ")
    done = invoke("--instance", mirror, "failover", TARGET_DB)
    assert done.stdout == f"database {TARGET_DB} is now the PRINCIPAL on this instance\n"
    roles = []
    for url in (principal, mirror):
        inst = broker.instance(url)
        roles.append(inst.catalog("sys.database_mirroring")[0]["mirroring_role_desc"])
        inst.dispose()
    assert roles == ["MIRROR", "PRINCIPAL"]

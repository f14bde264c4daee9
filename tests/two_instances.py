"""Two instances that talk over TCP with mutual TLS: the tutorial "Completing a Conversation
Between Instances" (spec 12.3) set up on two instance catalogs on loopback, for the tests.

Each instance has one member database, a certificate made with ``cryptography`` and an
endpoint on a free port; each database routes the other's service to the other
instance's endpoint, and each instance's own ``AutoCreatedLocal`` route takes what
arrives to its database.
"""

from __future__ import annotations

import random
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

from support import (
    BETWEEN_CONTRACT,
    BETWEEN_INITIATOR_QUEUE,
    BETWEEN_INITIATOR_SERVICE,
    BETWEEN_REPLY,
    BETWEEN_REQUEST,
    BETWEEN_TARGET_QUEUE,
    BETWEEN_TARGET_SERVICE,
)

import broker
from broker.ddl.certificates import create_certificate


def free_port() -> int:
    """A port SQL Server's LISTENER_PORT range allows (1024-32767) that is free now."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randint(20000, 32000)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port between 20000 and 32000")


@dataclass
class Side:
    """One instance: its catalog, its one database, its certificate and its port."""

    inst: broker.Instance
    db: broker.Broker
    certificate: bytes
    key: bytes
    port: int

    def endpoint(self, trusted: list[bytes], **options: object) -> None:
        self.inst.create_endpoint(f"Endpoint{self.port}", self.port, listener_ip="127.0.0.1",
                                  certificate=self.certificate, private_key=self.key, trusted_peers=trusted,
                                  **options)

    def held(self) -> list[dict[str, object]]:
        return self.db.catalog("sys.transmission_queue")


@dataclass
class Pair:
    initiator: Side
    target: Side

    def begin(self, body: str = "<RequestMsg>Message for Target service.</RequestMsg>") -> uuid.UUID:
        with self.initiator.db.transaction() as tx:
            handle = tx.begin_dialog(BETWEEN_INITIATOR_SERVICE, BETWEEN_TARGET_SERVICE, BETWEEN_CONTRACT)
            tx.send(handle, BETWEEN_REQUEST, body)
        return handle


def make_side(directory: Path, role: str, url: str, service: str, queue: str) -> Side:
    inst = broker.instance(f"sqlite:///{directory / f'{role}-instance.db'}")
    db = inst.add_database(f"Inst{role.title()}DB", url)
    db.create_message_type(BETWEEN_REQUEST, "WELL_FORMED_XML")
    db.create_message_type(BETWEEN_REPLY, "WELL_FORMED_XML")
    db.create_contract(BETWEEN_CONTRACT, {BETWEEN_REQUEST: "INITIATOR", BETWEEN_REPLY: "TARGET"})
    db.create_queue(queue)
    db.create_service(service, queue, [BETWEEN_CONTRACT] if role == "target" else [])
    certificate, key = create_certificate(f"{role} instance")
    return Side(inst, db, certificate, key, free_port())


def two_instances(directory: Path, target_url: str) -> Pair:
    """The initiator's instance (its database a SQLite file in ``directory``) and the
    target's (its database at ``target_url``), routed to each other, with the initiator's
    remote service binding for the target service; no endpoint yet."""
    initiator = make_side(directory, "initiator", f"sqlite:///{directory / 'initiator.db'}",
                          BETWEEN_INITIATOR_SERVICE, BETWEEN_INITIATOR_QUEUE)
    target = make_side(directory, "target", target_url, BETWEEN_TARGET_SERVICE, BETWEEN_TARGET_QUEUE)
    initiator.db.create_route("InstTargetRoute", f"TCP://127.0.0.1:{target.port}", service_name=BETWEEN_TARGET_SERVICE)
    # Dialogs begin WITH ENCRYPTION = ON (the default): dialog security needs a binding.
    initiator.db.create_remote_service_binding("TargetBinding", BETWEEN_TARGET_SERVICE, "TargetUser")
    target.db.create_route("InstInitiatorRoute", f"TCP://127.0.0.1:{initiator.port}",
                           service_name=BETWEEN_INITIATOR_SERVICE)
    return Pair(initiator, target)


def trust_each_other(pair: Pair) -> None:
    pair.initiator.endpoint([pair.target.certificate])
    pair.target.endpoint([pair.initiator.certificate])


def send_many(pair: Pair, dialogs: int, per_dialog: int) -> list[uuid.UUID]:
    handles = [pair.begin(f"<m>{d}-0</m>") for d in range(dialogs)]
    with pair.initiator.db.transaction() as tx:
        for n in range(1, per_dialog):
            for d, handle in enumerate(handles):
                tx.send(handle, BETWEEN_REQUEST, f"<m>{d}-{n}</m>")
    return handles


def assert_exactly_once_in_order(pair: Pair, dialogs: int, per_dialog: int) -> None:
    """Every message once, in its dialog's sequence and ready to RECEIVE (status 1: none
    waits behind a gap). Rows are listed in sequence order, as RECEIVE returns them: a
    message that arrived ahead of a lost one sits earlier in the queue (SQL Server's
    queuing order too) until the gap fills."""
    by_dialog: dict[uuid.UUID, list[bytes | None]] = {}
    rows = sorted(pair.target.db.iter_queue_rows(BETWEEN_TARGET_QUEUE),
                  key=lambda row: (str(row.conversation_handle), row.message_sequence_number))
    assert {row.status for row in rows} == {1}
    for message in rows:
        by_dialog.setdefault(message.conversation_handle, []).append(message.message_body)
    assert len(by_dialog) == dialogs
    got = sorted(by_dialog.values())
    expected = sorted([f"<m>{d}-{n}</m>".encode() for n in range(per_dialog)] for d in range(dialogs))
    assert got == expected
    assert not pair.initiator.held() and not pair.target.held()



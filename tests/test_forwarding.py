"""Message forwarding between instances (spec 8.7, issue 14).

The initiator's instance and the target's do not reach each other: each database routes
the other's service to a forwarder, an instance with no database of its own whose
endpoint has MESSAGE_FORWARDING = ENABLED and whose routes (the instance catalog's) send
each service on. Transport security is hop by hop: each side trusts only the forwarder.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import (
    BETWEEN_INITIATOR_QUEUE,
    BETWEEN_INITIATOR_SERVICE,
    BETWEEN_REPLY,
    BETWEEN_TARGET_QUEUE,
    BETWEEN_TARGET_SERVICE,
    wait_until,
)
from two_instances import Pair, free_port, two_instances

import broker
from broker.ddl.certificates import create_certificate

DEADLINE_S = 30.0


@dataclass
class Forwarder:
    inst: broker.Instance
    certificate: bytes
    key: bytes
    port: int

    @property
    def address(self) -> str:
        return f"TCP://127.0.0.1:{self.port}"

    def endpoint(self, trusted: list[bytes], **options: object) -> None:
        self.inst.create_endpoint(f"Forwarder{self.port}", self.port, listener_ip="127.0.0.1",
                                  certificate=self.certificate, private_key=self.key, trusted_peers=trusted,
                                  message_forwarding=True, **options)

    def forwarded(self) -> list[dict[str, object]]:
        return self.inst.catalog("sys.dm_broker_forwarded_messages")


def make_forwarder(directory: Path, name: str) -> Forwarder:
    certificate, key = create_certificate(name)
    return Forwarder(broker.instance(f"sqlite:///{directory / f'{name}.db'}"), certificate, key, free_port())


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    pair = two_instances(tmp_path, f"sqlite:///{tmp_path / 'target.db'}")
    yield pair
    pair.initiator.inst.dispose()
    pair.target.inst.dispose()


@pytest.fixture
def forwarder(tmp_path: Path, pair: Pair) -> Iterator[Forwarder]:
    """A forwarder both sides go through, trusting both and trusted by both."""
    forwarder = make_forwarder(tmp_path, "forwarder")
    pair.initiator.db.alter_route("InstTargetRoute", address=forwarder.address)
    pair.target.db.alter_route("InstInitiatorRoute", address=forwarder.address)
    forwarder.inst.create_route("ToTarget", f"TCP://127.0.0.1:{pair.target.port}", service_name=BETWEEN_TARGET_SERVICE)
    forwarder.inst.create_route("ToInitiator", f"TCP://127.0.0.1:{pair.initiator.port}",
                                service_name=BETWEEN_INITIATOR_SERVICE)
    pair.initiator.endpoint([forwarder.certificate])
    pair.target.endpoint([forwarder.certificate])
    yield forwarder
    forwarder.inst.dispose()


def bodies(db: broker.Broker, queue: str) -> list[bytes | None]:
    return [m.message_body for m in db.queue_rows(queue)]


def test_a_conversation_through_a_forwarder(pair: Pair, forwarder: Forwarder) -> None:
    forwarder.endpoint([pair.initiator.certificate, pair.target.certificate])
    with pair.initiator.inst.runtime(), pair.target.inst.runtime(), forwarder.inst.runtime():
        handle = pair.begin("<m>through</m>")
        wait_until(lambda: bodies(pair.target.db, BETWEEN_TARGET_QUEUE) == [b"<m>through</m>"], DEADLINE_S)
        wait_until(lambda: not pair.initiator.held(), DEADLINE_S)  # acknowledged by the target, relayed
        with pair.target.db.transaction() as tx:
            [request] = tx.receive(BETWEEN_TARGET_QUEUE)
            tx.send(request.conversation_handle, BETWEEN_REPLY, "<m>back</m>")
            tx.end_conversation(request.conversation_handle)
        wait_until(lambda: len(pair.initiator.db.queue_rows(BETWEEN_INITIATOR_QUEUE)) == 2, DEADLINE_S)
        with pair.initiator.db.transaction() as tx:
            reply, _ = tx.receive(BETWEEN_INITIATOR_QUEUE, 2)
            assert reply.message_body == b"<m>back</m>"
            tx.end_conversation(handle)
        wait_until(lambda: not pair.initiator.held() and not pair.target.held(), DEADLINE_S)
        [row] = pair.initiator.db.catalog("sys.conversation_endpoints") or [None]
        assert row is None or row["state"] == "CD"
    [target_side] = pair.target.db.catalog("sys.conversation_endpoints")
    assert target_side["far_broker_instance"] == str(pair.initiator.db.service_broker_guid)
    assert forwarder.forwarded() == []  # nothing held once it is over


def test_a_routing_loop_ends_when_the_hops_run_out(pair: Pair, tmp_path: Path, forwarder: Forwarder) -> None:
    other = make_forwarder(tmp_path, "other")
    forwarder.inst.drop_route("ToTarget")
    forwarder.inst.create_route("Loop", other.address, service_name=BETWEEN_TARGET_SERVICE)
    other.inst.create_route("Back", forwarder.address, service_name=BETWEEN_TARGET_SERVICE)
    forwarder.endpoint([pair.initiator.certificate, other.certificate])
    other.endpoint([forwarder.certificate])
    try:
        with pair.initiator.inst.runtime(), forwarder.inst.runtime(), other.inst.runtime():
            pair.begin("<m>lost</m>")
            wait_until(lambda: any(row["transmission_status"] ==
                                   "The message was sent to the remote instance but has not been acknowledged yet."
                                   for row in pair.initiator.held()), 60.0)
            wait_until(lambda: not forwarder.forwarded() and not other.forwarded(), DEADLINE_S)
        assert len(pair.initiator.held()) == 1  # kept by its sender, never taken anywhere
    finally:
        other.inst.dispose()


def test_a_message_over_the_forward_size_passes_fragment_by_fragment(pair: Pair, forwarder: Forwarder) -> None:
    forwarder.endpoint([pair.initiator.certificate, pair.target.certificate], message_forward_size=1)
    big = "<m>" + "x" * (2 << 20) + "</m>"  # three fragments: the forwarder holds at most 1 MB of them at once
    with pair.initiator.inst.runtime(), pair.target.inst.runtime(), forwarder.inst.runtime():
        pair.begin(big)
        pair.begin("<m>small</m>")
        wait_until(lambda: not pair.initiator.held(), 60.0)
        wait_until(lambda: not forwarder.forwarded(), DEADLINE_S)
    assert sorted(bodies(pair.target.db, BETWEEN_TARGET_QUEUE)) == sorted([big.encode(), b"<m>small</m>"])

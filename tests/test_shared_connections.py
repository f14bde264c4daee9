"""One connection per pair of instances, carrying both directions (issue 14).

Two real endpoints (``transport.tcp``) on loopback with mutual TLS and certificates made
with ``cryptography``; what arrives is taken by a small inbound function that
acknowledges every frame, so these tests see the transport alone: which connection a
batch rides, and what a receipt waits behind.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from support import wait_until
from two_instances import free_port

from broker.conversations.frames import Delivery, MessageFrame, Receipt
from broker.ddl.certificates import create_certificate, thumbprint, tls_contexts
from broker.routing.addresses import TcpAddress
from broker.storage.connection_states import ConnectionState
from broker.transport import links
from broker.transport.seam import receipts_of
from broker.transport.tcp import Arrived, EndpointSettings, TcpEndpoint

DEADLINE_S = 30.0


@dataclass
class Taker:
    """An instance's inbound: acknowledges every frame, optionally one batch per permit."""

    gated: bool = False
    permits: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    started: int = 0
    taken: list[MessageFrame] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, frames: Sequence[MessageFrame]) -> Arrived:
        with self.lock:
            self.started += 1
        if self.gated:
            assert self.permits.acquire(timeout=DEADLINE_S), "the test never let this batch through"
        with self.lock:
            self.taken += frames
        by_broker: dict[str, list[Receipt]] = {}
        for frame in frames:
            by_broker.setdefault(frame.to_broker, []).append(Receipt(frame.message_id, True))
        return Arrived([Delivery(broker, tuple(receipts)) for broker, receipts in by_broker.items()], {})


@dataclass
class Instance:
    endpoint: TcpEndpoint
    taker: Taker
    id: str

    @property
    def address(self) -> TcpAddress:
        assert self.endpoint.port is not None
        return TcpAddress("127.0.0.1", self.endpoint.port)

    def dialled(self) -> list[links.Connection]:
        return [c for c in self.endpoint._live if c.dialled]


def frame(number: int, to_broker: str, body: bytes = b"<m/>") -> MessageFrame:
    return MessageFrame(number, uuid.uuid4(), True, "//from", "from-db", "//to", to_broker, "contract", "type",
                        0, "message", body, datetime.now(UTC) + timedelta(hours=1))


@pytest.fixture
def two() -> Iterator[tuple[Instance, Instance]]:
    certificates = [create_certificate(name) for name in ("alpha", "beta")]
    # Instance ids ordered, so that which one dialled decides which connection wins.
    ids = sorted(str(uuid.uuid4()) for _ in certificates)
    instances = []
    for n, (certificate, key) in enumerate(certificates):
        peer = certificates[1 - n][0]
        server, client = tls_contexts(certificate, key, [peer])
        settings = EndpointSettings(f"Endpoint{n}", ids[n], server, client, ("127.0.0.1", free_port()),
                                    (thumbprint(peer),))
        taker = Taker()
        instances.append(Instance(TcpEndpoint(settings, taker).start(), taker, ids[n]))
    yield instances[0], instances[1]
    for instance in instances:
        instance.endpoint.stop()


def test_the_endpoint_that_was_dialled_answers_on_the_same_connection(two: tuple[Instance, Instance]) -> None:
    low, high = two
    receipts_of(low.endpoint.submit(high.address, [frame(1, "high-db")]), DEADLINE_S)
    [delivery] = receipts_of(high.endpoint.submit(low.address, [frame(2, "low-db")]), DEADLINE_S)
    assert delivery.receipts == (Receipt(2, True),)
    assert [f.message_id for f in low.taker.taken] == [2]
    assert high.dialled() == []  # it sent on the connection low dialled
    [connection] = low.dialled()
    assert connection.info.total_fragments_received == 2  # high's DATA and the receipt of low's
    assert all(c.is_accept for c in high.endpoint.connections())


def test_two_endpoints_that_dialled_each_other_send_on_one_connection(
        two: tuple[Instance, Instance], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(links, "IDLE_S", 1.0)
    low, high = two
    receipts_of(low.endpoint.submit(high.address, [frame(1, "high-db")]), DEADLINE_S)
    # high dials low as well, as it would have had both dialled at the same moment.
    asyncio.run_coroutine_threadsafe(high.endpoint._dial(low.address), high.endpoint._loop).result(DEADLINE_S)
    [winner] = low.dialled()  # dialled by the lower instance id
    [loser] = high.dialled()
    sent_on_loser = loser.info.total_sends
    for n in range(10):
        receipts_of(low.endpoint.submit(high.address, [frame(10 + n, "high-db")]), DEADLINE_S)
        receipts_of(high.endpoint.submit(low.address, [frame(100 + n, "low-db")]), DEADLINE_S)
    assert loser.info.total_sends == sent_on_loser  # (its pings aside, it carried nothing)
    assert winner.info.total_fragments_sent >= 10 and winner.info.total_fragments_received >= 20
    # No batch crosses the one left over: the side that dialled it closes it.
    wait_until(lambda: loser.info.state == ConnectionState.CLOSED, DEADLINE_S)
    receipts_of(high.endpoint.submit(low.address, [frame(200, "low-db")]), DEADLINE_S)
    assert len(high.dialled()) == 0 or winner.info.state == ConnectionState.CLOSED


def test_a_receipt_does_not_queue_behind_bulk_data(two: tuple[Instance, Instance]) -> None:
    """low floods high with megabyte batches that high takes one at a time; a batch high
    sends meanwhile is answered by low on the same connection long before low's data has
    all gone: the receipt went ahead of the data waiting to be written."""
    low, high = two
    receipts_of(low.endpoint.submit(high.address, [frame(1, "high-db")]), DEADLINE_S)
    high.taker.gated = True
    bulk = 60
    flood = [low.endpoint.submit(high.address, [frame(1000 + n, "high-db", b"x" * (1 << 20))]) for n in range(bulk)]
    wait_until(lambda: high.taker.started == 2, DEADLINE_S)  # the connection's batches apply one at a time
    answer = high.endpoint.submit(low.address, [frame(2, "low-db")])
    let_through = 0
    while not answer.done():
        assert let_through < bulk, "the receipt came only after all the bulk data"
        before = high.taker.started
        high.taker.permits.release()
        let_through += 1
        wait_until(lambda before=before: answer.done() or high.taker.started > before, DEADLINE_S)
    assert receipts_of(answer)[0].receipts == (Receipt(2, True),)
    assert high.dialled() == []
    # Fewer than half the batches (the socket buffers hold a few) went ahead of the receipt.
    assert let_through < bulk // 2, let_through
    high.taker.gated = False
    for _ in range(bulk):
        high.taker.permits.release()
    for submitted in flood:
        receipts_of(submitted, DEADLINE_S)
    assert len([f for f in high.taker.taken if f.message_id >= 1000]) == bulk

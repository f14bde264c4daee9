"""The transmitter's batches in flight (``broker.runtime.pipeline``): where the next read
starts, when reading waits, and which batches are taken out to settle."""

from __future__ import annotations

import concurrent.futures
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from broker.conversations.frames import Delivery, MessageFrame
from broker.conversations.outbound import OutboundMessage
from broker.routing.addresses import TcpAddress
from broker.routing.matching import Delayed, Remote
from broker.runtime import pipeline as pipeline_module
from broker.runtime.mirrors import Hop
from broker.runtime.pipeline import DRAIN_EVERY, WINDOW, Pipeline, Sending
from broker.transport.seam import Answer, receipts_of

ADDRESS = TcpAddress("127.0.0.1", 4022)


class Endpoint:
    """A network transport whose answers the test gives (``concurrent.futures.Future``s)."""

    def deliver(self, address: TcpAddress, frames: Sequence[MessageFrame]) -> Sequence[Delivery]:
        raise AssertionError("the pipeline never sends")

    def submit(self, address: TcpAddress, frames: Sequence[MessageFrame]) -> Answer:
        raise AssertionError("the pipeline never sends")


def message(message_id: int, handle: uuid.UUID) -> OutboundMessage:
    return OutboundMessage(message_id, handle, "//target", None, "//initiator", 1, message_id, 1, False, False,
                           b"body", 0, uuid.uuid4(), True, datetime.now(UTC) + timedelta(days=1), "CO", None, None)


def sending(network: Endpoint, *ids: int, handle: uuid.UUID | None = None) -> Sending:
    dialog = handle or uuid.uuid4()
    return Sending(concurrent.futures.Future(), {i: message(i, dialog) for i in ids}, network, Hop(ADDRESS))


def test_an_empty_pipeline_reads_from_the_first_message() -> None:
    assert Pipeline().start_after(honor_priority=False) == 0


def test_with_batches_in_flight_the_next_read_starts_after_the_highest_id_sent() -> None:
    network, pipeline = Endpoint(), Pipeline()
    pipeline.sent(sending(network, 3, 7, 5), [])
    pipeline.sent(sending(network, 2, 4), [])
    assert pipeline.start_after(honor_priority=False) == 7


def test_a_full_window_reads_nothing_until_an_answer_comes() -> None:
    network, pipeline = Endpoint(), Pipeline()
    batches = [sending(network, i) for i in range(1, WINDOW + 1)]
    for batch in batches:
        pipeline.sent(batch, [])
    assert not pipeline.has_room()
    assert pipeline.start_after(honor_priority=False) is None
    batches[1].answer.set_result([])
    assert pipeline.answered(network) == [batches[1]]
    assert pipeline.start_after(honor_priority=False) == WINDOW


def test_reading_past_batches_in_flight_stops_every_few_reads_so_that_retries_below_go() -> None:
    network, pipeline = Endpoint(), Pipeline()
    pipeline.sent(sending(network, 1), [])
    for _ in range(DRAIN_EVERY):
        assert pipeline.start_after(honor_priority=False) == 1
    assert pipeline.start_after(honor_priority=False) is None  # until the pipeline empties
    pipeline.sending[0].answer.set_result([])
    pipeline.answered(network)
    assert pipeline.start_after(honor_priority=False) == 0  # from the first again: a due retry is read


def test_with_broker_priority_one_batch_goes_at_a_time() -> None:
    network, pipeline = Endpoint(), Pipeline()
    pipeline.sent(sending(network, 1), [])
    assert pipeline.start_after(honor_priority=True) is None


def test_a_dialog_in_flight_keeps_its_remote_destination_until_the_pipeline_empties() -> None:
    network, pipeline = Endpoint(), Pipeline()
    remote, delayed = uuid.uuid4(), uuid.uuid4()
    there = Remote(ADDRESS, None, "route")
    batch = sending(network, 1)
    pipeline.sent(batch, [(remote, there), (delayed, Delayed("no route"))])
    assert pipeline.routed == {remote: there}  # a delayed one is routed again next time
    batch.answer.set_result([])
    pipeline.answered(network)
    pipeline.start_after(honor_priority=False)
    assert pipeline.routed == {}


def test_answers_are_taken_out_in_any_order_and_the_rest_stay() -> None:
    network, pipeline = Endpoint(), Pipeline()
    first, second, third = (sending(network, i) for i in (1, 2, 3))
    for batch in (first, second, third):
        pipeline.sent(batch, [])
    third.answer.set_result([])
    second.answer.set_exception(RuntimeError("refused"))
    assert pipeline.answered(network) == [second, third]
    assert pipeline.sending == [first]


def test_a_batch_of_an_endpoint_that_was_replaced_is_cancelled_and_goes_again() -> None:
    old, new, pipeline = Endpoint(), Endpoint(), Pipeline()
    batch = sending(old, 1)
    pipeline.sent(batch, [])
    assert pipeline.answered(old) == []
    assert pipeline.answered(new) == [batch]
    with pytest.raises(Exception, match="The endpoint stopped."):
        receipts_of(batch.answer)


def test_a_batch_that_never_answers_is_given_up_after_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    network, pipeline = Endpoint(), Pipeline()
    batch = sending(network, 1)
    pipeline.sent(batch, [])
    assert pipeline.answered(network) == []
    monkeypatch.setattr(pipeline_module, "STALE_S", -1.0)
    assert pipeline.answered(network) == [batch]
    assert batch.answer.cancelled()

"""Crash and fault cases between instances that the other network tests do not cover.

* A large message (sent in fragments over several DATA batches) followed by END
  CONVERSATION: the EndDialog, a whole message, travels ahead of the fragments of the
  message before it. When the connection breaks after the first DATA batch was answered
  (the target killed, or the network cut), the EndDialog is acknowledged (the target
  holds it ahead of the gap) while the large message is not complete. The sender must
  not close its endpoint then: the large message still has to go, and the target's
  EndDialog waits behind it.
* A database error while a destination applies a batch (a retry racing an apply still
  running after its connection was cut) answers the batch with refused receipts: the
  verb numbers the error, and the batch is never left unanswered until the receipt
  timeout.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from faultproxy import FaultProxy
from pair_layouts import layouts, pair_of_instances
from sqlalchemy.exc import IntegrityError
from support import (
    BETWEEN_CONTRACT,
    BETWEEN_INITIATOR_SERVICE,
    BETWEEN_REQUEST,
    BETWEEN_TARGET_QUEUE,
    BETWEEN_TARGET_SERVICE,
    wait_until,
)
from two_instances import Pair, trust_each_other

import broker
from broker.conversations.frames import MessageFrame
from broker.transport import inprocess

DEADLINE_S = 120.0  # the sender's back-off is 4 s, then 8 s, 16 s...
BIG = b"<m>" + b"x" * (10 << 20) + b"</m>"  # 11 fragments of 1 MiB: three DATA batches of 4 MiB
# Past the first DATA batch (three fragments and the EndDialog, about 3.2 MB with TLS),
# inside the second one.
CUT_AFTER_BYTES = 4_500_000


@pytest.fixture(params=layouts())
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Pair]:
    with pair_of_instances(request, tmp_path) as pair:
        trust_each_other(pair)
        yield pair


@pytest.mark.timeout(600)
def test_end_conversation_after_a_large_message_cut_off_mid_fragments_still_delivers_it(pair: Pair) -> None:
    with FaultProxy(("127.0.0.1", pair.target.port), seed=1) as proxy:
        host, port = proxy.address
        pair.initiator.db.alter_route("InstTargetRoute", address=f"TCP://{host}:{port}")
        proxy.set_faults(drop_connection_after_bytes=CUT_AFTER_BYTES, direction="to_target")
        with pair.initiator.inst.runtime(), pair.target.inst.runtime():
            with pair.initiator.db.transaction() as tx:
                handle = tx.begin_dialog(BETWEEN_INITIATOR_SERVICE, BETWEEN_TARGET_SERVICE, BETWEEN_CONTRACT)
                tx.send(handle, BETWEEN_REQUEST, b"<first/>")
            wait_until(lambda: not pair.initiator.held(), DEADLINE_S, interval=0.1)
            with pair.initiator.db.transaction() as tx:  # fire and forget: SEND, then END
                tx.send(handle, BETWEEN_REQUEST, BIG)
                tx.end_conversation(handle)
            wait_until(lambda: proxy.stats.faults.get("drop", 0) > 0, DEADLINE_S, interval=0.02)
            proxy.set_faults()  # the network is whole again

            def delivered() -> bool:
                rows = list(pair.target.db.iter_queue_rows(BETWEEN_TARGET_QUEUE))
                return not pair.initiator.held() and len(rows) == 3 and {row.status for row in rows} == {1}

            try:
                wait_until(delivered, DEADLINE_S, interval=0.2)
            except AssertionError:
                held = [(m["message_sequence_number"], m["transmission_status"]) for m in pair.initiator.held()]
                rows = [(r.message_sequence_number, r.status) for r in
                        pair.target.db.iter_queue_rows(BETWEEN_TARGET_QUEUE)]
                endpoints = pair.initiator.db.catalog("sys.conversation_endpoints")
                raise AssertionError(f"stuck: the initiator holds {held} with endpoints {endpoints}; "
                                     f"the target's queue has (sequence, status) {rows}") from None
    arrived = sorted(pair.target.db.iter_queue_rows(BETWEEN_TARGET_QUEUE), key=lambda r: r.message_sequence_number)
    assert [r.message_body for r in arrived[:2]] == [b"<first/>", BIG]
    assert arrived[2].message_type_name == broker.END_DIALOG
    # The EndDialog was acknowledged and everything before it too: the initiator's side is closed.
    assert pair.initiator.db.catalog("sys.conversation_endpoints") == []


def test_a_raw_database_error_applying_a_batch_refuses_every_frame(
        db: broker.Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    def collide(_ctx: object, _frames: object) -> list[object]:
        raise IntegrityError("INSERT INTO sb_conversation_endpoints ...", {}, Exception("duplicate key value"))

    monkeypatch.setattr(inprocess, "arrive", collide)
    here = str(db.service_broker_guid)
    frames = [MessageFrame(n, uuid.uuid4(), True, "From", str(uuid.uuid4()), "To", here, "C", "T", 0, "message",
                           b"<m/>", datetime.now(UTC) + timedelta(hours=1)) for n in (1, 2)]
    delivery = inprocess.apply_frames(db, here, frames)
    assert [(r.message_id, r.acknowledged) for r in delivery.receipts] == [(1, False), (2, False)]
    assert all("duplicate key value" in r.reason for r in delivery.receipts)

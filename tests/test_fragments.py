"""Large messages between instances travel in fragments (``transport.tcp``): split after
the whole messages, put back together by the receiving connection, and a gap drops the
partial message rather than delivering a body with a hole in it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from broker.conversations.frames import MessageFrame
from broker.transport.fragments import FRAGMENT_BYTES, Reassembly, fragmented
from broker.transport.wire import Envelope


def envelope(message_id: int, body: bytes | None) -> Envelope:
    frame = MessageFrame(message_id, uuid.UUID(int=message_id), True, "from", "a" * 36, "to", "b" * 36, "DEFAULT",
                         "DEFAULT", message_id, "message", body, datetime.now(UTC) + timedelta(hours=1))
    return Envelope(frame, 3_600_000)


def test_a_large_body_goes_in_fragments_after_the_whole_messages() -> None:
    large = bytes(range(256)) * (FRAGMENT_BYTES // 256 * 2 + 3)  # two fragments and a piece
    out = fragmented([envelope(1, large), envelope(2, b"small"), envelope(3, None)])
    assert [(e.frame.message_id, e.fragment, e.fragments) for e in out] == [
        (2, 0, 1), (3, 0, 1), (1, 0, 3), (1, 1, 3), (1, 2, 3)]
    assert b"".join(e.frame.body or b"" for e in out[2:]) == large


def test_fragments_come_back_whole_across_batches() -> None:
    large = b"x" * (FRAGMENT_BYTES * 3 + 1)
    pieces = fragmented([envelope(1, large)])
    reassembly = Reassembly(limit=10 * FRAGMENT_BYTES)
    assert reassembly.whole(pieces[:2]) == []  # nothing is whole yet
    [whole] = reassembly.whole([envelope(2, b"small"), *pieces[2:]])[1:]
    assert (whole.frame.message_id, whole.fragment, whole.fragments, whole.frame.body) == (1, 0, 1, large)


def test_a_missing_fragment_drops_the_partial_message() -> None:
    pieces = fragmented([envelope(1, b"y" * (FRAGMENT_BYTES * 3))])
    reassembly = Reassembly(limit=10 * FRAGMENT_BYTES)
    assert reassembly.whole([pieces[0], pieces[2]]) == []  # fragment 1 was lost: no body with a hole
    assert reassembly.whole([pieces[1]]) == []  # nor does a late fragment complete it
    [whole] = reassembly.whole(pieces)  # sent again from the first fragment, it comes back whole
    assert whole.frame.body == b"y" * (FRAGMENT_BYTES * 3)


def test_fragments_beyond_the_limit_are_dropped() -> None:
    pieces = fragmented([envelope(1, b"z" * (FRAGMENT_BYTES * 3))])
    assert Reassembly(limit=2 * FRAGMENT_BYTES).whole(pieces) == []

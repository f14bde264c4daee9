"""How messages are cut for the wire: into DATA batches of about ``BATCH_BYTES``, and a
large message into fragments, put back together on arrival.

A body over ``FRAGMENT_BYTES`` travels in fragments of that size (``Envelope.fragment`` of
``Envelope.fragments``), sent after the whole messages of the same batch so that it holds
none of them up. The receiving connection keeps the fragments in memory until the last
one comes, then hands on the whole message; it is applied and acknowledged once, whole.
Nothing partial is stored: a connection that breaks drops it, and the sender, which got
no receipt, sends the message again from its first fragment.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from broker.transport.wire import Envelope

log = logging.getLogger("broker.transport")

FRAGMENT_BYTES = 1 << 20  # a larger body travels in fragments of this size
REASSEMBLY_BYTES = 1 << 30  # fragments of incomplete messages one connection may hold
BATCH_BYTES = 4 << 20  # a DATA frame carries at most about this much
ENVELOPE_OVERHEAD = 512  # bytes a message's header may take on the wire, beside its names and body


def fragmented(envelopes: Sequence[Envelope]) -> list[Envelope]:
    """The whole messages first, then the fragments of those over ``FRAGMENT_BYTES``."""
    whole: list[Envelope] = []
    fragments: list[Envelope] = []
    for envelope in envelopes:
        body = envelope.frame.body
        if body is None or len(body) <= FRAGMENT_BYTES:
            whole.append(envelope)
            continue
        count = -(-len(body) // FRAGMENT_BYTES)
        fragments += [envelope._replace(frame=envelope.frame._replace(body=body[k * FRAGMENT_BYTES:
                                                                                 (k + 1) * FRAGMENT_BYTES]),
                                        fragment=k, fragments=count) for k in range(count)]
    return whole + fragments


class Reassembly:
    """The fragments of large messages a connection is bringing, in memory until the last
    one comes: then the message is whole. Fragments come in order on one connection; a
    gap (a frame skipped as corrupt) or the ``limit`` on what is held drops the partial
    message, which its sender sends again, whole, since it got no receipt."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._parts: dict[tuple[str, int, int], list[bytes]] = {}
        self._held = 0

    def whole(self, envelopes: Sequence[Envelope]) -> list[Envelope]:
        """``envelopes`` with every fragment taken in, and the messages they complete."""
        out: list[Envelope] = []
        for envelope in envelopes:
            if envelope.fragments == 1:
                out.append(envelope)
                continue
            frame = envelope.frame
            key = (frame.from_broker, frame.message_id, frame.sequence)
            if envelope.fragment == 0:
                self._drop(key)
                self._parts[key] = []
            parts = self._parts.get(key)
            body = frame.body or b""
            if parts is None or len(parts) != envelope.fragment or self._held + len(body) > self._limit:
                log.info("dropped fragment %d of message %d: it does not follow the ones held, or too much is held",
                         envelope.fragment, frame.message_id)
                self._drop(key)
                continue
            parts.append(body)
            self._held += len(body)
            if len(parts) == envelope.fragments:
                self._drop(key)
                out.append(envelope._replace(frame=frame._replace(body=b"".join(parts)), fragment=0, fragments=1))
        return out

    def _drop(self, key: tuple[str, int, int]) -> None:
        parts = self._parts.pop(key, None)
        if parts:
            self._held -= sum(len(part) for part in parts)


def batches(envelopes: Sequence[Envelope]) -> list[list[Envelope]]:
    """The envelopes in DATA frames of at most about ``BATCH_BYTES``."""
    batches: list[list[Envelope]] = []
    size = 0
    for envelope in envelopes:
        frame = envelope.frame
        weight = ENVELOPE_OVERHEAD + len(frame.body or b"") + 4 * (
            len(frame.from_service) + len(frame.to_service) + len(frame.contract) + len(frame.message_type))
        if not batches or size + weight > BATCH_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(envelope)
        size += weight
    return batches

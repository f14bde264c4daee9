"""How messages are cut for the wire: into DATA batches of about ``BATCH_BYTES``.

A large message comes here already in fragments (``conversations.frames.fragments_of``:
the dialog protocol cuts it, and its destination takes it fragment by fragment), so a
batch holds whole messages and fragments alike, in the order they are given.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker.transport.wire import Envelope

BATCH_BYTES = 4 << 20  # a DATA frame carries at most about this much
ENVELOPE_OVERHEAD = 512  # bytes a message's header may take on the wire, beside its names and body


def batches(envelopes: Sequence[Envelope]) -> list[list[Envelope]]:
    """The envelopes in DATA frames of at most about ``BATCH_BYTES``, in order."""
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

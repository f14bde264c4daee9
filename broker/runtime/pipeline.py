"""Batches on their way to other instances: what the transmitter sent and has not settled.

Waiting for each batch's receipts before reading the next (stop and wait) leaves both
instances idle half the time: the sender while the receiver applies, the receiver
while the sender settles and reads. So the transmitter keeps up to ``WINDOW`` batches of
each database in flight (:class:`Pipeline`) and reads the next messages after the
highest message id it has sent (``due_messages(after=...)``). Their receipts are settled
in a later pass, when they have come.

What keeps this exactly once and in order:

* A message is still forgotten only on its destination's receipt, so a batch that is
  lost, refused or cut off is sent again like any other: its messages back off.
* Batches ride one connection in the order they were sent and the receiver applies them
  in that order. If an earlier batch is lost and a later one lands, the receiver holds
  the later messages until the gap fills (``conversations.arrival``): nothing is
  reordered, and nothing is received twice.
* A dialog whose messages are in flight keeps the destination they were routed to
  (:attr:`Pipeline.routed`): while no acknowledgement has named its far broker yet, a
  second batch must not pick another instance of a load-balanced route.
* Messages below the highest id sent that become due again (a back-off ran out) are read
  once the pipeline has emptied; it empties at least every ``DRAIN_EVERY`` reads, so a
  steady stream cannot starve them. With HONOR_BROKER_PRIORITY ON one batch at a time
  goes, so a later message of a higher priority is never read before an earlier one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from broker.conversations.outbound import OutboundMessage
from broker.routing.matching import Destination, Remote
from broker.runtime.mirrors import Hop
from broker.transport.seam import Answer, NetworkTransport

WINDOW = 8  # batches of one database in flight at once (the receiver applies as many of a connection at once)
DRAIN_EVERY = 16  # reads past the batches in flight before waiting for all of them
# A batch's receipts come by then, or its connection has failed and said so: later than
# that, its endpoint stopped before sending it (the future would never be done).
STALE_S = 180.0


@dataclass(slots=True)
class Sending:
    """One batch sent to another instance: the future of its receipts and what it carries."""

    answer: Answer
    sent: dict[int, OutboundMessage]  # by message id
    network: NetworkTransport  # the endpoint that carries it
    hop: Hop
    since: float = field(default_factory=time.monotonic)


@dataclass(slots=True)
class Pipeline:
    """One database's batches in flight. Used by the transmitter's one thread."""

    sending: list[Sending] = field(default_factory=list)
    above: int = 0  # the highest message id sent while some batch was in flight
    reads: int = 0  # reads past batches in flight since the pipeline was last empty
    routed: dict[uuid.UUID, Destination] = field(default_factory=dict)  # dialogs in flight, where they go

    def start_after(self, honor_priority: bool) -> int | None:
        """The message id the next read starts after (0: from the first), or None: read
        nothing until the batches in flight are answered."""
        if not self.sending:
            self.above, self.reads = 0, 0
            self.routed.clear()
            return 0
        if honor_priority or not self.has_room() or self.reads >= DRAIN_EVERY:
            return None
        self.reads += 1
        return self.above

    def has_room(self) -> bool:
        """Whether another batch may go before an answer comes."""
        return len(self.sending) < WINDOW

    def sent(self, sending: Sending, routed: Iterable[tuple[uuid.UUID, Destination]]) -> None:
        """Record a batch just sent and where its dialogs went."""
        self.sending.append(sending)
        self.above = max(self.above, max(sending.sent))
        self.routed.update((handle, where) for handle, where in routed if isinstance(where, Remote))

    def answered(self, network: NetworkTransport | None) -> list[Sending]:
        """Take out the batches whose answer has come. A batch of an endpoint that is no
        longer the transmitter's (it stopped or was replaced), or that has waited past
        ``STALE_S``, is cancelled and taken out too: its answer says it did not go."""
        now = time.monotonic()
        done: list[Sending] = []
        for sending in self.sending:
            if not sending.answer.done() and (sending.network is not network or now - sending.since > STALE_S):
                sending.answer.cancel()
            if sending.answer.done():
                done.append(sending)
        if done:
            self.sending = [s for s in self.sending if not s.answer.done()]
        return done

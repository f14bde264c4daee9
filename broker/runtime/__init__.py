"""The runtime: the broker's background work for one database (``broker run``).

The scheduler loop (``runner``: timers, lifetimes, retries), queue monitors and
activation (``activation``, ``readers``). It serves a database through the small
interface of ``storage.served`` and imports only the layers below it.
"""

from __future__ import annotations

from broker.runtime.runner import DEFAULT_POLL_S, Runtime

__all__ = ["DEFAULT_POLL_S", "Runtime"]

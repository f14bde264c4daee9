"""Events a program can subscribe to (observability and external activation).

The broker announces what happens through ``db.events``; nothing is printed by the
library itself. Names follow SQL Server's event names where one exists:

* ``BROKER_QUEUE_DISABLED`` (queue): poison-message handling turned a queue OFF.
* ``QUEUE_ACTIVATION`` (queue, queue_id): a queue without an activation procedure has
  messages that need a reader (external activation; ``broker listen`` prints them).
* ``TIMER_FIRED`` (queue, conversation_handle), ``LIFETIME_EXPIRED`` (conversation_handle),
  ``MESSAGES_RETRIED`` (count): what the runtime's scheduler did.
* ``READER_STARTED`` / ``READER_STOPPED`` (queue, procedure): activation readers.

Subscribers run in the thread that emits, after the transaction that caused the event has
committed; an exception in one is logged and does not reach the broker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("broker.events")

Handler = Callable[..., None]

BROKER_QUEUE_DISABLED = "BROKER_QUEUE_DISABLED"
QUEUE_ACTIVATION = "QUEUE_ACTIVATION"
TIMER_FIRED = "TIMER_FIRED"
LIFETIME_EXPIRED = "LIFETIME_EXPIRED"
MESSAGES_RETRIED = "MESSAGES_RETRIED"
READER_STARTED = "READER_STARTED"
READER_STOPPED = "READER_STOPPED"


class EventHub:
    """Subscribers by event name."""

    def __init__(self) -> None:
        self._handlers: dict[str, list[Handler]] = {}
        self._lock = threading.Lock()

    def subscribe(self, name: str, handler: Handler) -> Callable[[], None]:
        """Call ``handler(**payload)`` on every ``name`` event; returns an unsubscribe function."""
        with self._lock:
            self._handlers.setdefault(name, []).append(handler)

        def unsubscribe() -> None:
            with self._lock:
                if handler in self._handlers.get(name, []):
                    self._handlers[name].remove(handler)

        return unsubscribe

    def emit(self, name: str, **payload: Any) -> None:
        with self._lock:
            handlers = list(self._handlers.get(name, ()))
        for handler in handlers:
            try:
                handler(**payload)
            except Exception:  # a subscriber's failure must not break the broker
                log.exception("subscriber of %s failed", name)

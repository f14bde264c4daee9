"""Internal activation: queue monitors that start Python readers (filled in next)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.database import Broker


class ActivationManager:
    """Queue monitors of one database (see the activation issue)."""

    def __init__(self, db: Broker, stopping: threading.Event) -> None:
        self.db = db
        self._stopping = stopping

    def evaluate(self) -> float | None:
        """Look at every queue with activation; seconds until it wants to look again."""
        return None

    def stop(self, timeout: float) -> None:
        """Start no more readers; wait up to ``timeout`` for the running ones to end."""

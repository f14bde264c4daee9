"""State shared by every transaction on one database in this process."""

from __future__ import annotations

import threading

from sqlalchemy import Engine
from sqlalchemy.engine import Connection

from broker.catalog import Catalog, catalog_version, load_catalog
from broker.engine import sqlite_path
from broker.waiting import QueueNotifier

_notifiers: dict[str, QueueNotifier] = {}
_notifiers_lock = threading.Lock()


def _notifier_for(key: str) -> QueueNotifier:
    # Two broker.connect() calls on the same file in one process share wake-ups.
    with _notifiers_lock:
        return _notifiers.setdefault(key, QueueNotifier())


class DatabaseState:
    """The engine, the cached catalog snapshot and the queue notifier of one database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.is_sqlite = engine.dialect.name == "sqlite"
        self.notifier = _notifier_for(sqlite_path(engine) or engine.url.render_as_string())
        self._catalog: Catalog | None = None
        self._lock = threading.Lock()

    def catalog_for(self, conn: Connection) -> Catalog:
        """The snapshot valid for ``conn``'s transaction (one version read; reload if stale)."""
        version = catalog_version(conn)
        with self._lock:
            cached = self._catalog
        if cached is not None and cached.version == version:
            return cached
        fresh = load_catalog(conn)
        self.remember_catalog(fresh)
        return fresh

    def remember_catalog(self, catalog: Catalog) -> None:
        with self._lock:
            if self._catalog is None or catalog.version >= self._catalog.version:
                self._catalog = catalog

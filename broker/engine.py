"""Engines configured for the broker's transaction discipline.

SQLite: WAL, ``synchronous=FULL``, a long ``busy_timeout``, and ``BEGIN IMMEDIATE`` for
every transaction. A deferred transaction that reads and later writes can fail with
SQLITE_BUSY in a way no retry inside it can fix; taking the write lock at BEGIN makes
every broker transaction wait its turn instead. The database write lock is held for the
whole transaction, so it is a superset of every conversation group lock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

from broker import pending

# How long a SQLite connection waits for the write lock before giving up. Long enough
# that "database is locked" never reaches a user under ordinary contention.
SQLITE_BUSY_TIMEOUT_MS = 60_000


def create_broker_engine(url: str, **kwargs: Any) -> Engine:
    """Create an engine for ``url`` with the broker's connection settings applied."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database in ("", ":memory:") or database.startswith("file::memory:"):
            raise ValueError(
                "the broker needs a SQLite file (several connections share its locks); "
                f"got {url!r}"
            )
        Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, **kwargs)
        _configure_sqlite(engine)
    else:
        engine = create_engine(parsed, **kwargs)
    pending.install(engine)
    return engine


def sqlite_path(engine: Engine) -> str | None:
    """The absolute path of a SQLite engine's file, or None for other backends."""
    if engine.dialect.name != "sqlite":
        return None
    return str(Path(engine.url.database or "").resolve())


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the driver: SQLAlchemy's begin event
        # below issues BEGIN IMMEDIATE itself.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = FULL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Straight to the driver: this runs once per transaction on the hot path.
        conn.connection.dbapi_connection.execute("BEGIN IMMEDIATE")

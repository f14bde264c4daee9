"""Engines configured for the broker's transaction discipline.

The dialect's settings (SQLite: WAL, ``synchronous=FULL``, a long ``busy_timeout`` and
``BEGIN IMMEDIATE`` for every transaction; PostgreSQL: READ COMMITTED) come from
``broker.backends``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url

from broker import pending
from broker.backends import backend_for


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
    backend_for(engine).configure(engine)
    pending.install(engine)
    return engine

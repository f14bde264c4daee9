"""Alembic environment for the broker catalog.

Run by ``broker.connect()`` (which hands over its own connection), by the ``broker``
CLI, and by ``alembic`` in a checkout. Per-queue message tables are made by CREATE
QUEUE, not by migrations, so autogenerate ignores them.
"""

from __future__ import annotations

import os

from sqlalchemy import text
from sqlalchemy.engine import Connection

from alembic import context
from broker.storage.engine import create_broker_engine
from broker.storage.models import Base
from broker.storage.queue_tables import is_internal_queue_object

config = context.config
_SCHEMA_LOCK = 0x53425343  # "SBSC": the advisory lock key of catalog upgrades on PostgreSQL


def include_object(obj, name, type_, reflected, compare_to):  # type: ignore[no-untyped-def]
    return not is_internal_queue_object(name, type_)


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        include_object=include_object,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        # One transaction for the whole upgrade, on SQLite too (Alembic's default there
        # commits after each revision): processes opening a new or older database at
        # once then wait for the first one's upgrade, rather than read its halfway
        # revision and apply the rest again over it ("table already exists").
        transactional_ddl=True,
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            # Upgrades wait for each other before reading the revision (SQLite's BEGIN
            # IMMEDIATE does this there): two would create the same tables at once.
            connection.execute(text("SELECT pg_advisory_xact_lock(:key, 0)"), {"key": _SCHEMA_LOCK})
        context.run_migrations()


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=Base.metadata,
        literal_binds=True,
        include_object=include_object,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = (
        context.get_x_argument(as_dictionary=True).get("url")
        or os.environ.get("BROKER_URL")
        or config.get_main_option("sqlalchemy.url")
    )
    engine = create_broker_engine(url)
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()

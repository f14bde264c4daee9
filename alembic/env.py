"""Alembic environment for the broker catalog.

Run by ``broker.connect()`` (which hands over its own connection), by the ``broker``
CLI, and by ``alembic`` in a checkout. Per-queue message tables are made by CREATE
QUEUE, not by migrations, so autogenerate ignores them.
"""

from __future__ import annotations

import os

from sqlalchemy.engine import Connection

from alembic import context
from broker.storage.engine import create_broker_engine
from broker.storage.models import Base
from broker.storage.queue_tables import is_internal_queue_object

config = context.config


def include_object(obj, name, type_, reflected, compare_to):  # type: ignore[no-untyped-def]
    return not is_internal_queue_object(name, type_)


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        include_object=include_object,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
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

"""Alembic environment for the broker catalog.

Run by ``broker.connect()`` (which hands over its own connection), by the ``broker``
CLI, and by ``alembic`` in a checkout, where the database is ``-x url=...``, else
``BROKER_URL``, else alembic.ini's ``sqlalchemy.url``. Per-queue message tables are made
by CREATE QUEUE, not by migrations, so autogenerate ignores them.

Offline (``alembic upgrade START:END --sql``) writes the SQL for that URL's dialect
without connecting. A revision whose data step reads the database, or seeds a value
the dialect cannot write as a literal, cannot be written so: that is one ``FAILED:``
line naming the revision, and the range to give instead.
"""

from __future__ import annotations

import os
import traceback

from alembic.util.exc import CommandError
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


def _url() -> str:
    """The database to migrate: ``-x url=...``, else ``BROKER_URL``, else alembic.ini's.
    One given empty is refused: it would silently mean the next one."""
    given = context.get_x_argument(as_dictionary=True).get("url")
    if given == "":
        raise CommandError("-x url= is empty: give a database URL (-x url=sqlite:///app.db)")
    environment = os.environ.get("BROKER_URL")
    if given is None and environment == "":
        raise CommandError("BROKER_URL is set but empty: unset it, or set it to a database URL")
    url = given or environment or config.get_main_option("sqlalchemy.url")
    if not url:
        raise CommandError("no database URL: give -x url=..., BROKER_URL or sqlalchemy.url in alembic.ini")
    return url


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
        url=_url(),
        target_metadata=Base.metadata,
        literal_binds=True,
        include_object=include_object,
        transactional_ddl=True,  # one BEGIN ... COMMIT around the script, as online
    )
    with context.begin_transaction():
        try:
            context.run_migrations()
        except Exception as exc:  # said in one line by Alembic's CLI, without a traceback
            raise _not_writable_offline(exc) from exc


def _not_writable_offline(exc: Exception) -> CommandError:
    """The refusal of ``--sql`` for the revision that failed to render (the innermost
    revision module on the traceback), with what to do instead."""
    modules = [frame.f_globals for frame, _line in traceback.walk_tb(exc.__traceback__)
               if {"revision", "down_revision"} <= frame.f_globals.keys()]
    reason = " ".join(str(exc).split()) or type(exc).__name__
    if not modules:
        return CommandError(f"cannot write the SQL offline: {reason}")
    revision = modules[-1]["revision"]
    return CommandError(
        f"revision {revision} cannot be written as SQL offline: its data step does not render without "
        f"a database ({type(exc).__name__}: {reason}). Apply it online (broker upgrade {revision}), then write "
        f"the SQL of the revisions after it: alembic upgrade {revision}:head --sql"
    )


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_broker_engine(_url())
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()

"""Create and upgrade a broker database's catalog through Alembic.

The Alembic environment (``alembic/``) and the revision files (``migrations/``) sit at
the top of the repository and are installed inside the package (``broker/_alembic``,
``broker/_migrations``), so a plain ``pip install`` can migrate a database.

Opening a database that is already at head must stay cheap (every ``broker`` command
does it), so the stored revision is read with plain SQL and compared with
:data:`HEAD_REVISION`; Alembic (about 0.2 s to import) loads only to migrate or to read
the revision files.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import text

from broker.errors import BrokerError
from broker.storage.backends import backend_for

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy import Engine
    from sqlalchemy.engine import Connection

# The newest revision in migrations/. A test compares it with Alembic's own head, so a
# new revision file fails the suite until this names it.
HEAD_REVISION = "0013"
VERSION_TABLE = "alembic_version"  # Alembic's default, which alembic/env.py keeps

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # broker/


def _bundled(installed_name: str, checkout_name: str) -> Path:
    installed = _PACKAGE_DIR / installed_name
    return installed if installed.is_dir() else _PACKAGE_DIR.parent / checkout_name


def alembic_config(connection: Connection | None = None, url: str | None = None) -> Config:
    """An Alembic config pointing at the bundled environment and revisions."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("path_separator", "os")
    config.set_main_option("script_location", str(_bundled("_alembic", "alembic")))
    config.set_main_option("version_locations", str(_bundled("_migrations", "migrations")))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str | None:
    """The head of the revision files, as Alembic reads them."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def stored_revisions(conn: Connection) -> tuple[str, ...]:
    """The revisions the database's version table holds (none without the table)."""
    if not conn.dialect.has_table(conn, VERSION_TABLE):
        return ()
    return tuple(conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars())


def current_revision(engine: Engine) -> str | None:
    """The database's catalog revision; None before the first migration (read on a
    snapshot: it never waits for a writer)."""
    with backend_for(engine).snapshot_connection(engine) as conn:
        stored = stored_revisions(conn)
        if len(stored) <= 1:
            return stored[0] if stored else None
        from alembic.runtime.migration import MigrationContext

        return MigrationContext.configure(conn).get_current_revision()  # raises: several heads


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Upgrade the catalog to ``revision`` in one transaction, one process at a time (the
    write lock on SQLite, an advisory lock on PostgreSQL: see alembic/env.py)."""
    from alembic import command

    with engine.connect() as conn:
        command.upgrade(alembic_config(conn), revision)
        conn.commit()


def downgrade(engine: Engine, revision: str) -> None:
    from alembic import command

    with engine.connect() as conn:
        command.downgrade(alembic_config(conn), revision)
        conn.commit()


def history() -> list[tuple[str, str | None, str]]:
    """(revision, down_revision, message) from base to head."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    revisions = list(script.walk_revisions("base", "heads"))
    return [
        (rev.revision, rev.down_revision if isinstance(rev.down_revision, str) else None, rev.doc)
        for rev in reversed(revisions)
    ]


def ensure_current(engine: Engine) -> None:
    """Upgrade the database to head unless it is there already (checked without Alembic,
    on a snapshot: opening a database at head never waits for a writer)."""
    with backend_for(engine).snapshot_connection(engine) as conn:
        stored = stored_revisions(conn)
    if stored == (HEAD_REVISION,):
        return
    known = {revision for revision, _down, _doc in history()}
    newer = [revision for revision in stored if revision not in known]
    if newer:  # a later release upgraded it: this one cannot read it, nor downgrade it
        raise BrokerError(948, f"The database cannot be opened because it is version {', '.join(newer)}. "
                               f"This release supports version {HEAD_REVISION} and earlier. A downgrade path "
                               f"is not supported (use the release that upgraded it: broker downgrade).")
    upgrade(engine)

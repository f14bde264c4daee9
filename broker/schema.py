"""Create and upgrade a broker database's catalog through Alembic.

The Alembic environment (``alembic/``) and the revision files (``migrations/``) sit at
the top of the repository and are installed inside the package (``broker/_alembic``,
``broker/_migrations``), so a plain ``pip install`` can migrate a database.
"""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine
from sqlalchemy.engine import Connection

from alembic import command

_PACKAGE_DIR = Path(__file__).resolve().parent


def _bundled(installed_name: str, checkout_name: str) -> Path:
    installed = _PACKAGE_DIR / installed_name
    return installed if installed.is_dir() else _PACKAGE_DIR.parent / checkout_name


def alembic_config(connection: Connection | None = None, url: str | None = None) -> Config:
    """An Alembic config pointing at the bundled environment and revisions."""
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
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Upgrade the catalog to ``revision`` in one transaction (serialized on SQLite)."""
    with engine.connect() as conn:
        command.upgrade(alembic_config(conn), revision)
        conn.commit()


def downgrade(engine: Engine, revision: str) -> None:
    with engine.connect() as conn:
        command.downgrade(alembic_config(conn), revision)
        conn.commit()


def history() -> list[tuple[str, str | None, str]]:
    """(revision, down_revision, message) from base to head."""
    script = ScriptDirectory.from_config(alembic_config())
    revisions = list(script.walk_revisions("base", "heads"))
    return [
        (rev.revision, rev.down_revision if isinstance(rev.down_revision, str) else None, rev.doc)
        for rev in reversed(revisions)
    ]


def ensure_current(engine: Engine) -> None:
    """Upgrade the database to head unless it is there already."""
    if current_revision(engine) != head_revision():
        upgrade(engine)

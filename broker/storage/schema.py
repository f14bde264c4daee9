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

import re
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
HEAD_REVISION = "0014"
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
    snapshot: it never waits for a writer). A version table holding several revisions is 211."""
    stored = _snapshot_revisions(engine)
    _refuse_several(stored)
    return stored[0] if stored else None


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Upgrade the catalog to ``revision`` in one transaction, one process at a time (the
    write lock on SQLite, an advisory lock on PostgreSQL: see alembic/env.py).

    A database of a later release is 948, a damaged version table 211; a relative
    revision that walks past head or base is Alembic's CommandError, as an unknown one is.
    """
    from alembic import command

    _check_step(engine, revision, upward=True)
    with engine.connect() as conn:
        command.upgrade(alembic_config(conn), revision)
        conn.commit()


def downgrade(engine: Engine, revision: str) -> None:
    """Downgrade the catalog to ``revision`` in one transaction; refuses as :func:`upgrade` does."""
    from alembic import command

    _check_step(engine, revision, upward=False)
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
    on a snapshot: opening a database at head never waits for a writer). A database of a
    later release is 948 and a damaged version table 211, as in :func:`upgrade`."""
    if _snapshot_revisions(engine) == (HEAD_REVISION,):
        return
    upgrade(engine)


# Alembic's own pattern of a relative revision ([branch@][symbol]+N or -N; alembic.script.revision).
_RELATIVE = re.compile(r"(?:(.+?)@)?(\w+)?((?:\+|-)\d+)")


def _snapshot_revisions(engine: Engine) -> tuple[str, ...]:
    """The stored revisions, read on a snapshot (never waits for a writer)."""
    with backend_for(engine).snapshot_connection(engine) as conn:
        return stored_revisions(conn)


def _check_step(engine: Engine, revision: str, *, upward: bool) -> None:
    """Refuse what Alembic would fail on without a fitting message (an unknown stored
    revision, several of them, a step the wrong way) or would assert on (a relative walk
    past head or base). ``upward``: an upgrade, else a downgrade."""
    stored = _snapshot_revisions(engine)
    order = [None, *(rev for rev, _down, _doc in history())]  # base first, then oldest to head
    newer = [rev for rev in stored if rev not in order]
    if newer:  # a later release upgraded it: this one cannot read it, nor downgrade it
        raise BrokerError(948, f"The database cannot be opened because it is version {', '.join(newer)}. "
                               f"This release supports version {HEAD_REVISION} and earlier. A downgrade path "
                               f"is not supported (use the release that upgraded it: broker downgrade).")
    _refuse_several(stored)
    _refuse_overwalk(order, stored[0] if stored else None, revision, upward)


def _refuse_several(stored: tuple[str, ...]) -> None:
    """211 for a version table with more than one row: the catalog is linear, so two rows
    mean it was written by hand or half-restored, and no step from it is safe."""
    if len(stored) > 1:
        raise BrokerError(211, f"Possible schema corruption: the database's version table "
                               f"({VERSION_TABLE}) holds several revisions ({', '.join(stored)}); "
                               f"it must hold one.")


def _refuse_overwalk(order: list[str | None], current: str | None, revision: str, upward: bool) -> None:
    """Alembic's CommandError for a relative revision (``+1``, ``head-2``, ``0001+3``) that
    walks past head or base, or to base in an upgrade (no upgrade target): Alembic asserts
    there. And for a step from the current revision the other way (``upgrade -1``,
    ``downgrade +1``), which Alembic words as "didn't produce 1 migrations"."""
    from alembic.util.exc import CommandError

    match = _RELATIVE.match(revision)
    if match is None:
        return
    _branch, symbol, step = match.groups()
    start = _position(order, current if symbol is None else symbol)
    if start is None:  # an unknown symbol: Alembic says so itself
        return
    target, top, name = start + int(step), len(order) - 1, order[start] or "base"
    if target > top:
        raise CommandError(f"Relative revision {revision!r} walks past head ({order[top]}): "
                           f"{name} is {top - start} step(s) below it")
    if target < 0:
        raise CommandError(f"Relative revision {revision!r} walks past base: {name} is {start} step(s) above it")
    if upward and target == 0:
        raise CommandError(f"Relative revision {revision!r} leads to base, which is no revision to upgrade to")
    if symbol is None and (target < start if upward else target > start):
        step_way, verb, way, other = ("down", "an upgrade", "up", "downgrade") if upward else \
            ("up", "a downgrade", "down", "upgrade")
        raise CommandError(f"Relative revision {revision!r} steps {step_way} from {name}, and {verb} only goes "
                           f"{way}: {other} {revision}")


def _position(order: list[str | None], symbol: str | None) -> int | None:
    """Where ``symbol`` sits in ``order`` (None and base first, head(s) last; a revision by its
    id or, as Alembic takes it, by a unique start of it); None when it names no single one."""
    if symbol is None or symbol == "base":
        return 0
    if symbol in ("head", "heads"):
        return len(order) - 1
    if symbol in order:
        return order.index(symbol)
    starting = [index for index, rev in enumerate(order) if rev is not None and rev.startswith(symbol)]
    return starting[0] if len(starting) == 1 else None

"""The databases a T-SQL session can name: the one it is in and, with an instance, the
instance's members and its system databases.

``master`` and ``msdb`` are the instance catalog (``Instance.msdb``): its routes are
msdb's (the instance's routes), its certificates, logins and users master's, the ones the
endpoint serves and trusts with. USE moves between them; CREATE DATABASE adds a member
(a SQLite file beside the catalog, or a database on the catalog's PostgreSQL server).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote as url_unquote

from broker.sql.errors import SqlError

if TYPE_CHECKING:
    from broker.database import Broker

NO_DATABASE = 911
DATABASE_EXISTS = 1801
UNSUPPORTED = 40517
SYSTEM_DATABASES = ("master", "msdb")


class Databases:
    """Where a session is (``db``, called ``name``) and the databases it can name."""

    def __init__(self, db: Broker, instance: Any | None, name: str | None) -> None:
        self.db = db
        self.instance = instance
        self.name: str = name or database_name(db)

    @property
    def in_master(self) -> bool:
        """Whether the session is in master (or msdb): the instance catalog."""
        return self.instance is not None and self.db is self.instance.msdb

    def member(self, name: str) -> Broker | None:
        """The database called ``name``: a member of the instance, master or msdb (the
        instance catalog), this one by its name or CURRENT; None if there is none."""
        folded = name.casefold()
        if self.instance is not None:
            if folded in SYSTEM_DATABASES:
                return self.instance.msdb  # type: ignore[no-any-return]
            for member, db in self.instance.databases.items():
                if member.casefold() == folded:
                    return db  # type: ignore[no-any-return]
        return self.db if folded in (self.name.casefold(), "current") else None

    def use(self, name: str) -> None:
        """USE name (911 for a database there is none of)."""
        member = self.member(name)
        if member is None:
            raise no_database(name)
        if name.casefold() != "current":
            self.db, self.name = member, name

    def local(self, name: tuple[str, ...]) -> str:
        """The object of a ``[database.][schema.]object`` name, which must be in this database (911)."""
        if len(name) >= 3 and name[-3] and self.member(name[-3]) is not self.db:
            raise no_database(name[-3])
        return name[-1]

    def create(self, name: str) -> None:
        """CREATE DATABASE: a new member of the instance (1801 if the name is taken)."""
        if self.instance is None:
            raise SqlError(UNSUPPORTED, "CREATE DATABASE needs an instance (broker --instance URL sql): a broker "
                                        "database alone is one database.")
        if self.member(name) is not None:
            raise SqlError(DATABASE_EXISTS, f"Database '{name}' already exists. Choose a different database name.")
        self.instance.add_database(name, _member_url(self.instance.msdb, name))


def no_database(name: str) -> SqlError:
    return SqlError(NO_DATABASE, f"Database '{name}' does not exist. Make sure that the name is entered correctly.")


def database_name(db: Broker) -> str:
    """A database's name for ALTER DATABASE and USE: a SQLite file's stem, a PostgreSQL database's name."""
    url = db.engine.url
    if url.get_backend_name() == "sqlite":
        return Path(url_unquote(url.database or "memory")).stem or "memory"
    return url.database or "postgres"


def _member_url(catalog: Broker, name: str) -> str:
    """Where CREATE DATABASE puts a new member of the instance whose catalog is ``catalog``."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", name) is None:
        raise SqlError(UNSUPPORTED, f"CREATE DATABASE {name}: a new database's name here is letters, digits and "
                                    "underscores (it names a file or a PostgreSQL database).")
    url = catalog.engine.url
    if url.get_backend_name() == "sqlite":
        folder = Path(url_unquote(url.database or "")).parent
        return url.set(database=str(folder / f"{name}.db")).render_as_string(hide_password=False)
    from sqlalchemy import text
    with catalog.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    return url.set(database=name).render_as_string(hide_password=False)

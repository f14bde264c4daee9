"""What every command shares: the database (``--db``) or the instance (``--instance``, and
``--database`` for one of its members), opened lazily and closed at exit, and whether
``--debug`` asked for tracebacks.

Two ways to name what a command works on:

* ``--db URL`` (or ``BROKER_URL``; default ``sqlite:///broker.db``): one database.
* ``--instance URL`` (or ``BROKER_INSTANCE``): an instance catalog. The instance's own
  commands (``database``, ``run``, ``status``, routes) act on the whole instance;
  ``--database NAME`` (or ``BROKER_DATABASE``) picks a member for the commands that work
  on one database (``send``, ``show queues``, ...), and then ``status`` and the route
  commands are that member's too.

``main.cli`` settles which one a command line means before any command runs.

``current`` and ``downgrade`` (marked :func:`must_exist`) on a SQLite file that is not
there are error 911 and leave no file behind: the revision of a database that is not
there is no revision. The other commands create it, as ``broker.connect`` does (a
listing then shows the new database's objects).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from broker.errors import BAD_URL, InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqlalchemy import Engine

    import broker

T = TypeVar("T")
F = TypeVar("F", bound="Callable[..., Any]")

DEFAULT_URL = "sqlite:///broker.db"


class CliState:
    """The ``--db`` URL or the ``--instance`` URL (with ``--database``), plus the engine,
    broker database or instance a command opened on it."""

    def __init__(self, url: str = DEFAULT_URL, *, debug: bool = False) -> None:
        self.url = url
        self.debug = debug
        self.must_exist = False  # a command that must not create its database (see must_exist)
        self.instance_url: str | None = None
        self.database_name: str | None = None
        self._engine: Engine | None = None
        self._db: broker.Broker | None = None
        self._instance: broker.Instance | None = None

    # -- what the command line names -------------------------------------------------------

    @property
    def on_instance(self) -> bool:
        """True when the command line names an instance (``--instance``)."""
        return self.instance_url is not None

    @property
    def on_instance_itself(self) -> bool:
        """True for an instance without a member picked: ``status`` and the route commands
        then act on the whole instance."""
        return self.instance_url is not None and self.database_name is None

    # -- opening ----------------------------------------------------------------------------

    def engine(self) -> Engine:
        """A bare engine (no schema upgrade), for the Alembic commands: on the ``--db``
        database, the ``--database`` member, or the instance catalog itself."""
        if self._engine is None:
            from broker.storage.engine import create_broker_engine

            if self.instance_url is None:
                self._engine = _bad_url_is_usage_error(lambda: create_broker_engine(self._there(self.url)), "--db")
            elif self.database_name is None:
                instance_url = self.instance_url
                self._engine = _bad_url_is_usage_error(
                    lambda: create_broker_engine(self._there(instance_url)), "--instance")
            else:
                self._engine = create_broker_engine(self._there(self.member_url()))
        return self._engine

    def db(self) -> broker.Broker:
        """The broker database a per-database command works on: ``broker.connect`` on
        ``--db`` (creating and upgrading it if needed), or the ``--database`` member of the
        instance. With ``--instance`` alone there is no such database: a usage error."""
        if self._db is None:
            if self.instance_url is not None:
                if self.database_name is None:
                    raise click.UsageError(
                        "this command works on one database: with --instance, give --database NAME "
                        "(a member: broker --instance URL database list), or give --db URL instead"
                    )
                self._there(self.member_url())
                self._db = self.instance().database(self.database_name)
            else:
                from broker.database import connect

                self._db = _bad_url_is_usage_error(lambda: connect(self._there(self.url)), "--db")
        return self._db

    def instance(self) -> broker.Instance:
        """The instance catalog named by ``--instance`` (created and upgraded if needed)."""
        if self._instance is None:
            instance_url = self.instance_url
            if instance_url is None:
                raise click.UsageError("this command works on an instance: give --instance URL (or BROKER_INSTANCE)")
            import broker

            self._instance = _bad_url_is_usage_error(lambda: broker.instance(self._there(instance_url)), "--instance")
        return self._instance

    def _there(self, url: str) -> str:
        """``url``, once it is known to name a database that is there, if the command must
        not create it: 911 for a SQLite file that is not (after the URL's own checks, 59011 and
        5120). A PostgreSQL database is never created: the server says it is missing."""
        if self.must_exist:
            from broker.storage.engine import existing_database

            existing_database(url, "broker init")
        return url

    def route_owner(self) -> Any:
        """Whose routes ``create|alter|drop route`` and ``show routes`` change and list: the
        instance's own (``--instance`` alone, SQL Server's msdb) or the database's. Both
        have ``create_route``, ``alter_route``, ``drop_route`` and ``catalog``."""
        return self.instance() if self.on_instance_itself else self.db()

    def member_url(self) -> str:
        """The URL of the ``--database`` member, read from the instance catalog without
        opening the member (the schema commands must see it as it is)."""
        from sqlalchemy import select

        from broker.storage.models import InstanceDatabase

        assert self.database_name is not None
        catalog = self.instance().msdb
        with catalog.engine.connect() as conn:
            url = conn.execute(
                select(InstanceDatabase.url).where(InstanceDatabase.name == self.database_name)
            ).scalar()
        if url is None:
            self.instance().database(self.database_name)  # error 911, as the API words it
        return str(url)

    def database_url(self) -> str:
        """The URL of the one database a per-database command works on."""
        if self.instance_url is None:
            return self.url
        self.db()  # a usage error without --database; 911 for a name the instance lacks
        return self.member_url()

    def shown_url(self) -> str:
        """The URL of the database a per-database command works on, its password hidden."""
        return hidden_password(self.database_url())

    def shown_instance_url(self) -> str:
        """The ``--instance`` URL, its password hidden."""
        assert self.instance_url is not None
        return hidden_password(self.instance_url)

    def close(self) -> None:
        """Dispose of whatever the command opened."""
        if self._instance is not None:
            self._instance.dispose()  # the members it opened too, ``_db`` among them
        elif self._db is not None:
            self._db.dispose()
        if self._engine is not None:
            self._engine.dispose()


def sqlite_path(url: str) -> Path | None:
    """The file a SQLite URL names (None for another backend or a URL that does not parse)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from broker.storage.urls import sqlite_file

    try:
        path = sqlite_file(make_url(url))
    except ArgumentError:
        return None
    return None if path is None else Path(path)


def must_exist(callback: F) -> F:
    """Mark a command that cannot work on a new database: on a SQLite file that is not
    there it is 911, instead of creating one; put it under ``@click.command``."""

    @functools.wraps(callback)
    def marked(*args: Any, **kwargs: Any) -> Any:
        click.get_current_context().ensure_object(CliState).must_exist = True
        return callback(*args, **kwargs)

    return marked  # type: ignore[return-value]


def hidden_password(url: str) -> str:
    """A URL to print: its password, if any, hidden."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _bad_url_is_usage_error(open_: Callable[[], T], option: str) -> T:
    """``open_()``; a URL of the wrong form (59011, e.g. sqlite:///:memory:) is a usage
    error of ``option`` (``--db`` or ``--instance``, the top command's options)."""
    try:
        return open_()
    except InvalidArgumentError as exc:
        if exc.number != BAD_URL:
            raise
        current = click.get_current_context(silent=True)
        raise click.BadParameter(
            exc.message, ctx=current.find_root() if current else None, param_hint=f"'{option}'"
        ) from None


pass_state = click.make_pass_decorator(CliState)

"""What every command shares: the database URL, opened lazily and closed at exit, and
whether ``--debug`` asked for tracebacks."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import click

from broker.errors import BAD_URL, InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqlalchemy import Engine

    import broker

T = TypeVar("T")

DEFAULT_URL = "sqlite:///broker.db"


class CliState:
    """The ``--db`` URL plus the engine or broker database a command opened on it."""

    def __init__(self, url: str = DEFAULT_URL, *, debug: bool = False) -> None:
        self.url = url
        self.debug = debug
        self._engine: Engine | None = None
        self._db: broker.Broker | None = None

    def engine(self) -> Engine:
        """A bare engine (no schema upgrade), for the Alembic commands."""
        if self._engine is None:
            from broker.storage.engine import create_broker_engine

            self._engine = _bad_url_is_usage_error(lambda: create_broker_engine(self.url))
        return self._engine

    def db(self) -> broker.Broker:
        """The broker database; ``broker.connect`` creates and upgrades it if needed."""
        if self._db is None:
            from broker.database import connect

            self._db = _bad_url_is_usage_error(lambda: connect(self.url))
        return self._db

    def shown_url(self) -> str:
        """The URL to print: its password, if any, hidden."""
        from sqlalchemy.engine import make_url

        return make_url(self.url).render_as_string(hide_password=True)

    def close(self) -> None:
        """Dispose of whatever the command opened."""
        if self._db is not None:
            self._db.dispose()
        if self._engine is not None:
            self._engine.dispose()


def _bad_url_is_usage_error(open_: Callable[[], T]) -> T:
    """``open_()``; a URL of the wrong form (59011, e.g. sqlite:///:memory:) is a usage error."""
    try:
        return open_()
    except InvalidArgumentError as exc:
        if exc.number != BAD_URL:
            raise
        current = click.get_current_context(silent=True)  # --db is the top command's option
        raise click.BadParameter(
            exc.message, ctx=current.find_root() if current else None, param_hint="'--db'"
        ) from None


pass_state = click.make_pass_decorator(CliState)

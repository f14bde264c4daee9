"""What every command shares: the database URL, opened lazily and closed at exit."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import click
from sqlalchemy import Engine

import broker
from broker.engine import create_broker_engine

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")

DEFAULT_URL = "sqlite:///broker.db"


class CliState:
    """The ``--db`` URL plus the engine or broker database a command opened on it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._engine: Engine | None = None
        self._db: broker.Broker | None = None

    def engine(self) -> Engine:
        """A bare engine (no schema upgrade), for the Alembic commands."""
        if self._engine is None:
            self._engine = _bad_url_is_usage_error(lambda: create_broker_engine(self.url))
        return self._engine

    def db(self) -> broker.Broker:
        """The broker database; ``broker.connect`` creates and upgrades it if needed."""
        if self._db is None:
            self._db = _bad_url_is_usage_error(lambda: broker.connect(self.url))
        return self._db

    def close(self) -> None:
        """Dispose of whatever the command opened."""
        if self._db is not None:
            self._db.dispose()
        if self._engine is not None:
            self._engine.dispose()


def _bad_url_is_usage_error(open_: Callable[[], T]) -> T:
    try:
        return open_()
    except ValueError as exc:  # e.g. sqlite:///:memory: (the broker needs a file)
        raise click.BadParameter(str(exc), param_hint="'--db'") from None


pass_state = click.make_pass_decorator(CliState)

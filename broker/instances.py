"""``broker.instance(url)``: several broker databases served together (spec 1.6, 8).

SQL Server's instance holds databases and ``msdb``; here the instance catalog is a broker
database of its own (SQLite or PostgreSQL, created and upgraded like any other), whose
routes are the instance's routes (``msdb.sys.routes``, for messages arriving from
outside) and which lists the member databases by name and URL. Members may mix
backends. One runtime (``inst.runtime()``) serves them all and moves messages between
them (``broker.runtime.transmitter``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from sqlalchemy import Table, delete, func, insert, select
from sqlalchemy.engine import URL

from broker import arguments
from broker.database import Broker, connect
from broker.errors import BrokerError
from broker.runtime.instance import InstanceRuntime
from broker.runtime.runner import DEFAULT_POLL_S
from broker.storage.context import TxContext
from broker.storage.models import InstanceDatabase

log = logging.getLogger("broker")
T = TypeVar("T")
FIRST_DATABASE_ID = 5  # SQL Server's system databases take 1 to 4 (msdb is 4)
_members = cast(Table, InstanceDatabase.__table__)


def instance(url: str = "sqlite:///instance.db", *, upgrade: bool = True, **engine_options: Any) -> Instance:
    """Open an instance catalog, creating the SQLite file and upgrading its schema."""
    return Instance(connect(url, upgrade=upgrade, **engine_options))


class Instance:
    """The databases of one instance and its catalog. Each method that changes something
    runs in a transaction of the instance catalog."""

    def __init__(self, catalog: Broker) -> None:
        self.msdb = catalog
        self._open: dict[str, Broker] = {}
        self._lock = threading.Lock()

    # -- databases --------------------------------------------------------------------

    def add_database(self, name: str, url: str) -> Broker:
        """Attach a broker database to the instance (creating and upgrading it) and return it.

        A name is unique in the instance (1801). A database whose ``service_broker_guid``
        another enabled member has is attached with its broker disabled (9773), as SQL
        Server attaches a copy.
        """
        name = arguments.object_name(name, "database")
        if self._row(name) is not None:
            raise BrokerError(1801, f"Database '{name}' already exists. Choose a different database name.")
        database = self._member(connect(url))  # refuses a URL it cannot use, with a number
        url = _absolute(database.engine.url)
        if _enabled(database) and self._twin_of(database) is not None:
            database.set_broker_enabled(False)
            log.warning("error 9773: The Service Broker in database '%s' is disabled because there is already "
                        "an enabled Service Broker with the same ID.", name)
        _run(self.msdb, lambda ctx: _insert_member(ctx, name, url))
        with self._lock:
            self._open[name] = database
        return database

    def remove_database(self, name: str) -> None:
        """Detach a database from the instance (its data stays where it is)."""
        name = arguments.object_name(name, "database")
        removed = _run(self.msdb, 
            lambda ctx: ctx.conn.execute(delete(_members).where(_members.c.name == name)).rowcount)
        if not removed:
            raise BrokerError(15151, kind="database", name=name)
        with self._lock:
            database = self._open.pop(name, None)
        if database is not None:
            database.dispose()

    def database(self, name: str) -> Broker:
        """The member database called ``name`` (911 if there is none)."""
        name = arguments.object_name(name, "database")
        with self._lock:
            opened = self._open.get(name)
        if opened is not None:
            return opened
        row = self._row(name)
        if row is None:
            raise BrokerError(911, f"Database '{name}' does not exist. Make sure that the name is entered correctly.")
        database = self._member(connect(row.url))
        with self._lock:
            return self._open.setdefault(name, database)

    @property
    def databases(self) -> dict[str, Broker]:
        """Every member database, by name."""
        names = _run(self.msdb, 
            lambda ctx: list(ctx.conn.execute(select(_members.c.name).order_by(_members.c.database_id)).scalars()))
        return {name: self.database(name) for name in names}

    # -- routes (msdb.sys.routes) --------------------------------------------------------

    def create_route(self, name: str, address: str, **clauses: Any) -> None:
        """CREATE ROUTE in the instance catalog (routes for messages arriving from outside)."""
        self.msdb.create_route(name, address, **clauses)

    def alter_route(self, name: str, **clauses: Any) -> None:
        """ALTER ROUTE in the instance catalog."""
        self.msdb.alter_route(name, **clauses)

    def drop_route(self, name: str) -> None:
        """DROP ROUTE in the instance catalog."""
        self.msdb.drop_route(name)

    # -- looking -----------------------------------------------------------------------

    def catalog(self, name: str, /, **where: Any) -> list[dict[str, Any]]:
        """Rows of an instance-level view: ``sys.databases`` lists the members (with their
        broker instance and whether their broker is enabled); other views are the
        instance catalog's own (``sys.routes``: the instance's routes)."""
        if arguments.text(name, "catalog view name").lower() in ("sys.databases", "databases"):
            rows = [{**db.catalog("sys.databases")[0], "name": member, "database_id": number}
                    for number, (member, db) in enumerate(self.databases.items(), FIRST_DATABASE_ID)]
            for row in rows:
                row.pop("create_date", None)
            return [row for row in rows if all(row.get(k) == v for k, v in where.items())]
        return self.msdb.catalog(name, **where)

    # -- the runtime ---------------------------------------------------------------------

    def runtime(self, *, poll_interval: float = DEFAULT_POLL_S, activation: bool = True) -> InstanceRuntime:
        """Every database's runtime and the transmitter between them: ``with inst.runtime(): ...``."""
        interval = arguments.interval(poll_interval, "poll_interval")
        activation = arguments.flag(activation, "activation")
        return InstanceRuntime(lambda: list(self.databases.values()), poll_interval=interval, activation=activation)

    def dispose(self) -> None:
        """Close every connection of the instance catalog and the member databases opened."""
        with self._lock:
            opened, self._open = list(self._open.values()), {}
        for database in opened:
            database.dispose()
        self.msdb.dispose()

    def _member(self, database: Broker) -> Broker:
        database.enabling_check = self._refuse_a_twin
        return database

    def _twin_of(self, database: Broker) -> str | None:
        """The name of another enabled member with ``database``'s broker instance."""
        guid = database.service_broker_guid
        return next((name for name, other in self.databases.items()
                     if other is not database and other.service_broker_guid == guid and _enabled(other)), None)

    def _refuse_a_twin(self, database: Broker) -> None:
        twin = self._twin_of(database)
        if twin is not None:
            raise BrokerError(9772, f"The Service Broker in database '{_name_of(self, database)}' cannot be enabled "
                                    f"because there is already an enabled Service Broker ('{twin}') with the same ID.")

    def _row(self, name: str) -> Any:
        return _run(self.msdb, 
            lambda ctx: ctx.conn.execute(select(_members).where(_members.c.name == name)).first())

    def __repr__(self) -> str:
        return f"<Instance {self.msdb.engine.url.render_as_string(hide_password=True)}>"


def _run(database: Broker, verb: Callable[[TxContext], T]) -> T:
    with database.transaction() as tx:
        return tx.run(verb)


def _insert_member(ctx: TxContext, name: str, url: str) -> None:
    highest = ctx.conn.execute(select(func.max(_members.c.database_id))).scalar()
    ctx.conn.execute(insert(_members).values(
        name=name, url=url, database_id=max((highest or 0) + 1, FIRST_DATABASE_ID), create_date=ctx.now()))


def _name_of(instance: Instance, database: Broker) -> str:
    return next((name for name, member in instance.databases.items() if member is database), "?")


def _enabled(database: Broker) -> bool:
    return bool(database.catalog("sys.databases")[0]["is_broker_enabled"])


def _absolute(url: URL) -> str:
    """The URL to store, a SQLite file's path made absolute: the instance may be opened
    again from another working directory."""
    if url.get_backend_name() == "sqlite" and url.database and not url.database.startswith("file:"):
        url = url.set(database=str(Path(url.database).resolve()))
    return url.render_as_string(hide_password=False)


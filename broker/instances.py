"""``broker.instance(url)``: several broker databases served together (spec 1.6, 8).

SQL Server's instance holds databases and ``msdb``; here the instance catalog is a broker
database of its own (SQLite or PostgreSQL, created and upgraded like any other), whose
routes are the instance's routes (``msdb.sys.routes``, for messages arriving from
outside) and which lists the member databases by name and URL. Members may mix
backends. One runtime (``inst.runtime()``) serves them all and moves messages between
them (``broker.runtime.transmitter``).

A member may be one partner of a mirrored database (spec 8.8, ``ddl.mirroring``): the
same database, served as principal by one instance and as mirror by another. The
instance reads its role from the database each time its runtime asks for the members,
serves only the ones it is principal of, and keeps its catalog's copy of the roles in
step (its endpoint refuses messages for a mirror with that copy).
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple, cast

from sqlalchemy import Table, delete, func, insert, select
from sqlalchemy.engine import URL, make_url

from broker import arguments
from broker.database import Broker, connect
from broker.ddl import endpoint_views, endpoints, mirroring, principals
from broker.ddl.certificates import PemSource
from broker.ddl.endpoint_options import endpoint_options
from broker.ddl.endpoints import EndpointConfig
from broker.errors import MISSING_OPTION, BrokerError, InvalidArgumentError
from broker.runtime.instance import InstanceRuntime
from broker.runtime.runner import DEFAULT_POLL_S
from broker.storage.context import TxContext
from broker.storage.engine import missing_file, parse_url
from broker.storage.models import InstanceDatabase
from broker.storage.served import read_in, run_in

log = logging.getLogger("broker")
FIRST_DATABASE_ID = 5  # SQL Server's system databases take 1 to 4 (msdb is 4)
INACCESSIBLE_FILES = 945  # SQL Server: "cannot be opened due to inaccessible files"
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
        self._inaccessible: set[str] = set()  # members left out for a file that is gone (logged once)
        self._lock = threading.Lock()

    # -- databases --------------------------------------------------------------------

    def add_database(self, name: str, url: str, *, mirror: bool = False) -> Broker:
        """Attach a broker database to the instance (creating and upgrading it) and return it.

        A name is unique in the instance (1801), and so is a database: the very database
        a member is (the same SQLite file, the same PostgreSQL server and database) is
        refused with 1801 too, nothing changed. A database whose ``service_broker_guid``
        another enabled member has (a copy) is attached with its broker disabled (9773),
        as SQL Server attaches a copy.

        ``mirror=True`` attaches it as the mirror of a database another instance serves as
        principal (spec 8.8): the same database, which both instances open. This instance
        leaves it to the principal's until a failover (``failover``). One transaction of
        the database records the mirror there: 1452 if this instance has it already or is
        its principal, 1405 if another instance is its mirror. Then one transaction of the
        instance catalog adds the member.
        """
        name = arguments.object_name(name, "database")
        mirror = arguments.flag(mirror, "mirror")
        if self._row(name) is not None:
            raise BrokerError(1801, f"Database '{name}' already exists. Choose a different database name.")
        if not mirror:  # checked before opening it: a mirror of a member is 1452, below
            self._refuse_a_member_again(name, url)
        database = self._member(connect(url))  # refuses a URL it cannot use, with a number
        url = _absolute(database.engine.url)
        me = self.msdb.service_broker_guid
        if mirror:
            try:
                self._join_as_mirror(database, me, name)
            except BaseException:
                database.dispose()  # not a member: nothing else would close it
                raise
        elif _enabled(database) and self._twin_of(database) is not None:
            database.set_broker_enabled(False)
            log.warning("error 9773: The Service Broker in database '%s' is disabled because there is already "
                        "an enabled Service Broker with the same ID.", name)
        role, guid = _role_of(database, me)
        run_in(self.msdb, lambda ctx: _insert_member(ctx, name, url, role, guid))
        with self._lock:
            self._open[name] = database
        return database

    def remove_database(self, name: str) -> None:
        """Detach a database from the instance (its data stays where it is)."""
        name = arguments.object_name(name, "database")
        removed = run_in(self.msdb, 
            lambda ctx: ctx.conn.execute(delete(_members).where(_members.c.name == name)).rowcount)
        if not removed:
            raise BrokerError(15151, kind="database", name=name)
        with self._lock:
            database = self._open.pop(name, None)
        if database is not None:
            database.dispose()

    def failover(self, name: str) -> None:
        """ALTER DATABASE name SET PARTNER FORCE_SERVICE_ALLOW_DATA_LOSS, run on the
        instance that serves the member ``name`` as mirror: it becomes the principal and its
        partner the mirror (spec 8.8). One transaction of the shared database, which alone
        says who is principal: the partner's instance follows when its runtime next reads
        it, whether or not it is running now. Then this instance's catalog copy. 911 if
        there is no such member, 1416 if it is not mirrored, 1455 if this instance is its
        principal already.
        """
        name = arguments.object_name(name, "database")
        database = self.database(name)
        me = self.msdb.service_broker_guid
        run_in(database, lambda ctx: mirroring.fail_over(ctx, me, name))
        role, guid = _role_of(database, me)
        run_in(self.msdb, lambda ctx: mirroring.record_role(ctx, name, role, guid))

    def database(self, name: str) -> Broker:
        """The member database called ``name`` (911 if there is none; 945 for a SQLite
        member whose file is gone, which is not made again empty)."""
        name = arguments.object_name(name, "database")
        with self._lock:
            opened = self._open.get(name)
        if opened is not None:
            return opened
        row = self._row(name)
        if row is None:
            raise BrokerError(911, f"Database '{name}' does not exist. Make sure that the name is entered correctly.")
        path = missing_file(make_url(row.url))
        if path is not None:  # opening it would make an empty one
            raise BrokerError(INACCESSIBLE_FILES, f"Database '{name}' cannot be opened due to inaccessible files: "
                                                  f"'{path}' is not there. Put the file back, or remove the "
                                                  "database from the instance.")
        database = self._member(connect(row.url))
        with self._lock:
            return self._open.setdefault(name, database)

    @property
    def databases(self) -> dict[str, Broker]:
        """Every member database, by name, but a SQLite member whose file is gone: it is
        left out, its 945 logged once, and the others are served (SQL Server marks such a
        database RECOVERY_PENDING and goes on with the rest)."""
        names = read_in(self.msdb, 
            lambda ctx: list(ctx.conn.execute(select(_members.c.name).order_by(_members.c.database_id)).scalars()))
        return {name: database for name in names if (database := self._member_if_there(name)) is not None}

    def _member_if_there(self, name: str) -> Broker | None:
        """The member ``name``, or None for a SQLite member whose file is gone (its 945
        logged the first time)."""
        try:
            return self.database(name)
        except BrokerError as failure:
            if failure.number != INACCESSIBLE_FILES:
                raise
            if name not in self._inaccessible:
                self._inaccessible.add(name)
                log.warning("error %d: %s", failure.number, failure.message)
            return None

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
        broker instance and whether their broker is enabled); ``sys.database_mirroring``
        their mirroring roles here (NULLs for a database that is not mirrored);
        ``sys.service_broker_endpoints``,
        ``sys.tcp_endpoints`` and ``sys.dm_broker_connections`` show the endpoint and its
        connections; other views are the instance catalog's own (``sys.routes``: the
        instance's routes)."""
        view = endpoint_views.instance_view(arguments.text(name, "catalog view name"))
        if view is not None:
            return read_in(self.msdb, lambda ctx: endpoint_views.view_rows(ctx, view, where))
        if name.lower() in ("sys.databases", "databases"):
            rows = [{**db.catalog("sys.databases")[0], "name": member, "database_id": number}
                    for number, (member, db) in enumerate(self.databases.items(), FIRST_DATABASE_ID)]
            for row in rows:
                row.pop("create_date", None)
            return [row for row in rows if all(row.get(k) == v for k, v in where.items())]
        if name.lower() in ("sys.database_mirroring", "database_mirroring"):
            rows = [_mirroring_row(number, member) for number, member in enumerate(self._roles(), FIRST_DATABASE_ID)]
            return [row for row in rows if all(row.get(k) == v for k, v in where.items())]
        return self.msdb.catalog(name, **where)

    # -- the endpoint (CREATE / ALTER / DROP ENDPOINT ... FOR SERVICE_BROKER) -------------

    def create_endpoint(self, name: str, port: int, *, listener_ip: str = "ALL", state: str = "STARTED",
                        certificate: PemSource | None = None, private_key: PemSource | None = None,
                        trusted_peers: PemSource | Iterable[PemSource] = (), encryption: str = "REQUIRED",
                        message_forwarding: bool = False, message_forward_size: int = 10) -> None:
        """CREATE ENDPOINT name STATE = state AS TCP (LISTENER_PORT = port, LISTENER_IP = listener_ip)
        FOR SERVICE_BROKER (AUTHENTICATION = CERTIFICATE, ENCRYPTION = encryption ALGORITHM AES,
        MESSAGE_FORWARDING, MESSAGE_FORWARD_SIZE = megabytes).

        ``certificate`` and ``private_key`` (required: there is no WINDOWS authentication,
        59050) and each of ``trusted_peers`` are PEM content or file paths, read now; the
        endpoint accepts only peers presenting one of ``trusted_peers``. One transaction of
        the instance catalog; one endpoint per instance (7862). A runtime serves it
        (``with inst.runtime(): ...``).
        """
        name = arguments.object_name(name, "endpoint")
        options = endpoints.read_pems(endpoint_options({
            "port": port, "listener_ip": listener_ip, "state": state, "certificate": certificate,
            "private_key": private_key, "trusted_peers": trusted_peers, "encryption": encryption,
            "message_forwarding": message_forwarding, "message_forward_size": message_forward_size,
        }, creating=True))
        run_in(self.msdb, lambda ctx: endpoints.create_endpoint(ctx, name, options))

    def alter_endpoint(self, name: str, **options: Any) -> None:
        """ALTER ENDPOINT: ``create_endpoint``'s options, at least one (7863); the others
        stay. ``trusted_peers`` replaces the trusted certificates. One transaction of the
        instance catalog; 15151 if there is no such endpoint."""
        name = arguments.object_name(name, "endpoint")
        checked = endpoints.read_pems(endpoint_options(options, creating=False))
        run_in(self.msdb, lambda ctx: endpoints.alter_endpoint(ctx, name, checked))

    def drop_endpoint(self, name: str) -> None:
        """DROP ENDPOINT name: one transaction of the instance catalog; 15151 if there is none."""
        name = arguments.object_name(name, "endpoint")
        run_in(self.msdb, lambda ctx: endpoints.drop_endpoint(ctx, name))

    # -- logins and their permissions on the endpoint (master's) ----------------------

    def create_login(self, name: str, *, certificate: str | None = None, password: str | None = None) -> None:
        """CREATE LOGIN name FROM CERTIFICATE certificate (one of master's: the instance
        catalog's) | WITH PASSWORD = password (checked, not kept: no one logs in with it
        here). One transaction of the instance catalog; 15025 if the name is taken, 15151
        for an unknown certificate."""
        name = arguments.object_name(name, "login")
        certificate = arguments.optional_object_name(certificate, "certificate")
        if (certificate is None) == (password is None):
            raise InvalidArgumentError(MISSING_OPTION, statement="CREATE LOGIN",
                                       names="FROM CERTIFICATE or WITH PASSWORD, not both")
        if password is not None:
            arguments.text(password, "PASSWORD")
        run_in(self.msdb, lambda ctx: principals.create_login(ctx, name, certificate=certificate))

    def drop_login(self, name: str) -> None:
        """DROP LOGIN name: one transaction of the instance catalog (15151 if there is none)."""
        name = arguments.object_name(name, "login")
        run_in(self.msdb, lambda ctx: principals.drop_login(ctx, name))

    def grant(self, permission: str, login: str, *, endpoint: str) -> None:
        """GRANT permission ON ENDPOINT::endpoint TO login: CONNECT makes the endpoint trust
        the login's certificate (``certificate_store.trusted_by``; a running runtime takes
        it within a second); CONTROL, ALTER, TAKE OWNERSHIP, VIEW DEFINITION are kept.
        One transaction of the instance catalog; 15151 for an unknown endpoint or login."""
        self._permission(principals.grant, permission, login, endpoint)

    def revoke(self, permission: str, login: str, *, endpoint: str) -> None:
        """REVOKE permission ON ENDPOINT::endpoint FROM login (not granted: no change)."""
        self._permission(principals.revoke, permission, login, endpoint)

    def _permission(self, verb: Callable[[TxContext, str, tuple[int, str | None], str], None], permission: str,
                    login: str, endpoint: str) -> None:
        words = " ".join(arguments.text(permission, "permission", empty=False).upper().split())
        login = arguments.object_name(login, "login")
        securable = (principals.ENDPOINT, arguments.object_name(endpoint, "endpoint"))
        run_in(self.msdb, lambda ctx: verb(ctx, words, securable, login))

    def endpoint_config(self) -> EndpointConfig | None:
        """The instance's Service Broker endpoint as its runtime serves it (None if none)."""
        return read_in(self.msdb, endpoints.endpoint_config)

    # -- the runtime ---------------------------------------------------------------------

    def runtime(self, *, poll_interval: float = DEFAULT_POLL_S, activation: bool = True) -> InstanceRuntime:
        """Every database's runtime, the transmitter between them and the instance's
        endpoint, if it has one that is STARTED: ``with inst.runtime(): ...``. A member
        this instance serves as mirror is left alone (its principal's instance serves it)."""
        interval = arguments.interval(poll_interval, "poll_interval")
        activation = arguments.flag(activation, "activation")
        return InstanceRuntime(self._principals, catalog=self.msdb, poll_interval=interval,
                               activation=activation)

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

    def _refuse_a_member_again(self, name: str, url: str) -> None:
        """1801 when ``url`` names the very database a member is (under any URL): attached
        twice, the two would share one broker id, and the 9773 rule for a copy would
        disable the member that is already there."""
        wanted = parse_url(url)  # 59011 for a URL of the wrong form, as connect() says
        if _same_database(wanted, self.msdb.engine.url):
            raise BrokerError(1801, f"Database '{name}' already exists: it is the instance's own catalog "
                                    "(master and msdb). Choose a different database.")
        rows = read_in(self.msdb, lambda ctx: list(ctx.conn.execute(select(_members.c.name, _members.c.url))))
        member = next((row.name for row in rows if _same_database(wanted, make_url(row.url))), None)
        if member is not None:
            raise BrokerError(1801, f"Database '{name}' already exists: it is the database of member '{member}'. "
                                    "Choose a different database.")

    def _row(self, name: str) -> Any:
        return read_in(self.msdb, 
            lambda ctx: ctx.conn.execute(select(_members).where(_members.c.name == name)).first())

    def _join_as_mirror(self, database: Broker, me: uuid.UUID, name: str) -> None:
        hosted = database.service_broker_guid
        if any(other.service_broker_guid == hosted for other in self.databases.values()):
            raise BrokerError(1452, "The partner server instance name must be distinct from the server instance "
                                    "that manages the database. The ALTER DATABASE SET PARTNER command failed.")
        run_in(database, lambda ctx: mirroring.join_as_mirror(ctx, me, name))

    def _principals(self) -> list[Broker]:
        """The members the runtime serves: all but those this instance is the mirror of."""
        return [member.database for member in self._roles() if member.role != mirroring.MIRROR]

    def _roles(self) -> list[_Member]:
        """Every member (but one whose file is gone) and its mirroring role here, read from
        the member (the truth). A principal the member does not name yet is named; the
        instance catalog's copy of a role that changed (a failover run on the partner's
        instance) is brought in step."""
        def read(ctx: TxContext) -> tuple[uuid.UUID, list[Any]]:
            columns = (_members.c.name, _members.c.mirroring_role, _members.c.mirroring_guid)
            return ctx.catalog.broker_guid, list(ctx.conn.execute(select(*columns).order_by(_members.c.database_id)))

        me, rows = read_in(self.msdb, read)
        members = []
        for row in rows:
            database = self._member_if_there(row.name)
            if database is None:
                continue
            session = run_in(database, mirroring.mirroring)
            if session.principal is None and session.role_of(me) == mirroring.PRINCIPAL:
                session = run_in(database, partial(mirroring.name_principal, instance=me))
            role, guid = _role_of(database, me, session)
            if (role, guid) != (row.mirroring_role, row.mirroring_guid):
                run_in(self.msdb, partial(mirroring.record_role, name=row.name, role=role, broker_instance=guid))
            members.append(_Member(database, session, role, session.partner_of(me)))
        return members

    def __repr__(self) -> str:
        return f"<Instance {self.msdb.engine.url.render_as_string(hide_password=True)}>"



class _Member(NamedTuple):
    """A member database and its mirroring session, as this instance sees it."""

    database: Broker
    session: mirroring.Mirroring
    role: int | None  # None: not mirrored
    partner: uuid.UUID | None  # the other partner's instance, when the database names it


def _insert_member(ctx: TxContext, name: str, url: str, role: int | None, guid: uuid.UUID | None) -> None:
    highest = ctx.conn.execute(select(func.max(_members.c.database_id))).scalar()
    ctx.conn.execute(insert(_members).values(
        name=name, url=url, database_id=max((highest or 0) + 1, FIRST_DATABASE_ID), create_date=ctx.now(),
        mirroring_role=role, mirroring_guid=guid))


def _role_of(database: Broker, instance: uuid.UUID,
             session: mirroring.Mirroring | None = None) -> tuple[int | None, uuid.UUID | None]:
    """The role of ``instance`` in ``database``'s mirroring session and, when it is
    mirrored, the database's broker id: what the instance catalog keeps of it."""
    if session is None:
        session = run_in(database, mirroring.mirroring)
    role = session.role_of(instance)
    return role, database.service_broker_guid if role is not None else None


def _mirroring_row(database_id: int, member: _Member) -> dict[str, Any]:
    """A row of ``sys.database_mirroring``: its columns are NULL for a database that is
    not mirrored. Both partners share the data, so the mirror is always SYNCHRONIZED."""
    mirrored = member.role is not None
    return {
        "database_id": database_id,
        "mirroring_guid": member.database.service_broker_guid if mirrored else None,
        "mirroring_state": 4 if mirrored else None,
        "mirroring_state_desc": "SYNCHRONIZED" if mirrored else None,
        "mirroring_role": member.role,
        "mirroring_role_desc": mirroring.ROLE_DESC.get(member.role) if member.role is not None else None,
        "mirroring_role_sequence": member.session.role_sequence if mirrored else None,
        "mirroring_safety_level": 2 if mirrored else None,
        "mirroring_safety_level_desc": "FULL" if mirrored else None,
        "mirroring_partner_instance": str(member.partner) if member.partner is not None else None,
    }


def _name_of(instance: Instance, database: Broker) -> str:
    return next((name for name, member in instance.databases.items() if member is database), "?")


def _enabled(database: Broker) -> bool:
    return bool(database.catalog("sys.databases")[0]["is_broker_enabled"])


def _same_database(one: URL, other: URL) -> bool:
    """Whether two URLs name one database: the same SQLite file (by inode when both
    exist, else by absolute path; a ``file:`` URI only as written), or the same
    PostgreSQL server, port and database."""
    if one.get_backend_name() != other.get_backend_name():
        return False
    if one.get_backend_name() != "sqlite":
        return (one.host or "localhost", one.port or 5432, one.database) == (
            other.host or "localhost", other.port or 5432, other.database)
    first, second = one.database or "", other.database or ""
    if first.startswith("file:") or second.startswith("file:"):
        return first == second
    try:
        return os.path.samefile(first, second)  # stat only: opening would drop this process's locks
    except OSError:
        return Path(first).resolve() == Path(second).resolve()


def _absolute(url: URL) -> str:
    """The URL to store, a SQLite file's path made absolute: the instance may be opened
    again from another working directory."""
    if url.get_backend_name() == "sqlite" and url.database and not url.database.startswith("file:"):
        url = url.set(database=str(Path(url.database).resolve()))
    return url.render_as_string(hide_password=False)


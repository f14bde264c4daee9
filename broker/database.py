"""``broker.connect(url)``: a broker database, its transactions and its DDL (what it reads
without changing anything is ``broker.inspection``)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Engine, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from broker import arguments
from broker.ddl import (
    certificate_store,
    certificates,
    database_options,
    objects,
    principals,
    priorities,
    procedures,
    routes,
)
from broker.ddl.certificate_store import StoredCertificate
from broker.ddl.certificates import PemSource
from broker.errors import MISSING_OPTION, BrokerError, InvalidArgumentError
from broker.events import EventHub
from broker.inspection import Inspection
from broker.runtime.runner import DEFAULT_POLL_S, Runtime
from broker.runtime.transmitter import Transmitter
from broker.storage import schema
from broker.storage.context import TxContext
from broker.storage.driver_errors import as_broker_error
from broker.storage.engine import create_broker_engine
from broker.storage.models import BrokerDatabase
from broker.storage.state import DatabaseState
from broker.transaction import Transaction

T = TypeVar("T")

# The transaction ``Broker.within`` lends to object verbs, with the database it belongs to.
_ambient: ContextVar[tuple[DatabaseState, Transaction] | None] = ContextVar("broker_ambient_transaction",
                                                                              default=None)


def connect(url: str = "sqlite:///broker.db", *, upgrade: bool = True, **engine_options: Any) -> Broker:
    """Open a broker database, creating the SQLite file and upgrading its schema to head.

    ``upgrade=False`` opens it as it is (``broker upgrade`` migrates it later).
    """
    upgrade = arguments.flag(upgrade, "upgrade")
    engine = create_broker_engine(url, **engine_options)
    if upgrade:
        try:
            schema.ensure_current(engine)
        except DBAPIError as exc:  # the server cannot be reached, the login or the database is refused
            engine.dispose()
            raise as_broker_error(exc) from exc
        except BaseException:  # refused as it is (948, 211): no connection of this engine stays open
            engine.dispose()
            raise
    return Broker(engine)


class Broker(Inspection):
    """One broker database. Every method that changes something runs in a transaction."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._state = DatabaseState(engine)
        self.Session = sessionmaker(bind=engine)
        self.events: EventHub = self._state.events
        # Set by the instance this database is a member of: refuses (9772) to enable a
        # broker whose service_broker_guid another enabled member has.
        self.enabling_check: Callable[[Broker], None] | None = None

    @property
    def state(self) -> DatabaseState:
        """What every transaction on this database shares in this process (the runtime's
        and extensions' way in: backend, catalog snapshot, notifier)."""
        return self._state

    # -- transactions ------------------------------------------------------------------

    @contextmanager
    def transaction(self, *, session: Session | None = None,
                    connection: Connection | None = None) -> Iterator[Transaction]:
        """A broker transaction: commit on exit, rollback on an exception.

        On SQLite it holds the database's write lock from its first verb to its end (a
        fair lock: writers of every thread and process take turns), and its commit
        returns once the commit is on disk: with other writers about, flushed after the
        lock is let go, one flush shared by the commits made meanwhile.

        With ``session`` (or ``connection``) the verbs join the caller's transaction and
        the caller commits or rolls back: application rows and messages then succeed or
        fail together. Use ``db.Session()`` so that, on SQLite, the session's
        transaction starts with ``BEGIN IMMEDIATE`` like the broker's own.
        """
        _check_joined(session, connection)
        tx = Transaction(self._state, session=session, connection=connection)
        with _ended(tx, joined=session is not None or connection is not None):
            yield tx

    @contextmanager
    def snapshot(self) -> Iterator[Transaction]:
        """A transaction that only reads, on the last committed state of the database.

        It takes no lock and never waits for a writer: on SQLite a deferred read on WAL's
        snapshot (a write transaction open meanwhile, even one in a WAITFOR, does not
        hold it up); on PostgreSQL REPEATABLE READ, READ ONLY. It sees only committed
        data, as of its first read. Verbs that change anything (SEND, RECEIVE, DDL ...)
        are refused with 3906; ``tx.read(verb)``, ``tx.query(sql)`` and
        ``get_transmission_status`` read.
        """
        tx = Transaction(self._state, snapshot=True)
        with _ended(tx, joined=False):
            yield tx

    @contextmanager
    def within(self, tx: Transaction) -> Iterator[None]:
        """Run the object verbs called in the block (CREATE/ALTER/DROP ..., ALTER DATABASE)
        in ``tx``, a transaction of this database, rather than each in its own: DDL inside
        a script's BEGIN TRANSACTION commits or rolls back with it, as in SQL Server. (On
        SQLite a verb's own transaction would wait for the write lock ``tx`` holds.)"""
        token = _ambient.set((self._state, tx))
        try:
            yield
        finally:
            _ambient.reset(token)

    def _ddl(self, verb: Callable[[TxContext], T]) -> T:
        ambient = _ambient.get()
        if ambient is not None and ambient[0] is self._state:
            return ambient[1].run(verb)
        with self.transaction() as tx:
            return tx.run(verb)

    # -- objects -----------------------------------------------------------------------

    def create_xml_schema_collection(self, name: str, xsd: str | bytes) -> None:
        """CREATE XML SCHEMA COLLECTION name AS 'xsd': one or more XSD documents, self-contained."""
        name = arguments.object_name(name, "XML schema collection")
        if not isinstance(xsd, (str, bytes)):
            raise arguments.wrong_type("the XML schema collection", xsd, "xml (str or bytes)")
        self._ddl(lambda ctx: objects.create_xml_schema_collection(ctx, name, xsd))

    def create_message_type(self, name: str, validation: str = "NONE", schema_collection: str | None = None) -> None:
        """CREATE MESSAGE TYPE name VALIDATION = NONE | EMPTY | WELL_FORMED_XML | VALID_XML."""
        name = arguments.object_name(name, "message type")
        validation = arguments.choice(validation, "VALIDATION", arguments.VALIDATIONS)
        schema_collection = arguments.optional_object_name(schema_collection, "XML schema collection")
        self._ddl(lambda ctx: objects.create_message_type(ctx, name, validation, schema_collection))

    def create_contract(self, name: str, messages: Mapping[str, str] | Iterable[tuple[str, str]]) -> None:
        """CREATE CONTRACT name (type SENT BY INITIATOR | TARGET | ANY, ...)."""
        name = arguments.object_name(name, "contract")
        pairs = arguments.contract_messages(messages)
        self._ddl(lambda ctx: objects.create_contract(ctx, name, pairs))

    def create_queue(self, name: str, status: bool = True, retention: bool = False,
                     activation: Mapping[str, Any] | None = None, poison_message_handling: bool = True) -> None:
        """CREATE QUEUE: an internal table plus a view named after the queue."""
        queue_name = arguments.queue_name(name)
        options = arguments.queue_options({"status": status, "retention": retention, "activation": activation,
                                           "poison_message_handling": poison_message_handling}, creating=True)
        self._ddl(lambda ctx: objects.create_queue(ctx, queue_name, **options))

    def alter_queue(self, name: str, **options: Any) -> None:
        """ALTER QUEUE: ``status``, ``retention``, ``activation`` (None drops it),
        ``poison_message_handling``. Turning STATUS ON delivers held messages."""
        queue_name = arguments.queue_name(name)
        checked = arguments.queue_options(options, creating=False)
        self._ddl(lambda ctx: objects.alter_queue(ctx, queue_name, **checked))

    def create_service(self, name: str, queue: str, contracts: Iterable[str] = ()) -> None:
        """CREATE SERVICE name ON QUEUE queue (contracts it can be the target of)."""
        name = arguments.object_name(name, "service")
        queue = arguments.queue_name(queue)
        contract_names = arguments.names(contracts, "contract name")
        self._ddl(lambda ctx: objects.create_service(ctx, name, queue, contract_names))

    def drop_service(self, name: str) -> None:
        """DROP SERVICE: its messages go; the far sides of its open dialogs get Error -8470."""
        name = arguments.object_name(name, "service")
        self._ddl(lambda ctx: objects.drop_service(ctx, name))

    def drop_queue(self, name: str) -> None:
        """DROP QUEUE: refused (3729) while a service uses it."""
        name = arguments.queue_name(name)
        self._ddl(lambda ctx: objects.drop_queue(ctx, name))

    def drop_contract(self, name: str) -> None:
        """DROP CONTRACT: refused while a service or broker priority names it."""
        name = arguments.object_name(name, "contract")
        self._ddl(lambda ctx: objects.drop_contract(ctx, name))

    def drop_message_type(self, name: str) -> None:
        """DROP MESSAGE TYPE: refused while a contract names it."""
        name = arguments.object_name(name, "message type")
        self._ddl(lambda ctx: objects.drop_message_type(ctx, name))

    def alter_service(self, name: str, *, queue: str | None = None, add_contracts: Iterable[str] = (),
                      drop_contracts: Iterable[str] = ()) -> None:
        """ALTER SERVICE name [ON QUEUE queue] [(ADD CONTRACT c, DROP CONTRACT c, ...)], in
        its own transaction.

        A new queue takes the service's messages and conversation groups; the statement
        first locks the service's groups and endpoints, so it waits for the RECEIVEs and
        SENDs under way on them. A dropped contract refuses new dialogs and leaves
        existing ones as they are. A statement that changes nothing is 8493.
        """
        name = arguments.object_name(name, "service")
        queue = None if queue is None else arguments.queue_name(queue)
        added = arguments.names(add_contracts, "contract name")
        dropped = arguments.names(drop_contracts, "contract name")
        self._ddl(lambda ctx: objects.alter_service(ctx, name, queue, added, dropped))

    def alter_message_type(self, name: str, validation: str, schema_collection: str | None = None) -> None:
        """ALTER MESSAGE TYPE name VALIDATION = ..., in its own transaction: later
        deliveries are checked against the new validation, queued messages are not."""
        name = arguments.object_name(name, "message type")
        validation = arguments.choice(validation, "VALIDATION", arguments.VALIDATIONS)
        schema_collection = arguments.optional_object_name(schema_collection, "XML schema collection")
        self._ddl(lambda ctx: objects.alter_message_type(ctx, name, validation, schema_collection))

    # -- procedures written in T-SQL (run by broker.sql and by activation) ------------------

    def create_procedure(self, name: str, definition: str, *, alter: bool = False, replace: bool = False) -> None:
        """Store a T-SQL procedure's text (``CREATE [OR ALTER] | ALTER PROCEDURE`` as
        written): EXEC in a script and a queue's activation run it. 2714 when it exists
        (unless ``alter`` or ``replace``), 208 when ``alter`` finds none. Its own
        transaction, or the one ``within`` lends."""
        name = arguments.object_name(name, "procedure")
        definition = arguments.text(definition, "procedure definition", empty=False)
        self._ddl(lambda ctx: procedures.create_procedure(ctx, name, definition, replace=replace, alter=alter))

    def drop_procedure(self, name: str) -> None:
        """DROP PROCEDURE (3701 when there is none)."""
        name = arguments.object_name(name, "procedure")
        self._ddl(lambda ctx: procedures.drop_procedure(ctx, name))

    def procedure_definition(self, name: str) -> str | None:
        """The text of the T-SQL procedure ``name`` (case-insensitive), or None; a snapshot
        read (in the transaction ``within`` lends, if any)."""
        name = arguments.object_name(name, "procedure")
        return self._look(lambda ctx: procedures.procedure_definition(ctx, name))

    # -- ALTER DATABASE ------------------------------------------------------------------

    @property
    def service_broker_guid(self) -> uuid.UUID:
        """This database's ``service_broker_guid`` (``sys.databases``), read from the database."""
        return self._read(lambda ctx: ctx.conn.execute(select(BrokerDatabase.service_broker_guid)).scalar_one())

    def set_broker_enabled(self, enabled: bool) -> None:
        """ALTER DATABASE SET ENABLE_BROKER (True) / DISABLE_BROKER (False), in its own
        transaction; enabling delivers the messages held while it was disabled."""
        enabled = arguments.flag(enabled, "ENABLE_BROKER")
        if enabled and self.enabling_check is not None:
            self.enabling_check(self)
        self._ddl(lambda ctx: database_options.set_broker_enabled(ctx, enabled))

    def new_broker(self) -> uuid.UUID:
        """ALTER DATABASE SET NEW_BROKER, in its own transaction: a new
        ``service_broker_guid`` (returned), delivery enabled, every conversation removed
        without telling the far sides. It locks every conversation group and endpoint
        first, so it waits for the transactions working on them."""
        return self._ddl(database_options.new_broker)

    def error_broker_conversations(self) -> None:
        """ALTER DATABASE SET ERROR_BROKER_CONVERSATIONS, in its own transaction: delivery
        enabled, the guid kept, untransmitted messages dropped and every open dialog ended
        with Error -9719 (state ER). Locks every group and endpoint first, as
        ``new_broker`` does."""
        if self.enabling_check is not None:
            self.enabling_check(self)
        self._ddl(database_options.error_broker_conversations)

    def set_honor_broker_priority(self, on: bool) -> None:
        """ALTER DATABASE SET HONOR_BROKER_PRIORITY ON (True) / OFF (False), in its own
        transaction; shown in ``sys.databases.is_honor_broker_priority_on``."""
        on = arguments.flag(on, "HONOR_BROKER_PRIORITY")
        self._ddl(lambda ctx: database_options.set_honor_broker_priority(ctx, on))

    def create_broker_priority(self, name: str, *, contract_name: str | None = None,
                               local_service_name: str | None = None, remote_service_name: str | None = None,
                               priority_level: int | str | None = None) -> None:
        """CREATE BROKER PRIORITY: criteria None or "ANY" match any; level 1..10, None or
        "DEFAULT" = 5. Applies to endpoints created afterwards."""
        name = arguments.object_name(name, "broker priority")
        options = arguments.priority_options({
            "contract_name": contract_name, "local_service_name": local_service_name,
            "remote_service_name": remote_service_name, "priority_level": priority_level}, altering=False)
        self._ddl(lambda ctx: priorities.create_broker_priority(ctx, name, **options))

    def alter_broker_priority(self, name: str, **options: Any) -> None:
        """ALTER BROKER PRIORITY: the options of ``create_broker_priority``, at least one;
        omitted ones stay. Existing endpoints keep their priority."""
        name = arguments.object_name(name, "broker priority")
        checked = arguments.priority_options(options, altering=True)
        self._ddl(lambda ctx: priorities.alter_broker_priority(ctx, name, **checked))

    def drop_broker_priority(self, name: str) -> None:
        """DROP BROKER PRIORITY; existing endpoints keep their priority."""
        name = arguments.object_name(name, "broker priority")
        self._ddl(lambda ctx: priorities.drop_broker_priority(ctx, name))

    # -- routes (spec 1.6, 1.7) --------------------------------------------------------------

    def create_route(self, name: str, address: str, *, service_name: str | None = None,
                     broker_instance: str | None = None, lifetime: int | None = None,
                     mirror_address: str | None = None) -> None:
        """CREATE ROUTE name WITH [SERVICE_NAME, BROKER_INSTANCE, LIFETIME,] ADDRESS [, MIRROR_ADDRESS].

        ``address`` is ``"LOCAL"``, ``"TRANSPORT"`` or ``"TCP://host:port"``; ``lifetime``
        seconds (None: never expires). New conversations that begin here route with it
        once this transaction commits.
        """
        name = arguments.object_name(name, "route")
        clauses = arguments.route_options({
            "address": address, "service_name": service_name, "broker_instance": broker_instance,
            "lifetime": lifetime, "mirror_address": mirror_address}, creating=True)
        self._ddl(lambda ctx: routes.create_route(ctx, name, clauses))

    def alter_route(self, name: str, **clauses: Any) -> None:
        """ALTER ROUTE: the clauses of ``create_route``, at least one; the others stay."""
        name = arguments.object_name(name, "route")
        checked = arguments.route_options(clauses, creating=False)
        self._ddl(lambda ctx: routes.alter_route(ctx, name, checked))

    def drop_route(self, name: str) -> None:
        """DROP ROUTE name (AutoCreatedLocal too: then only named routes lead anywhere)."""
        name = arguments.object_name(name, "route")
        self._ddl(lambda ctx: routes.drop_route(ctx, name))

    def create_remote_service_binding(self, name: str, service: str, user: str, anonymous: bool = False) -> None:
        """CREATE REMOTE SERVICE BINDING name TO SERVICE 'service' WITH USER = user [, ANONYMOUS = ON].

        One binding per remote service (9619). Dialog security uses it on dialogs to
        another instance.
        """
        name = arguments.object_name(name, "remote service binding")
        service = arguments.text(service, "TO SERVICE", longest=arguments.NVARCHAR_256, empty=False)
        user = arguments.object_name(user, "user")
        anonymous = arguments.flag(anonymous, "ANONYMOUS")
        self._ddl(lambda ctx: routes.create_remote_service_binding(ctx, name, service, user, anonymous))

    def alter_remote_service_binding(self, name: str, *, user: str | None = None,
                                     anonymous: bool | None = None) -> None:
        """ALTER REMOTE SERVICE BINDING name WITH [USER = user] [, ANONYMOUS = ON | OFF]."""
        name = arguments.object_name(name, "remote service binding")
        user = arguments.optional_object_name(user, "user")
        checked = None if anonymous is None else arguments.flag(anonymous, "ANONYMOUS")
        self._ddl(lambda ctx: routes.alter_remote_service_binding(ctx, name, user, checked))

    def drop_remote_service_binding(self, name: str) -> None:
        """DROP REMOTE SERVICE BINDING name."""
        name = arguments.object_name(name, "remote service binding")
        self._ddl(lambda ctx: routes.drop_remote_service_binding(ctx, name))

    # -- security: master key, users, certificates, permissions (docs/sql.md) ------------
    # Kept and shown (sys.symmetric_keys, sys.database_principals, sys.certificates,
    # sys.database_permissions); nothing checks a permission. Each verb is one transaction
    # (or the caller's, ``within``).

    def create_master_key(self, password: str) -> None:
        """CREATE MASTER KEY ENCRYPTION BY PASSWORD = password (15578 if there is one). A
        certificate's private key needs it (or a password of its own). The password is
        not kept: no key here is encrypted with it."""
        arguments.text(password, "ENCRYPTION BY PASSWORD", empty=False)
        self._ddl(principals.create_master_key)

    def drop_master_key(self) -> None:
        """DROP MASTER KEY (15151 without one; 15580 while a certificate's key needs it)."""
        self._ddl(principals.drop_master_key)

    def create_user(self, name: str, *, login: str | None = None, certificate: str | None = None) -> None:
        """CREATE USER name FOR LOGIN login | FROM CERTIFICATE certificate | WITHOUT LOGIN
        (neither given). 15023 if the name is taken; 15151 for an unknown certificate. The
        login is the instance's: a database does not know its instance, so it is not
        checked here (``broker sql`` checks it: 15007)."""
        name = arguments.object_name(name, "user")
        login = arguments.optional_object_name(login, "login")
        certificate = arguments.optional_object_name(certificate, "certificate")
        if login is not None and certificate is not None:
            raise InvalidArgumentError(102, "CREATE USER takes FOR LOGIN or FROM CERTIFICATE, not both.",
                                       near="CERTIFICATE")
        self._ddl(lambda ctx: principals.create_user(ctx, name, login=login, certificate=certificate))

    def drop_user(self, name: str) -> None:
        """DROP USER name (15151 if there is none, 15138 while it owns a certificate)."""
        name = arguments.object_name(name, "user")
        self._ddl(lambda ctx: principals.drop_user(ctx, name))

    def create_certificate(self, name: str, *, subject: str | None = None, owner: str | None = None,
                           start_date: datetime | None = None, expiry_date: datetime | None = None,
                           certificate: PemSource | None = None, private_key: PemSource | None = None,
                           private_key_password: str | None = None, encryption_password: str | None = None,
                           active_for_begin_dialog: bool = True) -> None:
        """CREATE CERTIFICATE name [AUTHORIZATION owner] [ENCRYPTION BY PASSWORD =
        encryption_password] WITH SUBJECT = subject [, START_DATE, EXPIRY_DATE] (a new key
        pair), or FROM FILE = certificate [WITH PRIVATE KEY (FILE = private_key,
        DECRYPTION BY PASSWORD = private_key_password)] (PEM or DER, content or a path,
        read now); ACTIVE FOR BEGIN_DIALOG.

        A private key needs the master key unless ``encryption_password`` is given
        (15581). 15232 if the name or the certificate is taken, 15151 for an unknown owner.
        """
        name = arguments.object_name(name, "certificate")
        owner = arguments.optional_object_name(owner, "user")
        active = arguments.flag(active_for_begin_dialog, "ACTIVE FOR BEGIN_DIALOG")
        if encryption_password is not None:
            arguments.text(encryption_password, "ENCRYPTION BY PASSWORD", empty=False)
        pem, key = certificates.certificate_and_key(
            subject=subject, certificate=certificate, private_key=private_key,
            private_key_password=private_key_password, start_date=start_date, expiry_date=expiry_date)
        self._ddl(lambda ctx: certificate_store.create_certificate(
            ctx, name, owner, pem, key, password_protected=encryption_password is not None,
            active_for_begin_dialog=active))

    def backup_certificate(self, name: str, file: str | os.PathLike[str], *,
                           private_key_file: str | os.PathLike[str] | None = None,
                           encryption_password: str | None = None) -> None:
        """BACKUP CERTIFICATE name TO FILE = file [WITH PRIVATE KEY (FILE = private_key_file,
        ENCRYPTION BY PASSWORD = encryption_password)]: the certificate in DER, as SQL
        Server writes it; the key as PKCS#8 PEM encrypted with the password. Files are
        new (15240 for one that exists); 15151 for an unknown certificate, 15297 for a key
        it does not have."""
        name = arguments.object_name(name, "certificate")
        if (private_key_file is None) != (encryption_password is None):
            raise InvalidArgumentError(MISSING_OPTION, statement="BACKUP CERTIFICATE ... WITH PRIVATE KEY",
                                       names="FILE and ENCRYPTION BY PASSWORD")
        found = self._look(lambda ctx: certificate_store.stored(ctx, name))
        key: tuple[str | os.PathLike[str], bytes] | None = None
        if private_key_file is not None and encryption_password is not None:
            if found.private_key is None:
                raise BrokerError(certificates.INVALID_KEY_DATA, f"The certificate '{name}' has no private key to "
                                                                 "back up.")
            password = arguments.text(encryption_password, "ENCRYPTION BY PASSWORD", empty=False)
            key = private_key_file, certificates.encrypted_key_pem(found.private_key, password)
        # Both files or neither: a retry after a bad key path must not find the .cer written.
        certificates.write_backup(file, certificates.der_of(found.certificate), key)
        if key is not None:
            self._ddl(lambda ctx: certificate_store.backed_up(ctx, name))

    def certificate(self, name: str) -> StoredCertificate:
        """Certificate ``name`` as the database keeps it (PEM; its private key if it has
        one); 15151 if there is none. A snapshot read (in the transaction ``within``
        lends, if any)."""
        name = arguments.object_name(name, "certificate")
        return self._look(lambda ctx: certificate_store.stored(ctx, name))

    def drop_certificate(self, name: str) -> None:
        """DROP CERTIFICATE name (15151 if there is none; 15352 while a user or login is
        mapped to it or the endpoint presents it)."""
        name = arguments.object_name(name, "certificate")
        self._ddl(lambda ctx: certificate_store.drop_certificate(ctx, name))

    def grant(self, permission: str, principal: str, *, service: str | None = None) -> None:
        """GRANT permission [ON SERVICE::service] TO principal: SEND (and CONTROL, ALTER,
        TAKE OWNERSHIP, VIEW DEFINITION, REFERENCES) on a service; CONNECT (CONTROL,
        ALTER, VIEW DEFINITION) on the database. 15151 for an unknown service or user."""
        self._permission(principals.grant, permission, principal, service)

    def revoke(self, permission: str, principal: str, *, service: str | None = None) -> None:
        """REVOKE permission [ON SERVICE::service] FROM principal (not granted: no change)."""
        self._permission(principals.revoke, permission, principal, service)

    def _permission(self, verb: Callable[[TxContext, str, tuple[int, str | None], str], None], permission: str,
                    principal: str, service: str | None) -> None:
        words = " ".join(arguments.text(permission, "permission", empty=False).upper().split())
        principal = arguments.object_name(principal, "principal")
        securable = (principals.DATABASE, None) if service is None else (
            principals.SERVICE, arguments.text(service, "service name", longest=arguments.NVARCHAR_256, empty=False))
        self._ddl(lambda ctx: verb(ctx, words, securable, principal))

    # -- looking (broker.inspection) ------------------------------------------------------

    def _look(self, verb: Callable[[TxContext], T]) -> T:
        """``verb``, which only reads, in the transaction ``within`` lends, or on a snapshot."""
        ambient = _ambient.get()
        if ambient is not None and ambient[0] is self._state:
            return ambient[1].read(verb)
        return self._read(verb)

    # -- the runtime ---------------------------------------------------------------------

    def start_runtime(self, *, poll_interval: float = DEFAULT_POLL_S, activation: bool = True) -> Runtime:
        """Start the background scheduler (timers, lifetimes, retries) and activation.

        Returns the running ``Runtime``; call its ``stop()`` (or use ``with db.runtime():``).
        """
        return self.runtime(poll_interval=poll_interval, activation=activation).start()

    def runtime(self, *, poll_interval: float = DEFAULT_POLL_S, activation: bool = True) -> Runtime:
        """A runtime to use as a context manager: ``with db.runtime(): ...``."""
        return Runtime(self, poll_interval=arguments.interval(poll_interval, "poll_interval"),
                       activation=arguments.flag(activation, "activation"), transmitter=Transmitter(lambda: [self]))

    def dispose(self) -> None:
        """Close every connection this object holds (idle or pooled), and on SQLite the
        database's lock file if nothing else of this process is using it (another
        process left alone on the database then commits without waiting for company).
        The object stays usable: it opens what it needs again."""
        self._state.close_idle()
        self.engine.dispose()

    def __repr__(self) -> str:
        return f"<Broker {self.engine.url.render_as_string(hide_password=True)}>"


def _check_joined(session: object, connection: object) -> None:
    """The caller's transaction to join: a SQLAlchemy ``Session`` or ``Connection``, not both."""
    if session is not None and not isinstance(session, Session):
        raise arguments.wrong_type("session", session, "sqlalchemy.orm.Session")
    if connection is not None and not isinstance(connection, Connection):
        raise arguments.wrong_type("connection", connection, "sqlalchemy.engine.Connection")
    if session is not None and connection is not None:
        raise InvalidArgumentError(MISSING_OPTION, statement="db.transaction()",
                                   names="session or connection (the transaction to join), not both")


@contextmanager
def _ended(tx: Transaction, *, joined: bool) -> Iterator[None]:
    """Commit ``tx`` when the block ends, roll it back on an exception; a transaction
    joined to the caller's is left to the caller."""
    try:
        yield
    except BaseException:
        if not joined:
            tx.rollback()
        raise
    else:
        if not joined:
            tx.commit()
    finally:
        tx.close()

"""Security statements onto the ``Broker`` and ``Instance`` verbs: CREATE / DROP MASTER
KEY, USER, LOGIN and CERTIFICATE, BACKUP CERTIFICATE, GRANT and REVOKE.

They are SQL Server's transport and dialog security as scripts carry them (the
between-instances tutorial). Master keys, users, certificates and permissions on services
belong to the database the session is in; logins and permissions on the endpoint to the
instance (master). What they mean here: ``broker.ddl.certificate_store`` and docs/sql.md.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from broker.sql import nodes as n
from broker.sql import values
from broker.sql.clauses import needs_instance, options_of, switch, syntax_error
from broker.sql.errors import SqlError
from broker.sql.expressions import Evaluator

if TYPE_CHECKING:
    from broker.database import Broker

NOT_A_LOGIN = 15007
UNSUPPORTED = 40517
# GRANT ... ON class::name: the classes of securable kept here (others are 40517).
_SECURABLES = ("SERVICE", "ENDPOINT")


def _text(value: Any, what: str) -> str:
    if value is None:
        raise syntax_error(f"{what} = NULL")
    return str(values.convert(value, n.TypeName("NVARCHAR", -1)))


def _expression(statement: n.Ddl | dict[str, Any], key: str, evaluator: Evaluator, what: str) -> str:
    clauses = statement.clauses if isinstance(statement, n.Ddl) else statement
    return _text(evaluator.value(clauses[key]), what)


def _moment(value: Any) -> datetime:
    moment: datetime = values.convert(value, n.TypeName("DATETIME"))
    return moment


# -- master keys and users -----------------------------------------------------------------


def _create_master_key(db: Broker, statement: n.Ddl, evaluator: Evaluator, _instance: Any) -> None:
    db.create_master_key(_expression(statement, "password", evaluator, "PASSWORD"))


def _drop_master_key(db: Broker, _statement: n.Ddl, _evaluator: Evaluator, _instance: Any) -> None:
    db.drop_master_key()


def _create_user(db: Broker, statement: n.Ddl, evaluator: Evaluator, instance: Any) -> None:
    """CREATE USER u [WITHOUT LOGIN | FOR LOGIN l | FROM CERTIFICATE c]; with no clause the
    user is for the login of its own name. A login is the instance's (15007 if it has none)."""
    options_of(statement, {"DEFAULT_SCHEMA": "default_schema"}, evaluator)
    name = statement.name[-1]
    source: dict[str, str] | None = statement.clauses["source"]
    if source is None:
        source = {"login": name}
    if "login" in source:
        _check_login(instance, source["login"])
    db.create_user(name, login=source.get("login"), certificate=source.get("certificate"))


def _check_login(instance: Any | None, login: str) -> None:
    logins = needs_instance(instance, "CREATE USER ... FOR LOGIN (a login is the instance's)").msdb.catalog(
        "sys.server_principals")
    if not any(row["name"].casefold() == login.casefold() and row["type"] != "R" for row in logins):
        raise SqlError(NOT_A_LOGIN, f"'{login}' is not a valid login or you do not have permission.")


# -- logins (the instance's) ---------------------------------------------------------------

_LOGIN_OPTIONS = {"CHECK_POLICY": "check_policy", "CHECK_EXPIRATION": "check_expiration",
                  "DEFAULT_DATABASE": "default_database", "DEFAULT_LANGUAGE": "default_language"}


def _create_login(_db: Broker, statement: n.Ddl, evaluator: Evaluator, instance: Any) -> None:
    inst = needs_instance(instance, "CREATE LOGIN")
    options_of(statement, _LOGIN_OPTIONS, evaluator)
    if "certificate" in statement.clauses:
        inst.create_login(statement.name[-1], certificate=statement.clauses["certificate"])
    else:
        inst.create_login(statement.name[-1], password=_expression(statement, "password", evaluator, "PASSWORD"))


def _drop_login(_db: Broker, statement: n.Ddl, _evaluator: Evaluator, instance: Any) -> None:
    needs_instance(instance, "DROP LOGIN").drop_login(statement.name[-1])


def _drop_user(db: Broker, statement: n.Ddl, _evaluator: Evaluator, _instance: Any) -> None:
    db.drop_user(statement.name[-1])


# -- certificates ----------------------------------------------------------------------------


def _create_certificate(db: Broker, statement: n.Ddl, evaluator: Evaluator, _instance: Any) -> None:
    """WITH SUBJECT [, START_DATE, EXPIRY_DATE] makes a key pair; FROM FILE imports one
    (WITH PRIVATE KEY (FILE, DECRYPTION BY PASSWORD, ENCRYPTION BY PASSWORD))."""
    clauses = statement.clauses
    active = clauses["active"]
    arguments: dict[str, Any] = {"owner": clauses["owner"],
                                 "active_for_begin_dialog": True if active is None else switch(active, "ACTIVE")}
    if "new" in clauses:
        options = options_of(clauses["new"]["options"], {"SUBJECT": "subject", "START_DATE": "start_date",
                                                         "EXPIRY_DATE": "expiry_date"}, evaluator)
        if "subject" not in options:
            raise syntax_error("WITH")
        arguments["subject"] = _text(options["subject"], "SUBJECT")
        for moment in ("start_date", "expiry_date"):
            if moment in options:
                arguments[moment] = _moment(options[moment])
        if clauses["new"]["password"] is not None:
            arguments["encryption_password"] = _expression(clauses["new"], "password", evaluator, "PASSWORD")
    else:
        source = clauses["file"]
        arguments["certificate"] = _expression(source, "file", evaluator, "FILE")
        key = source["key"] or {}
        if key and "FILE" not in key:
            raise syntax_error("PRIVATE KEY")
        for clause, argument in (("FILE", "private_key"), ("DECRYPTION BY PASSWORD", "private_key_password"),
                                 ("ENCRYPTION BY PASSWORD", "encryption_password")):
            if clause in key:
                arguments[argument] = _expression(key, clause, evaluator, clause)
    db.create_certificate(statement.name[-1], **arguments)


def _backup_certificate(db: Broker, statement: n.Ddl, evaluator: Evaluator, _instance: Any) -> None:
    """TO FILE = ... [WITH PRIVATE KEY (FILE = ..., ENCRYPTION BY PASSWORD = ...)]; the
    private key is kept unencrypted, so a DECRYPTION BY PASSWORD has nothing to open."""
    key = statement.clauses["key"] or {}
    arguments: dict[str, Any] = {}
    if key:
        if "FILE" not in key or "ENCRYPTION BY PASSWORD" not in key:
            raise syntax_error("PRIVATE KEY")
        arguments = {"private_key_file": _expression(key, "FILE", evaluator, "FILE"),
                     "encryption_password": _expression(key, "ENCRYPTION BY PASSWORD", evaluator, "PASSWORD")}
    db.backup_certificate(statement.name[-1], _expression(statement, "file", evaluator, "FILE"), **arguments)


def _drop_certificate(db: Broker, statement: n.Ddl, _evaluator: Evaluator, _instance: Any) -> None:
    db.drop_certificate(statement.name[-1])


HANDLERS: dict[tuple[str, str], Callable[[Broker, n.Ddl, Evaluator, Any], None]] = {
    ("CREATE", "MASTER KEY"): _create_master_key,
    ("DROP", "MASTER KEY"): _drop_master_key,
    ("CREATE", "USER"): _create_user,
    ("DROP", "USER"): _drop_user,
    ("CREATE", "LOGIN"): _create_login,
    ("DROP", "LOGIN"): _drop_login,
    ("CREATE", "CERTIFICATE"): _create_certificate,
    ("BACKUP", "CERTIFICATE"): _backup_certificate,
    ("DROP", "CERTIFICATE"): _drop_certificate,
}
# The statements that change the instance (master's logins, the endpoint): never inside
# a user transaction (574), as SQL Server's endpoint DDL.
INSTANCE_KINDS = ("LOGIN", "ENDPOINT")


# -- GRANT / REVOKE --------------------------------------------------------------------------


def on_endpoint(statement: n.Permission) -> bool:
    """Whether a GRANT / REVOKE is the instance's (a permission on the endpoint)."""
    return statement.securable is not None and statement.securable[0] == "ENDPOINT"


def run_permission(db: Broker, statement: n.Permission, instance: Any | None) -> None:
    """Each permission to (or from) each principal: on the endpoint through the instance,
    on a service or the database through ``db``."""
    kind, name = statement.securable or ("DATABASE", None)
    if kind not in ("DATABASE", *_SECURABLES):
        raise SqlError(UNSUPPORTED, f"GRANT and REVOKE on {kind}:: are not supported here: permissions are kept "
                                    "for services, the endpoint and the database only (docs/sql.md).")
    for permission in statement.permissions:
        for principal in statement.principals:
            if kind == "ENDPOINT":
                inst = needs_instance(instance, "GRANT ... ON ENDPOINT")
                (inst.grant if statement.grant else inst.revoke)(permission, principal, endpoint=name)
            else:
                (db.grant if statement.grant else db.revoke)(permission, principal, service=name)

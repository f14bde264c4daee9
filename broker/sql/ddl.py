"""Service Broker DDL statements onto the ``Broker`` (and ``Instance``) object verbs.

Options are checked here for the statement's shape (which clauses it takes, each once),
with SQL Server's syntax error for anything else; the verbs then check the values as
they do for every caller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker.ddl.endpoint_options import NO_CERTIFICATE
from broker.sql import nodes as n
from broker.sql import values
from broker.sql.clauses import (
    DUPLICATE_OPTION,
    INCORRECT_SYNTAX,
    needs_instance,
    options_of,
    switch,
    syntax_error,
    value_of,
)
from broker.sql.errors import SqlError
from broker.sql.expressions import Evaluator
from broker.sql.security import HANDLERS as SECURITY_HANDLERS

if TYPE_CHECKING:
    from broker.database import Broker



def run_ddl(db: Broker, statement: n.Ddl, evaluator: Evaluator, instance: Any | None) -> None:
    handler = _HANDLERS.get((statement.verb, statement.kind))
    if handler is None:
        raise SqlError(INCORRECT_SYNTAX, f"Incorrect syntax near '{statement.kind}'.")
    handler(db, statement, evaluator, instance)


def _name(statement: n.Ddl) -> str:
    return statement.name[-1]


# -- message types, contracts, schema collections ------------------------------------------


def _create_message_type(db: Broker, statement: n.Ddl, _evaluator: Evaluator, _instance: Any) -> None:
    kind, collection = statement.clauses.get("validation") or ("NONE", None)
    _check_validation(kind, collection)
    db.create_message_type(_name(statement), validation=kind, schema_collection=collection)


def _alter_message_type(db: Broker, statement: n.Ddl, _evaluator: Evaluator, _instance: Any) -> None:
    kind, collection = statement.clauses["validation"]
    _check_validation(kind, collection)
    db.alter_message_type(_name(statement), validation=kind, schema_collection=collection)


def _check_validation(kind: str, collection: str | None) -> None:
    if kind not in ("NONE", "EMPTY", "WELL_FORMED_XML", "VALID_XML"):
        raise syntax_error(kind)
    if (kind == "VALID_XML") != (collection is not None):
        raise syntax_error(kind if collection is None else "WITH")


def _create_contract(db: Broker, statement: n.Ddl, _evaluator: Evaluator, _instance: Any) -> None:
    usages = statement.clauses["usages"]
    for _type, direction in usages:
        if direction not in ("INITIATOR", "TARGET", "ANY"):
            raise syntax_error(direction)
    db.create_contract(_name(statement), list(usages))


def _create_schema_collection(db: Broker, statement: n.Ddl, evaluator: Evaluator, _instance: Any) -> None:
    xsd = evaluator.value(statement.clauses["xsd"])
    if xsd is None:
        raise SqlError(6301, "The XML schema collection cannot be NULL.")
    db.create_xml_schema_collection(_name(statement), str(xsd) if not isinstance(xsd, bytes) else xsd)


# -- queues --------------------------------------------------------------------------------

_QUEUE_OPTIONS = {"STATUS": "status", "RETENTION": "retention", "POISON_MESSAGE_HANDLING": "poison_message_handling",
                  "ACTIVATION": "activation"}
_ACTIVATION_OPTIONS = {"STATUS": "status", "PROCEDURE_NAME": "procedure_name",
                       "MAX_QUEUE_READERS": "max_queue_readers", "EXECUTE AS": "execute_as"}


def _queue_options(statement: n.Ddl, evaluator: Evaluator) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for option in statement.clauses.get("options", []):
        keyword = _QUEUE_OPTIONS.get(option.name)
        if keyword is None:
            raise syntax_error(option.name)
        if keyword in found:
            raise SqlError(DUPLICATE_OPTION, f"'{option.name}' option is specified more than once.")
        nested = isinstance(option.value, list)
        if keyword == "activation":
            if not nested:
                raise syntax_error(option.name)
            found[keyword] = _activation(option.value, evaluator)
        elif keyword == "poison_message_handling":
            if not nested:
                raise syntax_error(option.name)
            inner = options_of(option.value, {"STATUS": "status"}, evaluator)
            found[keyword] = switch(inner.get("status", True), "STATUS")
        else:
            if nested:
                raise syntax_error("(")
            found[keyword] = switch(option.value, option.name)
    return found


def _activation(items: list[n.Option], evaluator: Evaluator) -> dict[str, Any] | None:
    if any(item.name == "DROP" for item in items):
        if len(items) != 1:
            raise syntax_error("DROP")
        return None
    options = options_of(items, _ACTIVATION_OPTIONS, evaluator)
    if "status" in options:
        options["status"] = switch(options["status"], "STATUS")
    if "procedure_name" in options:
        options["procedure_name"] = str(options["procedure_name"])
    if "execute_as" in options:
        options["execute_as"] = str(options["execute_as"])
    return options


def _create_queue(db: Broker, statement: n.Ddl, evaluator: Evaluator, _instance: Any) -> None:
    db.create_queue(_name(statement), **_queue_options(statement, evaluator))


def _alter_queue(db: Broker, statement: n.Ddl, evaluator: Evaluator, _instance: Any) -> None:
    if statement.clauses.get("storage"):
        return  # REBUILD / REORGANIZE / MOVE TO: the storage is the database's own (docs/sql.md)
    db.alter_queue(_name(statement), **_queue_options(statement, evaluator))


# -- services, routes, bindings, priorities -------------------------------------------------


def _create_service(db: Broker, statement: n.Ddl, _evaluator: Evaluator, _instance: Any) -> None:
    db.create_service(_name(statement), statement.clauses["queue"][-1], statement.clauses["contracts"])


def _alter_service(db: Broker, statement: n.Ddl, _evaluator: Evaluator, _instance: Any) -> None:
    queue = statement.clauses["queue"]
    changes = statement.clauses["changes"]
    db.alter_service(_name(statement), queue=None if queue is None else queue[-1],
                     add_contracts=[name for verb, name in changes if verb == "ADD"],
                     drop_contracts=[name for verb, name in changes if verb == "DROP"])


_ROUTE_OPTIONS = {"SERVICE_NAME": "service_name", "BROKER_INSTANCE": "broker_instance", "LIFETIME": "lifetime",
                  "ADDRESS": "address", "MIRROR_ADDRESS": "mirror_address"}


def _create_route(db: Broker, statement: n.Ddl, evaluator: Evaluator, _instance: Any) -> None:
    options = options_of(statement, _ROUTE_OPTIONS, evaluator)
    if "address" not in options:
        raise syntax_error(statement.clauses["options"][-1].name if statement.clauses.get("options") else "WITH")
    address = options.pop("address")
    db.create_route(_name(statement), address, **options)


def _alter_route(db: Broker, statement: n.Ddl, evaluator: Evaluator, _instance: Any) -> None:
    db.alter_route(_name(statement), **options_of(statement, _ROUTE_OPTIONS, evaluator))


_BINDING_OPTIONS = {"USER": "user", "ANONYMOUS": "anonymous"}


def _create_binding(db: Broker, statement: n.Ddl, evaluator: Evaluator, _instance: Any) -> None:
    options = options_of(statement, _BINDING_OPTIONS, evaluator)
    if "user" not in options:
        raise syntax_error("WITH")
    anonymous = switch(options.get("anonymous", False), "ANONYMOUS")
    db.create_remote_service_binding(_name(statement), evaluator.value(statement.clauses["service"]),
                                     str(options["user"]), anonymous=anonymous)


def _alter_binding(db: Broker, statement: n.Ddl, evaluator: Evaluator, _instance: Any) -> None:
    options = options_of(statement, _BINDING_OPTIONS, evaluator)
    if "anonymous" in options:
        options["anonymous"] = switch(options["anonymous"], "ANONYMOUS")
    if "user" in options:
        options["user"] = str(options["user"])
    db.alter_remote_service_binding(_name(statement), **options)


_PRIORITY_OPTIONS = {"CONTRACT_NAME": "contract_name", "LOCAL_SERVICE_NAME": "local_service_name",
                     "REMOTE_SERVICE_NAME": "remote_service_name", "PRIORITY_LEVEL": "priority_level"}


def _priority_options(statement: n.Ddl, evaluator: Evaluator) -> dict[str, Any]:
    options = options_of(statement, _PRIORITY_OPTIONS, evaluator)
    return {name: (str(value) if name != "priority_level" or not isinstance(value, int) else value)
            for name, value in options.items()}


def _create_priority(db: Broker, statement: n.Ddl, evaluator: Evaluator, _instance: Any) -> None:
    db.create_broker_priority(_name(statement), **_priority_options(statement, evaluator))


def _alter_priority(db: Broker, statement: n.Ddl, evaluator: Evaluator, _instance: Any) -> None:
    db.alter_broker_priority(_name(statement), **_priority_options(statement, evaluator))


# -- ALTER DATABASE ------------------------------------------------------------------------


def _alter_database(db: Broker, statement: n.Ddl, _evaluator: Evaluator, _instance: Any) -> None:
    setting = statement.clauses["setting"]
    switch = statement.clauses.get("switch")
    if setting == "ENABLE_BROKER":
        db.set_broker_enabled(True)
    elif setting == "DISABLE_BROKER":
        db.set_broker_enabled(False)
    elif setting == "NEW_BROKER":
        db.new_broker()
    elif setting == "ERROR_BROKER_CONVERSATIONS":
        db.error_broker_conversations()
    elif setting == "HONOR_BROKER_PRIORITY" and switch is not None:
        db.set_honor_broker_priority(switch)
    elif setting == "TRUSTWORTHY" and switch is not None:
        pass  # permissions between databases are not modelled (docs/sql.md)
    else:
        raise syntax_error(setting)


# -- endpoints (the instance's) --------------------------------------------------------------


def _endpoint_options(statement: n.Ddl, evaluator: Evaluator, instance: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    transport = {option.name: value_of(option.value, evaluator) for option in statement.clauses["transport"]}
    for name in transport:
        if name not in ("LISTENER_PORT", "LISTENER_IP"):
            raise syntax_error(name)
    if "LISTENER_PORT" in transport:
        found["port"] = values.convert(transport["LISTENER_PORT"], n.TypeName("INT"))
    if "LISTENER_IP" in transport:
        found["listener_ip"] = str(transport["LISTENER_IP"])
    for option in statement.clauses["broker"]:
        words = option.value if isinstance(option.value, tuple) else (option.value,)
        first = value_of(words[0], evaluator)
        if option.name == "ENCRYPTION":
            found["encryption"] = str(first).upper()
        elif option.name == "MESSAGE_FORWARDING":
            found["message_forwarding"] = str(first).upper() == "ENABLED"
        elif option.name == "MESSAGE_FORWARD_SIZE":
            found["message_forward_size"] = values.convert(first, n.TypeName("INT"))
        elif option.name == "AUTHENTICATION":
            found.update(_authentication([str(value_of(word, evaluator)) for word in words], instance))
    if statement.clauses.get("state"):
        found["state"] = statement.clauses["state"]
    return found


def _authentication(words: list[str], instance: Any) -> dict[str, bytes]:
    """AUTHENTICATION = CERTIFICATE c (possibly beside WINDOWS ...): the certificate of
    master c and its private key, which the endpoint presents. WINDOWS alone is 59050:
    there is no Windows authentication here (docs/sql.md)."""
    upper = [word.upper() for word in words]
    if "CERTIFICATE" not in upper or upper.index("CERTIFICATE") + 1 >= len(words):
        raise _no_windows(" ".join(words))
    name = words[upper.index("CERTIFICATE") + 1]
    stored = needs_instance(instance, "CREATE ENDPOINT").msdb.certificate(name)
    if stored.private_key is None:
        raise SqlError(NO_CERTIFICATE, f"The certificate '{name}' has no private key: an endpoint presents a "
                                       "certificate of master that has one (CREATE CERTIFICATE ... WITH SUBJECT, "
                                       "or FROM FILE ... WITH PRIVATE KEY).")
    return {"certificate": stored.certificate, "private_key": stored.private_key}


def _no_windows(authentication: str) -> SqlError:
    return SqlError(NO_CERTIFICATE, f"AUTHENTICATION = {authentication}: there is no Windows authentication here; "
                                    "an endpoint authenticates with a certificate of master and its private key: "
                                    "AUTHENTICATION = CERTIFICATE certificate_name.")


def _create_endpoint(_db: Broker, statement: n.Ddl, evaluator: Evaluator, instance: Any) -> None:
    needs_instance(instance, "CREATE ENDPOINT")
    options = _endpoint_options(statement, evaluator, instance)
    if "port" not in options:
        raise syntax_error("LISTENER_PORT")
    if "certificate" not in options:
        raise _no_windows("WINDOWS (the default)")
    port = options.pop("port")
    instance.create_endpoint(_name(statement), port, **options)


def _alter_endpoint(_db: Broker, statement: n.Ddl, evaluator: Evaluator, instance: Any) -> None:
    needs_instance(instance, "ALTER ENDPOINT")
    instance.alter_endpoint(_name(statement), **_endpoint_options(statement, evaluator, instance))


# -- DROP ----------------------------------------------------------------------------------


def _drop(verb: Callable[[Broker, str], None]) -> Callable[[Broker, n.Ddl, Evaluator, Any], None]:
    return lambda db, statement, _evaluator, _instance: verb(db, _name(statement))


def _drop_endpoint(_db: Broker, statement: n.Ddl, _evaluator: Evaluator, instance: Any) -> None:
    needs_instance(instance, f"{statement.verb} ENDPOINT").drop_endpoint(_name(statement))


_HANDLERS: dict[tuple[str, str], Callable[[Broker, n.Ddl, Evaluator, Any], None]] = {
    ("CREATE", "MESSAGE TYPE"): _create_message_type,
    ("ALTER", "MESSAGE TYPE"): _alter_message_type,
    ("CREATE", "CONTRACT"): _create_contract,
    ("CREATE", "XML SCHEMA COLLECTION"): _create_schema_collection,
    ("CREATE", "QUEUE"): _create_queue,
    ("ALTER", "QUEUE"): _alter_queue,
    ("CREATE", "SERVICE"): _create_service,
    ("ALTER", "SERVICE"): _alter_service,
    ("CREATE", "ROUTE"): _create_route,
    ("ALTER", "ROUTE"): _alter_route,
    ("CREATE", "REMOTE SERVICE BINDING"): _create_binding,
    ("ALTER", "REMOTE SERVICE BINDING"): _alter_binding,
    ("CREATE", "BROKER PRIORITY"): _create_priority,
    ("ALTER", "BROKER PRIORITY"): _alter_priority,
    ("CREATE", "ENDPOINT"): _create_endpoint,
    ("ALTER", "ENDPOINT"): _alter_endpoint,
    ("ALTER", "DATABASE"): _alter_database,
    ("DROP", "MESSAGE TYPE"): _drop(lambda db, name: db.drop_message_type(name)),
    ("DROP", "CONTRACT"): _drop(lambda db, name: db.drop_contract(name)),
    ("DROP", "QUEUE"): _drop(lambda db, name: db.drop_queue(name)),
    ("DROP", "SERVICE"): _drop(lambda db, name: db.drop_service(name)),
    ("DROP", "ROUTE"): _drop(lambda db, name: db.drop_route(name)),
    ("DROP", "REMOTE SERVICE BINDING"): _drop(lambda db, name: db.drop_remote_service_binding(name)),
    ("DROP", "BROKER PRIORITY"): _drop(lambda db, name: db.drop_broker_priority(name)),
    ("DROP", "ENDPOINT"): _drop_endpoint,
    **SECURITY_HANDLERS,
}

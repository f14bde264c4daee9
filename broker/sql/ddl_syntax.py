"""The DDL part of the tree-to-``nodes`` transformer: Service Broker's objects, the
instance's endpoint and databases, and security (master keys, users, logins,
certificates, permissions). Each statement becomes an ``n.Ddl`` with its clauses by name,
or an ``n.Permission``; ``broker.sql.ddl`` and ``broker.sql.security`` run them."""

from __future__ import annotations

from typing import Any

from lark import Token, v_args

from broker.sql import nodes as n
from broker.sql.errors import SqlError
from broker.sql.syntax import Builder, Clause, Name, ObjectName, line_of, of_type, statement, token_kinds


class DdlBuild(Builder):
    """One method per DDL rule of the grammar that is not inlined."""

    @v_args(meta=True)
    def option(self, meta: Any, children: list[Any]) -> n.Option:
        return n.Option(str(children[0]).upper(), children[1], line_of(meta, self.offset))

    plain_option = option

    @v_args(meta=True)
    def nested_option(self, meta: Any, children: list[Any]) -> n.Option:
        return n.Option(str(children[0]).upper(), [child for child in children[1:] if child is not None],
                        line_of(meta, self.offset))

    @v_args(meta=True)
    def execute_as(self, meta: Any, children: list[Any]) -> n.Option:
        return n.Option("EXECUTE AS", children[-1], line_of(meta, self.offset))

    @v_args(meta=True)
    def drop_activation(self, meta: Any, _children: list[Any]) -> n.Option:
        return n.Option("DROP", True, line_of(meta, self.offset))

    @v_args(meta=True)
    def endpoint_option(self, meta: Any, children: list[Any]) -> n.Option:
        words = children[1:]
        value = words[0] if len(words) == 1 else tuple(words)
        return n.Option(str(children[0]).upper(), value, line_of(meta, self.offset))

    def dotted_option(self, children: list[Any]) -> Name:
        return Name(".".join(str(child) for child in children))

    def parenthesised(self, children: list[Any]) -> Any:
        return children[0]

    def ipv4(self, children: list[Token]) -> n.Literal:
        return n.Literal(str(children[0]))

    def validation(self, children: list[Any]) -> tuple[str, str | None]:
        names = of_type(children, Name)
        return str(names[0]).upper(), (str(names[1]) if len(names) > 1 else None)

    def contract_usage(self, children: list[Any]) -> tuple[str, str]:
        names = of_type(children, Name)
        return str(names[0]), str(names[1]).upper()

    def service_change(self, children: list[Any]) -> tuple[str, str]:
        return str(children[0]).upper(), str(children[-1])

    def drop_kind(self, children: list[Token]) -> str:
        return " ".join(str(child).upper() for child in children)

    def _ddl(self, verb: str, kind: str, children: list[Any], **clauses: Any) -> n.Ddl:
        name = next(child for child in children if isinstance(child, (Name, ObjectName)))
        parts = tuple(name) if isinstance(name, ObjectName) else (str(name),)
        options = [child for child in children if isinstance(child, n.Option)]
        return n.Ddl(verb, kind, parts, {"options": options, **clauses})

    @statement
    def create_message_type(self, children: list[Any], _meta: Any) -> n.Ddl:
        validation = next((child for child in children if isinstance(child, tuple)
                           and not isinstance(child, ObjectName)), None)
        return self._ddl("CREATE", "MESSAGE TYPE", children, validation=validation)

    @statement
    def alter_message_type(self, children: list[Any], _meta: Any) -> n.Ddl:
        validation = next(child for child in children
                          if isinstance(child, tuple) and not isinstance(child, ObjectName))
        return self._ddl("ALTER", "MESSAGE TYPE", children, validation=validation)

    @statement
    def create_contract(self, children: list[Any], _meta: Any) -> n.Ddl:
        usages = [child for child in children if isinstance(child, tuple) and not isinstance(child, ObjectName)]
        return self._ddl("CREATE", "CONTRACT", children, usages=usages)

    @statement
    def create_queue(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._ddl("CREATE", "QUEUE", children)

    @statement
    def alter_queue(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._ddl("ALTER", "QUEUE", children)

    @statement
    def alter_queue_storage(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._ddl("ALTER", "QUEUE", children, storage=True)

    @statement
    def create_service(self, children: list[Any], _meta: Any) -> n.Ddl:
        names = [str(child) for child in children if isinstance(child, Name)]
        queue = next(child for child in children if isinstance(child, ObjectName))
        owner = 1 if "AUTHORIZATION" in token_kinds(children) else 0
        return n.Ddl("CREATE", "SERVICE", (names[0],), {"queue": tuple(queue), "contracts": names[1 + owner:]})

    @statement
    def alter_service(self, children: list[Any], _meta: Any) -> n.Ddl:
        names = [str(child) for child in children if isinstance(child, Name)]
        queue = next((tuple(child) for child in children if isinstance(child, ObjectName)), None)
        changes = [child for child in children if isinstance(child, tuple) and not isinstance(child, ObjectName)]
        return n.Ddl("ALTER", "SERVICE", (names[0],), {"queue": queue, "changes": changes})

    @statement
    def create_route(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._ddl("CREATE", "ROUTE", children)

    @statement
    def alter_route(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._ddl("ALTER", "ROUTE", children)

    @statement
    def create_binding(self, children: list[Any], _meta: Any) -> n.Ddl:
        service = next(child for child in children if isinstance(child, n.Expr))
        return self._ddl("CREATE", "REMOTE SERVICE BINDING", children, service=service)

    @statement
    def alter_binding(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._ddl("ALTER", "REMOTE SERVICE BINDING", children)

    @statement
    def create_priority(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._ddl("CREATE", "BROKER PRIORITY", children)

    @statement
    def alter_priority(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._ddl("ALTER", "BROKER PRIORITY", children)

    @statement
    def create_endpoint(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._endpoint("CREATE", children)

    @statement
    def alter_endpoint(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._endpoint("ALTER", children)

    def _endpoint(self, verb: str, children: list[Any]) -> n.Ddl:
        names = [str(child) for child in children if isinstance(child, Name)]
        kinds = [child.type for child in children if isinstance(child, Token)]
        state = None
        if "STATE" in kinds:
            state = names[2 if "AUTHORIZATION" in kinds else 1].upper()
        transport = [child for child in children if isinstance(child, n.Option) and not _is_broker_option(child)]
        broker = [child for child in children if isinstance(child, n.Option) and _is_broker_option(child)]
        protocols = [name.upper() for name in names if name.upper() in ("TCP", "HTTP", "SERVICE_BROKER",
                                                                         "DATABASE_MIRRORING", "TSQL")]
        return n.Ddl(verb, "ENDPOINT", (names[0],), {"state": state, "transport": transport, "broker": broker,
                                                    "protocols": protocols})

    @statement
    def create_schema_collection(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._ddl("CREATE", "XML SCHEMA COLLECTION", children, xsd=children[-1])

    def termination(self, children: list[Any]) -> Name:
        return Name(" ".join(str(child) for child in children if child is not None))

    @statement
    def create_database(self, children: list[Any], _meta: Any) -> n.Ddl:
        return n.Ddl("CREATE", "DATABASE", (str(of_type(children, Name)[0]),))

    @statement
    def alter_database(self, children: list[Any], _meta: Any) -> n.Ddl:
        names = [str(child) for child in children if isinstance(child, Name)]
        switch = next((child for child in children if isinstance(child, bool)), None)
        return n.Ddl("ALTER", "DATABASE", (names[0],), {"setting": names[1].upper(), "switch": switch,
                                                       "termination": " ".join(names[2:]).upper() or None})

    @statement
    def drop(self, children: list[Any], _meta: Any) -> n.Ddl:
        kind = next(child for child in children if isinstance(child, str) and not isinstance(child, (Name, Token)))
        name = next(child for child in children if isinstance(child, ObjectName))
        return n.Ddl("DROP", "PROCEDURE" if kind == "PROC" else kind, tuple(name))


    # -- security ------------------------------------------------------------------------------

    @statement
    def create_master_key(self, children: list[Any], _meta: Any) -> n.Ddl:
        return n.Ddl("CREATE", "MASTER KEY", (), {"password": children[-1]})

    @statement
    def drop_master_key(self, _children: list[Any], _meta: Any) -> n.Ddl:
        return n.Ddl("DROP", "MASTER KEY", ())

    def without_login(self, _children: list[Any]) -> Clause:
        return Clause("source", {})

    def for_login(self, children: list[Any]) -> Clause:
        return Clause("source", {"login": str(children[-1])})

    def from_certificate(self, children: list[Any]) -> Clause:
        return Clause("source", {"certificate": str(children[-1])})

    @statement
    def create_user(self, children: list[Any], _meta: Any) -> n.Ddl:
        source = next((child.value for child in of_type(children, Clause)), None)
        return n.Ddl("CREATE", "USER", (str(of_type(children, Name)[0]),),
                     {"source": source, "options": of_type(children, n.Option)})

    @statement
    def create_login_from_certificate(self, children: list[Any], _meta: Any) -> n.Ddl:
        name, certificate = of_type(children, Name)
        return n.Ddl("CREATE", "LOGIN", (str(name),), {"certificate": str(certificate), "options": []})

    @statement
    def create_login_with_password(self, children: list[Any], _meta: Any) -> n.Ddl:
        password = next(child for child in children if isinstance(child, n.Expr))
        return n.Ddl("CREATE", "LOGIN", (str(of_type(children, Name)[0]),),
                     {"password": password, "options": of_type(children, n.Option)})

    def new_certificate(self, children: list[Any]) -> Clause:
        return Clause("new", {"password": next((child for child in children if isinstance(child, n.Expr)), None),
                              "options": of_type(children, n.Option)})

    def certificate_file(self, children: list[Any]) -> Clause:
        return Clause("file", {"file": next(child for child in children if isinstance(child, n.Expr)),
                               "key": next(iter(of_type(children, dict)), None)})

    @v_args(meta=True)
    def private_key(self, meta: Any, children: list[Any]) -> dict[str, n.Expr]:
        """WITH PRIVATE KEY (FILE = ..., ENCRYPTION | DECRYPTION BY PASSWORD = ...), each once (1055)."""
        found: dict[str, n.Expr] = {}
        for name, value in (child for child in children if isinstance(child, tuple)):
            if name in found:
                raise SqlError(1055, f"'{name}' option is specified more than once.", line=line_of(meta, self.offset))
            found[name] = value
        return found

    def key_file(self, children: list[Any]) -> tuple[str, n.Expr]:
        return "FILE", children[-1]

    def key_encryption(self, children: list[Any]) -> tuple[str, n.Expr]:
        return "ENCRYPTION BY PASSWORD", children[-1]

    def key_decryption(self, children: list[Any]) -> tuple[str, n.Expr]:
        return "DECRYPTION BY PASSWORD", children[-1]

    @statement
    def create_certificate(self, children: list[Any], _meta: Any) -> n.Ddl:
        names = of_type(children, Name)
        owner = str(names[1]) if "AUTHORIZATION" in token_kinds(children) else None
        source = of_type(children, Clause)[0]
        active = next((child for child in children if isinstance(child, bool)), None)
        return n.Ddl("CREATE", "CERTIFICATE", (str(names[0]),),
                     {"owner": owner, source.name: source.value, "active": active})

    @statement
    def backup_certificate(self, children: list[Any], _meta: Any) -> n.Ddl:
        return n.Ddl("BACKUP", "CERTIFICATE", (str(of_type(children, Name)[0]),),
                     {"file": next(child for child in children if isinstance(child, n.Expr)),
                      "key": next(iter(of_type(children, dict)), None)})

    def permission(self, children: list[Any]) -> Clause:
        return Clause("permission", " ".join(str(child).upper() for child in children if child is not None))

    def securable(self, children: list[Any]) -> Clause:
        kind, name = of_type(children, Name)
        return Clause("securable", (kind.upper(), str(name)))

    @statement
    def grant(self, children: list[Any], _meta: Any) -> n.Permission:
        return _permission(children, grant=True)

    @statement
    def revoke(self, children: list[Any], _meta: Any) -> n.Permission:
        return _permission(children, grant=False)


def _permission(children: list[Any], *, grant: bool) -> n.Permission:
    """GRANT / REVOKE: the permissions, the securable, and the principals named after TO
    (or FROM) up to WITH GRANT OPTION, CASCADE or AS."""
    clauses = of_type(children, Clause)
    securable = next((clause.value for clause in clauses if clause.name == "securable"), None)
    to = next(index for index, child in enumerate(children)
              if isinstance(child, Token) and child.type in ("TO", "FROM"))
    principals: list[str] = []
    for child in children[to + 1:]:
        if not isinstance(child, Name):
            break
        principals.append(str(child))
    return n.Permission(grant, [clause.value for clause in clauses if clause.name == "permission"], securable,
                        principals)


_BROKER_OPTIONS = {"AUTHENTICATION", "ENCRYPTION", "MESSAGE_FORWARDING", "MESSAGE_FORWARD_SIZE"}


def _is_broker_option(option: n.Option) -> bool:
    return option.name in _BROKER_OPTIONS

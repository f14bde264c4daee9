"""Master keys, users, logins and permissions: SQL Server's security statements as the
broker keeps them (CREATE / DROP MASTER KEY, USER, LOGIN; GRANT / REVOKE).

Each function runs in the caller's transaction. Users and permissions belong to a
database; logins and permissions on an endpoint to an instance catalog (master). They
are kept for the catalog views and for what decides an endpoint's trust
(``certificate_store.trusted_by``); nothing checks a permission when a statement runs
(docs/sql.md). Names compare without regard to case, as SQL Server's default collation
does.
"""

from __future__ import annotations

import uuid
from typing import cast

from sqlalchemy import Column, ColumnElement, Table, delete, func, insert, select

from broker.ddl.names import row_named
from broker.errors import BrokerError
from broker.storage.context import TxContext
from broker.storage.models import (
    Certificate,
    DatabasePrincipal,
    Permission,
    ServerPrincipal,
    ServiceBrokerEndpoint,
    SymmetricKey,
)

_users = cast(Table, DatabasePrincipal.__table__)
_logins = cast(Table, ServerPrincipal.__table__)
_permissions = cast(Table, Permission.__table__)
_keys = cast(Table, SymmetricKey.__table__)
_certificates = cast(Table, Certificate.__table__)
_endpoints = cast(Table, ServiceBrokerEndpoint.__table__)

MASTER_KEY = "##MS_DatabaseMasterKey##"
MASTER_KEY_ID = 101
NO_MASTER_KEY = 15581
# The principals every database and every instance has, by name (case-folded) and id.
BUILTIN_USERS = {"public": 0, "dbo": 1, "guest": 2, "information_schema": 3, "sys": 4}
BUILTIN_LOGINS = {"sa": 1, "public": 2}
FIRST_USER_ID, FIRST_LOGIN_ID = 5, 256
# Securable classes (sys.database_permissions / sys.server_permissions) and the
# permissions each takes here, with SQL Server's codes.
DATABASE, SERVICE, ENDPOINT = 0, 17, 105
PERMISSIONS: dict[int, dict[str, str]] = {
    DATABASE: {"CONNECT": "CO", "CONTROL": "CL", "ALTER": "AL", "VIEW DEFINITION": "VW"},
    SERVICE: {"SEND": "SN", "CONTROL": "CL", "ALTER": "AL", "TAKE OWNERSHIP": "TO", "VIEW DEFINITION": "VW",
              "REFERENCES": "RF"},
    ENDPOINT: {"CONNECT": "CO", "CONTROL": "CL", "ALTER": "AL", "TAKE OWNERSHIP": "TO", "VIEW DEFINITION": "VW"},
}


def _key(name: str) -> str:
    return name.casefold()


# -- the database master key ------------------------------------------------------------------


def has_master_key(ctx: TxContext) -> bool:
    return ctx.conn.execute(select(_keys.c.symmetric_key_id)).first() is not None


def create_master_key(ctx: TxContext) -> None:
    """CREATE MASTER KEY (15578 if the database has one)."""
    if has_master_key(ctx):
        raise BrokerError(15578, "There is already a master key in the database. Please drop it before performing "
                                 "this statement.")
    now = ctx.now()
    ctx.conn.execute(insert(_keys).values(symmetric_key_id=MASTER_KEY_ID, name=MASTER_KEY, key_guid=uuid.uuid4(),
                                          create_date=now, modify_date=now))


def drop_master_key(ctx: TxContext) -> None:
    """DROP MASTER KEY: 15151 without one, 15580 while a certificate's private key is
    encrypted by it."""
    if not has_master_key(ctx):
        raise BrokerError(15151, kind="symmetric key", name="master key")
    encrypted = ctx.conn.execute(select(_certificates.c.name).where(_certificates.c.pvt_key_encryption_type == "MK")
                                 .order_by(_certificates.c.certificate_id)).scalars().first()
    if encrypted is not None:
        raise BrokerError(15580, f"Cannot drop master key because certificate '{encrypted}' is encrypted by it.")
    ctx.conn.execute(delete(_keys))


# -- users (database principals) --------------------------------------------------------------


def user_id(ctx: TxContext, name: str) -> int | None:
    """The principal id of user ``name`` (a built-in one too), or None."""
    if _key(name) in BUILTIN_USERS:
        return BUILTIN_USERS[_key(name)]
    found: int | None = ctx.conn.execute(select(_users.c.principal_id).where(_users.c.name_key == _key(name))).scalar()
    return found


def create_user(ctx: TxContext, name: str, *, login: str | None, certificate: str | None) -> None:
    """CREATE USER name [FOR LOGIN login | FROM CERTIFICATE certificate | WITHOUT LOGIN]
    (neither given: WITHOUT LOGIN). 15023 if the name is taken, 15151 for a certificate
    the database does not have."""
    if user_id(ctx, name) is not None:
        raise BrokerError(15023, f"User, group, or role '{name}' already exists in the current database.")
    certificate_id = None if certificate is None else certificate_id_of(ctx, certificate)
    now = ctx.now()
    ctx.conn.execute(insert(_users).values(
        principal_id=_next(ctx, _users.c.principal_id, FIRST_USER_ID), name_key=_key(name), name=name,
        type="S" if certificate is None else "C", login_name=login, certificate_id=certificate_id,
        create_date=now, modify_date=now))


def drop_user(ctx: TxContext, name: str) -> None:
    """DROP USER (15151 if there is none; 15138 while it owns a certificate). Its
    permissions go with it."""
    principal = ctx.conn.execute(select(_users.c.principal_id).where(_users.c.name_key == _key(name))).scalar()
    if principal is None:
        raise BrokerError(15151, f"Cannot drop the user '{name}', because it does not exist or you do not have "
                                 "permission.")
    if ctx.conn.execute(select(_certificates.c.certificate_id).where(_certificates.c.principal_id == principal)
                        ).first() is not None:
        raise BrokerError(15138, "The database principal owns a certificate in the database, and cannot be "
                                 "dropped.")
    ctx.conn.execute(delete(_permissions).where(_permissions.c["class"] != ENDPOINT,
                                                _permissions.c.grantee_principal_id == principal))
    ctx.conn.execute(delete(_users).where(_users.c.principal_id == principal))


# -- logins (server principals, in an instance catalog) ---------------------------------------


def login_id(ctx: TxContext, name: str) -> int | None:
    """The principal id of login ``name`` (sa and public too), or None."""
    if _key(name) in BUILTIN_LOGINS:
        return BUILTIN_LOGINS[_key(name)]
    found: int | None = ctx.conn.execute(select(_logins.c.principal_id)
                                         .where(_logins.c.name_key == _key(name))).scalar()
    return found


def create_login(ctx: TxContext, name: str, *, certificate: str | None) -> None:
    """CREATE LOGIN name WITH PASSWORD = ... | FROM CERTIFICATE certificate (a certificate
    of master, 15151 otherwise). 15025 if the name is taken."""
    if login_id(ctx, name) is not None:
        raise BrokerError(15025, f"The server principal '{name}' already exists.")
    certificate_id = None if certificate is None else certificate_id_of(ctx, certificate)
    now = ctx.now()
    ctx.conn.execute(insert(_logins).values(
        principal_id=_next(ctx, _logins.c.principal_id, FIRST_LOGIN_ID), name_key=_key(name), name=name,
        type="S" if certificate is None else "C", certificate_id=certificate_id, create_date=now, modify_date=now))


def drop_login(ctx: TxContext, name: str) -> None:
    """DROP LOGIN (15151 if there is none); its permissions on endpoints go with it. Users
    mapped to it stay, as in SQL Server (orphaned)."""
    principal = ctx.conn.execute(select(_logins.c.principal_id).where(_logins.c.name_key == _key(name))).scalar()
    if principal is None:
        raise BrokerError(15151, f"Cannot drop the login '{name}', because it does not exist or you do not have "
                                 "permission.")
    ctx.conn.execute(delete(_permissions).where(_permissions.c["class"] == ENDPOINT,
                                                _permissions.c.grantee_principal_id == principal))
    ctx.conn.execute(delete(_logins).where(_logins.c.principal_id == principal))


# -- permissions ------------------------------------------------------------------------------


def grant(ctx: TxContext, permission: str, securable: tuple[int, str | None], grantee: str) -> None:
    """GRANT permission [ON class::name] TO grantee (granted again: no change)."""
    row = _permission(ctx, permission, securable, grantee)
    exists = ctx.conn.execute(select(_permissions.c.type).where(*_matching(row))).first()
    if exists is None:
        ctx.conn.execute(insert(_permissions).values(**row))


def revoke(ctx: TxContext, permission: str, securable: tuple[int, str | None], grantee: str) -> None:
    """REVOKE permission [ON class::name] FROM grantee (nothing granted: no change)."""
    ctx.conn.execute(delete(_permissions).where(*_matching(_permission(ctx, permission, securable, grantee))))


def _permission(ctx: TxContext, permission: str, securable: tuple[int, str | None], grantee: str) -> dict[str, object]:
    """The row of a permission: its securable and grantee found (15151 otherwise), the
    permission one the securable's class takes (102 otherwise)."""
    kind, name = securable
    codes = PERMISSIONS[kind]
    if permission not in codes:
        raise BrokerError(102, f"Incorrect syntax near '{permission}'. The permissions on "
                               f"{'the database' if kind == DATABASE else _CLASS_NAMES[kind]} are "
                               f"{', '.join(codes)}.")
    major = 0 if name is None else _securable_id(ctx, kind, name)
    principal = login_id(ctx, grantee) if kind == ENDPOINT else user_id(ctx, grantee)
    if principal is None:
        raise BrokerError(15151, kind="login" if kind == ENDPOINT else "user", name=grantee)
    return {"class": kind, "major_id": major, "grantee_principal_id": principal, "type": codes[permission],
            "permission_name": permission}


_CLASS_NAMES = {SERVICE: "service", ENDPOINT: "endpoint"}


def _securable_id(ctx: TxContext, kind: int, name: str) -> int:
    if kind == SERVICE:
        service = ctx.catalog.services_by_name.get(name)
        if service is not None:
            return service.id
    else:
        found = row_named(ctx, _endpoints, name)
        if found is not None:
            return int(found.endpoint_id)
    raise BrokerError(15151, kind=_CLASS_NAMES[kind], name=name)


def drop_permissions_on(ctx: TxContext, kind: int, major_id: int) -> None:
    """The securable ``major_id`` of class ``kind`` is gone, and so are the permissions on it."""
    ctx.conn.execute(delete(_permissions).where(_permissions.c["class"] == kind, _permissions.c.major_id == major_id))


def _matching(row: dict[str, object]) -> list[ColumnElement[bool]]:
    return [_permissions.c["class"] == row["class"], _permissions.c.major_id == row["major_id"],
            _permissions.c.grantee_principal_id == row["grantee_principal_id"], _permissions.c.type == row["type"]]


# -- shared -----------------------------------------------------------------------------------


def certificate_id_of(ctx: TxContext, name: str) -> int:
    """The id of certificate ``name`` (15151 if there is none)."""
    found = ctx.conn.execute(select(_certificates.c.certificate_id).where(_certificates.c.name_key == _key(name))
                             ).scalar()
    if found is None:
        raise BrokerError(15151, kind="certificate", name=name)
    return int(found)


def _next(ctx: TxContext, column: Column[int], first: int) -> int:
    highest: int | None = ctx.conn.execute(select(func.max(column))).scalar()
    return max((highest or 0) + 1, first)

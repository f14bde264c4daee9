"""CREATE / ALTER / DROP ROUTE and REMOTE SERVICE BINDING (spec 1.6, 1.7).

Routes are rows of ``sb_routes`` in a database (for the conversations that begin there)
or in the instance catalog (for messages arriving from outside, ``broker.instance``).
Each function runs in the caller's transaction, checks everything before it writes and
ends with ``ctx.catalog_changed()``: routes are part of the catalog snapshot that every
SEND routes with.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

from sqlalchemy import Table, delete, insert, select, update

from broker.ddl.names import row_named
from broker.ddl.objects import next_id
from broker.errors import BrokerError, InvalidArgumentError
from broker.routing.addresses import LOCAL, TRANSPORT, checked_address
from broker.storage.context import TxContext
from broker.storage.models import RemoteServiceBinding, Route

routes = cast(Table, Route.__table__)
bindings = cast(Table, RemoteServiceBinding.__table__)

# Route clause -> column of sb_routes.
_COLUMNS = {"service_name": "remote_service_name", "broker_instance": "broker_instance", "lifetime": "lifetime",
            "address": "address", "mirror_address": "mirror_address"}


def create_route(ctx: TxContext, name: str, clauses: dict[str, Any]) -> None:
    """CREATE ROUTE name WITH ...: ``clauses`` come checked by the gate (``arguments.route_options``)."""
    if row_named(ctx, routes, name) is not None:
        raise BrokerError(2714, name=name)
    values = _checked({**dict.fromkeys(_COLUMNS), **clauses}, ctx)
    ctx.conn.execute(insert(routes).values(route_id=next_id(ctx, routes.c.route_id), name=name, **values))
    ctx.catalog_changed()


def alter_route(ctx: TxContext, name: str, clauses: dict[str, Any]) -> None:
    """ALTER ROUTE name WITH ...: only the clauses given change; none can go back to
    "any" or "never expires" (drop and create the route for that)."""
    row = row_named(ctx, routes, name)
    if row is None:
        raise BrokerError(15151, kind="route", name=name)
    current = {clause: getattr(row, column) for clause, column in _COLUMNS.items()}
    current["lifetime"] = None  # kept as it is unless given
    given = {clause: value for clause, value in clauses.items() if value is not None}
    values = _checked({**current, **given}, ctx)
    changed = {column: values[column] for clause, column in _COLUMNS.items() if clause in given}
    ctx.conn.execute(update(routes).where(routes.c.route_id == row.route_id).values(**changed))
    ctx.catalog_changed()


def drop_route(ctx: TxContext, name: str) -> None:
    """DROP ROUTE name."""
    row = row_named(ctx, routes, name)
    if row is None:
        raise BrokerError(3701, kind="route", name=name)
    ctx.conn.execute(delete(routes).where(routes.c.route_id == row.route_id))
    ctx.catalog_changed()


def _checked(clauses: dict[str, Any], ctx: TxContext) -> dict[str, Any]:
    """The column values of a route's clauses, checked together (spec 1.6's errors)."""
    service, instance = clauses["service_name"], clauses["broker_instance"]
    address, mirror = clauses["address"], clauses["mirror_address"]
    if address is None:
        raise InvalidArgumentError(9659, "The ADDRESS of a route cannot be empty.")
    address = checked_address(address)
    if instance is not None and service is None:
        raise InvalidArgumentError(9662, "A route with a BROKER_INSTANCE must have a SERVICE_NAME.")
    if address == TRANSPORT and service is not None:
        raise InvalidArgumentError(9745, "A route with ADDRESS = 'TRANSPORT' cannot have a SERVICE_NAME.")
    if mirror is not None:
        mirror = checked_address(mirror, "MIRROR_ADDRESS")
        if address in (LOCAL, TRANSPORT) or mirror in (LOCAL, TRANSPORT):
            raise InvalidArgumentError(9743, "A route with ADDRESS = 'LOCAL' or 'TRANSPORT' cannot have a "
                                             "MIRROR_ADDRESS, nor can a MIRROR_ADDRESS be 'LOCAL' or 'TRANSPORT'.")
        if service is None or instance is None:
            raise InvalidArgumentError(9661, "A route with a MIRROR_ADDRESS must have a SERVICE_NAME and a "
                                             "BROKER_INSTANCE.")
        if mirror.upper() == address.upper():
            raise InvalidArgumentError(9747, "The MIRROR_ADDRESS of a route must differ from its ADDRESS.")
    seconds = clauses["lifetime"]
    return {
        "remote_service_name": service, "broker_instance": instance,
        "lifetime": None if seconds is None else ctx.now() + timedelta(seconds=seconds),
        "address": address, "mirror_address": mirror,
    }


def create_remote_service_binding(ctx: TxContext, name: str, service: str, user: str, anonymous: bool) -> None:
    """CREATE REMOTE SERVICE BINDING name TO SERVICE 'service' WITH USER = user, ANONYMOUS = ..."""
    if row_named(ctx, bindings, name) is not None:
        raise BrokerError(2714, name=name)
    if ctx.conn.execute(select(bindings.c.name).where(bindings.c.remote_service_name == service)).first():
        raise BrokerError(9619, f"A remote service binding for the service '{service}' already exists.")
    ctx.conn.execute(insert(bindings).values(
        remote_service_binding_id=next_id(ctx, bindings.c.remote_service_binding_id), name=name,
        remote_service_name=service, user_name=user, is_anonymous_on=anonymous,
    ))
    ctx.catalog_changed()


def alter_remote_service_binding(ctx: TxContext, name: str, user: str | None, anonymous: bool | None) -> None:
    """ALTER REMOTE SERVICE BINDING name WITH [USER = user] [, ANONYMOUS = ...]."""
    values: dict[str, Any] = {}
    if user is not None:
        values["user_name"] = user
    if anonymous is not None:
        values["is_anonymous_on"] = anonymous
    if not values:
        raise InvalidArgumentError(102, "ALTER REMOTE SERVICE BINDING needs USER or ANONYMOUS.", near="WITH")
    row = row_named(ctx, bindings, name)
    if row is None:
        raise BrokerError(15151, kind="remote service binding", name=name)
    ctx.conn.execute(update(bindings).where(bindings.c.remote_service_binding_id == row.remote_service_binding_id)
                     .values(**values))
    ctx.catalog_changed()


def drop_remote_service_binding(ctx: TxContext, name: str) -> None:
    """DROP REMOTE SERVICE BINDING name."""
    row = row_named(ctx, bindings, name)
    if row is None:
        raise BrokerError(3701, kind="remote service binding", name=name)
    ctx.conn.execute(delete(bindings).where(bindings.c.remote_service_binding_id == row.remote_service_binding_id))
    ctx.catalog_changed()

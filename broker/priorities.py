"""CREATE / ALTER / DROP BROKER PRIORITY, and the priority a new endpoint gets (spec 1.8, 11).

The DDL functions run in the caller's transaction, check everything before they write
(so a BrokerError leaves the transaction as it was), and end with
``ctx.catalog_changed()`` like the rest of the DDL. Priorities are not part of the
catalog snapshot: they matter only when an endpoint is created, and
:func:`priority_for` reads them then. An endpoint keeps the priority it was created
with; ALTER and DROP BROKER PRIORITY change only endpoints created afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, insert, or_, select, update

# objects imports endpoints, which imports this module: use ``objects.*`` at call time only.
from broker import objects
from broker.context import TxContext
from broker.errors import BrokerError
from broker.models import ConversationPriority
from broker.statements import Prepared

DEFAULT_PRIORITY = 5
LOWEST, HIGHEST = 1, 10
MAX_SERVICE_NAME = 256

priorities = cast(Table, ConversationPriority.__table__)

# The one priority that applies to an endpoint (contract C, local service L, remote
# service R), in the order of spec 11: (C,L,R), (C,L,ANY), (C,ANY,R), (C,ANY,ANY),
# (ANY,L,R), ... (ANY,ANY,ANY). A named criterion sorts before ANY (false < true), the
# contract weighing most; equal criteria fall back to the older priority.
_MATCH = Prepared(
    select(priorities.c.priority)
    .where(
        or_(priorities.c.service_contract_id == bindparam("p_contract"), priorities.c.service_contract_id.is_(None)),
        or_(priorities.c.local_service_id == bindparam("p_local"), priorities.c.local_service_id.is_(None)),
        or_(priorities.c.remote_service_name == bindparam("p_remote"), priorities.c.remote_service_name.is_(None)),
    )
    .order_by(
        priorities.c.service_contract_id.is_(None),
        priorities.c.local_service_id.is_(None),
        priorities.c.remote_service_name.is_(None),
        priorities.c.priority_id,
    )
    .limit(1)
)


def priority_for(ctx: TxContext, contract_id: int, local_service_id: int, remote_service_name: str) -> int:
    """The priority of a new endpoint: the best-matching broker priority's level, else 5.

    ``remote_service_name`` is compared byte by byte (case-sensitive), as SQL Server
    compares service names. One query in the caller's transaction; it writes nothing.
    """
    level = _MATCH.scalar(ctx.conn, p_contract=contract_id, p_local=local_service_id, p_remote=remote_service_name)
    return DEFAULT_PRIORITY if level is None else int(level)


def create_broker_priority(
    ctx: TxContext,
    name: str,
    *,
    contract_name: str | None = None,
    local_service_name: str | None = None,
    remote_service_name: str | None = None,
    priority_level: int | str | None = None,
) -> None:
    """CREATE BROKER PRIORITY name FOR CONVERSATION SET (...) in the caller's transaction.

    A criterion that is None or ``"ANY"`` matches any conversation; ``priority_level``
    None or ``"DEFAULT"`` is 5. Errors: unknown contract 8425, unknown local service 8423,
    invalid remote service name 8412, level outside 1..10 (59002, checked by the gate), name taken 2714.
    """
    columns = _columns(ctx, {
        "contract_name": contract_name, "local_service_name": local_service_name,
        "remote_service_name": remote_service_name, "priority_level": priority_level,
    })
    if _priority_id(ctx, name) is not None:
        raise BrokerError(2714, name=name)
    ctx.conn.execute(insert(priorities).values(
        priority_id=objects._next_id(ctx, priorities.c.priority_id), name=name, **columns,
    ))
    ctx.catalog_changed()


def alter_broker_priority(ctx: TxContext, name: str, **options: Any) -> None:
    """ALTER BROKER PRIORITY name FOR CONVERSATION SET (...) in the caller's transaction.

    ``options`` are those of :func:`create_broker_priority`, at least one; the others stay
    as they are. Existing endpoints keep their priority. Unknown name: 15151.
    """
    priority_id = _priority_id(ctx, name)
    if priority_id is None:
        raise BrokerError(15151, kind="broker priority", name=name)
    columns = _columns(ctx, options)
    ctx.conn.execute(update(priorities).where(priorities.c.priority_id == priority_id).values(**columns))
    ctx.catalog_changed()


def drop_broker_priority(ctx: TxContext, name: str) -> None:
    """DROP BROKER PRIORITY name in the caller's transaction; existing endpoints keep
    their priority. Unknown name: 3701."""
    priority_id = _priority_id(ctx, name)
    if priority_id is None:
        raise BrokerError(3701, kind="broker priority", name=name)
    ctx.conn.execute(delete(priorities).where(priorities.c.priority_id == priority_id))
    ctx.catalog_changed()


def _priority_id(ctx: TxContext, name: str) -> int | None:
    return ctx.conn.execute(select(priorities.c.priority_id).where(priorities.c.name == name)).scalar()


def _is_any(value: object) -> bool:
    """None or ANY (in any case, a keyword in T-SQL): the criterion matches everything."""
    return value is None or (isinstance(value, str) and value.upper() == "ANY")


def _contract_id(ctx: TxContext, value: Any) -> int | None:
    if _is_any(value):
        return None
    contract = ctx.catalog.contracts_by_name.get(value)
    if contract is None:
        raise BrokerError(8425, name=value)
    return contract.id


def _local_service_id(ctx: TxContext, value: Any) -> int | None:
    if _is_any(value):
        return None
    service = ctx.catalog.services_by_name.get(value)
    if service is None:
        raise BrokerError(8423, name=value)
    return service.id


def _remote_service_name(_ctx: TxContext, value: Any) -> str | None:
    if _is_any(value):
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_SERVICE_NAME:
        raise BrokerError(8412, name=value)
    return value


def _priority_level(_ctx: TxContext, value: int | None) -> int:
    return DEFAULT_PRIORITY if value is None else value  # 1 to 10, or None for DEFAULT (the gate)


# option -> (column of sb_conversation_priorities, check and convert the given value)
_OPTIONS: dict[str, tuple[str, Callable[[TxContext, Any], Any]]] = {
    "contract_name": ("service_contract_id", _contract_id),
    "local_service_name": ("local_service_id", _local_service_id),
    "remote_service_name": ("remote_service_name", _remote_service_name),
    "priority_level": ("priority", _priority_level),
}


def _columns(ctx: TxContext, options: Mapping[str, Any]) -> dict[str, Any]:
    """The column values of the given options, each checked; writes nothing."""
    return {_OPTIONS[option][0]: _OPTIONS[option][1](ctx, value) for option, value in options.items()}

"""CREATE / ALTER / DROP BROKER PRIORITY (spec 1.8).

The functions run in the caller's transaction, check everything before they write (so a
BrokerError leaves the transaction as it was), and end with ``ctx.catalog_changed()``
like the rest of the DDL. Their options come checked by the gate
(``arguments.priority_options``); here the names are looked up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import delete, insert, update

from broker.arguments import NVARCHAR_256
from broker.conversations.priorities import DEFAULT_PRIORITY, priorities
from broker.ddl.names import row_named
from broker.ddl.objects import next_id
from broker.errors import BrokerError
from broker.storage.context import TxContext


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
        priority_id=next_id(ctx, priorities.c.priority_id), name=name, **columns,
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
    row = row_named(ctx, priorities, name)
    return None if row is None else int(row.priority_id)


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
    if not isinstance(value, str) or not value or len(value) > NVARCHAR_256:
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

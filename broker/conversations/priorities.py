"""The priority a new conversation endpoint gets from the broker priorities (spec 11).

Priorities are not part of the catalog snapshot: they matter only when an endpoint is
created, and :func:`priority_for` reads them then. An endpoint keeps the priority it was
created with; ALTER and DROP BROKER PRIORITY (``broker.ddl.priorities``) change only
endpoints created afterwards.
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table, bindparam, or_, select

from broker.storage.context import TxContext
from broker.storage.models import ConversationPriority
from broker.storage.statements import Prepared

DEFAULT_PRIORITY = 5

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

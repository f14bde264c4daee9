"""CREATE / ALTER / DROP PROCEDURE for procedures written in T-SQL: their text, by name.

The broker stores the text; the T-SQL front end (``broker.sql``) parses and runs it.
Names compare without regard to case, as SQL Server's default collation does.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import delete, insert, select, update

from broker.errors import BrokerError
from broker.storage.context import TxContext
from broker.storage.models import SqlModule


def _key(name: str) -> str:
    return name.casefold()


def create_procedure(ctx: TxContext, name: str, definition: str, *, replace: bool, alter: bool) -> None:
    """Store ``definition`` as procedure ``name``: a new one (2714 if it exists), a
    replacement (``alter``: 208 if it does not), or either (``replace``)."""
    now = datetime.now(UTC)
    exists = ctx.conn.execute(select(SqlModule.name).where(SqlModule.name_key == _key(name))).first() is not None
    if exists and not (replace or alter):
        raise BrokerError(2714, name=name)
    if not exists and alter and not replace:
        raise BrokerError(208, f"Invalid object name '{name}'.")
    if exists:
        ctx.conn.execute(update(SqlModule).where(SqlModule.name_key == _key(name))
                         .values(name=name, definition=definition, modify_date=now))
    else:
        ctx.conn.execute(insert(SqlModule).values(name_key=_key(name), name=name, definition=definition,
                                                  create_date=now, modify_date=now))


def drop_procedure(ctx: TxContext, name: str) -> None:
    """DROP PROCEDURE; 3701 if there is none."""
    if not ctx.conn.execute(delete(SqlModule).where(SqlModule.name_key == _key(name))).rowcount:
        raise BrokerError(3701, kind="procedure", name=name)


def procedure_definition(ctx: TxContext, name: str) -> str | None:
    """The text of procedure ``name``, or None."""
    return ctx.conn.execute(select(SqlModule.definition).where(SqlModule.name_key == _key(name))).scalar()

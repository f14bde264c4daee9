"""Database mirroring (spec 8.8): one database served as principal by one instance and as
mirror by another.

SQL Server keeps two copies of a mirrored database and ships the principal's log to the
mirror. Here both instances open the *same* database (a PostgreSQL database, or a SQLite
file both can reach): the data is shared and only the roles are mirrored. The shared
database is the single source of truth of who is principal: its ``sb_database`` row
names the instances (their catalogs' broker ids) that serve it as principal and as
mirror. Either may be unknown (NULL): the mirror's instance writes itself in when it
joins, the principal's when it next reads the session (``name_principal``), and a
failover writes in the instance that becomes principal and the old one as mirror (if
it was named). An instance's role follows from those two:

* named principal: PRINCIPAL; named mirror: MIRROR;
* another instance named principal: MIRROR; else another named mirror: PRINCIPAL;
* neither named: the database is not mirrored (None), and whoever hosts it serves it.

The verbs run in the caller's transaction on the shared database and lock its
``sb_database`` row first, so two failovers (or a failover and a join) take turns. The
instance catalog keeps a copy of each member's role (``sb_instance_databases``), which
its endpoint answers with; ``broker.instances`` keeps that copy in step.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import cast

from sqlalchemy import Table, select, update

from broker.errors import BrokerError
from broker.storage.context import TxContext
from broker.storage.models import BrokerDatabase, InstanceDatabase

log = logging.getLogger("broker")

PRINCIPAL, MIRROR = 1, 2  # sys.database_mirroring.mirroring_role
ROLE_DESC = {PRINCIPAL: "PRINCIPAL", MIRROR: "MIRROR"}
_members = cast(Table, InstanceDatabase.__table__)


@dataclass(frozen=True, slots=True)
class Mirroring:
    """A database's mirroring session, as its ``sb_database`` row records it."""

    principal: uuid.UUID | None
    mirror: uuid.UUID | None
    role_sequence: int  # failovers so far

    def role_of(self, instance: uuid.UUID) -> int | None:
        """The role of the instance ``instance`` (its catalog's broker id); None when the
        database is not mirrored."""
        if self.principal == instance:
            return PRINCIPAL
        if self.mirror == instance:
            return MIRROR
        if self.principal is not None:
            return MIRROR
        return PRINCIPAL if self.mirror is not None else None

    def partner_of(self, instance: uuid.UUID) -> uuid.UUID | None:
        """The other partner's instance, when the database names it."""
        partner = self.principal if self.role_of(instance) == MIRROR else self.mirror
        return None if partner == instance else partner


def mirroring(ctx: TxContext) -> Mirroring:
    """The database's mirroring session (no lock)."""
    row = ctx.conn.execute(select(BrokerDatabase.mirroring_principal, BrokerDatabase.mirroring_mirror,
                                  BrokerDatabase.mirroring_role_sequence)).one()
    return Mirroring(row.mirroring_principal, row.mirroring_mirror, row.mirroring_role_sequence)


def join_as_mirror(ctx: TxContext, instance: uuid.UUID, name: str) -> None:
    """The instance ``instance`` serves the database (``name`` there) as mirror from now on.
    1452 if it is the principal; 1405 if another instance is the mirror."""
    session = _locked(ctx)
    if session.mirror == instance:
        return
    if session.principal == instance:
        raise BrokerError(1452, "The partner server instance name must be distinct from the server instance that "
                                "manages the database. The ALTER DATABASE SET PARTNER command failed.")
    if session.mirror is not None:
        raise BrokerError(1405, f'The database "{name}" is already enabled for database mirroring.')
    ctx.conn.execute(update(BrokerDatabase).values(mirroring_mirror=instance))


def fail_over(ctx: TxContext, instance: uuid.UUID, name: str) -> Mirroring:
    """ALTER DATABASE ``name`` SET PARTNER FORCE_SERVICE_ALLOW_DATA_LOSS on the mirror's
    instance ``instance``: it becomes the principal, and the old principal the mirror.
    1416 if the database is not mirrored; 1455 if ``instance`` is its principal already.
    Returns the new session."""
    session = _locked(ctx)
    role = session.role_of(instance)
    if role is None:
        raise BrokerError(1416, f'Database "{name}" is not configured for database mirroring.')
    if role == PRINCIPAL:
        raise BrokerError(1455, f'The database mirroring service cannot be forced for database "{name}" because '
                                "the database is not in the correct state to become the principal database.")
    after = Mirroring(instance, session.principal, session.role_sequence + 1)
    ctx.conn.execute(update(BrokerDatabase).values(mirroring_principal=after.principal,
                                                   mirroring_mirror=after.mirror,
                                                   mirroring_role_sequence=after.role_sequence))
    log.info('The mirrored database "%s" is changing roles from "MIRROR" to "PRINCIPAL" due to a manual failover.',
             name)  # 1480
    return after


def name_principal(ctx: TxContext, instance: uuid.UUID) -> Mirroring:
    """Write in ``instance`` as the principal when it is one without being named (a mirror
    joined since), so that a failover names it as the mirror. Returns the session."""
    session = _locked(ctx)
    if session.principal is None and session.role_of(instance) == PRINCIPAL:
        ctx.conn.execute(update(BrokerDatabase).values(mirroring_principal=instance))
        session = Mirroring(instance, session.mirror, session.role_sequence)
    return session


def _locked(ctx: TxContext) -> Mirroring:
    """The session, its row locked to the end of the transaction (PostgreSQL; SQLite's
    write lock is held already)."""
    ctx.conn.execute(select(BrokerDatabase.database_id).with_for_update()).all()
    return mirroring(ctx)


# -- the instance catalog's copy -------------------------------------------------------------


def record_role(ctx: TxContext, name: str, role: int | None, broker_instance: uuid.UUID | None) -> None:
    """In the instance catalog: the member ``name``'s role here and its broker id."""
    ctx.conn.execute(update(_members).where(_members.c.name == name).values(
        mirroring_role=role, mirroring_guid=broker_instance))


def mirrored_here(ctx: TxContext) -> dict[str, str]:
    """In the instance catalog: the members it serves as mirror, {broker id (lower-case
    text, as frames carry it): member name}."""
    rows = ctx.conn.execute(select(_members.c.mirroring_guid, _members.c.name)
                            .where(_members.c.mirroring_role == MIRROR))
    return {str(row.mirroring_guid): row.name for row in rows if row.mirroring_guid is not None}

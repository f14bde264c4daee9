"""Database mirroring: who serves a database as principal, and each instance's copy of it.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25

``sb_database`` records its mirroring session (spec 8.8): the instances serving it as
principal and as mirror (their catalogs' broker ids, NULL while unknown) and how many
failovers there were. ``sb_instance_databases`` (rows only in an instance catalog)
keeps each member's role and broker id as the instance last read them. Columns are
added and dropped with plain ALTER TABLE (SQLite 3.35+), never by copying a table,
because the sys.* views read these tables; no view reads the new columns.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from broker.storage.types import GUID

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column("sb_database", sa.Column("mirroring_principal", GUID(), nullable=True))
    op.add_column("sb_database", sa.Column("mirroring_mirror", GUID(), nullable=True))
    op.add_column("sb_database", sa.Column("mirroring_role_sequence", sa.Integer(), server_default="0",
                                           nullable=False))
    op.add_column("sb_instance_databases", sa.Column("mirroring_role", sa.SmallInteger(), nullable=True))
    op.add_column("sb_instance_databases", sa.Column("mirroring_guid", GUID(), nullable=True))


def downgrade() -> None:
    op.drop_column("sb_instance_databases", "mirroring_guid")
    op.drop_column("sb_instance_databases", "mirroring_role")
    op.drop_column("sb_database", "mirroring_role_sequence")
    op.drop_column("sb_database", "mirroring_mirror")
    op.drop_column("sb_database", "mirroring_principal")

"""Routing: remote service bindings, and the databases of an instance.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24

``sb_remote_service_bindings`` and its view ``sys.remote_service_bindings`` (spec 4.8);
``sb_instance_databases``, which holds rows only in an instance catalog (the databases
that ``broker.instance`` serves together). The view is written out here, so that this
revision keeps meaning what it meant when it shipped.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from broker.storage.types import UTCDateTime

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None

_REMOTE_SERVICE_BINDINGS = """
    SELECT name, remote_service_binding_id, 1 AS principal_id, remote_service_name,
           0 AS service_contract_id, 1 AS remote_principal_id, user_name AS remote_principal_name,
           CASE WHEN is_anonymous_on THEN 1 ELSE 0 END AS is_anonymous_on
    FROM sb_remote_service_bindings"""


def _view_name(name: str) -> str:
    return f'sys."{name}"' if op.get_bind().dialect.name == "postgresql" else f'"sys.{name}"'


def upgrade() -> None:
    op.create_table(
        "sb_remote_service_bindings",
        sa.Column("remote_service_binding_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("remote_service_name", sa.String(length=256), nullable=False),
        sa.Column("user_name", sa.String(length=128), nullable=False),
        sa.Column("is_anonymous_on", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("remote_service_binding_id", name=op.f("pk_sb_remote_service_bindings")),
        sa.UniqueConstraint("name", name=op.f("uq_sb_remote_service_bindings_name")),
        sa.UniqueConstraint("remote_service_name", name=op.f("uq_sb_remote_service_bindings_remote_service_name")),
    )
    op.create_table(
        "sb_instance_databases",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("database_id", sa.Integer(), nullable=False),
        sa.Column("create_date", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_sb_instance_databases")),
        sa.UniqueConstraint("database_id", name=op.f("uq_sb_instance_databases_database_id")),
    )
    op.execute(f"CREATE VIEW {_view_name('remote_service_bindings')} AS {_REMOTE_SERVICE_BINDINGS.strip()}")


def downgrade() -> None:
    op.execute(f"DROP VIEW {_view_name('remote_service_bindings')}")
    op.drop_table("sb_instance_databases")
    op.drop_table("sb_remote_service_bindings")

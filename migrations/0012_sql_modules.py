"""Stored procedures written in T-SQL.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25

``CREATE PROCEDURE`` in a script run by ``broker sql`` keeps the procedure's text here
(SQL Server's ``sys.sql_modules``), so that a later script's EXEC and a queue's
activation, in any process, run it. Names are unique without regard to case.
``sys.procedures`` lists them with SQL Server's columns.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from broker.storage.types import UTCDateTime

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | None = None
depends_on: str | None = None


_PROCEDURES = """
    SELECT name, NULL AS object_id, NULL AS principal_id, 1 AS schema_id, NULL AS parent_object_id,
           'P' AS type, 'SQL_STORED_PROCEDURE' AS type_desc, create_date, modify_date,
           0 AS is_ms_shipped, 0 AS is_published, 0 AS is_schema_published
    FROM sb_sql_modules"""


def _view_name(name: str) -> str:
    return f'sys."{name}"' if op.get_bind().dialect.name == "postgresql" else f'"sys.{name}"'


def upgrade() -> None:
    op.create_table(
        "sb_sql_modules",
        sa.Column("name_key", sa.String(128), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("definition", sa.Text(), nullable=False),
        sa.Column("create_date", UTCDateTime(), nullable=False),
        sa.Column("modify_date", UTCDateTime(), nullable=False),
    )
    op.execute(f"CREATE VIEW {_view_name('procedures')} AS {_PROCEDURES}")


def downgrade() -> None:
    op.execute(f"DROP VIEW {_view_name('procedures')}")
    op.drop_table("sb_sql_modules")

"""The messages an instance holds while it forwards them.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25

``sb_forwarded_messages`` (kept by the runtime that forwards them, like
``sb_broker_connections``) shown by ``sys.dm_broker_forwarded_messages``. The view is
written out here, so that this revision keeps meaning what it meant when it shipped.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from broker.storage.types import GUID

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None

_VIEW = """
    SELECT conversation_id, CASE WHEN is_initiator THEN 1 ELSE 0 END AS is_initiator, to_service_name,
           to_broker_instance, from_service_name, from_broker_instance, adjacent_broker_address,
           message_sequence_number, message_fragment_number, hops_remaining, time_to_live, time_consumed,
           message_id
    FROM sb_forwarded_messages"""


def _view_name() -> str:
    name = "dm_broker_forwarded_messages"
    return f'sys."{name}"' if op.get_bind().dialect.name == "postgresql" else f'"sys.{name}"'


def upgrade() -> None:
    op.create_table(
        "sb_forwarded_messages",
        sa.Column("forwarded_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("conversation_id", GUID(), nullable=False),
        sa.Column("is_initiator", sa.Boolean(), nullable=False),
        sa.Column("to_service_name", sa.String(length=256), nullable=False),
        sa.Column("to_broker_instance", sa.String(length=128), nullable=False),
        sa.Column("from_service_name", sa.String(length=256), nullable=False),
        sa.Column("from_broker_instance", sa.String(length=128), nullable=False),
        sa.Column("adjacent_broker_address", sa.String(length=256), nullable=False),
        sa.Column("message_sequence_number", sa.BigInteger(), nullable=False),
        sa.Column("message_fragment_number", sa.Integer(), nullable=False),
        sa.Column("hops_remaining", sa.SmallInteger(), nullable=False),
        sa.Column("time_to_live", sa.Integer(), nullable=False),
        sa.Column("time_consumed", sa.Integer(), nullable=False),
        sa.Column("message_id", sa.BigInteger(), nullable=False),
        sa.Column("runtime_session", sa.String(length=256), nullable=False),
        sa.PrimaryKeyConstraint("forwarded_id", name=op.f("pk_sb_forwarded_messages")),
    )
    op.create_index(op.f("ix_sb_forwarded_messages_runtime_session"), "sb_forwarded_messages", ["runtime_session"])
    op.execute(f"CREATE VIEW {_view_name()} AS {_VIEW.strip()}")


def downgrade() -> None:
    op.execute(f"DROP VIEW {_view_name()}")
    op.drop_index(op.f("ix_sb_forwarded_messages_runtime_session"), table_name="sb_forwarded_messages")
    op.drop_table("sb_forwarded_messages")

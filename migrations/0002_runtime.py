"""The runtime: transmission retries, poison-message counter, broker priorities, queue monitors,
and the purge of closed endpoints.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22

Columns are added and dropped with plain ALTER TABLE (SQLite 3.35+), never by copying a
table, because the sys.* views of 0001 read these tables.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from broker.storage.types import GUID, UTCDateTime

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

_VIEWS = {
    "conversation_priorities": """
        SELECT priority_id, name, service_contract_id, local_service_id, remote_service_name, priority
        FROM sb_conversation_priorities""",
    "dm_broker_queue_monitors": """
        SELECT 1 AS database_id, queue_id, state, last_empty_rowset_time, last_activated_time,
               tasks_waiting
        FROM sb_queue_monitors""",
    "dm_broker_activated_tasks": """
        SELECT process_id AS spid, 1 AS database_id, queue_id, procedure_name, NULL AS execute_as
        FROM sb_activated_tasks""",
}


def _view_name(name: str) -> str:
    if op.get_bind().dialect.name == "postgresql":
        return f'sys."{name}"'
    return f'"sys.{name}"'


def upgrade() -> None:
    op.add_column("sb_queues", sa.Column("rollback_count", sa.Integer(), server_default="0", nullable=False))
    op.add_column("sb_transmission_queue", sa.Column("next_attempt_time", UTCDateTime(), nullable=True))
    op.add_column("sb_transmission_queue",
                  sa.Column("attempts", sa.Integer(), server_default="0", nullable=False))
    op.create_index(op.f("ix_sb_transmission_queue_next_attempt_time"), "sb_transmission_queue",
                    ["next_attempt_time"], unique=False)
    op.create_index(op.f("ix_sb_conversation_endpoints_closed_date"), "sb_conversation_endpoints",
                    ["closed_date"], unique=False)
    op.create_table(
        "sb_conversation_priorities",
        sa.Column("priority_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("service_contract_id", sa.Integer(), nullable=True),
        sa.Column("local_service_id", sa.Integer(), nullable=True),
        sa.Column("remote_service_name", sa.String(length=256), nullable=True),
        sa.Column("priority", sa.SmallInteger(), nullable=False),
        sa.PrimaryKeyConstraint("priority_id", name=op.f("pk_sb_conversation_priorities")),
        sa.UniqueConstraint("name", name=op.f("uq_sb_conversation_priorities_name")),
    )
    op.create_table(
        "sb_queue_monitors",
        sa.Column("queue_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("last_empty_rowset_time", UTCDateTime(), nullable=True),
        sa.Column("last_activated_time", UTCDateTime(), nullable=True),
        sa.Column("tasks_waiting", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("queue_id", name=op.f("pk_sb_queue_monitors")),
    )
    op.create_table(
        "sb_activated_tasks",
        sa.Column("task_id", GUID(), nullable=False),
        sa.Column("queue_id", sa.Integer(), nullable=False),
        sa.Column("procedure_name", sa.String(length=776), nullable=False),
        sa.Column("process_id", sa.Integer(), nullable=False),
        sa.Column("start_time", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_sb_activated_tasks")),
    )
    op.create_index(op.f("ix_sb_activated_tasks_queue_id"), "sb_activated_tasks", ["queue_id"], unique=False)
    for name, select in _VIEWS.items():
        op.execute(f"CREATE VIEW {_view_name(name)} AS {select.strip()}")


def downgrade() -> None:
    for name in _VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {_view_name(name)}")
    op.drop_index(op.f("ix_sb_activated_tasks_queue_id"), table_name="sb_activated_tasks")
    op.drop_table("sb_activated_tasks")
    op.drop_table("sb_queue_monitors")
    op.drop_table("sb_conversation_priorities")
    op.drop_index(op.f("ix_sb_conversation_endpoints_closed_date"), table_name="sb_conversation_endpoints")
    op.drop_index(op.f("ix_sb_transmission_queue_next_attempt_time"), table_name="sb_transmission_queue")
    op.drop_column("sb_transmission_queue", "attempts")
    op.drop_column("sb_transmission_queue", "next_attempt_time")
    op.drop_column("sb_queues", "rollback_count")

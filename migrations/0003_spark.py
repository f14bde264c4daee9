"""Spark writes: staged messages and the last committed micro-batch of each streaming sink.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from broker.storage.types import GUID, UTCDateTime

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "sb_spark_staging",
        sa.Column("staging_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("job", sa.String(length=1024), nullable=False),
        sa.Column("batch_id", sa.BigInteger(), nullable=True),
        sa.Column("token", sa.String(length=36), nullable=False),
        sa.Column("partition_id", sa.Integer(), nullable=False),
        sa.Column("conversation_handle", GUID(), nullable=True),
        sa.Column("from_service", sa.String(length=256), nullable=True),
        sa.Column("to_service", sa.String(length=256), nullable=True),
        sa.Column("contract", sa.String(length=128), nullable=True),
        sa.Column("message_type", sa.String(length=128), nullable=True),
        sa.Column("dialog_key", sa.Text(), nullable=True),
        sa.Column("message_body", sa.LargeBinary(), nullable=True),
        sa.Column("staged_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("staging_id", name=op.f("pk_sb_spark_staging")),
    )
    op.create_index("ix_sb_spark_staging_job_batch_id", "sb_spark_staging", ["job", "batch_id"], unique=False)
    op.create_index(op.f("ix_sb_spark_staging_token"), "sb_spark_staging", ["token"], unique=False)
    op.create_table(
        "sb_spark_sinks",
        sa.Column("sink_id", sa.String(length=1024), nullable=False),
        sa.Column("batch_id", sa.BigInteger(), nullable=False),
        sa.Column("commit_time", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("sink_id", name=op.f("pk_sb_spark_sinks")),
    )


def downgrade() -> None:
    op.drop_table("sb_spark_sinks")
    op.drop_index(op.f("ix_sb_spark_staging_token"), table_name="sb_spark_staging")
    op.drop_index("ix_sb_spark_staging_job_batch_id", table_name="sb_spark_staging")
    op.drop_table("sb_spark_staging")

"""The transmission queue's index of parked inbound messages by next attempt.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25

The scheduler retries inbound messages parked while their queue was OFF
(``to_conversation_handle`` set) and asks when the next is due. Through the index on
``next_attempt_time`` alone, both walked every outbound message waiting to be sent
first (all due, none parked): a scan of the whole backlog at every commit while a
transmitter drained it. A partial index holds only the parked ones.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None

PARKED = sa.text("to_conversation_handle IS NOT NULL")


def upgrade() -> None:
    op.create_index("ix_sb_transmission_queue_parked_due", "sb_transmission_queue", ["next_attempt_time"],
                    sqlite_where=PARKED, postgresql_where=PARKED)


def downgrade() -> None:
    op.drop_index("ix_sb_transmission_queue_parked_due", table_name="sb_transmission_queue")

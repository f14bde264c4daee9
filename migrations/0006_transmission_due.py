"""The transmission queue's index by dialog and next attempt.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24

The transmitter sends a message only when no earlier message of its dialog is still
backing off. Looked up through ``(conversation_handle, message_sequence_number)`` that
check read every earlier held message of the dialog, so one dialog with a long backlog
cost time quadratic in it; through ``(conversation_handle, next_attempt_time)`` it is
one seek.
"""

from __future__ import annotations

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_index("ix_sb_transmission_queue_handle_due", "sb_transmission_queue",
                    ["conversation_handle", "next_attempt_time"])


def downgrade() -> None:
    op.drop_index("ix_sb_transmission_queue_handle_due", table_name="sb_transmission_queue")

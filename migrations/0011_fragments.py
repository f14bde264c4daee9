"""Large messages between instances, fragment by fragment.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26

A message for another instance travels in fragments, and the destination commits each
one as it comes (spec 7.5). ``sb_fragments`` holds them there until the last fragment
completes the message; ``sys.conversation_endpoints.receive_sequence_frag`` (0 until now)
counts those of the next message expected. The sender's transmission queue records how
many fragments of a message the destination holds (``fragments_held``) and which
destination said so (``fragments_held_by``), so that a broken connection costs only
the fragments not yet held. The view is written out here, so that this revision keeps
meaning what it meant when it shipped.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from broker.storage.types import GUID

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None

_BIT = "CASE WHEN {0} THEN 1 ELSE 0 END"
_FRAGMENTS_HELD = """CAST((SELECT COUNT(*) FROM sb_fragments AS f
                           WHERE f.conversation_handle = sb_conversation_endpoints.conversation_handle
                             AND f.message_sequence_number = sb_conversation_endpoints.receive_sequence) AS INTEGER)"""


def _conversation_endpoints(receive_sequence_frag: str) -> str:
    """sys.conversation_endpoints as 0005 made it, with ``receive_sequence_frag`` as the
    receive_sequence_frag (``0`` before this revision, the fragments held from here on)."""
    postgresql = op.get_bind().dialect.name == "postgresql"
    no_timer = "CAST('1900-01-01 00:00:00+00' AS timestamptz)" if postgresql else "'1900-01-01 00:00:00.000000'"
    return """
        SELECT conversation_handle, conversation_id, {init} AS is_initiator,
               service_contract_id, conversation_group_id, service_id, lifetime, state,
               CASE state
                   WHEN 'SO' THEN 'STARTED_OUTBOUND' WHEN 'SI' THEN 'STARTED_INBOUND'
                   WHEN 'CO' THEN 'CONVERSING' WHEN 'DI' THEN 'DISCONNECTED_INBOUND'
                   WHEN 'DO' THEN 'DISCONNECTED_OUTBOUND' WHEN 'ER' THEN 'ERROR'
                   WHEN 'CD' THEN 'CLOSED' END AS state_desc,
               far_service, far_broker_instance, 1 AS principal_id, 1 AS far_principal_id,
               outbound_session_key_identifier, NULL AS inbound_session_key_identifier,
               create_date AS security_timestamp,
               COALESCE(dialog_timer, {no_timer}) AS dialog_timer, send_sequence,
               NULL AS last_send_tran_id, end_dialog_sequence, receive_sequence,
               {frag} AS receive_sequence_frag, system_sequence,
               NULL AS first_out_of_order_sequence, last_out_of_order_sequence,
               NULL AS last_out_of_order_frag, {sys} AS is_system, priority
        FROM sb_conversation_endpoints""".format(
        init=_BIT.format("is_initiator"), sys=_BIT.format("is_system"), no_timer=no_timer,
        frag=receive_sequence_frag,
    ).strip()


def _view_name(name: str) -> str:
    return f'sys."{name}"' if op.get_bind().dialect.name == "postgresql" else f'"sys.{name}"'


def upgrade() -> None:
    op.add_column("sb_transmission_queue",
                  sa.Column("fragments_held", sa.Integer(), server_default="0", nullable=False))
    op.add_column("sb_transmission_queue", sa.Column("fragments_held_by", sa.String(length=128), nullable=True))
    op.create_table(
        "sb_fragments",
        sa.Column("conversation_handle", GUID(), nullable=False),
        sa.Column("message_sequence_number", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("fragment", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("conversation_handle", "message_sequence_number", "fragment",
                                name=op.f("pk_sb_fragments")),
    )
    # Dropped and made again: PostgreSQL cannot change a view column's type in place.
    op.execute(f"DROP VIEW {_view_name('conversation_endpoints')}")
    op.execute(f"CREATE VIEW {_view_name('conversation_endpoints')} AS {_conversation_endpoints(_FRAGMENTS_HELD)}")


def downgrade() -> None:
    op.execute(f"DROP VIEW {_view_name('conversation_endpoints')}")  # it reads the table dropped next
    op.drop_table("sb_fragments")
    op.execute(f"CREATE VIEW {_view_name('conversation_endpoints')} AS {_conversation_endpoints('0')}")
    op.drop_column("sb_transmission_queue", "fragments_held_by")
    op.drop_column("sb_transmission_queue", "fragments_held")

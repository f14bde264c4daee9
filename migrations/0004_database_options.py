"""Gaps of the single database: sys.internal_tables for queues, and dialog security's
session key identifier in sys.conversation_endpoints.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24

Columns are added and dropped with plain ALTER TABLE (SQLite 3.35+), never by copying a
table, because the sys.* views read these tables. The views this revision makes or
changes are written out here, so that it keeps meaning what it meant when it shipped.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from broker.storage.types import GUID

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

_BIT = "CASE WHEN {0} THEN 1 ELSE 0 END"

# One row per queue's internal table, with the columns sys.internal_tables inherits from
# sys.objects: internal tables live in the sys schema (schema_id 4), their parent is the
# queue, and their large-object data (message bodies) sits in PRIMARY (data space 1).
_INTERNAL_TABLES = """
    SELECT internal_table_name AS name, internal_table_object_id AS object_id, NULL AS principal_id,
           4 AS schema_id, object_id AS parent_object_id, 'IT' AS type, 'INTERNAL_TABLE' AS type_desc,
           create_date, create_date AS modify_date, 0 AS is_ms_shipped, 0 AS is_published,
           0 AS is_schema_published, 201 AS internal_type, 'QUEUE_MESSAGES' AS internal_type_desc,
           object_id AS parent_id, 0 AS parent_minor_id, 1 AS lob_data_space_id,
           NULL AS filestream_data_space_id
    FROM sb_queues"""


def _conversation_endpoints(outbound_key: str, no_timer: str) -> str:
    """sys.conversation_endpoints as 0001 made it, with ``outbound_key`` as the
    outbound_session_key_identifier (``NULL`` in 0001, the stored column from here on)."""
    return """
        SELECT conversation_handle, conversation_id, {init} AS is_initiator,
               service_contract_id, conversation_group_id, service_id, lifetime, state,
               CASE state
                   WHEN 'SO' THEN 'STARTED_OUTBOUND' WHEN 'SI' THEN 'STARTED_INBOUND'
                   WHEN 'CO' THEN 'CONVERSING' WHEN 'DI' THEN 'DISCONNECTED_INBOUND'
                   WHEN 'DO' THEN 'DISCONNECTED_OUTBOUND' WHEN 'ER' THEN 'ERROR'
                   WHEN 'CD' THEN 'CLOSED' END AS state_desc,
               far_service, far_broker_instance, 1 AS principal_id, 1 AS far_principal_id,
               {outbound_key} AS outbound_session_key_identifier, NULL AS inbound_session_key_identifier,
               create_date AS security_timestamp,
               COALESCE(dialog_timer, {no_timer}) AS dialog_timer, send_sequence,
               NULL AS last_send_tran_id, end_dialog_sequence, receive_sequence,
               0 AS receive_sequence_frag, system_sequence,
               NULL AS first_out_of_order_sequence, NULL AS last_out_of_order_sequence,
               NULL AS last_out_of_order_frag, {sys} AS is_system, priority
        FROM sb_conversation_endpoints""".format(
        init=_BIT.format("is_initiator"), sys=_BIT.format("is_system"), no_timer=no_timer,
        outbound_key=outbound_key,
    )


def _postgresql() -> bool:
    return bool(op.get_bind().dialect.name == "postgresql")


def _view_name(name: str) -> str:
    return f'sys."{name}"' if _postgresql() else f'"sys.{name}"'


def _drop_view(name: str) -> None:
    op.execute(f"DROP VIEW IF EXISTS {_view_name(name)}")


def _create_conversation_endpoints(outbound_key: str) -> None:
    # SQL Server shows 1900-01-01 in dialog_timer when no timer is set.
    no_timer = "CAST('1900-01-01 00:00:00+00' AS timestamptz)" if _postgresql() else "'1900-01-01 00:00:00.000000'"
    view = _conversation_endpoints(outbound_key, no_timer).strip()
    op.execute(f"CREATE VIEW {_view_name('conversation_endpoints')} AS {view}")


def upgrade() -> None:
    op.add_column("sb_queues", sa.Column("internal_table_object_id", sa.Integer(), nullable=True))
    # Queues made before this revision: their internal tables take the next ids after
    # the highest queue id, where CREATE QUEUE takes them from now on.
    queues = sa.table("sb_queues", sa.column("object_id", sa.Integer),
                      sa.column("internal_table_object_id", sa.Integer))
    bind = op.get_bind()
    ids = list(bind.execute(sa.select(queues.c.object_id).order_by(queues.c.object_id)).scalars())
    for number, object_id in enumerate(ids, start=(ids[-1] if ids else 0) + 1):
        bind.execute(queues.update().where(queues.c.object_id == object_id)
                     .values(internal_table_object_id=number))
    op.add_column("sb_conversation_endpoints",
                  sa.Column("outbound_session_key_identifier", GUID(), nullable=True))
    # Dropped and made again: PostgreSQL cannot change a view column's type in place.
    _drop_view("conversation_endpoints")
    _create_conversation_endpoints("outbound_session_key_identifier")
    op.execute(f"CREATE VIEW {_view_name('internal_tables')} AS {_INTERNAL_TABLES.strip()}")


def downgrade() -> None:
    _drop_view("internal_tables")
    _drop_view("conversation_endpoints")  # it reads the column dropped next
    op.drop_column("sb_conversation_endpoints", "outbound_session_key_identifier")
    _create_conversation_endpoints("NULL")
    op.drop_column("sb_queues", "internal_table_object_id")

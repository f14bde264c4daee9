"""Routing: remote service bindings, the databases of an instance, out-of-order arrivals.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24

``sb_remote_service_bindings`` and its view ``sys.remote_service_bindings`` (spec 4.8);
``sb_instance_databases``, which holds rows only in an instance catalog (the databases
that ``broker.instance`` serves together); ``last_out_of_order_sequence`` on endpoints
(the highest sequence number that arrived ahead of a missing one), shown by
``sys.conversation_endpoints``. The views are written out here, so that this revision
keeps meaning what it meant when it shipped.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from broker.storage.types import UTCDateTime

_BIT = "CASE WHEN {0} THEN 1 ELSE 0 END"

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None

_REMOTE_SERVICE_BINDINGS = """
    SELECT name, remote_service_binding_id, 1 AS principal_id, remote_service_name,
           0 AS service_contract_id, 1 AS remote_principal_id, user_name AS remote_principal_name,
           CASE WHEN is_anonymous_on THEN 1 ELSE 0 END AS is_anonymous_on
    FROM sb_remote_service_bindings"""


def _conversation_endpoints(last_out_of_order: str) -> str:
    """sys.conversation_endpoints as 0004 made it, with ``last_out_of_order`` as the
    last_out_of_order_sequence (``NULL`` before this revision, the stored column in it)."""
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
               0 AS receive_sequence_frag, system_sequence,
               NULL AS first_out_of_order_sequence, {last} AS last_out_of_order_sequence,
               NULL AS last_out_of_order_frag, {sys} AS is_system, priority
        FROM sb_conversation_endpoints""".format(
        init=_BIT.format("is_initiator"), sys=_BIT.format("is_system"), no_timer=no_timer, last=last_out_of_order,
    ).strip()


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
    op.add_column("sb_conversation_endpoints",
                  sa.Column("last_out_of_order_sequence", sa.BigInteger(), nullable=True))
    # Dropped and made again: PostgreSQL cannot change a view column's type in place.
    op.execute(f"DROP VIEW {_view_name('conversation_endpoints')}")
    op.execute(f"CREATE VIEW {_view_name('conversation_endpoints')} AS "
               f"{_conversation_endpoints('last_out_of_order_sequence')}")


def downgrade() -> None:
    op.execute(f"DROP VIEW {_view_name('conversation_endpoints')}")  # it reads the column dropped next
    op.drop_column("sb_conversation_endpoints", "last_out_of_order_sequence")
    op.execute(f"CREATE VIEW {_view_name('conversation_endpoints')} AS {_conversation_endpoints('NULL')}")
    op.execute(f"DROP VIEW {_view_name('remote_service_bindings')}")
    op.drop_table("sb_instance_databases")
    op.drop_table("sb_remote_service_bindings")

"""The Service Broker endpoint and its connections.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25

``sb_endpoints`` (CREATE ENDPOINT ... FOR SERVICE_BROKER; a row only in an instance
catalog) shown by ``sys.service_broker_endpoints`` and ``sys.tcp_endpoints``, and
``sb_broker_connections`` (the endpoint's network connections, kept by the runtime)
shown by ``sys.dm_broker_connections``. The views are written out here, so that this
revision keeps meaning what it meant when it shipped.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from broker.storage.types import GUID, UTCDateTime

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None

_BIT = "CASE WHEN {0} THEN 1 ELSE 0 END"

# sys.endpoints' columns, which both endpoint views begin with (protocol 2 = TCP, type 3 =
# SERVICE_BROKER, state 0/1/2 = STARTED/STOPPED/DISABLED, principal 1 = sa).
_ENDPOINT_COLUMNS = """
    name, endpoint_id, 1 AS principal_id, 2 AS protocol, 'TCP' AS protocol_desc,
    3 AS type, 'SERVICE_BROKER' AS type_desc,
    CASE state WHEN 'STARTED' THEN 0 WHEN 'STOPPED' THEN 1 ELSE 2 END AS state, state AS state_desc,
    0 AS is_admin_endpoint"""

# Connection authentication is always CERTIFICATE (4); the certificate is the endpoint's own,
# numbered like it. Encryption: DISABLED = 0 NONE, REQUIRED = 2 AES, SUPPORTED = 4 NONE, AES.
_SERVICE_BROKER_ENDPOINTS = f"""
    SELECT {_ENDPOINT_COLUMNS.strip()},
           {_BIT.format("message_forwarding")} AS is_message_forwarding_enabled,
           message_forward_size AS message_forwarding_size,
           4 AS connection_auth, 'CERTIFICATE' AS connection_auth_desc, endpoint_id AS certificate_id,
           CASE encryption WHEN 'DISABLED' THEN 0 WHEN 'REQUIRED' THEN 2 ELSE 4 END AS encryption_algorithm,
           CASE encryption WHEN 'DISABLED' THEN 'NONE' WHEN 'REQUIRED' THEN encryption_algorithm
                ELSE 'NONE, ' || encryption_algorithm END AS encryption_algorithm_desc
    FROM sb_endpoints"""

_TCP_ENDPOINTS = f"""
    SELECT {_ENDPOINT_COLUMNS.strip()},
           port, 0 AS is_dynamic_port, listener_ip AS ip_address
    FROM sb_endpoints"""

_LOGIN_STATES = ("INITIAL", "WAIT LOGIN NEGOTIATE", "ONE ISC", "ONE ASC", "TWO ISC", "TWO ASC", "WAIT ISC Confirm",
                 "WAIT ASC Confirm", "WAIT REJECT", "WAIT PRE-MASTER SECRET", "WAIT VALIDATION", "WAIT ARBITRATION",
                 "ONLINE", "ERROR")


def _described(column: str, names: dict[int, str]) -> str:
    cases = " ".join(f"WHEN {code} THEN '{name}'" for code, name in names.items())
    return f"CASE {column} {cases} END AS {column}_desc"


_DM_BROKER_CONNECTIONS = f"""
    SELECT connection_id, transport_stream_id, state,
           {_described("state", {1: "NEW", 2: "CONNECTING", 3: "CONNECTED", 4: "LOGGED_IN", 5: "CLOSED"})},
           connect_time, login_time, authentication_method, principal_name, remote_user_name,
           last_activity_time, {_BIT.format("is_accept")} AS is_accept, login_state,
           {_described("login_state", dict(enumerate(_LOGIN_STATES)))},
           peer_certificate_id, encryption_algorithm,
           {_described("encryption_algorithm", {0: "NONE", 1: "SIGNING ONLY", 2: "RC4", 3: "AES"})},
           receives_posted, {_BIT.format("is_receive_flow_controlled")} AS is_receive_flow_controlled,
           sends_posted, {_BIT.format("is_send_flow_controlled")} AS is_send_flow_controlled,
           total_bytes_sent, total_bytes_received, total_fragments_sent, total_fragments_received,
           total_sends, total_receives, peer_arbitration_id,
           address, refusal, runtime_session
    FROM sb_broker_connections"""

_VIEWS = {
    "service_broker_endpoints": _SERVICE_BROKER_ENDPOINTS,
    "tcp_endpoints": _TCP_ENDPOINTS,
    "dm_broker_connections": _DM_BROKER_CONNECTIONS,
}


def _view_name(name: str) -> str:
    return f'sys."{name}"' if op.get_bind().dialect.name == "postgresql" else f'"sys.{name}"'


def upgrade() -> None:
    op.create_table(
        "sb_endpoints",
        sa.Column("endpoint_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("listener_ip", sa.String(length=45), nullable=True),
        sa.Column("state", sa.String(length=8), nullable=False),
        sa.Column("certificate", sa.Text(), nullable=False),
        sa.Column("private_key", sa.Text(), nullable=False),
        sa.Column("trusted_peers", sa.Text(), nullable=False),
        sa.Column("encryption", sa.String(length=9), nullable=False),
        sa.Column("encryption_algorithm", sa.String(length=16), nullable=False),
        sa.Column("message_forwarding", sa.Boolean(), nullable=False),
        sa.Column("message_forward_size", sa.Integer(), nullable=False),
        sa.Column("create_date", UTCDateTime(), nullable=False),
        sa.Column("modify_date", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("endpoint_id", name=op.f("pk_sb_endpoints")),
        sa.UniqueConstraint("name", name=op.f("uq_sb_endpoints_name")),
    )
    op.create_table(
        "sb_broker_connections",
        sa.Column("connection_id", GUID(), nullable=False),
        sa.Column("transport_stream_id", GUID(), nullable=True),
        sa.Column("state", sa.SmallInteger(), nullable=False),
        sa.Column("connect_time", UTCDateTime(), nullable=True),
        sa.Column("login_time", UTCDateTime(), nullable=True),
        sa.Column("authentication_method", sa.String(length=128), nullable=True),
        sa.Column("principal_name", sa.String(length=128), nullable=True),
        sa.Column("remote_user_name", sa.String(length=128), nullable=True),
        sa.Column("last_activity_time", UTCDateTime(), nullable=True),
        sa.Column("is_accept", sa.Boolean(), nullable=False),
        sa.Column("login_state", sa.SmallInteger(), server_default="0", nullable=False),
        sa.Column("peer_certificate_id", sa.Integer(), nullable=True),
        sa.Column("encryption_algorithm", sa.SmallInteger(), server_default="0", nullable=False),
        sa.Column("receives_posted", sa.SmallInteger(), server_default="0", nullable=False),
        sa.Column("is_receive_flow_controlled", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("sends_posted", sa.SmallInteger(), server_default="0", nullable=False),
        sa.Column("is_send_flow_controlled", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("total_bytes_sent", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("total_bytes_received", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("total_fragments_sent", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("total_fragments_received", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("total_sends", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("total_receives", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("peer_arbitration_id", GUID(), nullable=True),
        sa.Column("address", sa.String(length=300), nullable=True),
        sa.Column("refusal", sa.String(length=4000), nullable=True),
        sa.Column("runtime_session", sa.String(length=256), nullable=True),
        sa.PrimaryKeyConstraint("connection_id", name=op.f("pk_sb_broker_connections")),
    )
    op.create_index(op.f("ix_sb_broker_connections_runtime_session"), "sb_broker_connections", ["runtime_session"])
    for name, body in _VIEWS.items():
        op.execute(f"CREATE VIEW {_view_name(name)} AS {body.strip()}")


def downgrade() -> None:
    for name in reversed(_VIEWS):
        op.execute(f"DROP VIEW {_view_name(name)}")
    op.drop_index(op.f("ix_sb_broker_connections_runtime_session"), table_name="sb_broker_connections")
    op.drop_table("sb_broker_connections")
    op.drop_table("sb_endpoints")

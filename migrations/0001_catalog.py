"""The broker catalog: objects, conversations, transmission queue, system objects, sys.* views.

Revision ID: 0001
Revises:
Create Date: 2026-11-22

The view definitions and seed rows are written out here (not imported from the
package) so that this revision keeps meaning what it meant when it shipped.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import sqlalchemy as sa

from alembic import op
from broker.storage.types import GUID, UTCDateTime

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

_NS = "http://schemas.microsoft.com/SQL/"

# (id, name, validation) of the built-in message types, ids as on a real server.
_MESSAGE_TYPES = [
    (1, _NS + "ServiceBroker/Error", "X"),
    (2, _NS + "ServiceBroker/EndDialog", "E"),
    (3, _NS + "Notifications/QueryNotification", "X"),
    (4, _NS + "Notifications/EventNotification", "X"),
    (5, _NS + "ServiceBroker/DialogTimer", "E"),
    (6, _NS + "ServiceBroker/BrokerConfigurationNotice/MissingRoute", "X"),
    (7, _NS + "ServiceBroker/BrokerConfigurationNotice/FailedRoute", "X"),
    (8, _NS + "ServiceBroker/BrokerConfigurationNotice/MissingRemoteServiceBinding", "X"),
    (9, _NS + "ServiceBroker/BrokerConfigurationNotice/FailedRemoteServiceBinding", "X"),
    (10, _NS + "ServiceBroker/ServiceEcho/Echo", "N"),
    (11, _NS + "ServiceBroker/ServiceDiagnostic/Query", "X"),
    (12, _NS + "ServiceBroker/ServiceDiagnostic/Status", "X"),
    (13, _NS + "ServiceBroker/ServiceDiagnostic/Description", "N"),
    (14, "DEFAULT", "N"),
]

# (id, name, [(message type id, sent by initiator, sent by target)])
_CONTRACTS = [
    (1, _NS + "Notifications/PostQueryNotification", [(3, True, False)]),
    (2, _NS + "Notifications/PostEventNotification", [(4, True, False)]),
    (3, _NS + "ServiceBroker/BrokerConfigurationNotice",
     [(6, True, False), (7, True, False), (8, True, False), (9, True, False)]),
    (4, _NS + "ServiceBroker/ServiceEcho", [(10, True, True)]),
    (5, _NS + "ServiceBroker/ServiceDiagnostic", [(11, True, False), (12, False, True), (13, False, True)]),
    (6, "DEFAULT", [(14, True, True)]),
]

_BIT = "CASE WHEN {0} THEN 1 ELSE 0 END"

def _views(no_timer: str) -> dict[str, str]:
    """The sys.* views; ``no_timer`` is the dialect's literal for 1900-01-01 (no timer set)."""
    return {
        "databases": """
            SELECT database_id, service_broker_guid, {enabled} AS is_broker_enabled,
                   {honor} AS is_honor_broker_priority_on, create_date
            FROM sb_database""".format(
            enabled=_BIT.format("is_broker_enabled"), honor=_BIT.format("is_honor_broker_priority_on")
        ),
        "xml_schema_collections": """
            SELECT xml_collection_id, 1 AS schema_id, 1 AS principal_id, name,
                   create_date, create_date AS modify_date
            FROM sb_xml_schema_collections""",
        "service_message_types": """
            SELECT name, message_type_id, 1 AS principal_id, validation,
                   CASE validation WHEN 'N' THEN 'BINARY' WHEN 'E' THEN 'EMPTY' ELSE 'XML' END
                       AS validation_desc,
                   xml_collection_id
            FROM sb_message_types""",
        "service_contracts": """
            SELECT name, service_contract_id, 1 AS principal_id FROM sb_contracts""",
        "service_contract_message_usages": """
            SELECT service_contract_id, message_type_id,
                   {i} AS is_sent_by_initiator, {t} AS is_sent_by_target
            FROM sb_contract_message_usages""".format(
            i=_BIT.format("is_sent_by_initiator"), t=_BIT.format("is_sent_by_target")
        ),
        "service_queues": """
            SELECT name, object_id, 1 AS principal_id, 1 AS schema_id, 0 AS parent_object_id,
                   'SQ' AS type, 'SERVICE_QUEUE' AS type_desc, create_date, modify_date,
                   0 AS is_ms_shipped, 0 AS is_published, 0 AS is_schema_published,
                   max_readers, activation_procedure,
                   CASE WHEN execute_as IS NULL THEN NULL WHEN execute_as = 'OWNER' THEN -2 ELSE 1 END
                       AS execute_as_principal_id,
                   {act} AS is_activation_enabled, {rcv} AS is_receive_enabled,
                   {enq} AS is_enqueue_enabled, {ret} AS is_retention_enabled,
                   {poison} AS is_poison_message_handling_enabled
            FROM sb_queues""".format(
            act=_BIT.format("is_activation_enabled"), rcv=_BIT.format("is_receive_enabled"),
            enq=_BIT.format("is_enqueue_enabled"), ret=_BIT.format("is_retention_enabled"),
            poison=_BIT.format("is_poison_message_handling_enabled"),
        ),
        "services": """
            SELECT name, service_id, 1 AS principal_id, service_queue_id FROM sb_services""",
        "service_contract_usages": """
            SELECT service_id, service_contract_id FROM sb_service_contract_usages""",
        "routes": """
            SELECT name, route_id, 1 AS principal_id, remote_service_name, broker_instance,
                   lifetime, address, mirror_address
            FROM sb_routes""",
        "conversation_groups": """
            SELECT conversation_group_id, service_id, {sys} AS is_system
            FROM sb_conversation_groups""".format(sys=_BIT.format("is_system")),
        "conversation_endpoints": """
            SELECT conversation_handle, conversation_id, {init} AS is_initiator,
                   service_contract_id, conversation_group_id, service_id, lifetime, state,
                   CASE state
                       WHEN 'SO' THEN 'STARTED_OUTBOUND' WHEN 'SI' THEN 'STARTED_INBOUND'
                       WHEN 'CO' THEN 'CONVERSING' WHEN 'DI' THEN 'DISCONNECTED_INBOUND'
                       WHEN 'DO' THEN 'DISCONNECTED_OUTBOUND' WHEN 'ER' THEN 'ERROR'
                       WHEN 'CD' THEN 'CLOSED' END AS state_desc,
                   far_service, far_broker_instance, 1 AS principal_id, 1 AS far_principal_id,
                   NULL AS outbound_session_key_identifier, NULL AS inbound_session_key_identifier,
                   create_date AS security_timestamp,
                   COALESCE(dialog_timer, {no_timer}) AS dialog_timer, send_sequence,
                   NULL AS last_send_tran_id, end_dialog_sequence, receive_sequence,
                   0 AS receive_sequence_frag, system_sequence,
                   NULL AS first_out_of_order_sequence, NULL AS last_out_of_order_sequence,
                   NULL AS last_out_of_order_frag, {sys} AS is_system, priority
            FROM sb_conversation_endpoints""".format(
            init=_BIT.format("is_initiator"), sys=_BIT.format("is_system"), no_timer=no_timer,
        ),
        "transmission_queue": """
            SELECT q.conversation_handle, q.to_service_name, q.to_broker_instance,
                   q.from_service_name, c.name AS service_contract_name, q.enqueue_time,
                   q.message_sequence_number, t.name AS message_type_name,
                   {err} AS is_conversation_error, {end} AS is_end_of_dialog,
                   q.message_body, q.transmission_status, q.priority
            FROM sb_transmission_queue AS q
            LEFT JOIN sb_contracts AS c ON c.service_contract_id = q.service_contract_id
            LEFT JOIN sb_message_types AS t ON t.message_type_id = q.message_type_id""".format(
            err=_BIT.format("q.is_conversation_error"), end=_BIT.format("q.is_end_of_dialog")
        ),
    }


def _view_name(name: str) -> str:
    # PostgreSQL has schemas: sys.<view>. SQLite reads "sys.x" as database.table, so the
    # view is named with the dot inside one quoted identifier: "sys.conversation_endpoints".
    if op.get_bind().dialect.name == "postgresql":
        return f'sys."{name}"'
    return f'"sys.{name}"'


def _create_views() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("CREATE SCHEMA IF NOT EXISTS sys")
    # SQL Server shows 1900-01-01 in dialog_timer when no timer is set.
    no_timer = "CAST('1900-01-01 00:00:00+00' AS timestamptz)" if op.get_bind().dialect.name == "postgresql" \
        else "'1900-01-01 00:00:00.000000'"
    for name, select in _views(no_timer).items():
        op.execute(f"CREATE VIEW {_view_name(name)} AS {select.strip()}")


def _seed() -> None:
    now = datetime.now(UTC)
    database = sa.table(
        "sb_database",
        sa.column("database_id", sa.Integer), sa.column("service_broker_guid", GUID()),
        sa.column("is_broker_enabled", sa.Boolean), sa.column("is_honor_broker_priority_on", sa.Boolean),
        sa.column("catalog_version", sa.BigInteger), sa.column("create_date", UTCDateTime()),
    )
    op.bulk_insert(database, [{
        "database_id": 1, "service_broker_guid": uuid.uuid4(), "is_broker_enabled": True,
        "is_honor_broker_priority_on": False, "catalog_version": 1, "create_date": now,
    }])
    message_types = sa.table(
        "sb_message_types",
        sa.column("message_type_id", sa.Integer), sa.column("name", sa.String),
        sa.column("validation", sa.String), sa.column("is_ms_shipped", sa.Boolean),
    )
    op.bulk_insert(message_types, [
        {"message_type_id": i, "name": n, "validation": v, "is_ms_shipped": True}
        for i, n, v in _MESSAGE_TYPES
    ])
    contracts = sa.table(
        "sb_contracts",
        sa.column("service_contract_id", sa.Integer), sa.column("name", sa.String),
        sa.column("is_ms_shipped", sa.Boolean),
    )
    op.bulk_insert(contracts, [
        {"service_contract_id": i, "name": n, "is_ms_shipped": True} for i, n, _ in _CONTRACTS
    ])
    usages = sa.table(
        "sb_contract_message_usages",
        sa.column("service_contract_id", sa.Integer), sa.column("message_type_id", sa.Integer),
        sa.column("is_sent_by_initiator", sa.Boolean), sa.column("is_sent_by_target", sa.Boolean),
    )
    op.bulk_insert(usages, [
        {"service_contract_id": c, "message_type_id": m, "is_sent_by_initiator": i, "is_sent_by_target": t}
        for c, _, members in _CONTRACTS for m, i, t in members
    ])
    routes = sa.table(
        "sb_routes",
        sa.column("route_id", sa.Integer), sa.column("name", sa.String), sa.column("address", sa.String),
    )
    op.bulk_insert(routes, [{"route_id": 65536, "name": "AutoCreatedLocal", "address": "LOCAL"}])


def upgrade() -> None:
    op.create_table('sb_contracts',
    sa.Column('service_contract_id', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('is_ms_shipped', sa.Boolean(), nullable=False),
    sa.PrimaryKeyConstraint('service_contract_id', name=op.f('pk_sb_contracts')),
    sa.UniqueConstraint('name', name=op.f('uq_sb_contracts_name'))
    )
    op.create_table('sb_conversation_endpoints',
    sa.Column('conversation_handle', GUID(), nullable=False),
    sa.Column('conversation_id', GUID(), nullable=False),
    sa.Column('is_initiator', sa.Boolean(), nullable=False),
    sa.Column('service_contract_id', sa.Integer(), nullable=False),
    sa.Column('conversation_group_id', GUID(), nullable=False),
    sa.Column('service_id', sa.Integer(), nullable=False),
    sa.Column('lifetime', UTCDateTime(), nullable=False),
    sa.Column('state', sa.String(length=2), nullable=False),
    sa.Column('far_service', sa.String(length=256), nullable=False),
    sa.Column('far_broker_instance', sa.String(length=128), nullable=True),
    sa.Column('dialog_timer', UTCDateTime(), nullable=True),
    sa.Column('send_sequence', sa.BigInteger(), nullable=False),
    sa.Column('end_dialog_sequence', sa.BigInteger(), nullable=False),
    sa.Column('receive_sequence', sa.BigInteger(), nullable=False),
    sa.Column('system_sequence', sa.BigInteger(), nullable=False),
    sa.Column('priority', sa.SmallInteger(), nullable=False),
    sa.Column('is_system', sa.Boolean(), nullable=False),
    sa.Column('held_messages', sa.Integer(), nullable=False),
    sa.Column('transmission_status', sa.String(length=4000), nullable=False),
    sa.Column('create_date', UTCDateTime(), nullable=False),
    sa.Column('closed_date', UTCDateTime(), nullable=True),
    sa.PrimaryKeyConstraint('conversation_handle', name=op.f('pk_sb_conversation_endpoints')),
    sa.UniqueConstraint('conversation_id', 'is_initiator', name=op.f('uq_sb_conversation_endpoints_conversation_id_is_initiator'))
    )
    op.create_index(op.f('ix_sb_conversation_endpoints_conversation_group_id'), 'sb_conversation_endpoints', ['conversation_group_id'], unique=False)
    op.create_index('ix_sb_conversation_endpoints_dialog_timer', 'sb_conversation_endpoints', ['dialog_timer'], unique=False)
    op.create_index('ix_sb_conversation_endpoints_lifetime', 'sb_conversation_endpoints', ['lifetime'], unique=False)
    op.create_table('sb_conversation_groups',
    sa.Column('conversation_group_id', GUID(), nullable=False),
    sa.Column('service_id', sa.Integer(), nullable=False),
    sa.Column('queue_id', sa.Integer(), nullable=False),
    sa.Column('is_system', sa.Boolean(), nullable=False),
    sa.PrimaryKeyConstraint('conversation_group_id', name=op.f('pk_sb_conversation_groups'))
    )
    op.create_index(op.f('ix_sb_conversation_groups_queue_id'), 'sb_conversation_groups', ['queue_id'], unique=False)
    op.create_table('sb_database',
    sa.Column('database_id', sa.Integer(), nullable=False),
    sa.Column('service_broker_guid', GUID(), nullable=False),
    sa.Column('is_broker_enabled', sa.Boolean(), nullable=False),
    sa.Column('is_honor_broker_priority_on', sa.Boolean(), nullable=False),
    sa.Column('catalog_version', sa.BigInteger(), nullable=False),
    sa.Column('create_date', UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('database_id', name=op.f('pk_sb_database'))
    )
    op.create_table('sb_queues',
    sa.Column('object_id', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('is_receive_enabled', sa.Boolean(), nullable=False),
    sa.Column('is_enqueue_enabled', sa.Boolean(), nullable=False),
    sa.Column('is_retention_enabled', sa.Boolean(), nullable=False),
    sa.Column('is_activation_enabled', sa.Boolean(), nullable=False),
    sa.Column('activation_procedure', sa.String(length=776), nullable=True),
    sa.Column('max_readers', sa.SmallInteger(), nullable=False),
    sa.Column('execute_as', sa.String(length=128), nullable=True),
    sa.Column('is_poison_message_handling_enabled', sa.Boolean(), nullable=False),
    sa.Column('internal_table_name', sa.String(length=128), nullable=False),
    sa.Column('layout_version', sa.Integer(), nullable=False),
    sa.Column('create_date', UTCDateTime(), nullable=False),
    sa.Column('modify_date', UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('object_id', name=op.f('pk_sb_queues')),
    sa.UniqueConstraint('internal_table_name', name=op.f('uq_sb_queues_internal_table_name')),
    sa.UniqueConstraint('name', name=op.f('uq_sb_queues_name'))
    )
    op.create_table('sb_routes',
    sa.Column('route_id', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('remote_service_name', sa.String(length=256), nullable=True),
    sa.Column('broker_instance', sa.String(length=128), nullable=True),
    sa.Column('lifetime', UTCDateTime(), nullable=True),
    sa.Column('address', sa.String(length=256), nullable=False),
    sa.Column('mirror_address', sa.String(length=256), nullable=True),
    sa.PrimaryKeyConstraint('route_id', name=op.f('pk_sb_routes')),
    sa.UniqueConstraint('name', name=op.f('uq_sb_routes_name'))
    )
    op.create_table('sb_transmission_queue',
    sa.Column('message_id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('conversation_handle', GUID(), nullable=False),
    sa.Column('to_conversation_handle', GUID(), nullable=True),
    sa.Column('to_service_name', sa.String(length=256), nullable=False),
    sa.Column('to_broker_instance', sa.String(length=128), nullable=True),
    sa.Column('from_service_name', sa.String(length=256), nullable=False),
    sa.Column('service_contract_id', sa.Integer(), nullable=False),
    sa.Column('enqueue_time', UTCDateTime(), nullable=False),
    sa.Column('message_sequence_number', sa.BigInteger(), nullable=False),
    sa.Column('message_type_id', sa.Integer(), nullable=False),
    sa.Column('is_conversation_error', sa.Boolean(), nullable=False),
    sa.Column('is_end_of_dialog', sa.Boolean(), nullable=False),
    sa.Column('message_body', sa.LargeBinary(), nullable=True),
    sa.Column('transmission_status', sa.String(length=4000), nullable=False),
    sa.Column('priority', sa.SmallInteger(), nullable=False),
    sa.PrimaryKeyConstraint('message_id', name=op.f('pk_sb_transmission_queue'))
    )
    op.create_index('ix_sb_transmission_queue_handle_seq', 'sb_transmission_queue', ['conversation_handle', 'message_sequence_number'], unique=False)
    op.create_table('sb_xml_schema_collections',
    sa.Column('xml_collection_id', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('schema_text', sa.Text(), nullable=False),
    sa.Column('create_date', UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('xml_collection_id', name=op.f('pk_sb_xml_schema_collections')),
    sa.UniqueConstraint('name', name=op.f('uq_sb_xml_schema_collections_name'))
    )
    op.create_table('sb_message_types',
    sa.Column('message_type_id', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('validation', sa.String(length=2), nullable=False),
    sa.Column('xml_collection_id', sa.Integer(), nullable=True),
    sa.Column('is_ms_shipped', sa.Boolean(), nullable=False),
    sa.ForeignKeyConstraint(['xml_collection_id'], ['sb_xml_schema_collections.xml_collection_id'], name=op.f('fk_sb_message_types_xml_collection_id_sb_xml_schema_collections')),
    sa.PrimaryKeyConstraint('message_type_id', name=op.f('pk_sb_message_types')),
    sa.UniqueConstraint('name', name=op.f('uq_sb_message_types_name'))
    )
    op.create_table('sb_services',
    sa.Column('service_id', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('name', sa.String(length=256), nullable=False),
    sa.Column('service_queue_id', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['service_queue_id'], ['sb_queues.object_id'], name=op.f('fk_sb_services_service_queue_id_sb_queues')),
    sa.PrimaryKeyConstraint('service_id', name=op.f('pk_sb_services')),
    sa.UniqueConstraint('name', name=op.f('uq_sb_services_name'))
    )
    op.create_index(op.f('ix_sb_services_service_queue_id'), 'sb_services', ['service_queue_id'], unique=False)
    op.create_table('sb_contract_message_usages',
    sa.Column('service_contract_id', sa.Integer(), nullable=False),
    sa.Column('message_type_id', sa.Integer(), nullable=False),
    sa.Column('is_sent_by_initiator', sa.Boolean(), nullable=False),
    sa.Column('is_sent_by_target', sa.Boolean(), nullable=False),
    sa.ForeignKeyConstraint(['message_type_id'], ['sb_message_types.message_type_id'], name=op.f('fk_sb_contract_message_usages_message_type_id_sb_message_types')),
    sa.ForeignKeyConstraint(['service_contract_id'], ['sb_contracts.service_contract_id'], name=op.f('fk_sb_contract_message_usages_service_contract_id_sb_contracts'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('service_contract_id', 'message_type_id', name=op.f('pk_sb_contract_message_usages'))
    )
    op.create_index(op.f('ix_sb_contract_message_usages_message_type_id'), 'sb_contract_message_usages', ['message_type_id'], unique=False)
    op.create_table('sb_service_contract_usages',
    sa.Column('service_id', sa.Integer(), nullable=False),
    sa.Column('service_contract_id', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['service_contract_id'], ['sb_contracts.service_contract_id'], name=op.f('fk_sb_service_contract_usages_service_contract_id_sb_contracts')),
    sa.ForeignKeyConstraint(['service_id'], ['sb_services.service_id'], name=op.f('fk_sb_service_contract_usages_service_id_sb_services'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('service_id', 'service_contract_id', name=op.f('pk_sb_service_contract_usages'))
    )
    op.create_index(op.f('ix_sb_service_contract_usages_service_contract_id'), 'sb_service_contract_usages', ['service_contract_id'], unique=False)
    _seed()
    _create_views()


def downgrade() -> None:
    bind = op.get_bind()
    for name in _views("NULL"):
        op.execute(f"DROP VIEW IF EXISTS {_view_name(name)}")
    # Queues made by CREATE QUEUE: their views and internal tables go with the catalog.
    preparer = bind.dialect.identifier_preparer
    for queue_name, table_name in bind.execute(
        sa.text("SELECT name, internal_table_name FROM sb_queues")
    ).all():
        op.execute(f"DROP VIEW IF EXISTS {preparer.quote_identifier(queue_name)}")
        op.execute(f"DROP TABLE IF EXISTS {preparer.quote_identifier(table_name)}")
    for table in (
        "sb_service_contract_usages", "sb_contract_message_usages", "sb_services",
        "sb_message_types", "sb_xml_schema_collections", "sb_transmission_queue", "sb_routes",
        "sb_queues", "sb_database", "sb_conversation_groups", "sb_conversation_endpoints",
        "sb_contracts",
    ):
        op.drop_table(table)
    if bind.dialect.name == "postgresql":
        op.execute("DROP SCHEMA IF EXISTS sys")

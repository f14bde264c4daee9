"""The static catalog: typed SQLAlchemy models of every broker object.

Alembic revisions in ``migrations/`` build exactly this schema (a test compares them).
Per-queue message tables are not here: ``CREATE QUEUE`` makes them at runtime
(:mod:`broker.storage.queue_tables`). All tables carry the ``sb_`` prefix so that user queue
views (named after the queue) rarely collide with them; collisions are refused anyway.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from broker.storage.types import GUID, UTCDateTime

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

SYSNAME = 128  # SQL Server's sysname: the longest object name
FIRST_USER_OBJECT_ID = 65536  # user-created broker objects get ids from here on


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class BrokerDatabase(Base):
    """The one row describing this broker database (``sys.databases`` columns)."""

    __tablename__ = "sb_database"

    database_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    service_broker_guid: Mapped[uuid.UUID] = mapped_column(GUID())
    is_broker_enabled: Mapped[bool] = mapped_column(Boolean)
    is_honor_broker_priority_on: Mapped[bool] = mapped_column(Boolean)
    # Bumped by every DDL statement: processes compare it to know when their cached
    # copy of the catalog is stale.
    catalog_version: Mapped[int] = mapped_column(BigInteger)
    create_date: Mapped[datetime] = mapped_column(UTCDateTime())
    # Database mirroring (spec 8.8, ``ddl.mirroring``): the instances (their catalogs'
    # broker ids) that serve this database as principal and as mirror, each NULL while
    # unknown, both NULL when it is not mirrored; failovers so far.
    mirroring_principal: Mapped[uuid.UUID | None] = mapped_column(GUID())
    mirroring_mirror: Mapped[uuid.UUID | None] = mapped_column(GUID())
    mirroring_role_sequence: Mapped[int] = mapped_column(Integer, server_default="0")


class XmlSchemaCollection(Base):
    __tablename__ = "sb_xml_schema_collections"

    xml_collection_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(SYSNAME), unique=True)
    schema_text: Mapped[str] = mapped_column(Text)
    create_date: Mapped[datetime] = mapped_column(UTCDateTime())


class MessageType(Base):
    __tablename__ = "sb_message_types"

    message_type_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(SYSNAME), unique=True)
    # N none, E empty, X XML (well formed or valid against xml_collection_id)
    validation: Mapped[str] = mapped_column(String(2))
    xml_collection_id: Mapped[int | None] = mapped_column(
        ForeignKey("sb_xml_schema_collections.xml_collection_id")
    )
    is_ms_shipped: Mapped[bool] = mapped_column(Boolean)


class Contract(Base):
    __tablename__ = "sb_contracts"

    service_contract_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(SYSNAME), unique=True)
    is_ms_shipped: Mapped[bool] = mapped_column(Boolean)


class ContractMessageUsage(Base):
    __tablename__ = "sb_contract_message_usages"

    service_contract_id: Mapped[int] = mapped_column(
        ForeignKey("sb_contracts.service_contract_id", ondelete="CASCADE"), primary_key=True
    )
    message_type_id: Mapped[int] = mapped_column(
        ForeignKey("sb_message_types.message_type_id"), primary_key=True, index=True
    )
    is_sent_by_initiator: Mapped[bool] = mapped_column(Boolean)
    is_sent_by_target: Mapped[bool] = mapped_column(Boolean)


class ServiceQueue(Base):
    __tablename__ = "sb_queues"

    object_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(SYSNAME), unique=True)
    # STATUS = OFF clears both flags; SQL Server shows the pair in sys.service_queues.
    is_receive_enabled: Mapped[bool] = mapped_column(Boolean)
    is_enqueue_enabled: Mapped[bool] = mapped_column(Boolean)
    is_retention_enabled: Mapped[bool] = mapped_column(Boolean)
    is_activation_enabled: Mapped[bool] = mapped_column(Boolean)
    activation_procedure: Mapped[str | None] = mapped_column(String(776))
    max_readers: Mapped[int] = mapped_column(SmallInteger)
    execute_as: Mapped[str | None] = mapped_column(String(SYSNAME))
    is_poison_message_handling_enabled: Mapped[bool] = mapped_column(Boolean)
    # The hidden table holding the messages, and the layout it was made with, so
    # that a later migration can find and upgrade every queue's table.
    internal_table_name: Mapped[str] = mapped_column(String(SYSNAME), unique=True)
    # The internal table's own object id (sys.internal_tables), taken from the queues'
    # id sequence at CREATE QUEUE; NULL never occurs once 0004 has numbered old queues.
    internal_table_object_id: Mapped[int | None] = mapped_column(Integer)
    layout_version: Mapped[int] = mapped_column(Integer)
    # Consecutive rolled-back transactions that received from this queue (poison
    # message detection: five disable the queue).
    rollback_count: Mapped[int] = mapped_column(Integer, server_default="0")
    create_date: Mapped[datetime] = mapped_column(UTCDateTime())
    modify_date: Mapped[datetime] = mapped_column(UTCDateTime())


class Service(Base):
    __tablename__ = "sb_services"

    service_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    # Service names travel as nvarchar(256) (TO SERVICE, far_service), longer than sysname.
    name: Mapped[str] = mapped_column(String(256), unique=True)
    service_queue_id: Mapped[int] = mapped_column(ForeignKey("sb_queues.object_id"), index=True)


class ServiceContractUsage(Base):
    __tablename__ = "sb_service_contract_usages"

    service_id: Mapped[int] = mapped_column(
        ForeignKey("sb_services.service_id", ondelete="CASCADE"), primary_key=True
    )
    service_contract_id: Mapped[int] = mapped_column(
        ForeignKey("sb_contracts.service_contract_id"), primary_key=True, index=True
    )


class Route(Base):
    __tablename__ = "sb_routes"

    route_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(SYSNAME), unique=True)
    remote_service_name: Mapped[str | None] = mapped_column(String(256))
    broker_instance: Mapped[str | None] = mapped_column(String(128))
    lifetime: Mapped[datetime | None] = mapped_column(UTCDateTime())
    address: Mapped[str] = mapped_column(String(256))
    mirror_address: Mapped[str | None] = mapped_column(String(256))


class ConversationGroup(Base):
    __tablename__ = "sb_conversation_groups"

    conversation_group_id: Mapped[uuid.UUID] = mapped_column(GUID(), primary_key=True)
    service_id: Mapped[int] = mapped_column(Integer)
    queue_id: Mapped[int] = mapped_column(Integer, index=True)
    is_system: Mapped[bool] = mapped_column(Boolean)


class ConversationEndpoint(Base):
    __tablename__ = "sb_conversation_endpoints"
    __table_args__ = (
        UniqueConstraint("conversation_id", "is_initiator"),
        Index("ix_sb_conversation_endpoints_dialog_timer", "dialog_timer"),
        Index("ix_sb_conversation_endpoints_lifetime", "lifetime"),
    )

    conversation_handle: Mapped[uuid.UUID] = mapped_column(GUID(), primary_key=True)
    conversation_id: Mapped[uuid.UUID] = mapped_column(GUID())
    is_initiator: Mapped[bool] = mapped_column(Boolean)
    service_contract_id: Mapped[int] = mapped_column(Integer)
    conversation_group_id: Mapped[uuid.UUID] = mapped_column(GUID(), index=True)
    service_id: Mapped[int] = mapped_column(Integer)
    lifetime: Mapped[datetime] = mapped_column(UTCDateTime())
    state: Mapped[str] = mapped_column(String(2))
    far_service: Mapped[str] = mapped_column(String(256))
    far_broker_instance: Mapped[str | None] = mapped_column(String(128))
    dialog_timer: Mapped[datetime | None] = mapped_column(UTCDateTime())
    send_sequence: Mapped[int] = mapped_column(BigInteger)
    end_dialog_sequence: Mapped[int] = mapped_column(BigInteger)
    receive_sequence: Mapped[int] = mapped_column(BigInteger)
    system_sequence: Mapped[int] = mapped_column(BigInteger)
    priority: Mapped[int] = mapped_column(SmallInteger)
    is_system: Mapped[bool] = mapped_column(Boolean)
    # Messages of this endpoint waiting in the transmission queue: while any wait,
    # later ones must wait behind them to keep the dialog in order.
    held_messages: Mapped[int] = mapped_column(Integer)
    # GET_TRANSMISSION_STATUS: why the last delivery attempt failed ('' if it did not).
    transmission_status: Mapped[str] = mapped_column(String(4000))
    create_date: Mapped[datetime] = mapped_column(UTCDateTime())
    # When the endpoint closed (CD); closed target endpoints are purged 30 minutes later.
    closed_date: Mapped[datetime | None] = mapped_column(UTCDateTime(), index=True)
    # Dialog security: an initiator begun WITH ENCRYPTION = ON gets a session key
    # identifier (sys.conversation_endpoints shows it); OFF and target endpoints have none.
    # No key exists behind it inside one instance, where dialogs are never encrypted: it
    # records that the dialog asked for security (a TCP route without a remote service
    # binding then gives 9727). Last column: ``rows.Endpoint`` lists them in this order.
    outbound_session_key_identifier: Mapped[uuid.UUID | None] = mapped_column(GUID())
    # The highest sequence number held with status 2, ahead of a missing message (None:
    # none): an arrival that fills the gap looks for messages to release only then.
    last_out_of_order_sequence: Mapped[int | None] = mapped_column(BigInteger)


class TransmissionQueueEntry(Base):
    __tablename__ = "sb_transmission_queue"
    __table_args__ = (
        Index("ix_sb_transmission_queue_handle_seq", "conversation_handle", "message_sequence_number"),
        # Whether a dialog has an earlier message still backing off: one seek per message
        # the transmitter reads, however long the dialog's backlog (``outbound.due_messages``).
        Index("ix_sb_transmission_queue_handle_due", "conversation_handle", "next_attempt_time"),
        # The inbound messages parked while their queue was OFF, by next attempt: the
        # scheduler's look for them reads none of the outbound backlog (migration 0010).
        Index("ix_sb_transmission_queue_parked_due", "next_attempt_time",
              sqlite_where=text("to_conversation_handle IS NOT NULL"),
              postgresql_where=text("to_conversation_handle IS NOT NULL")),
        {"sqlite_autoincrement": True},
    )

    # Never reused (AUTOINCREMENT on SQLite, a bigint sequence on PostgreSQL: migration
    # 0014): a transmitter settles by id in a later transaction than the one that read it.
    message_id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
                                            autoincrement=True)
    conversation_handle: Mapped[uuid.UUID] = mapped_column(GUID())
    # The receiving endpoint once it is known (every message after the first one).
    to_conversation_handle: Mapped[uuid.UUID | None] = mapped_column(GUID())
    to_service_name: Mapped[str] = mapped_column(String(256))
    to_broker_instance: Mapped[str | None] = mapped_column(String(128))
    from_service_name: Mapped[str] = mapped_column(String(256))
    service_contract_id: Mapped[int] = mapped_column(Integer)
    enqueue_time: Mapped[datetime] = mapped_column(UTCDateTime())
    message_sequence_number: Mapped[int] = mapped_column(BigInteger)
    message_type_id: Mapped[int] = mapped_column(Integer)
    is_conversation_error: Mapped[bool] = mapped_column(Boolean)
    is_end_of_dialog: Mapped[bool] = mapped_column(Boolean)
    message_body: Mapped[bytes | None] = mapped_column(LargeBinary)
    transmission_status: Mapped[str] = mapped_column(String(4000))
    priority: Mapped[int] = mapped_column(SmallInteger)
    # Background retries: when to try again, and how many tries failed so far.
    next_attempt_time: Mapped[datetime | None] = mapped_column(UTCDateTime(), index=True)
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    # A message going to another instance in fragments: how many of them (0 to n - 1)
    # the destination has committed, and which destination (its broker instance) said
    # so; the next attempt starts there if it goes to the same one (migration 0011).
    fragments_held: Mapped[int] = mapped_column(Integer, server_default="0")
    fragments_held_by: Mapped[str | None] = mapped_column(String(128))


class MessageFragment(Base):
    """A fragment of a message arriving from another instance, kept until its last
    fragment completes the message (``conversations.arrival``)."""

    __tablename__ = "sb_fragments"

    conversation_handle: Mapped[uuid.UUID] = mapped_column(GUID(), primary_key=True)  # the receiving endpoint
    message_sequence_number: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    fragment: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    body: Mapped[bytes] = mapped_column(LargeBinary)


class ConversationPriority(Base):
    """CREATE BROKER PRIORITY: NULL criteria match ANY."""

    __tablename__ = "sb_conversation_priorities"

    priority_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(SYSNAME), unique=True)
    service_contract_id: Mapped[int | None] = mapped_column(Integer)
    local_service_id: Mapped[int | None] = mapped_column(Integer)
    remote_service_name: Mapped[str | None] = mapped_column(String(256))
    priority: Mapped[int] = mapped_column(SmallInteger)


class QueueMonitor(Base):
    """sys.dm_broker_queue_monitors: one row per queue watched by a running runtime."""

    __tablename__ = "sb_queue_monitors"

    queue_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    state: Mapped[str] = mapped_column(String(32))
    last_empty_rowset_time: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_activated_time: Mapped[datetime | None] = mapped_column(UTCDateTime())
    tasks_waiting: Mapped[int] = mapped_column(Integer, server_default="0")


class ActivatedTask(Base):
    """sys.dm_broker_activated_tasks: one row per running activation reader."""

    __tablename__ = "sb_activated_tasks"

    task_id: Mapped[uuid.UUID] = mapped_column(GUID(), primary_key=True)
    queue_id: Mapped[int] = mapped_column(Integer, index=True)
    procedure_name: Mapped[str] = mapped_column(String(776))
    process_id: Mapped[int] = mapped_column(Integer)
    start_time: Mapped[datetime] = mapped_column(UTCDateTime())


class SqlModule(Base):
    """A stored procedure written in T-SQL (SQL Server's sys.sql_modules): its text, by name."""

    __tablename__ = "sb_sql_modules"

    name_key: Mapped[str] = mapped_column(String(SYSNAME), primary_key=True)  # the name case-folded
    name: Mapped[str] = mapped_column(String(SYSNAME))
    definition: Mapped[str] = mapped_column(Text)
    create_date: Mapped[datetime] = mapped_column(UTCDateTime())
    modify_date: Mapped[datetime] = mapped_column(UTCDateTime())


class SparkStagedMessage(Base):
    """A message a Spark write task staged; its job's commit SENDs it (``broker.spark``).

    ``job`` is a batch job's id or a streaming sink's id; ``batch_id`` the micro-batch
    (NULL for a batch job); ``token`` one task attempt, so that a retried task's rows
    are sent once.
    """

    __tablename__ = "sb_spark_staging"
    __table_args__ = (Index("ix_sb_spark_staging_job_batch_id", "job", "batch_id"),)

    staging_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    job: Mapped[str] = mapped_column(String(1024))
    batch_id: Mapped[int | None] = mapped_column(BigInteger)
    token: Mapped[str] = mapped_column(String(36), index=True)
    partition_id: Mapped[int] = mapped_column(Integer)
    conversation_handle: Mapped[uuid.UUID | None] = mapped_column(GUID())
    from_service: Mapped[str | None] = mapped_column(String(256))
    to_service: Mapped[str | None] = mapped_column(String(256))
    contract: Mapped[str | None] = mapped_column(String(SYSNAME))
    message_type: Mapped[str | None] = mapped_column(String(SYSNAME))
    dialog_key: Mapped[str | None] = mapped_column(Text)
    message_body: Mapped[bytes | None] = mapped_column(LargeBinary)
    staged_at: Mapped[datetime] = mapped_column(UTCDateTime())


class SparkSink(Base):
    """A Spark streaming sink and the last micro-batch it committed (exactly-once)."""

    __tablename__ = "sb_spark_sinks"

    sink_id: Mapped[str] = mapped_column(String(1024), primary_key=True)
    batch_id: Mapped[int] = mapped_column(BigInteger)
    commit_time: Mapped[datetime] = mapped_column(UTCDateTime())


class RemoteServiceBinding(Base):
    """CREATE REMOTE SERVICE BINDING: the user whose certificate secures dialogs with a
    remote service (dialog security; one binding per remote service)."""

    __tablename__ = "sb_remote_service_bindings"

    remote_service_binding_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(SYSNAME), unique=True)
    remote_service_name: Mapped[str] = mapped_column(String(256), unique=True)
    user_name: Mapped[str] = mapped_column(String(SYSNAME))
    is_anonymous_on: Mapped[bool] = mapped_column(Boolean)


class InstanceDatabase(Base):
    """A database served by the instance whose catalog this is (``broker.instance``):
    rows only in an instance catalog, SQL Server's ``master.sys.databases``."""

    __tablename__ = "sb_instance_databases"

    name: Mapped[str] = mapped_column(String(SYSNAME), primary_key=True)
    url: Mapped[str] = mapped_column(Text)
    database_id: Mapped[int] = mapped_column(Integer, unique=True)
    create_date: Mapped[datetime] = mapped_column(UTCDateTime())
    # The member's mirroring role here (1 principal, 2 mirror, NULL not mirrored) and its
    # broker id, as the instance last read them from the member: what its endpoint answers with.
    mirroring_role: Mapped[int | None] = mapped_column(SmallInteger)
    mirroring_guid: Mapped[uuid.UUID | None] = mapped_column(GUID())


class ServiceBrokerEndpoint(Base):
    """CREATE ENDPOINT ... FOR SERVICE_BROKER: at most one row, in an instance catalog.

    The certificate, its private key and the trusted peers' certificates are PEM text
    (the peers' concatenated). The key is stored as it was given, unencrypted: SQL
    Server encrypts it with the master database's key; here the instance catalog itself
    must be protected (docs/endpoints.md).
    """

    __tablename__ = "sb_endpoints"

    endpoint_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(SYSNAME), unique=True)
    port: Mapped[int] = mapped_column(Integer)
    listener_ip: Mapped[str | None] = mapped_column(String(45))  # NULL: LISTENER_IP = ALL
    state: Mapped[str] = mapped_column(String(8))  # STARTED, STOPPED or DISABLED
    certificate: Mapped[str] = mapped_column(Text)
    private_key: Mapped[str] = mapped_column(Text)
    trusted_peers: Mapped[str] = mapped_column(Text)  # '' trusts no peer
    encryption: Mapped[str] = mapped_column(String(9))  # REQUIRED, SUPPORTED or DISABLED
    encryption_algorithm: Mapped[str] = mapped_column(String(16))  # AES
    message_forwarding: Mapped[bool] = mapped_column(Boolean)
    message_forward_size: Mapped[int] = mapped_column(Integer)  # megabytes
    create_date: Mapped[datetime] = mapped_column(UTCDateTime())
    modify_date: Mapped[datetime] = mapped_column(UTCDateTime())


class BrokerConnection(Base):
    """sys.dm_broker_connections: one row per network connection of the endpoint, kept
    by the runtime that holds the connection (``runtime_session``). The codes of
    ``state``, ``login_state`` and ``encryption_algorithm`` are in
    ``broker.storage.connection_states``; the view adds their descriptions.

    The last three columns are not SQL Server's: the peer's ``host:port``, why a
    connection was refused (NULL if it was not), and which runtime wrote the row.
    """

    __tablename__ = "sb_broker_connections"

    connection_id: Mapped[uuid.UUID] = mapped_column(GUID(), primary_key=True)
    transport_stream_id: Mapped[uuid.UUID | None] = mapped_column(GUID())
    state: Mapped[int] = mapped_column(SmallInteger)
    connect_time: Mapped[datetime | None] = mapped_column(UTCDateTime())
    login_time: Mapped[datetime | None] = mapped_column(UTCDateTime())
    authentication_method: Mapped[str | None] = mapped_column(String(128))
    principal_name: Mapped[str | None] = mapped_column(String(128))
    remote_user_name: Mapped[str | None] = mapped_column(String(128))
    last_activity_time: Mapped[datetime | None] = mapped_column(UTCDateTime())
    is_accept: Mapped[bool] = mapped_column(Boolean)
    login_state: Mapped[int] = mapped_column(SmallInteger, server_default="0")
    peer_certificate_id: Mapped[int | None] = mapped_column(Integer)
    encryption_algorithm: Mapped[int] = mapped_column(SmallInteger, server_default="0")
    receives_posted: Mapped[int] = mapped_column(SmallInteger, server_default="0")
    is_receive_flow_controlled: Mapped[bool] = mapped_column(Boolean, server_default=false())
    sends_posted: Mapped[int] = mapped_column(SmallInteger, server_default="0")
    is_send_flow_controlled: Mapped[bool] = mapped_column(Boolean, server_default=false())
    total_bytes_sent: Mapped[int] = mapped_column(BigInteger, server_default="0")
    total_bytes_received: Mapped[int] = mapped_column(BigInteger, server_default="0")
    total_fragments_sent: Mapped[int] = mapped_column(BigInteger, server_default="0")
    total_fragments_received: Mapped[int] = mapped_column(BigInteger, server_default="0")
    total_sends: Mapped[int] = mapped_column(BigInteger, server_default="0")
    total_receives: Mapped[int] = mapped_column(BigInteger, server_default="0")
    peer_arbitration_id: Mapped[uuid.UUID | None] = mapped_column(GUID())
    address: Mapped[str | None] = mapped_column(String(300))  # the peer's host:port
    refusal: Mapped[str | None] = mapped_column(String(4000))
    runtime_session: Mapped[str | None] = mapped_column(String(256), index=True)


class BrokerForwardedMessage(Base):
    """sys.dm_broker_forwarded_messages: a message the instance holds in memory while it
    forwards it, written by the runtime that forwards it (``runtime_session``)."""

    __tablename__ = "sb_forwarded_messages"

    forwarded_id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
                                              autoincrement=True)
    conversation_id: Mapped[uuid.UUID] = mapped_column(GUID())
    is_initiator: Mapped[bool] = mapped_column(Boolean)
    to_service_name: Mapped[str] = mapped_column(String(256))
    to_broker_instance: Mapped[str] = mapped_column(String(128))
    from_service_name: Mapped[str] = mapped_column(String(256))
    from_broker_instance: Mapped[str] = mapped_column(String(128))
    adjacent_broker_address: Mapped[str] = mapped_column(String(256))
    message_sequence_number: Mapped[int] = mapped_column(BigInteger)
    message_fragment_number: Mapped[int] = mapped_column(Integer)
    hops_remaining: Mapped[int] = mapped_column(SmallInteger)
    time_to_live: Mapped[int] = mapped_column(Integer)
    time_consumed: Mapped[int] = mapped_column(Integer)
    message_id: Mapped[int] = mapped_column(BigInteger)
    runtime_session: Mapped[str] = mapped_column(String(256), index=True)


class SymmetricKey(Base):
    """CREATE MASTER KEY: the database master key (``##MS_DatabaseMasterKey##``), the one
    symmetric key there is (sys.symmetric_keys). Its password is not kept: nothing here
    is encrypted with it (docs/sql.md)."""

    __tablename__ = "sb_symmetric_keys"

    symmetric_key_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(SYSNAME), unique=True)
    key_guid: Mapped[uuid.UUID] = mapped_column(GUID())
    create_date: Mapped[datetime] = mapped_column(UTCDateTime())
    modify_date: Mapped[datetime] = mapped_column(UTCDateTime())


class DatabasePrincipal(Base):
    """CREATE USER: a user WITHOUT LOGIN, FOR LOGIN (``login_name``) or FROM CERTIFICATE
    (``certificate_id``): sys.database_principals. Names compare without regard to case."""

    __tablename__ = "sb_database_principals"

    principal_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name_key: Mapped[str] = mapped_column(String(SYSNAME), unique=True)  # the name case-folded
    name: Mapped[str] = mapped_column(String(SYSNAME))
    type: Mapped[str] = mapped_column(String(1))  # S: SQL user, C: mapped to a certificate
    login_name: Mapped[str | None] = mapped_column(String(SYSNAME))
    certificate_id: Mapped[int | None] = mapped_column(Integer)
    create_date: Mapped[datetime] = mapped_column(UTCDateTime())
    modify_date: Mapped[datetime] = mapped_column(UTCDateTime())


class ServerPrincipal(Base):
    """CREATE LOGIN, in an instance catalog (master): a login WITH PASSWORD (the password
    is not kept: no one logs in with it here) or FROM CERTIFICATE: sys.server_principals."""

    __tablename__ = "sb_server_principals"

    principal_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name_key: Mapped[str] = mapped_column(String(SYSNAME), unique=True)
    name: Mapped[str] = mapped_column(String(SYSNAME))
    type: Mapped[str] = mapped_column(String(1))  # S: SQL login, C: mapped to a certificate
    certificate_id: Mapped[int | None] = mapped_column(Integer)
    create_date: Mapped[datetime] = mapped_column(UTCDateTime())
    modify_date: Mapped[datetime] = mapped_column(UTCDateTime())


class Certificate(Base):
    """CREATE CERTIFICATE: sys.certificates. In an instance catalog (master) its
    certificates serve and trust the endpoint; in a database they are dialog security's
    (kept, not used to encrypt: docs/sql.md). PEM text; the private key, when there is
    one, unencrypted, as ``sb_endpoints`` keeps it (docs/endpoints.md)."""

    __tablename__ = "sb_certificates"

    certificate_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name_key: Mapped[str] = mapped_column(String(SYSNAME), unique=True)
    name: Mapped[str] = mapped_column(String(SYSNAME))
    principal_id: Mapped[int] = mapped_column(Integer)  # its owner: a database principal (1: dbo)
    subject: Mapped[str] = mapped_column(String(4000))
    issuer_name: Mapped[str] = mapped_column(String(4000))
    cert_serial_number: Mapped[str] = mapped_column(String(64))
    thumbprint: Mapped[bytes] = mapped_column(LargeBinary, unique=True)  # SHA-1 of the DER form
    start_date: Mapped[datetime] = mapped_column(UTCDateTime())
    expiry_date: Mapped[datetime] = mapped_column(UTCDateTime())
    key_length: Mapped[int] = mapped_column(Integer)
    certificate: Mapped[str] = mapped_column(Text)
    private_key: Mapped[str | None] = mapped_column(Text)
    pvt_key_encryption_type: Mapped[str] = mapped_column(String(2))  # MK, PW or NA (no private key)
    is_active_for_begin_dialog: Mapped[bool] = mapped_column(Boolean)
    pvt_key_last_backup_date: Mapped[datetime | None] = mapped_column(UTCDateTime())
    create_date: Mapped[datetime] = mapped_column(UTCDateTime())


class Permission(Base):
    """GRANT: a permission (``type``, SQL Server's code) on a securable (``class``: 0 the
    database, 17 a service, 105 an endpoint; ``major_id`` its id) to a principal (a user,
    or for an endpoint a login; 0 / 2 is public): sys.database_permissions and
    sys.server_permissions. Nothing checks them (docs/sql.md)."""

    __tablename__ = "sb_permissions"

    class_: Mapped[int] = mapped_column("class", SmallInteger, primary_key=True)
    major_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    grantee_principal_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    type: Mapped[str] = mapped_column(String(4), primary_key=True)
    permission_name: Mapped[str] = mapped_column(String(128))

"""An immutable snapshot of the catalog, so SEND and RECEIVE never re-read it.

Every DDL statement bumps ``sb_database.catalog_version`` in its own transaction; a
transaction reads that one number when it starts and reloads the snapshot only when it
changed (another process or connection altered the catalog).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from broker.storage.models import (
    BrokerDatabase,
    Contract,
    ContractMessageUsage,
    MessageType,
    Route,
    Service,
    ServiceContractUsage,
    ServiceQueue,
    XmlSchemaCollection,
)
from broker.storage.statements import Prepared


@dataclass(frozen=True, slots=True)
class MessageTypeInfo:
    id: int
    name: str
    validation: str  # 'N', 'E' or 'X'
    xml_collection_id: int | None


@dataclass(frozen=True, slots=True)
class ContractInfo:
    id: int
    name: str
    # message type id -> (may the initiator send it, may the target send it)
    usages: dict[int, tuple[bool, bool]]


@dataclass(frozen=True, slots=True)
class QueueInfo:
    id: int
    name: str
    table_name: str
    receive_enabled: bool
    enqueue_enabled: bool
    retention: bool
    poison_message_handling: bool
    activation_enabled: bool
    activation_procedure: str | None
    max_readers: int
    rollback_count: int


@dataclass(frozen=True, slots=True)
class ServiceInfo:
    id: int
    name: str
    queue_id: int
    contract_ids: frozenset[int]


@dataclass(frozen=True, slots=True)
class RouteInfo:
    """A row of ``sys.routes``: None in ``service_name`` or ``broker_instance`` matches any."""

    id: int
    name: str
    service_name: str | None
    broker_instance: str | None  # lower case, like the guids it is compared with
    lifetime: datetime | None
    address: str
    mirror_address: str | None


@dataclass(slots=True)
class Catalog:
    version: int
    broker_guid: uuid.UUID
    broker_enabled: bool
    honor_broker_priority: bool
    message_types: dict[int, MessageTypeInfo]
    message_types_by_name: dict[str, MessageTypeInfo]
    contracts: dict[int, ContractInfo]
    contracts_by_name: dict[str, ContractInfo]
    queues: dict[int, QueueInfo]
    queues_by_name: dict[str, QueueInfo]
    services: dict[int, ServiceInfo]
    services_by_name: dict[str, ServiceInfo]
    schema_collections: dict[int, tuple[str, str]]  # id -> (name, text)
    routes: tuple[RouteInfo, ...]
    # Compiled schema collections by id, filled by ``conversations.validation`` on first
    # use: compiled once per snapshot, shared by every transaction that sees it.
    compiled_schemas: dict[int, Any] = field(default_factory=dict)

    def queue_named(self, name: str) -> QueueInfo | None:
        # Queue names resolve case-insensitively, like SQL Server object names under
        # its default collation (and like the view that carries the name).
        found = self.queues_by_name.get(name)
        if found is not None:
            return found
        lowered = name.lower()
        return next((q for q in self.queues.values() if q.name.lower() == lowered), None)


_VERSION = Prepared(select(BrokerDatabase.catalog_version))


def catalog_version(conn: Connection) -> int:
    """The committed catalog version (read once per transaction)."""
    return int(_VERSION.scalar(conn))


def load_catalog(conn: Connection) -> Catalog:
    """Read the whole catalog in the caller's transaction."""
    db = conn.execute(select(BrokerDatabase.__table__)).one()
    message_types = {
        row.message_type_id: MessageTypeInfo(row.message_type_id, row.name, row.validation, row.xml_collection_id)
        for row in conn.execute(select(MessageType.__table__))
    }
    usages: dict[int, dict[int, tuple[bool, bool]]] = {}
    for row in conn.execute(select(ContractMessageUsage.__table__)):
        usages.setdefault(row.service_contract_id, {})[row.message_type_id] = (
            bool(row.is_sent_by_initiator), bool(row.is_sent_by_target)
        )
    contracts = {
        row.service_contract_id: ContractInfo(
            row.service_contract_id, row.name, usages.get(row.service_contract_id, {})
        )
        for row in conn.execute(select(Contract.__table__))
    }
    queues = {
        row.object_id: QueueInfo(
            row.object_id, row.name, row.internal_table_name, bool(row.is_receive_enabled),
            bool(row.is_enqueue_enabled), bool(row.is_retention_enabled),
            bool(row.is_poison_message_handling_enabled), bool(row.is_activation_enabled),
            row.activation_procedure, row.max_readers, row.rollback_count,
        )
        for row in conn.execute(select(ServiceQueue.__table__))
    }
    service_contracts: dict[int, set[int]] = {}
    for row in conn.execute(select(ServiceContractUsage.__table__)):
        service_contracts.setdefault(row.service_id, set()).add(row.service_contract_id)
    services = {
        row.service_id: ServiceInfo(row.service_id, row.name, row.service_queue_id,
                                    frozenset(service_contracts.get(row.service_id, ())))
        for row in conn.execute(select(Service.__table__))
    }
    schema_collections = {
        row.xml_collection_id: (row.name, row.schema_text)
        for row in conn.execute(select(XmlSchemaCollection.xml_collection_id, XmlSchemaCollection.name,
                                       XmlSchemaCollection.schema_text))
    }
    routes = tuple(
        RouteInfo(row.route_id, row.name, row.remote_service_name,
                  row.broker_instance.lower() if row.broker_instance else None, row.lifetime, row.address,
                  row.mirror_address)
        for row in conn.execute(select(Route.__table__).order_by(Route.route_id))
    )
    return Catalog(
        version=db.catalog_version,
        broker_guid=db.service_broker_guid,
        broker_enabled=bool(db.is_broker_enabled),
        honor_broker_priority=bool(db.is_honor_broker_priority_on),
        message_types=message_types,
        message_types_by_name={m.name: m for m in message_types.values()},
        contracts=contracts,
        contracts_by_name={c.name: c for c in contracts.values()},
        queues=queues,
        queues_by_name={q.name: q for q in queues.values()},
        services=services,
        services_by_name={s.name: s for s in services.values()},
        schema_collections=schema_collections,
        routes=routes,
    )

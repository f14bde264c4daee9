"""CREATE / ALTER / DROP of message types, contracts, queues, services; ENABLE_BROKER.

Each function runs in the caller's transaction, checks before it writes, and ends with
``ctx.catalog_changed()`` so other processes reload their catalog snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import delete, func, insert, select, update

from broker.arguments import VALIDATIONS
from broker.conversations import delivery  # a module, not its names: delivery imports this module in turn
from broker.conversations import endpoints as ep
from broker.conversations.system_messages import REMOTE_SERVICE_DROPPED
from broker.conversations.validation import compile_schema
from broker.errors import MISSING_OPTION, BrokerError, InvalidArgumentError
from broker.storage.context import TxContext
from broker.storage.models import (
    FIRST_USER_OBJECT_ID,
    BrokerDatabase,
    Contract,
    ContractMessageUsage,
    ConversationPriority,
    MessageType,
    Service,
    ServiceContractUsage,
    ServiceQueue,
    XmlSchemaCollection,
)
from broker.storage.queue_tables import (
    LAYOUT_VERSION,
    create_queue_storage,
    drop_queue_storage,
    internal_table_name,
    queue_table,
    validate_queue_name,
)

# The stored code of each VALIDATION keyword, and the (by initiator, by target) flags of
# each SENT BY keyword: the keywords come checked by the gate (``broker.arguments``).
VALIDATION_CODES = dict(zip(VALIDATIONS, "NEXX", strict=True))
SENT_BY = {"INITIATOR": (True, False), "TARGET": (False, True), "ANY": (True, True)}
UNSET: Any = object()


def create_xml_schema_collection(ctx: TxContext, name: str, xsd: str | bytes) -> None:
    compile_schema(name, xsd)  # a self-contained collection of valid XSD, or a numbered error
    text = xsd.decode("utf-8") if isinstance(xsd, bytes) else xsd
    if ctx.conn.execute(select(XmlSchemaCollection).where(XmlSchemaCollection.name == name)).first():
        raise BrokerError(2714, name=name)
    ctx.conn.execute(insert(XmlSchemaCollection).values(
        xml_collection_id=next_id(ctx, XmlSchemaCollection.xml_collection_id), name=name,
        schema_text=text, create_date=ctx.now(),
    ))
    ctx.catalog_changed()


def create_message_type(ctx: TxContext, name: str, validation: str, schema_collection: str | None) -> None:
    """``validation`` is a VALIDATION keyword in upper case (the gate's ``choice``)."""
    collection_id = None
    if validation == "VALID_XML":
        if schema_collection is None:
            raise InvalidArgumentError(MISSING_OPTION, statement="VALIDATION = VALID_XML",
                                       names="WITH SCHEMA COLLECTION")
        collection_id = ctx.conn.execute(
            select(XmlSchemaCollection.xml_collection_id).where(XmlSchemaCollection.name == schema_collection)
        ).scalar()
        if collection_id is None:
            raise BrokerError(15151, kind="XML schema collection", name=schema_collection)
    elif schema_collection is not None:
        raise InvalidArgumentError(102, "A schema collection goes only with VALIDATION = VALID_XML.",
                                   near="SCHEMA COLLECTION")
    if name in ctx.catalog.message_types_by_name:
        raise BrokerError(2714, name=name)
    ctx.conn.execute(insert(MessageType).values(
        message_type_id=next_id(ctx, MessageType.message_type_id), name=name,
        validation=VALIDATION_CODES[validation], xml_collection_id=collection_id, is_ms_shipped=False,
    ))
    ctx.catalog_changed()


def create_contract(ctx: TxContext, name: str, messages: list[tuple[str, str]]) -> None:
    """``messages`` are (message type, SENT BY keyword) pairs (the gate's ``contract_messages``)."""
    usages: dict[int, tuple[bool, bool]] = {}
    for type_name, direction in messages:
        message_type = ctx.catalog.message_types_by_name.get(type_name)
        if message_type is None:
            raise BrokerError(8428, name=type_name)
        if message_type.id in usages:
            raise BrokerError(8403, name=type_name)
        usages[message_type.id] = SENT_BY[direction]
    if not any(by_initiator for by_initiator, _ in usages.values()):
        raise BrokerError(8492, name=name)
    if name in ctx.catalog.contracts_by_name:
        raise BrokerError(2714, name=name)
    contract_id = next_id(ctx, Contract.service_contract_id)
    ctx.conn.execute(insert(Contract).values(service_contract_id=contract_id, name=name, is_ms_shipped=False))
    ctx.conn.execute(insert(ContractMessageUsage), [
        {"service_contract_id": contract_id, "message_type_id": type_id,
         "is_sent_by_initiator": by_initiator, "is_sent_by_target": by_target}
        for type_id, (by_initiator, by_target) in usages.items()
    ])
    ctx.catalog_changed()


def create_queue(
    ctx: TxContext, name: str, *, status: bool, retention: bool, activation: Mapping[str, Any] | None,
    poison_message_handling: bool,
) -> None:
    """The options come checked by the gate (``arguments.queue_options``)."""
    queue_name = validate_queue_name(name)
    object_id = next_id(ctx, ServiceQueue.object_id)
    view_name = ctx.state.backend.queue_view_name(queue_name, object_id)
    if ctx.catalog.queue_named(queue_name) is not None or ctx.state.backend.object_name_taken(ctx.conn, view_name):
        raise BrokerError(2714, name=queue_name)
    table_name = internal_table_name(object_id)
    now = ctx.now()
    values = {
        "object_id": object_id, "name": queue_name, "is_receive_enabled": bool(status),
        "is_enqueue_enabled": bool(status), "is_retention_enabled": bool(retention),
        "is_activation_enabled": False, "activation_procedure": None, "max_readers": 0,
        "execute_as": None, "is_poison_message_handling_enabled": bool(poison_message_handling),
        "internal_table_name": table_name, "layout_version": LAYOUT_VERSION,
        "create_date": now, "modify_date": now,
    }
    if activation is not None:
        values.update(_activation_values(activation, creating=True))
    create_queue_storage(ctx.conn, view_name, table_name)
    ctx.conn.execute(insert(ServiceQueue).values(**values))
    ctx.catalog_changed()


def alter_queue(
    ctx: TxContext, name: str, *, status: Any = UNSET, retention: Any = UNSET, activation: Any = UNSET,
    poison_message_handling: Any = UNSET,
) -> None:
    queue = ctx.catalog.queue_named(name)
    if queue is None:
        raise BrokerError(15151, kind="queue", name=name)
    values: dict[str, Any] = {"modify_date": ctx.now()}
    if status is not UNSET:
        values["is_receive_enabled"] = values["is_enqueue_enabled"] = bool(status)
    if retention is not UNSET:
        values["is_retention_enabled"] = bool(retention)
    if poison_message_handling is not UNSET:
        values["is_poison_message_handling_enabled"] = bool(poison_message_handling)
    if activation is not UNSET:
        values.update(_activation_values(activation, creating=False))
    ctx.conn.execute(update(ServiceQueue).where(ServiceQueue.object_id == queue.id).values(**values))
    ctx.catalog_changed()
    if status is not UNSET and status:
        delivery.retry_held(ctx)


def drop_queue(ctx: TxContext, name: str) -> None:
    queue = ctx.catalog.queue_named(name)
    if queue is None:
        raise BrokerError(3701, kind="queue", name=name)
    user = next((s for s in ctx.catalog.services.values() if s.queue_id == queue.id), None)
    if user is not None:
        raise BrokerError(3729, kind="queue", name=queue.name, ref_kind="service", ref_name=user.name)
    ctx.conn.execute(delete(ep.groups).where(ep.groups.c.queue_id == queue.id))
    drop_queue_storage(ctx.conn, ctx.state.backend.queue_view_name(queue.name, queue.id), queue.table_name)
    ctx.conn.execute(delete(ServiceQueue).where(ServiceQueue.object_id == queue.id))
    ctx.catalog_changed()


def create_service(ctx: TxContext, name: str, queue_name: str, contracts: Iterable[str]) -> None:
    queue = ctx.catalog.queue_named(queue_name)
    if queue is None:
        raise BrokerError(15151, kind="queue", name=queue_name)
    contract_ids: list[int] = []
    for contract_name in ([contracts] if isinstance(contracts, str) else contracts):
        contract = ctx.catalog.contracts_by_name.get(contract_name)
        if contract is None:
            raise BrokerError(8425, name=contract_name)
        if contract.id in contract_ids:
            raise BrokerError(8404, name=contract_name)
        contract_ids.append(contract.id)
    if name in ctx.catalog.services_by_name:
        raise BrokerError(2714, name=name)
    service_id = next_id(ctx, Service.service_id)
    ctx.conn.execute(insert(Service).values(service_id=service_id, name=name, service_queue_id=queue.id))
    if contract_ids:
        ctx.conn.execute(insert(ServiceContractUsage), [
            {"service_id": service_id, "service_contract_id": c} for c in contract_ids
        ])
    ctx.catalog_changed()
    delivery.retry_held(ctx)  # messages may have been waiting for a service of this name


def drop_service(ctx: TxContext, name: str) -> None:
    """Drop a service: its messages go, and far sides of its open dialogs get Error -8470."""
    service = ctx.catalog.services_by_name.get(name)
    if service is None:
        raise BrokerError(3701, kind="service", name=name)
    _refuse_if_prioritized(ctx, "service", name, ConversationPriority.local_service_id == service.id)
    for endpoint in ep.endpoints_where(ctx, ep.endpoints.c.service_id == service.id):
        peer = ep.peer_of(ctx, endpoint)
        if peer is not None and endpoint.state not in ("DO", "CD"):
            delivery.broker_error(ctx, peer, REMOTE_SERVICE_DROPPED, "Remote service has been dropped.")
        ep.drop_held_messages(ctx, endpoint.conversation_handle)
        ctx.conn.execute(delete(ep.endpoints).where(ep.endpoints.c.conversation_handle == endpoint.conversation_handle))
    ctx.conn.execute(delete(ep.groups).where(ep.groups.c.service_id == service.id))
    table = queue_table(ctx.catalog.queues[service.queue_id].table_name)
    ctx.conn.execute(delete(table).where(table.c.service_id == service.id))
    ctx.conn.execute(delete(Service).where(Service.service_id == service.id))
    ctx.catalog_changed()


def drop_contract(ctx: TxContext, name: str) -> None:
    contract = ctx.catalog.contracts_by_name.get(name)
    if contract is None:
        raise BrokerError(3701, kind="contract", name=name)
    if contract.id < FIRST_USER_OBJECT_ID:
        raise BrokerError(3708, kind="contract", name=name)
    user = next((s for s in ctx.catalog.services.values() if contract.id in s.contract_ids), None)
    if user is not None:
        raise BrokerError(3729, kind="contract", name=name, ref_kind="service", ref_name=user.name)
    _refuse_if_prioritized(ctx, "contract", name, ConversationPriority.service_contract_id == contract.id)
    # Open conversations on the contract end with an error (SQL Server: -8487).
    for endpoint in ep.endpoints_where(ctx, ep.endpoints.c.service_contract_id == contract.id):
        delivery.broker_error(ctx, endpoint, -8487, "The remote service contract has been dropped.")
    ctx.conn.execute(delete(Contract).where(Contract.service_contract_id == contract.id))
    ctx.catalog_changed()


def drop_message_type(ctx: TxContext, name: str) -> None:
    message_type = ctx.catalog.message_types_by_name.get(name)
    if message_type is None:
        raise BrokerError(3701, kind="message type", name=name)
    if message_type.id < FIRST_USER_OBJECT_ID:
        raise BrokerError(3708, kind="message type", name=name)
    user = next((c for c in ctx.catalog.contracts.values() if message_type.id in c.usages), None)
    if user is not None:
        raise BrokerError(3729, kind="message type", name=name, ref_kind="contract", ref_name=user.name)
    ctx.conn.execute(delete(MessageType).where(MessageType.message_type_id == message_type.id))
    ctx.catalog_changed()


def set_broker_enabled(ctx: TxContext, enabled: bool) -> None:
    """ALTER DATABASE ... SET ENABLE_BROKER / DISABLE_BROKER (the guid is kept)."""
    ctx.conn.execute(update(BrokerDatabase).values(is_broker_enabled=bool(enabled)))
    ctx.catalog_changed()
    if enabled:
        delivery.retry_held(ctx)


def _refuse_if_prioritized(ctx: TxContext, kind: str, name: str, condition: Any) -> None:
    """DROP fails while a broker priority names the object (3729), as in SQL Server."""
    priority = ctx.conn.execute(select(ConversationPriority.name).where(condition).limit(1)).scalar()
    if priority is not None:
        raise BrokerError(3729, kind=kind, name=name, ref_kind="broker priority", ref_name=priority)


def _activation_values(activation: Mapping[str, Any] | None, *, creating: bool) -> dict[str, Any]:
    """Stored ACTIVATION options (checked by ``arguments.activation``; the runtime acts on
    them); None means ACTIVATION (DROP)."""
    if activation is None:
        return {"is_activation_enabled": False, "activation_procedure": None, "max_readers": 0,
                "execute_as": None}
    values: dict[str, Any] = {}
    if "status" in activation or creating:
        values["is_activation_enabled"] = activation.get("status", True)
    for option, column in (("procedure_name", "activation_procedure"), ("max_queue_readers", "max_readers"),
                           ("execute_as", "execute_as")):
        if option in activation:
            values[column] = activation[option]
    return values


def next_id(ctx: TxContext, column: Any) -> int:
    """User objects are numbered from 65536, as SQL Server numbers them."""
    highest = ctx.conn.execute(select(func.max(column))).scalar() or 0
    return max(highest + 1, FIRST_USER_OBJECT_ID)

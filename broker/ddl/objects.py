"""CREATE / ALTER / DROP of message types, contracts, queues, services and XML schema collections.

Each function runs in the caller's transaction, checks before it writes, and ends with
``ctx.catalog_changed()`` so other processes reload their catalog snapshot.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any, cast

from sqlalchemy import Table, delete, func, insert, or_, select, update

from broker.arguments import VALIDATIONS
from broker.conversations import delivery  # a module, not its names: delivery imports this module in turn
from broker.conversations import endpoints as ep
from broker.conversations.system_messages import REMOTE_SERVICE_DROPPED
from broker.conversations.validation import compile_schema, xml_text
from broker.ddl import principals
from broker.ddl.names import row_named
from broker.errors import MISSING_OPTION, SYSTEM_OBJECT, BrokerError, InvalidArgumentError
from broker.storage.catalog import QueueInfo
from broker.storage.context import TxContext
from broker.storage.models import (
    FIRST_USER_OBJECT_ID,
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
from broker.storage.rows import Endpoint

# The stored code of each VALIDATION keyword, and the (by initiator, by target) flags of
# each SENT BY keyword: the keywords come checked by the gate (``broker.arguments``).
VALIDATION_CODES = dict(zip(VALIDATIONS, "NEXX", strict=True))
SENT_BY = {"INITIATOR": (True, False), "TARGET": (False, True), "ANY": (True, True)}
UNSET: Any = object()
_collections = cast(Table, XmlSchemaCollection.__table__)


def create_xml_schema_collection(ctx: TxContext, name: str, xsd: str | bytes) -> None:
    compile_schema(name, xsd)  # a self-contained collection of valid XSD, or a numbered error
    text = xml_text(xsd) if isinstance(xsd, bytes) else xsd
    if row_named(ctx, _collections, name) is not None:
        raise BrokerError(2714, name=name)
    ctx.conn.execute(insert(XmlSchemaCollection).values(
        xml_collection_id=next_id(ctx, XmlSchemaCollection.xml_collection_id), name=name,
        schema_text=text, create_date=ctx.now(),
    ))
    ctx.catalog_changed()


def create_message_type(ctx: TxContext, name: str, validation: str, schema_collection: str | None) -> None:
    """``validation`` is a VALIDATION keyword in upper case (the gate's ``choice``)."""
    values = _validation_values(ctx, validation, schema_collection)
    if name in ctx.catalog.message_types_by_name:
        raise BrokerError(2714, name=name)
    ctx.conn.execute(insert(MessageType).values(
        message_type_id=next_id(ctx, MessageType.message_type_id), name=name, is_ms_shipped=False, **values,
    ))
    ctx.catalog_changed()


def alter_message_type(ctx: TxContext, name: str, validation: str, schema_collection: str | None) -> None:
    """ALTER MESSAGE TYPE name VALIDATION = ...: only the validation changes.

    Messages already in a queue are not checked again; messages still waiting in the
    transmission queue are checked against the new validation when they are delivered,
    since validation happens at delivery. Unknown name 15151, a built-in type 59030.
    """
    message_type = ctx.catalog.message_types_by_name.get(name)
    if message_type is None:
        raise BrokerError(15151, kind="message type", name=name)
    if message_type.id < FIRST_USER_OBJECT_ID:
        raise BrokerError(SYSTEM_OBJECT, kind="message type", name=name)
    values = _validation_values(ctx, validation, schema_collection)
    ctx.conn.execute(update(MessageType).where(MessageType.message_type_id == message_type.id).values(**values))
    ctx.catalog_changed()


def _validation_values(ctx: TxContext, validation: str, schema_collection: str | None) -> dict[str, Any]:
    """The stored columns of VALIDATION = ``validation`` [WITH SCHEMA COLLECTION ...]."""
    collection_id = None
    if validation == "VALID_XML":
        if schema_collection is None:
            raise InvalidArgumentError(MISSING_OPTION, statement="VALIDATION = VALID_XML",
                                       names="WITH SCHEMA COLLECTION")
        collection = row_named(ctx, _collections, schema_collection)
        collection_id = None if collection is None else collection.xml_collection_id
        if collection_id is None:
            raise BrokerError(15151, kind="XML schema collection", name=schema_collection)
    elif schema_collection is not None:
        raise InvalidArgumentError(102, "A schema collection goes only with VALIDATION = VALID_XML.",
                                   near="SCHEMA COLLECTION")
    return {"validation": VALIDATION_CODES[validation], "xml_collection_id": collection_id}


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
    # The queue and its internal table each take an object id (sys.internal_tables).
    object_id = next_id(ctx, ServiceQueue.object_id, ServiceQueue.internal_table_object_id)
    while _storage_names_taken(ctx, object_id, queue_name):  # a user's queue is named like one of them
        object_id += 2
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
        "internal_table_name": table_name, "internal_table_object_id": object_id + 1,
        "layout_version": LAYOUT_VERSION,
        "create_date": now, "modify_date": now,
    }
    if activation is not None:
        values.update(_activation_values(activation, creating=True))
    create_queue_storage(ctx.conn, view_name, table_name)
    ctx.conn.execute(insert(ServiceQueue).values(**values))
    ctx.catalog_changed()


def _storage_names_taken(ctx: TxContext, object_id: int, queue_name: str) -> bool:
    """Whether the internal table of queue ``object_id``, or one of its indexes, would take
    a name in use or the new queue's own: user queues' views share their namespace (SQL
    Server keeps internal tables apart, in ``sys``)."""
    table = queue_table(internal_table_name(object_id))
    names = (table.name, *(str(index.name) for index in table.indexes))
    return queue_name.lower() in (name.lower() for name in names) or any(
        ctx.state.backend.object_name_taken(ctx.conn, name) for name in names)


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
    contract_ids = _contract_ids(ctx, [contracts] if isinstance(contracts, str) else list(contracts))
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


def alter_service(
    ctx: TxContext, name: str, queue_name: str | None, add_contracts: list[str], drop_contracts: list[str],
) -> None:
    """ALTER SERVICE name [ON QUEUE queue] [(ADD CONTRACT c, DROP CONTRACT c, ...)].

    A new queue receives the service's messages (in their order, retained ones too) and
    its conversation groups; messages held because the old queue was OFF are retried.
    A dropped contract refuses new dialogs (their first message gets Error -8408);
    existing dialogs on it are left as they are (spec 1.5). Errors: unknown service or
    queue 15151, unknown contract 8425, a contract named twice, added while the service
    has it, or dropped while it does not (8404 / 8425), nothing changed 8493.
    """
    service = ctx.catalog.services_by_name.get(name)
    if service is None:
        raise BrokerError(15151, kind="service", name=name)
    queue = None
    if queue_name is not None:
        queue = ctx.catalog.queue_named(queue_name)
        if queue is None:
            raise BrokerError(15151, kind="queue", name=queue_name)
    named = _contract_ids(ctx, add_contracts + drop_contracts)  # each contract once in the two lists
    added, dropped = named[:len(add_contracts)], named[len(add_contracts):]
    for contract_id in added:
        if contract_id in service.contract_ids:
            raise BrokerError(8404, name=ctx.catalog.contracts[contract_id].name)
    for contract_id in dropped:
        if contract_id not in service.contract_ids:
            raise BrokerError(8425, f"The service contract '{ctx.catalog.contracts[contract_id].name}' "
                                    f"is not one of the service '{name}'.")
    moving_to = queue if queue is not None and queue.id != service.queue_id else None
    if moving_to is None and not added and not dropped:
        raise BrokerError(8493, name=name)
    if added:
        ctx.conn.execute(insert(ServiceContractUsage), [
            {"service_id": service.id, "service_contract_id": c} for c in added
        ])
    if dropped:
        ctx.conn.execute(delete(ServiceContractUsage).where(
            ServiceContractUsage.service_id == service.id, ServiceContractUsage.service_contract_id.in_(dropped)))
    if moving_to is not None:
        _move_service_messages(ctx, service.id, ctx.catalog.queues[service.queue_id].table_name, moving_to)
        ctx.conn.execute(update(Service).where(Service.service_id == service.id)
                         .values(service_queue_id=moving_to.id))
    ctx.catalog_changed()
    if moving_to is not None:
        delivery.retry_held(ctx)  # messages may have waited for the old queue to be ON


def _contract_ids(ctx: TxContext, names: list[str]) -> list[int]:
    """The ids of the contracts named, each at most once (8425 unknown, 8404 twice)."""
    ids: list[int] = []
    for contract_name in names:
        contract = ctx.catalog.contracts_by_name.get(contract_name)
        if contract is None:
            raise BrokerError(8425, name=contract_name)
        if contract.id in ids:
            raise BrokerError(8404, name=contract_name)
        ids.append(contract.id)
    return ids


def _move_service_messages(ctx: TxContext, service_id: int, old_table: str, queue: QueueInfo) -> None:
    """Move a service's messages and conversation groups into ``queue``.

    The rows get new queuing orders in the new queue, in the order they had in the old one.
    The service's groups and endpoints are locked first, so that no RECEIVE or SEND on
    them is under way while the rows are copied (PostgreSQL; SQLite runs one writer).
    """
    moving = lock_conversations(ctx, service_id)
    source, target = queue_table(old_table), queue_table(queue.table_name)
    _part_shared_groups(ctx, service_id, moving, source, queue.id)
    columns = [c.name for c in source.columns if c.name != "queuing_order"]
    ctx.conn.execute(insert(target).from_select(
        columns, select(*(source.c[c] for c in columns)).where(source.c.service_id == service_id)
        .order_by(source.c.queuing_order)))
    ctx.conn.execute(delete(source).where(source.c.service_id == service_id))
    moving_groups = {e.conversation_group_id for e in moving}
    for chunk in _chunks(sorted(moving_groups, key=str)):
        ctx.conn.execute(update(ep.groups).where(ep.groups.c.conversation_group_id.in_(chunk))
                         .values(queue_id=queue.id))
    # Wakes this process's readers of the new queue at commit; catalog_changed wakes the others'.
    ctx.touched_queues.add(queue.id)


def lock_conversations(ctx: TxContext, service_id: int | None = None) -> list[Endpoint]:
    """Lock every conversation group, then every endpoint (of one service, or all), until
    the transaction ends, and return the endpoints. A service's groups are those it
    began and those its conversations were moved into (MOVE CONVERSATION).

    The order RECEIVE and SEND take them in (group, then endpoints), so DDL that moves or
    removes messages waits for the statements under way on them instead of racing them.
    SQLite compiles the locks away: its write lock already excludes every other writer.
    """
    groups_of = [] if service_id is None else [or_(
        ep.groups.c.service_id == service_id,
        ep.groups.c.conversation_group_id.in_(select(ep.endpoints.c.conversation_group_id)
                                              .where(ep.endpoints.c.service_id == service_id)))]
    endpoints_of = [] if service_id is None else [ep.endpoints.c.service_id == service_id]
    ctx.conn.execute(select(ep.groups.c.conversation_group_id).where(*groups_of).with_for_update()).all()
    return [Endpoint(*row) for row in ctx.conn.execute(select(ep.endpoints).where(*endpoints_of).with_for_update())]


def _part_shared_groups(ctx: TxContext, service_id: int, moving: list[Endpoint], source: Any,
                        queue_id: int) -> None:
    """Before a service's conversations move to queue ``queue_id``: those sharing a group
    with another service's conversations (MOVE CONVERSATION put them together) leave it
    for a new group in the new queue, one per group parted, their messages with them. A
    group belongs to one queue, and the other service's conversations stay where they are.
    """
    shared: dict[uuid.UUID, uuid.UUID] = {}  # old group -> the group its movers join
    for group_id in {e.conversation_group_id for e in moving}:
        staying = select(ep.endpoints.c.conversation_handle).where(
            ep.endpoints.c.conversation_group_id == group_id, ep.endpoints.c.service_id != service_id).exists()
        if ctx.conn.execute(select(staying)).scalar():
            shared[group_id] = uuid.uuid4()
    for old_group, new_group in shared.items():
        ctx.conn.execute(insert(ep.groups).values(
            conversation_group_id=new_group, service_id=service_id, queue_id=queue_id, is_system=False))
        handles = [e.conversation_handle for e in moving if e.conversation_group_id == old_group]
        for chunk in _chunks(handles):
            ctx.conn.execute(update(ep.endpoints).where(ep.endpoints.c.conversation_handle.in_(chunk))
                             .values(conversation_group_id=new_group))
            ctx.conn.execute(update(source).where(source.c.conversation_handle.in_(chunk))
                             .values(conversation_group_id=new_group))
    for endpoint in moving:
        endpoint.conversation_group_id = shared.get(endpoint.conversation_group_id, endpoint.conversation_group_id)


def _chunks(values: list[Any], size: int = 500) -> Iterable[list[Any]]:
    """``values`` in lists of at most ``size`` (bound parameters per statement)."""
    return (values[start:start + size] for start in range(0, len(values), size))


def drop_service(ctx: TxContext, name: str) -> None:
    """Drop a service: its messages and the permissions on it go, and far sides of its open
    dialogs get Error -8470."""
    service = ctx.catalog.services_by_name.get(name)
    if service is None:
        raise BrokerError(3701, kind="service", name=name)
    _refuse_if_prioritized(ctx, "service", name, ConversationPriority.local_service_id == service.id)
    dropped = ep.endpoints_where(ctx, ep.endpoints.c.service_id == service.id)
    for endpoint in dropped:
        peer = ep.peer_of(ctx, endpoint)
        if peer is not None and endpoint.state not in ("DO", "CD"):
            delivery.broker_error(ctx, peer, REMOTE_SERVICE_DROPPED, "Remote service has been dropped.")
        ep.drop_held_messages(ctx, endpoint.conversation_handle)
        ctx.conn.execute(delete(ep.endpoints).where(ep.endpoints.c.conversation_handle == endpoint.conversation_handle))
    # A group lives while any of its conversations does: one the service began may hold
    # another service's conversation (MOVE CONVERSATION), and it keeps that one's messages.
    in_use = select(ep.endpoints.c.conversation_handle).where(
        ep.endpoints.c.conversation_group_id == ep.groups.c.conversation_group_id).exists()
    ctx.conn.execute(delete(ep.groups).where(ep.groups.c.service_id == service.id, ~in_use))
    for chunk in _chunks(sorted({e.conversation_group_id for e in dropped}, key=str)):
        ctx.conn.execute(delete(ep.groups).where(ep.groups.c.conversation_group_id.in_(chunk), ~in_use))
    table = queue_table(ctx.catalog.queues[service.queue_id].table_name)
    ctx.conn.execute(delete(table).where(table.c.service_id == service.id))
    ctx.conn.execute(delete(Service).where(Service.service_id == service.id))
    principals.drop_permissions_on(ctx, principals.SERVICE, service.id)
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


def next_id(ctx: TxContext, *columns: Any) -> int:
    """The next id after the highest in ``columns`` (one sequence may fill several):
    user objects are numbered from 65536, as SQL Server numbers them."""
    highest = ctx.conn.execute(select(*(func.max(column) for column in columns))).one()
    return max(max(value or 0 for value in highest) + 1, FIRST_USER_OBJECT_ID)

"""Catalog listings: ``broker show queues|services|...|groups|monitors``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import click

import broker
from cli.render import emit, json_option
from cli.state import CliState, pass_state

Row = dict[str, Any]

# listing -> (catalog view, columns of the human table). --json prints every column.
LISTINGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "queues": (
        "sys.service_queues",
        (
            "name",
            "object_id",
            "is_receive_enabled",
            "is_enqueue_enabled",
            "is_retention_enabled",
            "is_activation_enabled",
            "activation_procedure",
            "max_readers",
            "is_poison_message_handling_enabled",
        ),
    ),
    "services": ("sys.services", ("name", "service_id", "queue", "contracts")),
    "contracts": ("sys.service_contracts", ("name", "service_contract_id", "messages")),
    "message-types": (
        "sys.service_message_types",
        ("name", "message_type_id", "validation", "validation_desc", "xml_collection_id"),
    ),
    "endpoints": (
        "sys.conversation_endpoints",
        (
            "conversation_handle",
            "is_initiator",
            "state",
            "state_desc",
            "far_service",
            "conversation_id",
            "conversation_group_id",
            "send_sequence",
            "receive_sequence",
            "dialog_timer",
        ),
    ),
    "transmission": (
        "sys.transmission_queue",
        (
            "conversation_handle",
            "from_service_name",
            "to_service_name",
            "message_type_name",
            "message_sequence_number",
            "enqueue_time",
            "transmission_status",
        ),
    ),
    "priorities": (
        "sys.conversation_priorities",
        ("name", "priority_id", "priority", "contract", "local_service", "remote_service_name"),
    ),
    "groups": (
        "sys.conversation_groups",
        ("conversation_group_id", "service", "queue", "conversations", "is_system"),
    ),
    "monitors": (
        "sys.dm_broker_queue_monitors",
        (
            "queue",
            "queue_id",
            "state",
            "tasks_waiting",
            "activated_tasks",
            "last_activated_time",
            "last_empty_rowset_time",
        ),
    ),
    "routes": (
        "sys.routes",
        (
            "name",
            "route_id",
            "remote_service_name",
            "broker_instance",
            "lifetime",
            "address",
            "mirror_address",
        ),
    ),
    "remote-service-bindings": (
        "sys.remote_service_bindings",
        ("name", "remote_service_binding_id", "remote_service_name", "remote_principal_name", "is_anonymous_on"),
    ),
    "broker-endpoints": (
        "sys.service_broker_endpoints",
        (
            "name",
            "endpoint_id",
            "state_desc",
            "port",
            "ip_address",
            "connection_auth_desc",
            "encryption_algorithm_desc",
            "is_message_forwarding_enabled",
            "message_forwarding_size",
        ),
    ),
    "broker-connections": (
        "sys.dm_broker_connections",
        (
            "address",
            "is_accept",
            "state_desc",
            "login_state_desc",
            "principal_name",
            "encryption_algorithm_desc",
            "total_bytes_sent",
            "total_bytes_received",
            "last_activity_time",
            "refusal",
        ),
    ),
}
# The instance's own listings: they need --instance.
_OF_THE_INSTANCE = ("broker-endpoints", "broker-connections")


def _with_queue_and_contracts(db: broker.Broker, rows: list[Row]) -> list[Row]:
    queues = {q["object_id"]: q["name"] for q in db.catalog("sys.service_queues")}
    contracts = {c["service_contract_id"]: c["name"] for c in db.catalog("sys.service_contracts")}
    accepted: dict[int, list[str]] = {}
    for usage in db.catalog("sys.service_contract_usages"):
        accepted.setdefault(usage["service_id"], []).append(contracts[usage["service_contract_id"]])
    return [
        {
            **row,
            "queue": queues.get(row["service_queue_id"]),
            "contracts": ", ".join(sorted(accepted.get(row["service_id"], []))),
        }
        for row in rows
    ]


def _with_messages(db: broker.Broker, rows: list[Row]) -> list[Row]:
    types = {t["message_type_id"]: t["name"] for t in db.catalog("sys.service_message_types")}
    messages: dict[int, list[str]] = {}
    for usage in db.catalog("sys.service_contract_message_usages"):
        sender = (
            "ANY"
            if usage["is_sent_by_initiator"] and usage["is_sent_by_target"]
            else "INITIATOR"
            if usage["is_sent_by_initiator"]
            else "TARGET"
        )
        messages.setdefault(usage["service_contract_id"], []).append(
            f"{types[usage['message_type_id']]} SENT BY {sender}"
        )
    return [
        {**row, "messages": ", ".join(messages.get(row["service_contract_id"], []))} for row in rows
    ]


def _with_criteria_names(db: broker.Broker, rows: list[Row]) -> list[Row]:
    """Broker priorities with their contract and local service by name; NULL is ANY."""
    contracts = {c["service_contract_id"]: c["name"] for c in db.catalog("sys.service_contracts")}
    services = {s["service_id"]: s["name"] for s in db.catalog("sys.services")}

    def name(names: dict[int, str], key: int | None) -> Any:
        return "ANY" if key is None else names.get(key, key)

    return [
        {
            **row,
            "contract": name(contracts, row["service_contract_id"]),
            "local_service": name(services, row["local_service_id"]),
            "remote_service_name": "ANY" if row["remote_service_name"] is None else row["remote_service_name"],
        }
        for row in rows
    ]


def _with_service_and_size(db: broker.Broker, rows: list[Row]) -> list[Row]:
    """Conversation groups with their service and queue by name and their conversations."""
    services = {s["service_id"]: s for s in db.catalog("sys.services")}
    queues = {q["object_id"]: q["name"] for q in db.catalog("sys.service_queues")}
    sizes = Counter(e["conversation_group_id"] for e in db.catalog("sys.conversation_endpoints"))
    added = []
    for row in rows:
        service = services.get(row["service_id"])
        added.append({
            **row,
            "service": service["name"] if service else None,
            "queue": queues.get(service["service_queue_id"]) if service else None,
            "conversations": sizes[row["conversation_group_id"]],
        })
    return added


def _endpoints_with_tcp(inst: broker.Instance, rows: list[Row]) -> list[Row]:
    """sys.service_broker_endpoints with the port and address of sys.tcp_endpoints."""
    tcp = {row["endpoint_id"]: row for row in inst.catalog("sys.tcp_endpoints")}
    return [{**row, "port": tcp[row["endpoint_id"]]["port"], "ip_address": tcp[row["endpoint_id"]]["ip_address"]}
            for row in rows]


def _with_queue_and_tasks(db: broker.Broker, rows: list[Row]) -> list[Row]:
    """Queue monitors with the queue's name and its running activation readers
    (sys.dm_broker_activated_tasks)."""
    queues = {q["object_id"]: q["name"] for q in db.catalog("sys.service_queues")}
    tasks = Counter(t["queue_id"] for t in db.catalog("sys.dm_broker_activated_tasks"))
    return [
        {**row, "queue": queues.get(row["queue_id"]), "activated_tasks": tasks[row["queue_id"]]}
        for row in rows
    ]


# Readable names instead of ids, for the human table only.
_ENRICH: dict[str, Callable[[broker.Broker, list[Row]], list[Row]]] = {
    "services": _with_queue_and_contracts,
    "contracts": _with_messages,
    "priorities": _with_criteria_names,
}
# Columns added to the view's rows in both forms (--json too): names and counts.
_ADD: dict[str, Callable[[broker.Broker, list[Row]], list[Row]]] = {
    "groups": _with_service_and_size,
    "monitors": _with_queue_and_tasks,
}


@click.command("show")
@click.argument("listing", type=click.Choice(tuple(LISTINGS)))
@json_option
@pass_state
def show(state: CliState, listing: str, as_json: bool) -> None:
    """List catalog rows (the sys.* views).

    endpoints is sys.conversation_endpoints, transmission is sys.transmission_queue
    (with each message's transmission_status: why it waits), priorities is
    sys.conversation_priorities (broker priorities), groups is sys.conversation_groups
    (with their service, queue and number of conversations), monitors is
    sys.dm_broker_queue_monitors (the activation state of each queue a running runtime
    watches, with its readers counted in sys.dm_broker_activated_tasks), routes is
    sys.routes (with --instance alone: the instance's own routes),
    remote-service-bindings is sys.remote_service_bindings. With --instance:
    broker-endpoints is sys.service_broker_endpoints with sys.tcp_endpoints' port and
    address (the instance's Service Broker endpoint), broker-connections is
    sys.dm_broker_connections (its network connections, refused ones with why).

    \b
    Example:
      broker show services
      broker show endpoints --json
      broker show transmission
      broker show monitors
      broker --instance sqlite:///instance.db show routes
      broker --instance sqlite:///instance.db show broker-connections
    """
    view, columns = LISTINGS[listing]
    if listing in _OF_THE_INSTANCE:
        inst = state.instance()
        rows = inst.catalog(view)
        emit(_endpoints_with_tcp(inst, rows) if listing == "broker-endpoints" else rows, columns, as_json=as_json)
        return
    if listing == "routes":
        emit(state.route_owner().catalog(view), columns, as_json=as_json)
        return
    db = state.db()
    rows = db.catalog(view)
    if listing in _ADD:
        rows = _ADD[listing](db, rows)
    if not as_json and listing in _ENRICH:
        rows = _ENRICH[listing](db, rows)
    emit(rows, columns, as_json=as_json)


COMMANDS = (show,)

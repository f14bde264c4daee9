"""Catalog listings (``broker show ...``) and the one-screen ``broker status``."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

import click
from sqlalchemy.engine import make_url

import broker
from broker import schema as broker_schema
from cli.render import emit, json_option, jsonable, plural
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
}


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


# Readable names instead of ids, for the human table only.
_ENRICH: dict[str, Callable[[broker.Broker, list[Row]], list[Row]]] = {
    "services": _with_queue_and_contracts,
    "contracts": _with_messages,
    "priorities": _with_criteria_names,
}


@click.command("show")
@click.argument("listing", type=click.Choice(tuple(LISTINGS)))
@json_option
@pass_state
def show(state: CliState, listing: str, as_json: bool) -> None:
    """List catalog rows (the sys.* views).

    endpoints is sys.conversation_endpoints, transmission is sys.transmission_queue,
    priorities is sys.conversation_priorities (broker priorities).

    \b
    Example:
      broker show services
      broker show endpoints --json
      broker show priorities
    """
    view, columns = LISTINGS[listing]
    db = state.db()
    rows = db.catalog(view)
    if not as_json and listing in _ENRICH:
        rows = _ENRICH[listing](db, rows)
    emit(rows, columns, as_json=as_json)


@click.command()
@json_option
@pass_state
def status(state: CliState, as_json: bool) -> None:
    """Summarise the database on one screen.

    Queues with their messages by status, the transmission queue, conversation
    endpoints by state, and conversation timers.

    \b
    Example:
      broker status
      broker --db sqlite:///app.db status --json
    """
    db = state.db()
    summary = _summary(state.url, db)
    if as_json:
        click.echo(json.dumps(summary, indent=2, default=jsonable))
        return
    database = summary["database"]
    click.echo(
        f"Database {database['url']} (schema {database['schema_revision']}): Service Broker "
        f"{'enabled' if database['is_broker_enabled'] else 'DISABLED'}, "
        f"broker instance {jsonable(database['service_broker_guid'])}"
    )
    emit(
        summary["queues"],
        ("queue", "enabled", "ready", "received", "incomplete", "sent_copies", "total"),
        as_json=False,
        title="Queues",
    )
    emit(
        summary["endpoints"],
        ("state", "state_desc", "count"),
        as_json=False,
        title="Endpoints by state",
    )
    click.echo(
        f"Transmission queue: {plural(summary['transmission_queue'], 'message')} awaiting delivery"
    )
    timers = summary["timers"]
    click.echo(
        f"Conversation timers: {timers['count']} set"
        + (f", next due {jsonable(timers['next_due'])}" if timers["next_due"] else "")
    )


# Queue row status -> column in the summary (spec 3: 1 ready, 0 received and retained,
# 2 not yet complete, 3 retained copy of a sent message).
_STATUS_COLUMNS = {1: "ready", 0: "received", 2: "incomplete", 3: "sent_copies"}


def _summary(url: str, db: broker.Broker) -> dict[str, Any]:
    database = db.catalog("sys.databases")[0]
    queues = []
    for queue in db.catalog("sys.service_queues"):
        counts = Counter(db.queue_counts(queue["name"]))
        queues.append(
            {
                "queue": queue["name"],
                "enabled": bool(queue["is_receive_enabled"]),
                **{column: counts[s] for s, column in _STATUS_COLUMNS.items()},
                "total": counts.total(),
            }
        )
    endpoints = db.catalog("sys.conversation_endpoints")
    by_state = Counter((e["state"], e["state_desc"]) for e in endpoints)
    timers = (_timer_deadline(e["dialog_timer"]) for e in endpoints)
    deadlines = sorted(t for t in timers if t is not None)
    return {
        "database": {
            "url": make_url(url).render_as_string(hide_password=True),
            "schema_revision": broker_schema.current_revision(db.engine),
            "is_broker_enabled": bool(database["is_broker_enabled"]),
            "service_broker_guid": database["service_broker_guid"],
        },
        "queues": queues,
        "transmission_queue": len(db.catalog("sys.transmission_queue")),
        "endpoints": [
            {"state": s, "state_desc": d, "count": n} for (s, d), n in sorted(by_state.items())
        ],
        "timers": {"count": len(deadlines), "next_due": deadlines[0] if deadlines else None},
    }


def _timer_deadline(value: object) -> datetime | None:
    """An endpoint's timer deadline; None when no timer is set (SQL Server shows
    1900-01-01 in sys.conversation_endpoints.dialog_timer then)."""
    return value if isinstance(value, datetime) and value.year > 1900 else None


COMMANDS = (show, status)

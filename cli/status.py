"""``broker status``: queues, transmission backlog, endpoints and timers on one screen,
for a database or for every database of an instance; ``--watch`` refreshes it."""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from broker.errors import BrokerError
from cli.params import Seconds, count_range
from cli.render import Listing, json_option, jsonable, plain_lines, plural, rich_table, terminal_console
from cli.state import CliState

if TYPE_CHECKING:
    from rich.console import RenderableType

    import broker

# Queue row status -> column in the summary (spec 3: 1 ready, 0 received and retained,
# 2 not yet complete, 3 retained copy of a sent message).
INVALID_OBJECT = 208  # a queue dropped meanwhile
_STATUS_COLUMNS = {1: "ready", 0: "received", 2: "incomplete", 3: "sent_copies"}
_QUEUE_COLUMNS = ("queue", "enabled", "ready", "received", "incomplete", "sent_copies", "total", "oldest_ready")
_DESTINATION_COLUMNS = ("count", "to_service_name", "to_broker_instance", "transmission_status")
_CONNECTION_COLUMNS = ("address", "is_accept", "state_desc", "login_state_desc", "principal_name",
                       "total_fragments_sent", "total_fragments_received", "total_bytes_sent",
                       "total_bytes_received", "last_activity_time", "refusal")

# A line of text or a table: what one snapshot prints, on a terminal or down a pipe.
Block = str | Listing


@click.command()
@click.option("--watch", is_flag=True, help="Print a new snapshot every --interval seconds until Ctrl-C.")
@click.option(
    "--interval",
    type=Seconds(),
    default=2.0,
    show_default=True,
    metavar="SECONDS",
    help="Time between snapshots with --watch.",
)
@click.option("--iterations", type=count_range(), help="With --watch: stop after N snapshots.")
@json_option
@click.pass_context
def status(ctx: click.Context, watch: bool, interval: float, iterations: int | None, as_json: bool) -> None:
    """Summarise the database, or every database of an instance, on one screen.

    Queues with their messages by status and the age of the oldest ready message, the
    transmission queue by destination (to_service_name, to_broker_instance) and reason
    (transmission_status: why the messages wait), conversation endpoints by state, and
    conversation timers (how many are set, how many are overdue, the next one). With
    --instance (and no --database) the same for each member database, after the
    instance's Service Broker endpoint and its connections to other instances (state,
    peer, messages and bytes each way, why a connection was refused), as the running
    runtime last wrote them, and the messages awaiting delivery by next hop (the peer's
    address the routes send them to now, this instance, or why none takes them).

    --watch redraws the screen in place on a terminal and prints one snapshot after
    another otherwise (one JSON object per line with --json).

    \b
    Example:
      broker status
      broker --db sqlite:///app.db status --json
      broker status --watch --interval 1
      broker --instance sqlite:///instance.db status
    """
    if not watch and any(
        ctx.get_parameter_source(name) is not ParameterSource.DEFAULT for name in ("interval", "iterations")
    ):
        raise click.UsageError("--interval and --iterations go with --watch")
    state: CliState = ctx.obj
    snapshot, blocks_of = _snapshots(state)
    if not watch:
        summary = snapshot()
        if as_json:
            click.echo(json.dumps(summary, indent=2, default=jsonable))
        else:
            _print(blocks_of(summary))
        return
    console = None if as_json else terminal_console()
    try:
        if console is not None:
            from rich.live import Live

            with Live(console=console, auto_refresh=False) as live:
                for _ in _ticks(iterations, interval):
                    live.update(_renderable(blocks_of(snapshot())), refresh=True)
            return
        for number in _ticks(iterations, interval):
            summary = snapshot()
            if as_json:
                click.echo(json.dumps(summary, default=jsonable))
            else:
                if number:
                    click.echo()
                _print(blocks_of(summary))
    except KeyboardInterrupt:
        pass  # Ctrl-C ends watching: exit 0


Summary = dict[str, Any]


def _snapshots(state: CliState) -> tuple[Callable[[], Summary], Callable[[Summary], list[Block]]]:
    """How to take a snapshot and how to print it: of one database, or of an instance."""
    if state.on_instance_itself:
        inst = state.instance()
        shown_instance = state.shown_instance_url()
        return (lambda: _instance_summary(shown_instance, inst)), _instance_blocks
    db = state.db()
    shown = state.shown_url()
    return (lambda: _summary(shown, db)), _blocks


def _ticks(iterations: int | None, interval: float) -> Iterator[int]:
    """0, 1, 2, ... (``iterations`` of them, or forever), ``interval`` seconds apart."""
    for number in itertools.count() if iterations is None else range(iterations):
        if number:
            time.sleep(interval)
        yield number


def _summary(shown_url: str, db: broker.Broker) -> dict[str, Any]:
    from broker.storage import schema as broker_schema

    now = datetime.now(UTC)
    database = db.catalog("sys.databases")[0]
    queues = []
    for queue in db.catalog("sys.service_queues"):
        try:
            counts = Counter(db.queue_counts(queue["name"]))
            oldest = db.oldest_ready_time(queue["name"]) if counts[1] else None
        except BrokerError as error:
            if error.number != INVALID_OBJECT:
                raise
            continue  # dropped by another process since the list was read
        queues.append(
            {
                "queue": queue["name"],
                "enabled": bool(queue["is_receive_enabled"]),
                **{column: counts[s] for s, column in _STATUS_COLUMNS.items()},
                "total": counts.total(),
                "oldest_ready_time": oldest,
                "oldest_ready_age_s": None if oldest is None else round((now - oldest).total_seconds(), 3),
            }
        )
    backlog = db.transmission_backlog()
    destinations = db.transmission_destinations()
    timers_set, timers_due, next_timer = db.timer_summary()
    return {
        "time": now,
        "database": {
            "url": shown_url,
            "schema_revision": broker_schema.current_revision(db.engine),
            "is_broker_enabled": bool(database["is_broker_enabled"]),
            "service_broker_guid": database["service_broker_guid"],
        },
        "queues": queues,
        "transmission_queue": sum(backlog.values()),
        "transmission_backlog": [
            {"transmission_status": reason, "count": count} for reason, count in backlog.items()
        ],
        "transmission_destinations": destinations,
        "endpoints": [{"state": s, "state_desc": d, "count": n} for s, d, n in db.endpoint_states()],
        "timers": {"count": timers_set, "due": timers_due, "next_due": next_timer},
    }


def _instance_summary(shown_url: str, inst: broker.Instance) -> dict[str, Any]:
    """Every member's summary (each without its own time), under the instance's line."""
    from broker.runtime.backlog import backlog_by_peer
    from broker.storage import schema as broker_schema

    now = datetime.now(UTC)
    members = []
    for name, db in inst.databases.items():
        summary = _summary(db.engine.url.render_as_string(hide_password=True), db)
        del summary["time"]
        members.append({"name": name, **summary})
    endpoint = inst.endpoint_config()
    return {
        "time": now,
        "instance": {
            "url": shown_url,
            "schema_revision": broker_schema.current_revision(inst.msdb.engine),
            "databases": len(members),
            "transmission_queue": sum(member["transmission_queue"] for member in members),
        },
        "endpoint": None if endpoint is None else {
            "name": endpoint.name, "port": endpoint.port, "listener_ip": endpoint.listener_ip or "ALL",
            "state": endpoint.state, "encryption": endpoint.encryption,
        },
        "connections": [{column: row[column] for column in _CONNECTION_COLUMNS}
                        for row in inst.catalog("sys.dm_broker_connections")],
        "backlog_by_peer": backlog_by_peer(inst.databases),
        "databases": members,
    }


def _instance_blocks(summary: dict[str, Any]) -> list[Block]:
    """An instance's snapshot: its line, then each member's blocks under the member's name."""
    instance = summary["instance"]
    now: datetime = summary["time"]
    blocks: list[Block] = [
        f"Instance {instance['url']} (schema {instance['schema_revision']}) at {now:%Y-%m-%d %H:%M:%S} UTC: "
        f"{plural(instance['databases'], 'database')}, "
        f"{plural(instance['transmission_queue'], 'message')} awaiting delivery"
    ]
    endpoint = summary["endpoint"]
    if endpoint is None:
        blocks.append("No Service Broker endpoint: nothing goes to or comes from other instances")
    else:
        blocks.append(f"Endpoint {endpoint['name']} on {endpoint['listener_ip']}:{endpoint['port']}: "
                      f"{endpoint['state']}, encryption {endpoint['encryption']}; "
                      f"{plural(len(summary['connections']), 'connection')} (as the running runtime last wrote them)")
        if summary["connections"]:
            blocks.append(Listing(summary["connections"], _CONNECTION_COLUMNS, "Connections"))
    if summary["backlog_by_peer"]:
        blocks.append(Listing(summary["backlog_by_peer"], ("peer", "count"), "Awaiting delivery, by next hop"))
    for member in summary["databases"]:
        blocks.append("")
        blocks.extend(_blocks({**member, "time": now}, member=member["name"]))
    return blocks


def _blocks(summary: dict[str, Any], member: str | None = None) -> list[Block]:
    """The snapshot as lines and tables, the same on a terminal and down a pipe; for a
    ``member`` of an instance, under its name."""
    database = summary["database"]
    now: datetime = summary["time"]
    queues = [
        {**q, "oldest_ready": None if q["oldest_ready_age_s"] is None else _age(q["oldest_ready_age_s"])}
        for q in summary["queues"]
    ]
    timers = summary["timers"]
    next_due = timers["next_due"]
    title = "" if member is None else f"{member}: "
    heading = (
        f"Database {database['url']} (schema {database['schema_revision']}) at {now:%Y-%m-%d %H:%M:%S} UTC"
        if member is None
        else f"Database {member}, {database['url']} (schema {database['schema_revision']})"
    )
    blocks: list[Block] = [
        f"{heading}: Service Broker "
        f"{'enabled' if database['is_broker_enabled'] else 'DISABLED'}, "
        f"broker instance {jsonable(database['service_broker_guid'])}",
        Listing(queues, _QUEUE_COLUMNS, f"{title}Queues"),
        Listing(summary["endpoints"], ("state", "state_desc", "count"), f"{title}Endpoints by state"),
        f"Transmission queue: {plural(summary['transmission_queue'], 'message')} awaiting delivery",
    ]
    if summary["transmission_destinations"]:
        blocks.append(
            Listing(
                summary["transmission_destinations"],
                _DESTINATION_COLUMNS,
                f"{title}Waiting, by destination and reason",
            )
        )
    blocks.append(
        f"Conversation timers: {timers['count']} set, {timers['due']} due"
        + (
            f", next due {next_due:%Y-%m-%d %H:%M:%S} UTC ({_relative(next_due, now)})"
            if next_due is not None
            else ""
        )
    )
    return blocks


def _print(blocks: list[Block]) -> None:
    console = terminal_console()
    if console is not None:
        console.print(_renderable(blocks))
        return
    for block in blocks:
        for line in [block] if isinstance(block, str) else plain_lines(block):
            click.echo(line)


def _renderable(blocks: list[Block]) -> RenderableType:
    from rich.console import Group
    from rich.text import Text

    return Group(*(Text(block) if isinstance(block, str) else rich_table(block) for block in blocks))


def _relative(moment: datetime, now: datetime) -> str:
    seconds = (moment - now).total_seconds()
    return f"in {_age(seconds)}" if seconds > 0 else f"{_age(-seconds)} ago"


def _age(seconds: float) -> str:
    """A duration the way an operator reads it: 0.4s, 42s, 3m05s, 2h10m, 4d03h."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    for unit, size, small, small_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if whole >= size:
            return f"{whole // size}{unit}{whole % size // small_size:02d}{small}"
    return f"{whole}s"


COMMANDS = (status,)

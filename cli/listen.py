"""``broker listen``: print a queue's QUEUE_ACTIVATION events (the hook for external activators)."""

from __future__ import annotations

import json
import queue as queues
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from types import FrameType
from typing import Any

import click

import broker
from broker import arguments, events
from cli.params import QUEUE, count_range
from cli.state import CliState, pass_state

# How often the loop looks at the runtime and at Ctrl-C / SIGTERM while no event comes.
CHECK_S = 0.5


@click.command()
@click.argument("queue", type=QUEUE)
@click.option("--count", type=count_range(), help="Exit after N events.")
@click.option("--json", "as_json", is_flag=True, help="Print each event as one JSON object per line.")
@pass_state
def listen(state: CliState, queue: str, count: int | None, as_json: bool) -> None:
    """Print one line whenever QUEUE needs a reader (QUEUE_ACTIVATION), until Ctrl-C or SIGTERM.

    For queues without an activation procedure (external activation): an event when a
    message arrives on the empty queue, and again every few seconds while messages wait
    without being received. The broker's runtime (timers, retries, activation) runs meanwhile.

    \b
    Example:
      broker listen TargetQueue1DB --json | while read -r event; do start-a-reader; done
    """
    queue = arguments.queue_name(queue)  # dbo.Q and [Q] name Q, as in every other command
    db = state.db()
    names = {row["name"].lower(): row["name"] for row in db.catalog("sys.service_queues")}
    if queue.lower() not in names:
        raise broker.BrokerError(208, f"Invalid object name '{queue}'.")
    arrived: queues.Queue[dict[str, Any]] = queues.Queue()

    def on_activation(**payload: Any) -> None:
        if str(payload["queue"]).lower() == queue.lower():
            arrived.put({"event": events.QUEUE_ACTIVATION, **payload, "time": datetime.now(UTC).isoformat()})

    stop = threading.Event()
    unsubscribe = db.events.subscribe(events.QUEUE_ACTIVATION, on_activation)
    try:
        with _stopped_by_signals(stop), db.runtime(activation=True) as runtime:
            printed = 0
            while (count is None or printed < count) and not stop.is_set():
                try:
                    event = arrived.get(timeout=CHECK_S)
                except queues.Empty:
                    if not runtime.running:
                        raise click.ClickException("the runtime stopped unexpectedly") from None
                    continue
                click.echo(json.dumps(event) if as_json else _line(event))
                printed += 1
    finally:
        unsubscribe()


def _line(event: dict[str, Any]) -> str:
    return f"{event['time']}\t{event['event']}\t{event['queue']}\tqueue_id={event['queue_id']}"


@contextmanager
def _stopped_by_signals(stop: threading.Event) -> Iterator[None]:
    """Set ``stop`` on SIGTERM or SIGINT (Ctrl-C) while inside; signals reach only the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(_number: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


COMMANDS = (listen,)

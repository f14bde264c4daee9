"""``broker run``: the long-running process of a database (scheduler, retries, activation)."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

import click

from cli.params import Seconds
from cli.state import CliState, pass_state


@click.command()
@click.option("--poll", "poll_interval", type=Seconds(minimum=0.05), default=1.0, show_default=True,
              help="Longest sleep between scheduler passes, in seconds.")
@click.option("--activation/--no-activation", default=True, show_default=True,
              help="Start activation readers for queues with ACTIVATION.")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]), default="INFO",
              show_default=True, help="What to log on stderr.")
@pass_state
def run(state: CliState, poll_interval: float, activation: bool, log_level: str) -> None:
    """Run the broker for a database until SIGTERM or Ctrl-C.

    Fires conversation timers and dialog lifetimes on time, retries the transmission
    queue with back-off, and starts activation readers. Several `broker run` processes
    may serve one database; nothing fires twice. On SIGTERM/SIGINT it stops starting
    work, lets running transactions finish or roll back, and exits 0.

    \b
    Example:
      broker --db sqlite:///app.db run --log-level INFO
    """
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()

    def on_signal(number: int, _frame: FrameType | None) -> None:
        logging.getLogger("broker.runtime").info("received %s, stopping", signal.Signals(number).name)
        stop.set()

    # Handlers first: a SIGTERM that arrives while the database opens still stops cleanly.
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        runtime = state.db().start_runtime(poll_interval=poll_interval, activation=activation)
        try:
            while not stop.wait(0.5):
                if not runtime.running:
                    raise click.ClickException("the runtime stopped unexpectedly")
        finally:
            runtime.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


COMMANDS = (run,)

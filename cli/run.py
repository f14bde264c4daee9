"""``broker run``: the long-running process of a database (scheduler, retries, activation),
or with ``--instance`` of every database of an instance plus the transmitter between them."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import TYPE_CHECKING, Protocol

import click

from cli.params import Seconds
from cli.state import CliState, pass_state

if TYPE_CHECKING:
    from broker.runtime.instance import InstanceRuntime


@click.command()
@click.option("--poll", "poll_interval", type=Seconds(minimum=0.05), default=1.0, show_default=True,
              help="Longest sleep between scheduler passes, in seconds.")
@click.option("--activation/--no-activation", default=True, show_default=True,
              help="Start activation readers for queues with ACTIVATION.")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]), default="INFO",
              show_default=True, help="What to log on stderr.")
@pass_state
def run(state: CliState, poll_interval: float, activation: bool, log_level: str) -> None:
    """Run the broker for a database, or for every database of an instance, until
    SIGTERM or Ctrl-C.

    Fires conversation timers and dialog lifetimes on time, retries the transmission
    queue with back-off, and starts activation readers. Several `broker run` processes
    may serve one database; nothing fires twice. On SIGTERM/SIGINT it stops starting
    work, lets running transactions finish or roll back, and exits 0.

    With --instance it serves every member database and runs the transmitter, which
    moves messages between them as they are committed. A database added while it runs
    takes part in deliveries; its timers and activation start with the next restart.

    \b
    Example:
      broker --db sqlite:///app.db run --log-level INFO
      broker --instance sqlite:///instance.db run
    """
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()

    def on_signal(number: int, _frame: FrameType | None) -> None:
        logging.getLogger("broker.runtime").info("received %s, stopping", signal.Signals(number).name)
        stop.set()

    # Handlers first: a SIGTERM that arrives while the database opens still stops cleanly.
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        runtime = _start(state, poll_interval, activation)
        try:
            while not stop.wait(0.5):
                if not runtime.running:
                    raise click.ClickException("the runtime stopped unexpectedly")
        finally:
            runtime.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _Running(Protocol):
    """A started runtime: a database's, or an instance's."""

    @property
    def running(self) -> bool: ...

    def stop(self, timeout: float = ...) -> None: ...


class _InstanceRunning:
    """An instance's runtime, running while its transmitter and every member's runtime do."""

    def __init__(self, runtime: InstanceRuntime) -> None:
        self.runtime = runtime

    @property
    def running(self) -> bool:
        return self.runtime.running and all(member.running for member in self.runtime.runtimes)

    def stop(self, timeout: float = 30.0) -> None:
        self.runtime.stop(timeout)


def _start(state: CliState, poll_interval: float, activation: bool) -> _Running:
    if not state.on_instance:
        return state.db().start_runtime(poll_interval=poll_interval, activation=activation)
    if not state.on_instance_itself:
        raise click.UsageError(
            "broker --instance URL run serves every database of the instance: leave out --database "
            "(or run one database alone with --db URL)"
        )
    runtime = state.instance().runtime(poll_interval=poll_interval, activation=activation).start()
    return _InstanceRunning(runtime)


COMMANDS = (run,)

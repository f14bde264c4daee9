"""``broker create queue`` and ``broker alter queue``: status, retention, activation and
poison-message handling, named like the clauses of CREATE / ALTER QUEUE."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from broker.arguments import SMALLINT_MAX
from cli.params import EXECUTE_AS, ON_OFF, QUEUE, Text
from cli.render import F
from cli.state import CliState, pass_state


def _queue_options(*, creating: bool) -> Callable[[F], F]:
    """The queue's options; CREATE shows T-SQL's defaults, ALTER leaves unset ones alone."""

    def default(value: str) -> dict[str, Any]:
        return {"default": value, "show_default": True} if creating else {}

    options = (
        click.option("--status", type=ON_OFF, **default("on"), help="Whether messages can be added and received."),
        click.option(
            "--retention", type=ON_OFF, **default("off"), help="Keep messages until their conversation ends."
        ),
        click.option(
            "--activation-procedure",
            type=Text("activation procedure name"),
            metavar="PKG.MOD:FN",
            help="ACTIVATION PROCEDURE_NAME: the Python function the runtime starts as a reader.",
        ),
        click.option(
            "--max-queue-readers",
            type=click.IntRange(0, SMALLINT_MAX),
            help="ACTIVATION MAX_QUEUE_READERS: the most readers running at once.",
        ),
        click.option(
            "--activation-status",
            type=ON_OFF,
            help="ACTIVATION STATUS: whether the runtime starts readers (on when activation is created).",
        ),
        click.option(
            "--execute-as",
            type=EXECUTE_AS,
            help="ACTIVATION EXECUTE AS: SELF, OWNER or a user name (stored and shown, not applied).",
        ),
        click.option(
            "--poison-message-handling",
            type=ON_OFF,
            **default("on"),
            help="Turn the queue off after five rolled-back RECEIVE transactions in a row.",
        ),
    )

    def decorate(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def _activation(
    procedure: str | None, readers: int | None, status: bool | None, execute_as: str | None
) -> dict[str, Any] | None:
    """The ACTIVATION options given, by the names the library takes; None when none is."""
    given = {
        "procedure_name": procedure,
        "max_queue_readers": readers,
        "status": status,
        "execute_as": execute_as,
    }
    return {option: value for option, value in given.items() if value is not None} or None


@click.command("queue")
@click.argument("name", type=QUEUE)
@_queue_options(creating=True)
@pass_state
def create_queue(
    state: CliState,
    name: str,
    status: bool,
    retention: bool,
    activation_procedure: str | None,
    max_queue_readers: int | None,
    activation_status: bool | None,
    execute_as: str | None,
    poison_message_handling: bool,
) -> None:
    """Create a queue (CREATE QUEUE).

    Activation needs --activation-procedure and --max-queue-readers; `broker run` then
    starts readers when messages arrive.

    \b
    Example:
      broker create queue TargetQueue1DB --retention off
      broker create queue OrdersQueue --activation-procedure myapp.handlers:take_orders \\
        --max-queue-readers 4 --execute-as SELF
    """
    state.db().create_queue(
        name,
        status=status,
        retention=retention,
        activation=_activation(activation_procedure, max_queue_readers, activation_status, execute_as),
        poison_message_handling=poison_message_handling,
    )
    click.echo(f"created queue {name}")


@click.command("queue")
@click.argument("name", type=QUEUE)
@_queue_options(creating=False)
@click.option("--drop-activation", is_flag=True, help="ACTIVATION (DROP): remove the activation settings.")
@pass_state
def alter_queue(
    state: CliState,
    name: str,
    status: bool | None,
    retention: bool | None,
    activation_procedure: str | None,
    max_queue_readers: int | None,
    activation_status: bool | None,
    execute_as: str | None,
    poison_message_handling: bool | None,
    drop_activation: bool,
) -> None:
    """Change a queue's options (ALTER QUEUE).

    Options not given stay as they are. STATUS ON delivers messages that waited in the
    transmission queue for it.

    \b
    Example:
      broker alter queue TargetQueue1DB --status off
      broker alter queue OrdersQueue --max-queue-readers 8 --activation-status on
      broker alter queue OrdersQueue --drop-activation
    """
    activation = _activation(activation_procedure, max_queue_readers, activation_status, execute_as)
    if drop_activation and activation is not None:
        raise click.UsageError("--drop-activation cannot be combined with other activation options")
    changes: dict[str, Any] = {
        option: value
        for option, value in {
            "status": status,
            "retention": retention,
            "activation": activation,
            "poison_message_handling": poison_message_handling,
        }.items()
        if value is not None
    }
    if drop_activation:
        changes["activation"] = None
    if not changes:
        raise click.UsageError("nothing to change: give at least one option (see --help)")
    state.db().alter_queue(name, **changes)
    click.echo(f"altered queue {name}")

"""Conversation verbs: send, receive, end, and peek at a queue without receiving."""

from __future__ import annotations

import uuid
from typing import BinaryIO

import click
from click.core import ParameterSource

import broker
from cli.render import emit, json_option, message_dict
from cli.state import CliState, pass_state

MESSAGE_COLUMNS = (
    "conversation_handle",
    "message_sequence_number",
    "service_name",
    "message_type_name",
    "message_body",
)


@click.command()
@click.option("--from", "from_service", metavar="SVC", help="Initiator service of a new dialog.")
@click.option("--to", "to_service", metavar="SVC", help="Target service of a new dialog.")
@click.option("--contract", default="DEFAULT", show_default=True, help="Contract of a new dialog.")
@click.option("--type", "message_type", default="DEFAULT", show_default=True, help="Message type.")
@click.option("--body", help="Message body as text (sent as UTF-8).")
@click.option("--body-file", type=click.File("rb"), help="Message body from a file ('-' = stdin).")
@click.option(
    "--handle",
    "handles",
    type=click.UUID,
    multiple=True,
    help="Send on this existing conversation instead of beginning one. Repeatable.",
)
@click.pass_context
def send(
    ctx: click.Context,
    from_service: str | None,
    to_service: str | None,
    contract: str,
    message_type: str,
    body: str | None,
    body_file: BinaryIO | None,
    handles: tuple[uuid.UUID, ...],
) -> None:
    """Send a message; print the conversation handle.

    Without --handle a new dialog is begun (BEGIN DIALOG) from --from to --to; with --handle the
    message goes on existing conversations. Both happen in one transaction.

    \b
    Example:
      H=$(broker send --from //Init --to //Target --type //Request --body '<Req/>')
      broker send --handle "$H" --type //Request --body-file more.xml
    """
    if body is not None and body_file is not None:
        raise click.UsageError("give --body or --body-file, not both")
    ends = _dialog_ends(ctx, from_service, to_service, handles)
    payload = body.encode("utf-8") if body is not None else body_file.read() if body_file else None
    state: CliState = ctx.obj
    with state.db().transaction() as tx:
        targets = list(handles) if ends is None else [tx.begin_dialog(*ends, contract)]
        tx.send(targets, message_type=message_type, body=payload)
    for handle in targets:
        click.echo(handle)


def _dialog_ends(
    ctx: click.Context,
    from_service: str | None,
    to_service: str | None,
    handles: tuple[uuid.UUID, ...],
) -> tuple[str, str] | None:
    """(from, to) of the dialog to begin, or None to send on the --handle conversations."""
    if handles:
        if (
            from_service
            or to_service
            or ctx.get_parameter_source("contract") is not ParameterSource.DEFAULT
        ):
            raise click.UsageError(
                "--handle sends on an existing conversation: drop --from, --to and --contract"
            )
        return None
    if not (from_service and to_service):
        raise click.UsageError("give --from and --to to begin a dialog, or --handle to use one")
    return from_service, to_service


@click.command()
@click.argument("queue")
@click.option("--top", type=click.IntRange(min=1), help="Receive at most N messages.")
@click.option(
    "--wait", type=float, metavar="SECONDS", help="Wait this long for a message; -1 waits forever."
)
@click.option(
    "--end",
    "end_ended",
    is_flag=True,
    help="End each conversation that delivered EndDialog or Error (the usual reply).",
)
@json_option
@pass_state
def receive(
    state: CliState, queue: str, top: int | None, wait: float | None, end_ended: bool, as_json: bool
) -> None:
    """Receive messages from a queue (RECEIVE).

    Returns the ready messages of one conversation group, in order; they leave the
    queue when the command commits (with RETENTION ON they stay, with status 0).

    \b
    Example:
      broker receive TargetQueue1DB --top 1 --wait 5
      broker receive InitiatorQueue1DB --end --json
    """
    with state.db().transaction() as tx:
        messages = tx.receive(queue, top, timeout=wait)
        finished = _ended_by_far_side(messages) if end_ended else []
        for handle in finished:
            tx.end_conversation(handle)
    emit(map(message_dict, messages), MESSAGE_COLUMNS, as_json=as_json)
    for handle in finished:
        click.echo(f"ended conversation {handle}", err=True)


def _ended_by_far_side(messages: list[broker.Message]) -> list[uuid.UUID]:
    """Handles (once each, in order) of the conversations that delivered EndDialog or Error."""
    return list(
        dict.fromkeys(
            m.conversation_handle
            for m in messages
            if m.message_type_name in (broker.END_DIALOG, broker.ERROR)
        )
    )


@click.command()
@click.argument("handle", type=click.UUID)
@click.option("--error", "error_code", type=int, help="End with an error: its code (> 0).")
@click.option("--description", help="End with an error: its description.")
@click.option("--cleanup", is_flag=True, help="Remove the endpoint without telling the far side.")
@pass_state
def end(
    state: CliState,
    handle: uuid.UUID,
    error_code: int | None,
    description: str | None,
    cleanup: bool,
) -> None:
    """End a conversation (END CONVERSATION).

    --error and --description end it WITH ERROR; --cleanup removes it WITH CLEANUP.

    \b
    Example:
      broker end "$H"
      broker end "$H" --error 50001 --description 'order rejected'
    """
    if cleanup and (error_code is not None or description is not None):
        raise click.UsageError("--cleanup cannot be combined with --error/--description")
    with state.db().transaction() as tx:
        tx.end_conversation(handle, error=error_code, description=description, cleanup=cleanup)
    click.echo(f"ended conversation {handle}")


@click.command()
@click.argument("queue")
@json_option
@pass_state
def peek(state: CliState, queue: str, as_json: bool) -> None:
    """Show a queue's rows without receiving them.

    Like SELECT * FROM queue: every row with its status (1 ready, 0 received and
    retained, 2 incomplete, 3 retained copy of a sent message).

    \b
    Example:
      broker peek TargetQueue1DB --json
    """
    emit(
        map(message_dict, state.db().queue_rows(queue)),
        ("status", "queuing_order", *MESSAGE_COLUMNS),
        as_json=as_json,
    )


COMMANDS = (send, receive, end, peek)

"""Conversation verbs: send, receive, end, timer, and peek at a queue without receiving."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import BinaryIO

import click
from click.core import ParameterSource

import broker
from broker import arguments
from broker.arguments import BIGINT_MAX, INT_MAX
from broker.errors import InvalidArgumentError
from cli.params import (
    BODY,
    CONTRACT,
    FAR_SERVICE,
    MESSAGE_TYPE,
    QUEUE,
    SERVICE,
    WAIT_TIME,
    InputFile,
    Seconds,
    Text,
    count_range,
    read_at_most,
)
from cli.progress import Meter
from cli.render import emit, flush_stdout, json_option, message_dict
from cli.state import CliState, pass_state

MESSAGE_COLUMNS = (
    "conversation_handle",
    "message_sequence_number",
    "service_name",
    "message_type_name",
    "message_body",
)


@click.command()
@click.option("--from", "from_service", type=SERVICE, metavar="SVC", help="Initiator service of a new dialog.")
@click.option("--to", "to_service", type=FAR_SERVICE, metavar="SVC", help="Target service of a new dialog.")
@click.option("--contract", type=CONTRACT, default="DEFAULT", show_default=True, help="Contract of a new dialog.")
@click.option(
    "--type", "message_type", type=MESSAGE_TYPE, default="DEFAULT", show_default=True, help="Message type."
)
@click.option("--body", type=BODY, help="Message body as text (sent as UTF-8).")
@click.option("--body-file", type=InputFile("rb"), help="Message body from a file ('-' = stdin).")
@click.option(
    "--handle",
    "handles",
    type=click.UUID,
    multiple=True,
    help="Send on this existing conversation instead of beginning one. Repeatable.",
)
@click.option(
    "--count",
    type=count_range(),
    default=1,
    show_default=True,
    help="Send N messages: each on a new dialog, or each on the --handle conversations.",
)
@click.option(
    "--batch",
    type=count_range(),
    default=1,
    show_default=True,
    help="Messages per transaction when sending --count messages.",
)
@click.pass_context
def send(
    ctx: click.Context,
    from_service: str | None,
    to_service: str | None,
    contract: str,
    message_type: str,
    body: bytes | None,
    body_file: BinaryIO | None,
    handles: tuple[uuid.UUID, ...],
    count: int,
    batch: int,
) -> None:
    """Send a message; print the conversation handle.

    Without --handle a new dialog is begun (BEGIN DIALOG) from --from to --to; with --handle the
    message goes on existing conversations. Both happen in one transaction.

    --count N sends N messages with the same body, each in its own transaction or --batch K
    to a transaction, with a progress bar on a terminal; the handle of every dialog begun
    is printed as its transaction commits.

    \b
    Example:
      H=$(broker send --from //Init --to //Target --type //Request --body '<Req/>')
      broker send --handle "$H" --type //Request --body-file more.xml
      broker send --from //Init --to //Target --body 'load test' --count 10000 --batch 100
    """
    if body is not None and body_file is not None:
        raise click.UsageError("give --body or --body-file, not both")
    ends = _dialog_ends(ctx, from_service, to_service, handles)
    payload = body if body is not None else _body_of(body_file) if body_file else None
    state: CliState = ctx.obj
    db = state.db()
    with Meter("sending", total=count, shown=count > 1) as meter:
        for size in _batch_sizes(count, batch):
            with db.transaction() as tx:
                if ends is None:
                    began = []
                    for _ in range(size):
                        tx.send(list(handles), message_type=message_type, body=payload)
                else:  # one new dialog per message, all sent to in one SEND
                    began = [tx.begin_dialog(*ends, contract) for _ in range(size)]
                    tx.send(began, message_type=message_type, body=payload)
            for handle in began:
                meter.echo(str(handle))
            meter.advance(size)
    for handle in handles:
        click.echo(handle)


def _body_of(file: BinaryIO) -> bytes:
    """A --body-file's bytes: 8459 past the largest body, read no further (/dev/zero ends)."""
    payload = read_at_most(file, arguments.MAX_BODY_BYTES)
    if payload is None:
        raise InvalidArgumentError(8459)
    return payload


def _batch_sizes(count: int, batch: int) -> Iterator[int]:
    """``count`` split into transactions of ``batch``: 10, 4 -> 4, 4, 2."""
    for start in range(0, count, batch):
        yield min(batch, count - start)


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
@click.argument("queue", type=QUEUE)
@click.option("--top", type=click.IntRange(1, BIGINT_MAX), help="Receive at most N messages.")
@click.option(
    "--wait", type=WAIT_TIME, metavar="SECONDS", help="Wait this long for a message; -1 waits forever."
)
@click.option(
    "--handle",
    type=click.UUID,
    help="Only this conversation's messages (WHERE conversation_handle = H).",
)
@click.option(
    "--group",
    type=click.UUID,
    help="Only this conversation group's messages (WHERE conversation_group_id = G).",
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
    state: CliState,
    queue: str,
    top: int | None,
    wait: float | None,
    handle: uuid.UUID | None,
    group: uuid.UUID | None,
    end_ended: bool,
    as_json: bool,
) -> None:
    """Receive messages from a queue (RECEIVE).

    Returns the ready messages of one conversation group, in order; they leave the
    queue when the command commits, once they are printed (with RETENTION ON they stay,
    with status 0). When the output cannot be written, nothing is received.
    --handle or --group picks the conversation or group (RECEIVE ... WHERE).

    \b
    Example:
      broker receive TargetQueue1DB --top 1 --wait 5
      broker receive InitiatorQueue1DB --end --json
      broker receive TargetQueue1DB --handle "$H"
    """
    if handle is not None and group is not None:
        raise click.UsageError("give --handle or --group, not both")
    with state.db().transaction() as tx:
        messages = tx.receive(queue, top, conversation_handle=handle, conversation_group_id=group, timeout=wait)
        finished = _ended_by_far_side(messages) if end_ended else []
        for ended in finished:
            tx.end_conversation(ended)
        # Printed before the commit: output that cannot be written (a full disk, a closed
        # pipe) rolls the RECEIVE back instead of losing the messages.
        emit(map(message_dict, messages), MESSAGE_COLUMNS, as_json=as_json)
        flush_stdout()
    for ended in finished:
        click.echo(f"ended conversation {ended}", err=True)


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
@click.option(
    "--error", "error_code", type=click.IntRange(-INT_MAX - 1, INT_MAX), help="End with an error: its code (> 0)."
)
@click.option("--description", type=Text("error description"), help="End with an error: its description.")
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
@click.argument("handle", type=click.UUID)
@click.argument("seconds", type=Seconds())
@pass_state
def timer(state: CliState, handle: uuid.UUID, seconds: float) -> None:
    """Set the conversation's timer (BEGIN CONVERSATION TIMER).

    A DialogTimer message arrives on this side's queue SECONDS from now (fired by
    `broker run`, or by the next RECEIVE on the queue after the deadline). Setting it
    again replaces the earlier deadline.

    \b
    Example:
      broker timer "$H" 60
      broker receive InitiatorQueue1DB --handle "$H" --wait 61
    """
    with state.db().transaction() as tx:
        tx.begin_conversation_timer(handle, seconds)
    click.echo(f"timer set on conversation {handle}: due in {seconds:g} second{'' if seconds == 1 else 's'}")


@click.command()
@click.argument("queue", type=QUEUE)
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


COMMANDS = (send, receive, end, timer, peek)

"""``broker export`` (a queue to JSON Lines) and ``broker import`` (JSON Lines into a service).

Both stream: export reads the queue in pages (``Broker.iter_queue_rows``), import sends
``--batch`` lines per transaction, so memory stays the same for any number of messages.
The line format is in ``cli.jsonl``.
"""

from __future__ import annotations

import json

import click

from cli.importing import Importer, chunks, destination, file_size
from cli.jsonl import message_line
from cli.outputs import refuse_database_files, replaced
from cli.params import CONTRACT, QUEUE, SERVICE, FilePath, Name, count_range
from cli.progress import Meter
from cli.render import plural
from cli.state import CliState, pass_state


@click.command("export")
@click.argument("queue", type=QUEUE)
@click.argument("file", type=FilePath(dir_okay=False, allow_dash=True))
@click.option(
    "--page-size",
    type=count_range(),
    default=1000,
    show_default=True,
    help="Rows read per (short) transaction.",
)
@pass_state
def export(state: CliState, queue: str, file: str, page_size: int) -> None:
    """Write a queue's messages to FILE as JSON Lines, without receiving them.

    One JSON object per message, in queuing order, with the RECEIVE columns as `broker
    peek` shows them (status is the stored status). message_body is the body as text when
    it is UTF-8 and base64 otherwise; message_body_encoding says which ("utf-8",
    "base64", or null for no body). The queue is read --page-size rows at a time, each
    page in its own short transaction. FILE "-" is stdout. FILE is written whole or not
    at all (a new file renamed into place at the end), and never one of the database's
    own files.

    \b
    Example:
      broker export TargetQueue1DB target.jsonl
      broker export TargetQueue1DB - | jq -r .message_body
    """
    db = state.db()
    refuse_database_files(file, state)
    total = sum(db.queue_counts(queue).values())  # error 208 before FILE is created
    with Meter(f"exporting {queue}", total=total) as meter, replaced(file) as out:
        written = 0
        for message in db.iter_queue_rows(queue, page_size):
            out.write(json.dumps(message_line(message)) + "\n")
            written += 1
            meter.advance()
    shown = click.format_filename(file)  # a name that is not UTF-8 still prints
    click.echo(f"exported {plural(written, 'message')} from {queue} to {shown}", err=file == "-")


@click.command("import")
@click.argument("target", type=Name("queue or service"), metavar="QUEUE-OR-SERVICE")
@click.argument("file", type=FilePath(exists=True, dir_okay=False, allow_dash=True))
@click.option(
    "--from", "from_service", type=SERVICE, metavar="SVC", help="The service that begins the new dialogs."
)
@click.option(
    "--contract",
    type=CONTRACT,
    help="Contract of the new dialogs [default: each line's service_contract_name, else DEFAULT].",
)
@click.option(
    "--new-dialogs",
    is_flag=True,
    help="Ignore the lines' conversation_handle: one new dialog per line (for exported files).",
)
@click.option(
    "--batch", type=count_range(), default=1, show_default=True, help="Messages per transaction."
)
@pass_state
def import_(
    state: CliState,
    target: str,
    file: str,
    from_service: str | None,
    contract: str | None,
    new_dialogs: bool,
    batch: int,
) -> None:
    """Send the messages of a JSON Lines FILE to a service.

    Each line is a message (message_type_name, message_body and message_body_encoding,
    as `broker export` writes them) sent from --from to the service, on a new dialog per
    line, or on the line's conversation_handle when it has one (a conversation with
    that service). A QUEUE stands for its service; when it has several, each line's
    service_name picks one. A file exported from a queue holds the receiving side's
    handles: import it with --new-dialogs. --batch lines go in one transaction; when a
    line fails, the batches before it stay sent. FILE "-" is stdin.

    \b
    Example:
      broker --db sqlite:///other.db import TargetQueue1DB target.jsonl \\
        --from //AWDB/1DBSample/InitiatorService --new-dialogs --batch 100
    """
    db = state.db()
    importer = Importer(db, destination(db, target), from_service, contract, new_dialogs, file)
    with (
        click.open_file(file, "rb") as lines,
        Meter(f"importing into {target}", total=file_size(lines), counted=False) as meter,
    ):
        for chunk in chunks(lines, batch):
            sends = [send for number, raw in chunk if (send := importer.prepared(number, raw)) is not None]
            with db.transaction() as tx:
                for send in sends:
                    importer.send(tx, send)
            importer.imported += len(sends)
            meter.advance(sum(len(raw) for _, raw in chunk), description=f"imported {importer.imported}")
    click.echo(f"imported {plural(importer.imported, 'message')} into {target}")


COMMANDS = (export, import_)

"""``broker import``'s work: lines of JSON turned into SENDs to a service, checked first.

Lines are parsed and checked (the destination service, the conversation of a line that
names one) outside the transaction, then sent inside it, ``--batch`` lines at a time.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import os
import stat
import uuid
from collections.abc import Iterator
from typing import IO, Any

import click

import broker
from broker import arguments
from broker.errors import ArgumentTypeError, InvalidArgumentError
from cli.jsonl import message_body
from cli.render import plural


class BadLine(click.ClickException):
    """A line of the input that is no message: ``error: FILE line N: why`` on stderr, exit 1."""


@dataclasses.dataclass(frozen=True)
class Destination:
    """Where the lines go: one service, or the services of a queue."""

    name: str
    services: tuple[str, ...]

    def service_for(self, line: dict[str, Any]) -> str | None:
        """The service a line's new dialog goes to: the only one, or the line's service_name."""
        if len(self.services) == 1:
            return self.services[0]
        named = line.get("service_name")
        return named if named in self.services else None


def destination(db: broker.Broker, name: str) -> Destination:
    """The service called ``name`` (exactly), else the queue (any case) and its services."""
    if db.catalog("sys.services", name=name):
        return Destination(name, (name,))
    queue = next((q for q in db.catalog("sys.service_queues") if q["name"].lower() == name.lower()), None)
    if queue is None:
        raise click.BadParameter(f"no service or queue is called {name!r}", param_hint="'QUEUE-OR-SERVICE'")
    services = tuple(s["name"] for s in db.catalog("sys.services", service_queue_id=queue["object_id"]))
    if not services:
        raise click.BadParameter(f"queue {name!r} has no service to send to", param_hint="'QUEUE-OR-SERVICE'")
    return Destination(name, services)


@dataclasses.dataclass(frozen=True)
class _Send:
    """One line's SEND: on an existing conversation, or on a new dialog (from, to, contract)."""

    number: int
    conversation: uuid.UUID | tuple[str, str, str]
    message_type: str
    body: bytes | None


class Importer:
    """Turns lines into SENDs: parses and checks outside the transaction, sends inside."""

    def __init__(
        self,
        db: broker.Broker,
        destination: Destination,
        from_service: str | None,
        contract: str | None,
        new_dialogs: bool,
        file: str,
    ) -> None:
        self.db = db
        self.destination = destination
        self.from_service = from_service
        self.contract = contract
        self.new_dialogs = new_dialogs
        self.file_name = "stdin" if file == "-" else file
        self.imported = 0  # messages committed so far: a failure says how many stay sent
        self._checked: uuid.UUID | None = None  # the last handle found to go to the destination

    def prepared(self, number: int, raw: bytes) -> _Send | None:
        """The SEND of one line (None for a blank line); checks the line's conversation."""
        if not raw.strip():
            return None
        if len(raw) > MAX_LINE_BYTES:
            raise broker.BrokerError(
                8459,
                f"{self.file_name} line {number} is longer than {MAX_LINE_BYTES:,} bytes, more than the largest "
                f"message ({arguments.MAX_BODY_BYTES:,} bytes) is exported as ({self._before()})",
            )
        try:
            line = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # also UnicodeDecodeError; too deeply nested
            raise self._bad(number, f"not JSON ({exc})") from None
        if not isinstance(line, dict):
            raise self._bad(number, "not a JSON object")
        handle = None if self.new_dialogs else self._handle(number, line.get("conversation_handle"))
        return _Send(
            number,
            handle or self._new_dialog(number, line),
            self._name(number, line, "message_type_name", "message type") or "DEFAULT",
            self._body(number, line),
        )

    def _new_dialog(self, number: int, line: dict[str, Any]) -> tuple[str, str, str]:
        """(from, to, contract) of the dialog a line begins."""
        if self.from_service is None:
            raise click.UsageError(f"{self.file_name} line {number} begins a dialog: give --from "
                                   f"({self._before()})")
        to_service = self.destination.service_for(line)
        if to_service is None:
            raise self._bad(
                number,
                f"service_name {line.get('service_name')!r} is none of the services on queue "
                f"{self.destination.name} ({', '.join(self.destination.services)})",
            )
        contract = self.contract or self._name(number, line, "service_contract_name", "contract")
        return self.from_service, to_service, contract or "DEFAULT"

    def send(self, tx: broker.Transaction, send: _Send) -> None:
        """BEGIN DIALOG if needed and SEND; a failure names the line."""
        try:
            handle = (
                send.conversation
                if isinstance(send.conversation, uuid.UUID)
                else tx.begin_dialog(*send.conversation)
            )
            tx.send(handle, message_type=send.message_type, body=send.body)
        except broker.BrokerError as exc:
            raise broker.BrokerError(
                exc.number,
                f"{exc.message} ({self.file_name} line {send.number}; {self._before()})",
            ) from exc

    def _handle(self, number: int, value: object) -> uuid.UUID | None:
        """A line's conversation_handle, checked to be a conversation with the destination."""
        if value is None:
            return None
        try:
            handle = uuid.UUID(str(value))
        except ValueError:
            raise self._bad(number, f"conversation_handle {value!r} is not a uniqueidentifier") from None
        if handle == self._checked:
            return handle
        rows = self.db.catalog("sys.conversation_endpoints", conversation_handle=handle)
        if not rows:
            missing = broker.ConversationNotFoundError(handle)
            raise broker.BrokerError(
                missing.number,
                f"{missing.message} ({self.file_name} line {number}; an exported file needs --new-dialogs; "
                f"{self._before()})",
            )
        if rows[0]["far_service"] not in self.destination.services:
            raise self._bad(
                number,
                f"conversation {handle} goes to {rows[0]['far_service']}, not to {self.destination.name} "
                "(an exported file holds the receiving side's handles: use --new-dialogs)",
            )
        self._checked = handle
        return handle

    def _name(self, number: int, line: dict[str, Any], key: str, kind: str) -> str | None:
        """The object name a line gives under ``key``, checked like any name; None if absent."""
        value = line.get(key)
        if value is None:
            return None
        try:
            return arguments.object_name(value, kind)
        except (InvalidArgumentError, ArgumentTypeError) as exc:
            raise self._bad(number, f"{key}: {exc.message}") from None

    def _body(self, number: int, line: dict[str, Any]) -> bytes | None:
        try:
            return message_body(line)
        except ValueError as exc:
            raise self._bad(number, str(exc)) from None

    def _bad(self, number: int, why: str) -> BadLine:
        return BadLine(f"{self.file_name} line {number}: {why} ({self._before()})")

    def _before(self) -> str:
        """How many messages stay sent when a line stops the import: the batches committed."""
        return f"{plural(self.imported, 'message')} imported before its batch"


# The longest line ``broker export`` writes: json.dumps (ASCII only) writes a body byte as at
# most 6 bytes ("\\u0001" for a control character) and the other columns fit in the margin. A
# longer line holds no message the broker takes (8459), so reading stops there, not at the
# end of the memory.
MAX_LINE_BYTES = 6 * arguments.MAX_BODY_BYTES + (1 << 20)
_LINE_CHUNK = 1 << 20  # bytes read at a time within a line
_JSON_SPACE = b" \t\r\n"
_OBJECT_STARTS = (b"{", codecs.BOM_UTF8)  # what a line holding a JSON object begins with


def chunks(file: IO[bytes], batch: int) -> Iterator[list[tuple[int, bytes]]]:
    """Numbered lines in groups holding ``batch`` non-blank lines (blank lines ride along).

    A line that cannot hold a message (no JSON object by its first megabyte, or longer than
    :data:`MAX_LINE_BYTES`) is the last one, cut short: :meth:`Importer.prepared` refuses it,
    and an endless stream such as ``/dev/zero`` is never read to its end.
    """
    chunk: list[tuple[int, bytes]] = []
    filled = 0
    for number, raw in enumerate(_lines(file), start=1):
        chunk.append((number, raw))
        filled += bool(raw.strip())
        if filled == batch:
            yield chunk
            chunk, filled = [], 0
    if chunk:
        yield chunk


def _lines(file: IO[bytes]) -> Iterator[bytes]:
    """The lines of ``file`` with their newlines, up to one cut short (see :func:`chunks`)."""
    while True:
        line, cut = _line(file)
        if line:
            yield line
        if cut or not line:
            return


def _line(file: IO[bytes]) -> tuple[bytes, bool]:
    """The next line of ``file`` (empty at its end), read a megabyte at a time, and whether
    it was cut short: after its first megabyte when that begins no JSON object, or at
    :data:`MAX_LINE_BYTES` + 1 bytes."""
    parts = [file.readline(_LINE_CHUNK)]
    size = len(parts[0])
    start = parts[0].lstrip(_JSON_SPACE)
    if start and not start.endswith(b"\n") and not start.startswith(_OBJECT_STARTS):
        return parts[0], True
    while parts[-1] and not parts[-1].endswith(b"\n"):
        if size > MAX_LINE_BYTES:
            return b"".join(parts), True
        parts.append(file.readline(min(_LINE_CHUNK, MAX_LINE_BYTES + 1 - size)))
        size += len(parts[-1])
    return b"".join(parts), False


def file_size(file: IO[bytes]) -> int | None:
    """The size in bytes of a regular file; None for a pipe or a terminal (an open-ended bar)."""
    try:
        info = os.fstat(file.fileno())
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None

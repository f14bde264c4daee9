"""Splitting a script into batches on ``GO`` lines, as sqlcmd does.

``GO`` is not T-SQL: it is the client's separator, alone on its line (``GO 3`` runs the
batch three times). A GO inside a string, a quoted name (``[...]`` or ``"..."``) or a
block comment is text, not a separator. A batch keeps every character as written: a
CRLF inside a literal stays a CRLF (``DATALENGTH`` counts it as SQL Server does).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

_GO = re.compile(r"[ \t]*go(?:[ \t]+(\d+))?[ \t]*(?:--.*)?", re.IGNORECASE)
# Only these end a line for GO (and for a ``--`` comment); U+2028, NEL or a form feed is text.
_LINE_END = re.compile(r"\r\n|\r|\n")
_LINE_BREAK = re.compile(r"[\r\n]")
_OPENER = re.compile(r"--|/\*|['\[\"]")
_BLOCK_MARK = re.compile(r"/\*|\*/")
_CLOSER = {"'": "'", "[": "]", '"': '"'}


@dataclass(frozen=True)
class Batch:
    text: str
    line: int  # the script line the batch starts on
    count: int = 1


@dataclass(frozen=True)
class Span:
    """A string literal, a quoted name or a comment: ``kind`` is its opener (``'``, ``[``,
    ``"``, ``--`` or ``/*``); ``closed`` is False when the text ends inside it."""

    kind: str
    start: int
    end: int
    closed: bool = True


def split_batches(script: str) -> list[Batch]:
    """The batches of ``script``; empty ones (only blanks and comments count as text) are kept out."""
    batches: list[Batch] = []
    start, start_line = 0, 1
    previous_end = 0  # where the line before the current one ends, its break left out
    scanned = 0  # how far strings, names and comments have been followed
    for number, (first, last, following) in enumerate(_lines(script), start=1):
        match = _GO.fullmatch(script, first, last) if first >= scanned else None
        if match:
            _append(batches, script[start:previous_end] if number > start_line else "", start_line,
                    int(match.group(1) or 1))
            start, start_line, scanned = following, number + 1, following
        else:
            for span in spans(script, max(first, scanned), last):
                scanned = span.end
            scanned = max(scanned, last)
        previous_end = last
    _append(batches, script[start:previous_end] if previous_end > start else "", start_line, 1)
    return batches


def _lines(script: str) -> Iterator[tuple[int, int, int]]:
    """Each line as (start, end before its break, start of the next line), as ``splitlines`` cuts
    them but on ``\\n``, ``\\r\\n`` and ``\\r`` only."""
    first = 0
    for line_end in _LINE_END.finditer(script):
        yield first, line_end.start(), line_end.end()
        first = line_end.end()
    if first < len(script):
        yield first, len(script), len(script)


def _append(batches: list[Batch], text: str, start: int, count: int) -> None:
    if text.strip() and count > 0:
        batches.append(Batch(text, start, count))


def spans(text: str, position: int = 0, stop: int | None = None) -> Iterator[Span]:
    """The strings, quoted names and comments of ``text`` that open from ``position`` on
    (before ``stop``), each followed to its end, as SQL Server's lexer reads them: ``''``,
    ``]]`` and ``""`` are escapes, block comments nest and a ``--`` comment ends its line."""
    stop = len(text) if stop is None else stop
    while opener := _OPENER.search(text, position, stop):
        span = _span(text, opener.start(), opener.group())
        yield span
        position = span.end


def _span(text: str, start: int, kind: str) -> Span:
    if kind == "--":
        line_break = _LINE_BREAK.search(text, start)
        return Span(kind, start, line_break.start() if line_break else len(text))
    if kind == "/*":
        return _block_comment(text, start)
    close = _CLOSER[kind]
    position = start + 1
    while (end := text.find(close, position)) != -1:
        if not text.startswith(close * 2, end):
            return Span(kind, start, end + 1)
        position = end + 2
    return Span(kind, start, len(text), closed=False)


def _block_comment(text: str, start: int) -> Span:
    depth, position = 1, start + 2
    while mark := _BLOCK_MARK.search(text, position):
        depth += 1 if mark.group() == "/*" else -1
        position = mark.end()
        if depth == 0:
            return Span("/*", start, position)
    return Span("/*", start, len(text), closed=False)

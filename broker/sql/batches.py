"""Splitting a script into batches on ``GO`` lines, as sqlcmd does.

``GO`` is not T-SQL: it is the client's separator, alone on its line (``GO 3`` runs the
batch three times). A GO inside a string or a block comment is text, not a separator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_GO = re.compile(r"^[ \t]*go(?:[ \t]+(\d+))?[ \t]*(?:--.*)?$", re.IGNORECASE)


@dataclass(frozen=True)
class Batch:
    text: str
    line: int  # the script line the batch starts on
    count: int = 1


def split_batches(script: str) -> list[Batch]:
    """The batches of ``script``; empty ones (only blanks and comments count as text) are kept out."""
    batches: list[Batch] = []
    lines: list[str] = []
    start = 1
    in_string = in_comment = False
    for number, line in enumerate(script.splitlines(), start=1):
        match = None if in_string or in_comment else _GO.match(line)
        if match:
            _append(batches, lines, start, int(match.group(1) or 1))
            lines, start = [], number + 1
            continue
        lines.append(line)
        in_string, in_comment = _carry(line, in_string, in_comment)
    _append(batches, lines, start, 1)
    return batches


def _append(batches: list[Batch], lines: list[str], start: int, count: int) -> None:
    text = "\n".join(lines)
    if text.strip() and count > 0:
        batches.append(Batch(text, start, count))


def _carry(line: str, in_string: bool, in_comment: bool) -> tuple[bool, bool]:
    """Whether a string literal or a block comment is still open at the end of ``line``."""
    index = 0
    while index < len(line):
        if in_comment:
            end = line.find("*/", index)
            if end == -1:
                return in_string, True
            in_comment, index = False, end + 2
        elif in_string:
            end = line.find("'", index)
            if end == -1:
                return True, False
            if line.startswith("''", end):
                index = end + 2
            else:
                in_string, index = False, end + 1
        elif line.startswith("--", index):
            return False, False
        elif line.startswith("/*", index):
            in_comment, index = True, index + 2
        elif line[index] == "'":
            in_string, index = True, index + 1
        else:
            index += 1
    return in_string, in_comment

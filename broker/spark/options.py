"""The data source's options, parsed once from Spark's case-insensitive string map.

A bad option is a numbered :class:`~broker.errors.InvalidArgumentError` (a
``ValueError``): 59004 when a needed one is missing, 59002 when its value is out of range.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from broker import arguments
from broker.errors import MISSING_OPTION, OUT_OF_RANGE, InvalidArgumentError

DEFAULT_PARTITIONS = 4
# A conversation group's partition is the last byte of its id modulo the count, so more
# than 256 partitions would only add empty ones.
MOST_PARTITIONS = 256
LONGEST_SINK_ID = 1024  # sb_spark_sinks.sink_id and the staged rows' job
_SOURCE = "The servicebroker data source"
_DIGITS = re.compile(r"[0-9]{1,20}")


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """What ``.option(...)`` said. Spark lowercases the keys and passes every value as text."""

    url: str
    queue: str | None = None
    view: str | None = None
    partitions: int = DEFAULT_PARTITIONS
    max_rows_per_batch: int | None = None
    sink_id: str | None = None  # option sinkId
    checkpoint: str | None = None  # option checkpointLocation (Spark's own)
    batch_id: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        # Spark's CaseInsensitiveDict lowercases on get; a plain dict (tests) may not.
        given = {key.lower(): value for key, value in options.items()}
        url = given.get("url")
        if not url:
            raise missing("option 'url' (the broker database URL)")
        queue, view = given.get("queue"), given.get("view")
        if queue and view:
            raise InvalidArgumentError(OUT_OF_RANGE, f"{_SOURCE} reads option 'queue' or option 'view', not both.")
        sink_id = given.get("sinkid") or None
        return cls(
            url=url,
            queue=queue or None,
            view=view or None,
            partitions=_integer(given, "partitions", 1, MOST_PARTITIONS) or DEFAULT_PARTITIONS,
            max_rows_per_batch=_integer(given, "maxRowsPerBatch", 1),
            sink_id=None if sink_id is None else checked_sink_id(sink_id, "option 'sinkId'"),
            checkpoint=given.get("checkpointlocation") or None,
            batch_id=_integer(given, "batchId", 0),
        )

    def require_queue(self) -> str:
        if not self.queue:
            raise missing("option 'queue' (or 'view', for a batch read)")
        return self.queue


def missing(names: str) -> InvalidArgumentError:
    return InvalidArgumentError(MISSING_OPTION, statement=_SOURCE, names=names)


def checked_sink_id(sink_id: str, what: str) -> str:
    """A sink id the sinks table can key on, on every backend (PostgreSQL would refuse a
    longer one in the middle of a batch)."""
    return arguments.text(sink_id, what, longest=LONGEST_SINK_ID, empty=False)


def _integer(given: Mapping[str, str], name: str, least: int, most: int = arguments.BIGINT_MAX) -> int | None:
    text = given.get(name.lower())
    if text is None:
        return None
    value = int(text) if _DIGITS.fullmatch(text) else least - 1  # int() would take " 1_0" and other scripts' digits
    if not least <= value <= most:
        raise arguments.out_of_range(f"option '{name}'", text, f"an integer from {least} to {most}")
    return value

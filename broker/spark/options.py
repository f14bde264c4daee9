"""The data source's options, parsed once from Spark's case-insensitive string map."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_PARTITIONS = 4


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
            raise ValueError("servicebroker: option 'url' is required (the broker database URL)")
        queue, view = given.get("queue"), given.get("view")
        if queue and view:
            raise ValueError("servicebroker: give option 'queue' or option 'view', not both")
        return cls(
            url=url,
            queue=queue or None,
            view=view or None,
            partitions=_positive(given, "partitions") or DEFAULT_PARTITIONS,
            max_rows_per_batch=_positive(given, "maxrowsperbatch"),
            sink_id=given.get("sinkid") or None,
            checkpoint=given.get("checkpointlocation") or None,
            batch_id=_natural(given, "batchid"),
        )

    def require_queue(self) -> str:
        if not self.queue:
            raise ValueError("servicebroker: option 'queue' is required (or 'view', for a batch read)")
        return self.queue


def _positive(given: Mapping[str, str], key: str) -> int | None:
    return _integer(given, key, 1, "a positive integer")


def _natural(given: Mapping[str, str], key: str) -> int | None:
    return _integer(given, key, 0, "an integer >= 0")


def _integer(given: Mapping[str, str], key: str, least: int, what: str) -> int | None:
    text = given.get(key)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if value < least:
        raise ValueError(f"servicebroker: option '{key}' must be {what}, got {text!r}")
    return value

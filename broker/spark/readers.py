"""Reading a queue (batch and stream) and a catalog view."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

import broker
from broker.spark.columns import Columns
from broker.spark.options import SourceOptions
from broker.spark.positions import SafeOffsets, nth_ready
from broker.spark.reading import QueueSlice, read_slice, reading
from broker.spark.receive import receive_through
from broker.spark.views import read_view

OFFSET_KEY = "queuing_order"


@dataclass(frozen=True)
class SlicePartition(InputPartition):
    """One Spark partition: a slice of the queue (see ``QueueSlice``)."""

    part: QueueSlice


class QueueReader(DataSourceReader):
    """``spark.read``: every row of the queue as ``SELECT * FROM queue`` shows it.

    One partition per bucket of conversation groups, each in queuing order; nothing is
    received or locked.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[SlicePartition]:
        queue, count = self.options.require_queue(), self.options.partitions
        return [SlicePartition(QueueSlice(queue, bucket, count)) for bucket in range(count)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SlicePartition)
        yield from read_slice(self.options.url, partition.part)


class ViewReader(DataSourceReader):
    """``spark.read`` of a catalog view: one partition."""

    def __init__(self, options: SourceOptions, columns: Columns) -> None:
        self.options = options
        self.columns = list(columns)

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert self.options.view is not None
        yield read_view(self.options.url, self.options.view, self.columns)


class QueueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: the ready messages of a queue; committing an offset RECEIVEs.

    Offsets are queuing orders (``{"queuing_order": n}``). A micro-batch reads the
    ready messages in (start, end] and receives nothing. They are received, in one
    broker transaction, once the batch's output is committed: Spark says so through
    ``commit(end)``, which it calls only when it plans the batch after next, and
    through ``latestOffset(start)``, which it calls only after the batch ending at
    ``start`` is in the checkpoint's commit log, so the last batch of a run is received
    in that run. A crash or a restart from the checkpoint replays an uncommitted batch
    instead of losing it; receiving again what is received already changes nothing.
    The stream should be the queue's only reader: a message another reader RECEIVEs
    meanwhile may be seen by both.
    """

    def __init__(self, options: SourceOptions, queue: str) -> None:
        self.options = options
        self.queue = queue
        self.offsets = SafeOffsets(queue)
        self.frozen_end: int | None = None
        self.received = 0  # the offset received through by this query (this process)

    def initialOffset(self) -> dict[str, int]:
        return {OFFSET_KEY: 0}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        """The safe high-water (``SafeOffsets``), at most ``maxRowsPerBatch`` ready rows on."""
        first = start[OFFSET_KEY]
        self._receive_through(first)  # the batch that ended at ``start`` is committed
        with reading(self.options.url) as conn:
            end = self.offsets.advance(conn) if self.frozen_end is None else self.frozen_end
            if isinstance(limit, ReadMaxRows) and end > first:
                end = nth_ready(conn, self.queue, first, end, limit.max_rows)
        return {OFFSET_KEY: max(end, first)}

    def getDefaultReadLimit(self) -> ReadLimit:
        rows = self.options.max_rows_per_batch
        return ReadAllAvailable() if rows is None else ReadMaxRows(rows)

    def prepareForTriggerAvailableNow(self) -> None:
        with reading(self.options.url) as conn:
            self.frozen_end = self.offsets.advance(conn)

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[SlicePartition]:
        after, upto = start[OFFSET_KEY], end[OFFSET_KEY]
        if upto <= after:
            return []
        count = self.options.partitions
        return [SlicePartition(QueueSlice(self.queue, bucket, count, after, upto, ready_only=True))
                for bucket in range(count)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SlicePartition)
        yield from read_slice(self.options.url, partition.part)

    def commit(self, end: dict[str, int]) -> None:
        """RECEIVE the ready messages up to ``end`` in one broker transaction (idempotent)."""
        self._receive_through(end[OFFSET_KEY])

    def _receive_through(self, offset: int) -> None:
        if offset <= self.received:
            return
        db = broker.connect(self.options.url, upgrade=False)
        try:
            with db.transaction() as tx:
                tx.run(lambda ctx: receive_through(ctx, self.queue, offset))
        finally:
            db.dispose()
        self.received = offset

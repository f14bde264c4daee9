"""Writing rows as SENDs: staged by the tasks, sent by the job's commit (``staging``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from broker.spark import staging
from broker.spark.options import SourceOptions, missing


@dataclass(frozen=True)
class StagedTask(WriterCommitMessage):
    """What a successful write task reports: its token and partition."""

    token: str
    partition_id: int
    rows: int


def _stage(url: str, job: str, batch_id: int | None, batches: Iterator[pa.RecordBatch]) -> StagedTask:
    context = TaskContext.get()
    partition_id = context.partitionId() if context is not None else 0
    rows = 0

    def dicts() -> Iterator[dict[str, object]]:
        nonlocal rows
        for batch in batches:
            rows += batch.num_rows
            yield from batch.to_pylist()

    token = staging.stage(url, job, batch_id, partition_id, dicts())
    return StagedTask(token, partition_id, rows)


def _tokens(messages: Sequence[WriterCommitMessage | None]) -> list[str]:
    """Tokens of the successful tasks, in partition order (the order rows are sent in)."""
    staged = sorted((m for m in messages if isinstance(m, StagedTask)), key=lambda m: m.partition_id)
    return [m.token for m in staged]


class MessageWriter(DataSourceArrowWriter):
    """``df.write``: one SEND per row, all of the job's in one transaction at commit.

    With options ``sinkId`` and ``batchId`` (inside ``foreachBatch``) the job commits
    like a streaming sink's micro-batch: once per (sink id, batch id).
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.batch_id = options.batch_id
        if self.batch_id is not None and not options.sink_id:
            raise missing("option 'sinkId' beside option 'batchId'")
        self.job = options.sink_id if self.batch_id is not None and options.sink_id else f"job:{uuid.uuid4()}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedTask:
        return _stage(self.options.url, self.job, self.batch_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.batch_id is None:
            staging.send_job(self.options.url, self.job, _tokens(messages))
        else:
            staging.send_batch(self.options.url, self.job, self.batch_id, _tokens(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        staging.discard_url(self.options.url, self.job, self.batch_id)


class MessageStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream``: each micro-batch SENT once, keyed by (sink id, batch id)."""

    def __init__(self, options: SourceOptions, sink_id: str) -> None:
        self.options = options
        self.sink_id = sink_id

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedTask:
        context = TaskContext.get()
        batch = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
        return _stage(self.options.url, self.sink_id, None if batch is None else int(batch), iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        staging.send_batch(self.options.url, self.sink_id, batchId, _tokens(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        staging.discard_url(self.options.url, self.sink_id, batchId)

"""The PySpark data source ``servicebroker``: which reader or writer each call gets.

Spark runs these methods in Python worker processes, never in the driver, and pickles
the objects it sends to executors: nothing here keeps a connection (each read, write and
commit opens its own).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter
from pyspark.sql.types import StructType

import broker
from broker.errors import OUT_OF_RANGE, InvalidArgumentError
from broker.spark import SOURCE_NAME
from broker.spark.columns import RECEIVE_COLUMNS, ddl
from broker.spark.options import SourceOptions, checked_sink_id, missing
from broker.spark.readers import QueueReader, QueueStreamReader, ViewReader
from broker.spark.sinks import checkpoint_sink_id
from broker.spark.staging import check_columns
from broker.spark.views import view_columns
from broker.spark.writers import MessageStreamWriter, MessageWriter


class ServiceBrokerSource(DataSource):
    """``format("servicebroker")``: options ``url`` and ``queue`` or ``view`` (docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        options = SourceOptions.parse(self.options)
        if options.view:
            return ddl(view_columns(options.url, options.view))
        return ddl(RECEIVE_COLUMNS)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = SourceOptions.parse(self.options)
        if options.view:
            return ViewReader(options, view_columns(options.url, options.view))
        options.require_queue()
        return QueueReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = SourceOptions.parse(self.options)
        return QueueStreamReader(options, options.require_queue())

    def writer(self, schema: StructType, overwrite: bool) -> MessageWriter:
        options = _write_options(self.options, schema, overwrite)
        return MessageWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = _write_options(self.options, schema, overwrite)
        if options.sink_id:
            return MessageStreamWriter(options, options.sink_id)
        if options.checkpoint:
            # Planned on the driver's machine, where the checkpoint is.
            sink_id = checked_sink_id(checkpoint_sink_id(options.checkpoint),
                                      "sink id made of option 'checkpointLocation' (give a shorter sinkId)")
            return MessageStreamWriter(options, sink_id)
        raise missing("option 'checkpointLocation' or 'sinkId' for a streaming write")


def _write_options(given: Mapping[str, str], schema: StructType, overwrite: bool) -> SourceOptions:
    if overwrite:
        raise InvalidArgumentError(OUT_OF_RANGE, "The servicebroker data source SENDs, which appends: "
                                                 "use mode('append').")
    check_columns(schema.fieldNames())
    options = SourceOptions.parse(given)
    broker.connect(options.url).dispose()  # creates or upgrades the staging tables (planner side, once)
    return options

"""Spark throughput of the ``servicebroker`` data source (docs/benchmarks.md, "Spark").

Measures rows per second, on a local[2] session, of:

* batch read: ``spark.read`` of a queue of N messages into Spark's ``noop`` sink;
* stream read: ``readStream`` (availableNow, one micro-batch) into ``foreachBatch``
  counting the rows, including the RECEIVE of all N on commit and the query's start;
* batch write: ``df.write`` of N rows (replies on the queue's conversations, from a
  cached DataFrame), staged and SENT in one transaction;
* stream write: ``readStream`` of N messages to ``writeStream`` replies (read, stage,
  SEND, RECEIVE), availableNow, one micro-batch.

Each figure is the best of ``--repeat`` runs on fresh data after one warm-up run.

    pip install -e '.[spark]'
    python bench/spark.py --rows 100000 --repeat 3
    python bench/spark.py --url postgresql+psycopg://root@127.0.0.1:5432/bench --rows 20000
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession

import broker
from broker.spark.session import local_session

BODY = b"x" * 100
ROWS_PER_DIALOG = 10


def fresh_queue(db: broker.Broker, rows: int) -> str:
    """A new queue and service holding ``rows`` messages, 10 per dialog (a service per run)."""
    name = f"Bench{uuid.uuid4().hex[:8]}"
    db.create_queue(name)
    db.create_service(f"//{name}", name, ["DEFAULT"])
    with db.transaction() as tx:
        for _ in range(rows // ROWS_PER_DIALOG):
            handle = tx.begin_dialog("//BenchSender", f"//{name}")
            for _ in range(ROWS_PER_DIALOG):
                tx.send(handle, "DEFAULT", BODY)
    return name


Run = Callable[[], None]


def batch_read(spark: SparkSession, url: str, queue: str, scratch: Path) -> Run:
    frame = spark.read.format("servicebroker").option("url", url).option("queue", queue).load()
    return lambda: frame.write.format("noop").mode("overwrite").save()


def stream_read(spark: SparkSession, url: str, queue: str, scratch: Path) -> Run:
    def run() -> None:
        query = (spark.readStream.format("servicebroker").option("url", url).option("queue", queue).load()
                 .writeStream.foreachBatch(lambda frame, _batch: frame.count())
                 .option("checkpointLocation", str(scratch / uuid.uuid4().hex)).trigger(availableNow=True).start())
        query.awaitTermination()
    return run


def batch_write(spark: SparkSession, url: str, queue: str, scratch: Path) -> Run:
    """Replies on the queue's conversations, from a DataFrame cached before the timing."""
    replies = (spark.read.format("servicebroker").option("url", url).option("queue", queue).load()
               .select("conversation_handle", "message_body").cache())
    replies.count()
    return lambda: replies.write.format("servicebroker").option("url", url).mode("append").save()


def stream_write(spark: SparkSession, url: str, queue: str, scratch: Path) -> Run:
    def run() -> None:
        query = (spark.readStream.format("servicebroker").option("url", url).option("queue", queue).load()
                 .select("conversation_handle", "message_body")
                 .writeStream.format("servicebroker").option("url", url)
                 .option("checkpointLocation", str(scratch / uuid.uuid4().hex)).trigger(availableNow=True).start())
        query.awaitTermination()
    return run


CASES: dict[str, Callable[[SparkSession, str, str, Path], Run]] = {
    "batch read (noop sink)": batch_read,
    "stream read, RECEIVE on commit": stream_read,
    "batch write, SEND on commit": batch_write,
    "stream read + write (replies)": stream_write,
}


def main() -> None:
    parser = argparse.ArgumentParser(description="Spark throughput of the servicebroker data source")
    parser.add_argument("--url", help="broker database (default: a new SQLite file)")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        url = arguments.url or f"sqlite:///{scratch / 'bench.db'}"
        db = broker.connect(url)
        db.create_queue("BenchSenderQueue")
        db.create_service("//BenchSender", "BenchSenderQueue")
        spark = local_session("servicebroker-bench")
        print(f"{arguments.rows} rows of {len(BODY)} bytes, {db.engine.dialect.name}, local[2]")
        for name, case in CASES.items():
            case(spark, url, fresh_queue(db, min(arguments.rows, 1000)), scratch)()  # warm-up
            best = float("inf")
            for _ in range(arguments.repeat):
                run = case(spark, url, fresh_queue(db, arguments.rows), scratch)
                started = time.perf_counter()
                run()
                best = min(best, time.perf_counter() - started)
            print(f"| {name} | {best:.2f} s | {arguments.rows / best:,.0f} |", flush=True)
        spark.stop()
        db.dispose()


if __name__ == "__main__":
    main()

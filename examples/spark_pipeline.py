"""A Spark pipeline on the broker: orders in, enriched receipts out, totals per customer.

The shop's store service sends orders (JSON bodies) to the order service. A Spark
stream reads the order queue; for every micro-batch it replies to each order with a
receipt on the order's own conversation (the amount with tax added), and sends the
batch's totals per customer to a reporting service. Both outputs of a batch are SENT in
one broker transaction, once per (sink id, batch id), and the orders are RECEIVEd when
Spark has committed the batch: stopping and restarting the pipeline loses nothing and
sends nothing twice.

Run it (``broker spark-demo`` runs the same code):

    pip install 'servicebroker[spark]'
    python examples/spark_pipeline.py --db sqlite:///shop.db --orders 1000
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import broker
from broker.spark.session import local_session
from broker.spark.sinks import checkpoint_sink_id

ORDER, RECEIPT, TOTALS = "//shop/Order", "//shop/Receipt", "//shop/CustomerTotals"
ORDERING, REPORTING = "//shop/Ordering", "//shop/Reporting"
STORE, ORDERS, REPORTS = "//shop/Store", "//shop/Orders", "//shop/Reports"
QUEUES = {STORE: "StoreQueue", ORDERS: "OrdersQueue", REPORTS: "ReportsQueue"}
TAX = 0.2
ORDER_SCHEMA = "id INT, customer STRING, amount DOUBLE"


def create_objects(db: broker.Broker) -> None:
    """The shop's message types, contracts, queues and services (kept if they exist)."""
    if any(row["name"] == ORDERS for row in db.catalog("sys.services")):
        return
    for name in (ORDER, RECEIPT, TOTALS):
        db.create_message_type(name)
    db.create_contract(ORDERING, {ORDER: "INITIATOR", RECEIPT: "TARGET"})
    db.create_contract(REPORTING, {TOTALS: "INITIATOR"})
    for queue in QUEUES.values():
        db.create_queue(queue)
    db.create_service(STORE, QUEUES[STORE])
    db.create_service(ORDERS, QUEUES[ORDERS], [ORDERING])
    db.create_service(REPORTS, QUEUES[REPORTS], [REPORTING])


def send_orders(db: broker.Broker, count: int, seed: int = 7) -> None:
    """``count`` orders from the store, one dialog each, in one transaction."""
    chance = random.Random(seed)
    with db.transaction() as tx:
        for number in range(count):
            order = {"id": number, "customer": f"c{chance.randrange(5)}", "amount": chance.randrange(100, 10_000) / 100}
            handle = tx.begin_dialog(STORE, ORDERS, ORDERING)
            tx.send(handle, ORDER, json.dumps(order))


def answer_batch(orders: DataFrame, batch_id: int, url: str, sink_id: str) -> None:
    """One micro-batch: receipts on the orders' conversations plus totals per customer.

    ``sink_id`` names this query's output: ``checkpoint_sink_id`` gives each checkpoint
    its own, so a checkpoint deleted and made again (batch ids start again at 0) is a new
    sink rather than a replay of the old one.
    """
    parsed = orders.select("conversation_handle",
                           F.from_json(F.col("message_body").cast("string"), ORDER_SCHEMA).alias("order"))
    receipts = parsed.select(
        "conversation_handle",
        F.lit(RECEIPT).alias("message_type"),
        F.to_json(F.struct("order.id", "order.customer",
                           F.round(F.col("order.amount") * (1 + TAX), 2).alias("total"))).alias("message_body"),
    )
    totals = parsed.groupBy("order.customer").agg(F.count("*").alias("orders"),
                                                  F.round(F.sum("order.amount"), 2).alias("amount"))
    reports = totals.select(
        F.lit(ORDERS).alias("from_service"), F.lit(REPORTS).alias("to_service"), F.lit(REPORTING).alias("contract"),
        F.lit(TOTALS).alias("message_type"),
        F.to_json(F.struct(F.lit(batch_id).alias("batch"), "customer", "orders", "amount")).alias("message_body"),
    )
    (receipts.unionByName(reports, allowMissingColumns=True)
     .write.format("servicebroker").option("url", url)
     .option("sinkId", sink_id).option("batchId", batch_id)  # sent once per batch
     .mode("append").save())


def run_pipeline(spark: SparkSession, url: str, checkpoint: str, rows_per_batch: int = 500) -> None:
    """Process every order queued now, in micro-batches, then stop (availableNow)."""
    sink_id = checkpoint_sink_id(checkpoint)
    query = (spark.readStream.format("servicebroker").option("url", url).option("queue", QUEUES[ORDERS])
             .option("maxRowsPerBatch", rows_per_batch).load()
             .writeStream.foreachBatch(lambda frame, batch_id: answer_batch(frame, batch_id, url, sink_id))
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()


def summary(db: broker.Broker) -> dict[str, Any]:
    """What the queues hold afterwards, and the totals the reporting service got."""
    totals: dict[str, list[float]] = {}
    for message in db.queue_rows(QUEUES[REPORTS]):
        report = json.loads(message.message_body or b"{}")
        orders, amount = totals.setdefault(report["customer"], [0, 0.0])
        totals[report["customer"]] = [orders + report["orders"], round(amount + report["amount"], 2)]
    return {
        "orders left": len(db.queue_rows(QUEUES[ORDERS])),
        "receipts": len(db.queue_rows(QUEUES[STORE])),
        "totals": dict(sorted(totals.items())),
    }


def main(url: str, orders: int, checkpoint: str | None = None) -> dict[str, Any]:
    db = broker.connect(url)
    try:
        create_objects(db)
        send_orders(db, orders)
        spark = local_session("servicebroker-example")
        with tempfile.TemporaryDirectory() as scratch:
            run_pipeline(spark, url, checkpoint or str(Path(scratch) / "checkpoint"))
        return summary(db)
    finally:
        db.dispose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", default="sqlite:///shop.db", help="broker database URL")
    parser.add_argument("--orders", type=int, default=1000, help="orders to send first")
    parser.add_argument("--checkpoint", help="Spark checkpoint directory (default: a temporary one)")
    arguments = parser.parse_args()
    print(json.dumps(main(arguments.db, arguments.orders, arguments.checkpoint), indent=2))

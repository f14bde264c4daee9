"""``broker spark-demo``: the example Spark pipeline (examples/spark_pipeline.py) on ``--db``.

The example ships inside the package (``broker._examples``); it needs the extra
``servicebroker[spark]`` and a Java runtime, and says so when either is missing.
"""

from __future__ import annotations

import importlib
import shutil

import click

from broker.spark import INSTALL_HINT
from cli.params import FilePath, count_range
from cli.state import CliState, pass_state


@click.command("spark-demo")
@click.option("--orders", default=1000, show_default=True, type=count_range(0), help="Orders to send first.")
@click.option("--checkpoint", type=FilePath(file_okay=False), help="Spark checkpoint directory (default: temporary).")
@pass_state
def spark_demo(state: CliState, orders: int, checkpoint: str | None) -> None:
    """Run the Spark pipeline: orders in, receipts and totals per customer out.

    Creates the shop's objects (//shop/...) if needed, sends ORDERS orders, then a local
    Spark stream RECEIVEs them, replies to each with a receipt and sends the totals per
    customer to //shop/Reports, exactly once. Prints what the queues hold afterwards.

    \b
    Example:
      pip install 'servicebroker[spark]'
      broker --db sqlite:///shop.db spark-demo --orders 500
    """
    try:
        pipeline = importlib.import_module("broker._examples.spark_pipeline")
    except ImportError as exc:
        raise click.ClickException(f"{INSTALL_HINT} ({exc})") from None
    if shutil.which("java") is None:
        raise click.ClickException("Spark needs a Java runtime (17 or later): no `java` on PATH")
    result = pipeline.main(state.url, orders, checkpoint)
    click.echo(f"orders left on OrdersQueue: {result['orders left']}")
    click.echo(f"receipts on StoreQueue: {result['receipts']}")
    for customer, (count, amount) in result["totals"].items():
        click.echo(f"{customer}: {count} orders, {amount:.2f}")


COMMANDS = [spark_demo]

"""Reads never wait for writers: everything that only looks at a database runs on a
snapshot of its last committed state (``Broker.snapshot``), without the write lock.

Each test holds a write transaction open (one that has sent a message and not
committed) in another thread and shows every read returning while it is still open,
seeing only committed data.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support import CONTRACT, INITIATOR_SERVICE, REQUEST, TARGET_QUEUE, TARGET_SERVICE, open_dialog, wait_until

import broker
from broker.errors import BrokerError
from cli.main import cli

COMMITTED = b"<committed/>"
UNCOMMITTED = b"<not-committed-yet/>"


@contextmanager
def writer_holding(db: broker.Broker, handle: object, then: Callable[[broker.Transaction], None] | None = None,
                   ) -> Iterator[threading.Thread]:
    """A thread whose transaction has SENT an uncommitted message and stays open (then
    runs ``then``, if given, inside it) until the block ends; then it commits."""
    sent, finish = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def hold() -> None:
        try:
            with db.transaction() as tx:
                tx.send(handle, REQUEST, UNCOMMITTED)
                sent.set()
                if then is not None:
                    then(tx)
                finish.wait(60)
        except BaseException as exc:  # reported by the test, not lost in the thread
            failures.append(exc)
            sent.set()

    thread = threading.Thread(target=hold)
    thread.start()
    assert sent.wait(30)
    try:
        yield thread
    finally:
        finish.set()
        thread.join(60)
    assert not failures, failures


def returns_while_held(read: Callable[[], Any], writer: threading.Thread) -> Any:
    """``read()``'s result; it must come back while ``writer`` still holds its transaction
    (a read waiting for the write lock would wait until the test gives up)."""
    result: list[Any] = []
    failures: list[BaseException] = []

    def run() -> None:
        try:
            result.append(read())
        except BaseException as exc:
            failures.append(exc)

    reader = threading.Thread(target=run)
    reader.start()
    reader.join(30)
    assert not reader.is_alive(), "the read waited for the writer"
    assert writer.is_alive()
    assert not failures, failures
    return result[0]


def test_every_read_of_the_api_returns_at_once_and_sees_only_committed_data(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial, COMMITTED)
    with writer_holding(tutorial, handle) as writer:
        def bodies(messages: list[broker.Message]) -> list[bytes | None]:
            return [m.message_body for m in messages]

        assert bodies(returns_while_held(lambda: tutorial.queue_rows(TARGET_QUEUE), writer)) == [COMMITTED]
        assert bodies(returns_while_held(lambda: list(tutorial.iter_queue_rows(TARGET_QUEUE, 1)), writer)) == [
            COMMITTED]
        assert returns_while_held(lambda: tutorial.queue_counts(TARGET_QUEUE), writer) == {1: 1}
        endpoints = returns_while_held(lambda: tutorial.catalog("sys.conversation_endpoints"), writer)
        assert {e["send_sequence"] for e in endpoints if e["is_initiator"]} == {1}  # the second SEND is not seen
        assert returns_while_held(lambda: tutorial.oldest_ready_time(TARGET_QUEUE), writer) is not None
        assert returns_while_held(tutorial.transmission_backlog, writer) == {}
        assert [n for _s, _d, n in returns_while_held(tutorial.endpoint_states, writer)] == [2]
        assert returns_while_held(tutorial.timer_summary, writer)[0] == 0

        def snapshot_query() -> list[dict[str, Any]]:
            with tutorial.snapshot() as tx:
                return tx.query(f'SELECT message_body FROM "{TARGET_QUEUE}"')

        assert [row["message_body"] for row in returns_while_held(snapshot_query, writer)] == [COMMITTED]


def test_a_waitfor_that_already_wrote_holds_no_reader_up(tutorial: broker.Broker) -> None:
    """A transaction that SENT and then waits in RECEIVE ... WAITFOR keeps the write lock
    for its whole wait; reads go on."""
    handle = open_dialog(tutorial, COMMITTED)
    tutorial.create_queue("Empty")
    waited: list[list[broker.Message]] = []
    with writer_holding(tutorial, handle, then=lambda tx: waited.append(tx.receive("Empty", timeout=5))) as writer:
        wait_until(lambda: tutorial.queue_counts(TARGET_QUEUE) == {1: 1}, timeout=30)
        assert returns_while_held(lambda: tutorial.queue_counts(TARGET_QUEUE), writer) == {1: 1}
        assert returns_while_held(lambda: len(tutorial.catalog("sys.service_queues")), writer) == 3
    assert waited == [[]]


def test_the_cli_reads_return_at_once(tutorial: broker.Broker, tmp_path: Path) -> None:
    url = tutorial.engine.url.render_as_string(hide_password=False)
    handle = open_dialog(tutorial, COMMITTED)

    def cli_output(*args: str) -> str:
        result = CliRunner().invoke(cli, ["--db", url, *args])
        assert result.exit_code == 0, (result.output, result.exception)
        return result.stdout

    exported = tmp_path / "export.jsonl"
    with writer_holding(tutorial, handle) as writer:
        status = json.loads(returns_while_held(lambda: cli_output("status", "--json"), writer))
        [target] = [q for q in status["queues"] if q["queue"] == TARGET_QUEUE]
        assert target["ready"] == 1
        peeked = returns_while_held(lambda: cli_output("peek", TARGET_QUEUE, "--json"), writer)
        assert [row["message_body"] for row in json.loads(peeked)] == [COMMITTED.decode()]
        services = json.loads(returns_while_held(lambda: cli_output("show", "services", "--json"), writer))
        assert {s["name"] for s in services} >= {TARGET_SERVICE, INITIATOR_SERVICE}
        returns_while_held(lambda: cli_output("export", TARGET_QUEUE, str(exported)), writer)
    assert len(exported.read_text().splitlines()) == 1


def test_a_snapshot_refuses_to_change_anything(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial, COMMITTED)
    with tutorial.snapshot() as tx:
        for verb in (lambda: tx.send(handle, REQUEST, b"<no/>"), lambda: tx.receive(TARGET_QUEUE),
                     lambda: tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT),
                     lambda: tx.end_conversation(handle)):
            with pytest.raises(BrokerError) as refused:
                verb()
            assert refused.value.number == 3906
    with pytest.raises(BrokerError), tutorial.snapshot() as tx:
        tx.query(f'DELETE FROM "{TARGET_QUEUE}"')
    assert tutorial.queue_counts(TARGET_QUEUE) == {1: 1}


def test_the_runtimes_look_at_the_queues_goes_on_while_a_writer_holds(tutorial: broker.Broker) -> None:
    """``broker listen``: its runtime looks at the queues on a snapshot, so a message
    waiting unreceived is announced (QUEUE_ACTIVATION) while a writer holds its lock."""
    url = tutorial.engine.url.render_as_string(hide_password=False)
    handle = open_dialog(tutorial, COMMITTED)

    def listen_once() -> list[dict[str, Any]]:
        result = CliRunner().invoke(cli, ["--db", url, "listen", TARGET_QUEUE, "--count", "1", "--json"])
        assert result.exit_code == 0, (result.output, result.exception)
        return [json.loads(line) for line in result.stdout.splitlines()]

    with writer_holding(tutorial, handle) as writer:
        [event] = returns_while_held(listen_once, writer)
    assert event["event"] == "QUEUE_ACTIVATION" and event["queue"] == TARGET_QUEUE

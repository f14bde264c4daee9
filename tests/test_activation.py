"""Activation (spec 9, tutorial 12.4): queue monitors, readers, QUEUE_ACTIVATION, ``broker listen``.

The procedures live in ``activation_procs.py``. "A few seconds" is shortened to
``FEW_S`` so that readers ramp up quickly; every test ends with its runtime stopped and no
reader thread left.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import activation_procs
import pytest
from click.testing import CliRunner, Result
from instance_processes import BROKER
from sqlalchemy import insert, text
from support import (
    CONTRACT,
    INITIATOR_QUEUE,
    INITIATOR_SERVICE,
    REPLY,
    REQUEST,
    TARGET_QUEUE,
    TARGET_SERVICE,
    endpoint,
    open_dialog,
    target_handle,
    wait_until,
)

import broker
from broker import events
from broker.runtime import activation
from broker.runtime.runner import Runtime
from broker.storage.models import ActivatedTask
from broker.storage.postgres_backend import RUNTIME_LOCKS
from cli.main import cli

FEW_S = 0.2
TESTS = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def few_seconds(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Short "few seconds"; fresh procedure state; no reader thread outlives the test."""
    monkeypatch.setattr(activation, "FEW_SECONDS", FEW_S)
    activation_procs.reset()
    yield
    activation_procs.gate.set()
    assert not [t for t in threading.enumerate() if t.name.startswith("broker-reader")]


@pytest.fixture
def runtime(tutorial: broker.Broker) -> Iterator[Runtime]:
    with tutorial.runtime(poll_interval=0.05) as running:
        yield running
        activation_procs.gate.set()  # let held procedures return before the runtime waits for them


class Recorder:
    """The payloads of one event, in order, with the moment each arrived."""

    def __init__(self, db: broker.Broker, name: str) -> None:
        self.seen: list[tuple[float, dict[str, Any]]] = []
        db.events.subscribe(name, lambda **payload: self.seen.append((time.monotonic(), payload)))

    def of(self, queue: str) -> list[tuple[float, dict[str, Any]]]:
        return [(moment, payload) for moment, payload in self.seen if payload["queue"] == queue]


def activate(db: broker.Broker, procedure: str = "activation_procs:target_proc", readers: int = 10,
             status: bool = True) -> None:
    db.alter_queue(TARGET_QUEUE, activation={"status": status, "procedure_name": procedure,
                                             "max_queue_readers": readers, "execute_as": "SELF"})


def tasks(db: broker.Broker) -> list[dict[str, Any]]:
    return db.catalog("sys.dm_broker_activated_tasks")


def monitor(db: broker.Broker) -> dict[str, Any] | None:
    rows = db.catalog("sys.dm_broker_queue_monitors")
    return rows[0] if rows else None


def state(db: broker.Broker) -> str | None:
    row = monitor(db)
    return None if row is None else row["state"]


def caught_up(db: broker.Broker) -> bool:
    """The monitor is INACTIVE after its readers' RECEIVE came back empty, nobody waiting."""
    row = monitor(db)
    return (row is not None and row["state"] == activation.INACTIVE and row["tasks_waiting"] == 0
            and row["last_empty_rowset_time"] is not None)


def queue_id(db: broker.Broker, name: str) -> int:
    [row] = [r for r in db.catalog("sys.service_queues") if r["name"] == name]
    return int(row["object_id"])


def ready(db: broker.Broker, queue: str) -> int:
    return db.queue_counts(queue).get(1, 0)


def passes_go_by(runtime: Runtime, count: int = 5) -> None:
    """Wait until the runtime has looked at the database ``count`` more times."""
    target = runtime.passes + count
    wait_until(lambda: runtime.passes >= target)


def send_dialogs(db: broker.Broker, dialogs: int, messages_each: int = 1) -> None:
    with db.transaction() as tx:
        for _ in range(dialogs):
            handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)
            for _ in range(messages_each):
                tx.send(handle, REQUEST, b"<RequestMsg/>")


def test_internal_activation_tutorial(tutorial: broker.Broker, runtime: Runtime) -> None:
    """Spec 12.4 end to end: request -> activated reply -> EndDialog reactivates -> idle exit."""
    started = Recorder(tutorial, events.READER_STARTED)
    stopped = Recorder(tutorial, events.READER_STOPPED)
    activations = Recorder(tutorial, events.QUEUE_ACTIVATION)
    activate(tutorial)
    activation_procs.gate.clear()  # hold the procedure before its first RECEIVE
    assert state(tutorial) is None or state(tutorial) == activation.INACTIVE
    initiator = open_dialog(tutorial)

    [task] = wait_until(lambda: tasks(tutorial))  # type: ignore[misc]
    assert_spid_of_a_running_runtime(tutorial, task["spid"])
    assert task["queue_id"] == queue_id(tutorial, TARGET_QUEUE)
    assert task["procedure_name"] == "activation_procs:target_proc"
    wait_until(lambda: state(tutorial) == activation.NOTIFIED)
    assert monitor(tutorial)["last_activated_time"] is not None  # type: ignore[index]
    target = target_handle(tutorial, initiator)

    activation_procs.gate.set()
    wait_until(lambda: ready(tutorial, INITIATOR_QUEUE) == 1)
    assert ready(tutorial, TARGET_QUEUE) == 0
    # Idle for RECEIVE_TIMEOUT: the procedure returns and the monitor goes back to INACTIVE.
    wait_until(lambda: not tasks(tutorial) and len(stopped.seen) == 1)
    wait_until(lambda: caught_up(tutorial))

    with tutorial.transaction() as tx:
        [reply] = tx.receive(INITIATOR_QUEUE)
        assert reply.message_type_name == REPLY
        assert reply.message_body == activation_procs.REPLY_BODY
        tx.end_conversation(initiator)
    # EndDialog reactivates the procedure, which ends the target side.
    wait_until(lambda: len(started.seen) == 2)
    wait_until(lambda: endpoint(tutorial, target)["state"] == "CD")  # type: ignore[index]
    wait_until(lambda: not tasks(tutorial) and len(stopped.seen) == 2)
    wait_until(lambda: caught_up(tutorial))
    assert ready(tutorial, TARGET_QUEUE) == 0
    assert not activations.of(TARGET_QUEUE)  # a queue with a procedure gets no QUEUE_ACTIVATION
    assert activations.of(INITIATOR_QUEUE)  # the initiator queue has none: external activation

    runtime.stop()
    assert monitor(tutorial) is None and not tasks(tutorial)  # no monitor without a runtime


def assert_spid_of_a_running_runtime(db: broker.Broker, spid: int) -> None:
    """A number of the runtime's own, not its process id (a later process may have that).
    SQLite: marked running (a record lock, known to this process from memory).
    PostgreSQL: a session holds its advisory lock (runtimes may run on other hosts)."""
    assert spid != os.getpid()
    if db.engine.dialect.name == "sqlite":
        with db.engine.connect() as conn:
            assert db.state.backend.ended_sessions(conn, [spid]) == []
        return
    assert _holders(db, spid) == 1


def ended_and_live_session(db: broker.Broker, stack: ExitStack) -> tuple[int, int]:
    """A task spid whose runtime has ended and one whose runtime still runs (while ``stack`` is open)."""
    backend = db.state.backend
    postgresql = db.engine.dialect.name == "postgresql"
    live = stack.enter_context(backend.session(db.engine))
    with backend.session(db.engine) as ended:
        assert not postgresql or _holders(db, ended) == 1
    if postgresql:
        wait_until(lambda: _holders(db, ended) == 0)
    return ended, live


def _holders(db: broker.Broker, spid: int) -> int:
    """Sessions holding the runtime lock of ``spid`` (PostgreSQL)."""
    with db.engine.connect() as conn:
        return int(conn.execute(text(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2"
            " AND classid::bigint = :namespace AND objid::bigint = :spid"),
            {"namespace": RUNTIME_LOCKS, "spid": spid}).scalar_one())


def test_task_rows_of_ended_runtimes_are_removed_when_a_runtime_starts(tutorial: broker.Broker) -> None:
    with ExitStack() as stack:
        ended, live = ended_and_live_session(tutorial, stack)
        target = queue_id(tutorial, TARGET_QUEUE)
        # The test's own process id: a live process, but no runtime's (a runtime that
        # died while a later process took its id, as PID 1 of a restarted container).
        with tutorial.transaction() as tx:
            for spid in (ended, os.getpid(), live):
                tx.connection.execute(insert(ActivatedTask).values(
                    task_id=uuid.uuid4(), queue_id=target, procedure_name="p", process_id=spid,
                    start_time=datetime.now(UTC)))
        with tutorial.runtime(poll_interval=0.05):
            wait_until(lambda: len(tasks(tutorial)) == 1)
        assert [row["spid"] for row in tasks(tutorial)] == [live]  # a live runtime keeps its row


def test_task_rows_of_a_killed_runtime_process_are_removed(tutorial: broker.Broker, tmp_path: Path) -> None:
    """``broker run`` killed with SIGKILL while its reader runs leaves the reader's task
    row; the next runtime to start removes it (PostgreSQL: the killed process's session,
    and with it its advisory lock, ends with the process)."""
    activate(tutorial)  # target_proc waits for its gate, which stays shut in the child
    open_dialog(tutorial)
    log = tmp_path / "run.log"
    environment = {**os.environ,
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
    url = tutorial.engine.url.render_as_string(hide_password=False)
    with log.open("wb") as out:
        child = subprocess.Popen([str(BROKER), "--db", url, "run", "--poll", "0.05"], env=environment,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out)
    try:
        [task] = wait_until(lambda: tasks(tutorial), timeout=30)  # type: ignore[misc]
    finally:
        child.kill()
        child.wait()
    assert [row["spid"] for row in tasks(tutorial)] == [task["spid"]], log.read_text()
    activate(tutorial, status=False)  # the next runtime starts no reader of its own
    with tutorial.runtime(poll_interval=0.05):
        wait_until(lambda: not tasks(tutorial))


def test_max_queue_readers_is_never_exceeded(tutorial: broker.Broker, runtime: Runtime) -> None:
    activate(tutorial, "activation_procs:counting_proc", readers=3)
    send_dialogs(tutorial, 40)
    wait_until(lambda: activation_procs.concurrency.messages == 40, timeout=15)
    wait_until(lambda: not tasks(tutorial))
    assert 2 <= activation_procs.concurrency.most <= 3


def test_a_backlog_on_one_conversation_needs_two_readers_at_most(tutorial: broker.Broker, runtime: Runtime) -> None:
    activate(tutorial, "activation_procs:counting_proc", readers=5)
    send_dialogs(tutorial, 1, messages_each=40)
    wait_until(lambda: activation_procs.concurrency.messages == 40, timeout=15)
    wait_until(lambda: not tasks(tutorial))
    assert activation_procs.concurrency.most <= 2


def test_lowering_max_queue_readers_kills_nothing(tutorial: broker.Broker, runtime: Runtime) -> None:
    started = Recorder(tutorial, events.READER_STARTED)
    activation_procs.gate.clear()  # each reader takes one message and holds on to it
    activate(tutorial, "activation_procs:holding_proc", readers=3)
    send_dialogs(tutorial, 6)
    wait_until(lambda: len(tasks(tutorial)) == 3 and activation_procs.concurrency.messages == 3)
    tutorial.alter_queue(TARGET_QUEUE, activation={"max_queue_readers": 1})
    passes_go_by(runtime)
    assert len(tasks(tutorial)) == 3 and activation_procs.concurrency.now == 3
    assert len(started.seen) == 3
    activation_procs.gate.set()
    wait_until(lambda: ready(tutorial, TARGET_QUEUE) == 0 and not tasks(tutorial))
    assert activation_procs.concurrency.messages == 6


def test_nothing_is_activated_while_activation_or_the_queue_is_off(
    tutorial: broker.Broker, runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    started = Recorder(tutorial, events.READER_STARTED)
    activate(tutorial, status=False)
    open_dialog(tutorial)
    passes_go_by(runtime)
    assert not started.seen and not tasks(tutorial)
    assert monitor(tutorial) is None  # no monitor without activation STATUS ON

    tutorial.alter_queue(TARGET_QUEUE, status=False, activation={"status": True})
    passes_go_by(runtime)
    assert not started.seen and not tasks(tutorial)
    assert state(tutorial) == activation.INACTIVE

    tutorial.alter_queue(TARGET_QUEUE, status=True, activation={"max_queue_readers": 0})
    passes_go_by(runtime)
    assert not started.seen
    zero = [r for r in caplog.records if "9648" in r.getMessage()]
    assert len(zero) == 1  # logged once, not on every pass

    tutorial.alter_queue(TARGET_QUEUE, activation={"max_queue_readers": 1})
    wait_until(lambda: started.seen)
    wait_until(lambda: ready(tutorial, INITIATOR_QUEUE) == 1 and not tasks(tutorial))


def test_a_broken_procedure_is_logged_and_the_runtime_goes_on(
    tutorial: broker.Broker, runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    def logged(number: int) -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "broker.activation" and f"error {number}" in r.getMessage()]

    tutorial.alter_queue(TARGET_QUEUE, poison_message_handling=False)
    activate(tutorial, "no_such_module:proc")
    open_dialog(tutorial)
    wait_until(lambda: logged(2812))
    passes_go_by(runtime)
    assert len(logged(2812)) == 1 and not tasks(tutorial)  # not tried again on every pass

    activate(tutorial, "activation_procs:not_a_procedure")
    wait_until(lambda: logged(9620))

    activate(tutorial, "activation_procs:failing_proc")
    wait_until(lambda: logged(9724))
    assert ready(tutorial, TARGET_QUEUE) == 1  # its transaction rolled back

    activate(tutorial, "activation_procs.target_proc")  # the dotted form works too
    wait_until(lambda: ready(tutorial, INITIATOR_QUEUE) == 1)
    assert runtime.running


def test_queue_activation_event_for_a_queue_without_procedure(
    tutorial: broker.Broker, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    few = 1.0
    monkeypatch.setattr(activation, "FEW_SECONDS", few)
    activations = Recorder(tutorial, events.QUEUE_ACTIVATION)
    open_dialog(tutorial)
    wait_until(lambda: activations.of(TARGET_QUEUE))
    [(first, payload)] = activations.of(TARGET_QUEUE)
    assert payload == {"queue": TARGET_QUEUE, "queue_id": queue_id(tutorial, TARGET_QUEUE)}

    # Nobody receives: notified again after a few seconds, not before.
    wait_until(lambda: len(activations.of(TARGET_QUEUE)) == 2)
    second = activations.of(TARGET_QUEUE)[1][0]
    assert second - first >= few * 0.9  # (measured as emitted, after each pass's commit)

    # A RECEIVE that empties the queue resets it: the next arrival is announced at once.
    with tutorial.transaction() as tx:
        assert tx.receive(TARGET_QUEUE)
    passes_go_by(runtime, 2)
    open_dialog(tutorial)
    wait_until(lambda: len(activations.of(TARGET_QUEUE)) == 3)
    assert activations.of(TARGET_QUEUE)[2][0] - second < few


def listen_in_thread(db_url: str, *args: str) -> Callable[[], Result]:
    """Start ``broker listen`` in a thread; returns a function that waits for its result."""
    outcome: list[Result] = []
    thread = threading.Thread(
        target=lambda: outcome.append(CliRunner().invoke(cli, ["--db", db_url, "listen", *args])))
    thread.start()

    def result() -> Result:
        thread.join(10)
        assert not thread.is_alive() and outcome
        return outcome[0]

    return result


@pytest.mark.parametrize("as_json", [False, True])
def test_broker_listen_prints_one_line_per_event(tutorial: broker.Broker, db_url: str, as_json: bool) -> None:
    result = listen_in_thread(db_url, TARGET_QUEUE, "--count", "1", *(["--json"] if as_json else []))
    open_dialog(tutorial)
    done = result()
    assert done.exit_code == 0, (done.output, done.exception)
    [line] = done.stdout.splitlines()
    if as_json:
        event = json.loads(line)
        assert event["event"] == "QUEUE_ACTIVATION" and event["queue"] == TARGET_QUEUE
        assert event["queue_id"] == queue_id(tutorial, TARGET_QUEUE)
    else:
        assert f"QUEUE_ACTIVATION\t{TARGET_QUEUE}\t" in line


def test_broker_listen_on_an_unknown_queue(tutorial: broker.Broker, db_url: str) -> None:
    done = CliRunner().invoke(cli, ["--db", db_url, "listen", "NoSuchQueue"])
    assert done.exit_code == 1
    assert "error 208" in done.stderr


def test_stopping_the_runtime_ends_a_reader_waiting_in_receive_forever(tutorial: broker.Broker) -> None:
    # SQL Server ends activated tasks at shutdown; a WAITFOR without a timeout would
    # otherwise hold the stop for its whole timeout, database after database.
    activate(tutorial, "activation_procs:forever_proc", readers=1)
    running = tutorial.runtime(poll_interval=0.05)
    running.start()
    try:
        open_dialog(tutorial)
        wait_until(activation_procs.waiting_forever.is_set)
    finally:
        running.stop(timeout=20)
    assert not [t for t in threading.enumerate() if t.name.startswith("broker-reader")]
    assert tasks(tutorial) == []

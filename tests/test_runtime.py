"""The runtime: timers and lifetimes on time, transmission retries, poison messages, `broker run`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text, update
from support import (
    INITIATOR_QUEUE,
    REQUEST,
    TARGET_QUEUE,
    endpoint,
    open_dialog,
    target_handle,
    wait_until,
)

import broker
from broker.storage.models import BrokerDatabase, ServiceQueue


def _types(db: broker.Broker, queue: str) -> list[str]:
    return [m.message_type_name for m in db.queue_rows(queue)]


def test_the_runtime_fires_a_timer_on_time_on_the_local_queue_only(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    fired: list[object] = []
    tutorial.events.subscribe(broker.events.TIMER_FIRED, lambda **event: fired.append(event))
    with tutorial.runtime(poll_interval=5.0):
        with tutorial.transaction() as tx:
            tx.begin_conversation_timer(handle, timeout=0.2)
        wait_until(lambda: broker.DIALOG_TIMER in _types(tutorial, INITIATOR_QUEUE), timeout=5)
    assert _types(tutorial, INITIATOR_QUEUE) == [broker.DIALOG_TIMER]
    assert _types(tutorial, TARGET_QUEUE) == [REQUEST]  # never sent to the far side
    assert fired == [{"conversation_handle": handle}]
    assert endpoint(tutorial, handle)["dialog_timer"].year == 1900  # cleared in the same transaction


def test_lifetime_expiry_errors_both_sides(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial, lifetime=1)
    target = target_handle(tutorial, handle)
    with tutorial.runtime(poll_interval=5.0):
        wait_until(lambda: endpoint(tutorial, handle)["state"] == "ER" and endpoint(tutorial, target)["state"] == "ER",
                   timeout=10)
    for queue in (INITIATOR_QUEUE, TARGET_QUEUE):
        errors = [m for m in tutorial.queue_rows(queue) if m.message_type_name == broker.ERROR]
        assert [broker.parse_error(m.message_body)[0] for m in errors] == [-8489]
    with pytest.raises(broker.BrokerError) as failure:
        with tutorial.transaction() as tx:
            tx.send(handle, REQUEST, "<late/>")
    assert failure.value.number == 8429


def test_lifetime_expiry_fires_at_receive_without_a_runtime(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial, lifetime=1)

    def error_received() -> list[broker.Message]:
        with tutorial.transaction() as tx:
            return [m for m in tx.receive(INITIATOR_QUEUE) if m.message_type_name == broker.ERROR]

    [error] = wait_until(error_received, timeout=10)  # type: ignore[misc]
    assert broker.parse_error(error.message_body) == (-8489, "The dialog has exceeded the specified LIFETIME.")
    assert endpoint(tutorial, handle)["state"] == "ER"


def test_held_messages_are_retried_with_back_off(tutorial: broker.Broker) -> None:
    tutorial.alter_queue(TARGET_QUEUE, status=False)
    open_dialog(tutorial, "<held/>")
    [held] = tutorial.catalog("sys.transmission_queue")
    assert held["transmission_status"] == f'The service queue "{TARGET_QUEUE}" is currently disabled.'

    def due_now() -> None:
        with tutorial.engine.begin() as conn:
            conn.execute(text("UPDATE sb_transmission_queue SET next_attempt_time = '2000-01-01 00:00:00.000000'"))

    def retry_state() -> tuple[int, float]:
        with tutorial.engine.connect() as conn:
            attempts, when = conn.execute(text("SELECT attempts, next_attempt_time FROM sb_transmission_queue")).one()
        moment = when if isinstance(when, datetime) else datetime.fromisoformat(when)  # text on SQLite
        wait = moment.replace(tzinfo=UTC) - datetime.now(UTC)
        return attempts, wait.total_seconds()

    runtime = tutorial.runtime(poll_interval=60.0)
    due_now()
    runtime.run_pass()
    attempts, wait = retry_state()
    assert attempts == 1 and 6 < wait <= 8.5  # doubled from the first 4 s
    due_now()
    runtime.run_pass()
    attempts, wait = retry_state()
    assert attempts == 2 and 14 < wait <= 16.5

    # The cause goes away without DDL that would retry by itself: the next due retry delivers.
    with tutorial.engine.begin() as conn:
        conn.execute(update(ServiceQueue).where(ServiceQueue.name == TARGET_QUEUE)
                     .values(is_receive_enabled=True, is_enqueue_enabled=True))
        conn.execute(update(BrokerDatabase).values(catalog_version=BrokerDatabase.catalog_version + 1))
    due_now()
    runtime.run_pass()
    assert tutorial.catalog("sys.transmission_queue") == []
    assert [m.message_body for m in tutorial.queue_rows(TARGET_QUEUE)] == [b"<held/>"]


def _roll_back_a_receive(db: broker.Broker) -> None:
    with pytest.raises(RuntimeError):
        with db.transaction() as tx:
            assert tx.receive(TARGET_QUEUE, 1)
            raise RuntimeError("the application fails on this message")


def test_five_rolled_back_receives_disable_the_queue(tutorial: broker.Broker) -> None:
    open_dialog(tutorial, "<poison/>")
    disabled: list[object] = []
    tutorial.events.subscribe(broker.events.BROKER_QUEUE_DISABLED, lambda **event: disabled.append(event))
    for _ in range(4):
        _roll_back_a_receive(tutorial)
    [queue] = [q for q in tutorial.catalog("sys.service_queues") if q["name"] == TARGET_QUEUE]
    assert queue["is_receive_enabled"] == 1
    _roll_back_a_receive(tutorial)
    [queue] = [q for q in tutorial.catalog("sys.service_queues") if q["name"] == TARGET_QUEUE]
    assert (queue["is_receive_enabled"], queue["is_enqueue_enabled"]) == (0, 0)
    assert disabled == [{"queue": TARGET_QUEUE}]
    assert [m.message_body for m in tutorial.queue_rows(TARGET_QUEUE)] == [b"<poison/>"]  # nothing lost
    with pytest.raises(broker.QueueDisabledError):
        with tutorial.transaction() as tx:
            tx.receive(TARGET_QUEUE)


def test_a_committed_receive_resets_the_count(tutorial: broker.Broker) -> None:
    open_dialog(tutorial, "<one/>")
    open_dialog(tutorial, "<two/>")
    for _ in range(4):
        _roll_back_a_receive(tutorial)
    with tutorial.transaction() as tx:
        assert tx.receive(TARGET_QUEUE, 1)
    for _ in range(4):
        _roll_back_a_receive(tutorial)
    [queue] = [q for q in tutorial.catalog("sys.service_queues") if q["name"] == TARGET_QUEUE]
    assert queue["is_receive_enabled"] == 1


def test_poison_message_handling_off_keeps_the_queue_on(tutorial: broker.Broker) -> None:
    tutorial.alter_queue(TARGET_QUEUE, poison_message_handling=False)
    open_dialog(tutorial, "<poison/>")
    for _ in range(6):
        _roll_back_a_receive(tutorial)
    [queue] = [q for q in tutorial.catalog("sys.service_queues") if q["name"] == TARGET_QUEUE]
    assert queue["is_receive_enabled"] == 1


def _broker_run(url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", "--db", url, "run", "--poll", "0.2", "--log-level", "INFO"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parent.parent,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _started(runner: subprocess.Popen[str]) -> list[str]:
    """Read the runner's log until it says the runtime started (its handlers are in place)."""
    assert runner.stderr is not None
    lines: list[str] = []
    while not lines or "runtime started" not in lines[-1]:
        line = runner.stderr.readline()
        assert line, f"broker run exited early: {lines}"
        lines.append(line)
    return lines


def test_two_broker_run_processes_fire_each_timer_once_and_stop_cleanly(tutorial: broker.Broker, db_url: str) -> None:
    handles = [open_dialog(tutorial, f"<n>{i}</n>") for i in range(5)]
    runners = [_broker_run(db_url) for _ in range(2)]
    try:
        for runner in runners:
            _started(runner)
        soon = datetime.now(UTC) + timedelta(seconds=0.5)
        with tutorial.transaction() as tx:
            for handle in handles:
                tx.begin_conversation_timer(handle, timeout=max(0.0, (soon - datetime.now(UTC)).total_seconds()))
        wait_until(lambda: _types(tutorial, INITIATOR_QUEUE).count(broker.DIALOG_TIMER) == len(handles), timeout=15)
        for runner in runners:
            assert runner.poll() is None, runner.stderr.read() if runner.stderr else ""
    finally:
        for runner in runners:
            runner.send_signal(signal.SIGTERM)
        outputs = [runner.communicate(timeout=30) for runner in runners]
    assert [runner.returncode for runner in runners] == [0, 0], outputs
    assert all("runtime stopped" in err for _, err in outputs)
    assert _types(tutorial, INITIATOR_QUEUE).count(broker.DIALOG_TIMER) == len(handles)  # none fired twice


def test_closed_target_endpoints_are_purged_after_thirty_minutes(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    target = target_handle(tutorial, handle)
    with tutorial.transaction() as tx:
        tx.end_conversation(target)
    with tutorial.transaction() as tx:
        tx.end_conversation(handle)
    assert endpoint(tutorial, target)["state"] == "CD"
    runtime = tutorial.runtime(activation=False)
    runtime.run_pass()
    assert endpoint(tutorial, target) is not None  # kept as replay protection
    with tutorial.engine.begin() as conn:
        conn.execute(text("UPDATE sb_conversation_endpoints SET closed_date = '2000-01-01 00:00:00.000000'"))
    runtime.run_pass()
    assert endpoint(tutorial, target) is None
    assert tutorial.catalog("sys.conversation_groups") == []


def test_a_runtime_whose_passes_fail_waits_longer_each_time(db: broker.Broker, monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    runtime = db.runtime()
    pauses: list[float | None] = []

    def failing() -> float:
        raise RuntimeError("the schema is not the code's")

    def pause(timeout: float | None = None) -> bool:  # the loop's pause after a failure
        pauses.append(timeout)
        if len(pauses) == 4:
            runtime._stopping.set()
        return True

    monkeypatch.setattr(runtime, "run_pass", failing)
    monkeypatch.setattr(runtime._stopping, "wait", pause)
    runtime._loop()  # in this thread, until the fourth pause stops it
    assert pauses == [0.1, 0.2, 0.4, 0.8]
    assert caplog.text.count("scheduler pass failed") == 4

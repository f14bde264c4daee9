"""Crash safety between databases: kill -9 the instance runtime while it delivers.

10,000 messages of 1 KiB on 100 dialogs go from database A to database B of one
instance. The runtime is a separate process (``crash_workers.py runtime``), killed with
SIGKILL at random moments and started again, ``ROUNDS`` times; a producer process sends
at the same time and is killed too, now and then. Each round the test allows the
producer another 1/ROUNDS of the messages, so sends and deliveries overlap in every
round. Every ``STARTUP_EVERY``-th kill falls during the runtime's start-up; the others
fall, in even rounds, at a random moment after it said it runs (its transmitter's
passes) and, in odd rounds, a random few milliseconds after the test saw a delivery
commit in B, where A may not have settled the acknowledgement yet.

After each kill the test looks at both databases with the runtime dead: a message still
held in A's transmission queue that B has already received (its sequence number is
behind B's endpoint) shows that the kill fell between B's commit and A's settling of the
acknowledgement, the window that makes the resend a duplicate. At the end a runtime runs
until both transmission queues are empty and B's queue holds every message. Then every
message must be there exactly once, ready, in order per dialog (queuing order and
sequence numbers, checked against the bodies); RECEIVE must return them in order; no
endpoint may still count a message as held; every SQLite file must pass ``PRAGMA
integrity_check``. Nor may anything fail because the runtime and the producer ran at the
same time: the producer sends a transaction chosen as a deadlock victim again (so that
the checks above still run), and the test fails on any such victim, and on any
transmitter pass that failed, at the very end.

    pytest -m slow tests/test_crash_between_databases.py [-s for the round summary]

``CRASH_SEED`` fixes the random kill points and producer kills (timing still varies).
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from crash_workers import (
    DEADLOCK_VICTIM,
    INITIATOR,
    INITIATOR_QUEUE,
    TARGET,
    TARGET_QUEUE,
    UNCONVERTED,
    parse_body,
)
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from support import wait_until

import broker

WORKERS = str(Path(__file__).with_name("crash_workers.py"))
CONVERSATIONS = 100
PER_CONVERSATION = 100
MESSAGES = CONVERSATIONS * PER_CONVERSATION
ROUNDS = 60                   # runtime kills; every STARTUP_EVERY-th one during start-up
STARTUP_EVERY = 6
KILL_AFTER_START_S = (0.0, 0.4)
KILL_AFTER_COMMIT_S = (0.0, 0.01)  # after the test saw a delivery commit in B
STARTUP_KILL_S = (0.0, 0.4)   # from spawn; the runtime takes about 0.4 s to start on SQLite
PRODUCER_KILL_CHANCE = 0.3
START_DEADLINE_S = 60.0
DRAIN_DEADLINE_S = 300.0
FAILED_PASS = "transmitter pass failed"  # what broker.runtime.instance logs when a pass raises


@dataclass
class Observed:
    """What the rounds saw: kills by kind and the windows they fell into."""

    runtime_kills: int = 0
    startup_kills: int = 0
    after_commit_kills: int = 0
    producer_kills: int = 0
    unsettled_kills: int = 0          # kills after B committed messages A had not yet settled
    unsettled_messages: int = 0
    most_held_out_of_order: int = 0   # B's status-2 rows seen after a kill


class Worker:
    """One worker process of ``crash_workers.py``, its stderr appended to a log file."""

    def __init__(self, log: Path, *args: str) -> None:
        self.log = log
        with log.open("a") as err:
            self.process = subprocess.Popen([sys.executable, WORKERS, *args], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1)

    def line(self, deadline_s: float) -> str:
        """The next line on stdout, failing after ``deadline_s`` or at end of output."""
        stdout = self.process.stdout
        assert stdout is not None
        ready, _, _ = select.select([stdout], [], [], deadline_s)
        if not ready:
            raise AssertionError(f"no output within {deadline_s}s; stderr in {self.log}:\n{self.tail()}")
        text = stdout.readline()
        if not text:
            raise AssertionError(f"the worker ended (status {self.process.wait()}); stderr:\n{self.tail()}")
        return text.strip()

    def allow(self, total: int) -> None:
        """Let the producer send up to ``total`` messages."""
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(f"{total}\n")
        stdin.flush()

    def kill(self) -> None:
        """SIGKILL (if it still runs), reap it and close its pipes."""
        self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()

    def tail(self) -> str:
        return self.log.read_text()[-3000:]


def held_after_delivery(a: broker.Broker, b: broker.Broker) -> int:
    """Messages still in A's transmission queue that B has received already."""
    conversation_of = {row["conversation_handle"]: row["conversation_id"]
                       for row in a.catalog("sys.conversation_endpoints")}
    expected_next = {row["conversation_id"]: row["receive_sequence"] for row in b.catalog("sys.conversation_endpoints")}
    return sum(1 for row in a.catalog("sys.transmission_queue")
               if row["message_sequence_number"] < expected_next.get(conversation_of[row["conversation_handle"]], 0))


def received_in_b(observer: Engine) -> int:
    """Messages B's endpoints have taken in order so far (it grows with each delivery commit)."""
    with observer.connect() as conn:
        return int(conn.execute(text("SELECT coalesce(sum(receive_sequence), 0) FROM sb_conversation_endpoints"))
                   .scalar_one())


def received_beyond(observer: Engine, count: int) -> bool:
    return received_in_b(observer) > count


def held_counts(url: str) -> set[int]:
    """The distinct ``held_messages`` counters of a database's endpoints (not in the views)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return set(conn.execute(text("SELECT held_messages FROM sb_conversation_endpoints")).scalars())
    finally:
        engine.dispose()


def sqlite_files(urls: tuple[str, ...]) -> list[str]:
    return [str(make_url(url).database) for url in urls if url.startswith("sqlite")]


@pytest.fixture
def instance(instance_urls: tuple[str, str, str]) -> Iterator[tuple[broker.Instance, broker.Broker, broker.Broker]]:
    """The instance, A with the initiator service and B with the target service."""
    catalog_url, a_url, b_url = instance_urls
    inst = broker.instance(catalog_url)
    a = inst.add_database("A", a_url)
    b = inst.add_database("B", b_url)
    b.create_queue(TARGET_QUEUE)
    b.create_service(TARGET, TARGET_QUEUE, ["DEFAULT"])
    a.create_queue(INITIATOR_QUEUE)
    a.create_service(INITIATOR, INITIATOR_QUEUE)
    yield inst, a, b
    inst.dispose()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_kill_9_the_runtime_while_it_delivers_loses_and_repeats_nothing(
        instance: tuple[broker.Instance, broker.Broker, broker.Broker], instance_urls: tuple[str, str, str],
        tmp_path: Path) -> None:
    inst, a, b = instance
    catalog_url, a_url, b_url = instance_urls
    seed = int(os.environ.get("CRASH_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    with a.transaction() as tx:
        handles = [tx.begin_dialog(INITIATOR, TARGET) for _ in range(CONVERSATIONS)]
    handles_file = tmp_path / "handles.json"
    handles_file.write_text(json.dumps([str(h) for h in handles]))
    runtime_log, producer_log = tmp_path / "runtime.log", tmp_path / "producer.log"
    observed = Observed()
    started = time.monotonic()

    def start_producer(allowed: int) -> Worker:
        worker = Worker(producer_log, "producer", a_url, str(handles_file), str(MESSAGES))
        worker.allow(allowed)
        return worker

    producer = start_producer(0)
    runtime: Worker | None = None
    observer = create_engine(b_url)  # a plain engine: its reads take no lock on SQLite
    try:
        for number in range(ROUNDS):
            before = received_in_b(observer)
            runtime = Worker(runtime_log, "runtime", catalog_url)
            allowed = MESSAGES * (number + 1) // ROUNDS
            producer.allow(allowed)
            if number % STARTUP_EVERY == STARTUP_EVERY - 1:
                time.sleep(rng.uniform(*STARTUP_KILL_S))
                observed.startup_kills += 1
            else:
                assert runtime.line(START_DEADLINE_S) == "started"
                if number % 2:
                    wait_until(partial(received_beyond, observer, before), timeout=DRAIN_DEADLINE_S, interval=0.001)
                    time.sleep(rng.uniform(*KILL_AFTER_COMMIT_S))
                    observed.after_commit_kills += 1
                else:
                    time.sleep(rng.uniform(*KILL_AFTER_START_S))
            runtime.kill()
            observed.runtime_kills += 1
            if producer.process.poll() is None and rng.random() < PRODUCER_KILL_CHANCE:
                producer.kill()
                observed.producer_kills += 1
                assert producer.process.returncode == -signal.SIGKILL, producer.tail()
                producer = start_producer(allowed)
            unsettled = held_after_delivery(a, b)
            held = b.queue_counts(TARGET_QUEUE).get(2, 0)
            observed.unsettled_kills += unsettled > 0
            observed.unsettled_messages += unsettled
            observed.most_held_out_of_order = max(observed.most_held_out_of_order, held)

        runtime = Worker(runtime_log, "runtime", catalog_url)
        assert runtime.line(START_DEADLINE_S) == "started"
        assert producer.line(DRAIN_DEADLINE_S) == "done", producer.tail()
        assert producer.process.wait(DRAIN_DEADLINE_S) == 0, producer.tail()
        wait_until(lambda: not a.catalog("sys.transmission_queue") and not b.catalog("sys.transmission_queue")
                   and sum(b.queue_counts(TARGET_QUEUE).values()) >= MESSAGES, timeout=DRAIN_DEADLINE_S,
                   interval=0.1)
        runtime.process.send_signal(signal.SIGTERM)
        assert runtime.line(START_DEADLINE_S) == "stopped"
        assert runtime.process.wait(START_DEADLINE_S) == 0, runtime.tail()
    finally:
        observer.dispose()
        for worker in (producer, runtime):
            if worker is not None:
                worker.kill()
    elapsed = time.monotonic() - started
    deadlocked_sends = producer_log.read_text().count(DEADLOCK_VICTIM)
    unconverted = producer_log.read_text().count(UNCONVERTED)
    failed_passes = runtime_log.read_text().count(FAILED_PASS)
    print(f"\nseed {seed}: {observed.runtime_kills} runtime kills ({observed.startup_kills} in start-up, "
          f"{observed.after_commit_kills} just after a delivery commit in B), "
          f"{observed.producer_kills} producer kills, {observed.unsettled_kills} kills between B's commit "
          f"and A's settling ({observed.unsettled_messages} messages resent), at most "
          f"{observed.most_held_out_of_order} held out of order, {deadlocked_sends} SEND transactions "
          f"deadlocked ({unconverted} as the driver's error), {failed_passes} transmitter passes failed, "
          f"{elapsed:.0f} s")

    context = f"seed {seed}; logs in {tmp_path}"
    rows = b.queue_rows(TARGET_QUEUE)
    assert len(rows) == MESSAGES, f"{len(rows)} messages in B's queue, not {MESSAGES}: {context}"
    assert {m.status for m in rows} == {1}, context
    by_handle: dict[uuid.UUID, list[tuple[int, int, int]]] = defaultdict(list)
    for m in rows:  # queuing order
        conversation, sequence = parse_body(m.message_body or b"")
        by_handle[m.conversation_handle].append((conversation, sequence, m.message_sequence_number))
    assert len(by_handle) == CONVERSATIONS, context
    assert sorted(received[0][0] for received in by_handle.values()) == list(range(CONVERSATIONS)), context
    for received in by_handle.values():
        conversation = received[0][0]
        assert [c for c, _, _ in received] == [conversation] * PER_CONVERSATION, context
        assert [s for _, s, _ in received] == list(range(PER_CONVERSATION)), f"conversation {conversation}: {context}"
        assert [n for _, _, n in received] == list(range(PER_CONVERSATION)), f"conversation {conversation}: {context}"

    targets = b.catalog("sys.conversation_endpoints")
    assert len(targets) == CONVERSATIONS and {(t["state"], t["receive_sequence"]) for t in targets} == \
        {("CO", PER_CONVERSATION)}, context
    initiators = a.catalog("sys.conversation_endpoints")
    assert {(i["state"], i["send_sequence"], i["far_broker_instance"]) for i in initiators} == \
        {("CO", PER_CONVERSATION, str(b.service_broker_guid))}, context
    assert held_counts(a_url) == {0}, f"A's endpoints still count messages as held: {context}"

    taken: dict[uuid.UUID, list[int]] = defaultdict(list)
    while True:
        with b.transaction() as tx:
            got = tx.receive(TARGET_QUEUE, 1000)
        if not got:
            break
        for m in got:
            taken[m.conversation_handle].append(parse_body(m.message_body or b"")[1])
    assert sum(len(s) for s in taken.values()) == MESSAGES, context
    assert all(sequences == list(range(PER_CONVERSATION)) for sequences in taken.values()), context

    inst.dispose()
    for path in sqlite_files(instance_urls):
        with closing(sqlite3.connect(path)) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)], f"{path}: {context}"

    # Last, so that a run that meets them still checks everything above: neither the
    # application's SENDs nor the transmitter may fail because they ran at the same time.
    assert unconverted == 0, f"{unconverted} deadlocks reached the producer as the driver's error, not 1205: {context}"
    assert deadlocked_sends == 0, f"{deadlocked_sends} SEND transactions were deadlock victims: {context}"
    assert failed_passes == 0, f"{failed_passes} transmitter passes failed (see runtime.log): {context}"

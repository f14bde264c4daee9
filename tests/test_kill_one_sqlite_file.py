"""kill -9 producers and consumers that work one SQLite file: nothing lost, nothing twice.

Producers and consumers (``kill_workers.py``) work one SQLite file at the same time,
through one shared queue. The test kills one of them with SIGKILL, picked at random,
again and again, and starts it again at once, so that all of them keep working. Each
kill is of one of four kinds, picked at random too: at a random moment, a few
milliseconds after the victim's transaction took the write lock, as soon as the victim
enters its commit, or as soon as its commit has returned (which must then survive).
A victim is killed once it has started working; where the kill landed (between
transactions, in a transaction's first verb, which may still wait for the write lock,
inside it, in the commit) the test reads after it from the victim's byte in the state
file.

After the last kill the producers are killed, the consumers empty the queue and are
killed, and the test RECEIVEs what may be left itself, recording it as they do. Then
every message whose SEND committed (its ``kill_sent`` row committed with it) must have
been received exactly once (``kill_received`` rows commit with the RECEIVE), with the
body it was sent with, and in send order per dialog; nothing else may have arrived,
none of the messages that never committed (killed inside their transaction, or rolled
back on purpose) in particular. The broker must agree (the endpoints' send and receive
sequence numbers, an empty queue and transmission queue) and the file must pass
``PRAGMA integrity_check``.

    pytest -m slow tests/test_kill_one_sqlite_file.py [-s for the summary]

``KILL_SEED`` fixes the victims, the kinds of kill and the delays (timing still varies).
"""

from __future__ import annotations

import mmap
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kill_workers import (
    BETWEEN,
    COMMITTING,
    INSIDE,
    QUEUE,
    STARTING,
    STATE_NAMES,
    record,
    setup,
)
from sqlalchemy.engine import make_url
from support import sqlite_only, wait_until

import broker

pytestmark = sqlite_only  # what is killed works one SQLite file

WORKERS = str(Path(__file__).with_name("kill_workers.py"))
DIALOGS_EACH = 4
KINDS = {"random moment": 2, "inside a transaction": 1, "at commit": 1, "after commit": 1}  # kind: weight
RANDOM_MOMENT_S = (0.0, 0.5)
INSIDE_S = (0.0, 0.005)          # after the victim's transaction took the write lock
POLL_S = 0.0002                  # the test watching a victim's state byte
START_DEADLINE_S = 60.0
TARGET_DEADLINE_S = 10.0         # for the victim to reach the state a kill aims at
DRAIN_DEADLINE_S = 120.0


class Fleet:
    """The worker processes, one per slot, each slot's stderr appended to its log."""

    def __init__(self, folder: Path, url: str, producers: int, consumers: int) -> None:
        self.folder = folder
        state_file = folder / "states"
        state_file.write_bytes(bytes(producers + consumers))
        with state_file.open("r+b") as file:
            self.states = mmap.mmap(file.fileno(), 0)
        self.producers = range(producers)
        self.consumers = range(producers, producers + consumers)
        self.arguments = [["producer", url, str(state_file), str(slot), str(slot), str(self.attempts(slot))]
                          for slot in self.producers]
        self.arguments += [["consumer", url, str(state_file), str(slot)] for slot in self.consumers]
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * len(self.arguments)
        for slot in range(len(self.arguments)):
            self.start(slot)

    def attempts(self, slot: int) -> Path:
        return self.folder / f"attempts{slot}"

    def role(self, slot: int) -> str:
        return self.arguments[slot][0]

    def start(self, slot: int) -> None:
        self.states[slot] = STARTING
        with (self.folder / f"worker{slot}.log").open("a") as err:
            self.processes[slot] = subprocess.Popen([sys.executable, WORKERS, *self.arguments[slot]],
                                                    stdout=subprocess.DEVNULL, stderr=err)

    def check(self) -> None:
        """Fail if a worker has ended by itself (its log says why)."""
        for slot, process in enumerate(self.processes):
            if process is not None and process.poll() is not None:
                raise AssertionError(f"{self.role(slot)} {slot} ended with status {process.returncode}:\n"
                                     f"{self.log_tail(slot)}")

    def wait_for(self, slot: int, state: int, deadline_s: float) -> bool:
        """Watch ``slot``'s state byte until it shows ``state``; False after ``deadline_s``."""
        deadline = time.monotonic() + deadline_s
        while self.states[slot] != state:
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)
        return True

    def wait_started(self, slot: int) -> None:
        """Wait until the worker of ``slot`` has started its loop."""
        deadline = time.monotonic() + START_DEADLINE_S
        while self.states[slot] == STARTING:
            self.check()
            assert time.monotonic() < deadline, f"{self.role(slot)} {slot} did not start:\n{self.log_tail(slot)}"
            time.sleep(0.01)

    def kill(self, slot: int) -> int:
        """SIGKILL the worker of ``slot``; where it was then."""
        process = self.processes[slot]
        assert process is not None, f"slot {slot} was stopped"
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        self.processes[slot] = None
        assert process.returncode == -signal.SIGKILL, \
            f"{self.role(slot)} {slot} ended with status {process.returncode}:\n{self.log_tail(slot)}"
        return self.states[slot]

    def kill_all(self, slots: range) -> None:
        for slot in slots:
            self.kill(slot)

    def stop(self) -> None:
        """Kill whatever still runs (when the test ends early)."""
        for slot, process in enumerate(self.processes):
            if process is not None:
                process.kill()
                process.wait()
                self.processes[slot] = None
        self.states.close()

    def log_tail(self, slot: int) -> str:
        return (self.folder / f"worker{slot}.log").read_text()[-3000:]


def aim(fleet: Fleet, slot: int, kind: str, rng: random.Random) -> bool:
    """Wait for the moment a kill of ``kind`` aims at; False if it did not come in time."""
    if kind == "random moment":
        time.sleep(rng.uniform(*RANDOM_MOMENT_S))
        return True
    if kind == "inside a transaction":
        hit = fleet.wait_for(slot, INSIDE, TARGET_DEADLINE_S)
        time.sleep(rng.uniform(*INSIDE_S))
        return hit
    hit = fleet.wait_for(slot, COMMITTING, TARGET_DEADLINE_S)
    if kind == "at commit":
        return hit
    return hit and fleet.wait_for(slot, BETWEEN, TARGET_DEADLINE_S)


def emptied(fleet: Fleet, db: broker.Broker) -> bool:
    """The queue is empty (and every consumer still runs)."""
    fleet.check()
    return not db.queue_counts(QUEUE)


@dataclass
class Tally:
    """Where the kills landed and what the soak waited for."""

    landed: Counter[tuple[str, str]] = field(default_factory=Counter)  # (where, role): kills
    missed_aim: int = 0               # aimed kills whose moment did not come in time
    waited: Counter[str] = field(default_factory=Counter)  # seconds: for victims to start, for aims
    longest_aim: float = 0.0
    killing: float = 0.0              # seconds from the first start to the last kill
    emptying: float = 0.0             # then for the consumers to empty the queue

    def summary(self) -> str:
        where = Counter(state for state, _ in self.landed.elements())
        return (f"{where.total()} kills in {self.killing:.0f} s: {where['inside'] + where['committing']} inside "
                f"transactions ({where['committing']} of them in the commit), {where['first verb']} in a "
                f"transaction's first verb (waiting for the write lock or in WAITFOR), {where['between']} "
                f"between transactions; by role: {dict(self.landed)}; "
                f"{self.missed_aim} aimed kills fell elsewhere, aims took {self.waited['aim']:.0f} s (the "
                f"longest {self.longest_aim:.1f} s), restarted victims {self.waited['start']:.0f} s to start; "
                f"the consumers emptied the queue in {self.emptying:.0f} s")


def kill_and_restart(fleet: Fleet, db: broker.Broker, rng: random.Random, kills: int) -> Tally:
    """Kill a worker ``kills`` times, starting it again each time; then kill the
    producers, let the consumers empty the queue and kill them."""
    tally = Tally()
    started = time.monotonic()
    for _ in range(kills):
        slot = rng.randrange(len(fleet.processes))
        [kind] = rng.choices(list(KINDS), weights=list(KINDS.values()))
        starting = time.monotonic()
        fleet.wait_started(slot)
        aiming = time.monotonic()
        hit = aim(fleet, slot, kind, rng)
        tally.waited["start"] += aiming - starting
        if kind != "random moment":
            tally.missed_aim += not hit
            tally.waited["aim"] += time.monotonic() - aiming
            tally.longest_aim = max(tally.longest_aim, time.monotonic() - aiming)
        fleet.check()
        tally.landed[STATE_NAMES[fleet.kill(slot)], fleet.role(slot)] += 1
        fleet.start(slot)
    fleet.kill_all(fleet.producers)
    tally.killing = time.monotonic() - started
    wait_until(lambda: emptied(fleet, db), timeout=DRAIN_DEADLINE_S, interval=0.2)
    tally.emptying = time.monotonic() - started - tally.killing
    fleet.kill_all(fleet.consumers)
    return tally


def check_delivery(db: broker.Broker, fleet: Fleet, context: str) -> None:
    """Every committed message received once, in order, nothing else; the broker agrees."""
    with db.transaction() as tx:
        sent = {(r["dialog"], r["counter"]): r["body"] for r in tx.query("SELECT dialog, counter, body FROM kill_sent")}
        received = tx.query("SELECT dialog, counter, body, sequence FROM kill_received ORDER BY id")
        dialogs = {r["handle"]: r["dialog"] for r in tx.query("SELECT dialog, handle FROM kill_dialogs")}
    attempted = {line for slot in fleet.producers for line in fleet.attempts(slot).read_text().splitlines()}
    uncommitted = attempted - set(sent.values())
    print(f"{len(sent)} messages committed, {len(uncommitted)} sent but never committed")

    bodies = [r["body"] for r in received]
    assert len(set(bodies)) == len(bodies), f"a message was received twice: {context}"
    arrived_uncommitted = uncommitted & set(bodies)
    assert not arrived_uncommitted, \
        f"{len(arrived_uncommitted)} messages that never committed arrived, e.g. {min(arrived_uncommitted)}: {context}"
    got = {(r["dialog"], r["counter"]): r["body"] for r in received}
    missing = sent.keys() - got.keys()
    assert not missing, f"{len(missing)} committed messages never arrived, e.g. {min(missing)}: {context}"
    assert got == sent, f"messages arrived that were not sent so: {context}"
    assert uncommitted, f"no SEND ever failed to commit: the test proved nothing about them: {context}"

    in_order: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for r in received:
        in_order[r["dialog"]].append((r["counter"], r["sequence"]))
    assert set(in_order) == set(dialogs.values()), f"a dialog never carried a message: {context}"
    for dialog, taken in in_order.items():
        expected = [(n, n) for n in range(len(taken))]
        assert taken == expected, f"dialog {dialog} received out of order (counter, sequence): {context}"

    count = Counter(dialog for dialog, _ in sent)
    endpoints = db.catalog("sys.conversation_endpoints")
    initiators = {e["conversation_id"]: dialogs[str(e["conversation_handle"])] for e in endpoints if e["is_initiator"]}
    assert {initiators[e["conversation_id"]]: e["send_sequence"] for e in endpoints if e["is_initiator"]} == count, \
        context
    assert {initiators[e["conversation_id"]]: e["receive_sequence"] for e in endpoints if not e["is_initiator"]} \
        == count, context
    assert db.queue_counts(QUEUE) == {}, context
    assert db.catalog("sys.transmission_queue") == [], context


def receive_and_record(db: broker.Broker) -> int:
    """RECEIVE TOP(100) and record the messages as a consumer does; how many there were."""
    with db.transaction() as tx:
        got = tx.receive(QUEUE, 100)
        record(tx, got, "test")
    return len(got)


def soak(url: str, folder: Path, *, kills: int, producers: int, consumers: int) -> None:
    """The whole test: set up, kill ``kills`` times, empty the queue, check."""
    seed = int(os.environ.get("KILL_SEED", random.randrange(2**32)))
    context = f"seed {seed} (KILL_SEED); logs in {folder}"
    print(f"\n{context}")
    db = broker.connect(url)
    try:
        setup(db, producers, DIALOGS_EACH)
        fleet = Fleet(folder, url, producers, consumers)
        try:
            tally = kill_and_restart(fleet, db, random.Random(seed), kills)
        finally:
            fleet.stop()
        print(tally.summary())
        drained = 0
        while got := receive_and_record(db):
            drained += got
        print(f"{drained} messages left for the test to receive")
        check_delivery(db, fleet, context)
    finally:
        db.dispose()
    with closing(sqlite3.connect(str(make_url(url).database))) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)], context


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_kill_9_two_hundred_times_among_eight_processes_loses_and_repeats_nothing(db_url: str,
                                                                                  tmp_path: Path) -> None:
    """4 producers and 4 consumers on one SQLite file, 200 kills: every committed message
    arrives once and in order, no uncommitted one arrives, the file is intact."""
    soak(db_url, tmp_path, kills=200, producers=4, consumers=4)


def test_kill_9_twenty_times_among_four_processes_loses_and_repeats_nothing(db_url: str, tmp_path: Path) -> None:
    """The same with 2 producers, 2 consumers and 20 kills (the default suite's version)."""
    soak(db_url, tmp_path, kills=20, producers=2, consumers=2)

"""The network-fault soak of issue 14: 10,000 messages on 100 conversations arrive exactly
once and in order through a proxy that cuts, stalls, duplicates, reorders and corrupts;
nothing is left in any transmission queue at the end.

The initiator instance reaches the target's endpoint through ``FaultProxy``. The messages
go in waves of ten per conversation; each wave meets one fault, driven as a phase:

1. the fault is switched on, the wave is sent (for a per-chunk fault: in ``PARTS``
   transactions spread over ``PHASE_S``, each for its own share of the dialogs, so that
   the fault meets several deliveries), and the fault stays on for ``PHASE_S`` and until
   the proxy has injected it;
2. the fault is switched off, and the phase ends when the initiator's transmission queue
   is empty again.

A message that meets a fault waits for the sender's back-off (8, 16, 32, 64 s after one,
two, three, four failures). Draining between phases keeps each message to a failure or
two, so the run takes a few minutes instead of piling every message up at 64 s. Every
fault kind of the proxy is played, plus a stall (pause/resume), explicit cuts, a stream
cut short (drop after N bytes), receipts corrupted on the way back (the target has
committed: the retries are duplicates it must drop), and every fault at once.

``pytest -m slow tests/test_network_faults_soak.py``; both layouts (the target's database
on SQLite, and on PostgreSQL).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from faultproxy import FaultProxy
from pair_layouts import layouts, pair_of_instances
from support import BETWEEN_REQUEST, BETWEEN_TARGET_QUEUE, wait_until
from two_instances import Pair, assert_exactly_once_in_order, trust_each_other

DIALOGS = 100
PER_DIALOG = 100
WAVES = 10
PHASE_S = 3.0  # how long a fault stays on, at least
PARTS = 5  # transactions a wave is sent in while a per-chunk fault is on
FAULT_DEADLINE_S = 60.0  # a fault that traffic has not met by then fails the run
DRAIN_DEADLINE_S = 240.0  # a phase's messages are all acknowledged by then (back-offs of 8 + 16 + 32 s and more)


@pytest.fixture(params=layouts())
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Pair]:
    with pair_of_instances(request, tmp_path) as pair:
        trust_each_other(pair)
        yield pair


@dataclass
class Soak:
    pair: Pair
    proxy: FaultProxy
    handles: list[uuid.UUID] = field(default_factory=list)
    sent: int = 0  # messages per dialog sent so far

    def wave(self, parts: int = 1) -> None:
        """Ten more messages on every dialog (the first wave begins the dialogs). The
        dialogs are split in ``parts``, whose messages go in transactions ``PHASE_S / parts``
        apart: a dialog backing off holds back its own later messages, not the others', so a
        fault meets several deliveries."""
        per_wave = PER_DIALOG // WAVES
        first = self.sent
        if not self.handles:
            self.handles = [self.pair.begin(f"<m>{d}-0</m>") for d in range(DIALOGS)]
            first = 1
        for part in range(parts):
            if part:
                hold_until(lambda: True, PHASE_S / parts, FAULT_DEADLINE_S)
            dialogs = range(part * DIALOGS // parts, (part + 1) * DIALOGS // parts)
            with self.pair.initiator.db.transaction() as tx:
                for n in range(first, self.sent + per_wave):
                    for d in dialogs:
                        tx.send(self.handles[d], BETWEEN_REQUEST, f"<m>{d}-{n}</m>")
        self.sent += per_wave

    def arrived(self) -> int:
        return len(self.pair.target.db.queue_rows(BETWEEN_TARGET_QUEUE))

    def injected(self, kind: str) -> int:
        return next((count for name, count in self.proxy.stats.faults.items() if name == kind), 0)

    def drained(self) -> None:
        wait_until(lambda: not self.pair.initiator.held(), DRAIN_DEADLINE_S, interval=0.2)


def hold_until(condition: Callable[[], bool], at_least: float, deadline: float) -> None:
    """Wait until ``at_least`` seconds have passed and ``condition`` holds (within ``deadline``)."""
    started = time.monotonic()
    wait_until(lambda: time.monotonic() - started >= at_least and condition(), deadline, interval=0.05)


def per_chunk(*, every: bool = True, **faults: object) -> Callable[[Soak], None]:
    """A phase: these per-chunk faults while a wave goes, until each kind (``every``; else
    one of them) was injected, or the wave got through untouched (a later phase gives the
    kind another chance)."""
    wanted = all if every else any
    kinds = ["drop" if name == "drop_connection_after_bytes" else name for name in faults if name != "direction"]

    def phase(soak: Soak) -> None:
        before = {kind: soak.injected(kind) for kind in kinds}
        soak.proxy.set_faults(**faults)  # type: ignore[arg-type]
        soak.wave(parts=PARTS)
        hold_until(lambda: wanted(soak.injected(kind) > before[kind] for kind in kinds)
                   or not soak.pair.initiator.held(), PHASE_S, FAULT_DEADLINE_S)
        soak.proxy.set_faults()

    return phase


def stall(soak: Soak) -> None:
    """Nothing flows for a while (shorter than the sender's silence limit), then all of it."""
    arrived = soak.arrived()
    soak.proxy.pause()
    soak.wave()
    hold_until(lambda: True, PHASE_S, FAULT_DEADLINE_S)
    assert soak.arrived() == arrived  # the wave is held in the stall
    soak.proxy.resume()


def receipts_lost(soak: Soak) -> None:
    """Every chunk back to the initiator is corrupted: the target commits the wave on the
    connection the last phase left open, its receipts never arrive, and the initiator's
    retries after the phase are duplicates that the target acknowledges again."""
    assert soak.proxy.stats.open  # the wave goes on a connection that has shaken hands
    soak.proxy.set_faults(corrupt=1.0, direction="to_client")
    soak.wave()
    wait_until(lambda: soak.arrived() == soak.sent * DIALOGS and soak.pair.initiator.held(), FAULT_DEADLINE_S,
               interval=0.2)
    soak.proxy.set_faults()


def cuts(soak: Soak) -> None:
    """Reset the connection twice while the wave is on it."""
    soak.wave()
    for _ in range(2):
        flowed = soak.proxy.stats.bytes_to_target

        def flowing(since: int = flowed) -> bool:
            stats = soak.proxy.stats
            return stats.open > 0 and stats.bytes_to_target > since

        wait_until(flowing, FAULT_DEADLINE_S, interval=0.01)
        soak.proxy.cut()


PHASES: list[tuple[str, Callable[[Soak], None]]] = [
    ("stall", stall),  # first: the dialogs begin in it, and none backs off (a failed first message holds them all)
    ("corrupt", per_chunk(corrupt=0.5)),
    ("duplicate", per_chunk(duplicate=0.5)),
    ("reorder", per_chunk(reorder=0.5)),
    ("cut per chunk", per_chunk(cut=0.5)),
    ("cut()", cuts),
    ("drop after 20 kB", per_chunk(drop_connection_after_bytes=20_000)),
    ("receipts lost", receipts_lost),
    ("everything at once", per_chunk(every=False, corrupt=0.25, duplicate=0.25, reorder=0.25, cut=0.25)),
    ("clean", lambda soak: soak.wave()),
]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_ten_thousand_messages_through_network_faults_arrive_once_and_in_order(pair: Pair) -> None:
    assert len(PHASES) == WAVES
    started = time.monotonic()
    with FaultProxy(("127.0.0.1", pair.target.port), seed=14) as proxy:
        host, port = proxy.address
        pair.initiator.db.alter_route("InstTargetRoute", address=f"TCP://{host}:{port}")
        with pair.initiator.inst.runtime(), pair.target.inst.runtime():
            soak = Soak(pair, proxy)
            for name, phase in PHASES:
                phase_started = time.monotonic()
                phase(soak)
                soak.drained()
                print(f"soak phase {name}: {time.monotonic() - phase_started:.1f} s, "  # -s shows the timings
                      f"faults so far {proxy.stats.faults}", flush=True)
        faults = proxy.stats.faults
    print(f"soak: {time.monotonic() - started:.1f} s in all; faults injected: {faults}")
    assert soak.sent == PER_DIALOG
    assert {"corrupt", "duplicate", "reorder", "cut", "drop"} <= set(faults), faults
    assert_exactly_once_in_order(pair, dialogs=DIALOGS, per_dialog=PER_DIALOG)  # each ready, none behind a gap

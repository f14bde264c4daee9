"""The runtime of an instance: every database's own runtime plus one transmitter.

``inst.runtime()`` and ``broker --instance URL run``. Each database served keeps its own
scheduler and activation (``runner.Runtime``); one transmitter thread moves messages
between them, woken by a commit to any of them: at once for this process's commits,
within milliseconds for another process's (SQLite's ``PRAGMA data_version``, PostgreSQL's
LISTEN/NOTIFY), and at the next retry otherwise.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from types import TracebackType

from broker.runtime.runner import DEFAULT_POLL_S, Runtime, failure_pause
from broker.runtime.transmitter import Transmitter
from broker.storage.served import ServedDatabase
from broker.storage.waiting import ANY_QUEUE

log = logging.getLogger("broker.runtime")
WATCH_SLICE_S = 0.25  # a watcher re-arms this often, so that it notices the runtime stopping
# Passes start at least this far apart: a burst of commits is taken in batches, and a
# lone commit waits no longer than this for its pass.
TRANSMIT_GAP_S = 0.002


class InstanceRuntime:
    """The runtimes of ``databases()`` and the transmitter between them; a context manager."""

    def __init__(self, databases: Callable[[], Sequence[ServedDatabase]], *,
                 poll_interval: float = DEFAULT_POLL_S, activation: bool = True) -> None:
        self._databases = databases
        self.poll_interval = poll_interval
        self._activation = activation
        self.transmitter = Transmitter(databases)
        self.runtimes: list[Runtime] = []
        self._stopping = threading.Event()
        self._commit = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> InstanceRuntime:
        """Start every database's runtime, the transmitter and the commit watchers."""
        if self._threads:
            raise RuntimeError("this runtime is already running")
        self._stopping.clear()
        served = list(self._databases())
        self.runtimes = [Runtime(db, poll_interval=self.poll_interval, activation=self._activation).start()
                         for db in served]
        self._threads = [threading.Thread(target=self._watch, args=(db,), name="broker-watch", daemon=True)
                         for db in served]
        self._threads.append(threading.Thread(target=self._transmit, name="broker-transmitter", daemon=True))
        for thread in self._threads:
            thread.start()
        log.info("instance runtime started on %d database(s)", len(served))
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the transmitter (after its current pass) and every database's runtime."""
        self._stopping.set()
        self._commit.set()
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []
        for runtime in self.runtimes:
            runtime.stop(timeout)
        self.runtimes = []
        log.info("instance runtime stopped")

    @property
    def running(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    def __enter__(self) -> InstanceRuntime:
        return self if self.running else self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    def run_pass(self) -> float:
        """One transmitter pass over every database; seconds until the next is due."""
        moved, due = self.transmitter.run_pass()
        if moved:
            log.info("moved %d message(s) out of transmission queues", moved)
        wait = self.poll_interval
        if due is not None:
            wait = min(wait, max(0.0, (due - datetime.now(UTC)).total_seconds()))
        return wait

    def _transmit(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            started = time.monotonic()
            self._commit.clear()  # a commit from here on starts another pass
            try:
                wait = self.run_pass()
                failures = 0
            except Exception:
                failures += 1
                log.exception("transmitter pass failed; retrying in %.1f s", failure_pause(failures))
                self._stopping.wait(failure_pause(failures))  # not in a loop as fast as commits
                continue
            self._commit.wait(wait)
            self._stopping.wait(max(0.0, started + TRANSMIT_GAP_S - time.monotonic()))

    def _watch(self, db: ServedDatabase) -> None:
        """Set the commit event whenever ``db`` commits."""
        state = db.state
        with state.backend.watching(db.engine, state.notifier) as wait_for_commit:
            while not self._stopping.is_set():
                seen = state.notifier.counter(ANY_QUEUE)
                deadline = time.monotonic() + WATCH_SLICE_S
                wait_for_commit(seen, deadline)
                if state.notifier.counter(ANY_QUEUE) != seen or time.monotonic() < deadline:
                    self._commit.set()

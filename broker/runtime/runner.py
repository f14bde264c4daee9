"""The broker's background work for one database: ``broker run`` and ``db.start_runtime()``.

One scheduler thread fires conversation timers and dialog lifetimes on time, retries the
transmission queue with back-off, and gives the activation manager its turn. It sleeps
until the next deadline and wakes early on any commit to the database: at once for this
process's commits, within milliseconds for other processes' (``broker.storage.backends``).

Several runtimes may serve one database at once (two ``broker run`` processes, or an
application plus ``broker run``): each pass is one transaction that clears what it fires,
so nothing fires twice.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from types import TracebackType

from broker import events
from broker.conversations import scheduler
from broker.runtime.activation import ActivationManager
from broker.runtime.transmitter import Transmitter
from broker.storage.served import ServedDatabase, look_then_write

log = logging.getLogger("broker.runtime")

# Longest sleep between passes when nothing is due.
DEFAULT_POLL_S = 1.0
# Shortest gap between passes: commits wake the scheduler (a new timer may be due soon),
# and a busy queue commits thousands of times a second.
MIN_GAP_S = 0.02
# A pass that fails (the database is down, its schema is not the code's) is tried again
# after a pause that doubles from the first to the longest.
FIRST_FAILURE_PAUSE_S = 0.1
LONGEST_FAILURE_PAUSE_S = 30.0


def failure_pause(failures: int) -> float:
    """Seconds to wait after ``failures`` consecutive failed passes."""
    return float(min(FIRST_FAILURE_PAUSE_S * 2 ** min(failures - 1, 16), LONGEST_FAILURE_PAUSE_S))


class Runtime:
    """The scheduler thread (and activation) of one ``ServedDatabase``; a context manager."""

    def __init__(self, db: ServedDatabase, *, poll_interval: float = DEFAULT_POLL_S, activation: bool = True,
                 transmitter: Transmitter | None = None) -> None:
        self.db = db
        self.poll_interval = poll_interval
        self.transmitter = transmitter
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.activation = ActivationManager(db, self._stopping) if activation else None
        self.passes = 0

    def start(self) -> Runtime:
        """Start the scheduler thread (returns self)."""
        if self._thread is not None:
            raise RuntimeError("this runtime is already running")
        self._stopping.clear()
        self._thread = threading.Thread(target=self._loop, name="broker-runtime", daemon=True)
        self._thread.start()
        log.info("runtime started on %s", self.db)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop: no new passes or readers; wait for running readers and the current pass.

        An activated reader's own transaction finishes or rolls back; nothing is lost.
        """
        self._stopping.set()
        self.db.state.notifier.notify(set())  # wake the scheduler thread
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        if self.activation is not None:
            self.activation.stop(timeout)
        log.info("runtime stopped")

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> Runtime:
        return self if self.running else self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    def run_pass(self) -> float:
        """One pass: due work in one transaction, the transmission queue, then activation.
        Seconds until the next."""
        done, deadline = look_then_write(self.db, scheduler.run_if_due)
        if self.transmitter is not None:
            moved, due = self.transmitter.run_pass()
            done.retried += moved
            deadline = due if deadline is None or (due is not None and due < deadline) else deadline
        self.passes += 1
        self._announce(done)
        wait = self.poll_interval
        if deadline is not None:
            wait = min(wait, max(0.0, (deadline - datetime.now(UTC)).total_seconds()))
        if self.activation is not None:
            again = self.activation.evaluate()
            if again is not None:
                wait = min(wait, again)
        return wait

    def _loop(self) -> None:
        state = self.db.state
        with state.backend.watching(self.db.engine, state.notifier) as commits:
            failures = 0
            while not self._stopping.is_set():
                started = time.monotonic()
                # Marked before the pass: a commit made while it looks (on a snapshot, which
                # writers do not wait for) then ends the wait after it at once.
                mark = commits.mark()
                try:
                    wait = self.run_pass()
                    failures = 0
                except Exception:
                    failures += 1
                    log.exception("scheduler pass failed; retrying in %.1f s", failure_pause(failures))
                    self._stopping.wait(failure_pause(failures))  # not in a loop as fast as commits
                    continue
                if self._stopping.is_set():
                    break
                commits.wait(mark, time.monotonic() + wait)
                self._stopping.wait(max(0.0, started + MIN_GAP_S - time.monotonic()))

    def _announce(self, done: scheduler.DueWork) -> None:
        hub = self.db.events
        for endpoint in done.timers:
            log.info("timer fired on conversation %s", endpoint.conversation_handle)
            hub.emit(events.TIMER_FIRED, conversation_handle=endpoint.conversation_handle)
        for endpoint in done.expired:
            log.info("lifetime expired on conversation %s", endpoint.conversation_handle)
            hub.emit(events.LIFETIME_EXPIRED, conversation_handle=endpoint.conversation_handle)
        if done.retried:
            log.info("delivered %d held message(s) from the transmission queue", done.retried)
            hub.emit(events.MESSAGES_RETRIED, count=done.retried)

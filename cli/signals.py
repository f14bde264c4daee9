"""Signals that end a command through its cleanup, as Ctrl-C does.

Python ends a process on SIGTERM or SIGHUP at once, without running ``finally`` or
``except`` clauses: a half-written temporary file stays, child processes keep running.
Inside :func:`ending_on` such a signal raises ``SystemExit(128 + number)`` instead (the
status a shell reports for a process the signal ended), so the command unwinds first.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def ending_on(*signals: signal.Signals) -> Iterator[None]:
    """While inside, each of ``signals`` ends the command through its cleanup. A signal
    the process was started ignoring (``nohup``'s SIGHUP) stays ignored; outside the main
    thread, where signals do not arrive, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def leave(number: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + number)

    # None: a handler set outside Python, which could not be put back
    previous = {sig: handler for sig in signals if (handler := signal.getsignal(sig)) not in (signal.SIG_IGN, None)}
    for sig in previous:
        signal.signal(sig, leave)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

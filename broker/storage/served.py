"""What the runtime and the transport need of a database they serve.

Both sit below the face: they are handed a ``broker.Broker`` (the runtime starts
activation procedures with that same handle) but know it only through this interface.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol, TypeVar

from sqlalchemy import Engine

from broker.events import EventHub
from broker.storage.context import TxContext, WriteNeeded
from broker.storage.state import DatabaseState

T = TypeVar("T")


class RunsVerbs(Protocol):
    """A broker transaction, as far as the runtime uses one."""

    def run(self, verb: Callable[[TxContext], T]) -> T: ...

    def read(self, verb: Callable[[TxContext], T]) -> T: ...


class ServedDatabase(Protocol):
    """A broker database, as far as its runtime uses one."""

    @property
    def engine(self) -> Engine: ...

    @property
    def events(self) -> EventHub: ...

    @property
    def state(self) -> DatabaseState: ...

    def transaction(self) -> AbstractContextManager[RunsVerbs]: ...

    def snapshot(self) -> AbstractContextManager[RunsVerbs]: ...


def run_in(db: ServedDatabase, verb: Callable[[TxContext], T]) -> T:
    """Run ``verb`` in a transaction of its own on ``db``; its result once committed."""
    with db.transaction() as tx:
        return tx.run(verb)


def read_in(db: ServedDatabase, verb: Callable[[TxContext], T]) -> T:
    """Run ``verb``, which only reads, on a snapshot of ``db`` (no lock, no wait)."""
    with db.snapshot() as tx:
        return tx.read(verb)


def look_then_write(db: ServedDatabase, verb: Callable[[TxContext], T]) -> T:
    """Run ``verb`` on a snapshot of ``db``, and again in a transaction of its own if it
    found something to write (``TxContext.writing``): work that mostly finds nothing to
    do then never queues for the write lock, nor holds up those who write."""
    try:
        return read_in(db, verb)
    except WriteNeeded:
        return run_in(db, verb)

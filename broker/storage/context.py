"""What every broker verb works with: one connection inside one transaction."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy import update
from sqlalchemy.engine import Connection

from broker.storage.catalog import Catalog, load_catalog
from broker.storage.models import BrokerDatabase
from broker.storage.pending import Pending

if TYPE_CHECKING:
    from broker.storage.state import DatabaseState


class WriteNeeded(Exception):
    """Work tried in a snapshot first found it has something to write."""


@dataclass(slots=True)
class TxContext:
    """A connection inside a transaction, the catalog it sees, and what it changed.

    ``kept`` is the connection's write-behind buffer (``broker.storage.pending``).
    ``touched_queues`` collects the queues that received messages so that waiting
    readers are woken once the transaction commits; ``received_queues`` the queues it
    took messages from, for poison-message detection.
    """

    conn: Connection
    state: DatabaseState
    catalog: Catalog
    kept: Pending
    touched_queues: set[int] = field(default_factory=set)
    # Queues this transaction received messages from (poison-message counting).
    received_queues: set[int] = field(default_factory=set)
    # True once this transaction changed the catalog: its snapshot is then its own.
    changed_catalog: bool = False
    # The connection's count of rows written when it began (``Backend.changes``; None:
    # unknown): a commit that leaves it unchanged wrote nothing.
    changes_at_begin: int | None = None
    # Set by the transmitter: what it writes (receipts settled, back-offs) concerns no
    # one waiting, so its commit wakes no watcher unless it put a message in a queue.
    quiet: bool = False
    # True in a snapshot (``Broker.snapshot``): it may only read.
    snapshot: bool = False

    def writing(self) -> None:
        """Say that a write comes next: in a snapshot, raise :class:`WriteNeeded` (the
        caller runs its work again in a transaction that may write)."""
        if self.snapshot:
            raise WriteNeeded

    @staticmethod
    def now() -> datetime:
        return datetime.now(UTC)

    def catalog_changed(self) -> None:
        """Record a DDL change: bump the shared version and reload this transaction's snapshot.

        The new snapshot is not shared with other transactions: this one may still roll
        back. They reload it from the committed version number.
        """
        self.conn.execute(
            update(BrokerDatabase).values(catalog_version=BrokerDatabase.catalog_version + 1)
        )
        self.state.backend.catalog_changed(self.conn)  # wakes other processes' waiters at commit
        self.catalog = load_catalog(self.conn)
        self.changed_catalog = True

    def refresh_catalog(self) -> None:
        """Take the latest committed catalog, unless this transaction changed it itself.

        Under READ COMMITTED (PostgreSQL) another transaction's DDL can commit while this
        one runs; a WAITFOR loop must look at the queue as it is now, not as it began.
        """
        # Where one transaction writes at a time (SQLite) no DDL can have committed since
        # this transaction began: the snapshot is current and the query is saved.
        if not self.changed_catalog and not self.state.backend.snapshot_stays_current:
            self.catalog = self.state.catalog_for(self.conn)

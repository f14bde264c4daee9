"""The open transaction of a T-SQL session: BEGIN / COMMIT / ROLLBACK TRANSACTION,
``@@TRANCOUNT``, ``XACT_STATE()`` and ``SET XACT_ABORT``.

A statement outside BEGIN TRANSACTION runs in a transaction of its own (autocommit; a
snapshot when it only reads). Inside one every statement joins it, DDL included
(``Broker.within`` lends it to the object verbs), and it outlives its batch. Nested
BEGINs count; the outermost COMMIT commits; ROLLBACK rolls back the whole transaction.

A transaction is *doomed* (``XACT_STATE() = -1``) when a failure inside a verb left it
unusable (``Transaction.doomed``), or when an error was caught while ``XACT_ABORT`` is
ON. A doomed transaction only reads and rolls back: a statement that writes and COMMIT
are 3930, and the end of the batch rolls it back (3998), as in SQL Server. With
``XACT_ABORT`` ON an error no TRY block catches rolls the transaction back as it ends
the batch; RAISERROR is the exception, as in SQL Server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker.sql.errors import SqlError

if TYPE_CHECKING:
    from broker.database import Broker
    from broker.transaction import Transaction

NO_BEGIN_FOR_COMMIT = 3902
NO_BEGIN_FOR_ROLLBACK = 3903
UNCOMMITTABLE = 3930
UNCOMMITTABLE_AT_BATCH_END = 3998
UNSUPPORTED = 40517


class ScriptTransaction:
    """The transaction a session has open (if any) and its nesting."""

    def __init__(self) -> None:
        self.tx: Transaction | None = None
        self.trancount = 0
        self._doomed = False  # by an error caught while XACT_ABORT was ON

    @property
    def open(self) -> bool:
        return self.tx is not None

    @property
    def doomed(self) -> bool:
        return self.tx is not None and (self._doomed or self.tx.doomed)

    def state(self) -> int:
        """XACT_STATE(): 0 without a transaction, -1 when it is doomed, else 1."""
        if self.tx is None:
            return 0
        return -1 if self.doomed else 1

    def run(self, db: Broker, work: Callable[[Transaction], Any], *, reading: bool = False) -> Any:
        """Run ``work`` in the open transaction, or in one of its own (autocommit; a
        snapshot when it only reads). A doomed transaction refuses work that writes (3930)."""
        if self.tx is not None:
            if self._doomed and not reading:
                raise _uncommittable()
            with db.within(self.tx):
                return work(self.tx)
        opened = db.snapshot() if reading else db.transaction()
        with opened as tx, db.within(tx):
            return work(tx)

    def begin(self, db: Broker) -> None:
        """BEGIN TRANSACTION: opens one, or nests in the open one (@@TRANCOUNT + 1)."""
        if self.tx is None:
            from broker.transaction import Transaction
            self.tx = Transaction(db.state)
        self.trancount += 1

    def commit(self) -> None:
        """COMMIT: the outermost one commits. A doomed transaction is 3930 and stays open
        (doomed) until ROLLBACK or the end of the batch."""
        if self.tx is None:
            raise SqlError(NO_BEGIN_FOR_COMMIT, "The COMMIT TRANSACTION request has no corresponding "
                                                "BEGIN TRANSACTION.")
        if self.doomed:
            raise _uncommittable()
        self.trancount -= 1
        if self.trancount == 0:
            tx, self.tx = self.tx, None
            _end(tx, commit=True)

    def rollback(self, savepoint: str | None = None) -> None:
        """ROLLBACK: the whole transaction, however deeply nested (no savepoints: 40517)."""
        if self.tx is None:
            raise SqlError(NO_BEGIN_FOR_ROLLBACK, "The ROLLBACK TRANSACTION request has no corresponding "
                                                  "BEGIN TRANSACTION.")
        if savepoint is not None and not savepoint.startswith("@"):
            raise SqlError(UNSUPPORTED, f"ROLLBACK TRANSACTION {savepoint}: savepoints are not supported; "
                                        "ROLLBACK TRANSACTION rolls back the whole transaction.")
        self.close()

    def statement_failed(self) -> None:
        """A statement failed after it wrote in the open transaction (if any). There is
        no savepoint to roll back the statement alone, so the transaction is doomed
        (XACT_STATE() = -1): COMMIT is 3930 and the batch's end rolls it back. Without
        an open transaction the autocommit one rolls back as the error leaves it."""
        if self.tx is not None:
            self._doomed = True

    def caught(self, error: SqlError) -> None:
        """A TRY block caught ``error``: raised under XACT_ABORT ON, it dooms the open transaction."""
        if self.tx is not None and error.xact_abort:
            self._doomed = True

    def batch_failed(self, error: SqlError) -> None:
        """``error`` ended the batch: raised under XACT_ABORT ON, it rolls the open transaction back."""
        if self.tx is not None and error.xact_abort:
            self.close()

    def batch_ended(self) -> SqlError | None:
        """The batch has ended: a doomed transaction is rolled back, and 3998 says so."""
        if not self.doomed:
            return None
        self.close()
        return SqlError(UNCOMMITTABLE_AT_BATCH_END, "Uncommittable transaction is detected at the end of the "
                                                    "batch. The transaction is rolled back.")

    def close(self) -> None:
        """Roll back the open transaction, if any (ROLLBACK, or the end of the script)."""
        if self.tx is not None:
            tx, self.tx = self.tx, None
            self.trancount = 0
            self._doomed = False
            _end(tx, commit=False)


def _uncommittable() -> SqlError:
    return SqlError(UNCOMMITTABLE, "The current transaction cannot be committed and cannot support operations "
                                   "that write to the log file. Roll back the transaction.")


def _end(tx: Transaction, *, commit: bool) -> None:
    """Commit or roll back a script's transaction, then give its connection back."""
    try:
        if commit:
            tx.commit()
        else:
            tx.rollback()
    finally:
        tx.close()

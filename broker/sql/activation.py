"""Stored T-SQL procedures as activation procedures.

A queue's ``ACTIVATION (PROCEDURE_NAME = TargetActivProc, ...)`` names a procedure a
script created with CREATE PROCEDURE. The runtime finds it through the
``servicebroker.procedures`` entry point (``broker.runtime.readers``) and runs it on a
reader thread like any activation procedure: in a session of its own, whose open
transaction, if the procedure leaves one, rolls back when it returns.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

from broker.sql.outputs import Failed, Output, Printed
from broker.sql.session import Session

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("broker.sql")


def find_procedure(db: Any, name: str) -> Callable[[Any], object] | None:
    """The stored T-SQL procedure ``name`` (its last part: ``dbo.P`` is ``P``) as an
    activation procedure, or None when ``db`` stores none by that name."""
    short = name.rsplit(".", 1)[-1]
    if not short or db.procedure_definition(short) is None:
        return None
    return functools.partial(run_activated, name=short)


def run_activated(db: Any, *, name: str) -> None:
    """Run the procedure once, as activation does; its PRINT output goes to the log and
    an error it does not catch is raised (the reader counts it as a failure)."""
    with Session(db, on_output=functools.partial(_log_output, name)) as session:
        session.call_procedure(name)


def _log_output(name: str, output: Output) -> None:
    if isinstance(output, Printed):
        log.info("%s: %s", name, output.text)
    elif isinstance(output, Failed):
        log.warning("%s: %s", name, output.error)

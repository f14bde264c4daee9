"""Service Broker T-SQL: run SQL Server scripts against a broker database.

    import broker
    from broker import sql

    db = broker.connect("sqlite:///app.db")
    for output in sql.run(db, open("setup.sql").read()):
        print(output)

``Session`` keeps what a connection keeps between batches (the open transaction);
``run`` runs a whole script in a session of its own. The outputs are
``ResultSet``, ``Printed``, ``RowsAffected`` and ``Failed`` (``broker.sql.outputs``).
docs/sql.md lists the statements it runs.
"""

from __future__ import annotations

from broker.sql.errors import SqlError
from broker.sql.outputs import Failed, Output, Printed, ResultSet, RowsAffected
from broker.sql.session import Session, run, session

__all__ = ["Failed", "Output", "Printed", "ResultSet", "RowsAffected", "Session", "SqlError", "run", "session"]

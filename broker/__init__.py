"""servicebroker: SQL Server Service Broker re-built in Python.

Reliable, transactional, exactly-once, in-order messaging between services, stored in
an ordinary database (SQLite by default). Everything a user needs is importable here::

    import broker
    db = broker.connect("sqlite:///app.db")
    with db.transaction() as tx:
        h = tx.begin_dialog("//app/Initiator", "//app/Target", "//app/Contract")
        tx.send(h, "//app/Request", b"<request/>")
"""

from __future__ import annotations

from broker.database import Broker, connect
from broker.errors import BrokerError, ConversationNotFoundError, QueueDisabledError
from broker.messages import Message
from broker.system_messages import DIALOG_TIMER, END_DIALOG, ERROR, error_body, parse_error
from broker.transaction import Transaction

__all__ = [
    "DIALOG_TIMER",
    "END_DIALOG",
    "ERROR",
    "Broker",
    "BrokerError",
    "ConversationNotFoundError",
    "Message",
    "QueueDisabledError",
    "Transaction",
    "connect",
    "error_body",
    "parse_error",
]

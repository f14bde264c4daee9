"""servicebroker: SQL Server Service Broker re-built in Python.

Reliable, transactional, exactly-once, in-order messaging between services, stored in
an ordinary database (SQLite by default). Everything a user needs is importable here::

    import broker
    db = broker.connect("sqlite:///app.db")
    with db.transaction() as tx:
        h = tx.begin_dialog("//app/Initiator", "//app/Target", "//app/Contract")
        tx.send(h, "//app/Request", b"<request/>")

The names below load on first use (PEP 562), so ``import broker`` and the ``broker``
command start without SQLAlchemy, Alembic or lxml until a database is opened.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.conversations.messages import Message
    from broker.conversations.system_messages import DIALOG_TIMER, END_DIALOG, ERROR, error_body, parse_error
    from broker.database import Broker, connect
    from broker.errors import (
        ArgumentTypeError,
        BrokerError,
        ConversationNotFoundError,
        InvalidArgumentError,
        QueueDisabledError,
    )
    from broker.instances import Instance, instance
    from broker.transaction import Transaction

__all__ = [
    "DIALOG_TIMER",
    "END_DIALOG",
    "ERROR",
    "ArgumentTypeError",
    "Broker",
    "BrokerError",
    "ConversationNotFoundError",
    "Instance",
    "InvalidArgumentError",
    "Message",
    "QueueDisabledError",
    "Transaction",
    "connect",
    "error_body",
    "instance",
    "parse_error",
]

# public name -> the module that defines it
_HOMES = {
    "Broker": "broker.database",
    "connect": "broker.database",
    "Instance": "broker.instances",
    "instance": "broker.instances",
    "BrokerError": "broker.errors",
    "ConversationNotFoundError": "broker.errors",
    "InvalidArgumentError": "broker.errors",
    "ArgumentTypeError": "broker.errors",
    "QueueDisabledError": "broker.errors",
    "Message": "broker.conversations.messages",
    "DIALOG_TIMER": "broker.conversations.system_messages",
    "END_DIALOG": "broker.conversations.system_messages",
    "ERROR": "broker.conversations.system_messages",
    "error_body": "broker.conversations.system_messages",
    "parse_error": "broker.conversations.system_messages",
    "Transaction": "broker.transaction",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        # Not ours: AttributeError lets ``from broker import schema`` import the submodule.
        raise AttributeError(f"module 'broker' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

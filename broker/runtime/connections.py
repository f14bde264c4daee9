"""``sys.dm_broker_connections`` and ``sys.dm_broker_forwarded_messages``: the endpoint's
connections and the messages it forwards, written where any process sees them.

SQL Server's view is of memory; here the runtime that serves the endpoint writes its
connections (``transport.tcp.ConnectionInfo``) to the instance catalog's
``sb_broker_connections`` every second, under a session name of its own, replacing what
it wrote before. So ``inst.catalog("sys.dm_broker_connections")`` and ``broker status``
show them from another process, at most a second old, and a runtime that stops takes
its rows with it.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Sequence
from dataclasses import asdict

from sqlalchemy import delete, insert

from broker.storage.context import TxContext
from broker.storage.models import Base
from broker.transport.records import ConnectionInfo, ForwardedMessage

_connections = Base.metadata.tables["sb_broker_connections"]
_forwarded = Base.metadata.tables["sb_forwarded_messages"]


def runtime_session() -> str:
    """A name for this runtime's rows: host, process and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def record_connections(ctx: TxContext, session: str, connections: Sequence[ConnectionInfo],
                       forwarded: Sequence[ForwardedMessage] = ()) -> None:
    """Replace the rows of ``session`` with ``connections`` and the messages it is
    ``forwarded``-ing now."""
    forget_connections(ctx, session)
    if connections:
        ctx.conn.execute(insert(_connections), [_row(session, info) for info in connections])
    if forwarded:
        ctx.conn.execute(insert(_forwarded), [{**asdict(message), "runtime_session": session}
                                              for message in forwarded])


def forget_connections(ctx: TxContext, session: str) -> None:
    ctx.conn.execute(delete(_connections).where(_connections.c.runtime_session == session))
    ctx.conn.execute(delete(_forwarded).where(_forwarded.c.runtime_session == session))


def _row(session: str, info: ConnectionInfo) -> dict[str, object]:
    return {
        "connection_id": info.connection_id, "transport_stream_id": info.connection_id,
        "state": int(info.state), "connect_time": info.connect_time,
        "login_time": info.login_time, "authentication_method": "CERTIFICATE",
        "principal_name": info.principal_name, "remote_user_name": info.principal_name,
        "last_activity_time": info.last_activity_time, "is_accept": info.is_accept,
        "login_state": int(info.login_state), "peer_certificate_id": info.peer_certificate_id,
        "encryption_algorithm": int(info.encryption_algorithm),
        "receives_posted": 0, "is_receive_flow_controlled": False, "sends_posted": 0,
        "is_send_flow_controlled": False,
        "total_bytes_sent": info.total_bytes_sent, "total_bytes_received": info.total_bytes_received,
        "total_fragments_sent": info.total_fragments_sent, "total_fragments_received": info.total_fragments_received,
        "total_sends": info.total_sends, "total_receives": info.total_receives, "peer_arbitration_id": None,
        "address": info.address, "refusal": info.refusal, "runtime_session": session,
    }

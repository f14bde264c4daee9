"""The codes of ``sys.dm_broker_connections`` that the runtime writes to
``sb_broker_connections`` (``models.BrokerConnection``); the view turns them into the
``*_desc`` texts below, which migration 0007 writes out."""

from __future__ import annotations

from enum import IntEnum


class ConnectionState(IntEnum):
    """``state`` / ``state_desc``."""

    NEW = 1
    CONNECTING = 2
    CONNECTED = 3
    LOGGED_IN = 4
    CLOSED = 5


class LoginState(IntEnum):
    """``login_state`` / ``login_state_desc`` (SQL Server's names: ``WAIT ISC Confirm``, ``WAIT PRE-MASTER SECRET``).

    The SSPI rounds (ISC/ASC) are Windows authentication's, which does not exist here;
    a certificate login goes INITIAL, WAIT_LOGIN_NEGOTIATE, WAIT_VALIDATION (the TLS
    handshake), WAIT_ARBITRATION, ONLINE, or ERROR when refused.
    """

    INITIAL = 0
    WAIT_LOGIN_NEGOTIATE = 1
    ONE_ISC = 2
    ONE_ASC = 3
    TWO_ISC = 4
    TWO_ASC = 5
    WAIT_ISC_CONFIRM = 6
    WAIT_ASC_CONFIRM = 7
    WAIT_REJECT = 8
    WAIT_PRE_MASTER_SECRET = 9
    WAIT_VALIDATION = 10
    WAIT_ARBITRATION = 11
    ONLINE = 12
    ERROR = 13


class ConnectionEncryption(IntEnum):
    """``encryption_algorithm`` / ``encryption_algorithm_desc`` of a connection."""

    NONE = 0
    SIGNING_ONLY = 1
    RC4 = 2
    AES = 3

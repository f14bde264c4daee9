"""The gate of CREATE / ALTER ENDPOINT ... FOR SERVICE_BROKER: every option checked for
type and range before any file is read or any SQL runs.

Like ``broker.arguments`` this imports only the standard library and the leaves, so the
CLI's option types can use the same limits without loading SQLAlchemy or cryptography.
The certificate, private key and trusted peers are only checked for type here; the DDL
(``broker.ddl.endpoints``) reads and parses them.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from broker import arguments
from broker.errors import InvalidArgumentError

ENDPOINT_OPTIONS = (
    "port", "listener_ip", "state", "certificate", "private_key", "trusted_peers", "encryption",
    "message_forwarding", "message_forward_size",
)
EndpointState = Literal["STARTED", "STOPPED", "DISABLED"]
Encryption = Literal["REQUIRED", "SUPPORTED", "DISABLED"]
STATES: tuple[EndpointState, ...] = ("STARTED", "STOPPED", "DISABLED")
ENCRYPTIONS: tuple[Encryption, ...] = ("REQUIRED", "SUPPORTED", "DISABLED")
ALGORITHM = "AES"  # the only one: TLS has no RC4
LOWEST_PORT, HIGHEST_PORT = 1024, 32767  # LISTENER_PORT's range in SQL Server
ALL = "ALL"  # LISTENER_IP = ALL: every address of the host
VALUE_OUT_OF_RANGE = 7810  # SQL Server: "The value '%d' is not within range for the '%.*ls' parameter."
NOT_CHANGED = 7863  # SQL Server: ALTER ENDPOINT with nothing to change
NO_CERTIFICATE = 59050  # ours (docs/errors.md): an endpoint without a certificate and its private key


def endpoint_options(given: Mapping[str, Any], *, creating: bool) -> dict[str, Any]:
    """CREATE / ALTER ENDPOINT's options (``ENDPOINT_OPTIONS``), checked. CREATE needs a
    port; ALTER needs at least one option (7863)."""
    statement = "CREATE ENDPOINT" if creating else "ALTER ENDPOINT"
    arguments.options(given, ENDPOINT_OPTIONS, statement)
    if creating:
        arguments.required(given, ("port",), statement)
    elif not given:
        raise InvalidArgumentError(NOT_CHANGED, "The endpoint was not changed. The ALTER ENDPOINT statement did "
                                                "not contain any values to modify or update.")
    checked: dict[str, Any] = {}
    for name, value in given.items():
        if name == "port":
            checked[name] = listener_port(value)
        elif name == "listener_ip":
            checked[name] = listener_ip(value)
        elif name == "state":
            checked[name] = arguments.choice(value, "STATE", STATES)
        elif name == "encryption":
            checked[name] = arguments.choice(value, "ENCRYPTION", ENCRYPTIONS)
        elif name == "message_forwarding":
            checked[name] = arguments.flag(value, "MESSAGE_FORWARDING")
        elif name == "message_forward_size":
            checked[name] = forward_size(value)
        elif name == "trusted_peers":
            checked[name] = pem_sources(value)
        else:  # certificate, private_key: None leaves them out (CREATE says what is missing)
            checked[name] = None if value is None else pem_source(value, name.replace("_", " "))
    return checked


def listener_port(value: object) -> int:
    """LISTENER_PORT: an ``int`` from 1024 to 32767 (7810)."""
    port = arguments.integer(value, "LISTENER_PORT")
    if not LOWEST_PORT <= port <= HIGHEST_PORT:
        raise _out_of_range(port, "LISTENER_PORT", f"{LOWEST_PORT} to {HIGHEST_PORT}")
    return port


def listener_ip(value: object) -> str | None:
    """LISTENER_IP: ``"ALL"`` (any case) or None is every address (None); else one IPv4
    or IPv6 address, returned in its canonical form (102 for anything else)."""
    if value is None:
        return None
    text = arguments.text(value, "LISTENER_IP")
    if text.strip().upper() == ALL:
        return None
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        raise InvalidArgumentError(102, f"LISTENER_IP must be ALL or one IPv4 or IPv6 address; got {text[:60]!r}.",
                                   near=text[:60]) from None


def forward_size(value: object) -> int:
    """MESSAGE_FORWARD_SIZE: megabytes, at least 1 (7810)."""
    size = arguments.integer(value, "MESSAGE_FORWARD_SIZE")
    if size < 1:
        raise _out_of_range(size, "MESSAGE_FORWARD_SIZE", f"1 to {arguments.INT_MAX}")
    return size


def pem_source(value: object, what: str) -> str | bytes | os.PathLike[str]:
    """A certificate or key given as PEM content (bytes or str) or a file path."""
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (str, bytes, os.PathLike)):
        return value
    raise arguments.wrong_type(what, value, "PEM content (bytes or str) or a file path")


def pem_sources(value: object) -> tuple[str | bytes | os.PathLike[str], ...]:
    """The trusted peers' certificates: one source or an iterable of them."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes, bytearray, memoryview, os.PathLike)):
        return (pem_source(value, "trusted peer certificate"),)
    if isinstance(value, Mapping) or not isinstance(value, Iterable):
        raise arguments.wrong_type("trusted_peers", value, "certificates (PEM content or file paths)")
    return tuple(pem_source(item, "trusted peer certificate") for item in value)


def missing_authentication(missing: str) -> InvalidArgumentError:
    """The endpoint lacks its certificate or private key (59050)."""
    return InvalidArgumentError(
        NO_CERTIFICATE, f"A Service Broker endpoint here authenticates with a certificate only "
                        f"(AUTHENTICATION = CERTIFICATE): give {missing}. WINDOWS authentication (NTLM, KERBEROS, "
                        f"NEGOTIATE) is not available here. 'broker certificate create NAME' makes a certificate "
                        f"and its key.")


def _out_of_range(value: int, parameter: str, allowed: str) -> InvalidArgumentError:
    return InvalidArgumentError(VALUE_OUT_OF_RANGE, f"The value '{value}' is not within range for the "
                                                    f"'{parameter}' parameter (it takes {allowed}).")


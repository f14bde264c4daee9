"""Route addresses: ``LOCAL``, ``TRANSPORT`` and ``TCP://host:port`` (spec 1.6).

An address is checked when a route is created or altered (9659 empty, 9660 too long,
9744 not an address), and kept as given. ``TRANSPORT`` routes take their address from
the service name, which must itself begin with one (``TCP://host:4022/Orders``).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from broker.errors import InvalidArgumentError

LOCAL = "LOCAL"
TRANSPORT = "TRANSPORT"
MAX_ADDRESS = 256  # nvarchar(256)
DEFAULT_PORT = 4022

# A DNS or NetBIOS name: labels of letters, digits and hyphens, dot-separated.
_HOST_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                        r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
_TCP = re.compile(r"^tcp://(?P<host>\[[^\]]*\]|[^:/]*):(?P<port>[0-9]{1,5})(?P<rest>/.*)?\Z", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class TcpAddress:
    """A ``TCP://host:port`` next hop."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"TCP://{host}:{self.port}"


def checked_address(value: str, clause: str = "ADDRESS") -> str:
    """A route's ADDRESS or MIRROR_ADDRESS, checked; returned as given (keywords in
    upper case)."""
    if value == "":
        raise InvalidArgumentError(9659, f"The {clause} of a route cannot be empty.")
    if len(value) > MAX_ADDRESS:
        raise InvalidArgumentError(9660, f"The {clause} of a route cannot be longer than {MAX_ADDRESS} characters.")
    if value.upper() in (LOCAL, TRANSPORT):
        return value.upper()
    if parse_tcp(value) is None:
        raise InvalidArgumentError(9744, f"The {clause} '{value}' of the route is not valid: give 'LOCAL', "
                                         "'TRANSPORT' or 'TCP://host:port'.")
    return value


def parse_tcp(value: str, *, path_allowed: bool = False) -> TcpAddress | None:
    """The host and port of a ``TCP://host:port`` address, or None if it is not one."""
    match = _TCP.match(value)
    if match is None or (match.group("rest") and not path_allowed):
        return None
    port = int(match.group("port"))
    if not 1 <= port <= 65535:
        return None
    host = match.group("host")
    if host.startswith("["):
        try:
            return TcpAddress(str(ipaddress.IPv6Address(host[1:-1])), port)
        except ValueError:
            return None
    try:
        return TcpAddress(str(ipaddress.IPv4Address(host)), port)
    except ValueError:
        pass
    return TcpAddress(host.lower(), port) if _HOST_NAME.match(host) else None


def transport_address(service_name: str) -> TcpAddress | None:
    """The next hop a TRANSPORT route derives from a service name that begins with an
    address (``TCP://host:port/...``), or None."""
    return parse_tcp(service_name, path_allowed=True)

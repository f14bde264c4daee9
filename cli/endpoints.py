"""``broker --instance URL create|alter endpoint``: the instance's Service Broker endpoint
(CREATE / ALTER ENDPOINT ... FOR SERVICE_BROKER), named like its clauses. ``drop
endpoint`` is ``broker drop``'s; ``show broker-endpoints`` and ``show
broker-connections`` list it and its connections.

The endpoint is the instance's (``--instance``): with ``--db`` alone these commands are
usage errors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from broker.ddl.endpoint_options import ENCRYPTIONS, STATES
from cli.params import ENDPOINT, FORWARD_SIZE, LISTENER_IP, LISTENER_PORT, FilePath
from cli.render import F
from cli.state import CliState, pass_state

_FILE = FilePath(dir_okay=False)


def _endpoint_options(*, creating: bool) -> Callable[[F], F]:
    """CREATE ENDPOINT's clauses as options; --port is required to create."""
    options = (
        click.option("--port", type=LISTENER_PORT, required=creating, metavar="P",
                     help="LISTENER_PORT: the TCP port, 1024 to 32767 (SQL Server's convention: 4022)."),
        click.option("--certificate", type=_FILE, metavar="F",
                     help="AUTHENTICATION = CERTIFICATE: the endpoint's certificate, a PEM file "
                          "(broker certificate create makes one)."),
        click.option("--key", "private_key", type=_FILE, metavar="F",
                     help="The certificate's private key, a PEM file (unencrypted)."),
        click.option("--trust", "trusted_peers", type=_FILE, multiple=True, metavar="F",
                     help="A peer's certificate (PEM file) to accept connections from and to connect to "
                          "(GRANT CONNECT). Repeatable" + ("." if creating else "; replaces the trusted peers.")),
        click.option("--listener-ip", type=LISTENER_IP, metavar="IP",
                     help="LISTENER_IP: ALL (every address) or one IPv4 or IPv6 address."
                          + (" [default: ALL]" if creating else "")),
        click.option("--state", "endpoint_state", type=click.Choice(STATES, case_sensitive=False),
                     help="STATE: STARTED listens and sends; STOPPED and DISABLED do neither."
                          + (" [default: STARTED]" if creating else "")),
        click.option("--encryption", type=click.Choice(ENCRYPTIONS, case_sensitive=False),
                     help="ENCRYPTION (ALGORITHM AES)." + (" [default: REQUIRED]" if creating else "")),
        click.option("--message-forwarding/--no-message-forwarding", default=None,
                     help="MESSAGE_FORWARDING: forward messages for other instances (ENABLED / DISABLED)."
                          + (" [default: no]" if creating else "")),
        click.option("--message-forward-size", type=FORWARD_SIZE, metavar="MB",
                     help="MESSAGE_FORWARD_SIZE: megabytes of messages held for forwarding."
                          + (" [default: 10]" if creating else "")),
    )

    def decorate(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def _given(port: int | None, certificate: str | None, private_key: str | None, trusted_peers: tuple[str, ...],
           listener_ip: str | None, endpoint_state: str | None, encryption: str | None,
           message_forwarding: bool | None, message_forward_size: int | None) -> dict[str, Any]:
    """The options given, by the names ``create_endpoint`` takes (``--state`` is the
    endpoint's STATE)."""
    given = {"port": port, "certificate": certificate, "private_key": private_key,
             "trusted_peers": list(trusted_peers) or None, "listener_ip": listener_ip,
             "state": endpoint_state and endpoint_state.upper(), "encryption": encryption and encryption.upper(),
             "message_forwarding": message_forwarding, "message_forward_size": message_forward_size}
    return {name: value for name, value in given.items() if value is not None}


@click.command("endpoint")
@click.argument("name", type=ENDPOINT)
@_endpoint_options(creating=True)
@pass_state
def create_endpoint(state: CliState, name: str, port: int, certificate: str | None, private_key: str | None,
                    trusted_peers: tuple[str, ...], listener_ip: str | None, endpoint_state: str | None,
                    encryption: str | None, message_forwarding: bool | None,
                    message_forward_size: int | None) -> None:
    """Create the instance's Service Broker endpoint (CREATE ENDPOINT ... FOR SERVICE_BROKER).

    One per instance (7862). It authenticates with a certificate: give --certificate
    and --key (59050 without them: there is no WINDOWS authentication here), and
    --trust for each peer instance's certificate. The certificate and key are copied
    into the instance catalog; protect that file or database. `broker --instance URL
    run` serves the endpoint.

    \b
    Example:
      broker certificate create InstTargetEndpoint --directory certs
      broker --instance sqlite:///target-instance.db create endpoint InstTargetEndpoint --port 4022 \\
        --certificate certs/InstTargetEndpoint.crt --key certs/InstTargetEndpoint.key \\
        --trust certs/InstInitiatorEndpoint.crt
    """
    given = _given(None, certificate, private_key, trusted_peers, listener_ip, endpoint_state, encryption,
                   message_forwarding, message_forward_size)
    state.instance().create_endpoint(name, port, **given)
    click.echo(f"created endpoint {name} on port {port}")


@click.command("endpoint")
@click.argument("name", type=ENDPOINT)
@_endpoint_options(creating=False)
@click.option("--no-trust", is_flag=True, help="Trust no peer (every connection is refused).")
@pass_state
def alter_endpoint(state: CliState, name: str, port: int | None, certificate: str | None, private_key: str | None,
                   trusted_peers: tuple[str, ...], listener_ip: str | None, endpoint_state: str | None,
                   encryption: str | None, message_forwarding: bool | None, message_forward_size: int | None,
                   no_trust: bool) -> None:
    """Change the instance's endpoint (ALTER ENDPOINT).

    Options not given stay as they are. --trust replaces the trusted certificates;
    --no-trust removes them all. A new --certificate needs its --key too (15297).

    \b
    Example:
      broker --instance sqlite:///target-instance.db alter endpoint InstTargetEndpoint --state stopped
      broker --instance sqlite:///target-instance.db alter endpoint InstTargetEndpoint \\
        --trust certs/InstInitiatorEndpoint.crt --trust certs/Forwarder.crt
    """
    if no_trust and trusted_peers:
        raise click.UsageError("give --trust or --no-trust, not both")
    given = _given(port, certificate, private_key, trusted_peers, listener_ip, endpoint_state, encryption,
                   message_forwarding, message_forward_size)
    if no_trust:
        given["trusted_peers"] = []
    if not given:
        raise click.UsageError("nothing to change: give --port, --state, --trust or another option")
    state.instance().alter_endpoint(name, **given)
    click.echo(f"altered endpoint {name}")

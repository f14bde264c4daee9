"""``broker certificate create``: a key pair and a self-signed certificate for an endpoint."""

from __future__ import annotations

import os
from pathlib import Path

import click

from cli.params import FilePath, Name

DAYS_MAX = 36_525  # the library's limit: a hundred years
# X.509's ub-common-name: the subject CN=NAME holds at most 64 characters, fewer than a
# sysname's 128 (checked here too, as a usage error naming the argument).
COMMON_NAME_MAX = 64
CERTIFICATE_SUBJECT = Name("certificate", longest=COMMON_NAME_MAX)


@click.group("certificate")
def certificate() -> None:
    """Certificates for the Service Broker endpoint (AUTHENTICATION = CERTIFICATE).

    \b
    Example:
      broker certificate create InstTargetEndpoint --directory certs
    """


@certificate.command("create")
@click.argument("name", type=CERTIFICATE_SUBJECT)
@click.option("--days", type=click.IntRange(1, DAYS_MAX), default=365, show_default=True,
              help="How long the certificate is valid, from now.")
@click.option("--directory", type=FilePath(exists=True, file_okay=False), default=".", show_default=True,
              help="The folder to write NAME.crt and NAME.key in.")
def create_certificate(name: str, days: int, directory: str) -> None:
    """Make a key pair and a self-signed certificate whose subject is CN=NAME (at most 64 characters).

    Writes DIRECTORY/NAME.crt (the certificate, PEM: give it to the peers that are to
    trust this endpoint, for their --trust) and DIRECTORY/NAME.key (the private key, PEM,
    unencrypted, readable by its owner only). Existing files are never overwritten.

    \b
    Example:
      broker certificate create InstTargetEndpoint --directory certs
      broker --instance sqlite:///target.db create endpoint InstTargetEndpoint --port 4022 \\
        --certificate certs/InstTargetEndpoint.crt --key certs/InstTargetEndpoint.key \\
        --trust certs/InstInitiatorEndpoint.crt
    """
    from broker.ddl import certificates

    if name in (".", "..") or any(separator in name for separator in ("/", "\\", os.sep)):
        raise click.BadParameter(f"{name!r} names the files NAME.crt and NAME.key, so it cannot hold a path "
                                 "separator or be '.' or '..'", param_hint="'NAME'")
    certificate_file, key_file = Path(directory, f"{name}.crt"), Path(directory, f"{name}.key")
    for path in (certificate_file, key_file):
        if path.exists():
            raise click.ClickException(f"{path} already exists: remove it or give another --directory")
    certificate_pem, key_pem = certificates.create_certificate(name, days=days)
    _write_new(key_file, key_pem, 0o600)
    try:
        _write_new(certificate_file, certificate_pem, 0o644)
    except BaseException:
        key_file.unlink()
        raise
    valid_until = certificates.load_certificate(certificate_pem).not_valid_after_utc
    click.echo(f"created certificate {name} (valid until {valid_until:%Y-%m-%d %H:%M} UTC)")
    click.echo(f"certificate: {certificate_file}")
    click.echo(f"private key: {key_file} (keep it secret)")
    click.echo(f"thumbprint:  {certificates.thumbprint(certificate_pem)}")


def _write_new(path: Path, content: bytes, mode: int) -> None:
    """Write a file that must not exist yet (another process may race for the name),
    created with ``mode`` (less the umask) from the start: the key is never readable by others."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        raise click.ClickException(f"{path} already exists: remove it or give another --directory") from None
    with os.fdopen(descriptor, "wb") as file:
        file.write(content)


COMMANDS = (certificate,)

"""The files CREATE CERTIFICATE reads and BACKUP CERTIFICATE writes, on both backends.

Reading: only a regular file of at most ``certificates.LARGEST_FILE`` bytes is read; a
device, a FIFO, a folder or a larger file is 15208 at once (never a hang, never memory
exhausted). Writing: BACKUP is all or nothing (``certificates.write_backup``): a statement
that fails with 15240 leaves no file behind, and never touches a file that was there.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_sql_statements import failure, ok

import broker
from broker.ddl import certificates
from broker.errors import BrokerError
from broker.sql.session import Session

MASTER_KEY = "CREATE MASTER KEY ENCRYPTION BY PASSWORD = N'Str0ng!'"
# What a blocking open() or an unbounded read would overrun: the statements answer at once.
PROMPTLY = pytest.mark.timeout(20)


@pytest.fixture
def master(db_url: str) -> Iterator[Session]:
    """A session in master of an instance whose catalog is the test's database."""
    inst = broker.instance(db_url)
    with Session(inst.msdb, instance=inst, database_name="master") as opened:
        yield opened
    inst.dispose()


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate (PEM) and its unencrypted private key, as files."""
    pem, key = certificates.create_certificate("peer")
    (tmp_path / "peer.pem").write_bytes(pem)
    (tmp_path / "peer.key").write_bytes(key)
    return tmp_path / "peer.pem", tmp_path / "peer.key"


def importing(certificate: Path | str, key: Path | str | None = None) -> str:
    """CREATE CERTIFICATE ... FROM FILE, WITH PRIVATE KEY (FILE) if ``key`` is given."""
    statement = f"CREATE CERTIFICATE c FROM FILE = '{certificate}'"
    return statement if key is None else f"{statement} WITH PRIVATE KEY (FILE = '{key}')"


def padded(path: Path, size: int) -> Path:
    """``path`` grown to ``size`` bytes with trailing newlines, which PEM parsing skips."""
    with path.open("ab") as out:
        out.write(b"\n" * (size - path.stat().st_size))
    return path


def backup(name: str, certificate: Path, key: Path) -> str:
    return (f"BACKUP CERTIFICATE {name} TO FILE = '{certificate}' "
            f"WITH PRIVATE KEY (FILE = '{key}', ENCRYPTION BY PASSWORD = 'Sec3t')")


# -- reading: CREATE CERTIFICATE ... FROM FILE --------------------------------------------------


@PROMPTLY
@pytest.mark.parametrize("which", ["certificate", "private key"])
def test_a_device_is_refused_before_it_is_read(master: Session, pair: tuple[Path, Path], which: str) -> None:
    certificate, key = pair
    statement = importing("/dev/zero") if which == "certificate" else importing(certificate, "/dev/zero")
    error = failure(master, f"{MASTER_KEY}\n{statement}")
    assert error.number == 15208 and "not a regular file" in error.message


@PROMPTLY
@pytest.mark.parametrize("which", ["certificate", "private key"])
def test_a_fifo_is_refused_without_opening_it(master: Session, pair: tuple[Path, Path], tmp_path: Path,
                                              which: str) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer ever comes: opening it for reading would block
    certificate, key = pair
    statement = importing(fifo) if which == "certificate" else importing(certificate, fifo)
    error = failure(master, f"{MASTER_KEY}\n{statement}")
    assert error.number == 15208 and "not a regular file" in error.message


@pytest.mark.parametrize("which", ["certificate", "private key"])
def test_a_file_over_the_cap_is_refused_one_at_the_cap_is_read(master: Session, pair: tuple[Path, Path],
                                                               which: str) -> None:
    certificate, key = pair
    grown = padded(certificate if which == "certificate" else key, certificates.LARGEST_FILE)
    ok(master, f"{MASTER_KEY}\n{importing(certificate, key)}\nDROP CERTIFICATE c")
    with grown.open("ab") as out:
        out.write(b"\n")  # valid content still, but one byte over
    error = failure(master, importing(certificate, key))
    assert error.number == 15208 and f"larger than {certificates.LARGEST_FILE:,} bytes" in error.message


def test_a_folder_is_refused(master: Session, tmp_path: Path) -> None:
    assert failure(master, importing(tmp_path)).number == 15208


# -- writing: BACKUP CERTIFICATE, all or nothing ----------------------------------------------------


def test_a_backup_with_a_bad_key_path_writes_nothing_and_can_be_retried(master: Session, tmp_path: Path) -> None:
    ok(master, f"{MASTER_KEY}\nCREATE CERTIFICATE c WITH SUBJECT = 'c'")
    cer, key = tmp_path / "c.cer", tmp_path / "c.pvk"
    assert failure(master, backup("c", cer, tmp_path / "missing" / "c.pvk")).number == 15240
    assert not cer.exists()
    ok(master, backup("c", cer, key))
    assert cer.stat().st_size > 0 and b"ENCRYPTED PRIVATE KEY" in key.read_bytes()


def test_a_backup_onto_an_existing_key_file_writes_no_certificate_file(master: Session, tmp_path: Path) -> None:
    ok(master, f"{MASTER_KEY}\nCREATE CERTIFICATE c WITH SUBJECT = 'c'")
    cer, key = tmp_path / "c.cer", tmp_path / "c.pvk"
    key.write_bytes(b"theirs")
    assert failure(master, backup("c", cer, key)).number == 15240
    assert not cer.exists() and key.read_bytes() == b"theirs"


def test_a_backup_onto_an_existing_certificate_file_leaves_it_as_it_was(master: Session, tmp_path: Path) -> None:
    ok(master, f"{MASTER_KEY}\nCREATE CERTIFICATE c WITH SUBJECT = 'c'")
    cer, key = tmp_path / "c.cer", tmp_path / "c.pvk"
    cer.write_bytes(b"theirs")
    assert failure(master, backup("c", cer, key)).number == 15240
    assert cer.read_bytes() == b"theirs" and not key.exists()


def test_write_backup_checks_both_files_before_writing_either(tmp_path: Path) -> None:
    cer, key = tmp_path / "c.cer", tmp_path / "c.pvk"
    for bad_key in (tmp_path / "missing" / "c.pvk", cer, tmp_path / "nul\0.pvk"):
        with pytest.raises(BrokerError) as raised:
            certificates.write_backup(cer, b"der", (bad_key, b"key"))
        assert raised.value.number == 15240 and not cer.exists()
    key.write_bytes(b"theirs")
    with pytest.raises(BrokerError) as raised:
        certificates.write_backup(cer, b"der", (key, b"key"))
    assert raised.value.number == 15240 and not cer.exists() and key.read_bytes() == b"theirs"
    key.unlink()
    certificates.write_backup(cer, b"der", (key, b"key"))
    assert (cer.read_bytes(), key.read_bytes(), key.stat().st_mode & 0o077) == (b"der", b"key", 0)


def test_write_backup_removes_its_certificate_file_when_the_key_file_fails(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    cer, key = tmp_path / "c.cer", tmp_path / "c.pvk"
    write_new_file = certificates.write_new_file

    def racing(path: certificates.FilePath, data: bytes, *, private: bool = False) -> None:
        if private:  # another process takes the key's name between the check and the write
            key.write_bytes(b"theirs")
        write_new_file(path, data, private=private)

    monkeypatch.setattr(certificates, "write_new_file", racing)
    with pytest.raises(BrokerError) as raised:
        certificates.write_backup(cer, b"der", (key, b"key"))
    assert raised.value.number == 15240 and not cer.exists() and key.read_bytes() == b"theirs"

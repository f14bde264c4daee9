"""Security statements through the T-SQL front end: CREATE / DROP MASTER KEY, USER, LOGIN
and CERTIFICATE, BACKUP CERTIFICATE, GRANT and REVOKE, and CREATE ENDPOINT's
AUTHENTICATION = CERTIFICATE, with SQL Server's error numbers, on both backends.

The sessions run on an instance whose catalog is the test's database: ``master`` is the
catalog (USE master), and a session without the instance shows what needs one. Effects
are checked through the Python API (catalog views, ``endpoint_config``), not more T-SQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from test_sql_statements import failure, ok, value

import broker
from broker.ddl.certificates import create_certificate, der_of, thumbprint
from broker.sql.session import Session

MASTER_KEY = "CREATE MASTER KEY ENCRYPTION BY PASSWORD = N'Str0ng!'"
BUILTIN_USERS = {"public", "dbo", "guest", "INFORMATION_SCHEMA", "sys"}


@pytest.fixture
def inst(db_url: str) -> Iterator[broker.Instance]:
    opened = broker.instance(db_url)
    yield opened
    opened.dispose()


@pytest.fixture
def master(inst: broker.Instance) -> Iterator[Session]:
    """A session in master: the instance catalog."""
    with Session(inst.msdb, instance=inst, database_name="master") as opened:
        yield opened


@pytest.fixture
def member(instance_urls: tuple[str, str, str]) -> Iterator[tuple[broker.Instance, broker.Broker]]:
    """An instance and a member database of it (each layout of conftest's)."""
    catalog, member_url, _ = instance_urls
    opened = broker.instance(catalog)
    yield opened, opened.add_database("Member", member_url)
    opened.dispose()


@pytest.fixture
def alone(inst: broker.Instance) -> Iterator[Session]:
    """A session on the same database without its instance (no logins, no endpoint)."""
    with Session(inst.msdb) as opened:
        yield opened


def one(db: broker.Broker, view: str, **where: object) -> dict[str, object]:
    [row] = db.catalog(view, **where)
    return row


def users(db: broker.Broker) -> set[str]:
    return {row["name"] for row in db.catalog("sys.database_principals")} - BUILTIN_USERS


def peer_file(tmp_path: Path, name: str = "peer") -> tuple[Path, bytes]:
    """A certificate made elsewhere, as a DER .cer file (what BACKUP CERTIFICATE writes); its PEM."""
    pem, _key = create_certificate(name)
    path = tmp_path / f"{name}.cer"
    path.write_bytes(der_of(pem))
    return path, pem


# -- master keys -----------------------------------------------------------------------------------


def test_master_key_create_and_drop(inst: broker.Instance, master: Session) -> None:
    ok(master, MASTER_KEY)
    row = one(inst.msdb, "sys.symmetric_keys")
    assert (row["name"], row["symmetric_key_id"], row["algorithm_desc"]) == ("##MS_DatabaseMasterKey##", 101, "AES_256")
    assert failure(master, MASTER_KEY).number == 15578
    ok(master, "DROP MASTER KEY")
    assert inst.msdb.catalog("sys.symmetric_keys") == []
    assert failure(master, "DROP MASTER KEY").number == 15151


def test_a_master_key_encrypting_a_private_key_cannot_be_dropped(inst: broker.Instance, master: Session) -> None:
    ok(master, f"{MASTER_KEY}\nCREATE CERTIFICATE c WITH SUBJECT = 'c'")
    error = failure(master, "DROP MASTER KEY")
    assert (error.number, error.message) == (
        15580, "Cannot drop master key because certificate 'c' is encrypted by it.")
    ok(master, "DROP CERTIFICATE c\nDROP MASTER KEY")


# -- certificates -----------------------------------------------------------------------------------


def test_create_certificate_makes_a_key_pair_the_master_key_protects(inst: broker.Instance, master: Session) -> None:
    assert failure(master, "CREATE CERTIFICATE c WITH SUBJECT = 'Mine'").number == 15581
    ok(master, f"{MASTER_KEY}\nCREATE CERTIFICATE c WITH SUBJECT = 'Mine', START_DATE = '2030-01-01', "
               "EXPIRY_DATE = N'12/31/2040'")
    row = one(inst.msdb, "sys.certificates")
    assert (row["name"], row["subject"], row["issuer_name"], row["principal_id"]) == ("c", "Mine", "Mine", 1)
    assert (row["pvt_key_encryption_type"], row["pvt_key_encryption_type_desc"]) == ("MK", "ENCRYPTED_BY_MASTER_KEY")
    assert (row["start_date"], row["expiry_date"]) == (datetime(2030, 1, 1, tzinfo=UTC),
                                                      datetime(2040, 12, 31, tzinfo=UTC))
    assert row["is_active_for_begin_dialog"] == 1 and len(row["thumbprint"]) == 20
    stored = inst.msdb.certificate("C")  # names compare without regard to case
    assert stored.private_key is not None and b"BEGIN CERTIFICATE" in stored.certificate


def test_a_certificate_whose_key_a_password_protects_needs_no_master_key(inst: broker.Instance,
                                                                         master: Session) -> None:
    ok(master, "CREATE CERTIFICATE c ENCRYPTION BY PASSWORD = 'pw' WITH SUBJECT = 's' ACTIVE FOR BEGIN_DIALOG = OFF")
    row = one(inst.msdb, "sys.certificates")
    assert (row["pvt_key_encryption_type"], row["is_active_for_begin_dialog"]) == ("PW", 0)


def test_a_certificate_owned_by_a_user(inst: broker.Instance, master: Session) -> None:
    ok(master, f"{MASTER_KEY}\nCREATE USER TargetUser WITHOUT LOGIN\n"
               "CREATE CERTIFICATE c AUTHORIZATION TargetUser WITH SUBJECT = 'Target Certificate'")
    assert one(inst.msdb, "sys.certificates")["principal_id"] == one(
        inst.msdb, "sys.database_principals", name="TargetUser")["principal_id"]
    assert failure(master, "DROP USER TargetUser").number == 15138
    assert failure(master, "CREATE CERTIFICATE d AUTHORIZATION Nobody WITH SUBJECT = 'd'").number == 15151


@pytest.mark.parametrize(("statement", "number"), [
    ("CREATE CERTIFICATE c WITH START_DATE = '2030-01-01'", 102),  # no SUBJECT
    ("CREATE CERTIFICATE c WITH SUBJECT = 's', COLOUR = 'blue'", 102),
    ("CREATE CERTIFICATE c WITH SUBJECT = 's', SUBJECT = 't'", 1055),
    ("CREATE CERTIFICATE c WITH SUBJECT = 's', START_DATE = '2030-01-01', EXPIRY_DATE = '2029-01-01'", 15297),
    ("CREATE CERTIFICATE c WITH SUBJECT = 's', EXPIRY_DATE = 'soon'", 241),
    ("CREATE CERTIFICATE c FROM FILE = '/nowhere/c.cer'", 15208),
    ("CREATE CERTIFICATE c FROM FILE = 'x' WITH PRIVATE KEY (DECRYPTION BY PASSWORD = 'p')", 102),
    ("BACKUP CERTIFICATE nothing TO FILE = 'x'", 15151),
    ("DROP CERTIFICATE nothing", 15151),
])
def test_certificate_errors(master: Session, statement: str, number: int) -> None:
    ok(master, MASTER_KEY)
    assert failure(master, statement).number == number


def test_backup_then_import_a_certificate_with_its_private_key(inst: broker.Instance, master: Session,
                                                               tmp_path: Path) -> None:
    ok(master, f"{MASTER_KEY}\nCREATE CERTIFICATE c WITH SUBJECT = 'Travels'\n"
               f"BACKUP CERTIFICATE c TO FILE = '{tmp_path / 'c.cer'}'\n"
               f"   WITH PRIVATE KEY (FILE = '{tmp_path / 'c.pvk'}', ENCRYPTION BY PASSWORD = 'Sec3t')")
    assert (tmp_path / "c.pvk").stat().st_mode & 0o077 == 0  # the key's file is the owner's only
    assert b"ENCRYPTED PRIVATE KEY" in (tmp_path / "c.pvk").read_bytes()
    assert one(inst.msdb, "sys.certificates")["pvt_key_last_backup_date"] is not None
    original = inst.msdb.certificate("c")
    # The same certificate is in the database already: 15232, whatever its name.
    assert failure(master, f"CREATE CERTIFICATE d FROM FILE = '{tmp_path / 'c.cer'}'").number == 15232
    ok(master, "DROP CERTIFICATE c")
    assert failure(master, f"CREATE CERTIFICATE c FROM FILE = '{tmp_path / 'c.cer'}' WITH PRIVATE KEY "
                           f"(FILE = '{tmp_path / 'c.pvk'}', DECRYPTION BY PASSWORD = 'wrong')").number == 15208
    ok(master, f"CREATE CERTIFICATE c FROM FILE = '{tmp_path / 'c.cer'}' WITH PRIVATE KEY "
               f"(FILE = '{tmp_path / 'c.pvk'}', DECRYPTION BY PASSWORD = 'Sec3t')")
    imported = inst.msdb.certificate("c")
    assert (imported.certificate, imported.private_key) == (original.certificate, original.private_key)
    assert one(inst.msdb, "sys.certificates")["pvt_key_encryption_type"] == "MK"


def test_import_a_certificate_without_its_key_from_der_or_pem(inst: broker.Instance, master: Session,
                                                              tmp_path: Path) -> None:
    der, pem = peer_file(tmp_path)
    (tmp_path / "peer.pem").write_bytes(pem)
    ok(master, f"CREATE CERTIFICATE FromDer FROM FILE = '{der}'")  # no private key: no master key needed
    assert one(inst.msdb, "sys.certificates")["pvt_key_encryption_type"] == "NA"
    assert thumbprint(inst.msdb.certificate("FromDer").certificate) == thumbprint(pem)
    ok(master, "DROP CERTIFICATE FromDer")
    ok(master, f"CREATE CERTIFICATE FromPem FROM FILE = '{tmp_path / 'peer.pem'}'")
    assert one(inst.msdb, "sys.certificates")["subject"] == "peer"
    assert failure(master, f"BACKUP CERTIFICATE FromPem TO FILE = '{tmp_path / 'x.cer'}' WITH PRIVATE KEY "
                           f"(FILE = '{tmp_path / 'x.pvk'}', ENCRYPTION BY PASSWORD = 'p')").number == 15297
    assert failure(master, f"BACKUP CERTIFICATE FromPem TO FILE = '{der}'").number == 15240  # never overwrites


def test_a_certificate_made_in_a_transaction_rolls_back_with_it(inst: broker.Instance, master: Session,
                                                                tmp_path: Path) -> None:
    ok(master, f"{MASTER_KEY}\nBEGIN TRAN\nCREATE CERTIFICATE c WITH SUBJECT = 's'\n"
               f"BACKUP CERTIFICATE c TO FILE = '{tmp_path / 'c.cer'}'\nROLLBACK")
    assert inst.msdb.catalog("sys.certificates") == []
    assert (tmp_path / "c.cer").stat().st_size > 0  # the file was written, as SQL Server's would be


# -- users and logins ---------------------------------------------------------------------------------


def test_users_without_login_for_a_login_and_from_a_certificate(inst: broker.Instance, master: Session,
                                                                tmp_path: Path) -> None:
    der, _pem = peer_file(tmp_path)
    ok(master, f"CREATE CERTIFICATE Peer FROM FILE = '{der}'\n"
               "CREATE LOGIN SomeLogin WITH PASSWORD = N'x', CHECK_POLICY = OFF\n"
               "CREATE USER Loose WITHOUT LOGIN\n"
               "CREATE USER Mapped FOR LOGIN SomeLogin WITH DEFAULT_SCHEMA = dbo\n"
               "CREATE USER SomeLogin\n"  # no clause: for the login of its own name
               "CREATE USER FromCertificate FROM CERTIFICATE Peer")
    rows = {row["name"]: row for row in inst.msdb.catalog("sys.database_principals")}
    assert {name: (rows[name]["type_desc"], rows[name]["authentication_type_desc"]) for name in users(inst.msdb)} == {
        "Loose": ("SQL_USER", "NONE"), "Mapped": ("SQL_USER", "INSTANCE"), "SomeLogin": ("SQL_USER", "INSTANCE"),
        "FromCertificate": ("CERTIFICATE_MAPPED_USER", "NONE")}
    assert min(rows[name]["principal_id"] for name in users(inst.msdb)) == 5
    assert failure(master, "CREATE USER loose WITHOUT LOGIN").number == 15023
    assert failure(master, "CREATE USER dbo WITHOUT LOGIN").number == 15023
    assert failure(master, "CREATE USER Orphan FOR LOGIN NoSuchLogin").number == 15007
    assert failure(master, "CREATE USER Nobody").number == 15007
    assert failure(master, "CREATE USER x WITHOUT LOGIN WITH COLOUR = blue").number == 102
    assert failure(master, "DROP CERTIFICATE Peer").number == 15352  # a user is mapped to it
    ok(master, "DROP USER FromCertificate\nDROP CERTIFICATE Peer\nDROP USER Loose")
    assert failure(master, "DROP USER Loose").number == 15151
    assert users(inst.msdb) == {"Mapped", "SomeLogin"}


def test_logins_are_the_instances(inst: broker.Instance, master: Session, alone: Session, tmp_path: Path) -> None:
    der, _pem = peer_file(tmp_path)
    ok(master, f"CREATE CERTIFICATE Peer FROM FILE = '{der}'\nCREATE LOGIN ByPassword WITH PASSWORD = 'x'\n"
               "CREATE LOGIN ByCertificate FROM CERTIFICATE Peer")
    logins = {row["name"]: row for row in inst.msdb.catalog("sys.server_principals")}
    assert {name: row["type_desc"] for name, row in logins.items()} == {
        "sa": "SQL_LOGIN", "public": "SERVER_ROLE", "ByPassword": "SQL_LOGIN",
        "ByCertificate": "CERTIFICATE_MAPPED_LOGIN"}
    assert logins["ByPassword"]["principal_id"] >= 256
    assert failure(master, "CREATE LOGIN bypassword WITH PASSWORD = 'y'").number == 15025
    assert failure(master, "CREATE LOGIN Other FROM CERTIFICATE Missing").number == 15151
    assert failure(master, "DROP CERTIFICATE Peer").number == 15352  # a login is mapped to it
    assert failure(master, "BEGIN TRAN\nCREATE LOGIN Later WITH PASSWORD = 'z'").number == 574
    ok(master, "ROLLBACK")
    for statement in ("CREATE LOGIN Elsewhere WITH PASSWORD = 'x'", "DROP LOGIN ByPassword",
                      "CREATE USER u FOR LOGIN ByPassword", "GRANT CONNECT ON ENDPOINT::e TO ByPassword"):
        assert failure(alone, statement).number == 40517
    ok(master, "DROP LOGIN ByCertificate\nDROP LOGIN ByPassword\nDROP CERTIFICATE Peer")
    assert failure(master, "DROP LOGIN ByPassword").number == 15151
    assert {row["name"] for row in inst.msdb.catalog("sys.server_principals")} == {"sa", "public"}


# -- permissions -------------------------------------------------------------------------------------


def test_grant_and_revoke_on_a_service_and_the_database(inst: broker.Instance, master: Session) -> None:
    ok(master, "CREATE QUEUE q\nCREATE SERVICE [//s] ON QUEUE q\nCREATE USER u WITHOUT LOGIN\n"
               "CREATE USER v WITHOUT LOGIN\n"
               "GRANT SEND, VIEW DEFINITION ON SERVICE::[//s] TO u, v WITH GRANT OPTION\nGRANT CONNECT TO u\n"
               "GRANT SEND ON SERVICE::[//s] TO u")  # granted again: no change
    def granted() -> set[tuple[str, str, str]]:
        principals = {row["principal_id"]: row["name"] for row in inst.msdb.catalog("sys.database_principals")}
        return {(row["class_desc"], row["permission_name"], principals[row["grantee_principal_id"]])
                for row in inst.msdb.catalog("sys.database_permissions")}
    assert granted() == {("SERVICE", "SEND", "u"), ("SERVICE", "SEND", "v"), ("SERVICE", "VIEW DEFINITION", "u"),
                         ("SERVICE", "VIEW DEFINITION", "v"), ("DATABASE", "CONNECT", "u")}
    service_id = one(inst.msdb, "sys.services", name="//s")["service_id"]
    assert {row["major_id"] for row in inst.msdb.catalog("sys.database_permissions", class_desc="SERVICE")} == {
        service_id}
    ok(master, "REVOKE GRANT OPTION FOR VIEW DEFINITION ON SERVICE::[//s] FROM u, v CASCADE\nREVOKE CONNECT TO u")
    assert granted() == {("SERVICE", "SEND", "u"), ("SERVICE", "SEND", "v")}
    ok(master, "DROP USER v")  # its permissions go with it
    assert granted() == {("SERVICE", "SEND", "u")}
    ok(master, "DROP SERVICE [//s]")  # and the permissions on a service with it
    assert granted() == set()


@pytest.mark.parametrize(("statement", "number"), [
    ("GRANT SEND ON SERVICE::[//nowhere] TO u", 15151),
    ("GRANT SEND ON SERVICE::[//s] TO Nobody", 15151),
    ("GRANT CONNECT ON SERVICE::[//s] TO u", 102),  # not a permission of a service
    ("GRANT SEND TO u", 102),  # nor of the database
    ("GRANT REFERENCES ON CONTRACT::c TO u", 40517),
])
def test_permission_errors(master: Session, statement: str, number: int) -> None:
    ok(master, "CREATE QUEUE q\nCREATE SERVICE [//s] ON QUEUE q\nCREATE USER u WITHOUT LOGIN")
    assert failure(master, statement).number == number


# -- the endpoint: AUTHENTICATION = CERTIFICATE and trust by CONNECT -----------------------------------------


def endpoint_statement(port: int, authentication: str) -> str:
    return (f"CREATE ENDPOINT e STATE = STARTED AS TCP (LISTENER_PORT = {port}, LISTENER_IP = (127.0.0.1))\n"
            f"FOR SERVICE_BROKER (AUTHENTICATION = {authentication}, ENCRYPTION = REQUIRED ALGORITHM AES)")


def test_an_endpoint_presents_a_certificate_of_master_and_trusts_by_connect(inst: broker.Instance, master: Session,
                                                                             tmp_path: Path) -> None:
    owned_der, owned_pem = peer_file(tmp_path, "owned")
    mapped_der, mapped_pem = peer_file(tmp_path, "mapped")
    ok(master, f"{MASTER_KEY}\nCREATE CERTIFICATE Mine WITH SUBJECT = 'This instance'\n"
               + endpoint_statement(23456, "CERTIFICATE Mine") + "\n"
               "CREATE LOGIN OwnerLogin WITH PASSWORD = 'x'\nCREATE USER OwnerUser FOR LOGIN OwnerLogin\n"
               f"CREATE CERTIFICATE Owned AUTHORIZATION OwnerUser FROM FILE = '{owned_der}'\n"
               f"CREATE CERTIFICATE Mapped FROM FILE = '{mapped_der}'\n"
               "CREATE LOGIN MappedLogin FROM CERTIFICATE Mapped")
    config = inst.endpoint_config()
    assert config is not None and (config.principal, config.port, config.listener_ip) == (
        "This instance", 23456, "127.0.0.1")
    assert config.trusted_peers == ()  # nothing granted yet
    [described] = inst.catalog("sys.service_broker_endpoints")
    assert described["connection_auth_desc"] == "CERTIFICATE"

    def trusted() -> set[str]:
        found = inst.endpoint_config()
        assert found is not None
        return set(found.trusted_principals().values())

    ok(master, "GRANT CONNECT ON ENDPOINT::e TO OwnerLogin")
    assert trusted() == {"owned"}  # the certificate the login's user owns
    ok(master, "GRANT CONNECT ON ENDPOINT::e TO MappedLogin")
    assert trusted() == {"owned", "mapped"}  # and the certificate a login is made from
    ok(master, "REVOKE CONNECT ON ENDPOINT::e FROM OwnerLogin, MappedLogin\nGRANT CONNECT ON ENDPOINT::e TO public")
    assert trusted() == {"owned", "mapped"}  # public: every login's
    [permission] = inst.msdb.catalog("sys.server_permissions")
    assert (permission["class_desc"], permission["permission_name"], permission["grantee_principal_id"]) == (
        "ENDPOINT", "CONNECT", 2)
    assert failure(master, "DROP CERTIFICATE Mine").number == 15352  # the endpoint presents it
    assert failure(master, "BEGIN TRAN\nGRANT CONNECT ON ENDPOINT::e TO OwnerLogin").number == 574
    ok(master, "ROLLBACK\nDROP ENDPOINT e")
    assert inst.msdb.catalog("sys.server_permissions") == []  # the permissions on it went with it
    ok(master, "DROP CERTIFICATE Mine")
    assert owned_pem != mapped_pem


@pytest.mark.parametrize(("authentication", "number"), [
    ("WINDOWS", 59050), ("WINDOWS NEGOTIATE", 59050), ("CERTIFICATE Missing", 15151),
    ("CERTIFICATE Public", 59050),  # no private key
])
def test_an_endpoint_without_a_usable_certificate(master: Session, tmp_path: Path, authentication: str,
                                                  number: int) -> None:
    der, _pem = peer_file(tmp_path)
    ok(master, f"CREATE CERTIFICATE Public FROM FILE = '{der}'")
    error = failure(master, endpoint_statement(23457, authentication))
    assert error.number == number
    if number == 59050:
        assert "AUTHENTICATION = CERTIFICATE" in error.message or "has no private key" in error.message


def test_an_endpoint_takes_the_certificate_beside_windows(inst: broker.Instance, master: Session) -> None:
    ok(master, f"{MASTER_KEY}\nCREATE CERTIFICATE Mine WITH SUBJECT = 'Both'\n"
               + endpoint_statement(23458, "WINDOWS KERBEROS CERTIFICATE Mine"))
    config = inst.endpoint_config()
    assert config is not None and config.principal == "Both"
    assert failure(master, "CREATE ENDPOINT f AS TCP (LISTENER_PORT = 23459) FOR SERVICE_BROKER "
                           "(ENCRYPTION = REQUIRED)").number == 59050  # AUTHENTICATION's default: WINDOWS


# -- master and msdb are the instance catalog -----------------------------------------------------------


def test_use_master_and_msdb_go_to_the_instance_catalog(member: tuple[broker.Instance, broker.Broker]) -> None:
    inst, db = member
    with Session(db, instance=inst, database_name="Member") as session:
        ok(session, "CREATE USER InMember WITHOUT LOGIN\nUSE msdb\nCREATE ROUTE Back WITH ADDRESS = 'LOCAL'\n"
                    "USE master\nCREATE USER InMaster WITHOUT LOGIN")
        assert value(session, "SELECT DB_NAME()") == "master"
        ok(session, "USE Member")
        # Permissions on the endpoint are granted in master only.
        assert failure(session, "GRANT CONNECT ON ENDPOINT::e TO l").number == 4621
    assert users(db) == {"InMember"} and users(inst.msdb) == {"InMaster"}
    assert "Back" in {row["name"] for row in inst.msdb.catalog("sys.routes")}
    assert "Back" not in {row["name"] for row in db.catalog("sys.routes")}

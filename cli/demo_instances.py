"""``broker demo --between-instances``: the tutorial of spec 12.3, told step by step.

Microsoft's tutorial "Completing a Conversation Between Instances", with its names: two
instances on loopback, each an instance catalog (its msdb) with one database,
InstTargetDB and InstInitiatorDB, SQLite files in one folder. Each instance has an
endpoint that authenticates with a certificate made on the spot and trusts the other's
(the files are exchanged, as the tutorial exchanges its certificates), a route to the
other instance's service and a remote service binding for it. Each instance is served
by a ``broker --instance URL run`` process of its own, started by the demo and always
stopped at its end; their logs go next to the databases. The request and the reply
cross over TLS between the two processes while the demo, a client of both databases,
sends and receives. A second run first drops the objects of the first.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import click

import broker
from broker.ddl.certificates import create_certificate, thumbprint
from cli.demo import cleanup_conversations, drop_earlier_run, more, receive_one, reply_and_end, say, show_queue, text
from cli.demo_between import sqlite_url
from cli.render import plural
from cli.signals import ending_on

REQUEST_TYPE = "//BothDB/2InstSample/RequestMessage"
REPLY_TYPE = "//BothDB/2InstSample/ReplyMessage"
CONTRACT = "//BothDB/2InstSample/SimpleContract"
TARGET_SERVICE = "//TgtDB/2InstSample/TargetService"
INITIATOR_SERVICE = "//InstDB/2InstSample/InitiatorService"
REQUEST_BODY = "<RequestMsg>Message for Target service.</RequestMsg>"
LOOPBACK = "127.0.0.1"
PORTS = (10_000, 32_767)  # high in LISTENER_PORT's range (1024-32767), clear of the usual services
DELIVERY_SECONDS = 60.0  # how long the demo waits for a process to start or a message to cross
STOP_SECONDS = 30.0  # how long a `broker run` has to stop after SIGTERM before it is killed
CHECK_SECONDS = 0.05
LOG_TAIL_LINES = 5


@dataclass(frozen=True)
class Side:
    """One of the tutorial's two instances: the names of its objects and its files."""

    role: str  # "target" or "initiator"
    database: str
    endpoint: str
    certificate: str  # the endpoint's certificate: CERTIFICATE.crt and CERTIFICATE.key
    queue: str
    service: str
    contracts: tuple[str, ...]
    user: str  # the user the other side's remote service binding names
    route: str  # the name of the routes to this side's service (the other database's, its own msdb's)
    binding: str  # the other side's remote service binding for this side's service

    @property
    def catalog_file(self) -> str:
        return f"{self.role}-instance.db"

    @property
    def log_file(self) -> str:
        return f"{self.role}-run.log"


TARGET = Side("target", "InstTargetDB", "InstTargetEndpoint", "InstTargetCertificate", "InstTargetQueue",
              TARGET_SERVICE, (CONTRACT,), "TargetUser", "InstTargetRoute", "TargetBinding")
INITIATOR = Side("initiator", "InstInitiatorDB", "InstInitiatorEndpoint", "InstInitiatorCertificate",
                 "InstInitiatorQueue", INITIATOR_SERVICE, (), "InitiatorUser", "InstInitiatorRoute",
                 "InitiatorBinding")


@dataclass
class Opened:
    """One side opened in this process: its instance catalog, its database and its
    endpoint's port."""

    side: Side
    inst: broker.Instance
    db: broker.Broker
    port: int = 0


@dataclass
class Server:
    """A ``broker --instance URL run`` process serving one side."""

    side: Side
    process: subprocess.Popen[bytes]
    log: Path


def play(folder: Path) -> None:
    """The whole tutorial, in the SQLite files of ``folder``."""
    where = "the current folder" if folder == Path() else str(folder)
    click.echo(f'Tutorial "Completing a Conversation Between Instances" in {where}: two instances on loopback\n')
    _make_certificates(folder)
    target = _open(folder, TARGET)
    initiator = None
    try:
        initiator = _open(folder, INITIATOR)
        _start_over(target, initiator)
        _create_side(3, target, initiator, folder)
        _create_side(4, initiator, target, folder)
        _create_routes(target, initiator)
        with _serving(folder, (target, initiator)) as servers:
            handle, conversation_id = _initiator_sends_request(target, initiator, servers)
            _target_replies_and_ends(target, initiator, conversation_id, servers)
            _initiator_receives_and_ends(target, initiator, handle, conversation_id)
        stopped = ", ".join(f"{s.side.role} {s.process.returncode}" for s in servers)
        more(f"Stopped both `broker run` processes with SIGTERM; exit statuses: {stopped}.")
    finally:
        for opened in (target, initiator):
            if opened is not None:
                opened.inst.dispose()
    _look_around(folder)


# -- step 1: certificates ---------------------------------------------------------------------


def _make_certificates(folder: Path) -> None:
    """Step 1: a key pair and a self-signed certificate for each endpoint, as files."""
    say(1, "Made a key pair and a self-signed certificate for each instance's endpoint")
    more("(AUTHENTICATION = CERTIFICATE), replacing those of an earlier run:")
    for side in (TARGET, INITIATOR):
        certificate, key = create_certificate(side.certificate)
        _write_anew(folder / f"{side.certificate}.key", key, 0o600)
        _write_anew(folder / f"{side.certificate}.crt", certificate, 0o644)
        more(f"  {side.certificate}.crt and {side.certificate}.key (mode 600: yours only),")
        more(f"    thumbprint {thumbprint(certificate)}")
    more("Each instance gets the other's .crt file, as the tutorial exchanges its certificates by file.")


def _write_anew(path: Path, content: bytes, mode: int) -> None:
    """Replace ``path`` by a file created with ``mode`` from the start (a key is never
    readable by others, even for a moment)."""
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as file:
        file.write(content)


# -- step 2: the instances and their databases ------------------------------------------------


def _open(folder: Path, side: Side) -> Opened:
    """The side's instance catalog with its database as a member, broker enabled."""
    inst = broker.instance(sqlite_url(folder, side.catalog_file))
    try:
        path = (folder / f"{side.database}.db").resolve()
        current = inst.databases.get(side.database)
        if current is not None and Path(current.engine.url.database or "").resolve() != path:
            inst.remove_database(side.database)  # a member of that name elsewhere: the demo's file replaces it
            current = None
        db = current if current is not None else inst.add_database(side.database, _url(folder, f"{side.database}.db"))
        db.set_broker_enabled(True)
    except BaseException:
        inst.dispose()
        raise
    return Opened(side, inst, db)


def _start_over(target: Opened, initiator: Opened) -> None:
    """Step 2: the two instances are open; what an earlier run left is dropped."""
    say(2, "Opened two instances, each an instance catalog (the tutorial's msdb) with one database:")
    for opened in (target, initiator):
        side = opened.side
        [row] = opened.inst.catalog("sys.databases", name=side.database)
        more(f"  {side.catalog_file} with {side.database} ({side.database}.db), is_broker_enabled = "
             f"{int(row['is_broker_enabled'])}, service_broker_guid {row['service_broker_guid']}")
    earlier = [_drop_earlier_run(target, initiator.side), _drop_earlier_run(initiator, target.side)]
    if any(earlier):
        more("Dropped the objects an earlier run of the demo had left.")


def _drop_earlier_run(opened: Opened, other: Side) -> bool:
    """Drop the side's endpoint, msdb route and database objects; True if there were any."""
    side, inst = opened.side, opened.inst
    endpoint = inst.endpoint_config()
    if endpoint is not None:
        inst.drop_endpoint(endpoint.name)
    objects = (
        ("sys.remote_service_bindings", "drop_remote_service_binding", (other.binding,)),
        ("sys.routes", "drop_route", (other.route,)),
        ("sys.services", "drop_service", (side.service,)),
        ("sys.service_queues", "drop_queue", (side.queue,)),
        ("sys.service_contracts", "drop_contract", (CONTRACT,)),
        ("sys.service_message_types", "drop_message_type", (REQUEST_TYPE, REPLY_TYPE)),
    )
    dropped = [
        drop_earlier_run(inst.msdb, (("sys.routes", "drop_route", (side.route,)),)),
        drop_earlier_run(opened.db, objects, cleanup_conversations(opened.db, side.service)),
    ]
    return endpoint is not None or any(dropped)


# -- steps 3 to 5: objects, endpoints, routes -------------------------------------------------


def _create_side(step: int, opened: Opened, other: Opened, folder: Path) -> None:
    """Steps 3 and 4: a side's message types, contract, queue, service and endpoint."""
    side, db = opened.side, opened.db
    for name in (REQUEST_TYPE, REPLY_TYPE):
        db.create_message_type(name, validation="WELL_FORMED_XML")
    db.create_contract(CONTRACT, {REQUEST_TYPE: "INITIATOR", REPLY_TYPE: "TARGET"})
    db.create_queue(side.queue)
    db.create_service(side.service, side.queue, contracts=list(side.contracts))
    role = "the target of the contract" if side.contracts else "no contract: it can only initiate"
    say(step, f"In {side.database}: message types {REQUEST_TYPE} and {REPLY_TYPE} (well-formed XML),")
    more(f"contract {CONTRACT} (the request SENT BY INITIATOR, the reply SENT BY TARGET),")
    more(f"queue {side.queue} and service {side.service} on it ({role}).")
    opened.port = _free_port(exclude=other.port)
    opened.inst.create_endpoint(side.endpoint, opened.port, listener_ip=LOOPBACK,
                                certificate=folder / f"{side.certificate}.crt",
                                private_key=folder / f"{side.certificate}.key",
                                trusted_peers=[folder / f"{other.side.certificate}.crt"])
    [endpoint] = opened.inst.catalog("sys.service_broker_endpoints")
    [tcp] = opened.inst.catalog("sys.tcp_endpoints")
    more(f"Endpoint {endpoint['name']} of the {side.role} instance: STATE = {endpoint['state_desc']}, "
         f"LISTENER_IP {tcp['ip_address']}, LISTENER_PORT {tcp['port']},")
    more(f"AUTHENTICATION = {endpoint['connection_auth_desc']} {side.certificate}, ENCRYPTION = REQUIRED "
         f"({endpoint['encryption_algorithm_desc']}), trusting {other.side.certificate}.crt only.")


def _free_port(exclude: int) -> int:
    """A port in ``PORTS`` that is free on loopback now, other than ``exclude``."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randint(*PORTS)
        if port == exclude:
            continue
        with socket.socket() as probe:
            try:
                probe.bind((LOOPBACK, port))
            except OSError:
                continue
        return port
    raise click.ClickException(f"found no free port between {PORTS[0]} and {PORTS[1]} on {LOOPBACK}")


def _create_routes(target: Opened, initiator: Opened) -> None:
    """Step 5: each database's route and binding to the other's service, each msdb's
    LOCAL route to its own."""
    for opened, other in ((initiator, target), (target, initiator)):
        far = other.side
        opened.db.create_route(far.route, f"TCP://{LOOPBACK}:{other.port}", service_name=far.service)
        opened.db.create_remote_service_binding(far.binding, far.service, far.user)
        opened.inst.create_route(opened.side.route, "LOCAL", service_name=opened.side.service)
    say(5, "Routes and remote service bindings, the tutorial's cross wiring:")
    for opened, other in ((initiator, target), (target, initiator)):
        far = other.side
        [route] = opened.db.catalog("sys.routes", name=far.route)
        more(f"  {opened.side.database}: route {far.route} to {far.service}, ADDRESS = {route['address']};")
        more(f"    remote service binding {far.binding} (USER = {far.user}) for it.")
        [local] = opened.inst.catalog("sys.routes", name=opened.side.route)
        more(f"  msdb of the {opened.side.role} instance: route {opened.side.route}, ADDRESS = {local['address']}, "
             "for what arrives there.")
    more("There are no users, logins or GRANTs here: the endpoints' trust stands for them.")


# -- step 6: the two `broker run` processes ---------------------------------------------------


@contextmanager
def _serving(folder: Path, sides: Sequence[Opened]) -> Iterator[list[Server]]:
    """Step 6: a ``broker --instance URL run`` process for each side, its endpoint
    listening; on leaving, however it happens, every process is stopped."""
    servers: list[Server] = []
    try:
        with ending_on(signal.SIGTERM):  # a SIGTERM to the demo stops the processes too
            for opened in sides:
                servers.append(_start(folder, opened.side))
            say(6, "Started a `broker --instance URL run` process for each instance; each serves its database")
            more("and its endpoint until the demo stops it:")
            for server, opened in zip(servers, sides, strict=True):
                _wait_for(f"start the {server.side.role} instance's endpoint", partial(_listening, server), servers)
                more(f"  {server.side.role}: process {server.process.pid}, endpoint {server.side.endpoint} "
                     f"listening on {LOOPBACK}:{opened.port}, log in {server.side.log_file}")
            yield servers
    finally:
        _stop(servers)


def _start(folder: Path, side: Side) -> Server:
    """``broker --instance URL run`` for ``side``, its output in its log file."""
    log = folder / side.log_file
    command = [sys.executable, "-P", "-m", "cli.main", "--instance", _url(folder, side.catalog_file),
               "run", "--log-level", "INFO"]
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("BROKER_URL", "BROKER_INSTANCE", "BROKER_DATABASE")}
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                   env=environment)
    return Server(side, process, log)


def _listening(server: Server) -> bool:
    return f"endpoint {server.side.endpoint} listening on" in _log(server)


def _stop(servers: Sequence[Server]) -> None:
    """SIGTERM to every process still running, then wait; kill what has not stopped by
    the deadline."""
    for server in servers:
        if server.process.poll() is None:
            server.process.terminate()
    deadline = time.monotonic() + STOP_SECONDS
    for server in servers:
        try:
            server.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()


def _wait_for(what: str, condition: Callable[[], bool], servers: Sequence[Server]) -> None:
    """Wait until ``condition()`` holds, or fail: after ``DELIVERY_SECONDS``, or at once
    when a process has exited."""
    deadline = time.monotonic() + DELIVERY_SECONDS
    while not condition():
        for server in servers:
            status = server.process.poll()
            if status is not None:
                raise click.ClickException(
                    f"the {server.side.role} instance's `broker run` exited with status {status}; "
                    f"the end of {server.log}:\n{_tail(server)}")
        if time.monotonic() > deadline:
            raise click.ClickException(f"the instances did not {what} within {DELIVERY_SECONDS:g} seconds; "
                                       f"see {' and '.join(str(s.log) for s in servers)}")
        time.sleep(CHECK_SECONDS)


def _log(server: Server) -> str:
    return server.log.read_text(encoding="utf-8", errors="replace")


def _tail(server: Server) -> str:
    return "\n".join(_log(server).splitlines()[-LOG_TAIL_LINES:])


# -- steps 7 to 9: the conversation -----------------------------------------------------------


def _initiator_sends_request(target: Opened, initiator: Opened,
                             servers: Sequence[Server]) -> tuple[uuid.UUID, uuid.UUID]:
    """Step 7: BEGIN DIALOG WITH ENCRYPTION = ON and SEND in InstInitiatorDB; the request
    crosses to InstTargetDB."""
    with initiator.db.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, encryption=True)
        tx.send(handle, message_type=REQUEST_TYPE, body=REQUEST_BODY.encode())
    [endpoint] = initiator.db.catalog("sys.conversation_endpoints", conversation_handle=handle)
    conversation_id: uuid.UUID = endpoint["conversation_id"]
    say(7, f"In {INITIATOR.database}: began a dialog from {INITIATOR_SERVICE}")
    more(f"to {TARGET_SERVICE} (ENCRYPTION = ON: the binding {TARGET.binding} allows it):")
    more(f"handle {handle}, conversation id {conversation_id}.")
    more(f"Sent the request and committed: {REQUEST_BODY}")
    _wait_for(
        f"deliver the request to {TARGET.database}",
        lambda: target.db.queue_counts(TARGET.queue).get(1) == 1 and not initiator.db.catalog("sys.transmission_queue"),
        servers,
    )
    more(f"It waited in {INITIATOR.database}'s sys.transmission_queue until the target instance acknowledged it:")
    more(f"the initiator's process sent it over TLS to {LOOPBACK}:{target.port} (route {TARGET.route}), the target's")
    more(f"put it in {TARGET.queue} (its msdb route {TARGET.route} is LOCAL) and acknowledged it once")
    more(f"committed. {INITIATOR.database}'s transmission queue is empty again.")
    show_queue(target.db, TARGET.queue)
    [endpoint] = initiator.db.catalog("sys.conversation_endpoints", conversation_handle=handle)
    same = endpoint["far_broker_instance"] == str(target.db.service_broker_guid)
    more(f"The initiator's far_broker_instance is now {endpoint['far_broker_instance']},")
    more(f"{TARGET.database}'s service_broker_guid{'' if same else ' (NOT: something is wrong)'}.")
    _show_connection(initiator, target, servers)
    return handle, conversation_id


def _show_connection(initiator: Opened, target: Opened, servers: Sequence[Server]) -> None:
    """The initiator instance's connection to the target's endpoint, as its process writes
    ``sys.dm_broker_connections`` (every second)."""
    address = f"{LOOPBACK}:{target.port}"

    def online() -> list[dict[str, object]]:
        return [row for row in initiator.inst.catalog("sys.dm_broker_connections", address=address, is_accept=0)
                if row["login_state_desc"] == "ONLINE"]

    _wait_for(f"show the connection to {address}", lambda: bool(online()), servers)
    row = online()[0]
    more(f"sys.dm_broker_connections of the initiator instance: to {address}, {row['state_desc']}, "
         f"login {row['login_state_desc']},")
    more(f"peer {row['principal_name']}, encryption {row['encryption_algorithm_desc']}.")


def _target_replies_and_ends(target: Opened, initiator: Opened, conversation_id: uuid.UUID,
                             servers: Sequence[Server]) -> None:
    """Step 8: InstTargetDB receives, replies and ends; the reply and the EndDialog cross back."""
    with target.db.transaction() as tx:
        request = reply_and_end(tx, TARGET.queue, REQUEST_TYPE, REPLY_TYPE)
    say(8, f"In {TARGET.database}: received the request on the target's own handle {request.conversation_handle}:")
    more(text(request.message_body))
    more("Sent the reply, ended the target's side of the conversation and committed. The reply and")
    more(f"the EndDialog waited in {TARGET.database}'s sys.transmission_queue until the initiator instance")
    _wait_for(
        f"bring the reply and the EndDialog to {INITIATOR.database}",
        lambda: sum(initiator.db.queue_counts(INITIATOR.queue).values()) == 2
        and not target.db.catalog("sys.transmission_queue")
        and _state(target.db, conversation_id) == "CD",
        servers,
    )
    more(f"acknowledged them (route {INITIATOR.route}, to {LOOPBACK}:{initiator.port}); that acknowledgement")
    more("closed the target's side.")
    show_queue(initiator.db, INITIATOR.queue)
    _show_both_endpoints(target, initiator, conversation_id)


def _initiator_receives_and_ends(target: Opened, initiator: Opened, handle: uuid.UUID,
                                 conversation_id: uuid.UUID) -> None:
    """Step 9: InstInitiatorDB receives the reply and ends its side."""
    with initiator.db.transaction() as tx:
        reply = receive_one(tx, INITIATOR.queue, REPLY_TYPE)
        tx.end_conversation(reply.conversation_handle)
    if reply.conversation_handle != handle:
        raise click.ClickException(f"the reply came on handle {reply.conversation_handle}, not {handle}")
    say(9, f"In {INITIATOR.database}: received the reply on handle {reply.conversation_handle}:")
    more(text(reply.message_body))
    more("Ended the conversation and committed; END CONVERSATION discarded the EndDialog")
    more(f"and sent nothing: the target's side had ended. {INITIATOR.database}'s transmission queue holds "
         f"{plural(len(initiator.db.catalog('sys.transmission_queue')), 'message')}.")
    show_queue(initiator.db, INITIATOR.queue)
    _show_both_endpoints(target, initiator, conversation_id)


def _state(db: broker.Broker, conversation_id: uuid.UUID) -> str | None:
    rows = db.catalog("sys.conversation_endpoints", conversation_id=conversation_id)
    return str(rows[0]["state"]) if rows else None


def _describe(db: broker.Broker, conversation_id: uuid.UUID) -> str:
    rows = db.catalog("sys.conversation_endpoints", conversation_id=conversation_id)
    return f"{rows[0]['state']} ({rows[0]['state_desc']})" if rows else "endpoint gone"


def _show_both_endpoints(target: Opened, initiator: Opened, conversation_id: uuid.UUID) -> None:
    more(f"sys.conversation_endpoints: initiator {_describe(initiator.db, conversation_id)} in "
         f"{INITIATOR.database}, target {_describe(target.db, conversation_id)} in {TARGET.database}.")


# -- afterwards -------------------------------------------------------------------------------


def _look_around(folder: Path) -> None:
    click.echo("\nDone. The instances, their databases and the logs stay in place; look at them with")
    target, initiator = (sqlite_url(folder, side.catalog_file) for side in (TARGET, INITIATOR))
    for command in (
        f"--instance {target} status",
        f"--instance {target} show broker-endpoints",
        f"--instance {initiator} --database {INITIATOR.database} show routes",
        f"--instance {target} --database {TARGET.database} show endpoints",
    ):
        click.echo(f"  broker {command}")
    click.echo(f"To serve an instance again: broker --instance {target} run")
    click.echo("Running the demo again starts over.")


def _url(folder: Path, file: str) -> str:
    """The absolute ``sqlite:///`` URL of ``file`` in ``folder``, for another process."""
    return f"sqlite:///{(folder / file).resolve()}"

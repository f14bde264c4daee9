"""Dialogs between two instances over TCP with mutual TLS (spec 12.3, issue 14).

Each instance is a catalog and one member database; each runs its runtime (in this
process, as threads) with a Service Broker endpoint on a free loopback port, certificates
made with ``cryptography``, and routes to the other's service. The layouts: every
database on SQLite, and a target instance whose database is on PostgreSQL.
"""

from __future__ import annotations

import random
import socket
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import BACKENDS
from faultproxy import FaultProxy
from sqlalchemy import func, select, update
from support import (
    BETWEEN_CONTRACT,
    BETWEEN_INITIATOR_QUEUE,
    BETWEEN_INITIATOR_SERVICE,
    BETWEEN_REPLY,
    BETWEEN_REQUEST,
    BETWEEN_TARGET_QUEUE,
    BETWEEN_TARGET_SERVICE,
    wait_until,
)
from two_instances import Pair, Side, assert_exactly_once_in_order, send_many, trust_each_other, two_instances

import broker
from broker.conversations.endpoints import fragments, transmissions
from broker.conversations.frames import FRAGMENT_BYTES
from broker.ddl.certificates import create_certificate

DEADLINE_S = 30.0
LAYOUTS = {"sqlite": "sqlite", "mixed": "postgresql"}  # the target instance's database


@pytest.fixture(params=[layout for layout, backend in LAYOUTS.items() if backend in BACKENDS])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Pair]:
    target_url = f"sqlite:///{tmp_path / 'target.db'}"
    created = None
    if LAYOUTS[request.param] == "postgresql":
        databases = request.getfixturevalue("postgres_databases")
        created = databases.create(empty=False)
        target_url = databases.url_of(created)
    pair = two_instances(tmp_path, target_url)
    yield pair
    for side in (pair.initiator, pair.target):
        side.inst.dispose()
    if created is not None:
        request.getfixturevalue("postgres_databases").drop(created)


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except OSError:
        return False
    return True


def bodies(db: broker.Broker, queue: str) -> list[bytes | None]:
    return [m.message_body for m in db.queue_rows(queue)]


def test_the_tutorial_between_instances(pair: Pair) -> None:
    trust_each_other(pair)
    initiator, target = pair.initiator, pair.target
    with initiator.inst.runtime(), target.inst.runtime():
        handle = pair.begin()
        wait_until(lambda: len(target.db.queue_rows(BETWEEN_TARGET_QUEUE)) == 1, DEADLINE_S)
        wait_until(lambda: not initiator.held(), DEADLINE_S)  # acknowledged: gone from the sender
        with target.db.transaction() as tx:
            [request] = tx.receive(BETWEEN_TARGET_QUEUE)
            assert request.message_body == b"<RequestMsg>Message for Target service.</RequestMsg>"
            tx.send(request.conversation_handle, BETWEEN_REPLY, "<ReplyMsg>Message for Initiator service.</ReplyMsg>")
            tx.end_conversation(request.conversation_handle)
        wait_until(lambda: len(initiator.db.queue_rows(BETWEEN_INITIATOR_QUEUE)) == 2, DEADLINE_S)
        with initiator.db.transaction() as tx:
            reply, end = tx.receive(BETWEEN_INITIATOR_QUEUE, 2)
            assert reply.message_body == b"<ReplyMsg>Message for Initiator service.</ReplyMsg>"
            assert end.message_type_name == "http://schemas.microsoft.com/SQL/ServiceBroker/EndDialog"
            assert reply.conversation_handle == handle
            tx.end_conversation(handle)
        wait_until(lambda: not target.held() and not initiator.held(), DEADLINE_S)
        wait_until(lambda: not initiator.db.catalog("sys.conversation_endpoints"), DEADLINE_S)
        [row] = target.db.catalog("sys.conversation_endpoints")
        assert row["state"] == "CD"
        assert row["far_broker_instance"] == str(initiator.db.service_broker_guid)
        wait_until(lambda: any(c["is_accept"] and c["state_desc"] == "LOGGED_IN"
                               for c in target.inst.catalog("sys.dm_broker_connections")), DEADLINE_S)


def test_messages_keep_their_order_and_arrive_once(pair: Pair) -> None:
    trust_each_other(pair)
    with pair.initiator.inst.runtime(), pair.target.inst.runtime():
        handles = [pair.begin(f"<m>{d}-0</m>") for d in range(5)]
        with pair.initiator.db.transaction() as tx:
            for n in range(1, 60):
                for d, handle in enumerate(handles):
                    tx.send(handle, BETWEEN_REQUEST, f"<m>{d}-{n}</m>")
        wait_until(lambda: not pair.initiator.held(), DEADLINE_S)
    by_dialog: dict[uuid.UUID, list[int]] = {}
    for message in pair.target.db.queue_rows(BETWEEN_TARGET_QUEUE):
        by_dialog.setdefault(message.conversation_handle, []).append(message.message_sequence_number)
    assert len(by_dialog) == 5
    assert all(sequence == list(range(60)) for sequence in by_dialog.values())


def test_an_untrusted_peer_is_refused_and_nothing_reaches_a_queue(pair: Pair) -> None:
    stranger, _ = create_certificate("stranger")
    pair.initiator.endpoint([pair.target.certificate])
    pair.target.endpoint([stranger])  # the target does not trust the initiator
    with pair.initiator.inst.runtime(), pair.target.inst.runtime():
        pair.begin()
        wait_until(lambda: any(row["transmission_status"].startswith("Connection handshake failed")
                               for row in pair.initiator.held()), DEADLINE_S)
        wait_until(lambda: any(c["is_accept"] and c["refusal"] for c in
                               pair.target.inst.catalog("sys.dm_broker_connections")), DEADLINE_S)
    assert pair.target.db.queue_rows(BETWEEN_TARGET_QUEUE) == []
    [held] = pair.initiator.held()
    assert held["transmission_status"].startswith("Connection handshake failed")


def test_an_expired_certificate_is_refused(pair: Pair) -> None:
    expired, expired_key = create_certificate("initiator instance", days=1,
                                              start_date=datetime.now(UTC) - timedelta(days=10))
    pair.initiator.certificate, pair.initiator.key = expired, expired_key
    trust_each_other(pair)
    with pair.initiator.inst.runtime(), pair.target.inst.runtime():
        pair.begin()
        wait_until(lambda: any(c["is_accept"] and c["refusal"] for c in
                               pair.target.inst.catalog("sys.dm_broker_connections")), DEADLINE_S)
    assert pair.target.db.queue_rows(BETWEEN_TARGET_QUEUE) == []
    assert len(pair.initiator.held()) == 1


def test_plain_tcp_and_garbage_are_refused_and_the_endpoint_still_serves(pair: Pair) -> None:
    trust_each_other(pair)
    with pair.target.inst.runtime():
        rng = random.Random(7)
        for size in (0, 1, 5, 64, 4096):
            with socket.create_connection(("127.0.0.1", pair.target.port), timeout=5) as plain:
                plain.sendall(bytes(rng.randrange(256) for _ in range(size)))
                plain.shutdown(socket.SHUT_WR)
                plain.settimeout(5)
                while plain.recv(4096):  # the endpoint closes the connection
                    pass
        wait_until(lambda: sum(1 for c in pair.target.inst.catalog("sys.dm_broker_connections")
                               if c["refusal"]) >= 5, DEADLINE_S)
        with pair.initiator.inst.runtime():
            pair.begin()
            wait_until(lambda: len(pair.target.db.queue_rows(BETWEEN_TARGET_QUEUE)) == 1, DEADLINE_S)


def test_an_endpoint_that_is_not_there_leaves_the_message_waiting_with_the_reason(pair: Pair) -> None:
    trust_each_other(pair)  # the target's runtime never runs: nothing listens on its port
    with pair.initiator.inst.runtime():
        pair.begin()
        wait_until(lambda: any(row["transmission_status"].startswith("Connection attempt failed")
                               for row in pair.initiator.held()), DEADLINE_S)
    with pair.initiator.inst.runtime(), pair.target.inst.runtime():  # the next retry gets through
        wait_until(lambda: len(pair.target.db.queue_rows(BETWEEN_TARGET_QUEUE)) == 1, 60.0)


def test_without_an_endpoint_a_tcp_route_waits_for_the_transport(pair: Pair) -> None:
    with pair.initiator.inst.runtime():
        pair.begin()
        wait_until(lambda: any(row["transmission_status"] ==
                               "The Service Broker protocol transport is disabled or not configured."
                               for row in pair.initiator.held()), DEADLINE_S)


# -- network faults: the proxy between the two endpoints ------------------------------------------


def through_proxy(pair: Pair, proxy: FaultProxy) -> None:
    host, port = proxy.address
    pair.initiator.db.alter_route("InstTargetRoute", address=f"TCP://{host}:{port}")


# Every fault breaks the TLS record it lands in: duplicate and reorder take the same
# path as corrupt, so they run with the slow tests.
@pytest.mark.parametrize("fault", ["cut", "corrupt", pytest.param("duplicate", marks=pytest.mark.slow),
                                   pytest.param("reorder", marks=pytest.mark.slow)])
def test_faults_on_the_wire_lose_nothing_and_deliver_nothing_twice(pair: Pair, fault: str) -> None:
    trust_each_other(pair)
    with FaultProxy(("127.0.0.1", pair.target.port), seed=11) as proxy:
        through_proxy(pair, proxy)
        proxy.set_faults(**{fault: 0.3})
        with pair.initiator.inst.runtime(), pair.target.inst.runtime():
            send_many(pair, dialogs=10, per_dialog=100)
            wait_until(lambda: proxy.stats.faults.get(fault, 0) >= 2, 120.0, interval=0.05)
            proxy.set_faults()  # the sender's retries now get through
            wait_until(lambda: not pair.initiator.held(), 240.0, interval=0.1)
    assert_exactly_once_in_order(pair, dialogs=10, per_dialog=100)


def test_a_stalled_connection_delivers_once_it_flows_again(pair: Pair) -> None:
    trust_each_other(pair)
    with FaultProxy(("127.0.0.1", pair.target.port)) as proxy:
        through_proxy(pair, proxy)
        with pair.initiator.inst.runtime(), pair.target.inst.runtime():
            pair.begin("<m>0-0</m>")
            wait_until(lambda: pair.target.db.queue_rows(BETWEEN_TARGET_QUEUE), DEADLINE_S)
            proxy.pause()
            with pair.initiator.db.transaction() as tx:
                [handle] = [row["conversation_handle"] for row in pair.initiator.db.catalog(
                    "sys.conversation_endpoints")]
                for n in range(1, 50):
                    tx.send(handle, BETWEEN_REQUEST, f"<m>0-{n}</m>")
            wait_until(lambda: sum(c["total_fragments_sent"] for c in pair.initiator.inst.catalog(
                "sys.dm_broker_connections") if not c["is_accept"]) >= 50, DEADLINE_S)  # sent into the stall
            assert len(pair.target.db.queue_rows(BETWEEN_TARGET_QUEUE)) == 1  # nothing passes it
            # The peer answers no PING through the stall: the sender gives the connection up.
            wait_until(lambda: any(str(row["transmission_status"]).startswith(
                "An error occurred while receiving data: 'the remote endpoint sent nothing")
                for row in pair.initiator.held()), DEADLINE_S)
            proxy.resume()
            wait_until(lambda: not pair.initiator.held(), 120.0, interval=0.1)
    assert_exactly_once_in_order(pair, dialogs=1, per_dialog=50)


def test_encryption_on_without_a_remote_service_binding_waits_with_9727(pair: Pair) -> None:
    trust_each_other(pair)
    pair.initiator.db.drop_remote_service_binding("TargetBinding")
    with pair.initiator.inst.runtime(), pair.target.inst.runtime():
        pair.begin()
        wait_until(lambda: any(str(row["transmission_status"]).startswith("Dialog security is not available")
                               for row in pair.initiator.held()), DEADLINE_S)
        with pair.initiator.db.transaction() as tx:  # ENCRYPTION = OFF needs no binding
            handle = tx.begin_dialog(BETWEEN_INITIATOR_SERVICE, BETWEEN_TARGET_SERVICE, BETWEEN_CONTRACT,
                                     encryption=False)
            tx.send(handle, BETWEEN_REQUEST, "<m>clear</m>")
        wait_until(lambda: bodies(pair.target.db, BETWEEN_TARGET_QUEUE) == [b"<m>clear</m>"], DEADLINE_S)
    assert len(pair.initiator.held()) == 1


def test_an_instance_that_does_not_forward_refuses_what_its_routes_send_elsewhere(pair: Pair) -> None:
    trust_each_other(pair)
    pair.target.inst.create_route("Elsewhere", "TCP://192.0.2.1:4022", service_name=BETWEEN_TARGET_SERVICE)
    with pair.initiator.inst.runtime(), pair.target.inst.runtime():
        pair.begin()
        wait_until(lambda: any(row["transmission_status"] == "Could not forward the message because forwarding "
                               "is disabled in this SQL Server instance." for row in pair.initiator.held()),
                   DEADLINE_S)
    assert pair.target.db.queue_rows(BETWEEN_TARGET_QUEUE) == []


def test_broker_status_shows_the_endpoint_and_its_connections(pair: Pair) -> None:
    import json

    from click.testing import CliRunner

    from cli.main import cli

    trust_each_other(pair)
    with pair.initiator.inst.runtime(), pair.target.inst.runtime():
        pair.begin()
        wait_until(lambda: not pair.initiator.held(), DEADLINE_S)
        wait_until(lambda: pair.target.inst.catalog("sys.dm_broker_connections"), DEADLINE_S)
        url = pair.target.inst.msdb.engine.url.render_as_string(hide_password=False)
        result = CliRunner().invoke(cli, ["--instance", url, "status", "--json"])
        assert result.exit_code == 0, result.output
        summary = json.loads(result.output)
        assert summary["endpoint"]["port"] == pair.target.port and summary["endpoint"]["state"] == "STARTED"
        [accepted] = [c for c in summary["connections"] if c["is_accept"]]
        assert accepted["state_desc"] == "LOGGED_IN" and accepted["principal_name"] == "initiator instance"
        assert accepted["total_fragments_received"] >= 1
        text = CliRunner().invoke(cli, ["--instance", url, "status"])
        assert f"on 127.0.0.1:{pair.target.port}: STARTED" in text.output and "Connections" in text.output


def test_broker_status_counts_the_backlog_by_next_hop(pair: Pair) -> None:
    import json

    from click.testing import CliRunner

    from cli.main import cli

    trust_each_other(pair)
    pair.begin()
    pair.begin()  # no runtime: both wait in the initiator's transmission queue
    url = pair.initiator.inst.msdb.engine.url.render_as_string(hide_password=False)
    result = CliRunner().invoke(cli, ["--instance", url, "status", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["backlog_by_peer"] == [
        {"peer": f"TCP://127.0.0.1:{pair.target.port}", "count": 2}]
    text = CliRunner().invoke(cli, ["--instance", url, "status"]).output
    assert "Awaiting delivery, by next hop" in text and f"TCP://127.0.0.1:{pair.target.port}" in text
    with pair.initiator.inst.runtime(), pair.target.inst.runtime():
        wait_until(lambda: not pair.initiator.held(), DEADLINE_S)
    result = CliRunner().invoke(cli, ["--instance", url, "status", "--json"])
    assert json.loads(result.output)["backlog_by_peer"] == []


def test_an_endpoint_altered_while_its_runtime_runs_takes_effect(pair: Pair) -> None:
    stranger, _ = create_certificate("stranger")
    pair.initiator.endpoint([pair.target.certificate])
    pair.target.endpoint([stranger])
    name = f"Endpoint{pair.target.port}"
    with pair.initiator.inst.runtime(), pair.target.inst.runtime():
        pair.begin("<m>0</m>")
        wait_until(lambda: any(str(row["transmission_status"]).startswith("Connection handshake failed")
                               for row in pair.initiator.held()), DEADLINE_S)
        pair.target.inst.alter_endpoint(name, trusted_peers=[pair.initiator.certificate])  # GRANT CONNECT
        wait_until(lambda: bodies(pair.target.db, BETWEEN_TARGET_QUEUE) == [b"<m>0</m>"], 60.0)
        pair.target.inst.alter_endpoint(name, state="STOPPED")
        wait_until(lambda: not listening(pair.target.port), DEADLINE_S)
        pair.begin("<m>1</m>")
        wait_until(lambda: any(str(row["transmission_status"]).startswith("Connection attempt failed")
                               for row in pair.initiator.held()), DEADLINE_S)
    assert bodies(pair.target.db, BETWEEN_TARGET_QUEUE) == [b"<m>0</m>"]


LARGE = "<m>" + "".join(f"{n:08d}" for n in range(FRAGMENT_BYTES * 5 // 8)) + "</m>"  # 5 MiB and 7 bytes


def test_a_large_message_travels_in_fragments_behind_the_small_ones(pair: Pair) -> None:
    trust_each_other(pair)
    pair.begin(LARGE)
    pair.begin("<m>small</m>")
    with pair.initiator.inst.runtime(), pair.target.inst.runtime():
        wait_until(lambda: not pair.initiator.held(), 120.0, interval=0.05)
        wait_until(lambda: any(c["total_fragments_sent"] >= 7  # 6 fragments (5 of 1 MiB) and the small message
                               for c in pair.initiator.inst.catalog("sys.dm_broker_connections")), DEADLINE_S)
    rows = pair.target.db.queue_rows(BETWEEN_TARGET_QUEUE)
    assert [row.message_body for row in rows] == [b"<m>small</m>", LARGE.encode()]  # the small one went first
    assert {row.status for row in rows} == {1}
    assert stored_fragments(pair.target) == 0


SMALL_SERVICE = "//TgtDB/2InstSample/SmallService"


def stored_fragments(side: Side) -> int:
    """How many fragments of incomplete messages ``side``'s database holds."""
    with side.db.transaction() as tx:
        return int(tx.run(lambda ctx: ctx.conn.execute(select(func.count()).select_from(fragments)).scalar_one()))


def fragments_held(side: Side) -> list[tuple[int, str | None]]:
    """(fragments held, by which broker instance) of each message ``side`` has yet to send."""
    with side.db.transaction() as tx:
        return tx.run(lambda ctx: [(row.fragments_held, row.fragments_held_by) for row in ctx.conn.execute(
            select(transmissions.c.fragments_held, transmissions.c.fragments_held_by))])


def test_a_large_message_cut_off_midway_goes_on_from_the_first_fragment_not_held(pair: Pair) -> None:
    trust_each_other(pair)
    initiator, target = pair.initiator, pair.target
    # A second service of the target, reached without the proxy: its dialog passes while the proxy refuses.
    target.db.create_service(SMALL_SERVICE, BETWEEN_TARGET_QUEUE, [BETWEEN_CONTRACT])
    initiator.db.create_route("SmallRoute", f"TCP://127.0.0.1:{target.port}", service_name=SMALL_SERVICE)
    guid = str(target.db.service_broker_guid)
    with FaultProxy(("127.0.0.1", target.port)) as proxy:
        through_proxy(pair, proxy)
        # Fragments 0-2 fill the first DATA batch (3 MiB), which is answered; the connection
        # is cut in the second, and no other connection gets through until the test says so.
        proxy.set_faults(drop_connection_after_bytes=FRAGMENT_BYTES * 7 // 2, direction="to_target")
        with initiator.inst.runtime(), target.inst.runtime() as target_runtime:
            assert target_runtime.endpoint is not None
            listener = target_runtime.endpoint
            wait_until(lambda: listening(target.port), DEADLINE_S)  # the first connection is the message's
            pair.begin(LARGE)
            proxy.wait_for_connections(1, DEADLINE_S)
            proxy.refuse(True)
            wait_until(lambda: fragments_held(initiator) == [(3, guid)], DEADLINE_S)
            wait_until(lambda: initiator.held()[0]["transmission_status"], DEADLINE_S)  # refused: it backs off
            [partial] = target.db.queue_rows(BETWEEN_TARGET_QUEUE)
            assert (partial.status, partial.message_body, partial.message_type_name) == (2, None, BETWEEN_REQUEST)
            assert stored_fragments(target) == 3
            [endpoint] = target.db.catalog("sys.conversation_endpoints")
            assert (endpoint["state"], endpoint["receive_sequence_frag"]) == ("SI", 3)
            with target.db.transaction() as tx:
                assert tx.receive(BETWEEN_TARGET_QUEUE) == []
            with initiator.db.transaction() as tx:  # another dialog's small message passes the incomplete one
                small = tx.begin_dialog(BETWEEN_INITIATOR_SERVICE, SMALL_SERVICE, BETWEEN_CONTRACT, encryption=False)
                tx.send(small, BETWEEN_REQUEST, "<m>small</m>")
            wait_until(lambda: b"<m>small</m>" in bodies(target.db, BETWEEN_TARGET_QUEUE), DEADLINE_S)
            assert [(m.status, m.message_body) for m in target.db.queue_rows(BETWEEN_TARGET_QUEUE)] == [
                (2, None), (1, b"<m>small</m>")]
            # What the target reads, on whichever connection: the two instances now share the
            # direct one the small message opened, and the rest of the large one goes there.
            before = sum(c.total_bytes_received for c in listener.connections())
            proxy.set_faults()
            proxy.refuse(False)
            due_now(initiator)  # its back-off is not what this test is about
            wait_until(lambda: len(initiator.held()) == 0, 60.0, interval=0.05)
            resent = sum(c.total_bytes_received for c in listener.connections()) - before
    # Fragments 3 to 5 went again (2 MiB and 7 bytes, and the connection's own bytes), not the 5 MiB.
    assert 2 * FRAGMENT_BYTES < resent < 3 * FRAGMENT_BYTES
    rows = target.db.queue_rows(BETWEEN_TARGET_QUEUE)
    assert sorted((m.status, m.message_body) for m in rows) == sorted([(1, b"<m>small</m>"), (1, LARGE.encode())])
    assert stored_fragments(target) == 0
    assert {e["state"] for e in target.db.catalog("sys.conversation_endpoints")} == {"CO"}


def due_now(side: Side) -> None:
    """Make every message ``side`` waits to send due at once (its commit wakes the transmitter)."""
    with side.db.transaction() as tx:
        tx.run(lambda ctx: ctx.conn.execute(update(transmissions).values(next_attempt_time=ctx.now())))

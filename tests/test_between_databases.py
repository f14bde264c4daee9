"""Dialogs between the databases of one instance (spec 7.3-7.6, 8, 12.2).

Every test runs on an instance of SQLite files, of PostgreSQL databases, and on a mixed
one (the target's database on PostgreSQL). The runtime's transmitter moves the messages;
most tests drive it one pass at a time (``Transmitter.run_pass``) so that each step is
observable, and the tutorial runs it as a thread, as ``broker --instance URL run`` does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from support import (
    BETWEEN_CONTRACT,
    BETWEEN_INITIATOR_QUEUE,
    BETWEEN_INITIATOR_SERVICE,
    BETWEEN_REPLY,
    BETWEEN_REQUEST,
    BETWEEN_TARGET_QUEUE,
    BETWEEN_TARGET_SERVICE,
    between_databases,
    wait_until,
)

import broker
from broker.conversations.arrival import arrive
from broker.conversations.frames import MessageFrame
from broker.routing.matching import NO_ROUTE, SERVICE_NOT_FOUND
from broker.runtime.transmitter import Transmitter

REQUEST, REPLY, CONTRACT = BETWEEN_REQUEST, BETWEEN_REPLY, BETWEEN_CONTRACT
TARGET_SERVICE, INITIATOR_SERVICE = BETWEEN_TARGET_SERVICE, BETWEEN_INITIATOR_SERVICE
TARGET_QUEUE, INITIATOR_QUEUE = BETWEEN_TARGET_QUEUE, BETWEEN_INITIATOR_QUEUE


@dataclass
class Pair:
    """The tutorial's two databases in one instance (spec 12.2, steps 1-3)."""

    inst: broker.Instance
    initiator: broker.Broker
    target: broker.Broker

    def transmit(self) -> int:
        """One transmitter pass over the instance; messages that left a transmission queue."""
        return Transmitter(lambda: list(self.inst.databases.values())).run_pass()[0]

    def begin(self, body: bytes | str = b"<RequestMsg>Message for Target service.</RequestMsg>",
              **options: object) -> uuid.UUID:
        with self.initiator.transaction() as tx:
            handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, **options)
            tx.send(handle, REQUEST, body)
        return handle

    def endpoint(self, db: broker.Broker) -> dict[str, object]:
        [row] = db.catalog("sys.conversation_endpoints")
        return row


@pytest.fixture
def pair(instance_urls: tuple[str, str, str]) -> Iterator[Pair]:
    catalog_url, initiator_url, target_url = instance_urls
    inst = broker.instance(catalog_url)
    initiator, target = between_databases(inst, initiator_url, target_url)
    yield Pair(inst, initiator, target)
    inst.dispose()


def bodies(db: broker.Broker, queue: str) -> list[bytes | None]:
    return [m.message_body for m in db.queue_rows(queue)]


# -- the tutorial "Completing a Conversation Between Databases" (spec 12.2) --------------------


def test_the_tutorial_between_databases_with_the_runtime(pair: Pair) -> None:
    handle = pair.begin()
    with pair.inst.runtime():
        with pair.target.transaction() as tx:
            [request] = tx.receive(TARGET_QUEUE, timeout=10)
            assert request.message_body == b"<RequestMsg>Message for Target service.</RequestMsg>"
            assert request.service_name == TARGET_SERVICE and request.message_sequence_number == 0
            tx.send(request.conversation_handle, REPLY, b"<ReplyMsg>Message for Initiator service.</ReplyMsg>")
            tx.end_conversation(request.conversation_handle)
        with pair.initiator.transaction() as tx:  # the reply and the EndDialog arrive in one commit
            reply, end = tx.receive(INITIATOR_QUEUE, timeout=10)
            assert reply.message_body == b"<ReplyMsg>Message for Initiator service.</ReplyMsg>"
            assert end.message_type_name == broker.END_DIALOG
            tx.end_conversation(handle)
        wait_until(lambda: not pair.target.catalog("sys.transmission_queue")
                   and pair.endpoint(pair.target)["state"] == "CD")
    assert pair.initiator.catalog("sys.conversation_endpoints") == []  # the initiator's endpoint is gone
    assert pair.initiator.catalog("sys.transmission_queue") == []


def test_each_side_holds_one_endpoint_and_the_first_acknowledgement_names_the_target(pair: Pair) -> None:
    handle = pair.begin()
    [held] = pair.initiator.catalog("sys.transmission_queue")
    assert held["transmission_status"] == SERVICE_NOT_FOUND  # the initiator's database alone cannot tell
    assert pair.endpoint(pair.initiator)["far_broker_instance"] is None
    assert pair.transmit() == 1
    initiator, target = pair.endpoint(pair.initiator), pair.endpoint(pair.target)
    assert initiator["conversation_handle"] == handle and initiator["state"] == "CO"
    assert initiator["far_broker_instance"] == str(pair.target.service_broker_guid)
    assert target["conversation_id"] == initiator["conversation_id"]
    assert target["conversation_handle"] != handle and target["state"] == "CO"
    assert target["far_broker_instance"] == str(pair.initiator.service_broker_guid)
    assert target["far_service"] == INITIATOR_SERVICE and target["lifetime"] == initiator["lifetime"]
    assert pair.initiator.catalog("sys.transmission_queue") == []
    with pair.initiator.transaction() as tx:
        assert tx.get_transmission_status(handle) == ""


def test_messages_keep_their_order_across_many_passes_and_batches(pair: Pair) -> None:
    handle = pair.begin(b"<m>0</m>")
    with pair.initiator.transaction() as tx:
        for n in range(1, 30):
            tx.send(handle, REQUEST, f"<m>{n}</m>")
    while pair.transmit():
        pass
    assert bodies(pair.target, TARGET_QUEUE) == [f"<m>{n}</m>".encode() for n in range(30)]
    assert [m.message_sequence_number for m in pair.target.queue_rows(TARGET_QUEUE)] == list(range(30))


# -- exactly once: duplicates, order, crashes between commit and acknowledgement --------------


def due_frames(pair: Pair) -> list[MessageFrame]:
    """The frames the transmitter would send now (read, not sent)."""
    from broker.conversations.outbound import due_messages, frames_of
    with pair.initiator.transaction() as tx:
        catalog = tx.run(lambda ctx: ctx.catalog)
        due = tx.run(lambda ctx: due_messages(ctx, 100))
    return frames_of(catalog, due, str(pair.target.service_broker_guid))


def test_a_message_waits_behind_an_earlier_one_of_its_dialog_that_backs_off(pair: Pair) -> None:
    from broker.conversations.outbound import due_messages, wait
    first = pair.begin(b"<m>0</m>")
    other = pair.begin(b"<o>0</o>")
    with pair.initiator.transaction() as tx:
        for n in range(1, 4):
            tx.send(first, REQUEST, f"<m>{n}</m>")
        tx.send(other, REQUEST, "<o>1</o>")
    with pair.initiator.transaction() as tx:
        due = tx.run(lambda ctx: due_messages(ctx, 100))
        second = next(m for m in due if m.conversation_handle == first and m.sequence == 1)
        tx.run(lambda ctx: wait(ctx, [second], "refused for the test"))  # backs off for a while
    with pair.initiator.transaction() as tx:
        due = tx.run(lambda ctx: due_messages(ctx, 100))
    # The dialog's message 0 still goes; 2 and 3 wait behind 1. The other dialog is not held up.
    assert sorted((m.conversation_handle == first, m.sequence) for m in due) == [(False, 0), (False, 1), (True, 0)]
    assert [m.sequence for m in due if m.conversation_handle == first] == [0]


def apply(db: broker.Broker, frames: list[MessageFrame]) -> list[bool]:
    with db.transaction() as tx:
        return [receipt.acknowledged for receipt in tx.run(lambda ctx: arrive(ctx, frames))]


def test_a_duplicate_is_acknowledged_again_and_never_enqueued_twice(pair: Pair) -> None:
    handle = pair.begin(b"<m>0</m>")
    with pair.initiator.transaction() as tx:
        tx.send(handle, REQUEST, b"<m>1</m>")
    frames = due_frames(pair)
    assert apply(pair.target, frames) == [True, True]
    # The acknowledgements were lost (the sender crashed before it settled them): it sends again.
    assert apply(pair.target, frames) == [True, True]
    assert bodies(pair.target, TARGET_QUEUE) == [b"<m>0</m>", b"<m>1</m>"]
    assert pair.transmit() == 2  # and then the sender's own pass settles them
    assert bodies(pair.target, TARGET_QUEUE) == [b"<m>0</m>", b"<m>1</m>"]
    assert pair.initiator.catalog("sys.transmission_queue") == []


def test_a_message_ahead_of_a_gap_waits_with_status_2_until_the_gap_fills(pair: Pair) -> None:
    handle = pair.begin(b"<m>0</m>")
    with pair.initiator.transaction() as tx:
        tx.send(handle, REQUEST, b"<m>1</m>")
        tx.send(handle, REQUEST, b"<m>2</m>")
    first, second, third = due_frames(pair)
    assert apply(pair.target, [third, second]) == [True, True]  # 0 is missing
    assert [(m.status, m.message_sequence_number) for m in pair.target.queue_rows(TARGET_QUEUE)] == [(2, 2), (2, 1)]
    assert pair.endpoint(pair.target)["state"] == "SI"
    assert pair.endpoint(pair.target)["last_out_of_order_sequence"] == 2
    with pair.target.transaction() as tx:
        assert tx.receive(TARGET_QUEUE) == []  # status 2 is never received
    assert apply(pair.target, [first]) == [True]
    assert pair.endpoint(pair.target)["state"] == "CO"
    assert pair.endpoint(pair.target)["last_out_of_order_sequence"] is None
    with pair.target.transaction() as tx:
        assert [m.message_body for m in tx.receive(TARGET_QUEUE)] == [b"<m>0</m>", b"<m>1</m>", b"<m>2</m>"]


# -- what the target refuses ------------------------------------------------------------------


def test_a_body_that_fails_validation_at_the_target_is_error_9615_to_the_sender(pair: Pair) -> None:
    handle = pair.begin(b"<not-closed>")
    assert pair.transmit() == 1
    assert pair.target.queue_rows(TARGET_QUEUE) == []
    assert pair.target.catalog("sys.conversation_endpoints") == []  # nothing was created there
    [error] = pair.initiator.queue_rows(INITIATOR_QUEUE)
    assert error.message_type_name == broker.ERROR and broker.parse_error(error.message_body)[0] == -9615
    assert pair.endpoint(pair.initiator)["state"] == "ER"
    with pair.initiator.transaction() as tx:
        tx.end_conversation(handle)


def test_a_target_without_the_contract_is_error_8408(pair: Pair) -> None:
    pair.target.create_queue("NoContractQueue")
    pair.target.create_service("//TgtDB/NoContract", "NoContractQueue")
    with pair.initiator.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, "//TgtDB/NoContract", CONTRACT)
        tx.send(handle, REQUEST, b"<r/>")
    pair.transmit()
    [error] = pair.initiator.queue_rows(INITIATOR_QUEUE)
    code, description = broker.parse_error(error.message_body)
    assert code == -8408 and CONTRACT in description
    assert pair.endpoint(pair.initiator)["state"] == "ER"
    with pair.initiator.transaction() as tx:
        with pytest.raises(broker.BrokerError) as refused:
            tx.send(handle, REQUEST, b"<again/>")
    assert refused.value.number == 8429


def test_a_target_queue_that_is_off_holds_the_message_at_the_target_until_it_is_on(pair: Pair) -> None:
    pair.target.alter_queue(TARGET_QUEUE, status=False)
    pair.begin()
    assert pair.transmit() == 1  # acknowledged: committed in the target's transmission queue
    assert pair.initiator.catalog("sys.transmission_queue") == []
    [parked] = pair.target.catalog("sys.transmission_queue")
    assert parked["transmission_status"] == f'The service queue "{TARGET_QUEUE}" is currently disabled.'
    pair.target.alter_queue(TARGET_QUEUE, status=True)
    assert len(pair.target.queue_rows(TARGET_QUEUE)) == 1
    assert pair.target.catalog("sys.transmission_queue") == []


def test_a_target_database_whose_broker_is_disabled_holds_the_message_at_the_sender(pair: Pair) -> None:
    pair.target.set_broker_enabled(False)
    handle = pair.begin()
    assert pair.transmit() == 0
    [held] = pair.initiator.catalog("sys.transmission_queue")
    assert held["transmission_status"] == SERVICE_NOT_FOUND
    with pair.initiator.transaction() as tx:
        assert tx.get_transmission_status(handle) == SERVICE_NOT_FOUND
    pair.target.set_broker_enabled(True)
    pair.initiator.catalog("sys.transmission_queue")
    _due_now(pair.initiator)
    assert pair.transmit() == 1
    assert len(pair.target.queue_rows(TARGET_QUEUE)) == 1


def test_a_service_name_in_another_case_is_not_the_service(pair: Pair) -> None:
    with pair.initiator.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE.upper(), CONTRACT)
        tx.send(handle, REQUEST, b"<r/>")
    assert pair.transmit() == 0
    [held] = pair.initiator.catalog("sys.transmission_queue")
    assert held["transmission_status"] == SERVICE_NOT_FOUND
    assert pair.target.queue_rows(TARGET_QUEUE) == []


def test_a_broker_instance_pins_the_database_among_two_with_the_service(pair: Pair) -> None:
    pair.initiator.create_queue("LocalTargetQueue")
    pair.initiator.create_service(TARGET_SERVICE, "LocalTargetQueue", [CONTRACT])  # the same name, here too
    pair.begin(b"<r>local</r>")
    pair.begin(b"<r>current</r>", broker_instance="CURRENT DATABASE")
    pair.begin(b"<r>pinned</r>", broker_instance=str(pair.target.service_broker_guid))
    pair.transmit()
    assert bodies(pair.initiator, "LocalTargetQueue") == [b"<r>local</r>", b"<r>current</r>"]
    assert bodies(pair.target, TARGET_QUEUE) == [b"<r>pinned</r>"]


# -- routes ------------------------------------------------------------------------------------


def test_without_autocreatedlocal_no_route_matches_until_one_is_created(pair: Pair) -> None:
    pair.initiator.drop_route("AutoCreatedLocal")
    handle = pair.begin()
    assert pair.transmit() == 0
    [held] = pair.initiator.catalog("sys.transmission_queue")
    assert held["transmission_status"] == NO_ROUTE
    pair.initiator.create_route("ToTarget", "LOCAL", service_name=TARGET_SERVICE)
    _due_now(pair.initiator)
    assert pair.transmit() == 1
    assert len(pair.target.queue_rows(TARGET_QUEUE)) == 1
    # The reply routes with the target's own routes, which still have AutoCreatedLocal.
    with pair.target.transaction() as tx:
        [request] = tx.receive(TARGET_QUEUE)
        tx.send(request.conversation_handle, REPLY, b"<reply/>")
    assert pair.transmit() == 1
    assert bodies(pair.initiator, INITIATOR_QUEUE) == [b"<reply/>"]
    with pair.initiator.transaction() as tx:
        assert tx.get_transmission_status(handle) == ""


def test_a_tcp_route_waits_for_the_network_transport(pair: Pair) -> None:
    pair.initiator.create_route("Remote", "TCP://far.example:4022", service_name=TARGET_SERVICE)
    pair.begin()
    assert pair.transmit() == 0
    [held] = pair.initiator.catalog("sys.transmission_queue")
    assert held["transmission_status"] == "The Service Broker protocol transport is disabled or not configured."
    assert pair.target.queue_rows(TARGET_QUEUE) == []


# -- ending across databases ----------------------------------------------------------------------


def test_end_with_error_reaches_the_other_database(pair: Pair) -> None:
    handle = pair.begin()
    pair.transmit()
    with pair.target.transaction() as tx:
        [request] = tx.receive(TARGET_QUEUE)
        tx.end_conversation(request.conversation_handle, error=50, description="no stock")
    assert pair.endpoint(pair.target)["state"] == "DO"
    pair.transmit()
    [error] = pair.initiator.queue_rows(INITIATOR_QUEUE)
    assert broker.parse_error(error.message_body) == (50, "no stock")
    assert pair.endpoint(pair.initiator)["state"] == "ER"
    assert pair.endpoint(pair.target)["state"] == "CD"  # acknowledged: closed
    with pair.initiator.transaction() as tx:
        tx.end_conversation(handle)
    assert pair.initiator.catalog("sys.conversation_endpoints") == []


def test_an_enddialog_that_arrives_drops_what_the_receiver_still_had_to_send(pair: Pair) -> None:
    handle = pair.begin()
    pair.transmit()
    # From now on the initiator's messages go to a network address that cannot be reached.
    pair.initiator.create_route("Away", "TCP://far.example:4022", service_name=TARGET_SERVICE,
                                broker_instance=str(pair.target.service_broker_guid))
    with pair.initiator.transaction() as tx:
        tx.send(handle, REQUEST, b"<stuck/>")
    pair.transmit()
    assert len(pair.initiator.catalog("sys.transmission_queue")) == 1
    with pair.target.transaction() as tx:
        [request] = tx.receive(TARGET_QUEUE)
        tx.end_conversation(request.conversation_handle)
    pair.transmit()
    assert pair.endpoint(pair.initiator)["state"] == "DI"
    assert pair.initiator.catalog("sys.transmission_queue") == []  # purged at once, not at a retry


def test_end_with_cleanup_tells_the_other_database_nothing(pair: Pair) -> None:
    handle = pair.begin()
    pair.transmit()
    with pair.initiator.transaction() as tx:
        tx.end_conversation(handle, cleanup=True)
    pair.transmit()
    assert pair.initiator.catalog("sys.conversation_endpoints") == []
    assert pair.endpoint(pair.target)["state"] == "CO"
    assert len(pair.target.queue_rows(TARGET_QUEUE)) == 1


def test_a_lifetime_expires_on_both_sides_each_by_itself(pair: Pair) -> None:
    handle = pair.begin(lifetime=1)
    pair.transmit()
    for db in (pair.initiator, pair.target):
        with db.transaction() as tx:
            tx.run(lambda ctx: _expire(ctx))
    for db, queue in ((pair.initiator, INITIATOR_QUEUE), (pair.target, TARGET_QUEUE)):
        [error] = [m for m in db.queue_rows(queue) if m.message_type_name == broker.ERROR]
        assert broker.parse_error(error.message_body)[0] == -8489
        assert pair.endpoint(db)["state"] == "ER"
    with pair.initiator.transaction() as tx:
        tx.end_conversation(handle)


# -- helpers -------------------------------------------------------------------------------------


def _due_now(db: broker.Broker) -> None:
    """Make every waiting message due at once (instead of after its back-off)."""
    from sqlalchemy import update

    from broker.conversations.endpoints import transmissions
    with db.transaction() as tx:
        tx.run(lambda ctx: ctx.conn.execute(update(transmissions).values(next_attempt_time=ctx.now())))


def _expire(ctx: object) -> None:
    """Move every lifetime into the past and fire what is due, as the scheduler would."""
    from sqlalchemy import update

    from broker.conversations import scheduler
    from broker.conversations.endpoints import endpoints
    ctx.conn.execute(update(endpoints).values(lifetime=datetime.now(UTC) - timedelta(seconds=1)))  # type: ignore[attr-defined]
    scheduler.expire_lifetimes(ctx)  # type: ignore[arg-type]


@pytest.mark.parametrize("honor", [False, True])
def test_honor_broker_priority_orders_the_transmission_queue(pair: Pair, honor: bool) -> None:
    from broker.conversations.outbound import due_messages

    pair.initiator.create_broker_priority("Urgent", contract_name=CONTRACT, priority_level=9)
    pair.initiator.create_contract("//BothDB/Routine", {REQUEST: "INITIATOR"})
    pair.initiator.set_honor_broker_priority(honor)
    with pair.initiator.transaction() as tx:
        routine = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, "//BothDB/Routine")
        tx.send(routine, REQUEST, b"<routine/>")
    pair.begin(b"<urgent/>")
    with pair.initiator.transaction() as tx:
        due = tx.run(lambda ctx: due_messages(ctx, 10))
    assert [m.body for m in due] == ([b"<urgent/>", b"<routine/>"] if honor else [b"<routine/>", b"<urgent/>"])


# -- spec 8.4's outcomes in the default configuration -----------------------------------------


def test_a_service_nowhere_delays_the_dialog_until_its_lifetime_ends(pair: Pair) -> None:
    with pair.initiator.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, "//Nowhere/Service", CONTRACT, lifetime=60)
        tx.send(handle, REQUEST, b"<r/>")
    assert pair.transmit() == 0
    [held] = pair.initiator.catalog("sys.transmission_queue")
    assert held["transmission_status"] == SERVICE_NOT_FOUND
    with pair.initiator.transaction() as tx:
        tx.run(_expire)
    [error] = pair.initiator.queue_rows(INITIATOR_QUEUE)
    assert broker.parse_error(error.message_body)[0] == -8489
    assert pair.initiator.catalog("sys.transmission_queue") == []  # purged at once, before END
    with pair.initiator.transaction() as tx:
        tx.end_conversation(handle)


def test_a_tcp_route_for_one_service_leaves_the_others_local(pair: Pair) -> None:
    pair.target.create_queue("OtherQueue")
    pair.target.create_service("//TgtDB/Other", "OtherQueue", [CONTRACT])
    pair.initiator.create_route("RemoteTarget", "TCP://remote.example:4022", service_name=TARGET_SERVICE)
    pair.begin(b"<r>remote</r>")
    with pair.initiator.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, "//TgtDB/Other", CONTRACT)
        tx.send(handle, REQUEST, b"<r>local</r>")
    assert pair.transmit() == 1
    assert bodies(pair.target, "OtherQueue") == [b"<r>local</r>"]
    assert [r["message_body"] for r in pair.initiator.catalog("sys.transmission_queue")] == [b"<r>remote</r>"]


def test_a_catch_all_tcp_route_serves_only_services_the_instance_lacks(pair: Pair) -> None:
    pair.initiator.create_route("CatchAll", "TCP://gateway.example:4022")
    pair.begin(b"<r>here</r>")
    with pair.initiator.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, "//Elsewhere/Service", CONTRACT)
        tx.send(handle, REQUEST, b"<r>away</r>")
    assert pair.transmit() == 1
    assert bodies(pair.target, TARGET_QUEUE) == [b"<r>here</r>"]
    [held] = pair.initiator.catalog("sys.transmission_queue")
    assert held["message_body"] == b"<r>away</r>"
    assert held["transmission_status"] == "The Service Broker protocol transport is disabled or not configured."


def test_two_routed_databases_share_the_dialogs_and_each_dialog_sticks_to_one(pair: Pair) -> None:
    pair.initiator.create_queue("SecondCopyQueue")
    pair.initiator.create_service(TARGET_SERVICE, "SecondCopyQueue", [CONTRACT])  # the service twice
    for name, db in (("ToTarget", pair.target), ("ToHere", pair.initiator)):
        pair.initiator.create_route(name, "LOCAL", service_name=TARGET_SERVICE,
                                    broker_instance=str(db.service_broker_guid))
    handles = [pair.begin(f"<d>{n}</d>") for n in range(40)]
    while pair.transmit():
        pass
    with pair.initiator.transaction() as tx:
        for handle in handles:
            tx.send(handle, REQUEST, b"<second/>")
    while pair.transmit():
        pass
    where = {}
    for db, queue in ((pair.target, TARGET_QUEUE), (pair.initiator, "SecondCopyQueue")):
        for message in db.queue_rows(queue):
            where.setdefault(message.conversation_handle, (db, []))[1].append(message.message_body)
    assert len(where) == 40 and all(len(received) == 2 for _, received in where.values())
    assert {db is pair.target for db, _ in where.values()} == {True, False}  # both got some (2**-39 odds)


# -- dynamic routing (spec 8.5) -----------------------------------------------------------------


BROKER_CONFIGURATION = "SQL/ServiceBroker/BrokerConfiguration"
NOTICE_CONTRACT = "http://schemas.microsoft.com/SQL/ServiceBroker/BrokerConfigurationNotice"
MISSING_ROUTE_NS = "http://schemas.microsoft.com/SQL/ServiceBroker/BrokerConfigurationNotice/MissingRoute"


def configuration_service(pair: Pair, answer: bool) -> list[str]:
    """The application's BrokerConfiguration service, in the target's database: reads the
    MissingRoute requests, creates a LOCAL route in the initiator's database for each
    service (when ``answer``), and ends the request. The services asked for."""
    from lxml import etree

    asked = []
    with pair.target.transaction() as tx:
        for message in tx.receive("ConfigurationQueue"):
            root = etree.fromstring(message.message_body)
            service = root.findtext(f"{{{MISSING_ROUTE_NS}}}SERVICE_NAME")
            asked.append(service)
            if answer:
                pair.initiator.create_route(f"To {service}", "LOCAL", service_name=service)
                tx.end_conversation(message.conversation_handle)
            else:
                tx.end_conversation(message.conversation_handle, error=1, description="unknown service")
    return asked


def test_a_missing_route_is_asked_of_the_dynamic_routing_service_once_per_service(pair: Pair) -> None:
    pair.target.create_queue("ConfigurationQueue")
    pair.target.create_service(BROKER_CONFIGURATION, "ConfigurationQueue", [NOTICE_CONTRACT])
    pair.initiator.create_route("Dynamic", "LOCAL", service_name=BROKER_CONFIGURATION)
    first, second = pair.begin(b"<r>1</r>"), pair.begin(b"<r>2</r>")
    pair.transmit()  # the requests go out
    held = pair.initiator.catalog("sys.transmission_queue", to_service_name=TARGET_SERVICE)
    assert [r["transmission_status"] for r in held] == [
        "Classification has been delayed because the routing information is currently being updated."] * 2
    third = pair.begin(b"<r>5</r>")  # while the request is pending
    pair.transmit()  # the request reaches the configuration service's database
    assert configuration_service(pair, answer=True) == [TARGET_SERVICE]  # one request for three dialogs
    for _ in range(3):
        pair.transmit()  # the EndDialog comes back, the request ends, routing runs again
    assert sorted(bodies(pair.target, TARGET_QUEUE)) == [b"<r>1</r>", b"<r>2</r>", b"<r>5</r>"]
    assert pair.initiator.catalog("sys.transmission_queue") == []
    assert [e["far_service"] for e in pair.initiator.catalog("sys.conversation_endpoints")
            if e["far_service"] == BROKER_CONFIGURATION] == []  # the request's dialog is over
    with pair.initiator.transaction() as tx:
        tx.send(first, REQUEST, b"<r>3</r>")
        tx.send(third, REQUEST, b"<r>4</r>")
    pair.transmit()
    assert bodies(pair.target, TARGET_QUEUE)[3:] == [b"<r>3</r>", b"<r>4</r>"]
    assert second != third


def test_a_request_ended_with_an_error_leaves_the_dialog_delayed(pair: Pair) -> None:
    pair.target.create_queue("ConfigurationQueue")
    pair.target.create_service(BROKER_CONFIGURATION, "ConfigurationQueue", [NOTICE_CONTRACT])
    pair.initiator.create_route("Dynamic", "LOCAL", service_name=BROKER_CONFIGURATION)
    pair.begin()
    pair.transmit()
    pair.transmit()
    assert configuration_service(pair, answer=False) == [TARGET_SERVICE]
    for _ in range(3):
        pair.transmit()
    [held] = pair.initiator.catalog("sys.transmission_queue")
    assert held["transmission_status"].startswith("Classification has been delayed")
    assert pair.target.queue_rows(TARGET_QUEUE) == []


# -- the transmitter never waits for an application's locks (PostgreSQL's row locks) ------------


@pytest.mark.parametrize("instance_urls", ["postgresql"], indirect=True)
def test_the_transmitter_settles_around_an_application_that_holds_a_dialog(pair: Pair) -> None:
    import threading

    first, second = pair.begin(b"<d1>0</d1>"), pair.begin(b"<d2>0</d2>")
    pair.transmit()  # both acknowledged: later messages go straight to the target's database
    with pair.initiator.transaction() as tx:
        tx.send(first, REQUEST, b"<d1>1</d1>")
        tx.send(second, REQUEST, b"<d2>1</d2>")
    with pair.initiator.transaction() as producer:
        producer.send(second, REQUEST, b"<d2>2</d2>")  # holds the second dialog's group and endpoint
        passed = threading.Thread(target=pair.transmit)
        passed.start()
        passed.join(30)
        assert not passed.is_alive()  # it did not wait for the producer (it used to deadlock here)
        producer.send(first, REQUEST, b"<d1>2</d1>")  # nor does the producer wait for it
    while pair.transmit():
        pass
    assert bodies(pair.target, TARGET_QUEUE) == [b"<d1>0</d1>", b"<d2>0</d2>", b"<d1>1</d1>", b"<d2>1</d2>",
                                                 b"<d2>2</d2>", b"<d1>2</d1>"]
    assert pair.initiator.catalog("sys.transmission_queue") == []

"""Broker priorities (spec 1.8, 4.9, 11 and 12.5 item 16).

A priority is chosen for each endpoint when it is created, by the precedence of spec 11;
messages are queued with the receiving endpoint's priority, and RECEIVE / GET
CONVERSATION GROUP serve the highest-priority group first.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from support import (
    CONTRACT,
    INITIATOR_QUEUE,
    INITIATOR_SERVICE,
    REPLY,
    REQUEST,
    TARGET_QUEUE,
    TARGET_SERVICE,
    endpoint,
    open_dialog,
    target_handle,
)

import broker
from broker.ddl import priorities

URGENT_CONTRACT = "//AWDB/1DBSample/UrgentContract"
BOTH_SERVICE = "//AWDB/1DBSample/PriorityTargetService"


def priority_rows(db: broker.Broker) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in db.catalog("sys.conversation_priorities")}


def endpoint_priority(db: broker.Broker, handle: object) -> int:
    row = endpoint(db, handle)
    assert row is not None
    return int(row["priority"])


def new_initiator_priority(db: broker.Broker) -> int:
    """The priority BEGIN DIALOG gives a tutorial initiator endpoint now."""
    with db.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)
    return endpoint_priority(db, handle)


def send_request(db: broker.Broker, contract: str, body: str, **options: Any) -> uuid.UUID:
    with db.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, BOTH_SERVICE, contract, **options)
        tx.send(handle, REQUEST, body)
    return handle


def reply(db: broker.Broker, initiator: uuid.UUID, body: str) -> None:
    with db.transaction() as tx:
        tx.send(target_handle(db, initiator), REPLY, body)


@pytest.fixture
def two_contracts(tutorial: broker.Broker) -> broker.Broker:
    """Spec 12.5 item 16: contracts at priorities 3 and 8, both targeting TargetQueue1DB."""
    tutorial.create_contract(URGENT_CONTRACT, {REQUEST: "INITIATOR", REPLY: "TARGET"})
    tutorial.create_service(BOTH_SERVICE, TARGET_QUEUE, [CONTRACT, URGENT_CONTRACT])
    tutorial.create_broker_priority("Routine", contract_name=CONTRACT, priority_level=3)
    tutorial.create_broker_priority("Urgent", contract_name=URGENT_CONTRACT, priority_level=8)
    return tutorial


# -- precedence (spec 11) ----------------------------------------------------------------

# For the tutorial initiator endpoint: contract C, local service L, remote service R. The
# levels are deliberately not in precedence order: precedence, not the highest level, wins.
CHAIN = [
    ("C,L,R", CONTRACT, INITIATOR_SERVICE, TARGET_SERVICE, 2),
    ("C,L,ANY", CONTRACT, INITIATOR_SERVICE, None, 9),
    ("C,ANY,R", CONTRACT, None, TARGET_SERVICE, 3),
    ("C,ANY,ANY", CONTRACT, None, None, 8),
    ("ANY,L,R", None, INITIATOR_SERVICE, TARGET_SERVICE, 4),
    ("ANY,L,ANY", None, INITIATOR_SERVICE, None, 7),
    ("ANY,ANY,R", None, None, TARGET_SERVICE, 1),
    ("ANY,ANY,ANY", None, None, None, 6),
]


def test_precedence_follows_the_chain_down_to_default_5(tutorial: broker.Broker) -> None:
    assert new_initiator_priority(tutorial) == 5
    for name, contract, local, remote, level in reversed(CHAIN):  # creation order must not matter
        tutorial.create_broker_priority(
            name, contract_name=contract, local_service_name=local, remote_service_name=remote,
            priority_level=level,
        )
    for name, *_, level in CHAIN:
        assert new_initiator_priority(tutorial) == level, name
        tutorial.drop_broker_priority(name)
    assert new_initiator_priority(tutorial) == 5


def test_each_step_of_the_chain_beats_every_later_one(tutorial: broker.Broker) -> None:
    for position, (name, contract, local, remote, level) in enumerate(CHAIN):
        for later_name, *criteria, later_level in CHAIN[position + 1:]:
            tutorial.create_broker_priority(
                later_name, contract_name=criteria[0], local_service_name=criteria[1],
                remote_service_name=criteria[2], priority_level=later_level,
            )
        tutorial.create_broker_priority(
            name, contract_name=contract, local_service_name=local, remote_service_name=remote,
            priority_level=level,
        )
        assert new_initiator_priority(tutorial) == level, name
        for dropped in priority_rows(tutorial):
            tutorial.drop_broker_priority(dropped)


def test_priorities_that_do_not_match_are_ignored(tutorial: broker.Broker) -> None:
    tutorial.create_broker_priority("other contract", contract_name="DEFAULT", priority_level=10)
    tutorial.create_broker_priority("other local", local_service_name=TARGET_SERVICE, priority_level=10)
    tutorial.create_broker_priority("other remote", remote_service_name=INITIATOR_SERVICE, priority_level=10)
    # Service names match byte by byte: another case is another service.
    tutorial.create_broker_priority("remote in lower case", remote_service_name=TARGET_SERVICE.lower(),
                                    priority_level=10)
    assert new_initiator_priority(tutorial) == 5


def test_a_priority_made_by_another_connection_applies_at_once(tutorial: broker.Broker, db_url: str) -> None:
    assert new_initiator_priority(tutorial) == 5  # this process has its catalog snapshot now
    other = broker.connect(db_url)
    try:
        other.create_broker_priority("elsewhere", local_service_name=INITIATOR_SERVICE, priority_level=9)
    finally:
        other.dispose()
    assert new_initiator_priority(tutorial) == 9


# -- endpoints and queue rows ------------------------------------------------------------


def test_each_side_gets_its_own_priority_and_receives_at_it(tutorial: broker.Broker) -> None:
    """Spec 11's example: requests are sent at 10 but received at 1; replies the reverse."""
    tutorial.create_broker_priority("sender", local_service_name=INITIATOR_SERVICE,
                                    remote_service_name=TARGET_SERVICE, priority_level=10)
    tutorial.create_broker_priority("receiver", local_service_name=TARGET_SERVICE,
                                    remote_service_name=INITIATOR_SERVICE, priority_level=1)
    handle = open_dialog(tutorial)
    assert endpoint_priority(tutorial, handle) == 10
    assert endpoint_priority(tutorial, target_handle(tutorial, handle)) == 1
    assert [m.priority for m in tutorial.queue_rows(TARGET_QUEUE)] == [1]

    with tutorial.transaction() as tx:
        [request] = tx.receive(TARGET_QUEUE)
    assert request.priority == 1
    reply(tutorial, handle, "<ReplyMsg/>")
    assert [m.priority for m in tutorial.queue_rows(INITIATOR_QUEUE)] == [10]


def test_held_messages_wait_at_the_senders_priority(tutorial: broker.Broker) -> None:
    tutorial.create_broker_priority("sender", local_service_name=INITIATOR_SERVICE, priority_level=7)
    tutorial.create_broker_priority("receiver", local_service_name=TARGET_SERVICE, priority_level=2)
    tutorial.alter_queue(TARGET_QUEUE, status=False)
    handle = open_dialog(tutorial)
    assert [row["priority"] for row in tutorial.catalog("sys.transmission_queue")] == [7]

    tutorial.alter_queue(TARGET_QUEUE, status=True)  # delivers, creating the target endpoint
    assert endpoint_priority(tutorial, target_handle(tutorial, handle)) == 2
    assert [m.priority for m in tutorial.queue_rows(TARGET_QUEUE)] == [2]


# -- receiving (spec 12.5 item 16) -------------------------------------------------------


def test_receive_serves_the_high_priority_group_first(two_contracts: broker.Broker) -> None:
    db = two_contracts
    routine = send_request(db, CONTRACT, "<routine/>")
    urgent = send_request(db, URGENT_CONTRACT, "<urgent/>")
    rows = db.queue_rows(TARGET_QUEUE)
    assert [(m.priority, m.message_body) for m in rows] == [(3, b"<routine/>"), (8, b"<urgent/>")]

    with db.transaction() as tx:
        first = tx.receive(TARGET_QUEUE)
    assert [(m.priority, m.message_body, m.service_contract_name) for m in first] == [
        (8, b"<urgent/>", URGENT_CONTRACT)
    ]
    assert first[0].conversation_handle == target_handle(db, urgent)
    with db.transaction() as tx:
        second = tx.receive(TARGET_QUEUE)
    assert [(m.priority, m.message_body) for m in second] == [(3, b"<routine/>")]
    assert second[0].conversation_handle == target_handle(db, routine)


def test_get_conversation_group_returns_the_high_priority_group_first(two_contracts: broker.Broker) -> None:
    db = two_contracts
    routine = send_request(db, CONTRACT, "<routine/>")
    urgent = send_request(db, URGENT_CONTRACT, "<urgent/>")
    urgent_group = endpoint(db, target_handle(db, urgent))["conversation_group_id"]  # type: ignore[index]
    routine_group = endpoint(db, target_handle(db, routine))["conversation_group_id"]  # type: ignore[index]

    with db.transaction() as tx:
        assert tx.get_conversation_group(TARGET_QUEUE) == urgent_group
        assert [m.message_body for m in tx.receive(TARGET_QUEUE, conversation_group_id=urgent_group)] == [
            b"<urgent/>"
        ]
    with db.transaction() as tx:
        assert tx.get_conversation_group(TARGET_QUEUE) == routine_group


def test_inside_a_group_the_higher_priority_conversation_comes_first(two_contracts: broker.Broker) -> None:
    """Two related dialogs share the initiator's group; their replies arrive low first."""
    db = two_contracts
    routine = send_request(db, CONTRACT, "<routine/>")
    urgent = send_request(db, URGENT_CONTRACT, "<urgent/>", related_conversation=routine)
    reply(db, routine, "<routine-reply/>")
    reply(db, urgent, "<urgent-reply/>")

    with db.transaction() as tx:
        replies = tx.receive(INITIATOR_QUEUE)
    assert [(m.priority, m.message_body) for m in replies] == [(8, b"<urgent-reply/>"), (3, b"<routine-reply/>")]


def test_alter_and_drop_do_not_change_existing_endpoints(two_contracts: broker.Broker) -> None:
    db = two_contracts
    routine = send_request(db, CONTRACT, "<routine/>")
    urgent = send_request(db, URGENT_CONTRACT, "<urgent/>")
    before = {h: endpoint_priority(db, h) for d in (routine, urgent) for h in (d, target_handle(db, d))}
    assert sorted(before.values()) == [3, 3, 8, 8]

    db.alter_broker_priority("Urgent", priority_level=1)
    db.alter_broker_priority("Routine", priority_level=10)
    assert {h: endpoint_priority(db, h) for h in before} == before
    with db.transaction() as tx:
        tx.send(urgent, REQUEST, "<urgent-again/>")
    assert [m.priority for m in db.queue_rows(TARGET_QUEUE)] == [3, 8, 8]
    with db.transaction() as tx:
        assert [m.message_body for m in tx.receive(TARGET_QUEUE)] == [b"<urgent/>", b"<urgent-again/>"]

    db.drop_broker_priority("Urgent")
    db.drop_broker_priority("Routine")
    assert {h: endpoint_priority(db, h) for h in before} == before
    # New dialogs see the change.
    assert endpoint_priority(db, send_request(db, URGENT_CONTRACT, "<new/>")) == 5


# -- DDL ---------------------------------------------------------------------------------


def test_create_stores_null_for_any_and_5_for_default(tutorial: broker.Broker) -> None:
    tutorial.create_broker_priority("Everything")
    tutorial.create_broker_priority("Spelled out", contract_name="ANY", local_service_name="any",
                                    remote_service_name="ANY", priority_level="default")
    tutorial.create_broker_priority("Named", contract_name=CONTRACT, local_service_name=TARGET_SERVICE,
                                    remote_service_name=INITIATOR_SERVICE, priority_level=10)
    rows = priority_rows(tutorial)
    assert {k: v for k, v in rows["Everything"].items() if k != "name"} == {
        "priority_id": 65536, "service_contract_id": None, "local_service_id": None,
        "remote_service_name": None, "priority": 5,
    }
    assert rows["Spelled out"]["priority_id"] == 65537
    assert (rows["Spelled out"]["service_contract_id"], rows["Spelled out"]["local_service_id"],
            rows["Spelled out"]["remote_service_name"], rows["Spelled out"]["priority"]) == (None, None, None, 5)
    contract_id = {c["name"]: c["service_contract_id"] for c in tutorial.catalog("sys.service_contracts")}[CONTRACT]
    service_id = {s["name"]: s["service_id"] for s in tutorial.catalog("sys.services")}[TARGET_SERVICE]
    assert (rows["Named"]["service_contract_id"], rows["Named"]["local_service_id"],
            rows["Named"]["remote_service_name"], rows["Named"]["priority"]) == (
        contract_id, service_id, INITIATOR_SERVICE, 10)


def test_alter_changes_only_the_options_given(tutorial: broker.Broker) -> None:
    tutorial.create_broker_priority("P", contract_name=CONTRACT, local_service_name=INITIATOR_SERVICE,
                                    remote_service_name=TARGET_SERVICE, priority_level=7)
    before = priority_rows(tutorial)["P"]

    tutorial.alter_broker_priority("P", priority_level=2)
    assert priority_rows(tutorial)["P"] == {**before, "priority": 2}
    tutorial.alter_broker_priority("P", contract_name="ANY", remote_service_name=None)
    assert priority_rows(tutorial)["P"] == {**before, "priority": 2, "service_contract_id": None,
                                           "remote_service_name": None}
    tutorial.alter_broker_priority("P", priority_level="DEFAULT", local_service_name=TARGET_SERVICE)
    row = priority_rows(tutorial)["P"]
    assert row["priority"] == 5 and row["local_service_id"] != before["local_service_id"]


@pytest.mark.parametrize(
    ("options", "number"),
    [
        ({"contract_name": "//no/such/contract"}, 8425),
        ({"local_service_name": "//no/such/service"}, 8423),
        ({"local_service_name": TARGET_SERVICE.lower()}, 8423),
        ({"remote_service_name": ""}, 8412),
        ({"remote_service_name": "x" * 257}, 8412),
        ({"priority_level": 0}, 59002),
        ({"priority_level": 11}, 59002),
        ({"priority_level": 256}, 8115),
        ({"priority_level": True}, 206),
        ({"priority_level": 7.0}, 206),
        ({"priority_level": "7"}, 206),
        ({"priority_level": "HIGH"}, 206),
        ({"contract_name": 5}, 206),
        ({"remote_service_name": "a\x00b"}, 102),
    ],
)
def test_create_and_alter_check_their_options(tutorial: broker.Broker, options: dict[str, Any], number: int) -> None:
    with pytest.raises(broker.BrokerError) as created:
        tutorial.create_broker_priority("P", **options)
    assert created.value.number == number
    assert priority_rows(tutorial) == {}

    tutorial.create_broker_priority("P")
    with pytest.raises(broker.BrokerError) as altered:
        tutorial.alter_broker_priority("P", **options)
    assert altered.value.number == number


def test_ddl_error_numbers(tutorial: broker.Broker) -> None:
    tutorial.create_broker_priority("P")
    cases = [
        (lambda: tutorial.create_broker_priority("P", priority_level=9), 2714),
        (lambda: tutorial.create_broker_priority(""), 1038),
        (lambda: tutorial.create_broker_priority("n" * 129), 103),
        (lambda: tutorial.alter_broker_priority("Q", priority_level=9), 15151),
        (lambda: tutorial.alter_broker_priority("P"), 59004),
        (lambda: tutorial.alter_broker_priority("P", level=9), 59003),
        (lambda: tutorial.drop_broker_priority("Q"), 3701),
    ]
    for call, number in cases:
        with pytest.raises(broker.BrokerError) as error:
            call()
        assert error.value.number == number, error.value
    assert list(priority_rows(tutorial)) == ["P"] and priority_rows(tutorial)["P"]["priority"] == 5
    tutorial.drop_broker_priority("P")
    assert priority_rows(tutorial) == {}


def test_a_failed_priority_statement_writes_nothing_and_keeps_the_transaction(tutorial: broker.Broker) -> None:
    with tutorial.transaction() as tx:
        tx.run(lambda ctx: priorities.create_broker_priority(ctx, "P", contract_name=CONTRACT, priority_level=4))
        with pytest.raises(broker.BrokerError):
            tx.run(lambda ctx: priorities.alter_broker_priority(
                ctx, "P", contract_name="//no/such/contract", priority_level=7))
        with pytest.raises(broker.BrokerError):
            tx.run(lambda ctx: priorities.create_broker_priority(ctx, "P", contract_name="ANY"))
        handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)
    row = priority_rows(tutorial)["P"]
    assert (row["service_contract_id"] is not None, row["priority"]) == (True, 4)
    assert endpoint_priority(tutorial, handle) == 4


def test_a_service_or_contract_named_by_a_priority_cannot_be_dropped(tutorial: broker.Broker) -> None:
    tutorial.create_broker_priority("p", contract_name=CONTRACT, local_service_name=INITIATOR_SERVICE, priority_level=9)
    with pytest.raises(broker.BrokerError) as failure:
        tutorial.drop_service(INITIATOR_SERVICE)
    assert failure.value.number == 3729
    tutorial.drop_service(TARGET_SERVICE)  # the contract's last service goes
    with pytest.raises(broker.BrokerError) as failure:
        tutorial.drop_contract(CONTRACT)
    assert failure.value.number == 3729
    tutorial.drop_broker_priority("p")
    tutorial.drop_service(INITIATOR_SERVICE)
    tutorial.drop_contract(CONTRACT)

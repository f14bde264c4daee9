"""Hostile values through every public verb of the Python API (issue 18).

Each verb gets strategies that mix valid values (so that the deeper checks run too) with
hostile ones: huge and negative integers, NaN and inf, wrong types, empty and
10,000-character strings, NUL, control characters and lone surrogates, random bytes.
Whatever comes in, only a numbered ``BrokerError`` may come out, nothing may hang
(pytest-timeout), the committed baseline (a dialog with a request waiting in the target
queue) must be exactly as it was, and SQLite's ``integrity_check`` must stay ok.

The suite runs ``EXAMPLES`` examples per verb; ``pytest -m slow tests/test_hostile_api.py``
runs ``LONG_EXAMPLES`` (docs/errors.md).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from support import (
    CONTRACT,
    INITIATOR_QUEUE,
    INITIATOR_SERVICE,
    REPLY,
    REQUEST,
    TARGET_QUEUE,
    TARGET_SERVICE,
    open_dialog,
    target_handle,
)

import broker
from broker.arguments import INT_MAX

EXAMPLES = 30
LONG_EXAMPLES = 1000

XSD = ('<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">'
       '<xs:element name="r" type="xs:string"/></xs:schema>')

# -- strategies -------------------------------------------------------------------------

EDGE_INTEGERS = [0, 1, -1, 10, 255, 256, 32767, 32768, INT_MAX, INT_MAX + 1, -INT_MAX - 2,
                 2**63 - 1, 2**63, -(2**63) - 1, 10**30]
INTEGERS = st.one_of(st.integers(), st.sampled_from(EDGE_INTEGERS))
FLOATS = st.one_of(st.floats(), st.sampled_from([math.nan, math.inf, -math.inf, 1e30, -0.0, 5e-324, 0.5]))
EDGE_TEXT = ["", " ", "\x00", "a\x00b", "\ud800", "x\udfffy", "\t\n\r", "\x01\x1f", "ANY", "DEFAULT",
             "CURRENT DATABASE", "dbo.", "[", "[]", "dbo.[]", "'; DROP TABLE sb_services; --", '"', "sys.routes",
             "x" * 129, "x" * 10_000, "é" * 64]
TEXT = st.one_of(st.text(max_size=20), st.sampled_from(EDGE_TEXT),
                 st.text(alphabet=st.characters(max_codepoint=0x1F), max_size=5))
ANYTHING = st.one_of(
    st.none(), st.booleans(), INTEGERS, FLOATS, TEXT, st.binary(max_size=30), st.uuids(),
    st.lists(st.one_of(INTEGERS, TEXT), max_size=3),
    st.dictionaries(TEXT, st.one_of(INTEGERS, TEXT, st.booleans()), max_size=3),
    st.builds(object), st.tuples(TEXT, TEXT), st.just(b"x" * 1000),
)


@dataclass(frozen=True)
class Arg:
    """One argument of a verb: its valid values and its hostile ones."""

    valid: st.SearchStrategy[Any]
    hostile: st.SearchStrategy[Any] = ANYTHING


def mixed(*valid: object) -> Arg:
    return Arg(st.sampled_from(valid) if valid else ANYTHING)


def calls(args: tuple[Arg, ...]) -> st.SearchStrategy[tuple[Any, ...]]:
    """Argument tuples: one hostile argument among valid ones (so each check is reached),
    or every argument drawn from both."""
    def one_hostile(index: int) -> st.SearchStrategy[tuple[Any, ...]]:
        return st.tuples(*(a.hostile if i == index else a.valid for i, a in enumerate(args)))
    either = st.tuples(*(st.one_of(a.valid, a.hostile) for a in args))
    return st.one_of(st.integers(0, len(args) - 1).flatmap(one_hostile), either)


def _waits_long(value: object) -> bool:
    """A valid WAITFOR timeout that would really wait (the queue may be empty)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return value == -1 or (math.isfinite(value) and 0.05 < value <= INT_MAX)


TIMEOUTS = Arg(st.one_of(st.none(), st.floats(0, 0.05)), ANYTHING.filter(lambda v: not _waits_long(v)))


# -- the baseline -----------------------------------------------------------------------


@dataclass
class Baseline:
    db: broker.Broker
    initiator: uuid.UUID
    target: uuid.UUID
    group: uuid.UUID
    member_url: str

    def state(self) -> tuple[object, ...]:
        rows = [(m.status, m.conversation_handle, m.message_sequence_number, m.message_type_name, m.message_body)
                for m in self.db.queue_rows(TARGET_QUEUE)]
        ends = sorted((str(r["conversation_handle"]), r["state"], r["send_sequence"], r["receive_sequence"])
                      for r in self.db.catalog("sys.conversation_endpoints")
                      if r["conversation_handle"] in (self.initiator, self.target))
        queues = sorted((q["name"], q["is_receive_enabled"]) for q in self.db.catalog("sys.service_queues")
                        if q["name"] in (TARGET_QUEUE, INITIATOR_QUEUE))
        return rows, ends, queues, self.db.catalog("sys.transmission_queue")


@pytest.fixture
def baseline(tutorial: broker.Broker, tmp_path: Path) -> Baseline:
    db = tutorial
    # Rolled-back RECEIVEs must not disable the queues (poison handling) mid-test.
    db.alter_queue(TARGET_QUEUE, poison_message_handling=False)
    db.alter_queue(INITIATOR_QUEUE, poison_message_handling=False)
    initiator = open_dialog(db, b"<RequestMsg>baseline</RequestMsg>")
    target = target_handle(db, initiator)
    [row] = db.catalog("sys.conversation_endpoints", conversation_handle=target)
    return Baseline(db, initiator, target, row["conversation_group_id"], f"sqlite:///{tmp_path / 'member.db'}")


class _Undo(Exception):
    """Raised to roll a transaction back after its verb ran."""


def rolled_back(db: broker.Broker, verb: Callable[[broker.Transaction], object]) -> None:
    """Run ``verb`` in a transaction that is always rolled back."""
    try:
        with db.transaction() as tx:
            verb(tx)
            raise _Undo
    except _Undo:
        pass


def only_numbered_errors(call: Callable[[], object]) -> None:
    try:
        call()
    except broker.BrokerError as error:
        assert error.number > 0, repr(error)
        assert error.message and "\n" not in str(error.number)


# -- the verbs --------------------------------------------------------------------------

Verb = Callable[..., object]
SCRATCH_QUEUE, SCRATCH_SERVICE, SCRATCH_TYPE = "ScratchQueue", "//scratch/service", "//scratch/type"
SCRATCH_CONTRACT, SCRATCH_XSD, SCRATCH_PRIORITY = "//scratch/contract", "//scratch/xsd", "ScratchPriority"
SCRATCH_ROUTE, SCRATCH_BINDING = "ScratchRoute", "ScratchBinding"
SCRATCH_NAMES = (SCRATCH_QUEUE, SCRATCH_SERVICE, SCRATCH_TYPE, SCRATCH_CONTRACT, SCRATCH_XSD, SCRATCH_PRIORITY,
                 SCRATCH_ROUTE, SCRATCH_BINDING)
DROPPABLE = ["service", "queue", "contract", "message_type", "broker_priority", "route", "remote_service_binding"]


def _instance_verbs(b: Baseline, member: object, url: object) -> None:
    """An instance whose catalog is the baseline's database: add, find and remove a member."""
    inst = broker.Instance(b.db)
    target = b.member_url if url == "MEMBER_URL" else url
    try:
        inst.add_database(member, target)  # type: ignore[arg-type]
    except broker.BrokerError:
        pass
    for verb in (inst.database, inst.remove_database):
        try:
            verb(member)  # type: ignore[arg-type]
        except broker.BrokerError as error:
            assert error.number > 0
    for opened in list(inst._open.values()):
        opened.dispose()


def _tx(verb: Callable[..., object]) -> Verb:
    """A transaction verb, called in a rolled-back transaction: nothing it does stays."""
    return lambda b, *args: rolled_back(b.db, lambda tx: verb(tx, b, *args))


VERBS: dict[str, tuple[Verb, Callable[[], tuple[Arg, ...]]]] = {
    # conversations (rolled back)
    "begin_dialog": (
        _tx(lambda tx, b, f, t, c, bi, rc, rg, lt, enc: tx.begin_dialog(
            f, t, c, broker_instance=bi, related_conversation=rc, related_conversation_group=rg, lifetime=lt,
            encryption=enc)),
        lambda: (mixed(INITIATOR_SERVICE), mixed(TARGET_SERVICE), mixed(CONTRACT, "DEFAULT"),
                 mixed(None, "CURRENT DATABASE"), mixed(None), mixed(None, uuid.uuid4()), mixed(None, 60),
                 mixed(True, False))),
    "send": (
        _tx(lambda tx, b, h, mt, body: tx.send(b.initiator if h == "I" else b.target if h == "T" else h, mt, body)),
        lambda: (mixed("I", "T"), mixed(REQUEST, REPLY, "DEFAULT"), mixed(b"<x/>", "<x/>", None, b""))),
    "receive": (
        _tx(lambda tx, b, q, top, h, g, wait: tx.receive(
            q, top, conversation_handle=b.target if h == "T" else h,
            conversation_group_id=b.group if g == "G" else g, timeout=wait)),
        lambda: (mixed(TARGET_QUEUE, INITIATOR_QUEUE, f"dbo.[{TARGET_QUEUE}]"), mixed(None, 1), mixed(None, "T"),
                 mixed(None, "G"), TIMEOUTS)),
    "get_conversation_group": (
        _tx(lambda tx, b, q, wait: tx.get_conversation_group(q, wait)),
        lambda: (mixed(TARGET_QUEUE, INITIATOR_QUEUE), TIMEOUTS)),
    "move_conversation": (
        _tx(lambda tx, b, h, g: tx.move_conversation(b.target if h == "T" else h, b.group if g == "G" else g)),
        lambda: (mixed("T"), mixed("G", uuid.uuid4()))),
    "end_conversation": (
        _tx(lambda tx, b, h, code, text_, cleanup: tx.end_conversation(
            b.target if h == "T" else h, error=code, description=text_, cleanup=cleanup)),
        lambda: (mixed("T"), mixed(None, 50), mixed(None, "x", "a\rb"), mixed(False, True))),
    "begin_conversation_timer": (
        _tx(lambda tx, b, h, seconds: tx.begin_conversation_timer(b.initiator if h == "I" else h, seconds)),
        lambda: (mixed("I"), Arg(st.integers(0, 60), st.one_of(ANYTHING, FLOATS, st.integers(-10, 10**12))))),
    "query": (
        _tx(lambda tx, b, sql: tx.query(sql)),
        lambda: (mixed("SELECT 1", f'SELECT * FROM "{TARGET_QUEUE}"'),)),
    # objects (committed, on scratch names: the baseline's objects are not theirs to change)
    "create_xml_schema_collection": (
        lambda b, n, xsd: b.db.create_xml_schema_collection(n, xsd),
        lambda: (mixed(SCRATCH_XSD), mixed(XSD, XSD.encode(), "<bad"))),
    "create_message_type": (
        lambda b, n, v, c: b.db.create_message_type(n, v, c),
        lambda: (mixed(SCRATCH_TYPE), mixed("NONE", "EMPTY", "WELL_FORMED_XML", "VALID_XML", "valid_xml"),
                 mixed(None, SCRATCH_XSD))),
    "create_contract": (
        lambda b, n, m: b.db.create_contract(n, m),
        lambda: (mixed(SCRATCH_CONTRACT), mixed({"DEFAULT": "ANY"}, [("DEFAULT", "INITIATOR")], {REQUEST: "x"}))),
    "create_queue": (
        lambda b, n, s, r, a, p: b.db.create_queue(n, status=s, retention=r, activation=a,
                                                   poison_message_handling=p),
        lambda: (mixed(SCRATCH_QUEUE, "dbo.[Scratch Queue]"), mixed(True, False), mixed(False), mixed(
            None, {"procedure_name": "m:f", "max_queue_readers": 1}, {"procedure_name": "m:f"}), mixed(True))),
    "alter_queue": (
        lambda b, n, options: b.db.alter_queue(n, **options),
        lambda: (mixed(SCRATCH_QUEUE), Arg(st.just({"status": True}), st.dictionaries(
            st.sampled_from(["status", "retention", "activation", "poison_message_handling", "bogus"]),
            st.one_of(st.sampled_from([True, None, {"status": False}, {"max_queue_readers": 40000}]), ANYTHING),
            max_size=3)))),
    "create_service": (
        lambda b, n, q, c: b.db.create_service(n, q, c),
        lambda: (mixed(SCRATCH_SERVICE), mixed(SCRATCH_QUEUE), mixed((), ["DEFAULT"], "DEFAULT"))),
    "drop": (
        lambda b, kind, n: getattr(b.db, f"drop_{kind}")(n),
        lambda: (Arg(st.sampled_from(DROPPABLE), st.sampled_from(DROPPABLE)), mixed(*SCRATCH_NAMES))),
    "set_broker_enabled": (lambda b, on: b.db.set_broker_enabled(on), lambda: (mixed(True, False),)),
    "set_honor_broker_priority": (lambda b, on: b.db.set_honor_broker_priority(on), lambda: (mixed(True, False),)),
    "alter_service": (
        lambda b, n, q, add, drop: b.db.alter_service(n, queue=q, add_contracts=add, drop_contracts=drop),
        lambda: (mixed(SCRATCH_SERVICE), mixed(None, SCRATCH_QUEUE), mixed((), ["DEFAULT"]), mixed((), "DEFAULT"))),
    "alter_message_type": (
        lambda b, n, v, c: b.db.alter_message_type(n, v, c),
        lambda: (mixed(SCRATCH_TYPE), mixed("NONE", "WELL_FORMED_XML"), mixed(None))),
    "create_route": (
        lambda b, n, address, service, instance, lifetime, mirror: b.db.create_route(
            n, address, service_name=service, broker_instance=instance, lifetime=lifetime, mirror_address=mirror),
        lambda: (mixed(SCRATCH_ROUTE), mixed("LOCAL", "TCP://h:4022", "TRANSPORT"), mixed(None, "//svc"),
                 mixed(None, "D8D4D268-00A3-4C62-8F91-634B89B1E315"), mixed(None, 60), mixed(None, "TCP://m:1"))),
    "alter_route": (
        lambda b, n, clauses: b.db.alter_route(n, **clauses),
        lambda: (mixed(SCRATCH_ROUTE), Arg(st.just({"address": "TCP://other:1"}), st.dictionaries(
            st.sampled_from(["address", "service_name", "broker_instance", "lifetime", "mirror_address", "x"]),
            ANYTHING, max_size=3)))),
    "create_remote_service_binding": (
        lambda b, n, service, user, anonymous: b.db.create_remote_service_binding(n, service, user, anonymous),
        lambda: (mixed(SCRATCH_BINDING), mixed("//far"), mixed("User"), mixed(False, True))),
    "alter_remote_service_binding": (
        lambda b, n, user, anonymous: b.db.alter_remote_service_binding(n, user=user, anonymous=anonymous),
        lambda: (mixed(SCRATCH_BINDING), mixed(None, "Other"), mixed(None, True))),
    "get_transmission_status": (
        _tx(lambda tx, b, h: tx.get_transmission_status(b.initiator if h == "I" else h)),
        lambda: (mixed("I", None),)),
    "instance": (
        lambda b, member, url: _instance_verbs(b, member, url),
        lambda: (mixed("Member"), mixed("MEMBER_URL"))),
    "create_broker_priority": (
        lambda b, n, c, local, remote, level: b.db.create_broker_priority(
            n, contract_name=c, local_service_name=local, remote_service_name=remote, priority_level=level),
        lambda: (mixed(SCRATCH_PRIORITY), mixed(None, "ANY"), mixed(None), mixed(None, "//far"),
                 mixed(None, 3, "DEFAULT"))),
    "alter_broker_priority": (
        lambda b, n, options: b.db.alter_broker_priority(n, **options),
        lambda: (mixed(SCRATCH_PRIORITY), Arg(st.just({"priority_level": 4}), st.dictionaries(
            st.sampled_from(["contract_name", "local_service_name", "remote_service_name", "priority_level", "x"]),
            st.one_of(st.sampled_from([None, 4, "ANY"]), ANYTHING), max_size=3)))),
    # reading
    "queue_rows": (lambda b, q: b.db.queue_rows(q), lambda: (mixed(TARGET_QUEUE),)),
    "iter_queue_rows": (lambda b, q, size: list(b.db.iter_queue_rows(q, size)),
                        lambda: (mixed(TARGET_QUEUE), mixed(1, 1000))),
    "queue_counts": (lambda b, q: b.db.queue_counts(q), lambda: (mixed(TARGET_QUEUE),)),
    "oldest_ready_time": (lambda b, q: b.db.oldest_ready_time(q), lambda: (mixed(TARGET_QUEUE),)),
    "catalog": (
        lambda b, view, where: b.db.catalog(view, **where),
        lambda: (mixed("sys.services", "sys.conversation_endpoints", "sys.routes"), Arg(st.just({}), st.dictionaries(
            st.sampled_from(["name", "conversation_handle", "state", "service_id", "lifetime", "bogus", "x;y"]),
            ANYTHING, max_size=2)))),
    "runtime": (lambda b, poll, activation: b.db.runtime(poll_interval=poll, activation=activation),
                lambda: (mixed(0.5), mixed(True))),
    # module functions
    "parse_error": (lambda b, body: broker.parse_error(body),
                    lambda: (Arg(st.just(broker.error_body(1, "x")), st.one_of(ANYTHING, st.binary())),)),
    "error_body": (lambda b, code, description: broker.parse_error(broker.error_body(code, description)),
                   lambda: (mixed(-8489, 50), mixed("x"))),
}


def check_verb(baseline: Baseline, name: str, examples: int) -> None:
    verb, strategies = VERBS[name]
    before = baseline.state()

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                     HealthCheck.filter_too_much])
    @given(calls(strategies()))
    def property_(args: tuple[Any, ...]) -> None:
        only_numbered_errors(lambda: verb(baseline, *args))

    property_()
    assert baseline.state() == before
    if baseline.db.engine.dialect.name == "sqlite":
        with baseline.db.engine.connect() as conn:
            assert conn.execute(text("PRAGMA integrity_check")).scalar() == "ok"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", sorted(VERBS))
def test_hostile_values_give_only_numbered_errors(baseline: Baseline, name: str) -> None:
    check_verb(baseline, name, EXAMPLES)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("name", sorted(VERBS))
def test_hostile_values_long_run(baseline: Baseline, name: str) -> None:
    check_verb(baseline, name, LONG_EXAMPLES)


def test_an_argument_error_is_also_a_value_or_type_error(baseline: Baseline) -> None:
    db = baseline.db
    with db.transaction() as tx:
        with pytest.raises(ValueError) as value_error:
            tx.receive(TARGET_QUEUE, top=-1)
        with pytest.raises(TypeError) as type_error:
            tx.receive(None)  # type: ignore[arg-type]
    assert isinstance(value_error.value, broker.BrokerError) and value_error.value.number == 1014
    assert isinstance(type_error.value, broker.BrokerError) and type_error.value.number == 206

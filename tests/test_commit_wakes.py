"""Which commits wake the runtime's watchers, and threads' turns at SQLite's write lock
(``storage.write_lock``)."""

from __future__ import annotations

import threading
import uuid

from support import CONTRACT, INITIATOR_SERVICE, REQUEST, TARGET_QUEUE, TARGET_SERVICE, sqlite_only, wait_until

import broker
from broker.storage.waiting import ANY_QUEUE
from broker.storage.write_lock import write_lock

pytestmark = sqlite_only  # what is measured is SQLite's: its driver's change count, its one write lock


def commits_seen(db: broker.Broker) -> int:
    return db.state.notifier.counter(ANY_QUEUE)


def begin(db: broker.Broker) -> uuid.UUID:
    with db.transaction() as tx:
        return tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)


def test_a_transaction_that_writes_nothing_wakes_no_one(tutorial: broker.Broker) -> None:
    before = commits_seen(tutorial)
    with tutorial.transaction() as tx:
        assert tx.receive(TARGET_QUEUE) == []  # reads, writes nothing
    assert commits_seen(tutorial) == before
    begin(tutorial)
    assert commits_seen(tutorial) > before


def test_a_quiet_transaction_wakes_no_one_unless_it_touched_a_queue(tutorial: broker.Broker) -> None:
    handle = begin(tutorial)
    before = commits_seen(tutorial)

    def quiet_write(ctx):  # type: ignore[no-untyped-def]
        ctx.quiet = True
        ctx.conn.exec_driver_sql("UPDATE sb_conversation_endpoints SET transmission_status = 'x'")

    with tutorial.transaction() as tx:
        tx.run(quiet_write)
    assert commits_seen(tutorial) == before
    with tutorial.transaction() as tx:
        tx.run(lambda ctx: setattr(ctx, "quiet", True))
        tx.send(handle, REQUEST, b"<wakes the target queue's waiters/>")
    assert commits_seen(tutorial) > before


def test_a_transaction_holds_its_turn_at_the_write_lock_until_it_ends(tutorial: broker.Broker) -> None:
    turn = write_lock(tutorial.state.backend.database_key(tutorial.engine))
    assert not turn.locked()
    with tutorial.transaction() as tx:
        tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)
        assert turn.locked()
    assert not turn.locked()  # committed
    try:
        with tutorial.transaction() as tx:
            tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)
            raise RuntimeError("the application fails")
    except RuntimeError:
        pass
    assert not turn.locked()  # rolled back
    with tutorial.engine.begin() as conn:  # SQLAlchemy's own transaction takes its turn too
        conn.exec_driver_sql("SELECT 1 FROM sb_database")
        assert turn.locked()
    assert not turn.locked()


def test_threads_wait_for_their_turn_and_each_gets_it(tutorial: broker.Broker) -> None:
    turn = write_lock(tutorial.state.backend.database_key(tutorial.engine))
    began, finish = threading.Event(), threading.Event()
    done: list[uuid.UUID] = []

    def holder() -> None:
        with tutorial.transaction() as tx:
            tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)
            began.set()
            finish.wait(30)

    def waiter() -> None:
        done.append(begin(tutorial))

    first = threading.Thread(target=holder)
    first.start()
    assert began.wait(30)
    others = [threading.Thread(target=waiter) for _ in range(4)]
    for thread in others:
        thread.start()
    assert done == []  # none began while the holder's transaction is open
    finish.set()
    for thread in (first, *others):
        thread.join(30)
    assert len(set(done)) == 4
    wait_until(lambda: not turn.locked(), 5.0)


def test_a_wait_without_end_on_the_notifier_waits_until_woken(db: broker.Broker) -> None:
    """WAITFOR without a timeout waits on the notifier for ``inf`` seconds (PostgreSQL,
    whose listener wakes it): the platform's lock refused that timeout with an
    OverflowError, so RECEIVE ... timeout=-1 failed as soon as it began to wait."""
    notifier = db._state.notifier
    outcome: list[object] = []

    def wait() -> None:
        try:
            outcome.append(notifier.wait(7, notifier.counter(7), float("inf")))
        except Exception as exc:  # noqa: BLE001 - the failure the test looks for
            outcome.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    # Waiting on the condition, or already failed.
    wait_until(lambda: outcome or notifier._condition._waiters, 30)  # type: ignore[attr-defined]
    notifier.notify({7})
    waiter.join(30)
    assert outcome == [True]

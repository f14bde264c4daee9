"""PostgreSQL: servicebroker against plain psycopg 3 doing the broker's writes, in one run.

    python bench/postgres.py [--runs 5] [--sends 2000] [--groups 400] [--per-group 10]
        [--postgres-url postgresql+psycopg://root@127.0.0.1:5432/test] [--markdown]

One process, one connection, 1 KiB bodies; every measurement on a fresh database made
beside ``--postgres-url`` and dropped afterwards; runs interleaved (run 1 of every
figure, then run 2, ...), medians:

* SEND, 1 message per transaction on one dialog begun beforehand: servicebroker's
  ``tx.send`` against the floor "raw psycopg, broker's writes": INSERT into a table laid
  out like a broker queue (the broker's own table definition, its indexes) + UPDATE of
  both endpoints' sequence numbers, one transaction.
* RECEIVE TOP(10) from ``--groups`` dialogs of ``--per-group`` messages (filled untimed):
  servicebroker's ``tx.receive(queue, 10)`` until the queue is empty, against the floor:
  one statement that locks the first group nobody holds (``FOR UPDATE SKIP LOCKED``, in
  priority and age order) and returns its next 10 ready rows, then a DELETE of those
  rows, one transaction.

The floor is plain psycopg 3: a statement per call (prepared by psycopg after a few
executions, its default), no pipeline. Target: servicebroker at 0.7x the floor or
better for both, printed as PASS or MISS.

Round trips: a libpq trace of five transactions of each kind (after a warm-up) counts
the statements sent (each of a simple query's statements, "BEGIN; EXECUTE ...") and the
round trips (the times the client waits for the server: a run of messages sent followed
by one received), BEGIN and COMMIT included.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from psycopg import pq
from rich.console import Console
from rich.table import Table
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

import broker
from bench.common import Summary, body, counter_of
from bench.scaling import fresh_database
from broker.storage.queue_tables import queue_table

DEFAULT_URL = "postgresql+psycopg://root@127.0.0.1:5432/test"
TARGET = 0.7
TOP = 10
GROUPS, PER_GROUP = 400, 10  # the RECEIVE figure's queue, as ``bench/scaling.py`` fills it
QUEUE, INITIATOR_QUEUE, TARGET_SERVICE, INITIATOR_SERVICE = "Target", "Initiator", "//bench/Target", "//bench/Initiator"
FILL_PER_TRANSACTION = 500
TRACED = 5  # transactions per round-trip count
FIGURES = (("send1", "SEND, 1 per transaction"), ("receive10", f"RECEIVE TOP({TOP}), 1 reader"))
SYSTEMS = ("servicebroker", "raw psycopg, broker's writes")


# -- servicebroker -------------------------------------------------------------------------


class BrokerOnPostgres:
    """servicebroker through its public API: one dialog for SEND, ``groups`` for RECEIVE."""

    def __init__(self, url: str, dialogs: int) -> None:
        self.db = broker.connect(url)
        self.db.create_queue(QUEUE)
        self.db.create_queue(INITIATOR_QUEUE)
        self.db.create_service(TARGET_SERVICE, QUEUE, ["DEFAULT"])
        self.db.create_service(INITIATOR_SERVICE, INITIATOR_QUEUE)
        with self.db.transaction() as tx:
            self.handles = [tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE) for _ in range(dialogs)]

    def fill(self, per_group: int) -> None:
        counter = 0
        for _ in range(per_group):
            for start in range(0, len(self.handles), FILL_PER_TRANSACTION):
                with self.db.transaction() as tx:
                    for handle in self.handles[start:start + FILL_PER_TRANSACTION]:
                        tx.send(handle, body=body(counter))
                        counter += 1

    def put(self, data: bytes) -> None:
        with self.db.transaction() as tx:
            tx.send(self.handles[0], body=data)

    def take_many(self, n: int) -> list[bytes]:
        with self.db.transaction() as tx:
            messages = tx.receive(QUEUE, n)
        return [m.message_body or b"" for m in messages]

    def connection(self) -> psycopg.Connection[Any]:
        """The psycopg connection this thread's broker transactions run on."""
        conn = self.db.state.checkout()
        driver = conn.connection.driver_connection
        self.db.state.checkin(conn)
        assert isinstance(driver, psycopg.Connection)
        return driver

    def close(self) -> None:
        self.db.dispose()


# -- the floor -----------------------------------------------------------------------------


class RawPsycopgWrites:
    """Plain psycopg 3 doing only the writes Service Broker's semantics need per message.

    The queue table is the broker's own definition (``queue_table``: bigserial queuing
    order, the receive-order, group and conversation indexes); a group table as the
    target of the group locks; the two endpoints' sequence numbers.
    """

    def __init__(self, url: str, dialogs: int) -> None:
        table = queue_table("floor_queue")
        engine = create_engine(url)
        table.create(engine)
        engine.dispose()
        self.conn = psycopg.connect(_conninfo(url))
        self.groups = [uuid.uuid4() for _ in range(dialogs)]
        self.handle, self.peer = uuid.uuid4(), uuid.uuid4()
        self.conn.execute("CREATE TABLE floor_groups (conversation_group_id uuid PRIMARY KEY)")
        self.conn.execute("CREATE TABLE floor_endpoints (handle uuid PRIMARY KEY, send_sequence bigint,"
                          " receive_sequence bigint)")
        with self.conn.cursor() as cursor:
            cursor.executemany("INSERT INTO floor_groups VALUES (%s)", [(g,) for g in self.groups])
            cursor.executemany("INSERT INTO floor_endpoints VALUES (%s, 0, 0)", [(self.handle,), (self.peer,)])
        self.conn.commit()
        self._sequence = 0

    _INSERT = ("INSERT INTO floor_queue (status, priority, conversation_group_id, conversation_handle,"
               " message_sequence_number, service_id, service_contract_id, message_type_id, validation,"
               " message_body, message_enqueue_time, receive_rank) VALUES (1, 5, %s, %s, %s, 1, 1, 1, 'N', %s,"
               " now(), 2)")
    _NEXT_ROWS = (
        "WITH g AS (SELECT g.conversation_group_id FROM floor_queue q"
        " JOIN floor_groups g ON g.conversation_group_id = q.conversation_group_id WHERE q.status = 1"
        " ORDER BY q.priority DESC, q.queuing_order LIMIT 1 FOR UPDATE OF g SKIP LOCKED)"
        " SELECT q.queuing_order, q.message_body FROM floor_queue q JOIN g"
        " ON q.conversation_group_id = g.conversation_group_id WHERE q.status = 1"
        " ORDER BY q.priority DESC, q.queuing_order LIMIT %s"
    )

    def fill(self, per_group: int) -> None:
        rows = []
        counter = 0
        for sequence in range(1, per_group + 1):
            for group in self.groups:  # the group's one conversation shares its id
                rows.append((group, group, sequence, body(counter)))
                counter += 1
        with self.conn.cursor() as cursor:
            cursor.executemany(self._INSERT, rows)
        self.conn.commit()

    def put(self, data: bytes) -> None:
        conn = self.conn
        self._sequence += 1
        conn.execute(self._INSERT, (self.groups[0], self.peer, self._sequence, data))
        conn.execute("UPDATE floor_endpoints SET send_sequence = %s WHERE handle = %s", (self._sequence, self.handle))
        conn.execute("UPDATE floor_endpoints SET receive_sequence = %s WHERE handle = %s",
                     (self._sequence, self.peer))
        conn.commit()

    def take_many(self, n: int) -> list[bytes]:
        conn = self.conn
        rows = conn.execute(self._NEXT_ROWS, (n,)).fetchall()
        if rows:
            conn.execute("DELETE FROM floor_queue WHERE queuing_order = ANY(%s)", ([row[0] for row in rows],))
        conn.commit()
        return [bytes(row[1]) for row in rows]

    def connection(self) -> psycopg.Connection[Any]:
        return self.conn

    def close(self) -> None:
        self.conn.close()


Peer = BrokerOnPostgres | RawPsycopgWrites
FACTORIES: dict[str, Callable[[str, int], Peer]] = {SYSTEMS[0]: BrokerOnPostgres, SYSTEMS[1]: RawPsycopgWrites}


# -- measuring ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    postgres_url: str
    runs: int
    sends: int
    groups: int
    per_group: int


def measure_once(system: str, figure: str, settings: Settings) -> float:
    """Messages per second of one figure on a fresh database."""
    with fresh_database("postgresql", settings.postgres_url) as url:
        if figure == "send1":
            peer = FACTORIES[system](url, 1)
            try:
                bodies = [body(i) for i in range(settings.sends)]
                gc.collect()
                started = time.perf_counter()
                for data in bodies:
                    peer.put(data)
                return settings.sends / (time.perf_counter() - started)
            finally:
                peer.close()
        peer = FACTORIES[system](url, settings.groups)
        try:
            peer.fill(settings.per_group)
            expected = settings.groups * settings.per_group
            taken: list[bytes] = []
            gc.collect()
            started = time.perf_counter()
            while got := peer.take_many(TOP):
                taken.extend(got)
            elapsed = time.perf_counter() - started
            if sorted(counter_of(b) for b in taken) != list(range(expected)):
                raise RuntimeError(f"{system}: messages lost or duplicated")
            return expected / elapsed
        finally:
            peer.close()


def round_trips(system: str, settings: Settings) -> dict[str, tuple[float, float]]:
    """(round trips, statements) per transaction: SEND, RECEIVE TOP(1), RECEIVE TOP(10)."""
    out = {}
    with fresh_database("postgresql", settings.postgres_url) as url:
        peer = FACTORIES[system](url, 4)
        try:
            peer.fill(100)
            for _ in range(6):  # past psycopg's prepare threshold (5 executions)
                peer.put(body(0))
                peer.take_many(1)
                peer.take_many(TOP)
            out["send1"] = _traced(peer.connection(), lambda: peer.put(body(0)))
            out["receive1"] = _traced(peer.connection(), lambda: peer.take_many(1))
            out["receive10"] = _traced(peer.connection(), lambda: peer.take_many(TOP))
        finally:
            peer.close()
    return out


def _traced(conn: psycopg.Connection[Any], transaction: Callable[[], object]) -> tuple[float, float]:
    with tempfile.NamedTemporaryFile() as trace:
        conn.pgconn.trace(trace.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            for _ in range(TRACED):
                transaction()
        finally:
            conn.pgconn.untrace()  # flushes the trace
        lines = Path(trace.name).read_text().splitlines()
    directions = [line[:1] for line in lines]
    trips = sum(1 for sent, received in zip(directions, directions[1:], strict=False)
                if sent == "F" and received == "B")
    # A simple query may carry several statements ("BEGIN; EXECUTE ..."): each counts.
    statements = sum(1 + (line.count("; ") if line.split("\t")[2] == "Query" else 0) for line in lines
                     if line.startswith("F") and line.split("\t")[2] in ("Query", "Execute"))
    return trips / TRACED, statements / TRACED


def reachable(postgres_url: str) -> None:
    """Raise OSError (psycopg's OperationalError is not one) when the server cannot be reached."""
    try:
        psycopg.connect(_conninfo(postgres_url), connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        raise OSError(f"PostgreSQL at {make_url(postgres_url).render_as_string()} cannot be reached: {exc}") from exc


def _conninfo(url: str) -> str:
    """A SQLAlchemy URL as libpq takes it."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def run(settings: Settings, log: Callable[[str], object]) -> dict[str, Any]:
    """Every figure, ``settings.runs`` times interleaved, and the round trips: a results dict."""
    rates: dict[str, list[float]] = {f"{s}/{f}": [] for f, _ in FIGURES for s in SYSTEMS}
    for number in range(settings.runs):
        for figure, _label in FIGURES:
            for system in SYSTEMS:
                rate = measure_once(system, figure, settings)
                rates[f"{system}/{figure}"].append(rate)
                log(f"run {number + 1}/{settings.runs} {system} {figure}: {rate:,.0f} msg/s")
    trips = {system: round_trips(system, settings) for system in SYSTEMS}
    return {"settings": vars(settings), "rates": {k: Summary.of(v).as_dict() for k, v in rates.items()},
            "round_trips": trips}


def tables(results: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    rates = results["rates"]
    settings = results["settings"]
    rows = []
    for figure, label in FIGURES:
        mine, floor = rates[f"{SYSTEMS[0]}/{figure}"], rates[f"{SYSTEMS[1]}/{figure}"]
        ratio = mine["median"] / floor["median"]
        rows.append([label, f"{mine['median']:,.0f} ({mine['min']:,.0f}-{mine['max']:,.0f})",
                     f"{floor['median']:,.0f} ({floor['min']:,.0f}-{floor['max']:,.0f})", f"{ratio:.2f}x",
                     f">= {TARGET}x", "PASS" if ratio >= TARGET else "MISS"])
    trip_rows = []
    for system, counts in results["round_trips"].items():
        for figure, label in (("send1", "SEND, 1 per transaction"), ("receive1", "RECEIVE TOP(1)"),
                              ("receive10", f"RECEIVE TOP({TOP})")):
            trips, statements = counts[figure]
            trip_rows.append([system, label, f"{trips:g}", f"{statements:g}"])
    return [
        (f"PostgreSQL, 1 KiB bodies, msg/s, median (min-max) of {settings['runs']} runs",
         ["figure", SYSTEMS[0], SYSTEMS[1], "ratio", "target", "status"], rows),
        ("PostgreSQL round trips per transaction (BEGIN and COMMIT included)",
         ["system", "transaction", "round trips", "statements"], trip_rows),
    ]


def print_rich(results: dict[str, Any], console: Console) -> None:
    for title, header, rows in tables(results):
        table = Table(title=title, title_justify="left")
        for i, name in enumerate(header):
            table.add_column(name, justify="left" if i == 0 or name in ("transaction", "status") else "right")
        for row in rows:
            table.add_row(*row, style="red" if row[-1] == "MISS" else None)
        console.print(table)


def markdown(results: dict[str, Any]) -> str:
    parts: list[str] = []
    for title, header, rows in tables(results):
        parts += [f"**{title}**\n", "| " + " | ".join(header) + " |",
                  "|" + "|".join("---" if i == 0 or name in ("transaction", "status") else "---:"
                                 for i, name in enumerate(header)) + "|"]
        parts += ["| " + " | ".join(row) + " |" for row in rows]
        parts.append("")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres-url", default=DEFAULT_URL,
                        help="a database on the server (benchmark databases are made beside it)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sends", type=int, default=2000)
    parser.add_argument("--groups", type=int, default=GROUPS)
    parser.add_argument("--per-group", type=int, default=PER_GROUP)
    parser.add_argument("--markdown", action="store_true", help="print the tables as markdown")
    args = parser.parse_args(argv)
    settings = Settings(args.postgres_url, args.runs, args.sends, args.groups, args.per_group)
    results = run(settings, Console(stderr=True).log)
    if args.markdown:
        sys.stdout.write(markdown(results))
    else:
        print_rich(results, Console())


if __name__ == "__main__":
    main()

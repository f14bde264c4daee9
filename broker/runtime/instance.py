"""The runtime of an instance: every database's own runtime, one transmitter, the endpoint.

``inst.runtime()`` and ``broker --instance URL run``. Each database served keeps its own
scheduler and activation (``runner.Runtime``); one transmitter thread moves messages
between them, woken by a commit to any of them: at once for this process's commits,
within milliseconds for another process's (SQLite's ``PRAGMA data_version``, PostgreSQL's
LISTEN/NOTIFY), and at the next retry otherwise.

When the instance catalog defines a Service Broker endpoint whose state is STARTED, the
runtime also serves it (``transport.tcp``): it listens on the endpoint's port, hands what
arrives to ``inbound.Inbound`` and gives the transmitter the network transport for
messages routed to other instances. Its connections are written to the instance
catalog's ``sys.dm_broker_connections`` every ``CONNECTIONS_EVERY_S``. The endpoint's
definition is read when the runtime starts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType

from broker.ddl.certificates import thumbprint, tls_contexts
from broker.ddl.endpoints import EndpointConfig, endpoint_config
from broker.runtime.connections import forget_connections, record_connections, runtime_session
from broker.runtime.inbound import Inbound
from broker.runtime.runner import DEFAULT_POLL_S, Runtime, failure_pause
from broker.runtime.transmitter import Transmitter
from broker.storage.served import ServedDatabase, read_in, run_in
from broker.storage.waiting import ANY_QUEUE
from broker.transport.tcp import EndpointSettings, TcpEndpoint

log = logging.getLogger("broker.runtime")
WATCH_SLICE_S = 0.25  # a watcher re-arms this often, so that it notices the runtime stopping
# Passes start at least this far apart: a burst of commits is taken in batches, and a
# lone commit waits no longer than this for its pass.
TRANSMIT_GAP_S = 0.002
CONNECTIONS_EVERY_S = 1.0
RUNTIME_STOP_S = 30.0
ENDPOINT_STOP_S = 10.0


class InstanceRuntime:
    """The runtimes of ``databases()``, the transmitter between them and the endpoint of
    the instance catalog ``catalog`` (if it defines one); a context manager."""

    def __init__(self, databases: Callable[[], Sequence[ServedDatabase]], *,
                 catalog: ServedDatabase | None = None,
                 poll_interval: float = DEFAULT_POLL_S, activation: bool = True) -> None:
        self._databases = databases
        self._catalog = catalog
        self.endpoint: TcpEndpoint | None = None
        self._config: EndpointConfig | None = None  # the definition the endpoint runs with
        self._session = runtime_session()
        self.poll_interval = poll_interval
        self._activation = activation
        self._served: dict[int, _Served] = {}  # by the id of the database object
        self._serving = threading.Lock()
        self._stopping = threading.Event()
        self._commit = threading.Event()  # a commit to watch, or an answer to settle: another pass
        self.transmitter = Transmitter(self._serving_now, wake=self._commit.set)
        self._threads: list[threading.Thread] = []

    def start(self) -> InstanceRuntime:
        """Start every database's runtime, the transmitter and the commit watchers."""
        if self._threads:
            raise RuntimeError("this runtime is already running")
        self._stopping.clear()
        self._start_endpoint()
        self._serve_databases()
        self._threads = [threading.Thread(target=self._transmit, name="broker-transmitter", daemon=True)]
        if self._catalog is not None:
            self._threads.append(threading.Thread(target=self._keep_endpoint, name="broker-endpoint-keeper",
                                                  daemon=True))
        for thread in self._threads:
            thread.start()
        log.info("instance runtime started on %d database(s)", len(self._served))
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the transmitter (after its current pass) and every database's runtime,
        within ``timeout`` for them all (not for each)."""
        deadline = time.monotonic() + timeout
        self._stopping.set()
        self._commit.set()
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads = []
        with self._serving:
            served_now, self._served = list(self._served.values()), {}
        for served in served_now:
            served.stopping.set()
        for served in served_now:
            self._stop_serving(served, max(0.0, deadline - time.monotonic()))
        self._stop_endpoint(max(0.0, deadline - time.monotonic()))
        log.info("instance runtime stopped")

    @property
    def running(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    @property
    def runtimes(self) -> list[Runtime]:
        """The runtimes of the databases it serves now."""
        with self._serving:
            return [served.runtime for served in self._served.values()]

    def _serve_databases(self) -> None:
        """Run a runtime (scheduler, activation) and a commit watcher for each database
        ``databases()`` gives now, and stop those of the databases it no longer gives (a
        database removed from the instance, one whose mirror partner became principal)."""
        current = {id(db): db for db in self._databases()}
        with self._serving:
            gone = [self._served.pop(key) for key in list(self._served) if key not in current]
        for served in gone:
            self._stop_serving(served, RUNTIME_STOP_S)
            # Its listener and connections too: the database may have been disposed already
            # (removed from the instance), and its runtime's stop opened some again.
            served.db.state.close_idle()
            served.db.engine.dispose()
        for key, db in current.items():
            if key not in self._served:
                stopping = threading.Event()
                watcher = threading.Thread(target=self._watch, args=(db, stopping), name="broker-watch", daemon=True)
                runtime = Runtime(db, poll_interval=self.poll_interval, activation=self._activation).start()
                watcher.start()
                with self._serving:
                    self._served[key] = _Served(db, runtime, watcher, stopping)

    def _serving_now(self) -> list[ServedDatabase]:
        """The databases the transmitter serves: while running, the ones the runtime serves
        (``databases()`` as the keeper last read it, within a second), so that its passes
        do not read the instance's members each time; else ``databases()`` now. (A
        database whose partner has just become principal may be sent from by both for
        that second: its destinations drop what they already have.)"""
        with self._serving:
            if self._threads:
                return [served.db for served in self._served.values()]
        return list(self._databases())

    @staticmethod
    def _stop_serving(served: _Served, timeout: float) -> None:
        served.stopping.set()
        served.runtime.stop(timeout)
        served.watcher.join(timeout)

    def __enter__(self) -> InstanceRuntime:
        return self if self.running else self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    def run_pass(self) -> float:
        """One transmitter pass over every database; seconds until the next is due."""
        moved, due = self.transmitter.run_pass()
        if moved:
            log.info("moved %d message(s) out of transmission queues", moved)
        wait = self.poll_interval
        if due is not None:
            wait = min(wait, max(0.0, (due - datetime.now(UTC)).total_seconds()))
        return wait

    def _transmit(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            started = time.monotonic()
            self._commit.clear()  # a commit from here on starts another pass
            try:
                wait = self.run_pass()
                failures = 0
            except Exception:
                failures += 1
                log.exception("transmitter pass failed; retrying in %.1f s", failure_pause(failures))
                self._stopping.wait(failure_pause(failures))  # not in a loop as fast as commits
                continue
            self._commit.wait(wait)
            self._stopping.wait(max(0.0, started + TRANSMIT_GAP_S - time.monotonic()))

    def _start_endpoint(self) -> None:
        """Serve the instance's endpoint if it has one that is STARTED (an OSError if its
        port is taken). STOPPED and DISABLED endpoints neither listen nor send."""
        catalog = self._catalog
        if catalog is None:
            return
        config, instance_id = read_in(catalog, lambda ctx: (endpoint_config(ctx), str(ctx.catalog.broker_guid)))
        if config is None or config.state != "STARTED":
            self._config = config
            return
        server_context, client_context = tls_contexts(config.certificate, config.private_key, config.trusted_peers)
        settings = EndpointSettings(config.name, instance_id, server_context, client_context, _listen_on(config),
                                    tuple(thumbprint(peer) for peer in config.trusted_peers),
                                    config.encryption, config.message_forwarding,
                                    config.message_forward_size << 20)
        # What arrives asks ``databases()`` each batch: a database this instance has just
        # become the mirror of refuses at once (954), before the keeper's next look.
        inbound = Inbound(catalog, self._databases, forwarding=config.message_forwarding)
        self.endpoint = TcpEndpoint(settings, inbound.apply).start()
        self.transmitter.network = self.endpoint
        self._config = config

    def _stop_endpoint(self, timeout: float) -> None:
        if self.endpoint is not None:
            self.transmitter.network = None
            self.endpoint.stop(timeout)
            self._write_connections(closing=True)
            self.endpoint = None

    def _keep_endpoint(self) -> None:
        """Every second: serve the databases the instance now has (``_serve_databases``)
        and the endpoint as the instance catalog now defines it (CREATE, ALTER and DROP
        ENDPOINT take effect within a second, as SQL Server's do at once), and write its
        connections."""
        catalog = self._catalog
        assert catalog is not None
        while not self._stopping.wait(CONNECTIONS_EVERY_S):
            try:
                self._serve_databases()
                if read_in(catalog, endpoint_config) != self._config:
                    log.info("the endpoint's definition changed: serving it anew")
                    self._stop_endpoint(ENDPOINT_STOP_S)
                    self._start_endpoint()
                self._write_connections()
            except Exception:
                log.exception("could not serve the endpoint or write sys.dm_broker_connections")

    def _write_connections(self, *, closing: bool = False) -> None:
        endpoint, catalog = self.endpoint, self._catalog
        if endpoint is None or catalog is None:
            return
        if closing:
            run_in(catalog, lambda ctx: forget_connections(ctx, self._session))
        else:
            connections, forwarded = endpoint.connections(), endpoint.forwarded()
            run_in(catalog, lambda ctx: record_connections(ctx, self._session, connections, forwarded))

    def _watch(self, db: ServedDatabase, stopping: threading.Event) -> None:
        """Set the commit event whenever ``db`` commits (until ``stopping``)."""
        state = db.state
        with state.backend.watching(db.engine, state.notifier) as commits:
            while not self._stopping.is_set() and not stopping.is_set():
                mark = commits.mark()
                deadline = time.monotonic() + WATCH_SLICE_S
                commits.wait(mark, deadline)
                if state.notifier.counter(ANY_QUEUE) != mark[0] or time.monotonic() < deadline:
                    self._commit.set()


@dataclass
class _Served:
    """A database served: its runtime and the thread that watches it for commits."""

    db: ServedDatabase
    runtime: Runtime
    watcher: threading.Thread
    stopping: threading.Event


def _listen_on(config: EndpointConfig) -> tuple[str, int]:
    """LISTENER_IP = ALL listens on every interface (IPv4 and IPv6)."""
    return (config.listener_ip or "", config.port)


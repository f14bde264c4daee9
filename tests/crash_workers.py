"""Worker processes for the crash test between databases (run as scripts, not collected).

runtime CATALOG_URL
    Opens the instance and runs ``inst.runtime()`` until SIGTERM (a clean stop, then
    "stopped" on stdout and exit status 0). Prints "started" once the runtime runs. The
    test kills it with SIGKILL at random moments.
producer DATABASE_URL HANDLES_FILE MESSAGES
    Sends MESSAGES messages on the dialogs listed in HANDLES_FILE (a JSON list of
    initiator handles, begun by the test): message ``k`` goes to dialog ``k % n`` with
    sequence number ``k // n``, its body ``message_body(k % n, k // n)``, between 1 and
    ``MAX_PER_TRANSACTION`` SENDs per transaction. It sends only up to the running total
    the test allows, one integer per line on stdin, and prints "done" after the last
    message. Killed and started again, it learns from the endpoints' ``send_sequence``
    how far it got; a total that does not fit the pattern (a SEND transaction that
    committed in part) exits with status ``TORN`` and says so on stderr. A transaction
    chosen as a deadlock victim is sent again, and reported on stderr as
    ``DEADLOCK_VICTIM``, with ``UNCONVERTED`` when the driver's error reached the
    producer instead of error 1205.
"""

from __future__ import annotations

import json
import random
import signal
import sys
import uuid

import broker

TARGET_QUEUE = "CrashTargetQueue"
INITIATOR_QUEUE = "CrashInitiatorQueue"
TARGET = "//crash/Target"
INITIATOR = "//crash/Initiator"
BODY_SIZE = 1024
MAX_PER_TRANSACTION = 25
TORN = 3
DEADLOCK = 1205
DEADLOCK_SQLSTATE = "40P01"
DEADLOCK_VICTIM = "deadlock victim"
UNCONVERTED = "unconverted driver error"


def message_body(conversation: int, sequence: int) -> bytes:
    """``"<conversation>:<sequence>:"`` padded to 1 KiB."""
    return f"{conversation}:{sequence}:".encode().ljust(BODY_SIZE, b".")


def parse_body(data: bytes) -> tuple[int, int]:
    """The (conversation, sequence) a ``message_body`` carries."""
    conversation, sequence, _ = data.split(b":", 2)
    return int(conversation), int(sequence)


def deadlocked(error: Exception) -> bool:
    """A deadlock victim: error 1205, or the driver's own deadlock error (PostgreSQL's
    SQLSTATE 40P01) where it reached the caller without being numbered."""
    if isinstance(error, broker.BrokerError):
        return error.number == DEADLOCK
    return getattr(error, "sqlstate", None) == DEADLOCK_SQLSTATE


def runtime(catalog_url: str) -> None:
    """Serve the instance until SIGTERM."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # the runtime's threads inherit the mask
    inst = broker.instance(catalog_url)
    with inst.runtime():
        print("started", flush=True)
        signal.sigwait({signal.SIGTERM})
    inst.dispose()
    print("stopped", flush=True)


def sent_so_far(db: broker.Broker, handles: list[uuid.UUID]) -> int:
    """How many messages the producer has committed, from the endpoints' send sequences."""
    sequences = {row["conversation_handle"]: row["send_sequence"] for row in db.catalog("sys.conversation_endpoints")}
    counts = [int(sequences[handle]) for handle in handles]
    total = sum(counts)
    expected = [total // len(handles) + (1 if number < total % len(handles) else 0) for number in range(len(handles))]
    if counts != expected:
        sys.stderr.write(f"torn SEND transaction: send sequences {counts} do not make {total} messages in turn\n")
        sys.exit(TORN)
    return total


def producer(url: str, handles_file: str, messages: int) -> None:
    """Send ``messages`` messages in turn on the dialogs, as far as stdin allows."""
    with open(handles_file) as source:
        handles = [uuid.UUID(text) for text in json.load(source)]
    rng = random.Random()
    db = broker.connect(url)
    sent = sent_so_far(db, handles)
    allowed = 0
    while sent < messages:
        while allowed <= sent:
            line = sys.stdin.readline()
            if not line:
                sys.exit(f"stdin closed after {sent} messages of {messages}")
            allowed = min(messages, int(line))
        count = min(rng.randint(1, MAX_PER_TRANSACTION), allowed - sent)
        try:
            with db.transaction() as tx:
                for k in range(sent, sent + count):
                    number, sequence = k % len(handles), k // len(handles)
                    tx.send(handles[number], body=message_body(number, sequence))
        except Exception as error:
            if not deadlocked(error):
                raise
            kind = "BrokerError 1205" if isinstance(error, broker.BrokerError) else \
                f"{UNCONVERTED} {type(error).__module__}.{type(error).__name__}"
            print(f"{DEADLOCK_VICTIM} ({kind}): {error}", file=sys.stderr, flush=True)
            continue  # rolled back: send the same messages again
        sent += count
    db.dispose()
    print("done", flush=True)


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    if role == "runtime":
        runtime(args[0])
    elif role == "producer":
        producer(args[0], args[1], int(args[2]))
    else:
        raise SystemExit(f"unknown role {role}")

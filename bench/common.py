"""Shared pieces: message bodies, durability settings, scratch directories, statistics."""

from __future__ import annotations

import shutil
import sqlite3
import statistics
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BODY_SIZE = 1024
COUNTER_DIGITS = 12
SYNCHRONOUS_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def body(counter: int) -> bytes:
    """A 1 KiB message body that starts with ``counter`` in decimal."""
    return f"{counter:0{COUNTER_DIGITS}d}".encode().ljust(BODY_SIZE, b".")


def counter_of(data: bytes | str) -> int:
    """The counter a ``body()`` carries."""
    return int(data[:COUNTER_DIGITS])


@dataclass(frozen=True)
class Durability:
    """What ``PRAGMA journal_mode`` and ``PRAGMA synchronous`` read back on a connection."""

    journal_mode: str
    synchronous: int

    @property
    def label(self) -> str:
        return f"{self.journal_mode.upper()}, synchronous={SYNCHRONOUS_NAMES.get(self.synchronous, self.synchronous)}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label}


def force_full(conn: sqlite3.Connection) -> None:
    """Put a sqlite3 connection in WAL mode with ``synchronous=FULL``."""
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")


def read_durability(conn: sqlite3.Connection) -> Durability:
    """Read the journal mode and synchronous level back from a sqlite3 connection."""
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    synchronous = conn.execute("PRAGMA synchronous").fetchone()[0]
    return Durability(str(journal), int(synchronous))


@contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A fresh temporary directory on disk, deleted afterwards."""
    path = Path(tempfile.mkdtemp(prefix=f"sbbench-{prefix}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclass(frozen=True)
class Summary:
    """Median, min and max of repeated measurements (higher is better for rates)."""

    median: float
    min: float
    max: float
    samples: tuple[float, ...]

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        return cls(statistics.median(values), min(values), max(values), tuple(values))

    def as_dict(self) -> dict[str, Any]:
        return {"median": self.median, "min": self.min, "max": self.max, "samples": list(self.samples)}


def percentile(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile of ``values`` (nearest rank on the sorted list)."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]

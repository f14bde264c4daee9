"""The id a streaming write's commits are recorded under in ``sb_spark_sinks``."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

# Kept inside the checkpoint, so that the sink id lives and dies with it.
MARKER = "servicebroker-sink-id"


def checkpoint_sink_id(location: str) -> str:
    """The sink id of a stream written with ``checkpointLocation`` and no ``sinkId``.

    A new checkpoint starts its batch ids again at 0, so it must be a new sink too, even
    at the path of a deleted one: the old sink's record would make its first batches
    look like replays, and they would be skipped. The id is the location plus a random
    part, written into the checkpoint on first use (atomically: of two planners at once,
    the first one's id wins). A checkpoint that has committed batches but no such file
    predates it: its id stays the bare location, as it was. Where the location is not on
    this machine's file system (``hdfs:``, ``s3a:``, ...) the bare location is the id,
    and a deleted checkpoint needs a new ``sinkId``.
    """
    parsed = urlsplit(location)
    if parsed.scheme == "file":
        directory = Path(url2pathname(parsed.path))
    elif len(parsed.scheme) <= 1:  # a plain path (a one-letter scheme is a drive letter)
        directory = Path(location)
    else:
        return location
    marker = directory / MARKER
    try:
        return marker.read_text(encoding="utf-8")
    except FileNotFoundError:
        pass
    commits = directory / "commits"
    older = commits.is_dir() and any(entry.name.isdigit() for entry in commits.iterdir())
    sink_id = location if older else f"{location}#{uuid.uuid4()}"
    directory.mkdir(parents=True, exist_ok=True)
    draft = directory / f".{MARKER}.{uuid.uuid4().hex}"
    draft.write_text(sink_id, encoding="utf-8")
    try:
        os.link(draft, marker)  # fails if the marker exists: never a half-written one
    except FileExistsError:
        sink_id = marker.read_text(encoding="utf-8")
    finally:
        draft.unlink()
    return sink_id

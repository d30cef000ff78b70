"""Write Chrome/Kineto JSON traces that Perfetto, TensorBoard and `lumos.trace` open.

The emulator writes its per-rank traces through here, and `lumos replay --out`
writes replayed timelines through here, so both produce the same format.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

import orjson

from .atomic import atomic_open


def trace_document(events: Iterable[Mapping[str, Any]], metadata: Mapping[str, Any] | None = None) -> dict:
    """A Kineto-style top-level object: metadata keys beside `traceEvents`."""
    doc: dict[str, Any] = {"schemaVersion": 1}
    if metadata:
        doc.update(metadata)
    doc["traceEvents"] = list(events)
    return doc


def write_trace(path: str | os.PathLike, events: Iterable[Mapping[str, Any]],
                metadata: Mapping[str, Any] | None = None, compresslevel: int = 6) -> None:
    """Write `events` (Chrome trace event dicts) to `path` (.json or .json.gz), atomically.

    `metadata` holds top-level keys such as `distributedInfo` ({"rank", "world_size",
    "backend"}), `deviceProperties` or `traceName`. Output is deterministic for the
    same input (gzip mtime is fixed at 0). `compresslevel` trades size for time on `.gz`:
    level 1 writes a large trace about 2.5x faster and 40% bigger than level 6.
    """
    write_encoded(path, encode_trace(events, metadata), compresslevel)


def encode_trace(events: Iterable[Mapping[str, Any]], metadata: Mapping[str, Any] | None = None) -> bytes:
    """The JSON bytes `write_trace` writes (split out so a caller can compress on another thread)."""
    return orjson.dumps(trace_document(events, metadata), option=orjson.OPT_SERIALIZE_NUMPY)


def write_encoded(path: str | os.PathLike, data: bytes, compresslevel: int = 6) -> None:
    """Write `encode_trace` output atomically; gzip (which releases the GIL) when `path` ends in .gz."""
    with atomic_open(path, "wb", compresslevel) as fh:
        fh.write(data)


def write_trace_chunks(path: str | os.PathLike, chunks: Iterable[Iterable[Mapping[str, Any]]],
                       metadata: Mapping[str, Any] | None = None, compresslevel: int = 6) -> int:
    """Write a trace whose events come in chunks (one rank at a time, say), atomically; the event count.

    The same document as `write_trace`, but `traceEvents` is written chunk by chunk, so only one
    chunk's events and its JSON are in memory at once: a run of many ranks merged into one file
    never holds every rank's events together. The metadata keys come first, `traceEvents` last.
    """
    empty = orjson.dumps(trace_document((), metadata), option=orjson.OPT_SERIALIZE_NUMPY)
    count = 0
    with atomic_open(path, "wb", compresslevel) as fh:
        fh.write(empty[:-len(b"]}")])   # the document up to the open `traceEvents` array
        for chunk in chunks:
            events = list(chunk)
            if not events:
                continue
            body = orjson.dumps(events, option=orjson.OPT_SERIALIZE_NUMPY)
            fh.write(b"," if count else b"")
            fh.write(body[1:-1])   # the array's elements, without its brackets
            count += len(events)
            del chunk, events, body   # before the next chunk is made
        fh.write(b"]}")
    return count

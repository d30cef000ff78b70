"""Read a Kineto trace (.json or .json.gz, PyTorch 1.9 to 2.x schemas) into a TraceTable.

Only complete ('X') events of the categories in `schema.CATEGORY_CODES` are
kept (of the `python_function` events, the module calls only); flows, instants,
metadata and memory events are dropped after parsing, because the correlation
id on both ends already links a launch to its GPU op.
Complete events of another category that carry a `device` or `stream` arg are
device work Lumos does not model: they are counted by category
(`TraceTable.unmodelled`) so that a replay can name them.

Two ways in, one result:
- `load_trace` scans the file's bytes with a compiled (C) JSON scanner that
  validates the whole document and records, for each kept event, where each
  needed field's value lies; the values are then decoded column by column
  (times and strings by C decoders, the rest batched through orjson where they
  are not plain integers). No per-event
  Python object is ever built, so loading runs at about orjson's speed and
  its working memory is about the file's size, where a decoded document of
  dicts takes five to eight times that (`scanned.py`).
- Without the compiled kernels (`lumos.jit`; `LUMOS_JIT=never`) every file goes down
  the plain path.
- Anything the scanner is not sure of (invalid JSON, an escaped key, a field
  of an unexpected type, numbers near the float limits, deep nesting) sends
  the file down the plain path instead: `orjson.loads`, then `parse_document`,
  one event at a time. That path is the definition of the result and of every
  error message; tests hold the two equal on every shipped trace, on random
  documents and on corrupted bytes.
- A malformed trace is one TraceError line naming the file, the event (its index in traceEvents and
  its name) and the field, never a traceback: `args` or `distributedInfo` that is not an
  object, an integer field beyond int64, a rank outside its world or a world size outside 1 to
  MAX_RANKS. The scanner leaves each of them to the plain path, so both paths say the same.

The scanner (`scan.py`) compiles in about 7 s the first time (cached in `__pycache__`).
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import numpy as np
import orjson

from lumos import collector, jit, prefetch

from . import schema
from .errors import TraceError, format_counts
from .table import FLOAT_COLUMNS, INT_COLUMNS, OBJECT_COLUMNS, TraceTable


def _read_bytes(path: Path) -> bytes:
    return _read_trace_file(path)[0]


def _read_trace_file(path: Path) -> tuple[bytes, object]:
    """The file's bytes (gunzipped), and the scan the prefetch thread made of them (None if none)."""
    if not path.exists():
        raise TraceError(path, "no such file")
    if path.is_dir():
        raise TraceError(path, "is a directory, not a trace file (use load_run for a directory of ranks)")
    got = prefetch.take(path)   # read beside the process's start-up (`lumos.prefetch`), if it was
    if got is not None:
        return got
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceError(path, f"cannot decompress: {exc}") from None
    return data, None


def _as_int(value, default: int = -1) -> int:
    read = schema.read_int(value)
    return default if read is None else read


INT64 = (-(1 << 63), 1 << 63)   # the range of an integer column
MAX_RANKS = 1 << 24             # the most ranks a world may hold: 16,777,216, 1,000x the largest run
                                # published (16,384 GPUs); the replay sizes tables by the largest rank
# the integer columns by the keys they are read from, in the order an event's are checked
INT_SOURCES = (("pid", "pid"), ("tid", "tid"), ("corr", "correlation"), ("ext", "External id"), ("stream", "stream"),
               ("device", "device"), ("wait_stream", "wait_on_stream"),
               ("wait_corr", "wait_on_cuda_event_record_corr_id"), ("in_nelems", "In msg nelems"),
               ("out_nelems", "Out msg nelems"), ("group_size", "Group size"), ("seq", "Sequence number"))
_EVENT_KEYS = frozenset({"pid", "tid"})


def shown(value, most: int = 40) -> str:
    """A JSON value as an error message shows it: its repr, cut to `most` characters."""
    text = repr(value)
    return text if len(text) <= most else text[:most - 3] + "..."


def json_kind(value) -> str:
    """What a decoded JSON value is, as a message says it ("an array")."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return {list: "an array", dict: "an object", str: "a string"}.get(type(value), "null")


def event_label(i: int, name: str) -> str:
    """How a message names event i of traceEvents: '#12 'aten::mm'' (a long name cut)."""
    return f"#{i} {name!r}" if len(name) <= 120 else f"#{i} {name[:117]!r}..."


def _int_columns(cols: dict[str, list], index: list[int], events: list, path) -> dict[str, np.ndarray]:
    """The integer columns as int64; a value beyond int64 is a TraceError naming the first event
    that holds one (and the first such field of it, in INT_SOURCES order)."""
    try:
        return {c: np.asarray(cols[c], dtype=np.int64) for c in INT_COLUMNS}
    except OverflowError:
        pass
    lo, hi = INT64
    first = {}
    for c, _ in INT_SOURCES:
        first[c] = next((k for k, v in enumerate(cols[c]) if not lo <= v < hi), len(index))
    row = min(first.values())
    key = next(key for c, key in INT_SOURCES if first[c] == row)
    i = index[row]
    ev = events[i]
    if key in _EVENT_KEYS:
        field, value = key, ev.get(key)
    else:
        args = ev.get("args") or {}
        if key == "External id" and "External id" not in args:
            key = "external id"
        field, value = f"args.{key}", args.get(key)
    raise TraceError(path, f"{field!r} {shown(value)} is beyond the 64-bit integer range",
                     event=event_label(i, ev["name"]))


# --- the plain path: a decoded document, one event at a time --------------------------------

def parse_document(doc, path) -> TraceTable:
    """Turn a decoded Kineto JSON object into a TraceTable, validating as it goes."""
    if not isinstance(doc, dict):
        raise TraceError(path, "top level is not a JSON object")
    events = doc.get("traceEvents")
    if events is None and "nodes" in doc and "schema" in doc:
        raise TraceError(path, f"a PyTorch execution trace (schema {doc['schema']}), not a Kineto trace: pass the "
                               "Kineto trace of the same run (Lumos ties kernels to launches by correlation id "
                               "and reads no execution trace)")
    if events is None:
        raise TraceError(path, "no 'traceEvents' key: not a Kineto/Chrome trace")
    if not isinstance(events, list):
        raise TraceError(path, "'traceEvents' is not a list")

    cols: dict[str, list] = {c: [] for c in INT_COLUMNS + FLOAT_COLUMNS + OBJECT_COLUMNS}
    index: list[int] = []   # the event each row is
    codes = schema.CATEGORY_CODES
    unmodelled: dict[str, int] = {}
    unmodelled_us: dict[str, float] = {}
    for i, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        cat = ev.get("cat")
        code = codes.get(cat.lower()) if isinstance(cat, str) else None
        name = ev.get("name")
        if code is None:
            if isinstance(cat, str) and _on_device(ev.get("args")):
                unmodelled[cat] = unmodelled.get(cat, 0) + 1
                dur = ev.get("dur")
                if isinstance(dur, (int, float)) and not isinstance(dur, bool) and dur > 0:
                    unmodelled_us[cat] = unmodelled_us.get(cat, 0.0) + float(dur)
            continue
        if code == schema.PY_MODULE and not (isinstance(name, str) and name.startswith(schema.MODULE_PREFIX)):
            continue
        if not isinstance(name, str):
            raise TraceError(path, "event has no name", event=f"#{i}")
        ts, dur = ev.get("ts"), ev.get("dur")
        if not isinstance(ts, (int, float)) or isinstance(ts, bool):
            raise TraceError(path, "missing or non-numeric 'ts'", event=event_label(i, name))
        if not isinstance(dur, (int, float)) or isinstance(dur, bool):
            raise TraceError(path, "missing or non-numeric 'dur'", event=event_label(i, name))
        if dur < 0:
            raise TraceError(path, f"negative duration {dur}", event=event_label(i, name))
        if code == schema.CPU_OP and name.startswith("ProfilerStep#"):
            code = schema.ANNOTATION  # legacy traces file steps under 'Operator'
        args = ev.get("args") or {}   # null, and an empty array, string or number: no args
        if not isinstance(args, dict):
            raise TraceError(path, f"'args' is {json_kind(args)}, not an object", event=event_label(i, name))
        index.append(i)
        gpu = code in schema.GPU_CATEGORIES or code == schema.SYNC or code == schema.GPU_ANNOTATION
        tid = _as_int(ev.get("tid"))
        cols["name"].append(name)
        cols["cat"].append(code)
        cols["pid"].append(_as_int(ev.get("pid")))
        cols["tid"].append(tid)
        cols["ts"].append(ts)
        cols["dur"].append(dur)
        cols["corr"].append(_as_int(args.get("correlation")))
        ext = args.get("External id", args.get("external id"))
        cols["ext"].append(_as_int(ext))
        stream = args.get("stream")
        cols["stream"].append(_as_int(stream) if stream is not None else (tid if gpu and code != schema.SYNC else -1))
        cols["device"].append(_as_int(args.get("device"), _as_int(ev.get("pid")) if gpu else -1))
        cols["wait_stream"].append(_as_int(args.get("wait_on_stream")))
        cols["wait_corr"].append(_as_int(args.get("wait_on_cuda_event_record_corr_id")))
        cols["sync_kind"].append(args.get("cuda_sync_kind"))
        cols["coll_name"].append(args.get("Collective name"))
        cols["in_nelems"].append(_as_int(args.get("In msg nelems")))
        cols["out_nelems"].append(_as_int(args.get("Out msg nelems")))
        cols["group_size"].append(_as_int(args.get("Group size")))
        cols["seq"].append(_as_int(args.get("Sequence number")))
        cols["dtype"].append(args.get("dtype"))
        cols["pg_ranks"].append(args.get("Process Group Ranks"))
        cols["pg_name"].append(args.get("Process Group Name"))
        cols["input_dims"].append(args.get("Input Dims") if code == schema.CPU_OP else None)

    arrays = _int_columns(cols, index, events, path)
    arrays["cat"] = arrays["cat"].astype(np.int8)
    for c in FLOAT_COLUMNS:
        arrays[c] = np.asarray(cols[c], dtype=np.float64)
    for c in OBJECT_COLUMNS:
        arrays[c] = np.fromiter(cols[c], dtype=object, count=len(cols[c]))
    return _table(arrays, doc, path, unmodelled, unmodelled_us)


def _on_device(args) -> bool:
    """An event's args say it ran on a device (Kineto writes both keys on device activities)."""
    return isinstance(args, dict) and (args.get("device") is not None or args.get("stream") is not None)


def _rank_and_world(doc: dict, path) -> tuple[int, int]:
    """The rank and world size `distributedInfo` gives (0 and 1 where it gives none), refused where
    absurd: a world holds 1 to MAX_RANKS ranks, a rank is 0 or more and below its world's size
    (where the file gives both) and below MAX_RANKS."""
    dist = doc.get("distributedInfo") or {}
    if not isinstance(dist, dict):
        raise TraceError(path, f"'distributedInfo' is {json_kind(dist)}, not an object")
    raw_rank, raw_world = dist.get("rank"), dist.get("world_size")
    rank, world = _as_int(raw_rank, 0), _as_int(raw_world, 1)
    if raw_world is not None and not 1 <= world <= MAX_RANKS:
        raise TraceError(path, f"'distributedInfo.world_size' {shown(raw_world)} is not a world size "
                               f"(1 to {MAX_RANKS} ranks)")
    if raw_rank is not None:
        if raw_world is not None and not 0 <= rank < world:
            raise TraceError(path, f"'distributedInfo.rank' {shown(raw_rank)} is not a rank of a world of size "
                                   f"{world} (0 to {world - 1})")
        if not 0 <= rank < MAX_RANKS:
            raise TraceError(path, f"'distributedInfo.rank' {shown(raw_rank)} is not a rank (0 to {MAX_RANKS - 1})")
    return rank, world


def _table(arrays: dict, doc: dict, path, unmodelled: dict[str, int], unmodelled_us: dict[str, float]) -> TraceTable:
    rank, world = _rank_and_world(doc, path)
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    unmodelled = dict(sorted(unmodelled.items()))
    table = TraceTable(path=str(path), rank=rank,
                       world_size=world, metadata=meta, unmodelled=unmodelled,
                       unmodelled_us=dict(sorted(unmodelled_us.items())),
                       **arrays)
    if len(table) == 0:
        held = "; it holds device events of categories Lumos does not model: " + format_counts(unmodelled) \
            if unmodelled else ""
        raise TraceError(path, "no CPU or GPU events of a known category" + held)
    return table


def load_trace(path: str | os.PathLike) -> TraceTable:
    """Load one rank's trace. Raises TraceError naming the file and the problem."""
    path = Path(path)
    data, scan = _read_trace_file(path)
    with collector.paused():
        if jit.compiled():
            from . import scanned
            try:
                arrays, doc, unmodelled, unmodelled_us = scanned.scanned_columns(data, scan)
            except scanned.Unusual:
                pass
            else:
                return _table(arrays, doc, path, unmodelled, unmodelled_us)
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise TraceError(path, f"not valid JSON (truncated or corrupt?): {exc}") from None
        del data
        return parse_document(doc, path)

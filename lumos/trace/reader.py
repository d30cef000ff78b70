"""Read a Kineto trace (.json or .json.gz, PyTorch 1.9 to 2.x schemas) into a TraceTable.

Only complete ('X') events of the categories in `schema.CATEGORY_CODES` are
kept; flows, instants, metadata and memory events are dropped after parsing,
because the correlation id on both ends already links a launch to its GPU op.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import numpy as np
import orjson

from . import schema
from .errors import TraceError
from .table import FLOAT_COLUMNS, INT_COLUMNS, OBJECT_COLUMNS, TraceTable


def _read_bytes(path: Path) -> bytes:
    if not path.exists():
        raise TraceError(path, "no such file")
    if path.is_dir():
        raise TraceError(path, "is a directory, not a trace file (use load_run for a directory of ranks)")
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceError(path, f"cannot decompress: {exc}") from None
    return data


def _as_int(value, default: int = -1) -> int:
    if value is None:
        return default
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        digits = value.rsplit(" ", 1)[-1]  # legacy GPU tids read "stream 7"
        try:
            return int(digits)
        except ValueError:
            return default
    return default


def parse_document(doc, path) -> TraceTable:
    """Turn a decoded Kineto JSON object into a TraceTable, validating as it goes."""
    if not isinstance(doc, dict):
        raise TraceError(path, "top level is not a JSON object")
    events = doc.get("traceEvents")
    if events is None:
        raise TraceError(path, "no 'traceEvents' key: not a Kineto/Chrome trace")
    if not isinstance(events, list):
        raise TraceError(path, "'traceEvents' is not a list")

    cols: dict[str, list] = {c: [] for c in INT_COLUMNS + FLOAT_COLUMNS + OBJECT_COLUMNS}
    codes = schema.CATEGORY_CODES
    for i, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        cat = ev.get("cat")
        code = codes.get(cat.lower()) if isinstance(cat, str) else None
        name = ev.get("name")
        if code is None:
            continue
        if not isinstance(name, str):
            raise TraceError(path, "event has no name", event=f"#{i}")
        ts, dur = ev.get("ts"), ev.get("dur")
        if not isinstance(ts, (int, float)) or isinstance(ts, bool):
            raise TraceError(path, "missing or non-numeric 'ts'", event=f"#{i} {name!r}")
        if not isinstance(dur, (int, float)) or isinstance(dur, bool):
            raise TraceError(path, "missing or non-numeric 'dur'", event=f"#{i} {name!r}")
        if dur < 0:
            raise TraceError(path, f"negative duration {dur}", event=f"#{i} {name!r}")
        if code == schema.CPU_OP and name.startswith("ProfilerStep#"):
            code = schema.ANNOTATION  # legacy traces file steps under 'Operator'
        args = ev.get("args") or {}
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
        cols["dtype"].append(args.get("dtype"))
        cols["pg_ranks"].append(args.get("Process Group Ranks"))
        cols["input_dims"].append(args.get("Input Dims") if code == schema.CPU_OP else None)

    arrays = {}
    for c in INT_COLUMNS:
        arrays[c] = np.asarray(cols[c], dtype=np.int64)
    arrays["cat"] = arrays["cat"].astype(np.int8)
    for c in FLOAT_COLUMNS:
        arrays[c] = np.asarray(cols[c], dtype=np.float64)
    for c in OBJECT_COLUMNS:
        arr = np.empty(len(cols[c]), dtype=object)
        arr[:] = cols[c]
        arrays[c] = arr

    dist = doc.get("distributedInfo") or {}
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    table = TraceTable(path=str(path), rank=_as_int(dist.get("rank"), 0),
                       world_size=_as_int(dist.get("world_size"), 1), metadata=meta, **arrays)
    if len(table) == 0:
        raise TraceError(path, "no CPU or GPU events of a known category")
    return table


def load_trace(path: str | os.PathLike) -> TraceTable:
    """Load one rank's trace. Raises TraceError naming the file and the problem."""
    path = Path(path)
    data = _read_bytes(path)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TraceError(path, f"not valid JSON (truncated or corrupt?): {exc}") from None
    del data
    return parse_document(doc, path)

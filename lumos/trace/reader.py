"""Read a Kineto trace (.json or .json.gz, PyTorch 1.9 to 2.x schemas) into a TraceTable.

Only complete ('X') events of the categories in `schema.CATEGORY_CODES` are
kept (of the `python_function` events, the module calls only); flows, instants,
metadata and memory events are dropped after parsing, because the correlation
id on both ends already links a launch to its GPU op.
Complete events of another category that carry a `device` or `stream` arg are
device work Lumos does not model: they are counted by category
(`TraceTable.unmodelled`) so that a replay can name them.

Two ways in, one result:
- `load_trace` scans the file's bytes with a compiled (numba) JSON scanner that
  validates the whole document and records, for each kept event, where each
  needed field's value lies; the values are then decoded column by column
  (batched through orjson where they are not plain integers). No per-event
  Python object is ever built, so loading runs at about orjson's speed and
  its working memory is about the file's size, where a decoded document of
  dicts takes five to eight times that.
- Anything the scanner is not sure of (invalid JSON, an escaped key, a field
  of an unexpected type, numbers near the float limits, deep nesting) sends
  the file down the plain path instead: `orjson.loads`, then `parse_document`,
  one event at a time. That path is the definition of the result and of every
  error message; tests hold the two equal on every shipped trace, on random
  documents and on corrupted bytes.

The scanner (`scan.py`) compiles in about 7 s the first time (cached in `__pycache__`).
"""

from __future__ import annotations

import codecs
import gc
import gzip
import os
import zlib
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import orjson

from lumos import prefetch

from . import schema
from .errors import TraceError, format_counts
from .table import FLOAT_COLUMNS, INT_COLUMNS, OBJECT_COLUMNS, TraceTable
from .scan import F, I_FIRST, T_ABSENT, T_ARR, T_INT, T_NULL, T_NUM, T_OBJ, T_STR, T_STR_ESC, _classify, _gather, _scan


def _read_bytes(path: Path) -> bytes:
    if not path.exists():
        raise TraceError(path, "no such file")
    if path.is_dir():
        raise TraceError(path, "is a directory, not a trace file (use load_run for a directory of ranks)")
    data = prefetch.take(path)   # read beside the process's start-up (`lumos.prefetch`), if it was
    if data is not None:
        return data
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceError(path, f"cannot decompress: {exc}") from None
    return data


def _read_int(value) -> int | None:
    """An integer field as Kineto writes it (int, float, or a string such as the legacy
    GPU tid "stream 7"); None when absent or unreadable."""
    if value is None:
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        digits = value.rsplit(" ", 1)[-1]
        try:
            return int(digits)
        except ValueError:
            return None
    return None


def _as_int(value, default: int = -1) -> int:
    read = _read_int(value)
    return default if read is None else read


# --- the plain path: a decoded document, one event at a time --------------------------------

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
    unmodelled: dict[str, int] = {}
    for i, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        cat = ev.get("cat")
        code = codes.get(cat.lower()) if isinstance(cat, str) else None
        name = ev.get("name")
        if code is None:
            if isinstance(cat, str) and _on_device(ev.get("args")):
                unmodelled[cat] = unmodelled.get(cat, 0) + 1
            continue
        if code == schema.PY_MODULE and not (isinstance(name, str) and name.startswith(schema.MODULE_PREFIX)):
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
        cols["seq"].append(_as_int(args.get("Sequence number")))
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
        arrays[c] = np.fromiter(cols[c], dtype=object, count=len(cols[c]))
    return _table(arrays, doc, path, unmodelled)


def _on_device(args) -> bool:
    """An event's args say it ran on a device (Kineto writes both keys on device activities)."""
    return isinstance(args, dict) and (args.get("device") is not None or args.get("stream") is not None)


def _table(arrays: dict, doc: dict, path, unmodelled: dict[str, int]) -> TraceTable:
    dist = doc.get("distributedInfo") or {}
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    unmodelled = dict(sorted(unmodelled.items()))
    table = TraceTable(path=str(path), rank=_as_int(dist.get("rank"), 0),
                       world_size=_as_int(dist.get("world_size"), 1), metadata=meta, unmodelled=unmodelled,
                       **arrays)
    if len(table) == 0:
        held = "; it holds device events of categories Lumos does not model: " + format_counts(unmodelled) \
            if unmodelled else ""
        raise TraceError(path, "no CPU or GPU events of a known category" + held)
    return table


# --- from value locations to columns -------------------------------------------------------

class _Unusual(Exception):
    """Something the scanned path does not decide itself: the plain path takes over."""


_GPU_CODES = np.array(sorted(set(schema.GPU_CATEGORIES) | {schema.SYNC, schema.GPU_ANNOTATION}), dtype=np.int8)


def _values(buf, st, en, rows) -> list:
    """The JSON values at `rows` of one field, decoded by orjson in one call."""
    if len(rows) == 0:
        return []
    return orjson.loads(memoryview(_gather(buf, st[rows], en[rows], 44, True)))


def _strings(buf, typ, st, en) -> list[str]:
    """A column of JSON strings: the raw bytes of all of them decoded at once (a JSON
    string holds no raw NUL, so NUL separates them); escaped ones decoded by orjson."""
    if len(typ) == 0:
        return []
    joined = _gather(buf, st + 1, en - 1, 0, False)
    try:
        out = str(memoryview(joined), "utf-8").split("\x00")
    except UnicodeDecodeError:
        raise _Unusual from None
    esc = np.flatnonzero(typ == T_STR_ESC)
    for k, v in zip(esc.tolist(), _values(buf, st, en, esc)):
        out[k] = v
    return out


def _categories(buf, typ, st, en, on_device) -> tuple[np.ndarray, dict[str, int]]:
    """Category code of each event (-1: not one Lumos uses), as `cat.lower()` reads it,
    and the count of device events (`on_device`) by category Lumos does not use."""
    code = np.full(len(typ), -1, dtype=np.int8)
    strings = np.flatnonzero((typ == T_STR) | (typ == T_STR_ESC))
    names = _strings(buf, typ[strings], st[strings], en[strings])
    lookup = {c: schema.CATEGORY_CODES.get(c.lower(), -1) for c in set(names)}
    code[strings] = np.fromiter(map(lookup.__getitem__, names), dtype=np.int8, count=len(names))
    unmodelled: dict[str, int] = {}
    for k in np.flatnonzero((code[strings] < 0) & on_device[strings]).tolist():
        unmodelled[names[k]] = unmodelled.get(names[k], 0) + 1
    return code, unmodelled


def _int_field(buf, typ, st, en, iv, default, none_default) -> np.ndarray:
    """One integer column by `_as_int`'s rule: `none_default` where absent or null,
    `default` where unreadable."""
    out = np.where(typ == T_INT, iv, none_default).astype(np.int64)
    odd = np.flatnonzero(typ > T_INT)
    if len(odd):
        readable = (typ[odd] != T_ARR) & (typ[odd] != T_OBJ)
        values = [None] * len(odd)
        for k, v in zip(np.flatnonzero(readable).tolist(), _values(buf, st, en, odd[readable])):
            values[k] = _read_int(v)
        fill = np.broadcast_to(default, out.shape)[odd]
        try:
            out[odd] = [fill[k] if v is None else v for k, v in enumerate(values)]
        except OverflowError:
            raise _Unusual from None
    return out


def _object_field(buf, typ, st, en, only=None) -> np.ndarray:
    out = np.full(len(typ), None, dtype=object)
    present = typ > T_NULL
    if only is not None:
        present &= only
    rows = np.flatnonzero(present)
    if len(rows):
        out[rows] = np.fromiter(_values(buf, st, en, rows), dtype=object, count=len(rows))
    return out


def _check_utf8(data: bytes) -> None:
    """orjson refuses invalid UTF-8 anywhere; the scanner only looks at structure."""
    if data.isascii():
        return
    decoder = codecs.getincrementaldecoder("utf-8")()
    step = 1 << 22
    try:
        for k in range(0, len(data), step):
            decoder.decode(data[k:k + step])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise _Unusual from None


def _scanned_columns(data: bytes) -> tuple[dict, dict, dict[str, int]]:
    """Columns of the kept events, the document without its events (the metadata) and
    the unmodelled device events by category.
    Raises _Unusual where the plain path must decide."""
    buf = np.frombuffer(data, dtype=np.uint8)
    ok, rows, loc, args_ok, lo, hi = _scan(buf, data.count(b'"ph"'))  # every X event has a "ph" key
    if not ok:
        raise _Unusual
    _check_utf8(data)
    typ, iv = _classify(buf, loc, rows)
    st, en = loc[:rows, :, 0], loc[:rows, :, 1]
    f = F["cat"]
    on_device = (typ[:, F["device"]] > T_NULL) | (typ[:, F["stream"]] > T_NULL)
    code, unmodelled = _categories(buf, typ[:, f], st[:, f], en[:, f], on_device)
    keep = np.flatnonzero(code >= 0)
    code, typ, iv, st, en, args_ok = code[keep], typ[keep], iv[keep], st[keep], en[keep], args_ok[keep]
    del loc
    # what the plain path rejects (and names the event for) or reads otherwise
    t_name, t_ts, t_dur = typ[:, F["name"]], typ[:, F["ts"]], typ[:, F["dur"]]
    if not (args_ok.all() and np.all((t_name == T_STR) | (t_name == T_STR_ESC))
            and np.all((t_ts == T_INT) | (t_ts == T_NUM)) and np.all((t_dur == T_INT) | (t_dur == T_NUM))):
        raise _Unusual
    n = len(keep)
    every = np.arange(n)

    def field(key):
        k = F[key]
        return typ[:, k], st[:, k], en[:, k]

    def int_field(key, default=-1, none_default=None):
        k = F[key]
        return _int_field(buf, typ[:, k], st[:, k], en[:, k], iv[:, k - I_FIRST], default,
                          default if none_default is None else none_default)

    ts = np.array(_values(buf, st[:, F["ts"]], en[:, F["ts"]], every), dtype=np.float64)
    dur = np.array(_values(buf, st[:, F["dur"]], en[:, F["dur"]], every), dtype=np.float64)
    if np.any(dur < 0):
        raise _Unusual  # the plain path names the event
    names = _strings(buf, *field("name"))
    calls = np.flatnonzero(code == schema.PY_MODULE)
    if len(calls):   # of the Python calls only the module calls are kept (as the plain path does)
        kept = np.ones(n, dtype=bool)
        kept[[k for k in calls.tolist() if not names[k].startswith(schema.MODULE_PREFIX)]] = False
        if not kept.all():
            code, typ, iv, st, en, ts, dur = (x[kept] for x in (code, typ, iv, st, en, ts, dur))
            names = [x for x, k in zip(names, kept.tolist()) if k]
            n = len(names)
            every = np.arange(n)
    cpu = np.flatnonzero(code == schema.CPU_OP)
    steps = [k for k in cpu.tolist() if names[k].startswith("ProfilerStep#")]
    code[steps] = schema.ANNOTATION  # legacy traces file steps under 'Operator'
    gpu = np.isin(code, _GPU_CODES)
    out = {"name": np.fromiter(names, dtype=object, count=n), "cat": code, "ts": ts, "dur": dur}
    del names
    out["pid"] = pid = int_field("pid")
    out["tid"] = tid = int_field("tid")
    for col, key in (("corr", "correlation"), ("wait_stream", "wait_on_stream"),
                     ("wait_corr", "wait_on_cuda_event_record_corr_id"), ("in_nelems", "In msg nelems"),
                     ("out_nelems", "Out msg nelems"), ("group_size", "Group size"), ("seq", "Sequence number")):
        out[col] = int_field(key)
    # 'External id' where the key is there (even as null), else the legacy 'external id'
    pick = np.where(typ[:, F["External id"]] != T_ABSENT, F["External id"], F["external id"])
    out["ext"] = _int_field(buf, typ[every, pick], st[every, pick], en[every, pick], iv[every, pick - I_FIRST],
                            -1, -1)
    out["stream"] = int_field("stream", -1, none_default=np.where(gpu & (code != schema.SYNC), tid, -1))
    out["device"] = int_field("device", np.where(gpu, pid, -1))
    for col, key in (("sync_kind", "cuda_sync_kind"), ("coll_name", "Collective name"), ("dtype", "dtype"),
                     ("pg_ranks", "Process Group Ranks")):
        out[col] = _object_field(buf, *field(key))
    out["input_dims"] = _object_field(buf, *field("Input Dims"), only=code == schema.CPU_OP)
    doc = orjson.loads(data[:lo] + b"[]" + data[hi:])
    return out, doc, unmodelled


@contextmanager
def _gc_paused():
    """Decoding builds many acyclic containers; the cycle collector would re-scan them
    over and over (it doubles orjson's own time on a 35 MB trace)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def load_trace(path: str | os.PathLike) -> TraceTable:
    """Load one rank's trace. Raises TraceError naming the file and the problem."""
    path = Path(path)
    data = _read_bytes(path)
    with _gc_paused():
        try:
            arrays, doc, unmodelled = _scanned_columns(data)
        except _Unusual:
            pass
        else:
            return _table(arrays, doc, path, unmodelled)
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise TraceError(path, f"not valid JSON (truncated or corrupt?): {exc}") from None
        del data
        return parse_document(doc, path)

"""Kineto JSON -> the reader's columns through msgspec's typed decoder (the comparison that asked
whether the trace scanner earns its place against a typed decoder).

Not used by Lumos: `benchmarks/bench_json_reader.py` times it against the shipped
reader (`lumos/trace/reader.py` with its numba scanner) and checks the columns equal;
docs/notes/2026-12-01-reader-vs-typed-decoder.md has the figures and why the scanner stays.

msgspec decodes the event list straight into small typed structs, skipping every
field Lumos does not read, in C; the columns are then gathered from the structs.
Anything the types do not admit (a string where a number belongs, a list for
`args`, invalid bytes) or that orjson might read otherwise (huge numbers, very deep
nesting) raises `Unusual`, and the reader takes its plain path, which defines the
result and every error message.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np
import orjson

from lumos.trace import schema

__all__ = ["Unusual", "typed_columns"]


class Unusual(Exception):
    """Something the typed path does not decide itself: the plain path takes over."""


Int = int | str | None   # Kineto writes some integers as strings ("stream 7")


class Args(msgspec.Struct, frozen=True):
    correlation: Int = None
    external_id: Int | msgspec.UnsetType = msgspec.field(name="External id", default=msgspec.UNSET)
    legacy_external_id: Int = msgspec.field(name="external id", default=None)
    stream: Int = None
    device: Int = None
    wait_on_stream: Int = None
    wait_corr: Int = msgspec.field(name="wait_on_cuda_event_record_corr_id", default=None)
    in_nelems: Int = msgspec.field(name="In msg nelems", default=None)
    out_nelems: Int = msgspec.field(name="Out msg nelems", default=None)
    group_size: Int = msgspec.field(name="Group size", default=None)
    seq: Int = msgspec.field(name="Sequence number", default=None)
    # values kept as they are: decoded by orjson in one batch, as the plain path reads them
    sync_kind: msgspec.Raw = msgspec.field(name="cuda_sync_kind", default=None)
    coll_name: msgspec.Raw = msgspec.field(name="Collective name", default=None)
    dtype: msgspec.Raw = None
    pg_ranks: msgspec.Raw = msgspec.field(name="Process Group Ranks", default=None)
    pg_name: msgspec.Raw = msgspec.field(name="Process Group Name", default=None)
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=None)


class Event(msgspec.Struct, frozen=True):
    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    ts: float | None = None
    dur: float | None = None
    pid: Int = None
    tid: Int = None
    args: Args | None = None


_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_EVENTS = msgspec.json.Decoder(list[Event])
_NO_ARGS = Args()
# exponents of 100 and more: a number beyond a double, which orjson refuses even where msgspec skips it
_HUGE = re.compile(rb"[0-9][eE][+]?0*[1-9][0-9]{2}")
_GPU = frozenset(schema.GPU_CATEGORIES) | {schema.SYNC, schema.GPU_ANNOTATION}


def _int(v) -> int | None:
    """A present integer field by the plain path's rule (`_read_int`); None where unreadable."""
    if type(v) is int:
        return v
    if not isinstance(v, str):
        raise Unusual
    try:
        return int(v.rsplit(" ", 1)[-1])
    except ValueError:
        return None


def _ints(values, default=-1) -> np.ndarray:
    """An integer column by the plain path's rule (`_as_int`); `default` (where absent or
    unreadable) may be one value or one per row."""
    if not all(v is None or type(v) is int for v in values):
        values = [None if v is None else _int(v) for v in values]
    try:
        out = np.array([0 if v is None else v for v in values], dtype=np.int64)
    except OverflowError:
        raise Unusual from None   # beyond 64 bits: orjson reads it as a float
    absent = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    if absent.any():
        out[absent] = np.broadcast_to(np.asarray(default, dtype=np.int64), out.shape)[absent]
    return out


def _raw_values(raws) -> np.ndarray:
    """An object column: the raw JSON values decoded by orjson in one call (None where absent)."""
    out = np.full(len(raws), None, dtype=object)
    at = [k for k, r in enumerate(raws) if r is not None]
    if at:
        joined = b"[" + b",".join(bytes(raws[k]) for k in at) + b"]"
        out[at] = np.fromiter(orjson.loads(joined), dtype=object, count=len(at))
    return out


def typed_columns(data: bytes, guard: bool = True) -> tuple[dict, dict, dict[str, int]]:
    """Columns of the kept events, the document without its events (the metadata) and the
    unmodelled device events by category. Raises Unusual where the plain path must decide.
    `guard=False` skips the search for huge exponents (faster, no longer orjson's verdict)."""
    if guard and _HUGE.search(data):
        raise Unusual
    try:
        top = _TOP.decode(data)
        raw = top.get("traceEvents")
        if raw is None:
            raise Unusual
        events = _EVENTS.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        raise Unusual from None
    doc = {k: [] if k == "traceEvents" else orjson.loads(bytes(v)) for k, v in top.items()}
    codes = schema.CATEGORY_CODES
    lookup: dict[str, int] = {}
    kept, code = [], []
    unmodelled: dict[str, int] = {}
    for ev in events:
        if ev.ph != "X" or ev.cat is None:
            continue
        c = lookup.get(ev.cat)
        if c is None:
            c = lookup[ev.cat] = codes.get(ev.cat.lower(), -1)
        if c < 0:
            a = ev.args
            if a is not None and (a.device is not None or a.stream is not None):
                unmodelled[ev.cat] = unmodelled.get(ev.cat, 0) + 1
            continue
        if ev.name is None or ev.ts is None or ev.dur is None or ev.dur < 0:
            raise Unusual   # the plain path names the event
        if c == schema.CPU_OP and ev.name.startswith("ProfilerStep#"):
            c = schema.ANNOTATION  # legacy traces file steps under 'Operator'
        kept.append(ev)
        code.append(c)
    args = [ev.args or _NO_ARGS for ev in kept]
    cat = np.array(code, dtype=np.int8)
    gpu = np.isin(cat, list(_GPU))
    out = {"name": np.fromiter((ev.name for ev in kept), dtype=object, count=len(kept)), "cat": cat,
           "ts": np.array([ev.ts for ev in kept], dtype=np.float64),
           "dur": np.array([ev.dur for ev in kept], dtype=np.float64)}
    out["pid"] = pid = _ints([ev.pid for ev in kept])
    out["tid"] = tid = _ints([ev.tid for ev in kept])
    out["corr"] = _ints([a.correlation for a in args])
    out["ext"] = _ints([a.legacy_external_id if a.external_id is msgspec.UNSET else a.external_id for a in args])
    stream = [a.stream for a in args]
    absent = np.array([s is None for s in stream], dtype=bool)
    out["stream"] = _ints(stream, np.where(absent & gpu & (cat != schema.SYNC), tid, -1))
    out["device"] = _ints([a.device for a in args], np.where(gpu, pid, -1))
    out["wait_stream"] = _ints([a.wait_on_stream for a in args])
    out["wait_corr"] = _ints([a.wait_corr for a in args])
    out["in_nelems"] = _ints([a.in_nelems for a in args])
    out["out_nelems"] = _ints([a.out_nelems for a in args])
    out["group_size"] = _ints([a.group_size for a in args])
    out["seq"] = _ints([a.seq for a in args])
    for col in ("sync_kind", "coll_name", "dtype", "pg_ranks", "pg_name"):
        out[col] = _raw_values([getattr(a, col) for a in args])
    cpu = cat == schema.CPU_OP
    out["input_dims"] = _raw_values([a.input_dims if c else None for a, c in zip(args, cpu)])
    return out, doc, unmodelled

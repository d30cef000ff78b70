"""Columns of a trace from the scanner's value locations (`scan.py`), without a Python
object per event: the fast way into `reader.load_trace`.

Times and durations are read by the C `numbers`, category and name strings found once per distinct
raw string by the C `interned` (lumos/kernels/decode.c; `_numbers_twin`, `_interned_twin` are their
Python twins, held to them in tests/trace/test_decode_kernels.py); the rest goes through orjson,
a column at a time. Used where the compiled kernels are built (`lumos.jit`). Whatever it is not
sure of raises `Unusual`, and the reader's plain path, the definition of the result and of every
error, decides instead.
"""

from __future__ import annotations

import codecs

import numpy as np
import orjson

from lumos import jit

from . import schema
from .scan import (F, I_FIRST, N_FIELDS, N_INT, T_ABSENT, T_ARR, T_INT, T_NULL, T_NUM, T_OBJ, T_STR, T_STR_ESC, Scan,
                   Unusual, scan_document)

__all__ = ["Scan", "Unusual", "scan_document", "scanned_columns"]

_GPU_CODES = np.array(sorted(set(schema.GPU_CATEGORIES) | {schema.SYNC, schema.GPU_ANNOTATION}), dtype=np.int8)


def _gather(buf: np.ndarray, lo, hi, sep: int, bracket: bool) -> np.ndarray:
    """The byte spans buf[lo[k]:hi[k]] joined by `sep` (as one JSON array if `bracket`)."""
    lo = np.ascontiguousarray(lo, dtype=np.int64)
    hi = np.ascontiguousarray(hi, dtype=np.int64)
    out = np.empty(int((hi - lo).sum()) + len(lo) + 2, dtype=np.uint8)
    return out[:jit.kernels().gather(buf, lo, hi, sep, bool(bracket), out)]


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
        raise Unusual from None
    esc = np.flatnonzero(typ == T_STR_ESC)
    for k, v in zip(esc.tolist(), _values(buf, st, en, esc)):
        out[k] = v
    return out


def _numbers(buf, loc, typ, field: int, at) -> np.ndarray:
    """The JSON numbers of `field` at rows `at` (each T_INT or T_NUM) as float64, as orjson reads
    them: in C (`numbers`), the few it leaves (NaN) by orjson."""
    out = np.empty(len(at), dtype=np.float64)
    if jit.kernels().numbers(buf, loc, typ, N_FIELDS, field, at, out):
        left = np.flatnonzero(np.isnan(out))
        out[left] = _values(buf, loc[:, field, 0], loc[:, field, 1], at[left])
    return out


def _numbers_twin(buf, loc, typ, field: int, at) -> np.ndarray:
    """`_numbers` in Python, one value at a time (NaN where no number)."""
    out = np.full(len(at), np.nan)
    for k, r in enumerate(at.tolist()):
        if typ[r, field] == T_INT or typ[r, field] == T_NUM:
            out[k] = float(orjson.loads(bytes(buf[loc[r, field, 0]:loc[r, field, 1]])))
    return out


def _interned_twin(buf, loc, typ, field: int, at) -> tuple[np.ndarray, np.ndarray]:
    """The C `interned` in Python: which distinct raw string each row at `at` holds (-1: no string),
    and the row where each first appears."""
    codes = np.full(len(at), -1, dtype=np.int32)
    seen: dict[bytes, int] = {}
    first = []
    for k, r in enumerate(at.tolist()):
        if typ[r, field] == T_STR or typ[r, field] == T_STR_ESC:
            raw = bytes(buf[loc[r, field, 0]:loc[r, field, 1]])
            j = seen.get(raw)
            if j is None:
                j = seen[raw] = len(first)
                first.append(r)
            codes[k] = j
    return codes, np.array(first, dtype=np.int64)


def _interned(buf, loc, typ, field: int, at, twin: bool = False) -> tuple[np.ndarray, list[str]]:
    """The strings of `field` at rows `at` as codes into a list of distinct ones (-1: no string),
    each distinct raw string decoded once."""
    if twin:
        codes, first = _interned_twin(buf, loc, typ, field, at)
    else:
        codes = np.empty(len(at), dtype=np.int32)
        first = np.empty(len(at), dtype=np.int64)
        first = first[:jit.kernels().interned(buf, loc, typ, N_FIELDS, field, at, codes, first)]
    return codes, _strings(buf, typ[first, field], loc[first, field, 0], loc[first, field, 1])


def _categories(buf, loc, typ, on_device) -> tuple[np.ndarray, dict[str, int], np.ndarray, list[str]]:
    """Category code of each event (-1: not one Lumos uses), as `cat.lower()` reads it,
    the count of device events (`on_device`) by category Lumos does not use, and those
    events' rows and categories (in event order)."""
    which, cats = _interned(buf, loc, typ, F["cat"], np.arange(len(typ)))
    lookup = np.array([schema.CATEGORY_CODES.get(c.lower(), -1) for c in cats] + [-1], dtype=np.int8)
    code = lookup[which]   # -1 (no string) takes the last
    picked = np.flatnonzero((code < 0) & (which >= 0) & on_device)
    names = [cats[j] for j in which[picked].tolist()]
    unmodelled: dict[str, int] = {}
    for c in names:
        unmodelled[c] = unmodelled.get(c, 0) + 1
    return code, unmodelled, picked, names


def _unmodelled_us(buf, typ, st, en, rows, cats) -> dict[str, float]:
    """Summed positive numeric durations of the unmodelled device events, by category, added
    in event order as the plain path adds them."""
    numeric = (typ[rows] == T_INT) | (typ[rows] == T_NUM)
    out: dict[str, float] = {}
    for c, v in zip([c for c, n in zip(cats, numeric.tolist()) if n], _values(buf, st, en, rows[numeric])):
        if v > 0:
            out[c] = out.get(c, 0.0) + float(v)
    return out


def _int_field(buf, typ, st, en, at, iv, default, none_default) -> np.ndarray:
    """One integer column by `_as_int`'s rule: `none_default` where absent or null,
    `default` where unreadable (typ, iv: of the rows `at` of st, en)."""
    out = np.where(typ == T_INT, iv, none_default).astype(np.int64)
    odd = np.flatnonzero(typ > T_INT)
    if len(odd):
        readable = (typ[odd] != T_ARR) & (typ[odd] != T_OBJ)
        values = [None] * len(odd)
        for k, v in zip(np.flatnonzero(readable).tolist(), _values(buf, st, en, at[odd[readable]])):
            values[k] = schema.read_int(v)
        fill = np.broadcast_to(default, out.shape)[odd]
        try:
            out[odd] = [fill[k] if v is None else v for k, v in enumerate(values)]
        except OverflowError:
            raise Unusual from None
    return out


def _object_field(buf, typ, st, en, at, only=None) -> np.ndarray:
    out = np.full(len(typ), None, dtype=object)
    present = typ > T_NULL
    if only is not None:
        present &= only
    rows = np.flatnonzero(present)
    if len(rows):
        out[rows] = np.fromiter(_values(buf, st, en, at[rows]), dtype=object, count=len(rows))
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
        raise Unusual from None


def _arrays(scan: Scan) -> tuple[np.ndarray, ...]:
    """The scan's flat buffers as the numpy arrays they are (no copy)."""
    args_ok = np.frombuffer(scan.args_ok, dtype=np.bool_)
    loc = np.frombuffer(scan.loc, dtype=np.int64).reshape(-1, N_FIELDS, 2)
    typ = np.frombuffer(scan.typ, dtype=np.int8).reshape(scan.rows, N_FIELDS)
    return args_ok, loc, typ, np.frombuffer(scan.iv, dtype=np.int64).reshape(scan.rows, N_INT)


def scanned_columns(data: bytes, scan: Scan | None = None) -> tuple[dict, dict, dict[str, int]]:
    """Columns of the kept events, the document without its events (the metadata) and
    the unmodelled device events by category (counts, and summed durations in us), from
    `scan_document(data)` (made here unless given). Raises Unusual where the plain path
    (`reader.parse_document`) must decide."""
    buf = np.frombuffer(data, dtype=np.uint8)
    scan = scan_document(data) if scan is None else scan
    rows, lo, hi = scan.rows, scan.lo, scan.hi
    args_ok, loc, typ, iv = _arrays(scan)
    del scan
    _check_utf8(data)
    st, en = loc[:rows, :, 0], loc[:rows, :, 1]
    on_device = (typ[:, F["device"]] > T_NULL) | (typ[:, F["stream"]] > T_NULL)
    code, unmodelled, un_rows, un_cats = _categories(buf, loc, typ, on_device)
    d = F["dur"]
    unmodelled_us = _unmodelled_us(buf, typ[:, d], st[:, d], en[:, d], un_rows, un_cats)
    at = np.flatnonzero(code >= 0)   # the kept rows of loc, st, en, typ_all
    typ_all = typ
    code, typ, iv, args_ok = code[at], typ[at], iv[at], args_ok[at]
    # what the plain path rejects (and names the event for) or reads otherwise
    t_name, t_ts, t_dur = typ[:, F["name"]], typ[:, F["ts"]], typ[:, F["dur"]]
    if not (args_ok.all() and np.all((t_name == T_STR) | (t_name == T_STR_ESC))
            and np.all((t_ts == T_INT) | (t_ts == T_NUM)) and np.all((t_dur == T_INT) | (t_dur == T_NUM))):
        raise Unusual
    ts = _numbers(buf, loc, typ_all, F["ts"], at)
    dur = _numbers(buf, loc, typ_all, F["dur"], at)
    if np.any(dur < 0):
        raise Unusual  # the plain path names the event
    which, names = _interned(buf, loc, typ_all, F["name"], at)
    calls = code == schema.PY_MODULE
    if calls.any():   # of the Python calls only the module calls are kept (as the plain path does)
        kept = ~calls | np.array([x.startswith(schema.MODULE_PREFIX) for x in names], dtype=bool)[which]
        if not kept.all():
            code, typ, iv, at, ts, dur, which = (x[kept] for x in (code, typ, iv, at, ts, dur, which))
    steps = np.array([x.startswith("ProfilerStep#") for x in names], dtype=bool)
    code[(code == schema.CPU_OP) & steps[which]] = schema.ANNOTATION  # legacy traces file steps under 'Operator'
    gpu = np.isin(code, _GPU_CODES)
    distinct = np.empty(len(names), dtype=object)
    distinct[:] = names
    out = {"name": distinct[which], "cat": code, "ts": ts, "dur": dur}
    del names, distinct

    def field(key):
        k = F[key]
        return typ[:, k], st[:, k], en[:, k], at

    def int_field(key, default=-1, none_default=None):
        k = F[key]
        return _int_field(buf, typ[:, k], st[:, k], en[:, k], at, iv[:, k - I_FIRST], default,
                          default if none_default is None else none_default)

    out["pid"] = pid = int_field("pid")
    out["tid"] = tid = int_field("tid")
    for col, key in (("corr", "correlation"), ("wait_stream", "wait_on_stream"),
                     ("wait_corr", "wait_on_cuda_event_record_corr_id"), ("in_nelems", "In msg nelems"),
                     ("out_nelems", "Out msg nelems"), ("group_size", "Group size"), ("seq", "Sequence number")):
        out[col] = int_field(key)
    # 'External id' where the key is there (even as null), else the legacy 'external id'
    new, old = F["External id"], F["external id"]
    has_new = typ[:, new] != T_ABSENT
    ext_st = st[:, new].copy()
    ext_en = en[:, new].copy()
    legacy = at[~has_new]
    ext_st[legacy], ext_en[legacy] = st[legacy, old], en[legacy, old]
    out["ext"] = _int_field(buf, np.where(has_new, typ[:, new], typ[:, old]), ext_st, ext_en, at,
                            np.where(has_new, iv[:, new - I_FIRST], iv[:, old - I_FIRST]), -1, -1)
    out["stream"] = int_field("stream", -1, none_default=np.where(gpu & (code != schema.SYNC), tid, -1))
    out["device"] = int_field("device", np.where(gpu, pid, -1))
    for col, key in (("sync_kind", "cuda_sync_kind"), ("coll_name", "Collective name"), ("dtype", "dtype"),
                     ("pg_ranks", "Process Group Ranks"), ("pg_name", "Process Group Name")):
        out[col] = _object_field(buf, *field(key))
    out["input_dims"] = _object_field(buf, *field("Input Dims"), only=code == schema.CPU_OP)
    doc = orjson.loads(data[:lo] + b"[]" + data[hi:])
    return out, doc, unmodelled, unmodelled_us

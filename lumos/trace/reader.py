"""Read a Kineto trace (.json or .json.gz, PyTorch 1.9 to 2.x schemas) into a TraceTable.

Only complete ('X') events of the categories in `schema.CATEGORY_CODES` are
kept; flows, instants, metadata and memory events are dropped after parsing,
because the correlation id on both ends already links a launch to its GPU op.

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

The scanner compiles in about 7 s the first time (cached in `__pycache__`).
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
from numba import njit

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
        arrays[c] = np.fromiter(cols[c], dtype=object, count=len(cols[c]))
    return _table(arrays, doc, path)


def _table(arrays: dict, doc: dict, path) -> TraceTable:
    dist = doc.get("distributedInfo") or {}
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    table = TraceTable(path=str(path), rank=_as_int(dist.get("rank"), 0),
                       world_size=_as_int(dist.get("world_size"), 1), metadata=meta, **arrays)
    if len(table) == 0:
        raise TraceError(path, "no CPU or GPU events of a known category")
    return table


# --- the scanner: bytes -> where each field's value lies --------------------------------------

# token types of a recorded value
T_ABSENT, T_NULL, T_INT, T_NUM, T_STR, T_STR_ESC, T_TRUE, T_FALSE, T_ARR, T_OBJ = range(10)
MAX_DEPTH = 256  # orjson refuses beyond 1024; nesting deeper than this is left to it

# recorded fields: the event's own, then those of its args (a field is at most one value)
EVENT_KEYS = ("cat", "name", "ts", "dur", "pid", "tid")
ARG_KEYS = ("correlation", "External id", "external id", "stream", "device", "wait_on_stream",
            "wait_on_cuda_event_record_corr_id", "In msg nelems", "Out msg nelems", "Group size",
            "cuda_sync_kind", "Collective name", "dtype", "Process Group Ranks", "Input Dims")
F = {k: i for i, k in enumerate(EVENT_KEYS + ARG_KEYS)}
N_FIELDS, N_EVENT = len(F), len(EVENT_KEYS)
I_FIRST = F["pid"]  # pid .. Group size hold integers: plain ones are read by the scanner
N_INT = F["Group size"] - I_FIRST + 1
K_PH, K_ARGS = -2, -3  # event keys the scanner acts on itself


def _key_table(keys: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    raw = [k.encode() for k in keys]
    table = np.zeros((len(raw), max(map(len, raw))), dtype=np.uint8)
    for i, k in enumerate(raw):
        table[i, :len(k)] = np.frombuffer(k, dtype=np.uint8)
    return table, np.array([len(k) for k in raw], dtype=np.int64)


# module constants (numba compiles them into the code; they only change with this file)
EVENT_TABLE, EVENT_LENS = _key_table(EVENT_KEYS + ("ph", "args"))
EVENT_IDS = np.array(list(range(N_EVENT)) + [K_PH, K_ARGS], dtype=np.int64)
ARG_TABLE, ARG_LENS = _key_table(ARG_KEYS)
TRACE_KEY = np.frombuffer(b"traceEvents", dtype=np.uint8)


@njit(cache=True)
def _skip_ws(buf, i, n):
    while i < n:
        c = buf[i]
        if c != 32 and c != 10 and c != 13 and c != 9:
            return i
        i += 1
    return i


@njit(cache=True)
def _hex4(buf, i, n):
    """The code unit of the \\uXXXX escape at i, or -1."""
    if i + 6 > n or buf[i] != 92 or buf[i + 1] != 117:
        return -1
    v = 0
    for k in range(i + 2, i + 6):
        h = buf[k]
        if 48 <= h <= 57:
            v = v * 16 + (h - 48)
        elif 97 <= h <= 102:
            v = v * 16 + (h - 87)
        elif 65 <= h <= 70:
            v = v * 16 + (h - 55)
        else:
            return -1
    return v


@njit(cache=True)
def _string_end(buf, i, n):
    """buf[i] is '"'. Returns (end, escaped); end -1 if invalid (as orjson would find it:
    raw control characters, bad escapes, unpaired surrogates)."""
    i += 1
    escaped = False
    while i < n:
        c = buf[i]
        if c == 34:
            return i + 1, escaped
        if c == 92:
            escaped = True
            if i + 1 >= n:
                return -1, escaped
            e = buf[i + 1]
            if e == 117:
                v = _hex4(buf, i, n)
                if v < 0 or 0xDC00 <= v <= 0xDFFF:
                    return -1, escaped
                if 0xD800 <= v <= 0xDBFF:  # a high surrogate needs its low half next
                    low = _hex4(buf, i + 6, n)
                    if not 0xDC00 <= low <= 0xDFFF:
                        return -1, escaped
                    i += 6
                i += 6
            elif e == 34 or e == 92 or e == 47 or e == 98 or e == 102 or e == 110 or e == 114 or e == 116:
                i += 2
            else:
                return -1, escaped
        elif c < 32:
            return -1, escaped
        else:
            i += 1
    return -1, escaped


@njit(cache=True)
def _number_end(buf, i, n):
    """A JSON number at i. Returns (end, is_plain_int, value); end -1 if invalid, or so
    long or large that orjson's verdict (a float, or an infinity error) is left to it."""
    neg = buf[i] == 45
    if neg:
        i += 1
    if i >= n:
        return -1, False, 0
    d0 = i
    if buf[i] == 48:
        i += 1
    elif 49 <= buf[i] <= 57:
        while i < n and 48 <= buf[i] <= 57:
            i += 1
    else:
        return -1, False, 0
    digits = i - d0
    plain = True
    if i < n and buf[i] == 46:
        i += 1
        f0 = i
        while i < n and 48 <= buf[i] <= 57:
            i += 1
        if i == f0 or i - f0 > 200:
            return -1, False, 0
        plain = False
    if i < n and (buf[i] == 101 or buf[i] == 69):
        i += 1
        negative_exp = i < n and buf[i] == 45
        if i < n and (buf[i] == 43 or buf[i] == 45):
            i += 1
        e0 = i
        exp = 0
        while i < n and 48 <= buf[i] <= 57:
            if exp < 10000:
                exp = exp * 10 + (buf[i] - 48)
            i += 1
        if i == e0 or (not negative_exp and exp + digits > 250):  # underflow is 0.0; overflow an error
            return -1, False, 0
        plain = False
    if digits > 200:
        return -1, False, 0
    value = 0
    if plain and digits <= 18:
        for k in range(d0, d0 + digits):
            value = value * 10 + (buf[k] - 48)
        if neg:
            value = -value
    else:
        plain = False
    return i, plain, value


@njit(cache=True)
def _literal_end(buf, i, n):
    """true, false or null at i: its end, or -1."""
    c = buf[i]
    if c == 116 and i + 4 <= n and buf[i + 1] == 114 and buf[i + 2] == 117 and buf[i + 3] == 101:
        return i + 4
    if c == 110 and i + 4 <= n and buf[i + 1] == 117 and buf[i + 2] == 108 and buf[i + 3] == 108:
        return i + 4
    if (c == 102 and i + 5 <= n and buf[i + 1] == 97 and buf[i + 2] == 108 and buf[i + 3] == 115
            and buf[i + 4] == 101):
        return i + 5
    return -1


@njit(cache=True)
def _scalar_end(buf, i, n):
    c = buf[i]
    if c == 34:
        e, _ = _string_end(buf, i, n)
        return e
    if c == 45 or 48 <= c <= 57:
        e, _, _ = _number_end(buf, i, n)
        return e
    return _literal_end(buf, i, n)


@njit(cache=True)
def _value_end(buf, i, n, stack):
    """Validate and skip any JSON value at i: its end, or -1 if invalid or too deep."""
    c = buf[i]
    if c != 123 and c != 91:
        return _scalar_end(buf, i, n)
    stack[0] = c
    sp = 1
    i += 1
    state = 0  # 0: just opened, 1: after a comma, 2: after a value
    while True:
        i = _skip_ws(buf, i, n)
        if i >= n:
            return -1
        c = buf[i]
        close = 125 if stack[sp - 1] == 123 else 93
        if state == 2 or (state == 0 and c == close):
            if c == 44 and state == 2:
                i += 1
                state = 1
                continue
            if c != close:
                return -1
            sp -= 1
            i += 1
            if sp == 0:
                return i
            state = 2
            continue
        if stack[sp - 1] == 123:  # a member: "key": value
            if c != 34:
                return -1
            e, _ = _string_end(buf, i, n)
            if e < 0:
                return -1
            i = _skip_ws(buf, e, n)
            if i >= n or buf[i] != 58:
                return -1
            i = _skip_ws(buf, i + 1, n)
            if i >= n:
                return -1
            c = buf[i]
        if c == 123 or c == 91:
            if sp >= len(stack):
                return -1
            stack[sp] = c
            sp += 1
            i += 1
            state = 0
            continue
        e = _scalar_end(buf, i, n)
        if e < 0:
            return -1
        i = e
        state = 2


@njit(cache=True)
def _key_id(buf, lo, hi, table, lens):
    """Row of the key buf[lo:hi] in `table`, or -1."""
    m = hi - lo
    for k in range(len(lens)):
        if lens[k] == m:
            same = True
            for j in range(m):
                if buf[lo + j] != table[k, j]:
                    same = False
                    break
            if same:
                return k
    return -1


@njit(cache=True)
def _member_key(buf, i, n):
    """At a member: (key_lo, key_hi, value_start); value_start -1 if invalid or the key is
    escaped (an escaped key might spell a field's name)."""
    if buf[i] != 34:
        return 0, 0, -1
    e, esc = _string_end(buf, i, n)
    if e < 0 or esc:
        return 0, 0, -1
    j = _skip_ws(buf, e, n)
    if j >= n or buf[j] != 58:
        return 0, 0, -1
    j = _skip_ws(buf, j + 1, n)
    if j >= n:
        return 0, 0, -1
    return i + 1, e - 1, j


@njit(cache=True)
def _after_member(buf, e, n):
    """After a member's value: (next index, 1 more members / 0 closed / -1 invalid)."""
    i = _skip_ws(buf, e, n)
    if i >= n:
        return i, -1
    if buf[i] == 44:
        return i + 1, 1
    if buf[i] == 125:
        return i + 1, 0
    return i, -1


@njit(cache=True)
def _args_members(buf, i, n, row, loc, stack):
    """Record the wanted members of the args object at i; its end, or -1."""
    for f in range(N_EVENT, N_FIELDS):  # a repeated "args" replaces the earlier one
        loc[row, f, 0] = -1
    i = _skip_ws(buf, i + 1, n)
    if i < n and buf[i] == 125:
        return i + 1
    while True:
        i = _skip_ws(buf, i, n)
        if i >= n:
            return -1
        klo, khi, j = _member_key(buf, i, n)
        if j < 0:
            return -1
        e = _value_end(buf, j, n, stack)
        if e < 0:
            return -1
        k = _key_id(buf, klo, khi, ARG_TABLE, ARG_LENS)
        if k >= 0:
            loc[row, N_EVENT + k, 0] = j
            loc[row, N_EVENT + k, 1] = e
        i, more = _after_member(buf, e, n)
        if more <= 0:
            return i if more == 0 else -1


@njit(cache=True)
def _event_members(buf, i, n, row, loc, stack):
    """Record the wanted members of the event object at i.
    Returns (end, is "ph": "X", args usable); end -1 if invalid or unsure."""
    for f in range(N_FIELDS):
        loc[row, f, 0] = -1
    ph_x = False
    args_ok = True
    i = _skip_ws(buf, i + 1, n)
    if i < n and buf[i] == 125:
        return i + 1, False, True
    while True:
        i = _skip_ws(buf, i, n)
        if i >= n:
            return -1, False, False
        klo, khi, j = _member_key(buf, i, n)
        if j < 0:
            return -1, False, False
        k = _key_id(buf, klo, khi, EVENT_TABLE, EVENT_LENS)
        kid = EVENT_IDS[k] if k >= 0 else -1
        if kid == K_ARGS and buf[j] == 123:
            e = _args_members(buf, j, n, row, loc, stack)
            args_ok = True
        else:
            e = _value_end(buf, j, n, stack)
            if kid >= 0:
                loc[row, kid, 0] = j
                loc[row, kid, 1] = e
            elif kid == K_PH and e >= 0:
                ph_x = e - j == 3 and buf[j] == 34 and buf[j + 1] == 88
                if buf[j] == 34 and not ph_x:
                    for p in range(j + 1, e - 1):
                        if buf[p] == 92:  # an escaped "ph" might read X
                            return -1, False, False
            elif kid == K_ARGS:  # not an object: null is no args, anything else is unusual
                for f in range(N_EVENT, N_FIELDS):
                    loc[row, f, 0] = -1
                args_ok = e - j == 4 and buf[j] == 110
        if e < 0:
            return -1, False, False
        i, more = _after_member(buf, e, n)
        if more < 0:
            return -1, False, False
        if more == 0:
            return i, ph_x, args_ok


@njit(cache=True)
def _scan(buf, cap):
    """Validate the whole document and record where the fields of every "ph": "X" event lie.

    Returns (ok, rows, loc, args_ok, events_lo, events_hi): loc[row, field] is the
    field's byte span (start -1: absent); events_lo:events_hi is the traceEvents array.
    """
    n = len(buf)
    stack = np.empty(MAX_DEPTH, dtype=np.uint8)
    loc = np.empty((cap + 1, N_FIELDS, 2), dtype=np.int64)  # one spare row for other events
    args_ok = np.empty(cap, dtype=np.bool_)
    rows = 0
    lo = hi = -1
    i = _skip_ws(buf, 0, n)
    if i >= n or buf[i] != 123:
        return False, 0, loc, args_ok, lo, hi
    i = _skip_ws(buf, i + 1, n)
    more = 1
    if i < n and buf[i] == 125:
        i += 1
        more = 0
    while more == 1:  # members of the top-level object
        i = _skip_ws(buf, i, n)
        if i >= n:
            return False, 0, loc, args_ok, lo, hi
        klo, khi, j = _member_key(buf, i, n)
        if j < 0:
            return False, 0, loc, args_ok, lo, hi
        trace = khi - klo == len(TRACE_KEY)
        for k in range(khi - klo):
            if trace and buf[klo + k] != TRACE_KEY[k]:
                trace = False
        if not trace:
            e = _value_end(buf, j, n, stack)
        else:
            if lo >= 0 or buf[j] != 91:  # repeated, or not a list: the plain path says so
                return False, 0, loc, args_ok, lo, hi
            lo = j
            i = _skip_ws(buf, j + 1, n)
            ev_more = 1
            if i < n and buf[i] == 93:
                i += 1
                ev_more = 0
            while ev_more == 1:  # the events
                i = _skip_ws(buf, i, n)
                if i >= n:
                    return False, 0, loc, args_ok, lo, hi
                if buf[i] == 123:
                    e, ph_x, ok = _event_members(buf, i, n, rows, loc, stack)
                    if ph_x and e >= 0:
                        if rows >= cap:
                            return False, 0, loc, args_ok, lo, hi
                        args_ok[rows] = ok
                        rows += 1
                else:
                    e = _value_end(buf, i, n, stack)
                if e < 0:
                    return False, 0, loc, args_ok, lo, hi
                i = _skip_ws(buf, e, n)
                if i < n and buf[i] == 44:
                    i += 1
                elif i < n and buf[i] == 93:
                    i += 1
                    ev_more = 0
                else:
                    return False, 0, loc, args_ok, lo, hi
            hi = i
            e = i
        if e < 0:
            return False, 0, loc, args_ok, lo, hi
        i, more = _after_member(buf, e, n)
        if more < 0:
            return False, 0, loc, args_ok, lo, hi
    if _skip_ws(buf, i, n) != n or lo < 0:
        return False, 0, loc, args_ok, lo, hi
    return True, rows, loc, args_ok, lo, hi


@njit(cache=True)
def _classify(buf, loc, rows):
    """Token type of every recorded value, and the value of plain integers."""
    typ = np.zeros((rows, N_FIELDS), dtype=np.int8)
    iv = np.zeros((rows, N_INT), dtype=np.int64)
    for r in range(rows):
        for f in range(N_FIELDS):
            i = loc[r, f, 0]
            if i < 0:
                continue
            c = buf[i]
            if c == 34:
                t = T_STR
                for p in range(i + 1, loc[r, f, 1] - 1):
                    if buf[p] == 92:
                        t = T_STR_ESC
                        break
            elif c == 45 or 48 <= c <= 57:
                _, plain, v = _number_end(buf, i, loc[r, f, 1])
                t = T_INT if plain else T_NUM
                if plain and I_FIRST <= f < I_FIRST + N_INT:
                    iv[r, f - I_FIRST] = v
            elif c == 116:
                t = T_TRUE
            elif c == 102:
                t = T_FALSE
            elif c == 110:
                t = T_NULL
            elif c == 91:
                t = T_ARR
            else:
                t = T_OBJ
            typ[r, f] = t
    return typ, iv


@njit(cache=True)
def _gather(buf, lo, hi, sep, bracket):
    """The byte spans buf[lo[k]:hi[k]] joined by `sep` (as one JSON array if `bracket`)."""
    total = 0
    for k in range(len(lo)):
        total += hi[k] - lo[k] + 1
    out = np.empty(total + 2, dtype=np.uint8)
    j = 0
    if bracket:
        out[0] = 91
        j = 1
    for k in range(len(lo)):
        if k:
            out[j] = sep
            j += 1
        for p in range(lo[k], hi[k]):
            out[j] = buf[p]
            j += 1
    if bracket:
        out[j] = 93
        j += 1
    return out[:j]


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


def _categories(buf, typ, st, en) -> np.ndarray:
    """Category code of each event (-1: not one Lumos uses), as `cat.lower()` reads it."""
    code = np.full(len(typ), -1, dtype=np.int8)
    strings = np.flatnonzero((typ == T_STR) | (typ == T_STR_ESC))
    names = _strings(buf, typ[strings], st[strings], en[strings])
    lookup = {c: schema.CATEGORY_CODES.get(c.lower(), -1) for c in set(names)}
    code[strings] = np.fromiter(map(lookup.__getitem__, names), dtype=np.int8, count=len(names))
    return code


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


def _scanned_columns(data: bytes) -> tuple[dict, dict]:
    """Columns of the kept events, and the document without its events (the metadata).
    Raises _Unusual where the plain path must decide."""
    buf = np.frombuffer(data, dtype=np.uint8)
    ok, rows, loc, args_ok, lo, hi = _scan(buf, data.count(b'"ph"'))  # every X event has a "ph" key
    if not ok:
        raise _Unusual
    _check_utf8(data)
    typ, iv = _classify(buf, loc, rows)
    st, en = loc[:rows, :, 0], loc[:rows, :, 1]
    f = F["cat"]
    code = _categories(buf, typ[:, f], st[:, f], en[:, f])
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
                     ("out_nelems", "Out msg nelems"), ("group_size", "Group size")):
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
    return out, doc


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
            arrays, doc = _scanned_columns(data)
        except _Unusual:
            pass
        else:
            return _table(arrays, doc, path)
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise TraceError(path, f"not valid JSON (truncated or corrupt?): {exc}") from None
        del data
        return parse_document(doc, path)

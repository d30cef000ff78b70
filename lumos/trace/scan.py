"""The compiled JSON scanner for Kineto traces: bytes -> where each needed field lies.

It validates the whole document and records, for each event, the byte range
and token type of every field `lumos.trace.reader` needs, without building a
Python object per event. The reader decodes those ranges column by column and
falls back to the plain orjson path for anything the scanner flags as unusual.
The scanning itself is C (`lumos/kernels/scan.c`, `json.h`; values nested deeper
than 256 levels are left to orjson, which refuses beyond 1024); this module holds
the fields it looks for, which the C code takes from here, and the calls.
"""

from __future__ import annotations

import numpy as np

from lumos import jit


# token types of a recorded value
T_ABSENT, T_NULL, T_INT, T_NUM, T_STR, T_STR_ESC, T_TRUE, T_FALSE, T_ARR, T_OBJ = range(10)

# recorded fields: the event's own, then those of its args (a field is at most one value)
EVENT_KEYS = ("cat", "name", "ts", "dur", "pid", "tid")
ARG_KEYS = ("correlation", "External id", "external id", "stream", "device", "wait_on_stream",
            "wait_on_cuda_event_record_corr_id", "In msg nelems", "Out msg nelems", "Group size", "Sequence number",
            "cuda_sync_kind", "Collective name", "dtype", "Process Group Ranks", "Input Dims",
            "Process Group Name")
F = {k: i for i, k in enumerate(EVENT_KEYS + ARG_KEYS)}
N_FIELDS, N_EVENT = len(F), len(EVENT_KEYS)
I_FIRST = F["pid"]  # pid .. Sequence number hold integers: plain ones are read by the scanner
N_INT = F["Sequence number"] - I_FIRST + 1
K_PH, K_ARGS = -2, -3  # event keys the scanner acts on itself


def _key_table(keys: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    raw = [k.encode() for k in keys]
    table = np.zeros((len(raw), max(map(len, raw))), dtype=np.uint8)
    for i, k in enumerate(raw):
        table[i, :len(k)] = np.frombuffer(k, dtype=np.uint8)
    return table, np.array([len(k) for k in raw], dtype=np.int64)


# the key tables the C scanner matches member names against
EVENT_TABLE, EVENT_LENS = _key_table(EVENT_KEYS + ("ph", "args"))
EVENT_IDS = np.array(list(range(N_EVENT)) + [K_PH, K_ARGS], dtype=np.int64)
ARG_TABLE, ARG_LENS = _key_table(ARG_KEYS)
TRACE_KEY = np.frombuffer(b"traceEvents", dtype=np.uint8)


def _scan(buf: np.ndarray, cap: int):
    """Validate the whole document and record where the fields of every "ph": "X" event lie
    (at most `cap` of them).

    Returns (ok, rows, loc, args_ok, events_lo, events_hi): loc[row, field] is the
    field's byte span (start -1: absent); events_lo:events_hi is the traceEvents array.
    """
    loc = np.empty((cap + 1, N_FIELDS, 2), dtype=np.int64)  # one spare row for other events
    args_ok = np.empty(cap, dtype=np.bool_)
    ok, rows, lo, hi = jit.kernels().scan(buf, cap, loc, args_ok, EVENT_TABLE, EVENT_LENS, EVENT_IDS, ARG_TABLE,
                                          ARG_LENS, TRACE_KEY, N_FIELDS, N_EVENT, K_PH, K_ARGS)
    return ok, rows, loc, args_ok, lo, hi


def _classify(buf: np.ndarray, loc: np.ndarray, rows: int):
    """Token type of every recorded value, and the value of plain integers."""
    typ = np.zeros((rows, N_FIELDS), dtype=np.int8)
    iv = np.zeros((rows, N_INT), dtype=np.int64)
    jit.kernels().classify(buf, loc, rows, typ, iv, I_FIRST)
    return typ, iv


def _gather(buf: np.ndarray, lo, hi, sep: int, bracket: bool) -> np.ndarray:
    """The byte spans buf[lo[k]:hi[k]] joined by `sep` (as one JSON array if `bracket`)."""
    lo = np.ascontiguousarray(lo, dtype=np.int64)
    hi = np.ascontiguousarray(hi, dtype=np.int64)
    out = np.empty(int((hi - lo).sum()) + len(lo) + 2, dtype=np.uint8)
    return out[:jit.kernels().gather(buf, lo, hi, sep, bool(bracket), out)]


def count_byte(buf: np.ndarray, byte: int) -> int:
    """How many times `byte` occurs in `buf` (one pass in C; `bytes.count` of a 4-byte pattern
    takes several times longer)."""
    return jit.kernels().count_byte(buf, byte)
